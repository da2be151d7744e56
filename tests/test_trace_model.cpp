// viewer/model/trace_model.hpp: the viewer's trace model, on traces made in-process (ring
// all-reduce, scatter), on a Chrome trace from another tool, and on broken input.
#include "catch.hpp"

#include <bit>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "core/base/check.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/collectives/scatter.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/trace/writer.hpp"
#include "viewer/model/shard_replay.hpp"
#include "viewer/model/trace_model.hpp"

using distlab::Error;
using namespace distlab::viewer;
using Catch::Contains;

namespace {

std::string traced(int n, const std::string& lesson,
                   const std::function<void(distlab::Comm&)>& body) {
  const distlab::RunResult run = distlab::run_in_process(n, body);
  distlab::TraceInfo info;
  info.lesson = lesson;
  info.title = "trace model test";
  info.algorithm = "test";
  info.world = run.world;
  info.world.size = n;
  info.verified = true;
  info.cost_model = R"({"model":"alpha-beta","alpha_s":1e-06})";
  return distlab::trace_json(info, run.logs);
}

// N ranks, a ring_chunked all-reduce of 64 floats: steps 1..N-1 reduce-scatter, N..2(N-1)
// all-gather.
std::string ring_trace(int n) {
  return traced(n, "99_ring", [](distlab::Comm& comm) {
    auto data = comm.alloc<float>(64, distlab::Category::grads);
    distlab::fill_input(data.view(), 1, comm.rank());
    distlab::coll::all_reduce_ring_chunked(comm, data.view());
  });
}

// N ranks, root 0 scatters 64 floats in N chunks: steps 1..N-1.
std::string scatter_trace(int n) {
  return traced(n, "99_scatter", [n](distlab::Comm& comm) {
    comm.declare_buffer("data", 64, n);
    auto all = comm.alloc<float>(64, distlab::Category::data);
    distlab::fill_input(all.view(), 1, 0);
    const distlab::Partition part{64, n};
    auto mine = comm.alloc<float>(part.size(comm.rank()), distlab::Category::data);
    distlab::coll::scatter(comm, distlab::View<const float>(all.view()), mine.view(), 0);
  });
}

BufferState buffer(const ShardState& st, const std::string& name) {
  for (const auto& b : st.buffers)
    if (b.name == name) return b;
  FAIL("no buffer " << name);
  return {};
}

}  // namespace

TEST_CASE("model: a ring all-reduce trace loads ranks, lanes, spans and otherData", "[model]") {
  const int n = 4;
  const TraceModel m = parse_trace_model(ring_trace(n));
  CHECK(m.info.distlab);
  CHECK(m.info.schema_version == distlab::kTraceSchemaVersion);
  CHECK(m.info.lesson == "99_ring");
  CHECK(m.info.world_size == n);
  CHECK(m.info.has_verification);
  CHECK(m.info.verified);
  CHECK(m.info.cost_model_json == R"({"model":"alpha-beta","alpha_s":1e-06})");
  REQUIRE(m.info.buffers.size() == 1);
  CHECK(m.info.buffers[0].name == "data");
  CHECK(m.info.buffers[0].length == 64);
  CHECK(m.info.buffers[0].chunks == n);
  REQUIRE(m.world_size() == n);
  for (int r = 0; r < n; ++r) {
    CHECK(m.ranks[r].pid == r + 1);
    CHECK_THAT(m.ranks[r].name, Contains(std::to_string(r)));
    CHECK(m.rank_of_pid(r + 1) == r);
  }
  // Every lane's spans are sorted by start and nest; send spans carry the message args.
  int sends = 0;
  for (const Lane& l : m.lanes) {
    CHECK(l.name != "");
    for (std::uint32_t i = l.span_begin; i + 1 < l.span_end; ++i)
      CHECK(m.spans[i].start <= m.spans[i + 1].start);
    for (std::uint32_t i = l.span_begin; i < l.span_end; ++i)
      CHECK(m.spans[i].lane == &l - m.lanes.data());
  }
  for (const Span& s : m.spans) {
    CHECK(s.dur >= 0);
    if (s.kind != SpanKind::send) continue;
    ++sends;
    const SpanArgs* a = m.args(s);
    REQUIRE(a);
    CHECK(m.str(s.name) == "send");
    CHECK(m.str(a->buffer) == "data");
    CHECK(a->bytes == 64 / n * 4);
    CHECK(a->step >= 1);
    CHECK(a->chunk_end == a->chunk + 1);
    CHECK(a->apply != ApplyKind::none);
    CHECK(a->msg != 0);
  }
  CHECK(sends == 2 * (n - 1) * n);
  CHECK(m.steps.size() == 2 * (n - 1));
  CHECK(m.max_step() == 2 * (n - 1));
  // The memory ledger: one series per rank, grads holding the 64 floats.
  REQUIRE(m.memory.size() == static_cast<std::size_t>(n));
  for (const auto& series : m.memory) {
    REQUIRE(!series.empty());
    std::int64_t peak_grads = 0;
    for (const auto& s : series) peak_grads = std::max(peak_grads, s.bytes[1]);
    CHECK(peak_grads == 64 * 4);
    CHECK(std::string(memory_category_name(1)) == "grads");
  }
  CHECK(m.t_end >= m.t_begin);
}

TEST_CASE("model: flows pair into messages with send and arrival", "[model]") {
  const int n = 4;
  const TraceModel m = parse_trace_model(ring_trace(n));
  REQUIRE(m.messages.size() == static_cast<std::size_t>(2 * (n - 1) * n));
  std::set<std::uint64_t> ids;
  for (const Message& msg : m.messages) {
    ids.insert(msg.id);
    REQUIRE(msg.send_span >= 0);
    REQUIRE(msg.deliver_span >= 0);
    CHECK(msg.arrival >= msg.send_time);
    CHECK(msg.src == (msg.dst + n - 1) % n);  // the ring: from the left neighbour
    const SpanArgs* sa = m.args(m.spans[msg.send_span]);
    const SpanArgs* da = m.args(m.spans[msg.deliver_span]);
    REQUIRE(sa);
    REQUIRE(da);
    CHECK(sa->bytes == da->bytes);
    CHECK(msg.bytes == sa->bytes);
    CHECK(m.lanes[m.spans[msg.send_span].lane].rank == msg.src);
    CHECK(m.lanes[m.spans[msg.deliver_span].lane].rank == msg.dst);
    CHECK(msg.step >= 1);
    CHECK(msg.step <= 2 * (n - 1));
    CHECK(msg.apply == (msg.step <= n - 1 ? ApplyKind::reduce : ApplyKind::copy));
  }
  CHECK(ids.size() == m.messages.size());
}

TEST_CASE("model: a ring all-reduce ends with every chunk everywhere, all N contributions",
          "[model]") {
  for (int n : {2, 3, 4, 5}) {
    const TraceModel m = parse_trace_model(ring_trace(n));
    const std::uint64_t all = (std::uint64_t{1} << n) - 1;

    const BufferState& start = buffer(state_at_step(m, 0), "data");
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) {
        CHECK(start.at(r, c).held);
        CHECK(start.at(r, c).mask == (std::uint64_t{1} << r));
      }

    // After the reduce-scatter half, rank r's chunk r is complete and no other chunk is.
    const BufferState& half = buffer(state_at_step(m, n - 1), "data");
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) {
        INFO("n " << n << " rank " << r << " chunk " << c);
        CHECK((half.at(r, c).mask == all) == (c == r));
        CHECK((half.at(r, c).count == n) == (c == r));
      }

    const BufferState& end = buffer(state_at_step(m, 2 * (n - 1)), "data");
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) {
        INFO("n " << n << " rank " << r << " chunk " << c);
        CHECK(end.at(r, c).held);
        CHECK(end.at(r, c).mask == all);
        CHECK(end.at(r, c).count == n);
      }
    // By time: after the last arrival, the same state.
    const BufferState& by_time = buffer(state_at_time(m, m.t_end), "data");
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) CHECK(by_time.at(r, c).count == n);
  }
}

TEST_CASE("model: after a scatter each rank holds exactly its piece", "[model]") {
  const int n = 4;
  const TraceModel m = parse_trace_model(scatter_trace(n));
  REQUIRE(m.messages.size() == static_cast<std::size_t>(n - 1));
  for (const Message& msg : m.messages) {
    CHECK(msg.src == 0);
    CHECK(msg.apply == ApplyKind::copy);
    CHECK(msg.chunk == msg.dst);
  }
  // Before: only the root (the source of every chunk) holds anything.
  const BufferState& before = buffer(state_at_step(m, 0), "data");
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) CHECK(before.at(r, c).held == (r == 0));
  const BufferState& after = buffer(state_at_step(m, m.max_step()), "data");
  for (int r = 1; r < n; ++r)
    for (int c = 0; c < n; ++c) {
      INFO("rank " << r << " chunk " << c);
      CHECK(after.at(r, c).held == (c == r));
      if (c == r) {
        CHECK(after.at(r, c).mask == 1);  // the root's data
        CHECK(after.at(r, c).count == 1);
      }
    }
  CHECK(after.at(0, 0).held);  // the root keeps its own piece
  // Halfway: step 2 has reached ranks 1 and 2, not 3.
  const BufferState& mid = buffer(state_at_step(m, 2), "data");
  CHECK(mid.at(1, 1).held);
  CHECK(mid.at(2, 2).held);
  CHECK_FALSE(mid.at(3, 3).held);
}

TEST_CASE("model: a Chrome trace from another tool loads its spans and flows", "[model]") {
  const std::string foreign = R"({"traceEvents":[
    {"name":"thread_name","ph":"M","pid":4242,"tid":7,"args":{"name":"main"}},
    {"name":"load","ph":"X","pid":4242,"tid":7,"ts":10,"dur":30,"cat":"io"},
    {"name":"parse","ph":"X","pid":4242,"tid":7,"ts":15.5,"dur":5},
    {"ph":"B","pid":900,"tid":1,"ts":12,"name":"work"},
    {"ph":"E","pid":900,"tid":1,"ts":40},
    {"ph":"s","id":"0x1f","pid":4242,"tid":7,"ts":16,"name":"hand-off","cat":"flow"},
    {"ph":"f","bp":"e","id":"0x1f","pid":900,"tid":1,"ts":20,"name":"hand-off","cat":"flow"},
    {"ph":"C","pid":900,"name":"heap","ts":12,"args":{"bytes":100}},
    {"ph":"i","pid":900,"tid":1,"ts":13,"name":"mark","s":"t"}
  ],"displayTimeUnit":"ms","otherData":{"version":"other tool 2.1"}})";
  const TraceModel m = parse_trace_model(foreign);
  CHECK_FALSE(m.info.distlab);
  CHECK(m.info.world_size == 2);
  REQUIRE(m.world_size() == 2);
  CHECK(m.ranks[0].pid == 900);
  CHECK(m.ranks[1].pid == 4242);
  REQUIRE(m.spans.size() == 3);
  CHECK(m.info.buffers.empty());
  const Lane& main_lane = m.lanes[m.ranks[1].lanes.at(0)];
  CHECK(main_lane.name == "main");
  CHECK(main_lane.depth == 2);
  REQUIRE(main_lane.span_end - main_lane.span_begin == 2);
  CHECK(m.str(m.spans[main_lane.span_begin].name) == "load");  // outermost first
  const Lane& work_lane = m.lanes[m.ranks[0].lanes.at(0)];
  REQUIRE(work_lane.span_end - work_lane.span_begin == 1);
  CHECK(m.spans[work_lane.span_begin].dur == Approx(28));
  REQUIRE(m.messages.size() == 1);
  CHECK(m.messages[0].id == 0x1f);
  CHECK(m.messages[0].src == 1);
  CHECK(m.messages[0].dst == 0);
  CHECK(m.messages[0].bytes == -1);
  CHECK(m.messages[0].arrival == Approx(20));
  CHECK(state_at_step(m, 5).buffers.empty());

  // The JSON array form, with no otherData at all.
  const TraceModel bare =
      parse_trace_model(R"([{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":1},
                                                {"ph":"X","name":"b","pid":3,"tid":1,"ts":1,"dur":1}])");
  CHECK(bare.world_size() == 2);
  CHECK(bare.spans.size() == 2);
}

TEST_CASE("model: malformed, truncated and empty traces raise Error with a sentence", "[model]") {
  CHECK_THROWS_MATCHES(parse_trace_model(""), Error,
                       Catch::Matchers::Exception::ExceptionMessageMatcher(
                           "the trace is empty (0 bytes); a trace is a Chrome Trace "
                           "Event JSON object {\"traceEvents\": [...]} or an array of events"));
  CHECK_THROWS_WITH(parse_trace_model("  \n"), Contains("empty"));
  CHECK_THROWS_WITH(parse_trace_model("{\"traceEvents\": [{\"ph\":\"X\",\"pid\":1"),
                    Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_trace_model("{\"traceEvents\": [] } trailing"),
                    Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_trace_model("not json at all"), Contains("not a JSON object or array"));
  CHECK_THROWS_WITH(parse_trace_model("42"), Contains("not a JSON object or array"));
  CHECK_THROWS_WITH(parse_trace_model("[{\"ph\":\"X\",]"), Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_trace_model("{\"foo\": 1}"), Contains("no traceEvents"));
  CHECK_THROWS_WITH(parse_trace_model("{\"traceEvents\": {}}"), Contains("not an array"));
  CHECK_THROWS_WITH(
      parse_trace_model(
          R"({"traceEvents":[],"otherData":{"schema":"distlab-trace","schema_version":7}})"),
      Contains("schema version 7 is newer"));
  CHECK_THROWS_WITH(load_trace_model("/nonexistent/trace.json"), Contains("cannot open trace"));

  // Every prefix of a real trace either loads or raises Error: never a crash.
  const std::string full = ring_trace(2);
  int errors = 0;
  for (std::size_t len = 0; len < full.size(); len += 7) {
    try {
      parse_trace_model(std::string_view(full).substr(0, len));
    } catch (const Error&) {
      ++errors;
    }
  }
  CHECK(errors > 0);
  // Odd but valid JSON in the events is skipped, not fatal.
  const TraceModel odd =
      parse_trace_model(R"({"traceEvents":[1,"x",null,{"ph":"X"},{"ph":"X","pid":"a"},
      {"ph":"X","pid":1,"tid":1,"ts":"soon","dur":-3,"args":{"bytes":"many","contrib_mask":"0xzz"}}]})");
  REQUIRE(odd.spans.size() == 1);
  CHECK(odd.spans[0].dur == 0);
}

TEST_CASE("schema 2: the lesson's text and memory formula", "[trace_model]") {
  const TraceModel m = parse_trace_model(R"({"traceEvents":[],"otherData":{"schema":"distlab-trace",
    "schema_version":2,"world_size":2,"text":{"concept":"why","look_at":"where"},
    "memory_formula":{"label":"4 + 12/N bytes per parameter","bytes_per_rank":[100,50.5]}}})");
  CHECK(m.info.concept_text == "why");
  CHECK(m.info.look_at == "where");
  CHECK(m.info.memory_formula == "4 + 12/N bytes per parameter");
  REQUIRE(m.info.memory_expected_bytes.size() == 2);
  CHECK(m.info.memory_expected_bytes[1] == 50.5);
  // A version 1 trace has neither and still loads.
  const TraceModel old = parse_trace_model(
      R"({"traceEvents":[],"otherData":{"schema":"distlab-trace","schema_version":1}})");
  CHECK(old.info.concept_text.empty());
  CHECK(old.info.memory_expected_bytes.empty());
}

TEST_CASE("schema 3: phase args on compute spans, and a lesson's own otherData fields",
          "[trace_model]") {
  const TraceModel m = parse_trace_model(R"({"traceEvents":[
    {"ph":"X","name":"F 2","cat":"compute","pid":1,"tid":1,"ts":0,"dur":1,
     "args":{"op":"forward","micro":2,"stage":1,"text":"stage 1 runs micro-batch 2"}},
    {"ph":"X","name":"plain","cat":"compute","pid":1,"tid":1,"ts":2,"dur":1}],
    "otherData":{"schema":"distlab-trace","schema_version":3,"world_size":1,
    "roles":["server"],"splits":{"matrices":[{"name":"A"}]}}})");
  REQUIRE(m.spans.size() == 2);
  const SpanArgs* a = m.args(m.spans[0]);
  REQUIRE(a != nullptr);
  CHECK(m.str(a->op) == "forward");
  CHECK(a->micro == 2);
  CHECK(a->stage == 1);
  CHECK(m.str(a->text) == "stage 1 runs micro-batch 2");
  CHECK(m.args(m.spans[1]) == nullptr);  // a compute span without args stores none
  CHECK(m.info.extra_json("roles") == R"(["server"])");
  CHECK(m.info.extra_json("splits") == R"({"matrices":[{"name":"A"}]})");
  CHECK(m.info.extra_json("absent").empty());
  CHECK(m.info.extra.count("world_size") == 0);  // read by the loader itself, not extra
}

TEST_CASE("schema 3: a phase's args are written and read back by the viewer's model",
          "[trace_model]") {
  const TraceModel m = parse_trace_model(traced(2, "99_phases", [](distlab::Comm& comm) {
    { auto p = comm.phase("F 1", {.op = "forward", .micro = 1, .stage = comm.rank()}); }
    { auto p = comm.phase("caption only", {.text = "a \"quoted\" caption"}); }
    { auto p = comm.phase("bare"); }
  }));
  int forward = 0, captions = 0, bare = 0;
  for (const Span& s : m.spans) {
    const SpanArgs* a = m.args(s);
    if (m.str(s.name) == "F 1") {
      REQUIRE(a != nullptr);
      CHECK(m.str(a->op) == "forward");
      CHECK(a->micro == 1);
      CHECK(a->stage == m.lanes[s.lane].rank);
      CHECK(a->text == 0);
      ++forward;
    } else if (m.str(s.name) == "caption only") {
      REQUIRE(a != nullptr);
      CHECK(m.str(a->text) == "a \"quoted\" caption");
      CHECK(a->op == 0);
      CHECK(a->micro == -1);
      ++captions;
    } else if (m.str(s.name) == "bare") {
      CHECK(a == nullptr);
      ++bare;
    }
  }
  CHECK(forward == 2);
  CHECK(captions == 2);
  CHECK(bare == 2);
}

// The libFuzzer target (viewer/model/fuzz_trace_model.cpp) needs clang; its seed corpus and
// cut-off example traces run here on every build: each loads or raises Error, nothing else.
TEST_CASE("model: the fuzz corpus and truncated example traces load or raise Error", "[model]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(__FILE__).parent_path().parent_path();
  auto read = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  auto loads = [](std::string_view text) {  // true: loaded, false: Error; any other exception fails
    try {
      parse_trace_model(text);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  int seeds = 0, loaded = 0;
  for (const auto& entry : fs::directory_iterator(root / "viewer/model/fuzz_corpus")) {
    INFO(entry.path().string());
    loaded += loads(read(entry.path()));
    ++seeds;
  }
  CHECK(seeds >= 10);
  CHECK(loaded >= 3);     // the tiny distlab trace, the foreign one, the array form
  CHECK(loaded < seeds);  // and the broken ones are refused

  int examples = 0;
  for (const auto& entry : fs::directory_iterator(root / "traces/examples")) {
    const std::string full = read(entry.path());
    INFO(entry.path().string());
    CHECK(loads(full));
    // Cut right after the first whole event (on-demand parsing once took that for the end of
    // the array), one byte short, and at 14 points through the events and otherData.
    std::vector<std::size_t> cuts{full.find(",\n{"), full.rfind('}')};
    for (int k = 1; k < 15; ++k) cuts.push_back(full.size() * k / 15);
    for (const std::size_t cut : cuts) {
      INFO("cut at byte " << cut << " of " << full.size());
      CHECK_THROWS_WITH(parse_trace_model(std::string_view(full).substr(0, cut)),
                        Contains("truncated"));
    }
    ++examples;
  }
  CHECK(examples >= 6);
}

// Schema 3's additions for Perfetto and chrome://tracing (post slices, each rank's own step
// instants, the memory total in a counter of its own, the top-level metadata) leave what the
// viewer shows as it was: the same messages, steps, memory and otherData.
TEST_CASE(
    "schema 3: post slices, per-rank steps, the memory total and metadata change nothing "
    "the viewer shows",
    "[trace_model]") {
  const int n = 4;
  const std::string json = ring_trace(n);
  REQUIRE(json.find(R"("cat":"post")") != std::string::npos);
  REQUIRE(json.find(R"("s":"p","name":"step")") != std::string::npos);
  REQUIRE(json.find(R"("name":"memory total")") != std::string::npos);
  REQUIRE(json.find("\n\"metadata\":{") != std::string::npos);
  const TraceModel m = parse_trace_model(json);
  for (const Span& s : m.spans) CHECK(m.str(s.name) != "post");  // no clutter on the send lane
  for (const Lane& l : m.lanes)
    if (l.name == "send") CHECK(l.depth == 1);  // a send does not nest its post slice
  CHECK(m.steps.size() == static_cast<std::size_t>(2 * (n - 1)));  // global frames, once each
  REQUIRE(m.messages.size() == static_cast<std::size_t>(2 * (n - 1) * n));
  for (const Message& msg : m.messages) {
    REQUIRE(msg.send_span >= 0);
    REQUIRE(msg.deliver_span >= 0);
    CHECK(msg.send_time == m.spans[msg.send_span].start);  // from the flow start
    CHECK(msg.arrival == m.spans[msg.deliver_span].end());
    CHECK(msg.arrival > msg.send_time);
  }
  for (const auto& series : m.memory)
    for (const MemorySample& s : series) {
      std::int64_t sum = 0;
      for (auto b : s.bytes) sum += b;
      CHECK(s.total == sum);  // derived: the counter no longer carries total_bytes
    }
  CHECK(m.info.lesson == "99_ring");
  CHECK(m.info.extra_json("metadata").empty());  // top level, not an otherData field
}

TEST_CASE(
    "schema 3: the memory total comes from total_bytes in older traces, from the parts "
    "in newer ones, the top-level metadata never overrides otherData",
    "[trace_model]") {
  const TraceModel old = parse_trace_model(R"({"traceEvents":[
    {"ph":"C","name":"memory","pid":1,"tid":0,"ts":0,"args":{"params_bytes":60,"grads_bytes":40,"total_bytes":100}}],
    "otherData":{"schema":"distlab-trace","schema_version":2,"world_size":1}})");
  REQUIRE(old.memory.size() == 1);
  REQUIRE(old.memory[0].size() == 1);
  CHECK(old.memory[0][0].total == 100);
  const TraceModel now = parse_trace_model(R"({"traceEvents":[
    {"ph":"C","name":"memory","pid":1,"tid":0,"ts":0,"args":{"params_bytes":60,"grads_bytes":40}},
    {"ph":"C","name":"memory total","pid":1,"tid":0,"ts":0,"args":{"bytes":100}},
    {"ph":"i","s":"p","name":"step","pid":1,"tid":0,"ts":0,"args":{"step":1}},
    {"ph":"i","s":"g","name":"step frame","pid":1,"tid":0,"ts":0,"args":{"step":1}}],
    "otherData":{"schema":"distlab-trace","schema_version":3,"world_size":1,"lesson":"real"},
    "metadata":{"lesson":"flat copy","world_size":7,"clock":1}})");
  REQUIRE(now.memory.size() == 1);
  REQUIRE(now.memory[0].size() == 1);
  CHECK(now.memory[0][0].total == 100);
  CHECK(now.memory[0][0].bytes[0] == 60);
  CHECK(now.steps.size() == 1);
  CHECK(now.info.lesson == "real");
  CHECK(now.info.world_size == 1);
  CHECK(now.info.extra.empty());
}
