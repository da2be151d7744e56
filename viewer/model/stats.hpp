// stats.hpp — the numbers the Stats panel shows, computed from the trace model (no ImGui).
//
//   traffic     bytes and messages per directed link and per rank; bytes loaded and stored
//               through symmetric windows per rank
//   cost model  otherData.cost_model parsed: alpha, beta, gamma, and per algorithm the
//               predicted and measured seconds (lessons 06 and 07 write it)
//   operations  one row per buffer the trace declares: what collective it turned out to be
//               (read off the shard replay, no lesson-specific code), its size, its time,
//               and the bandwidths nccl-tests reports:
//                 algbw = S / t                      (S: the buffer's size in bytes)
//                 busbw = algbw * factor             (factor: what each rank's link must carry
//                                                     relative to S, so busbw compares with
//                                                     the link's peak whatever the algorithm)
//               factors (nccl-tests doc/PERFORMANCE.md): all-reduce 2(n-1)/n; all-gather,
//               reduce-scatter, gather, scatter, all-to-all (n-1)/n; broadcast, reduce 1.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "viewer/model/playback.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

// ---- traffic --------------------------------------------------------------------------------

struct RankTraffic {
  std::int64_t bytes_sent = 0, bytes_recv = 0;
  int messages_sent = 0, messages_recv = 0;
};

// Every message of the trace, summed per directed link (src, dst), sorted by (src, dst).
// Messages without both ends are left out; unknown sizes count as 0 bytes (as link_traffic).
std::vector<LinkTraffic> link_totals(const TraceModel& model);
// Per rank, the links' bytes and messages: sent on links leaving it, received on links into it.
std::vector<RankTraffic> rank_totals(const std::vector<LinkTraffic>& links, int ranks);

// Per group: the messages a trace's groups carried (the message arg `group`, Comm::split's name:
// lesson 14's "dp", "pp", "tp"), whole trace, sorted by name; the world's messages (no group)
// are the entry with group 0 when there are any. Empty when no message names a group.
struct GroupTraffic {
  std::uint32_t group = 0;  // string table index; 0: the world's
  std::int64_t bytes = 0;
  int messages = 0;
};
std::vector<GroupTraffic> group_totals(const TraceModel& model);
// The group of each unordered pair of ranks (a < b) that exchange messages: the one that carried
// most of its bytes (its most messages on a tie, then the first by name); 0 for the world's.
std::map<std::pair<int, int>, std::uint32_t> pair_groups(const TraceModel& model);

// Per rank: the bytes it loaded from and stored to symmetric windows (schema 4's window accesses,
// its own window's included), whole trace; apart from the messages, which they never are. Empty
// when the trace has no window access; unknown sizes count as 0 bytes.
struct WindowTraffic {
  std::int64_t bytes_loaded = 0, bytes_stored = 0;
  int loads = 0, stores = 0;
};
std::vector<WindowTraffic> window_totals(const TraceModel& model);

// ---- cost model -----------------------------------------------------------------------------

struct AlgorithmCost {
  std::string name;
  double predicted_s = -1, measured_s = -1;  // -1 when absent
};

struct CostModel {
  bool present = false;  // false for null, a non-object, or text that is not JSON
  std::string model, source;
  std::string collective;  // "collective" when a lesson names it, else ""
  double alpha_s = -1, beta_s_per_byte = -1, gamma_s_per_byte = -1;
  double bytes = 0;  // S, the buffer's size
  int ranks = 0;
  std::vector<AlgorithmCost> algorithms;  // in the trace's order
  const AlgorithmCost* find(std::string_view name) const;
};

CostModel parse_cost_model(std::string_view json);

// ---- operations and bandwidth ---------------------------------------------------------------

enum class Pattern : std::uint8_t {
  unknown,
  all_reduce,
  reduce_scatter,
  all_gather,
  reduce,
  broadcast,
  gather,
  scatter,
  all_to_all,  // a real run's (pytorch_trace.hpp); a lesson's buffers are never classified so
  send_recv    // a real run's matched send and receive (pipeline parallelism)
};
const char* to_string(Pattern p);              // "all-reduce", ...; "?" for unknown
Pattern parse_pattern(std::string_view name);  // "allreduce", "all_reduce", "all-reduce", ...
double bus_factor(Pattern p, int ranks);       // 0 for unknown

// What a buffer's messages did, from its state before its first message and after its last:
//   reduced into   every rank ends with every chunk complete (all n contributions): all-reduce;
//                  one rank does: reduce; each chunk complete on exactly one rank and every rank
//                  completes one: reduce-scatter
//   copies only    one rank held everything and at the end every rank does: broadcast; each
//                  rank held its own piece and at the end every rank holds all: all-gather; one
//                  rank does: gather; one rank held everything and every rank ends with a piece:
//                  scatter
// Anything else (several collectives on one buffer, a point-to-point exchange) is unknown.
Pattern classify_buffer(const BufferState& before, const BufferState& after, bool reduced,
                        int ranks);

struct OperationStats {
  std::string name;  // the buffer's name (lessons 06-07: the algorithm's)
  Pattern pattern = Pattern::unknown;
  int messages = 0;
  std::int64_t bytes_moved = 0;  // summed over every link
  int first_step = -1, last_step = -1;
  double bytes = 0;                  // S: the cost model's, else from the messages' sizes
  double measured_s = -1;            // the cost model's, else first send .. last arrival
  bool measured_from_trace = false;  // true when measured_s is the trace's span
  double predicted_s = -1;           // the cost model's, -1 when none

  double algbw() const { return measured_s > 0 && bytes > 0 ? bytes / measured_s : -1; }
  double busbw(int ranks) const {
    const double f = bus_factor(pattern, ranks);
    return f > 0 && algbw() > 0 ? algbw() * f : -1;
  }
};

// One row per declared buffer with messages, then the cost model's algorithms no buffer
// matches (their pattern from cost.collective).
std::vector<OperationStats> operation_stats(const TraceModel& model, const CostModel& cost);

// 1.5e9 -> "1.50 GB/s" (decimal units, as nccl-tests prints bandwidth); "" when negative.
std::string format_bandwidth(double bytes_per_s);

}  // namespace distlab::viewer
