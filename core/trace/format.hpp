// format.hpp — the trace format's vocabulary, spelled once for the writer, the reader and the
// viewer: the schema version, the lanes of a rank and their tids, and the memory ledger's
// categories and their names. docs/trace-format.md is the reference for the whole file.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace distlab {

// 2: otherData.text (the lesson's concept and what to look at) and otherData.memory_formula.
// 3: phase args on compute spans (op, micro, stage, text), the lesson's own otherData fields
//    for the viewer's lesson pictures (roles, splits, zero), and the Perfetto / Catapult
//    fixes of docs/trace-format.md "Versions".
// 4: window accesses: a rank's loads from and stores to a symmetric window ("load" / "store"
//    slices, cat "window", arg `window` the owner's rank), with no flow and no message.
// Readers take every version up to theirs.
inline constexpr int kTraceSchemaVersion = 4;

// Lanes of a rank in the trace (tids). Overlapping spans on one lane go to sub-lanes.
// gpu: when the rank's GPU did the work (CUDA events on the host clock, device_timing.hpp).
enum class Lane : std::uint8_t { compute = 0, send = 1, recv = 2, gpu = 3 };
inline constexpr int kLanes = 4;

// A lane's tid: 1 compute, 2 send, 3 recv, 4 gpu; sub-lane k of it is that plus 10 k.
constexpr int lane_base_tid(Lane lane) {
  return static_cast<int>(lane) + 1;
}
constexpr int sub_lane_tid(Lane lane, int k) {
  return lane_base_tid(lane) + 10 * k;
}

// Memory ledger categories (memory_ledger.hpp); one counter series each in the trace, named
// "<name>_bytes" in the memory counter's args.
enum class Category : std::uint8_t { params, grads, optimizer, activations, comm, data };
inline constexpr int kCategories = 6;
inline constexpr std::array<const char*, kCategories> kCategoryNames = {
    "params", "grads", "optimizer", "activations", "comm", "data"};
constexpr const char* to_string(Category c) {
  return kCategoryNames[static_cast<int>(c)];
}

// The phase op that marks one training step (iteration) of a training lesson, around the
// whole iteration on every rank: the viewer starts its shard replay over at each.
inline constexpr const char* kTrainStepOp = "train step";

// The group name of a nonblocking operation's messages (core/comm/async.hpp): "async k", or
// "<group> async k" when started on a group's Comm. The viewer's overlap counter counts these:
// only a nonblocking operation's messages can be in flight while the rank computes.
inline constexpr const char* kAsyncGroup = "async";
constexpr bool is_async_group(std::string_view name) {
  const std::string_view word = kAsyncGroup;
  const std::size_t at = name.rfind(word);
  if (at == std::string_view::npos || (at > 0 && name[at - 1] != ' ')) return false;
  std::size_t i = at + word.size();
  if (i >= name.size() || name[i] != ' ' || i + 1 == name.size()) return false;
  for (++i; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

}  // namespace distlab
