// device_timing.hpp and the gpu lane: the clock arithmetic that puts CUDA events on the host
// timeline, the gpu lane in the written trace, and the CPU path left as it was (no gpu lane,
// no device work). Also the threads transport's wait_until, which GPU waits go through.
#include "catch.hpp"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/base/check.hpp"
#include "core/collectives/baseline.hpp"
#include "core/comm/comm.hpp"
#include "core/device/device_timing.hpp"
#include "core/trace/reader.hpp"
#include "core/trace/writer.hpp"
#include "thread_world.hpp"

using namespace distlab;
using Catch::Contains;

TEST_CASE("device trace: the calibration keeps the tightest round and its midpoint",
          "[device_trace]") {
  // Round 1 was interrupted (60 us gap); round 2 took 4 us: its event lies within +-2 us of 1002.
  const std::vector<ClockRound> rounds = {{100, 120}, {500, 560}, {1000, 1004}, {2000, 2010}};
  REQUIRE(tightest_round(rounds) == 2);
  CHECK(round_midpoint(rounds[2]) == Approx(1002.0));
  CHECK(tightest_round({{7, 9}}) == 0);
  CHECK_THROWS_AS(tightest_round({}), Error);
}

TEST_CASE("device trace: an event's host time is the epoch plus its milliseconds",
          "[device_trace]") {
  // An event 1.5 ms after an epoch measured at host time 1000 us happened at 2500 us.
  CHECK(event_host_us(1000.0, 1.5) == Approx(2500.0));
  CHECK(event_host_us(1000.0, 0.0) == Approx(1000.0));
  // cudaEventElapsedTime has 0.5 us resolution: sub-microsecond values survive the conversion.
  CHECK(event_host_us(0.0, 0.0005) == Approx(0.5));
}

TEST_CASE("device trace: gpu spans get their own lane in the trace, CPU runs get none",
          "[device_trace]") {
  auto run = test::run_ranks(2, [](Comm& comm) {
    auto p = comm.phase("work");
    comm.check("ran", true);
  });
  REQUIRE_FALSE(run.failed);
  TraceInfo info;
  info.lesson = "99_unit";
  info.world.size = 2;
  const std::string cpu_json = trace_json(info, run.logs);
  CHECK(cpu_json.find("\"name\":\"gpu\"") == std::string::npos);
  for (const auto& log : run.logs)
    for (const auto& e : log.spans) CHECK(e.lane != Lane::gpu);

  // A span on the gpu lane (as Comm records them on a GPU rank) becomes tid 4, named "gpu".
  SpanEvent g;
  g.lane = Lane::gpu;
  g.name = "copy r1 -> r0";
  g.t0 = run.logs[0].t_start + 1;
  g.t1 = g.t0 + 3;
  run.logs[0].spans.push_back(g);
  const std::string json = trace_json(info, run.logs);
  CHECK_THAT(json, Contains(R"("name":"thread_name","pid":1,"tid":4,"args":{"name":"gpu"})"));
  CHECK_THAT(json, Contains(R"("name":"copy r1 -> r0","cat":"gpu","pid":1,"tid":4)"));
  const LoadedTrace t = parse_trace(json);
  CHECK(t.problems.empty());
  CHECK(check_invariants(t).empty());
}

TEST_CASE("device trace: library collectives on in-process CPU ranks say why they cannot run",
          "[device_trace]") {
  std::string why;
  bool available = true;
  test::run_ranks(2, [&](Comm& comm) {
    if (comm.rank() != 0) return;
    available = baseline::available(comm);
    why = baseline::unavailable_reason(comm);
  });
  CHECK_FALSE(available);
  CHECK_THAT(why, Contains("MPI"));
}

TEST_CASE("threads: a GPU wait that never ends is reported by name after the timeout",
          "[transport][deadlock]") {
  auto run = test::run_ranks(
      2,
      [](Comm& comm) {
        auto b = comm.alloc<float>(1, Category::data);
        if (comm.rank() == 0)
          comm.transport().wait_until([] { return false; }, "ncclAllReduce");
        else
          comm.recv(b.view(), 0, 3);
      },
      0.3);
  CHECK(run.seconds < 10.0);  // the hang check's verdict (0.3 s of no progress), however loaded
  CHECK(run.exit_code == 3);
  CHECK_THAT(run.failure, Contains("r0 waits in ncclAllReduce for"));
  CHECK_THAT(run.failure, Contains("r1 waits in recv from r0 (tag 3, 4 B, f32)"));
}

TEST_CASE("threads: wait_until returns when ready and ends when another rank fails",
          "[transport]") {
  std::atomic<int> polls{0};
  auto run = test::run_ranks(2, [&](Comm& comm) {
    if (comm.rank() == 0) {
      comm.transport().wait_until([&] { return ++polls == 3; }, "three polls");
      comm.transport().wait_until([] { return false; }, "forever");  // r1 fails meanwhile
    } else {
      // r1 fails only once r0's first wait has returned: a failure any sooner would end that
      // wait too, and the test would race the scheduler.
      while (polls.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      throw Error("r1 gives up");
    }
  });
  CHECK(polls == 3);
  CHECK(run.failed);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.failure, Contains("r1 gives up"));
  CHECK(run.errors[0] == "aborted");
}
