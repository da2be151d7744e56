// reader.hpp — reads a distlab trace back and checks its invariants.
//
// The tests use it on every lesson's trace; the viewer's trace model builds on the same
// format. check_invariants() returns one sentence per broken rule (empty when all hold):
//   - only X, s, f, C, i and M events, with integer pid and tid
//   - pids are 1..world_size and every rank has a process name
//   - no negative duration or timestamp
//   - every flow start has exactly one finish with the same id, no earlier than the start,
//     and every finish has its start
//   - a message's bytes are the same on the send span and on the deliver span
//   - spans on one (pid, tid) nest strictly and appear sorted by start
//   - a window access (cat "window", schema 4) is a "load" on a recv lane or a "store" on a send
//     lane, of a window some rank owns, with its bytes, and no message id
// and from schema 3 on, what Perfetto and chrome://tracing need to show the trace right:
//   - every flow's 's' binds (as Perfetto binds it: the deepest slice enclosing its ts on its
//     pid/tid; of two over the same interval, the one written second) to a slice of its
//     message that ends no later than the slice its 'f' binds to starts, and that one is the
//     message's deliver slice: arrows run forward in time
//   - the "memory" counter carries only its parts (no total_bytes to stack on them)
//   - a flat top-level "metadata" object without Catapult's reserved keys
//   - every rank has its own step instants ("s":"p") for the steps its messages (and window
//     accesses) belong to
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace distlab {

struct TraceSpan {
  std::size_t index = 0;  // position in traceEvents
  int pid = 0, tid = 0;
  std::string name, cat;
  double ts = 0, dur = 0;
  std::int64_t peer = -1, bytes = -1, tag = -1, step = -1, msg = 0;
  std::int64_t window = -1;  // a window access's owner (schema 4), -1 when absent
  std::string group;         // a message's group (Comm::split), "" for the world's
};

struct TraceFlow {
  std::size_t index = 0;  // position in traceEvents
  std::uint64_t id = 0;
  bool start = false;
  int pid = 0, tid = 0;
  double ts = 0;
};

// The memory ledger after a change. total_bytes: the args' total_bytes in traces before
// schema 3, else the sum of the parts (the "memory total" counter beside it holds the same).
struct TraceCounter {
  int pid = 0;
  double ts = 0;
  std::int64_t total_bytes = 0;
  bool total_arg = false;  // total_bytes was among the args (stacked on the parts)
};

// A lesson's value counter (a "C" event not named "memory": the training loss).
struct TraceValue {
  int pid = 0;
  double ts = 0;
  std::string name;
  double value = 0;
};

// A "step frame" instant (global), or a rank's own "step" instant ("s":"p").
struct TraceStep {
  int pid = 0;
  double ts = 0;
  std::int64_t step = 0;
};

struct LoadedTrace {
  int schema_version = 0;
  std::string lesson, algorithm, mode, device, transport;
  int world_size = 0;
  int ranks_per_node = 0;  // otherData.ranks_per_node; 0 when absent
  bool verified = false;
  std::int64_t checks = 0;
  std::vector<TraceSpan> spans;  // in file order
  std::vector<TraceFlow> flows;
  std::vector<TraceCounter> counters;  // the memory ledger's
  std::vector<TraceValue> values;
  std::vector<TraceStep> steps;       // global step frames
  std::vector<TraceStep> rank_steps;  // each rank's own step instants (schema 3)
  std::vector<int> named_pids;        // pids with a process_name
  // The top-level "metadata" object (schema 3): present, its keys, and whether every value is
  // a string, number or boolean.
  bool has_metadata = false, metadata_flat = true;
  std::vector<std::string> metadata_keys;
  std::vector<std::string> problems;  // rules broken while reading (bad phase, non-integer pid)
};

// Throws Error when the file cannot be read or is not a distlab trace.
LoadedTrace load_trace(const std::string& path);
LoadedTrace parse_trace(const std::string& json);

std::vector<std::string> check_invariants(const LoadedTrace& trace);

}  // namespace distlab
