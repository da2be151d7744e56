// failure_probe — a small program that goes wrong on purpose, so tests can watch distlab
// report it: a deadlock from a wrong send/recv order, an exception on one rank, a receive
// of the wrong size, a rank that throws with receives posted. Each must end every rank with a
// clear message and a non-zero exit. One scenario is valid and must verify: `slow`, where a
// rank waits longer than the timeout for a peer that computes while other ranks progress.
// Two concern nonblocking collectives (core/comm/async.hpp): `async`, valid, many all-reduces in
// flight at once, moved on while the ranks compute; `async-throw`, rank 1 throws while they are.
//
//   failure_probe --scenario wrong-order --deadlock-timeout 1     (threads; or under mpirun -n 2)
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/collectives/async.hpp"
#include "core/runtime/runtime.hpp"

using namespace distlab;

int main(int argc, char** argv) {
  Lesson lesson({"99", "failure_probe", "goes wrong on purpose (for the tests)", 2, 8});
  std::string scenario = "wrong-order";
  lesson.app()
      .add_option("--scenario", scenario,
                  "wrong-order | throw | throw-posted | size-mismatch | slow | async | async-throw")
      ->check(CLI::IsMember({"wrong-order", "throw", "throw-posted", "size-mismatch", "slow",
                             "async", "async-throw"}))
      ->capture_default_str();
  lesson.on_world([&](const World& w) {
    if (w.size < 2) throw UsageError("the probe needs at least 2 ranks");
    if (scenario == "slow" && w.size < 4)
      throw UsageError("--scenario slow needs at least 4 ranks");
  });
  return lesson.run(argc, argv, [&](Comm& comm) {
    const int me = comm.rank(), peer = me ^ 1;
    Buffer<float> out = comm.alloc<float>(lesson.options().size, Category::data);
    Buffer<float> in = comm.alloc<float>(lesson.options().size, Category::data);
    if (scenario == "slow") {
      // r0 waits for r1, which computes for 3 timeouts; r2 and r3 trade messages meanwhile.
      const double timeout = lesson.options().deadlock_timeout;
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::duration<double>(3 * timeout);
      if (me == 0) comm.recv(in.view(), 1, 1);
      if (me == 1) {
        std::this_thread::sleep_until(until);
        comm.send(View<const float>(out.view()), 0, 1);
      }
      if (me == 2 || me == 3) {
        auto flag = comm.alloc<std::int32_t>(1, Category::data);
        auto other = comm.alloc<std::int32_t>(1, Category::data);
        for (int round = 2;; ++round) {
          flag.host()[0] = std::chrono::steady_clock::now() < until;
          comm.sendrecv(View<const std::int32_t>(flag.view()), 5 - me, other.view(), 5 - me, round);
          if (!flag.host()[0] || !other.host()[0]) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
      comm.check("a slow peer is not a deadlock", true);
      return;
    }
    if (scenario == "async" || scenario == "async-throw") {
      // 20 all-reduces in flight at once (more than kAsyncSlots: contexts are reused), started
      // between stretches of "compute" that call progress; waited for newest first. Rank r
      // contributes (r + 1)(k + 1) to operation k: each sum is exact, (k + 1) N (N + 1) / 2.
      constexpr int kOps = 20;
      const int n = comm.size();
      std::vector<Buffer<float>> data;
      for (int k = 0; k < kOps; ++k) {
        data.push_back(comm.alloc_from(
            std::vector<float>(lesson.options().size, float((me + 1) * (k + 1))), Category::data));
      }
      std::vector<AsyncHandle> handles;
      for (int k = 0; k < kOps; ++k) {
        handles.push_back(coll::all_reduce_async(comm, data[std::size_t(k)].view(),
                                                 coll::AllReduceAlgo::ring_chunked));
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
        while (std::chrono::steady_clock::now() < until) comm.progress();
        if (scenario == "async-throw" && me == 1 && k == 5)
          throw Error("rank 1 threw with nonblocking all-reduces in flight");
      }
      for (int k = kOps - 1; k >= 0; --k) handles[std::size_t(k)].wait();
      bool ok = true;
      for (int k = 0; k < kOps; ++k)
        for (float x : to_host(data[std::size_t(k)].view()))
          ok = ok && x == float((k + 1) * n * (n + 1) / 2);
      comm.check("every nonblocking all-reduce gives the exact sum", ok);
      return;
    }
    if (peer >= comm.size()) return;
    if (scenario == "wrong-order") {
      // Both ranks receive first: each waits for a message the other has not sent yet.
      comm.recv(in.view(), peer, 7);
      comm.send(View<const float>(out.view()), peer, 7);
    } else if (scenario == "throw-posted") {
      // Rank 1 posts its receives and throws before waiting: its buffers are freed as it
      // unwinds, while rank 0's sends arrive. Nothing may be written into freed memory.
      if (me == 1) {
        auto a = comm.irecv(in.view(), 0, 7);
        auto b = comm.irecv(out.view(), 0, 8);
        throw Error("rank 1 threw with two receives posted");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      comm.send(View<const float>(out.view()), peer, 7);
      comm.send(View<const float>(in.view()), peer, 8);
    } else if (scenario == "throw") {
      if (me == 1) throw Error("rank 1 hit a failed check on purpose");
      comm.recv(in.view(), peer, 7);  // rank 0 would wait forever without the abort
    } else {
      if (me == 0)
        comm.send(View<const float>(out.view()), 1, 7);
      else
        comm.recv(in.sub(0, in.size() / 2), 0, 7);
    }
    comm.check("unreachable", false);
  });
}
