// real_run.hpp — what a real run's trace says about its collectives (pytorch_trace.hpp loads
// it): per call, each rank's time in it and who the others waited for; per rank, its waits and
// the waits it caused, and how much of its communication ran under computation. The Stats panel
// draws it, `distlab-viewer --describe` prints it, `--report` prints it as a table and CSV.
//
// Per matched call (the clocks aligned):
//   arrival      the start of a rank's span of the call; the last rank to arrive is the
//                straggler when it came later than the clocks' error after the first (else
//                the ranks arrived together as far as the trace can tell), and every other
//                rank waits (last arrival - its own arrival)
//   transfer     the straggler's own time in the call: from the moment every rank was in to
//                its end, the time the data took to move (nccl-tests times a collective whose
//                ranks start together)
//   bandwidth    where the trace gives the size S (pytorch_trace.hpp "sizes"): algbw = S /
//                transfer and busbw = algbw x nccl-tests' factor for the collective and the
//                call's ranks (stats.hpp: bus_factor). No size: no bandwidth, and the report
//                says so
// Per rank:
//   waited       the sum of its waits for the others
//   caused       the sum, over the calls it arrived at last, of every other rank's wait: the
//                time the run lost to it. The slowest rank causes the most
//   overlap      communication = the union of its calls' spans; computation = the union of its
//                innermost spans that are not communication (the leaves of each lane: aten::mm,
//                a kernel; their parents, ProfilerStep#3 and the like, would count the waits
//                as work), on its GPU streams when it has any (the CPU only launches there),
//                else on all its lanes; hidden = communication under computation, exposed =
//                the rest (what HTA calls its communication-computation overlap)
#pragma once

#include <string>
#include <vector>

#include "viewer/model/stats.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

struct CallStats {
  int call = 0;  // index into TraceModel::collectives
  Pattern pattern = Pattern::unknown;
  std::vector<double> arrival, dur, wait;  // per rank, microseconds; -1 where it has no span
  int last_rank = -1;                      // the last to arrive
  // Whether last_rank is the call's straggler: it arrived later than the clocks' error
  // (info.clock_error_us, and at least a nanosecond, the finest time a trace writes) after the
  // first; else the ranks came in together, as far as the trace can tell, and nobody is blamed.
  bool straggler = true;
  double caused_us = 0;           // the others' waits, summed
  double max_wait_us = 0;         // the longest wait: the straggler's lateness
  double transfer_us = 0;         // the straggler's time in the call
  double algbw = -1, busbw = -1;  // bytes per second; -1 when S is unknown
  double exposed_us = 0;          // the ranks' mean time in the call not under computation
};

// The calls of one phase (pytorch_trace.hpp "phase": forward, backward, optimizer, other).
struct PhaseStats {
  std::string name;
  int calls = 0, sized_calls = 0;
  std::int64_t bytes = 0;  // S summed over the calls whose size is known
  double time_us = 0;      // summed over calls: the ranks' mean time in each
  double exposed_us = 0;   // summed over calls: the mean part of that not under computation
};

struct RankRunStats {
  int calls = 0;
  double comm_us = 0, waited_us = 0, caused_us = 0;
  int last_arrivals = 0;
  double hidden_us = 0;  // communication under computation
  double exposed_us() const { return comm_us - hidden_us; }
};

struct RealRun {
  bool present = false;          // a PyTorch run (info.source), with at least one matched call
  std::vector<CallStats> calls;  // in model.collectives' order
  std::vector<RankRunStats> ranks;
  int slowest_rank = -1;    // the rank that caused the most waiting; -1 when none did
  int sized_calls = 0;      // calls whose size the trace gives
  int hang_calls = 0;       // calls some rank never made while its trace ran on past them
  int partial_calls = 0;    // calls missing from some rank's window or dropped from its trace
  int no_kernel_calls = 0;  // calls some rank kept from its CPU side: no kernel in the window
  // Calls with more ranks than their group's size: groups the trace neither names nor lists
  // (record_param_comms' pointers only) are keyed by size, and two groups of one size (tensor
  // parallel 4 x data parallel 2) fall together.
  int merged_group_calls = 0;
  std::vector<PhaseStats> phases;  // in order of first appearance
  bool gpu = false;                // computation read from GPU streams
};

RealRun analyze_real_run(const TraceModel& model);

// The calls, worst first: by the time they lost to waiting (caused_us), then by transfer time.
std::vector<int> worst_calls(const RealRun& run);

// The caption of call k's step: "all-reduce #3: rank 3 arrives last, 61 ms after the first;
// the others wait 150 ms in all; transfer 1.2 ms; 256 KiB, busbw 1.2 GB/s".
std::string call_caption(const TraceModel& model, const RealRun& run, int k);
// Call k rank by rank, for --describe: each rank's arrival after the first, its wait and its
// time in the call ("" when k is no call).
std::string describe_call(const TraceModel& model, const RealRun& run, int k);

// "all-reduce #3 (group 0)": a call's name, order and group.
std::string call_label(const TraceModel& model, const CollectiveCall& call);

// The text `--describe` adds for a real run: where ranks and clocks came from, the slowest
// rank, the worst calls, every rank's waits and overlap. Several lines, each ending in '\n'.
std::string describe_real_run(const TraceModel& model, const RealRun& run);
// `--report`: one line per call, then one per rank (fixed-width columns).
std::string real_run_table(const TraceModel& model, const RealRun& run);
// `--csv`: one row per call and rank, a header first.
std::string real_run_csv(const TraceModel& model, const RealRun& run);

}  // namespace distlab::viewer
