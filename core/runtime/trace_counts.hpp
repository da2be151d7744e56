// trace_counts.hpp — what a run did, counted off the messages it recorded.
//
// The lessons check these counts against their formulas: steps, bytes one rank and all links
// carried, the busiest step, how many sends one rank had in flight at once, and the time spent
// in a named phase.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/runtime/runtime.hpp"

namespace distlab {

struct PeakBytes {
  std::uint64_t rank = 0;  // the most bytes one rank sent within one step
  std::uint64_t all = 0;   // the most bytes all ranks together sent within one step
};

struct StepCounts {
  std::vector<RankTraffic> ranks;  // per rank, within the steps counted
  int steps = 0;                   // distinct steps in which some message moved
  std::uint64_t max_sent = 0;      // bytes the busiest rank sent
  std::uint64_t all_links = 0;     // bytes all ranks sent
  std::uint64_t max_msgs = 0;      // messages the busiest rank sent
  PeakBytes peak;
  int in_flight = 0;   // most sends of one rank overlapping in time
  double seconds = 0;  // the longest any rank spent in the phase named
};

// Counts the messages of steps [first_step, last_step]; `phase` names the compute-lane span
// whose longest duration over the ranks is the time (empty: none).
StepCounts count_steps(const RunResult& run, int first_step, int last_step,
                       const std::string& phase = {});

// The duration of each compute-lane span named `phase` on `log`'s rank, in the order they ran,
// in seconds.
std::vector<double> phase_seconds(const RankLog& log, const std::string& phase);
// The middle of `values` (of an even count, the upper of the two middles); 0 for none.
double median(std::vector<double> values);

// The same run with only the messages of steps [first_step, last_step] (for print_schedule).
RunResult only_steps(const RunResult& run, int first_step, int last_step);

}  // namespace distlab
