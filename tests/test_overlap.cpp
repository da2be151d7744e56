// viewer/model/overlap.hpp: communication hidden under compute, per rank, on a trace written by
// hand whose answer is worked out below, up to a moment and over the whole trace, and the text
// `distlab-viewer --describe` prints. tests/lesson16_overlap.sh checks the counter against the
// figures lesson 16 prints for the same run.
#include "catch.hpp"

#include <string>

#include "core/trace/format.hpp"
#include "viewer/model/overlap.hpp"
#include "viewer/model/trace_model.hpp"

using namespace distlab;
using namespace distlab::viewer;
using Catch::Contains;

namespace {

// Rank 0: a training step around a forward [0, 30) and a backward [40, 80) (op args), an update
// [80, 90) (op "update": not a layer's compute); a nonblocking operation's sends [20, 50) and
// [45, 70) (on a sub-lane: they overlap) and its receive [85, 95), in its context "async 0"; a
// blocking send [5, 15) under the forward (no group: the rank waits in it, not counted).
//   communication  [20, 70) + [85, 95)            = 60 us
//   computation    [0, 30) + [40, 80)
//   hidden         [20, 30) + [40, 70)            = 40 us (67%); exposed 20 us
// Rank 1: a phase named "forward L0" without an op arg (the name alone does not count) over a
// receive [10, 30) of "tp async 1" (an operation started on a group), and a gpu-lane span with op
// "forward" (not the compute lane): nothing hidden.
constexpr const char* kTrace = R"({"traceEvents":[
{"ph":"X","name":"step 0","cat":"compute","pid":1,"tid":1,"ts":0,"dur":100,"args":{"op":"train step"}},
{"ph":"X","name":"forward L0","cat":"compute","pid":1,"tid":1,"ts":0,"dur":30,"args":{"op":"forward"}},
{"ph":"X","name":"backward L0","cat":"compute","pid":1,"tid":1,"ts":40,"dur":40,"args":{"op":"backward"}},
{"ph":"X","name":"update","cat":"compute","pid":1,"tid":1,"ts":80,"dur":10,"args":{"op":"update"}},
{"ph":"X","name":"send","cat":"send","pid":1,"tid":2,"ts":5,"dur":10,"args":{"peer":1,"bytes":4}},
{"ph":"X","name":"send","cat":"send","pid":1,"tid":2,"ts":20,"dur":30,"args":{"peer":1,"bytes":8,"group":"async 0"}},
{"ph":"X","name":"send","cat":"send","pid":1,"tid":12,"ts":45,"dur":25,"args":{"peer":1,"bytes":8,"group":"async 0"}},
{"ph":"X","name":"recv","cat":"recv","pid":1,"tid":3,"ts":85,"dur":10,"args":{"peer":1,"bytes":8,"group":"async 0"}},
{"ph":"X","name":"forward L0","cat":"compute","pid":2,"tid":1,"ts":0,"dur":50},
{"ph":"X","name":"kernels","cat":"compute","pid":2,"tid":4,"ts":0,"dur":50,"args":{"op":"forward"}},
{"ph":"X","name":"recv","cat":"recv","pid":2,"tid":3,"ts":10,"dur":20,"args":{"peer":0,"bytes":8,"group":"tp async 1"}}
]})";

}  // namespace

TEST_CASE("overlap: nonblocking operations' message spans under forward and backward phases") {
  const TraceModel m = parse_trace_model(kTrace);
  const OverlapIndex index = index_overlap(m);
  REQUIRE(index.shown);
  REQUIRE(index.comm.size() == 2);
  CHECK(index.comm[0] == Intervals{{20, 70}, {85, 95}});
  CHECK(index.work[0] == Intervals{{0, 30}, {40, 80}});
  CHECK(index.hidden[0] == Intervals{{20, 30}, {40, 70}});
  CHECK(index.work[1].empty());

  const std::vector<RankOverlap> all = overlap_until(index, 1e9);
  CHECK(all[0].comm_us == Approx(60));
  CHECK(all[0].hidden_us == Approx(40));
  CHECK(all[0].exposed_us() == Approx(20));
  CHECK(all[0].share() == Approx(2.0 / 3));
  CHECK(all[1].comm_us == Approx(20));
  CHECK(all[1].hidden_us == 0);
}

TEST_CASE("overlap: up to the playback moment, the time that has passed only") {
  const OverlapIndex index = index_overlap(parse_trace_model(kTrace));
  // At t = 50: communication [20, 50) = 30 us, of it [20, 30) and [40, 50) hidden = 20 us.
  const std::vector<RankOverlap> mid = overlap_until(index, 50);
  CHECK(mid[0].comm_us == Approx(30));
  CHECK(mid[0].hidden_us == Approx(20));
  // Before any message: nothing, and a share of 0 (not 0 / 0).
  const std::vector<RankOverlap> start = overlap_until(index, 5);
  CHECK(start[0].comm_us == 0);
  CHECK(start[0].share() == 0);
}

TEST_CASE("overlap: merged and intersected intervals") {
  CHECK(merged({{5, 6}, {0, 2}, {2, 3}, {1, 1.5}}) == Intervals{{0, 3}, {5, 6}});
  CHECK(intersection({{0, 10}, {20, 30}}, {{5, 25}, {29, 40}}) ==
        Intervals{{5, 10}, {20, 25}, {29, 30}});
  CHECK(intersection({{0, 10}}, {{10, 20}}).empty());  // touching is not under
  CHECK(length_before({{0, 10}, {20, 30}}, 25) == Approx(15));
}

TEST_CASE("overlap: --describe prints each rank's counter and all ranks together") {
  const TraceModel m = parse_trace_model(kTrace);
  const std::string text = describe_overlap(m, 1e9);
  CHECK_THAT(text, Contains("overlap: communication hidden under compute"));
  CHECK_THAT(text, Contains("  r0  40.0 us of 60.0 us (67%)\n"));
  CHECK_THAT(text, Contains("  r1  0.0 us of 20.0 us (0%)\n"));
  CHECK_THAT(text, Contains("  all  40.0 us of 80.0 us (50%)\n"));
  // A trace of blocking calls under a forward phase says so, instead of a row of zeros.
  const TraceModel blocking = parse_trace_model(R"({"traceEvents":[
{"ph":"X","name":"forward 0","cat":"compute","pid":1,"tid":1,"ts":0,"dur":20,"args":{"op":"forward"}},
{"ph":"X","name":"send","cat":"send","pid":1,"tid":2,"ts":0,"dur":10,"args":{"group":"tp"}}]})");
  CHECK_FALSE(index_overlap(blocking).shown);
  CHECK_THAT(describe_overlap(blocking, 1e9), Contains("no nonblocking operation runs beside"));
}

TEST_CASE("overlap: a nonblocking operation's group name, as core/comm/async.cpp writes it") {
  CHECK(distlab::is_async_group("async 0"));
  CHECK(distlab::is_async_group("async 12"));
  CHECK(distlab::is_async_group("dp async 3"));
  CHECK_FALSE(distlab::is_async_group("async"));
  CHECK_FALSE(distlab::is_async_group("async "));
  CHECK_FALSE(distlab::is_async_group("tp"));
  CHECK_FALSE(distlab::is_async_group("nonasync 1"));
  CHECK_FALSE(distlab::is_async_group("async 1x"));
}
