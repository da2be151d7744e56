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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distlab {

struct TraceSpan {
  int pid = 0, tid = 0;
  std::string name, cat;
  double ts = 0, dur = 0;
  std::int64_t peer = -1, bytes = -1, tag = -1, step = -1, msg = 0;
};

struct TraceFlow {
  std::uint64_t id = 0;
  bool start = false;
  int pid = 0, tid = 0;
  double ts = 0;
};

struct TraceCounter {
  int pid = 0;
  double ts = 0;
  std::int64_t total_bytes = 0;
};

// A lesson's value counter (a "C" event not named "memory": the training loss).
struct TraceValue {
  int pid = 0;
  double ts = 0;
  std::string name;
  double value = 0;
};

struct TraceStep {
  int pid = 0;
  double ts = 0;
  std::int64_t step = 0;
};

struct LoadedTrace {
  int schema_version = 0;
  std::string lesson, algorithm, mode, device, transport;
  int world_size = 0;
  bool verified = false;
  std::int64_t checks = 0;
  std::vector<TraceSpan> spans;  // in file order
  std::vector<TraceFlow> flows;
  std::vector<TraceCounter> counters;  // the memory ledger's
  std::vector<TraceValue> values;
  std::vector<TraceStep> steps;
  std::vector<int> named_pids;        // pids with a process_name
  std::vector<std::string> problems;  // rules broken while reading (bad phase, non-integer pid)
};

// Throws Error when the file cannot be read or is not a distlab trace.
LoadedTrace load_trace(const std::string& path);
LoadedTrace parse_trace(const std::string& json);

std::vector<std::string> check_invariants(const LoadedTrace& trace);

}  // namespace distlab
