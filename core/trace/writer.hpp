// writer.hpp — merges every rank's log into one Chrome Trace Event JSON file.
//
// pid = rank + 1; tids are lanes (1 compute, 2 send, 3 recv; overlapping spans move to
// sub-lanes 11, 12, 13, 21, ...); one flow s -> f per message, from a short "post" slice at
// the send's start to a short "deliver" slice at the receive's end; C counters for the memory
// ledger's parts and its total; global "step frame" instants and each rank's own "step"
// instants; otherData with the lesson's metadata and its verification result, and the same
// facts flat in a top-level "metadata" object. docs/trace-format.md is the reference.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/base/world.hpp"
#include "core/trace/recorder.hpp"

namespace distlab {

struct TraceInfo {
  std::string lesson;     // "02_scatter_gather"
  std::string title;      // one line
  std::string algorithm;  // e.g. "linear"
  World world;            // size, mode, device, transport
  // Extra otherData fields: key and an already-encoded JSON value.
  std::vector<std::pair<std::string, std::string>> parameters;
  std::vector<std::pair<std::string, std::string>> metadata;
  bool verified = false;
  double wall_seconds = 0;
  std::string cost_model = "null";  // JSON: the cost model's prediction when the lesson has one
};

// The whole trace as a JSON string.
std::string trace_json(const TraceInfo& info, const std::vector<RankLog>& logs);

// Writes trace_json to path (creating parent directories); throws Error when it cannot.
void write_trace(const std::string& path, const TraceInfo& info, const std::vector<RankLog>& logs);

}  // namespace distlab
