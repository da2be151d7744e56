// Lesson 03 — reduce and broadcast
//
// Concept: gather brings every rank's data to the root side by side; reduce brings the same
// data but sums it as it arrives, so the root ends with one value where gather leaves N:
//   [1] [2] [3] [4]  --gather-->  [1, 2, 3, 4]        [1] [2] [3] [4]  --reduce-->  [10]
// Broadcast goes the other way: the root's buffer is copied to every rank. Together they are
// a parameter server's two moves: push & sum the gradients (reduce), replicate the new
// weights (broadcast). Here every rank has its own input of L float32; the root reduces them
// and broadcasts the sum back, so every rank ends holding the same sum.
//
// Cost of the linear algorithms (the root talks to one rank per step), buffers of 4L bytes:
//   steps            N - 1 for reduce, N - 1 for broadcast
//   root traffic     reduce: receives (N-1) * 4L bytes and adds N-1 buffers    -> O(N) in the world size
//                    broadcast: sends (N-1) * 4L bytes
//   other ranks      reduce: send 4L bytes; broadcast: receive 4L bytes         -> O(1)
// Unlike scatter and gather, which move 1/N of the buffer per message, every message here is
// a whole buffer: the root moves N - 1 times what any other rank moves.
//
// Run:  ./distlab lesson 03                       4 in-process ranks, 1M float32 per rank
//       ./distlab lesson 03 --ranks 5 --size 10   small: prints every step and every value
//       ./distlab lesson 03 --root 2              any rank can be the root
//       ./distlab lesson 03 --mpi 4               one process per rank; also checks MPI_Reduce/MPI_Bcast
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <Eigen/Core>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/base/units.hpp"
#include "core/collectives/baseline.hpp"
#include "core/collectives/broadcast.hpp"
#include "core/collectives/gather.hpp"
#include "core/collectives/reduce.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"

using namespace distlab;

int main(int argc, char** argv) {
  Lesson lesson({"03", "reduce_broadcast",
                 "reduce every rank's buffer to a root, broadcast the sum back", 4, 1 << 20});
  lesson.set_text(
      "Reduce brings every rank's buffer to the root and sums it as it arrives; broadcast copies "
      "the root's buffer to every rank. Together they are a parameter server's push & sum and "
      "replicate: the root moves N-1 whole buffers, every other rank one.",
      "Shards: the root's cells count contributions 1, 2, .., N during the reduce, then the "
      "broadcast hands the complete sum to every rank. Stats: the root's bytes are N-1 times any "
      "other rank's.");
  int root = 0;
  lesson.add_root_option(root, "the rank that reduces and broadcasts");
  lesson.set_algorithm("linear");
  lesson.add_break("reduce-forget-root",
                   "the root starts its sum from zero and leaves its own buffer out "
                   "(core/collectives/reduce.hpp)");
  const auto& opt = lesson.options();

  // On rank 0 after the run: the schedule, the traffic, and the formulas checked against it.
  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    const std::uint64_t L = opt.size, esize = sizeof(float), buf = L * esize;
    fmt::print("\nreduce + broadcast of {} float32 ({}) per rank over {} ranks, root r{}\n", L,
               format_bytes(double(buf)), n, root);
    print_schedule(r);
    print_traffic(r,
                  "traffic per rank, the whole run (the demo's one-value gather and reduce too)");

    // Step ids are handed out in call order, N - 1 per collective:
    //   demo gather 1 .. N-1, demo reduce N .. 2N-2, reduce 2N-1 .. 3N-3, broadcast 3N-2 .. 4N-4.
    const auto demo_gather = r.traffic(1, n - 1), demo_reduce = r.traffic(n, 2 * n - 2);
    const auto reduce = r.traffic(2 * n - 1, 3 * n - 3), bcast = r.traffic(3 * n - 2, 4 * n - 4);
    const std::uint64_t one = esize, per_peer = n - 1;

    fmt::print(
        "\nformula: gather and reduce of one value each move the same bytes; only the result "
        "differs\n");
    fmt::print("  demo gather  root in  {:>12}  formula {:>12}  (result: N values)\n",
               format_bytes(double(demo_gather[root].bytes_recv)),
               format_bytes(double(per_peer * one)));
    fmt::print("  demo reduce  root in  {:>12}  formula {:>12}  (result: 1 value)\n",
               format_bytes(double(demo_reduce[root].bytes_recv)),
               format_bytes(double(per_peer * one)));
    r.check("demo gather: root receives (N-1) * 4 bytes",
            demo_gather[root].bytes_recv == per_peer * one);
    r.check("demo reduce: root receives (N-1) * 4 bytes",
            demo_reduce[root].bytes_recv == per_peer * one);

    fmt::print(
        "\nformula: the root receives N-1 whole buffers in reduce and sends N-1 in broadcast\n");
    fmt::print("  reduce     root in    {:>12}  formula {:>12}\n",
               format_bytes(double(reduce[root].bytes_recv)), format_bytes(double(per_peer * buf)));
    fmt::print("  broadcast  root out   {:>12}  formula {:>12}\n",
               format_bytes(double(bcast[root].bytes_sent)), format_bytes(double(per_peer * buf)));
    fmt::print("  reduce     steps      {:>12}  formula {:>12}\n", reduce[root].steps, n - 1);
    fmt::print("  broadcast  steps      {:>12}  formula {:>12}\n", bcast[root].steps, n - 1);
    fmt::print("  all steps             {:>12}  formula {:>12}\n", r.steps(), 4 * (n - 1));
    if (n > 1)
      fmt::print(
          "  every other rank sends {} in reduce and receives {} in broadcast:\n"
          "  the root moves {}x as much\n",
          format_bytes(double(buf)), format_bytes(double(buf)), n - 1);
    // The same per rank, reduce and broadcast alone (the traffic table above adds the demo).
    fmt::print("\nreduce + broadcast alone, per rank (the demo left out):\n");
    fmt::print("  {:>4}  {:>12}  {:>12}  {:>12}  {:>12}  {:>5}\n", "rank", "reduce out",
               "reduce in", "bcast out", "bcast in", "steps");
    for (int k = 0; k < n; ++k)
      fmt::print("  {:>4}  {:>12}  {:>12}  {:>12}  {:>12}  {:>5}\n", fmt::format("r{}", k),
                 format_bytes(double(reduce[k].bytes_sent)),
                 format_bytes(double(reduce[k].bytes_recv)),
                 format_bytes(double(bcast[k].bytes_sent)),
                 format_bytes(double(bcast[k].bytes_recv)), reduce[k].steps + bcast[k].steps);
    r.check("reduce: root receives (N-1) * L * 4 bytes", reduce[root].bytes_recv == per_peer * buf);
    r.check("broadcast: root sends (N-1) * L * 4 bytes", bcast[root].bytes_sent == per_peer * buf);
    r.check("demo gather steps = N-1", demo_gather[root].steps == n - 1);
    r.check("demo reduce steps = N-1", demo_reduce[root].steps == n - 1);
    r.check("reduce steps = N-1", reduce[root].steps == n - 1);
    r.check("broadcast steps = N-1", bcast[root].steps == n - 1);
    r.check("steps = 4(N-1) in all", r.steps() == 4 * (n - 1));
    for (int k = 0; k < n; ++k)
      if (k != root) {
        r.check(fmt::format("r{} sends one buffer in reduce", k),
                reduce[k].bytes_sent == buf && reduce[k].bytes_recv == 0);
        r.check(fmt::format("r{} receives one buffer in broadcast", k),
                bcast[k].bytes_recv == buf && bcast[k].bytes_sent == 0);
      }
  });

  // Memory, counted from the buffers below: per rank input, total, the float32 exact sum, one
  // rank's regenerated input and the reduce's workspace (5 x 4 B per element), the float64 sum
  // (8 B), and as processes the library's copy (4 B): 32 B per element.
  lesson.needs_memory([&](const World&) {
    return MemoryNeed{32.0 * double(lesson.options().size), 0};
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    const int n = comm.size(), me = comm.rank();
    const std::size_t L = opt.size;
    comm.declare_buffer("demo gather", n, n);  // N slots, one per rank
    comm.declare_buffer("demo reduce", 1, n);  // one slot that every rank adds into
    comm.declare_buffer("data", L, n);

    // STEP 1: gather versus reduce on the smallest input: rank r holds the one value r + 1.
    Buffer<float> one = comm.alloc<float>(1, Category::data);
    from_host(one.view(), {static_cast<float>(me + 1)});
    Buffer<float> gathered = comm.alloc<float>(me == root ? n : 0, Category::data);
    Buffer<float> summed = comm.alloc<float>(me == root ? 1 : 0, Category::data);
    {
      auto phase = comm.phase("demo gather");
      coll::gather(comm, View<const float>(one.view()), gathered.view(), root, "demo gather");
    }
    {
      auto phase = comm.phase("demo reduce");
      coll::reduce(comm, View<const float>(one.view()), summed.view(), root, "demo reduce");
    }
    if (me == root) {
      // gather keeps every value in rank order; reduce keeps only their sum, N(N+1)/2.
      const Eigen::VectorXd want_gather = Eigen::VectorXd::LinSpaced(n, 1.0, double(n));
      const Eigen::VectorXd want_reduce = Eigen::VectorXd::Constant(1, want_gather.sum());
      auto g = compare(View<const float>(gathered.view()), want_gather, 0.0);
      auto s = compare(View<const float>(summed.view()), want_reduce, 0.0);
      comm.check("demo gather: the root holds [1, 2, .., N]", g.ok, g.detail());
      comm.check("demo reduce: the root holds [N(N+1)/2]", s.ok, s.detail());
      // The root holds the results, so the root prints them.
      if (n <= 16) {
        const std::string gs = fmt::format("[{}]", fmt::join(to_host(gathered.view()), ", "));
        const std::string rs = fmt::format("[{}]", fmt::join(to_host(summed.view()), ", "));
        const std::size_t w = std::max(gs.size(), rs.size());
        comm.say_on(root, "\nrank r holds [r + 1]; on the root r{}:\n", root);
        comm.say_on(root, "  gather -> {:<{}}   N values: the result grows with N\n", gs, w);
        comm.say_on(root, "  reduce -> {:<{}}   one value: summed as it arrives\n", rs, w);
      }
    }

    // STEP 2: every rank fills its own input of L elements; reduce sums them on the root.
    Buffer<float> input = comm.alloc<float>(L, Category::data);
    fill_input(input.view(), opt.seed, me);
    Buffer<float> total =
        comm.alloc<float>(L, Category::data);  // the sum on the root; room for it elsewhere
    {
      auto phase = comm.phase("reduce");
      coll::reduce(comm, View<const float>(input.view()), total.view(), root);
    }

    // The independent references, made again from the inputs on every rank:
    //   want   the float64 sum over ranks, with Eigen;
    //   exact  the float32 sum as the root forms it: its own buffer, then rank root+1, root+2, ...
    //          (mod N) added in turn. Float addition in a fixed order is deterministic, so this is
    //          the root's result bit for bit, and broadcast, which only copies, must deliver it.
    Eigen::VectorXd want = Eigen::VectorXd::Zero(Eigen::Index(L));
    Eigen::VectorXf exact = Eigen::VectorXf::Zero(Eigen::Index(L));
    for (int s = 0; s < n; ++s) {
      const int k = (root + s) % n;
      Eigen::VectorXf x(static_cast<Eigen::Index>(L));
      for (std::size_t i = 0; i < L; ++i) x[Eigen::Index(i)] = input_value<float>(opt.seed, k, i);
      want += x.cast<double>();
      if (s == 0)
        exact = x;
      else
        exact += x;
    }
    if (me == root) {
      // N float32 terms in [-1, 1) summed in another order than float64's: a few ulps per term.
      auto c = compare(View<const float>(total.view()), want, sum_tolerance(n));
      comm.check("reduce: the root holds the sum of every rank's input", c.ok, c.detail());
    }

    // STEP 3: broadcast. The root sends its sum to every rank, one whole buffer per step.
    {
      auto phase = comm.phase("broadcast");
      coll::broadcast(comm, total.view(), root, "data",
                      coll::all_ranks(n));  // the sum holds every rank's data
    }
    if (comm.inject_fault()) inject_fault_into(total.view());
    auto b = compare(View<const float>(total.view()), exact.cast<double>(), 0.0);
    comm.check("broadcast: my copy equals the root's sum exactly", b.ok, b.detail());
    if (L <= 16 && n <= 8) {
      comm.say("\n");
      for (int k = 0; k < n; ++k) {
        std::vector<float> x(L);
        for (std::size_t i = 0; i < L; ++i) x[i] = input_value<float>(opt.seed, k, i);
        comm.say("input of r{}        : {}\n", k, fmt::join(x, " "));
      }
      comm.say("sum, on every rank : {}\n", fmt::join(to_host(total.view()), " "));
    }

    // STEP 4 (processes): MPI_Reduce / MPI_Bcast, or Gloo's under --procs, must agree.
    if (baseline::available(comm)) {
      Buffer<float> lib_total = comm.alloc<float>(me == root ? L : 0, Category::data);
      const std::string call =
          baseline::reduce(comm, input.data(), lib_total.data(), L, DType::f32, root);
      if (me == root) {
        // MPI may add in another order: compare with the float64 sum, not bit for bit.
        auto c = compare(View<const float>(lib_total.view()), want, sum_tolerance(n));
        comm.check(call + " gives the same sum", c.ok, c.detail());
      }
      Buffer<float> lib_copy = comm.alloc<float>(L, Category::data);
      if (me == root) ops::copy(lib_copy.view(), View<const float>(total.view()));
      const std::string bcall = baseline::broadcast(comm, lib_copy.data(), L, DType::f32, root);
      comm.check(bcall + " gives the same copy", to_host(lib_copy.view()) == to_host(total.view()));
    }
  });
}
