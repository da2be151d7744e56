// Lesson 02 — scatter and gather
//
// Concept: a root rank holds a buffer of L elements cut into N chunks. Scatter sends chunk i
// to rank i; each rank works on its own chunk; gather brings the chunks back to the root in
// rank order. This is how a parameter server hands out work and collects results.
//
// Cost of the linear algorithm (the root talks to one rank per step):
//   steps            N - 1 for scatter, N - 1 for gather
//   root traffic     (N-1)/N * L elements out (scatter) and in (gather)   -> O(N) in the world size
//   other ranks      L/N elements in (scatter) and out (gather)           -> O(1)
//
// Run:  ./distlab lesson 02                       4 in-process ranks, 1M float32 elements
//       ./distlab lesson 02 --ranks 3 --size 10   small: prints every step and every value
//       ./distlab lesson 02 --mpi 4               one process per rank; also checks MPI_Scatter/MPI_Gather
#include <fmt/format.h>
#include <Eigen/Core>

#include "core/base/units.hpp"
#include "core/collectives/baseline.hpp"
#include "core/collectives/gather.hpp"
#include "core/collectives/scatter.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"

using namespace distlab;

int main(int argc, char** argv) {
  Lesson lesson({"02", "scatter_gather",
                 "scatter a root's buffer in chunks, work on them, gather them back", 4, 1 << 20});
  lesson.set_text(
      "Scatter cuts the root's buffer into N chunks and sends chunk i to rank i; gather brings the "
      "chunks back in rank order. The root sends or receives (N-1)/N of the buffer, O(N) in the "
      "world size, while every other rank moves one chunk, O(1).",
      "Shards: after the scatter each rank holds exactly its own chunk; the gather fills the "
      "root's row cell by cell. Topology: every message starts or ends at the root.");
  int root = 0;
  lesson.add_root_option(root, "the rank that scatters and gathers");
  lesson.set_algorithm("linear");
  const auto& opt = lesson.options();

  // On rank 0 after the run: the schedule, the traffic, and the formulas checked against it.
  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    const std::uint64_t L = opt.size, esize = sizeof(float);
    const Partition part{L, n};
    fmt::print("\nscatter + gather of {} float32 ({}) over {} ranks, root r{}\n", L,
               format_bytes(double(L * esize)), n, root);
    print_schedule(r);
    print_traffic(r);
    // Formulas: scatter is steps 1 .. N-1, gather N .. 2N-2.
    const auto scatter = r.traffic(1, n - 1), gather = r.traffic(n, 2 * n - 2);
    const std::uint64_t root_out = (L - part.size(root)) * esize;
    fmt::print(
        "\nformula: the root sends (N-1)/N of the buffer in scatter and receives as much in "
        "gather\n");
    fmt::print("  root scatter out  {:>12}  formula {:>12}\n",
               format_bytes(double(scatter[root].bytes_sent)), format_bytes(double(root_out)));
    fmt::print("  root gather in    {:>12}  formula {:>12}\n",
               format_bytes(double(gather[root].bytes_recv)), format_bytes(double(root_out)));
    fmt::print("  steps             {:>12}  formula {:>12}\n", r.steps(), 2 * (n - 1));
    r.check("root scatter bytes = (L - L_root) * 4", scatter[root].bytes_sent == root_out);
    r.check("root gather bytes = (L - L_root) * 4", gather[root].bytes_recv == root_out);
    r.check("steps = 2(N-1)", r.steps() == 2 * (n - 1));
    for (int k = 0; k < n; ++k)
      if (k != root)
        r.check(fmt::format("r{} receives its chunk only", k),
                scatter[k].bytes_recv == part.size(k) * esize);
  });

  // Memory, counted from the buffers below: every rank its float64 copy of the root's input
  // (8 B per element) and its chunks (mine, the library's: 2 x 4 B per element / N); the root
  // also the whole input, the gathered result (4 B each) and the float64 want (8 B).
  lesson.needs_memory([&](const World& w) {
    const double L = double(lesson.options().size);
    return MemoryNeed{8 * L + 8 * L / w.size, 16 * L};
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    const int n = comm.size(), me = comm.rank();
    const std::size_t L = opt.size;
    const Partition part{
        L, n};  // chunk k is [part.begin(k), part.end(k)); sizes differ by at most one
    comm.declare_buffer("data", L, n);

    // STEP 1: the root fills its whole buffer; every rank gets room for its chunk.
    Buffer<float> whole = comm.alloc<float>(me == root ? L : 0, Category::data);
    if (me == root) fill_input(whole.view(), opt.seed, root);
    Buffer<float> mine = comm.alloc<float>(part.size(me), Category::data);

    // STEP 2: scatter. Rank k receives chunk k of the root's buffer.
    {
      auto phase = comm.phase("scatter");
      coll::scatter(comm, View<const float>(whole.view()), mine.view(), root);
    }

    // The independent reference: the root's input, made again here in float64 with Eigen.
    Eigen::VectorXd input(static_cast<Eigen::Index>(L));
    for (std::size_t i = 0; i < L; ++i)
      input[Eigen::Index(i)] = input_value<float>(opt.seed, root, i);
    const auto my_begin = Eigen::Index(part.begin(me)), my_size = Eigen::Index(part.size(me));

    if (comm.inject_fault()) inject_fault_into(mine.view());
    auto c = compare(View<const float>(mine.view()),
                     Eigen::VectorXd(input.segment(my_begin, my_size)), 0.0);
    comm.check("scatter: my chunk equals the root's chunk", c.ok, c.detail());

    // STEP 3: every rank works on its own chunk, with no communication: x -> (rank + 1) * x.
    {
      auto phase = comm.phase("scale chunk");
      ops::scale(mine.view(), static_cast<float>(me + 1));
    }

    // STEP 4: gather. The root receives chunk k from rank k, into place k.
    Buffer<float> result = comm.alloc<float>(me == root ? L : 0, Category::data);
    {
      auto phase = comm.phase("gather");
      coll::gather(comm, View<const float>(mine.view()), result.view(), root);
    }
    if (me == root) {
      Eigen::VectorXd want = input;
      for (int k = 0; k < n; ++k)
        want.segment(Eigen::Index(part.begin(k)), Eigen::Index(part.size(k))) *= (k + 1);
      // (k + 1) * x in float32 rounds once: allow one rounding, 2^-24 relative.
      auto g = compare(View<const float>(result.view()), want, std::ldexp(1.0, -24));
      comm.check("gather: root holds every rank's scaled chunk in rank order", g.ok, g.detail());
      if (L <= 16) {
        comm.say_on(root, "\nroot input : {}\n", fmt::join(to_host(whole.view()), " "));
        comm.say_on(root, "gathered   : {}   (chunk k scaled by k + 1)\n",
                    fmt::join(to_host(result.view()), " "));
      }
    }

    // STEP 5 (processes): MPI_Scatter / MPI_Gather, or Gloo's under --procs, must agree.
    if (baseline::available(comm)) {
      Buffer<float> lib_mine = comm.alloc<float>(part.size(me), Category::data);
      const std::string call =
          baseline::scatter(comm, whole.data(), lib_mine.data(), L, DType::f32, root);
      auto same = compare(View<const float>(lib_mine.view()),
                          Eigen::VectorXd(input.segment(my_begin, my_size)), 0.0);
      comm.check(call + " gives the same chunk", same.ok, same.detail());
      ops::scale(lib_mine.view(), static_cast<float>(me + 1));
      Buffer<float> lib_result = comm.alloc<float>(me == root ? L : 0, Category::data);
      const std::string gcall =
          baseline::gather(comm, lib_mine.data(), lib_result.data(), L, DType::f32, root);
      if (me == root)
        comm.check(gcall + " gives the same result",
                   to_host(lib_result.view()) == to_host(result.view()));
    }
  });
}
