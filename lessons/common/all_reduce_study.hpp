// all_reduce_study.hpp — what lessons 06, 07 and 15 share: several all-reduce algorithms run on
// the same inputs, each verified and timed, and the cost model's parameters to predict them.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/collectives/all_reduce.hpp"
#include "core/cost/calibration.hpp"
#include "core/cost/cost_model.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/trace_counts.hpp"

namespace distlab {

// Filled on rank 0 while the study runs.
struct AllReduceStudy {
  std::vector<std::pair<int, int>> step_range;  // each algorithm's step ids [first, last]
  std::vector<int> most_open_sends;             // rank 0's, per algorithm (StudyRank's)
  FoundCalibration calibration;                 // alpha and beta: lesson 01's file, or measured now
};

// The options lessons 06, 07 and 15 share, added to `lesson`: --algo (all, or one of `menu`) and
// --calibration (lesson 01's file). Once the world is known, `algos` holds the algorithms to
// run in `menu`'s order: library (MPI_Allreduce) only under mpirun, where it is also appended
// as the comparison; the trace names them. `number` is the lesson's, for the error sentences.
struct StudyOptions {
  std::string algo = "all";
  bool schedule = false;  // --schedule: every step's messages, whatever the size
  std::string calibration_path;
  std::vector<coll::AllReduceAlgo> algos;
  // Whether this run studies `a`.
  bool runs(coll::AllReduceAlgo a) const {
    return std::find(algos.begin(), algos.end(), a) != algos.end();
  }
};
void add_study_options(Lesson& lesson, StudyOptions& options,
                       const std::vector<coll::AllReduceAlgo>& menu);

// --algo `choice` resolved against `menu` (throws UsageError with a sentence); see above.
std::vector<coll::AllReduceAlgo> study_algos(const std::string& choice, bool under_mpi,
                                             const std::vector<coll::AllReduceAlgo>& menu,
                                             const std::string& number);

// One rank's part of the study: its input, the reference every result is checked against, and
// (under mpirun) MPI_Allreduce's result.
struct StudyRank {
  Buffer<float> input;    // this rank's L float32 (data.hpp)
  Eigen::VectorXd sum;    // the float64 sum of every rank's input, made here from the seed
  Buffer<float> mpi_sum;  // under mpirun: MPI_Allreduce of the inputs (checked against sum)
  bool tiny = false;      // L <= 16 and N <= 8: the values are printed
  std::size_t width = 0;  // the longest algorithm name, to align them
  // Per algorithm run, in order: the most sends this rank had posted and not yet waited for at
  // once in its traced run (Comm::take_most_open_sends).
  std::vector<int> most_open_sends;
};

// On every rank, before the algorithms: fill the input (printed when tiny), make the float64
// reference, check MPI_Allreduce against it under mpirun, and find alpha and beta for the
// predictions (lesson 01's file, or a short ping-pong now: find_or_measure_calibration).
StudyRank prepare_study(Comm& comm, const std::vector<coll::AllReduceAlgo>& algos,
                        std::size_t length, std::uint64_t seed, const std::string& calibration_path,
                        AllReduceStudy& study);

// On every rank, one algorithm: an untraced warm-up on a copy of the input (so the timed run
// finds its workspace allocated and the caches warm), a barrier, then the traced run in a phase
// named after the algorithm, reducing a logical buffer of that name; its result checked against
// the reference (and against MPI's under mpirun).
void run_study_algorithm(Comm& comm, StudyRank& rank, coll::AllReduceAlgo algo,
                         AllReduceStudy& study);

// On rank 0 after the run: the model's parameters for `bytes`-byte buffers. alpha and beta
// from the study's calibration (fixed defaults when there was none and no second rank), beta
// refitted on the large ping-pongs for buffers of 4 MiB and more, gamma timed now, and the
// ranks-per-core factor; `source` says where alpha and beta came from.
CostParams study_cost_params(const RunResult& run, const AllReduceStudy& study,
                             const std::string& calibration_path, std::uint64_t bytes);

// --- the report both lessons print on rank 0, around their own formulas ------------------------

// What a lesson's formula says one rank sends and receives in one all-reduce, in elements.
struct FormulaTraffic {
  std::uint64_t sent = 0, recv = 0;  // elements
  std::uint64_t msgs_sent = 0, msgs_recv = 0;
};

// The report's first lines: the buffer, the world, and which step ids each algorithm took.
void print_study_header(const RunResult& run, const std::vector<coll::AllReduceAlgo>& algos,
                        const AllReduceStudy& study, std::uint64_t length);

// Each algorithm's counts off the trace (its steps, and the time of the phase named after it),
// and the cost model's JSON entries: its prediction beside the measured time.
struct StudyCounts {
  std::vector<StepCounts> counts;  // one per algorithm, in `algos`' order
  std::string predictions;         // "name":{"predicted_s":..,"measured_s":..},...
};
StudyCounts count_study(const RunResult& run, const std::vector<coll::AllReduceAlgo>& algos,
                        const AllReduceStudy& study, const CostParams& cp, std::uint64_t bytes);

// Checks every rank's bytes and messages sent and received, and the bytes all links carry,
// against `formula(k)` for rank k (elements of `element_bytes` bytes). `links` is the formula of
// all links in symbols, for the check's name.
void check_rank_formulas(RunResult& run, const std::string& name, const StepCounts& counts,
                         const std::function<FormulaTraffic(int)>& formula,
                         std::uint64_t element_bytes, const std::string& links);

// otherData.cost_model: the model's parameters for `bytes`-byte buffers on `ranks` ranks, and
// count_study's predictions.
std::string study_cost_model_json(const CostParams& cp, std::uint64_t bytes, int ranks,
                                  const std::string& predictions);

// The time table: each algorithm's measured time, the model's prediction and their ratio, the
// model's parameters and where they came from, the ranking by each (fastest first) and whether
// they agree, and when in-process ranks outnumber the cores, that the times measure the sharing.
void print_times(RunResult& run, const std::vector<coll::AllReduceAlgo>& algos,
                 const std::vector<StepCounts>& counts, const CostParams& cp, std::uint64_t bytes);

// In a simulated run (cp.network): each algorithm's simulated time against the model, a check
// within 10% for buffers of 1 MiB and more on a platform whose routes are all alike (one
// switch); otherwise a line that says why it is only a report.
void check_simulated_times(RunResult& run, const std::vector<coll::AllReduceAlgo>& algos,
                           const std::vector<StepCounts>& counts, const CostParams& cp,
                           std::uint64_t bytes);

// The world sizes of the scaling table: `sizes`, and this run's N among them.
std::vector<int> scaling_sizes(std::vector<int> sizes, int n);

// One run of the scaling table: `algo` on a fresh in-process world of `ranks` ranks, `length`
// float32 each (`seed`'s inputs), in a phase named "scaling"; its counts.
StepCounts scaling_counts(coll::AllReduceAlgo algo, int ranks, std::uint64_t length,
                          std::uint64_t seed);

// x in units of S: "0", or "1.5 S".
std::string in_units_of_s(double x);

}  // namespace distlab
