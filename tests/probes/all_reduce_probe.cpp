// all_reduce_probe — every all-reduce algorithm, one after another, on the same float32 input,
// each checked against the float64 Eigen sum. A test program, not a lesson: it runs the
// algorithms on the real transports (in-process ranks, and one process per rank under
// mpirun, where MPI_Allreduce is checked too) and writes one trace with all of them.
//
//   all_reduce_probe --ranks 6 --size 1000          in-process ranks
//   mpiexec -n 3 all_reduce_probe --size 7          one process per rank, plus MPI_Allreduce
//   all_reduce_probe --ranks 7 --split 3            on groups: rank r in group r % 3 (sizes 3,
//                                                   2, 2), ordered backwards (Comm::split)
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <Eigen/Core>

#include <optional>

#include "core/collectives/all_reduce.hpp"
#include "core/collectives/baseline.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"

using namespace distlab;

int main(int argc, char** argv) {
  Lesson lesson({"98", "all_reduce_probe", "every all-reduce algorithm against a float64 reference",
                 4, 1000});
  lesson.set_algorithm("all");
  int groups = 0;
  lesson.app()
      .add_option("--split", groups,
                  "run on K groups (Comm::split): rank r in group r % K, keys backwards; 0: the "
                  "world")
      ->check(CLI::Range(0, 1 << 20));
  const auto& opt = lesson.options();

  return lesson.run(argc, argv, [&](Comm& world) {
    // With --split, every algorithm runs on this rank's group: its ranks and peers are the
    // group's, its sum the group's members' inputs (by world rank).
    std::optional<Comm> group;
    if (groups > 0) {
      group.emplace(world.split(world.rank() % groups, world.size() - world.rank(), "group"));
      world.say("groups of ranks r % {}, in reverse rank order\n", groups);
    }
    Comm& comm = group ? *group : world;
    const int n = comm.size(), me = comm.world_rank(comm.rank());
    const std::size_t L = opt.size;

    // The reference, from every member's input in float64: never from an algorithm's output.
    Eigen::VectorXd sum = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(L));
    for (int k = 0; k < n; ++k)
      for (std::size_t i = 0; i < L; ++i)
        sum[static_cast<Eigen::Index>(i)] +=
            static_cast<double>(input_value<float>(opt.seed, comm.world_rank(k), i));

    Buffer<float> data = comm.alloc<float>(L, Category::data);
    for (coll::AllReduceAlgo algo : coll::all_reduce_algos()) {
      if (algo == coll::AllReduceAlgo::library && !baseline::available(comm)) continue;
      const std::string name = coll::to_string(algo);
      fill_input(data.view(), opt.seed, me);
      comm.barrier();
      {
        auto phase = comm.phase(name);
        coll::all_reduce(comm, data.view(), algo, name);  // one logical buffer per algorithm
      }
      if (world.inject_fault() && L > 0) data[0] += 1.0f;
      const auto c = compare(View<const float>(data.view()), sum, sum_tolerance(n));
      comm.check(fmt::format("{}: I hold the sum", name), c.ok, c.detail());
      world.say("{:<20} {}\n", name, c.detail());
    }
  });
}
