// Window accesses in the trace (schema 4; recorder.hpp's load and store spans): what writer.cpp
// writes for them, what reader.cpp accepts and refuses, and that trace_counts.cpp never counts
// them as messages.
#include "catch.hpp"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime/runtime.hpp"
#include "core/runtime/trace_counts.hpp"
#include "core/trace/reader.hpp"
#include "core/trace/writer.hpp"
#include "window_trace.hpp"

using namespace distlab;
using Catch::Contains;

namespace {

std::string window_json() {
  TraceInfo info;
  info.lesson = "99_windows";
  info.world.size = 3;
  info.verified = true;
  return trace_json(info, test::window_logs());
}

std::string all_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t k = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++k;
  return k;
}

}  // namespace

TEST_CASE("trace (schema 4): window accesses are load and store slices, no flow, no message",
          "[trace][window]") {
  const std::string json = window_json();
  const LoadedTrace t = parse_trace(json);
  INFO(all_lines(check_invariants(t)));
  CHECK(check_invariants(t).empty());
  CHECK(t.schema_version == 4);

  // Eleven accesses, each a slice of cat "window", a load on a recv lane (3, 13, ...) and a store
  // on a send lane (2, 12, ...): the late load recorded on the compute lane too.
  std::map<std::string, int> by_name;
  std::set<int> load_tids;
  for (const TraceSpan& s : t.spans) {
    if (s.cat != "window") continue;
    ++by_name[s.name];
    CHECK(s.msg == 0);
    CHECK(s.tid % 10 == (s.name == "load" ? 3 : 2));
    if (s.name == "load") load_tids.insert(s.tid);
  }
  CHECK(by_name == std::map<std::string, int>{{"load", 7}, {"store", 4}});
  CHECK(load_tids == std::set<int>{3, 13});  // a rank's two loads of step 1 overlap

  // Their args: the window's owner, the bytes, the step, the buffer's chunks where set; no
  // peer, tag or message id.
  CHECK(occurrences(json, R"("cat":"window")") == 11);
  CHECK(occurrences(json, R"("name":"load","cat":"window","pid":2,"tid":3,"ts":50.000,)"
                          R"("dur":5.000,"args":{"window":0,"bytes":4096,"step":4,)"
                          R"("buffer":"data","chunk":1,"chunk_end":2})") == 1);
  CHECK(occurrences(json, R"("name":"store","cat":"window","pid":3,"tid":2,"ts":30.000,)"
                          R"("dur":5.000,"args":{"window":2,"bytes":1024,"step":2,)"
                          R"("buffer":"data","chunk":2,"chunk_end":3})") == 1);
  CHECK(occurrences(json, R"("args":{"window":1,"bytes":4096,"step":1})") == 2);  // r0 and r2

  // Only the one message has a flow, a post slice and a deliver slice.
  CHECK(t.flows.size() == 2);
  std::map<std::string, int> cats;
  for (const TraceSpan& s : t.spans) ++cats[s.cat];
  CHECK(cats["post"] == 1);
  CHECK(cats["deliver"] == 1);
  CHECK(occurrences(json, R"("messages":1,)") == 1);

  // Steps made only of window accesses still mark each rank's own start of them.
  std::map<std::pair<int, std::int64_t>, double> own;
  for (const TraceStep& s : t.rank_steps) own[{s.pid, s.step}] = s.ts;
  for (int pid = 1; pid <= 3; ++pid) {
    CHECK(own[{pid, 1}] == 10.0);
    CHECK(own[{pid, 2}] == 30.0);
  }
  CHECK(own.count({2, 4}) == 1);
  CHECK(own[{3, 3}] == 42.0);  // r2's store of the message's step
}

TEST_CASE("trace (schema 4): window accesses are no messages to the run's counts",
          "[trace][window][counts]") {
  RunResult run;
  run.world.size = 3;
  run.logs = test::window_logs();
  const auto traffic = run.traffic();
  REQUIRE(traffic.size() == 3);
  CHECK(traffic[0].bytes_sent == 64);
  CHECK(traffic[0].msgs_sent == 1);
  CHECK(traffic[0].bytes_recv == 0);
  CHECK(traffic[0].msgs_recv == 0);
  CHECK(traffic[1].bytes_recv == 64);
  CHECK(traffic[1].msgs_recv == 1);
  CHECK(traffic[1].bytes_sent == 0);
  CHECK(traffic[2].bytes_sent + traffic[2].bytes_recv == 0);
  CHECK(traffic[2].msgs_sent + traffic[2].msgs_recv == 0);
  CHECK(traffic[2].steps == 0);
  CHECK(traffic[2].comm_seconds == 0.0);
  CHECK(traffic[0].steps == 1);
  CHECK(run.steps() == 1);  // the message's step only

  const StepCounts c = count_steps(run, 1, 4);
  CHECK(c.steps == 1);
  CHECK(c.all_links == 64);
  CHECK(c.max_msgs == 1);
  CHECK(c.peak.all == 64);
  CHECK(c.in_flight == 1);

  std::size_t kept = 0;
  for (const RankLog& log : only_steps(run, 1, 4).logs) kept += log.spans.size();
  CHECK(kept == 2);  // the send and the receive
}

// --- the reader's checks of window accesses ---------------------------------------------------

namespace {

// Two ranks, one step of window accesses as the writer writes them: r0 loads from r1's window,
// r1 stores into its own; each rank's own step instant, no flow.
const std::string kGood4 = R"({"traceEvents":[
{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"rank 0"}},
{"ph":"M","name":"process_name","pid":2,"tid":0,"args":{"name":"rank 1"}},
{"ph":"X","name":"load","cat":"window","pid":1,"tid":3,"ts":1.000,"dur":2.000,"args":{"window":1,"bytes":64,"step":1}},
{"ph":"X","name":"store","cat":"window","pid":2,"tid":2,"ts":1.500,"dur":1.000,"args":{"window":1,"bytes":32,"step":1}},
{"ph":"i","s":"p","name":"step","pid":2,"tid":0,"ts":1.500,"args":{"step":1}},
{"ph":"i","s":"p","name":"step","pid":1,"tid":0,"ts":1.000,"args":{"step":1}}
],
"displayTimeUnit":"ns",
"otherData":{"schema":"distlab-trace","schema_version":4,"lesson":"hand","world_size":2,"mode":"threads","device":"cpu","transport":"threads","verification":{"verified":true,"checks":1,"failed":[]}},
"metadata":{"schema":"distlab-trace","schema_version":4,"lesson":"hand","world_size":2,"verified":true,"checks":1}}
)";

std::string broken4(const std::string& from, const std::string& to) {
  REQUIRE(occurrences(kGood4, from) == 1);
  std::string s = kGood4;
  s.replace(s.find(from), from.size(), to);
  return s;
}

std::string problems4(const std::string& json) {
  return all_lines(check_invariants(parse_trace(json)));
}

}  // namespace

TEST_CASE("trace invariants (schema 4): the hand-written window accesses are good",
          "[trace][invariants][window]") {
  CHECK(problems4(kGood4) == "");
}

TEST_CASE("trace invariants (schema 4): a window access of a rank outside the world",
          "[trace][invariants][window]") {
  CHECK_THAT(problems4(broken4(R"("window":1,"bytes":64)", R"("window":2,"bytes":64)")),
             Contains("window access 'load' at 1.000 us on pid 1 accesses the window of rank 2, "
                      "outside 0..1"));
  CHECK_THAT(problems4(broken4(R"("window":1,"bytes":32)", R"("bytes":32)")),
             Contains("window access 'store' at 1.500 us on pid 2 accesses the window of rank -1"));
}

TEST_CASE("trace invariants (schema 4): a window access on the wrong lane, or named otherwise",
          "[trace][invariants][window]") {
  CHECK_THAT(problems4(broken4(R"("pid":1,"tid":3)", R"("pid":1,"tid":2)")),
             Contains("window access 'load' at 1.000 us on pid 1 is on tid 2, not on a recv lane"));
  CHECK_THAT(problems4(broken4(R"("pid":2,"tid":2)", R"("pid":2,"tid":13)")),
             Contains("is on tid 13, not on a send lane"));
  CHECK(problems4(broken4(R"("pid":2,"tid":2)", R"("pid":2,"tid":12)")) == "");  // a sub-lane
  CHECK_THAT(problems4(broken4(R"("name":"store")", R"("name":"put")")),
             Contains("window access 'put' at 1.500 us on pid 2 is named neither load nor store"));
}

TEST_CASE("trace invariants (schema 4): a window access without bytes, or with a message id",
          "[trace][invariants][window]") {
  CHECK_THAT(problems4(broken4(R"("window":1,"bytes":64,)", R"("window":1,)")),
             Contains("window access 'load' at 1.000 us on pid 1 has no bytes"));
  CHECK_THAT(problems4(broken4(R"("bytes":32,"step":1})", R"("bytes":32,"step":1,"msg":7})")),
             Contains("carries message id 7"));
}

TEST_CASE("trace invariants (schema 4): a rank without its own step instant for its window step",
          "[trace][invariants][window]") {
  CHECK_THAT(
      problems4(broken4(
          R"({"ph":"i","s":"p","name":"step","pid":2,"tid":0,"ts":1.500,"args":{"step":1}},)", "")),
      Contains("pid 2 has no step instant of its own (\"s\":\"p\") for step 1 at or before its "
               "'store' at 1.500 us"));
}

TEST_CASE("trace (schema 4): a reader of schema 4 takes the older versions, refuses 5",
          "[trace][window]") {
  std::string v3 = kGood4;
  for (auto at = v3.find(R"("schema_version":4)"); at != std::string::npos;
       at = v3.find(R"("schema_version":4)"))
    v3.replace(at, 18, R"("schema_version":3)");
  CHECK(parse_trace(v3).schema_version == 3);
  std::string v5 = kGood4;
  v5.replace(v5.find(R"("schema_version":4)"), 18, R"("schema_version":5)");
  CHECK_THROWS_WITH(parse_trace(v5), Contains("trace schema version 5 is newer than this loader"));
}
