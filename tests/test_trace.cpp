// recorder.hpp, writer.hpp, reader.hpp: what ranks record, the Chrome Trace JSON
// written from it, and the loader's invariant checks — on a real run, and on hand-broken
// traces that each must be caught.
#include "catch.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/base/check.hpp"
#include "core/collectives/all_reduce_reduce_broadcast.hpp"
#include "core/runtime/data.hpp"
#include "core/trace/reader.hpp"
#include "core/trace/recorder.hpp"
#include "core/trace/writer.hpp"
#include "thread_world.hpp"

using namespace distlab;
using Catch::Contains;

namespace {

// Four thread ranks: a phase with a buffer in it, then an all-reduce (reduce + broadcast).
struct SmallRun {
  test::ThreadRun run;
  TraceInfo info;
  std::string json;
};

SmallRun small_run(bool verified = true) {
  SmallRun s;
  s.run = test::run_ranks(4, [](Comm& comm) {
    comm.declare_buffer("data", 64, 4);
    auto data = comm.alloc<float>(64, Category::grads);
    {
      auto p = comm.phase("fill");
      auto scratch = comm.alloc<float>(16, Category::activations);
      fill_input(data.view(), 1, comm.rank());
    }
    coll::all_reduce_reduce_broadcast(comm, data.view());
    comm.check("ran", true);
  });
  s.info.lesson = "99_unit";
  s.info.title = "unit test \"trace\"";
  s.info.algorithm = "reduce+broadcast";
  s.info.world.size = 4;
  s.info.world.ranks_per_node = 2;
  s.info.parameters = {{"size", "64"}, {"seed", "1"}};
  s.info.metadata = {{"extra", "{\"k\":[1,2]}"}};
  s.info.verified = verified;
  s.info.wall_seconds = 0.25;
  s.json = trace_json(s.info, s.run.logs);
  return s;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::size_t send_spans(const std::vector<RankLog>& logs) {
  std::size_t n = 0;
  for (const auto& log : logs)
    for (const auto& e : log.spans) n += e.kind == SpanEvent::Kind::send;
  return n;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace

TEST_CASE("trace: a real run writes a trace that parses back with every invariant holding",
          "[trace]") {
  const auto s = small_run();
  REQUIRE_FALSE(s.run.failed);
  const LoadedTrace t = parse_trace(s.json);
  const auto problems = check_invariants(t);
  INFO(joined(problems));
  CHECK(problems.empty());

  // otherData round-trips.
  CHECK(t.schema_version == kTraceSchemaVersion);
  CHECK(t.world_size == 4);
  CHECK(t.ranks_per_node == 2);  // the nodes (World::ranks_per_node), for the Topology panel
  CHECK(t.verified);
  CHECK(t.checks == 4);
  CHECK(t.lesson == "99_unit");
  CHECK(t.algorithm == "reduce+broadcast");
  CHECK(t.mode == "threads");
  CHECK(t.device == "cpu");
  CHECK(t.transport == "threads");
  auto named = t.named_pids;
  std::sort(named.begin(), named.end());
  CHECK(named == std::vector<int>{1, 2, 3, 4});

  const auto failed = parse_trace(small_run(false).json);
  CHECK_FALSE(failed.verified);
}

TEST_CASE("trace: event phases are only X s f C i M, and all of them appear", "[trace]") {
  const auto s = small_run();
  // Every key's value, as the text after `key` (the value's own quotes left out).
  const auto values_of = [&](const std::string& key, bool quoted) {
    std::vector<std::string> out;
    for (auto at = s.json.find(key); at != std::string::npos; at = s.json.find(key, at + 1)) {
      const auto from = at + key.size();
      out.push_back(s.json.substr(from, s.json.find_first_of(quoted ? "\"" : ",}", from) - from));
    }
    return out;
  };
  std::set<std::string> phases;
  for (const auto& ph : values_of("\"ph\":\"", true)) phases.insert(ph);
  CHECK(phases == std::set<std::string>{"C", "M", "X", "f", "i", "s"});
  // pids and tids are written as integers.
  std::vector<std::string> ids = values_of("\"pid\":", false);
  for (const auto& tid : values_of("\"tid\":", false)) ids.push_back(tid);
  CHECK(ids.size() > 10);
  for (const auto& id : ids) {
    INFO(id);
    CHECK((!id.empty() && id.find_first_not_of("0123456789") == std::string::npos));
  }
}

TEST_CASE("trace: one flow per message, bound to a deliver slice", "[trace]") {
  const auto s = small_run();
  const std::size_t messages = send_spans(s.run.logs);
  REQUIRE(messages == 6);  // reduce 3 + broadcast 3 on 4 ranks
  const LoadedTrace t = parse_trace(s.json);
  std::size_t starts = 0, finishes = 0;
  std::set<std::uint64_t> ids;
  for (const auto& f : t.flows) {
    (f.start ? starts : finishes) += 1;
    ids.insert(f.id);
  }
  CHECK(starts == messages);
  CHECK(finishes == messages);
  CHECK(ids.size() == messages);
  CHECK(count_of(s.json, R"("bp":"e")") == messages);
  CHECK(count_of(s.json, R"("messages":6)") == 1);

  std::size_t sends = 0, delivers = 0;
  for (const auto& sp : t.spans) {
    if (sp.cat == "send") {
      ++sends;
      CHECK(sp.msg > 0);
      CHECK(sp.step >= 1);
      CHECK(sp.bytes == 64 * 4);
    }
    if (sp.cat == "deliver") {
      ++delivers;
      CHECK(sp.msg > 0);
    }
  }
  CHECK(sends == messages);
  CHECK(delivers == messages);
  // Each finish lies inside its deliver slice (what "bp":"e" binds it to).
  for (const auto& f : t.flows) {
    if (f.start) continue;
    const auto d = std::find_if(t.spans.begin(), t.spans.end(), [&](const TraceSpan& sp) {
      return sp.cat == "deliver" && sp.msg == static_cast<std::int64_t>(f.id);
    });
    REQUIRE(d != t.spans.end());
    CHECK(d->pid == f.pid);
    CHECK(d->tid == f.tid);
    CHECK(f.ts >= d->ts - 5e-4);
    CHECK(f.ts <= d->ts + d->dur + 5e-4);
  }
}

TEST_CASE("trace: steps, counters and memory peaks reach the file", "[trace]") {
  const auto s = small_run();
  const LoadedTrace t = parse_trace(s.json);
  std::set<std::int64_t> steps;
  for (const auto& st : t.steps) steps.insert(st.step);
  CHECK(steps == std::set<std::int64_t>{1, 2, 3, 4, 5, 6});
  std::size_t counters = 0;
  for (const auto& log : s.run.logs) counters += log.counters.size();
  CHECK(t.counters.size() == counters);
  // Every rank peaks at 256 B of grads + 64 B of scratch = 320 B, except r0, the reduce's root:
  // 256 B of grads + its 256 B receive buffer (the scratch is gone by then) = 512 B.
  CHECK(count_of(s.json, R"({"rank":0,"total":512,)") == 1);
  CHECK(count_of(s.json, R"({"rank":1,"total":320,)") == 1);
  std::int64_t max_total = 0;
  for (const auto& c : t.counters)
    if (c.pid == 1) max_total = std::max(max_total, c.total_bytes);
  CHECK(max_total == 512);  // grads + comm at once (scratch was freed before the all-reduce)
}

TEST_CASE("trace: write_trace and load_trace go through a file", "[trace]") {
  const auto s = small_run();
  const auto dir =
      std::filesystem::temp_directory_path() / ("distlab_test_" + std::to_string(::getpid()));
  const std::string path = (dir / "sub" / "t.json").string();
  write_trace(path, s.info, s.run.logs);  // creates the directories
  const LoadedTrace t = load_trace(path);
  CHECK(t.world_size == 4);
  CHECK(check_invariants(t).empty());
  std::filesystem::remove_all(dir);
  CHECK_THROWS_WITH(load_trace(path), Contains(path));
}

TEST_CASE("trace: overlapping spans on one lane move to sub-lanes, nested ones stay", "[trace]") {
  RankLog log;
  log.rank = 0;
  log.t_start = 100;
  auto span = [](const char* name, double t0, double t1) {
    SpanEvent e;
    e.name = name;
    e.t0 = t0;
    e.t1 = t1;
    return e;
  };
  log.spans = {span("outer", 100, 110), span("inner", 102, 105), span("crossing", 108, 120)};
  TraceInfo info;
  info.world.size = 1;
  const LoadedTrace t = parse_trace(trace_json(info, {log}));
  INFO(joined(check_invariants(t)));
  CHECK(check_invariants(t).empty());
  std::map<std::string, int> tid;
  for (const auto& sp : t.spans) tid[sp.name] = sp.tid;
  CHECK(tid["outer"] == 1);
  CHECK(tid["inner"] == 1);
  CHECK(tid["crossing"] == 11);  // compute lane, second sub-lane
  // The epoch is the earliest start: times are relative to it.
  CHECK(std::min_element(t.spans.begin(), t.spans.end(), [](auto& a, auto& b) {
          return a.ts < b.ts;
        })->ts == 0.0);
}

TEST_CASE("trace: spans less than a nanosecond apart still nest once printed to the nanosecond",
          "[trace]") {
  // The trace prints times to the nanosecond. A span that starts a fraction of a nanosecond
  // after its neighbour ends (a receive's deliver slice after the previous wait, say) is
  // disjoint in the rank's clock but touches it once printed, and the reader adds ts and dur
  // in floating point: the writer must decide nesting on the printed times, so that what it
  // writes nests strictly whatever the sub-nanosecond digits were.
  RankLog log;
  log.rank = 0;
  log.t_start = 0;
  std::uint32_t x = 12345;
  auto next = [&] {  // a small LCG: fractions of a nanosecond, spread over the digits
    x = x * 1664525u + 1013904223u;
    return static_cast<double>(x >> 8) / static_cast<double>(1u << 24);
  };
  double t = 1000;
  for (int i = 0; i < 2000; ++i) {
    SpanEvent a;
    a.name = "a";
    a.t0 = t;
    a.t1 = t + 0.5 + next();  // ends somewhere inside a nanosecond
    SpanEvent b;
    b.name = "b";
    b.t0 = a.t1 + next() * 9e-4;  // starts less than a nanosecond after it
    b.t1 = b.t0 + 0.3 + next();
    t = b.t1 + next() * 9e-4;
    log.spans.push_back(a);
    log.spans.push_back(b);
  }
  TraceInfo info;
  info.world.size = 1;
  const auto problems = check_invariants(parse_trace(trace_json(info, {log})));
  INFO(joined(problems));
  CHECK(problems.empty());
}

TEST_CASE("trace: a RankLog survives serialize and deserialize", "[trace]") {
  auto s = small_run();
  RankLog log = s.run.logs[0];
  log.host = "node-7";
  log.clock_offset_us = -12.5;
  log.clock_error_us = 0.75;
  log.checks.push_back({"a check", false, "with detail"});
  REQUIRE_FALSE(log.spans.empty());
  REQUIRE_FALSE(log.counters.empty());
  REQUIRE_FALSE(log.steps.empty());
  REQUIRE_FALSE(log.buffers.empty());
  log.spans[0].meta.contrib_mask = 0xf00000000000000full;
  log.spans[0].meta.buffer = "grads";
  log.values.push_back({17.25, "loss", 0.125});

  const RankLog back = deserialize(serialize(log));
  REQUIRE(back.values.size() == 1);
  CHECK(back.values[0].ts == 17.25);
  CHECK(back.values[0].name == "loss");
  CHECK(back.values[0].value == 0.125);
  CHECK(back.rank == log.rank);
  CHECK(back.host == "node-7");
  CHECK(back.clock_offset_us == -12.5);
  CHECK(back.clock_error_us == 0.75);
  CHECK(back.t_start == log.t_start);
  CHECK(back.t_end == log.t_end);
  REQUIRE(back.spans.size() == log.spans.size());
  for (std::size_t i = 0; i < log.spans.size(); ++i) {
    const auto &a = log.spans[i], &b = back.spans[i];
    CHECK(b.kind == a.kind);
    CHECK(b.lane == a.lane);
    CHECK(b.name == a.name);
    CHECK(b.t0 == a.t0);
    CHECK(b.t1 == a.t1);
    CHECK(b.peer == a.peer);
    CHECK(b.tag == a.tag);
    CHECK(b.bytes == a.bytes);
    CHECK(b.seq == a.seq);
    CHECK(b.meta.step == a.meta.step);
    CHECK(b.meta.buffer == a.meta.buffer);
    CHECK(b.meta.chunk_begin == a.meta.chunk_begin);
    CHECK(b.meta.chunk_end == a.meta.chunk_end);
    CHECK(b.meta.apply == a.meta.apply);
    CHECK(b.meta.contributions == a.meta.contributions);
    CHECK(b.meta.contrib_mask == a.meta.contrib_mask);
  }
  REQUIRE(back.counters.size() == log.counters.size());
  for (std::size_t i = 0; i < log.counters.size(); ++i) {
    CHECK(back.counters[i].ts == log.counters[i].ts);
    CHECK(back.counters[i].bytes == log.counters[i].bytes);
  }
  REQUIRE(back.steps.size() == log.steps.size());
  for (std::size_t i = 0; i < log.steps.size(); ++i) {
    CHECK(back.steps[i].step == log.steps[i].step);
    CHECK(back.steps[i].ts == log.steps[i].ts);
  }
  REQUIRE(back.checks.size() == log.checks.size());
  CHECK(back.checks.back().name == "a check");
  CHECK_FALSE(back.checks.back().ok);
  CHECK(back.checks.back().detail == "with detail");
  CHECK(back.checks.front().ok);
  REQUIRE(back.buffers.size() == 1);
  CHECK(back.buffers[0].name == "data");
  CHECK(back.buffers[0].length == 64);
  CHECK(back.buffers[0].chunks == 4);
  CHECK(back.peak == log.peak);
  CHECK(back.peak_total == log.peak_total);
  CHECK(back.peak_total > 0);
}

TEST_CASE("trace: a lesson's values are counter tracks of their own, apart from memory",
          "[trace]") {
  RankLog log;
  log.rank = 0;
  log.counters.push_back({1.0, {100, 0, 0, 0, 0, 0}});
  log.values = {
      {2.0, "loss", 0.5}, {3.0, "loss", 0.25}, {4.0, "loss", std::nan("")}};  // NaN: left out
  TraceInfo info;
  info.world.size = 1;
  const std::string json = trace_json(info, {log});
  const LoadedTrace t = parse_trace(json);
  INFO(joined(check_invariants(t)));
  CHECK(check_invariants(t).empty());
  REQUIRE(t.counters.size() == 1);  // memory only
  CHECK(t.counters[0].total_bytes == 100);
  REQUIRE(t.values.size() == 2);
  CHECK(t.values[0].name == "loss");
  CHECK(t.values[0].value == 0.5);
  CHECK(t.values[1].value == 0.25);
  CHECK(t.values[1].pid == 1);
  CHECK(json.find("nan") == std::string::npos);
}

TEST_CASE("trace: a truncated RankLog is an error, not garbage", "[trace]") {
  auto s = small_run();
  auto bytes = serialize(s.run.logs[1]);
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
    std::vector<char> part(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    CHECK_THROWS_WITH(deserialize(part), Contains("truncated"));
  }
}

TEST_CASE("trace: parse_trace refuses what is not a distlab trace", "[trace]") {
  CHECK_THROWS_WITH(parse_trace("{not json"), Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_trace(R"({"traceEvents":[]})"), Contains("not a distlab trace"));
  CHECK_THROWS_WITH(parse_trace(R"({"traceEvents":[],"otherData":{"schema_version":99}})"),
                    Contains("newer"));
  CHECK_THROWS_WITH(parse_trace(R"({"otherData":{"schema_version":1}})"),
                    Contains("no traceEvents"));
}

// --- hand-written traces: one good, then each rule broken once ------------------------------

namespace {

// Two ranks; one message r0 -> r1 (flow 1); nested compute spans on r0; a counter; a step.
const std::string kGood = R"({"traceEvents":[
{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"rank 0"}},
{"ph":"M","name":"process_name","pid":2,"tid":0,"args":{"name":"rank 1"}},
{"ph":"X","name":"send","cat":"send","pid":1,"tid":2,"ts":1.000,"dur":4.000,"args":{"peer":1,"bytes":64,"tag":0,"step":1,"msg":1}},
{"ph":"s","name":"message","cat":"message","id":1,"pid":1,"tid":2,"ts":1.000},
{"ph":"X","name":"recv","cat":"recv","pid":2,"tid":3,"ts":0.500,"dur":5.000,"args":{"peer":0,"bytes":64,"tag":0,"step":1}},
{"ph":"X","name":"deliver","cat":"deliver","pid":2,"tid":3,"ts":5.000,"dur":0.500,"args":{"peer":0,"bytes":64,"tag":0,"step":1,"msg":1}},
{"ph":"f","bp":"e","name":"message","cat":"message","id":1,"pid":2,"tid":3,"ts":5.000},
{"ph":"X","name":"work","cat":"compute","pid":1,"tid":1,"ts":6.000,"dur":3.000},
{"ph":"X","name":"inner","cat":"compute","pid":1,"tid":1,"ts":7.000,"dur":1.000},
{"ph":"C","name":"memory","pid":1,"tid":0,"ts":0.000,"args":{"params_bytes":0,"total_bytes":0}},
{"ph":"i","s":"g","name":"step frame","pid":1,"tid":0,"ts":1.000,"args":{"step":1}}
],
"displayTimeUnit":"ns",
"otherData":{"schema":"distlab-trace","schema_version":1,"lesson":"hand","world_size":2,"mode":"threads","device":"cpu","transport":"threads","verification":{"verified":true,"checks":1,"failed":[]}}}
)";

// kGood with `from` replaced by `to` (which must be there exactly once).
std::string broken(const std::string& from, const std::string& to) {
  REQUIRE(count_of(kGood, from) == 1);
  std::string s = kGood;
  s.replace(s.find(from), from.size(), to);
  return s;
}

std::string problems_of(const std::string& json) {
  return joined(check_invariants(parse_trace(json)));
}

const std::string kWorkSpan =
    R"({"ph":"X","name":"work","cat":"compute","pid":1,"tid":1,"ts":6.000,"dur":3.000},)";
const std::string kInnerSpan =
    R"({"ph":"X","name":"inner","cat":"compute","pid":1,"tid":1,"ts":7.000,"dur":1.000},)";
const std::string kFlowStart =
    R"({"ph":"s","name":"message","cat":"message","id":1,"pid":1,"tid":2,"ts":1.000},)";
const std::string kFlowFinish =
    R"({"ph":"f","bp":"e","name":"message","cat":"message","id":1,"pid":2,"tid":3,"ts":5.000},)";

}  // namespace

TEST_CASE("trace invariants: the hand-written trace is good", "[trace][invariants]") {
  const LoadedTrace t = parse_trace(kGood);
  CHECK(check_invariants(t).empty());
  CHECK(t.spans.size() == 5);
  CHECK(t.flows.size() == 2);
  CHECK(t.counters.size() == 1);
  CHECK(t.steps.size() == 1);
}

TEST_CASE("trace invariants: a negative duration", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(R"("ts":6.000,"dur":3.000)", R"("ts":6.000,"dur":-3.000)")),
             Contains("span 'work' on pid 1 has a negative duration"));
}

TEST_CASE("trace invariants: a negative timestamp", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(R"("ts":0.500,"dur":5.000)", R"("ts":-0.500,"dur":5.000)")),
             Contains("span 'recv' on pid 2 starts before the epoch"));
}

TEST_CASE("trace invariants: a flow start without its finish", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(kFlowFinish, "")), Contains("flow 1 (from pid 1) has no finish"));
}

TEST_CASE("trace invariants: a flow finish without its start", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(kFlowStart, "")), Contains("flow 1 (to pid 2) has no start"));
}

TEST_CASE("trace invariants: a flow that arrives before it was sent", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(R"("id":1,"pid":2,"tid":3,"ts":5.000)",
                                R"("id":1,"pid":2,"tid":3,"ts":0.900)")),
             Contains("flow 1 arrives at 0.900 us, before it was sent at 1.000 us"));
}

TEST_CASE("trace invariants: a flow with two starts", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(kFlowStart, kFlowStart + kFlowStart)),
             Contains("flow 1 has more than one start"));
}

TEST_CASE("trace invariants: a flow finish not bound with bp:e", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(R"("ph":"f","bp":"e")", R"("ph":"f")")), Contains("bp:e"));
}

TEST_CASE("trace invariants: a span pid outside 1..N", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(R"("name":"work","cat":"compute","pid":1)",
                                R"("name":"work","cat":"compute","pid":3)")),
             Contains("a span has pid 3 outside 1..2"));
  CHECK_THAT(problems_of(broken(R"("pid":2,"tid":0,"args":{"name":"rank 1"})",
                                R"("pid":0,"tid":0,"args":{"name":"rank 1"})")),
             Contains("pid 0 is outside 1..2") && Contains("rank 1 (pid 2) has no process_name"));
}

TEST_CASE("trace invariants: counter, flow and step events with a pid outside 1..N",
          "[trace][invariants]") {
  // The header's rule is "pids are 1..world_size": it holds for every event, not only spans.
  CHECK_THAT(problems_of(broken(R"("ph":"C","name":"memory","pid":1)",
                                R"("ph":"C","name":"memory","pid":9)")),
             Contains("pid 9"));
  CHECK_THAT(problems_of(broken(R"("id":1,"pid":1,"tid":2,"ts":1.000)",
                                R"("id":1,"pid":9,"tid":2,"ts":1.000)")),
             Contains("pid 9"));
  CHECK_THAT(
      problems_of(broken(R"("name":"step frame","pid":1)", R"("name":"step frame","pid":9)")),
      Contains("pid 9"));
}

TEST_CASE("trace invariants: a missing process name", "[trace][invariants]") {
  CHECK_THAT(
      problems_of(broken(
          R"({"ph":"M","name":"process_name","pid":2,"tid":0,"args":{"name":"rank 1"}},)", "")),
      Contains("rank 1 (pid 2) has no process_name"));
}

TEST_CASE("trace invariants: a partial overlap on one lane", "[trace][invariants]") {
  CHECK_THAT(
      problems_of(broken(R"("ts":7.000,"dur":1.000)", R"("ts":7.000,"dur":5.000)")),
      Contains("pid 1 tid 1: span 'inner' at 7.000 us overlaps its neighbour without nesting"));
}

TEST_CASE("trace invariants: spans on one lane out of order", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(kWorkSpan + "\n" + kInnerSpan, kInnerSpan + "\n" + kWorkSpan)),
             Contains("pid 1 tid 1: span 'work' at 6.000 us is written after a later one"));
}

TEST_CASE("trace invariants: an unknown phase 'B'", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(
                 kWorkSpan, kWorkSpan + R"({"ph":"B","name":"begin","pid":1,"tid":1,"ts":6.5},)")),
             Contains("event phase 'B' is not one of X, s, f, C, i, M"));
}

TEST_CASE("trace invariants: a pid that is not an integer", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(R"("ph":"C","name":"memory","pid":1)",
                                R"("ph":"C","name":"memory","pid":"1")")),
             Contains("a 'C' event has no integer pid and tid"));
  CHECK_THAT(problems_of(broken(R"("name":"work","cat":"compute","pid":1)",
                                R"("name":"work","cat":"compute","pid":1.5)")),
             Contains("a 'X' event has no integer pid and tid"));
}

TEST_CASE("trace invariants: different bytes at the sender and the receiver",
          "[trace][invariants]") {
  CHECK_THAT(problems_of(broken(R"("bytes":64,"tag":0,"step":1,"msg":1}},
{"ph":"f")",
                                R"("bytes":32,"tag":0,"step":1,"msg":1}},
{"ph":"f")")),
             Contains("message 1 has 64 B at the sender and 32 B at the receiver"));
}

// --- schema 3: what Perfetto and chrome://tracing need (docs/trace-format.md) ----------------

namespace {

// One message r0 -> r1 as the writer writes it from schema 3 on: the flow leaves a short post
// slice at the send's start and lands on the deliver slice, here over the same interval as its
// receive (the receive first, its parent); the memory counter without its total; each rank's
// own step instant; the flat top-level metadata.
const std::string kGood3 = R"({"traceEvents":[
{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"rank 0"}},
{"ph":"M","name":"process_name","pid":2,"tid":0,"args":{"name":"rank 1"}},
{"ph":"X","name":"send","cat":"send","pid":1,"tid":2,"ts":1.000,"dur":4.500,"args":{"peer":1,"bytes":64,"tag":0,"step":1,"msg":1}},
{"ph":"X","name":"post","cat":"post","pid":1,"tid":2,"ts":1.000,"dur":0.100,"args":{"msg":1}},
{"ph":"s","name":"message","cat":"message","id":1,"pid":1,"tid":2,"ts":1.000},
{"ph":"X","name":"recv","cat":"recv","pid":2,"tid":3,"ts":5.000,"dur":0.500,"args":{"peer":0,"bytes":64,"tag":0,"step":1}},
{"ph":"X","name":"deliver","cat":"deliver","pid":2,"tid":3,"ts":5.000,"dur":0.500,"args":{"peer":0,"bytes":64,"tag":0,"step":1,"msg":1}},
{"ph":"f","bp":"e","name":"message","cat":"message","id":1,"pid":2,"tid":3,"ts":5.000},
{"ph":"C","name":"memory","pid":1,"tid":0,"ts":0.000,"args":{"params_bytes":8,"grads_bytes":4}},
{"ph":"C","name":"memory total","pid":1,"tid":0,"ts":0.000,"args":{"bytes":12}},
{"ph":"i","s":"p","name":"step","pid":1,"tid":0,"ts":1.000,"args":{"step":1}},
{"ph":"i","s":"p","name":"step","pid":2,"tid":0,"ts":5.000,"args":{"step":1}},
{"ph":"i","s":"g","name":"step frame","pid":1,"tid":0,"ts":1.000,"args":{"step":1}}
],
"displayTimeUnit":"ns",
"otherData":{"schema":"distlab-trace","schema_version":3,"lesson":"hand","world_size":2,"mode":"threads","device":"cpu","transport":"threads","verification":{"verified":true,"checks":1,"failed":[]}},
"metadata":{"schema":"distlab-trace","schema_version":3,"lesson":"hand","world_size":2,"verified":true,"checks":1}}
)";

const std::string kPostSlice =
    R"({"ph":"X","name":"post","cat":"post","pid":1,"tid":2,"ts":1.000,"dur":0.100,"args":{"msg":1}},)";
const std::string kRecvThenDeliver =
    R"({"ph":"X","name":"recv","cat":"recv","pid":2,"tid":3,"ts":5.000,"dur":0.500,"args":{"peer":0,"bytes":64,"tag":0,"step":1}},
{"ph":"X","name":"deliver","cat":"deliver","pid":2,"tid":3,"ts":5.000,"dur":0.500,"args":{"peer":0,"bytes":64,"tag":0,"step":1,"msg":1}},)";
const std::string kDeliverThenRecv =
    R"({"ph":"X","name":"deliver","cat":"deliver","pid":2,"tid":3,"ts":5.000,"dur":0.500,"args":{"peer":0,"bytes":64,"tag":0,"step":1,"msg":1}},
{"ph":"X","name":"recv","cat":"recv","pid":2,"tid":3,"ts":5.000,"dur":0.500,"args":{"peer":0,"bytes":64,"tag":0,"step":1}},)";

std::string broken3(const std::string& from, const std::string& to) {
  REQUIRE(count_of(kGood3, from) == 1);
  std::string s = kGood3;
  s.replace(s.find(from), from.size(), to);
  return s;
}

// The slice a flow event binds to in Perfetto: the deepest one enclosing its ts on its
// pid/tid, that is the latest to start, then the shortest, then the last written (its sorter
// puts slices before flow events at one ts, longest first; reader.cpp computes the same with
// a sweep for check_invariants).
const TraceSpan* bound_slice(const LoadedTrace& t, const TraceFlow& f) {
  const TraceSpan* best = nullptr;
  for (const auto& s : t.spans) {
    if (s.pid != f.pid || s.tid != f.tid) continue;
    if (s.ts > f.ts || s.ts + s.dur <= f.ts + 5e-4) continue;
    if (!best || std::tie(s.ts, best->dur, s.index) > std::tie(best->ts, s.dur, best->index))
      best = &s;
  }
  return best;
}

}  // namespace

TEST_CASE("trace invariants (schema 3): the hand-written trace is good", "[trace][invariants]") {
  const LoadedTrace t = parse_trace(kGood3);
  INFO(joined(check_invariants(t)));
  CHECK(check_invariants(t).empty());
  REQUIRE(t.counters.size() == 1);
  CHECK(t.counters[0].total_bytes == 12);  // derived from the parts
  CHECK_FALSE(t.counters[0].total_arg);
  CHECK(t.values.empty());  // "memory total" is the ledger's, not a lesson's value
  CHECK(t.steps.size() == 1);
  CHECK(t.rank_steps.size() == 2);
  CHECK(t.has_metadata);
  // A trace before schema 3 is not held to these rules: its arrows may run backwards.
  std::string v2 = broken3(kPostSlice, "");
  const std::string version = R"("schema_version":3,"lesson":"hand","world_size":2,"mode")";
  v2.replace(v2.find(version), version.size(),
             R"("schema_version":2,"lesson":"hand","world_size":2,"mode")");
  CHECK(problems_of(v2) == "");
  CHECK(problems_of(broken3(kPostSlice, "")) != "");
}

TEST_CASE("trace invariants (schema 3): a flow start bound to the whole send runs backwards",
          "[trace][invariants]") {
  // Without its post slice the 's' binds to the send span, which ends (5.5 us) after the
  // deliver slice starts (5 us): Perfetto would draw the arrow backwards in time.
  CHECK_THAT(problems_of(broken3(kPostSlice, "")),
             Contains("flow 1 runs backwards in time: its start's slice 'send' ends at 5.500 us, "
                      "after its finish's slice 'deliver' starts at 5.000 us"));
}

TEST_CASE("trace invariants (schema 3): a flow finish bound to the receive, not its deliver",
          "[trace][invariants]") {
  CHECK_THAT(problems_of(broken3(kRecvThenDeliver, kDeliverThenRecv)),
             Contains("flow 1's finish at 5.000 us on pid 2 tid 3 binds to 'recv' (message 0), "
                      "not to its message's deliver slice"));
}

TEST_CASE("trace invariants (schema 3): a flow start bound to no slice", "[trace][invariants]") {
  CHECK_THAT(problems_of(broken3(R"("id":1,"pid":1,"tid":2,"ts":1.000)",
                                 R"("id":1,"pid":1,"tid":2,"ts":0.500)")),
             Contains("flow 1's start at 0.500 us on pid 1 tid 2 binds to no slice"));
}

TEST_CASE("trace invariants (schema 3): a total stacked on the memory counter's parts",
          "[trace][invariants]") {
  CHECK_THAT(problems_of(broken3(R"("grads_bytes":4})", R"("grads_bytes":4,"total_bytes":12})")),
             Contains("the memory counter on pid 1 carries total_bytes"));
}

TEST_CASE("trace invariants (schema 3): the top-level metadata", "[trace][invariants]") {
  const std::string meta =
      R"("metadata":{"schema":"distlab-trace","schema_version":3,"lesson":"hand","world_size":2,"verified":true,"checks":1})";
  CHECK_THAT(problems_of(broken3(",\n" + meta, "")), Contains("no top-level \"metadata\" object"));
  CHECK_THAT(problems_of(broken3(R"("checks":1})",
                                 R"("checks":1,"clock-domain":"LINUX_CLOCK_MONOTONIC"})")),
             Contains("reserved key 'clock-domain'"));
  CHECK_THAT(problems_of(broken3(R"("checks":1})", R"("checks":1,"highres-ticks":true})")),
             Contains("reserved key 'highres-ticks'"));
  CHECK_THAT(problems_of(broken3(R"("checks":1})", R"("checks":1,"steps":[1,2]})")),
             Contains("\"metadata\" holds an array or object"));
}

TEST_CASE("trace invariants (schema 3): a rank without its own step instants",
          "[trace][invariants]") {
  CHECK_THAT(
      problems_of(broken3(
          R"({"ph":"i","s":"p","name":"step","pid":2,"tid":0,"ts":5.000,"args":{"step":1}},)", "")),
      Contains("pid 2 has no step instant of its own (\"s\":\"p\") for step 1 at or before its "
               "'recv' at 5.000 us"));
  // One after the span it should mark is no better.
  CHECK_THAT(problems_of(broken3(R"("pid":2,"tid":0,"ts":5.000,"args":{"step":1})",
                                 R"("pid":2,"tid":0,"ts":5.200,"args":{"step":1})")),
             Contains("pid 2 has no step instant of its own"));
}

TEST_CASE(
    "trace (schema 3): each flow leaves a post slice and lands on its deliver slice, "
    "forward in time, at the slices' own printed times",
    "[trace]") {
  const auto s = small_run();
  const LoadedTrace t = parse_trace(s.json);
  INFO(joined(check_invariants(t)));
  CHECK(check_invariants(t).empty());
  std::size_t posts = 0;
  for (const auto& sp : t.spans) posts += sp.cat == "post";
  CHECK(posts == send_spans(s.run.logs));
  for (const auto& f : t.flows) {
    const TraceSpan* b = bound_slice(t, f);
    REQUIRE(b);
    CHECK(b->msg == static_cast<std::int64_t>(f.id));
    CHECK(b->cat == (f.start ? "post" : "deliver"));
    CHECK(b->ts == f.ts);  // the same printed number: the same rounding
    if (f.start) {         // the post slice starts with its send
      const auto send = std::find_if(t.spans.begin(), t.spans.end(), [&](const TraceSpan& sp) {
        return sp.cat == "send" && sp.msg == static_cast<std::int64_t>(f.id);
      });
      REQUIRE(send != t.spans.end());
      CHECK(send->ts == f.ts);
      CHECK(send->tid == f.tid);
      CHECK(b->dur > 0);
      CHECK(b->dur <= send->dur + 5e-4);
    }
  }
}

namespace {

// A message from rank 0 to rank 1 (tag, seq): its send span [s0, s1] on the send lane and its
// receive span [r0, r1] on the receive lane.
std::pair<SpanEvent, SpanEvent> message_spans(int tag, std::uint64_t seq, double s0, double s1,
                                              double r0, double r1) {
  SpanEvent send;
  send.kind = SpanEvent::Kind::send;
  send.lane = Lane::send;
  send.name = "send";
  send.peer = 1;
  send.tag = tag;
  send.seq = seq;
  send.bytes = 8;
  send.t0 = s0;
  send.t1 = s1;
  SpanEvent recv = send;
  recv.kind = SpanEvent::Kind::recv;
  recv.lane = Lane::recv;
  recv.name = "recv";
  recv.peer = 0;
  recv.t0 = r0;
  recv.t1 = r1;
  return {send, recv};
}

// The trace of rank 0 sending `messages` (message_spans) to rank 1, written, read back and held
// to the reader's invariants.
LoadedTrace messages_trace(const std::vector<std::pair<SpanEvent, SpanEvent>>& messages) {
  RankLog a, b;
  a.rank = 0;
  b.rank = 1;
  for (const auto& [send, recv] : messages) {
    a.spans.push_back(send);
    b.spans.push_back(recv);
  }
  TraceInfo info;
  info.world.size = 2;
  LoadedTrace t = parse_trace(trace_json(info, {a, b}));
  INFO(joined(check_invariants(t)));
  CHECK(check_invariants(t).empty());
  return t;
}

}  // namespace

TEST_CASE(
    "trace (schema 3): a receive and its deliver slice over one interval are written "
    "receive first, so the flow binds to the deliver slice",
    "[trace]") {
  // 300 receives of 0.3 us (shorter than a deliver slice's 0.5 us), each posted after its
  // send: every deliver slice covers its whole receive. Enough ties for std::sort (introsort
  // past 16 elements) to write some of them deliver first.
  std::vector<std::pair<SpanEvent, SpanEvent>> messages;
  for (int i = 0; i < 300; ++i) {
    const double t = 10.0 * i;
    messages.push_back(message_spans(7, static_cast<std::uint64_t>(i), t, t + 5, t + 1, t + 1.3));
  }
  const LoadedTrace t = messages_trace(messages);
  std::size_t ties = 0;
  std::map<std::int64_t, const TraceSpan*> recv_at;
  for (const auto& sp : t.spans)
    if (sp.cat == "recv") recv_at[static_cast<std::int64_t>(std::llround(sp.ts * 1e3))] = &sp;
  for (const auto& sp : t.spans) {
    if (sp.cat != "deliver") continue;
    auto it = recv_at.find(static_cast<std::int64_t>(std::llround(sp.ts * 1e3)));
    REQUIRE(it != recv_at.end());
    if (it->second->dur != sp.dur) continue;
    ++ties;
    CHECK(it->second->index < sp.index);  // the receive, the parent, first
  }
  CHECK(ties == 300);
}

TEST_CASE(
    "trace (schema 3): a receive that ends in the nanosecond it began still gets a deliver "
    "slice of its own for its flow, inside another receive's",
    "[trace]") {
  // Two receives on one lane: a long one whose deliver slice covers 5.5-6 us, and one posted
  // and done at 5.7 us (its message was already there), at a moment inside that deliver slice.
  // Printed with no length, the second's flow would bind to the first's deliver slice.
  const LoadedTrace t = messages_trace(
      {message_spans(0, 0, 1.0, 1.5, 0.5, 6.0), message_spans(1, 0, 2.0, 2.5, 5.7, 5.7)});
  int delivers = 0;
  for (const auto& sp : t.spans) delivers += sp.cat == "deliver" && sp.dur > 0;
  CHECK(delivers == 2);
}

TEST_CASE(
    "trace (schema 3): no slice nests in another message's post or deliver slice, so two "
    "receives posted in one nanosecond keep their own flows",
    "[trace]") {
  // Two receives posted at 5 us, both done within a deliver slice's 0.5 us: each deliver slice
  // covers its whole receive and starts at 5 us. Nested, the shorter receive's deliver slice
  // would be the deepest slice at 5 us, and the longer one's flow would bind to it. The same
  // for two sends posted at once and their post slices.
  const LoadedTrace t = messages_trace(
      {message_spans(0, 0, 1.0, 1.5, 5.0, 5.4), message_spans(1, 0, 2.0, 2.5, 5.0, 5.3),
       message_spans(2, 0, 8.0, 8.4, 9.0, 9.5), message_spans(3, 0, 8.0, 8.3, 9.0, 9.6)});
  for (const auto& f : t.flows) {
    const TraceSpan* b = bound_slice(t, f);
    REQUIRE(b);
    CHECK(b->msg == static_cast<std::int64_t>(f.id));
    CHECK(b->cat == (f.start ? "post" : "deliver"));
  }
}

TEST_CASE(
    "trace (schema 3): memory parts in one counter, the total in another, a flat "
    "metadata object, each rank's own steps",
    "[trace]") {
  const auto s = small_run();
  const LoadedTrace t = parse_trace(s.json);
  CHECK(s.json.find("total_bytes") == std::string::npos);
  std::size_t counters = 0;
  for (const auto& log : s.run.logs) counters += log.counters.size();
  CHECK(count_of(s.json, R"("ph":"C","name":"memory total")") == counters);
  CHECK(count_of(s.json, R"("ph":"C","name":"memory",)") == counters);

  REQUIRE(t.has_metadata);
  CHECK(t.metadata_flat);
  const std::set<std::string> keys(t.metadata_keys.begin(), t.metadata_keys.end());
  for (const char* k : {"lesson", "title", "algorithm", "world_size", "schema", "schema_version",
                        "verified", "checks", "wall_seconds"})
    CHECK(keys.count(k) == 1);
  CHECK(count_of(s.json, R"("metadata":{"schema":"distlab-trace","schema_version":)" +
                             std::to_string(kTraceSchemaVersion) + R"(,"lesson":"99_unit",)") == 1);

  // Every rank takes part in the reduce and the broadcast: each has its own instants, and the
  // global frames are still one per step.
  std::set<int> pids;
  for (const auto& st : t.rank_steps) pids.insert(st.pid);
  CHECK(pids == std::set<int>{1, 2, 3, 4});
  CHECK(t.steps.size() == 6);
}

TEST_CASE("trace: every committed example trace holds every invariant of its schema",
          "[trace][examples]") {
  // Examples written before schema 3 are held to the rules of their time; regenerated ones
  // (scripts/make-examples.sh) to the rules above as well.
  int seen = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(DISTLAB_SOURCE_DIR) + "/traces/examples")) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path().string());
    const LoadedTrace t = load_trace(entry.path().string());
    const auto problems = check_invariants(t);
    INFO(joined(problems));
    CHECK(problems.empty());
    ++seen;
  }
  CHECK(seen >= 13);
}

namespace {

// Three ranks on two hosts whose clocks differ by 1000 us (host b's + 1000 = host a's): r0 on
// a sends to r1 on b (20 us after t = 0, a 0.3 us flight), r2 on b sends to r0 (a 0.5 us flight).
// r1 estimated b's offset too low by `low` within `error`, r2 worse (within 3 us).
std::vector<RankLog> two_host_logs(double low, double error) {
  std::vector<RankLog> logs(3);
  const std::string hosts[] = {std::string("a"), std::string("b"), std::string("b")};
  for (int r = 0; r < 3; ++r) {
    logs[std::size_t(r)].rank = r;
    logs[std::size_t(r)].host = hosts[r];
  }
  logs[1].clock_offset_us = 1000 - low;
  logs[1].clock_error_us = error;
  logs[2].clock_offset_us = 1002.5;
  logs[2].clock_error_us = 3;
  auto message = [&](int src, int dst, double sent_at_a, double flight) {
    const double b = -1000;  // host a's time to host b's
    SpanEvent send{SpanEvent::Kind::send, Lane::send, "send", 0, 0, dst, 7, 64, 0, {}, {}};
    send.t0 = sent_at_a + (src == 0 ? 0 : b);
    send.t1 = send.t0 + 0.1;
    SpanEvent recv{SpanEvent::Kind::recv, Lane::recv, "recv", 0, 0, src, 7, 64, 0, {}, {}};
    recv.t1 = sent_at_a + flight + (dst == 0 ? 0 : b);
    recv.t0 = recv.t1 - 2;
    logs[std::size_t(src)].spans.push_back(send);
    logs[std::size_t(dst)].spans.push_back(recv);
  };
  message(0, 1, 20, 0.3);
  message(2, 0, 40, 0.5);
  for (auto& log : logs) {
    log.t_start = log.rank == 0 ? 10 : 10 - 1000;
    log.t_end = log.t_start + 50;
  }
  return logs;
}

std::vector<std::string> trace_problems(const std::vector<RankLog>& logs) {
  TraceInfo info;
  info.world.size = static_cast<int>(logs.size());
  return check_invariants(parse_trace(trace_json(info, logs)));
}

}  // namespace

TEST_CASE("trace: clocks of two hosts are aligned by their messages, within the estimate's error",
          "[trace]") {
  // b's estimate 0.5 us too low: r0's message to r1 would arrive 0.2 us before it was sent.
  auto raw = two_host_logs(0.5, 0.6);
  {
    const auto problems = trace_problems(raw);
    CHECK_THAT(joined(problems), Catch::Contains("before it was sent"));
  }
  auto logs = raw;
  CHECK(align_clocks(logs) == 0);
  // One clock per host: r2 takes r1's estimate (the smaller error), moved forward just enough
  // for the flight to last kMinFlightUs, and no further than the error.
  CHECK(logs[0].clock_offset_us == 0);
  CHECK(logs[1].clock_offset_us == logs[2].clock_offset_us);
  CHECK(logs[1].clock_offset_us == Approx(1000 - 0.3 + kMinFlightUs).margin(1e-9));
  CHECK(logs[2].clock_error_us == 0.6);
  const double arrives = logs[1].spans[0].t1 + logs[1].clock_offset_us;
  CHECK(arrives - logs[0].spans[0].t0 >= kMinFlightUs - 1e-9);
  const auto problems = trace_problems(logs);
  INFO(joined(problems));
  CHECK(problems.empty());
}

TEST_CASE("trace: clocks move within the estimate's error only, an inversion beyond it stays",
          "[trace]") {
  auto logs = two_host_logs(0.5, 0.1);  // an error that cannot hold: the true offset is outside
  CHECK(align_clocks(logs) == 1);
  CHECK(logs[1].clock_offset_us == Approx(1000 - 0.5 + 0.1).margin(1e-9));
  CHECK_THAT(joined(trace_problems(logs)), Catch::Contains("before it was sent"));
}

TEST_CASE("trace: clocks of one host are left alone", "[trace]") {
  auto logs = two_host_logs(0.5, 0.6);
  for (auto& log : logs) log.host = logs[0].host, log.clock_offset_us = 0, log.clock_error_us = 0;
  CHECK(align_clocks(logs) == 0);
  for (const auto& log : logs) CHECK(log.clock_offset_us == 0);
}
