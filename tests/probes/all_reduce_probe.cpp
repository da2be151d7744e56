// all_reduce_probe — every all-reduce algorithm, one after another, on the same float32 input,
// each checked against the float64 Eigen sum. A test program, not a lesson: it runs the
// algorithms on the real transports (in-process ranks, and one process per rank under
// mpirun, where MPI_Allreduce is checked too) and writes one trace with all of them.
//
//   all_reduce_probe --ranks 6 --size 1000          in-process ranks
//   mpiexec -n 3 all_reduce_probe --size 7          one process per rank, plus MPI_Allreduce
#include <fmt/format.h>
#include <Eigen/Core>

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
  const auto& opt = lesson.options();

  return lesson.run(argc, argv, [&](Comm& comm) {
    const int n = comm.size(), me = comm.rank();
    const std::size_t L = opt.size;

    // The reference, from every rank's input in float64: never from an algorithm's output.
    Eigen::VectorXd sum = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(L));
    for (int k = 0; k < n; ++k)
      for (std::size_t i = 0; i < L; ++i)
        sum[static_cast<Eigen::Index>(i)] +=
            static_cast<double>(input_value<float>(opt.seed, k, i));

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
      if (comm.inject_fault() && L > 0) data[0] += 1.0f;
      const auto c = compare(View<const float>(data.view()), sum, sum_tolerance(n));
      comm.check(fmt::format("{}: I hold the sum", name), c.ok, c.detail());
      comm.say("{:<20} {}\n", name, c.detail());
    }
  });
}
