// shard_replay.hpp — which chunks of each declared buffer every rank holds at a moment of a
// trace, and whose data is in them: the messages of a loaded trace (trace_model.hpp) replayed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

// Shards: which chunks of each declared buffer every rank holds, and whose data is in them.
//
// Replay rule (derived from the messages, no lesson-specific code):
//   * A buffer that any message reduces into (apply = reduce) is all-reduce style: at the start
//     every rank holds every chunk with only its own contribution.
//   * Any other buffer (copy only: scatter, gather, broadcast, all-gather) starts with rank r
//     holding chunk c when r sends c before it first receives it (a rank that receives c first,
//     as in a scatter, holds nothing of it until then); such a chunk starts with the mask of
//     the first message r sends of it, else with r alone. In a buffer cut into one chunk per rank,
//     a chunk that no message carries starts at its own rank (chunk c at rank c, c's data):
//     the piece a scatter's or a gather's root keeps for itself. Every other chunk starts empty.
//   * Messages are applied in (step, arrival) order to the receiver's chunks
//     [chunk, chunk_end) (the whole buffer when the message names no chunk): copy makes the
//     chunk held and replaces its mask; reduce makes it held and ORs the incoming mask in.
//   * Messages without a step or naming an undeclared buffer are not replayed.
//   * Training steps (train_steps.hpp: phases with op "train step") start over: at a moment in
//     training step k only the messages from k's first step on are applied to the initial
//     state, so a buffer reduced every iteration shows the current iteration's exchange.
//   * A buffer of more than 2^24 cells (ranks x chunks) is not replayed: its BufferState has
//     0 chunks and no cells.
// Contributions are a bit mask (worlds up to 64 ranks); past 64 ranks the count is kept from
// the messages' `contributions` (copy: replaced, reduce: added, capped at the world size).
struct ChunkState {
  bool held = false;
  std::uint64_t mask = 0;
  int count = 0;  // ranks whose data is in the chunk
};

struct BufferState {
  std::string name;
  int chunks = 0;
  std::vector<ChunkState> cells;  // (ranks x chunks), row-major: cells[rank * chunks + chunk]
  const ChunkState& at(int rank, int chunk) const {
    return cells[static_cast<std::size_t>(rank) * chunks + chunk];
  }
  ChunkState& at(int rank, int chunk) {
    return cells[static_cast<std::size_t>(rank) * chunks + chunk];
  }
};

struct ShardState {
  int step = 0;                      // messages with step <= this have been applied
  int train_step = -1;               // the training step replayed (0-based), -1 when none
  std::vector<BufferState> buffers;  // in the order of TraceMeta::buffers
};

// The replay prepared once for a model: the initial state, the messages in step order and in
// arrival order, the training steps. Each moment then costs one pass over the messages it
// applies, not a sort of all of them (the viewer keeps one per document; Document::shards).
// It points into the model's messages: the model must outlive it.
class ShardReplay {
 public:
  explicit ShardReplay(const TraceModel& model);
  ShardState at_step(int step) const;     // as state_at_step
  ShardState at_time(double t_us) const;  // as state_at_time

  struct Data;  // shard_replay.cpp

 private:
  std::shared_ptr<const Data> data_;
};
ShardReplay prepare_shard_replay(const TraceModel& model);  // for Document::derived

// After every message with step <= `step` has been applied (step 0: the initial state).
ShardState state_at_step(const TraceModel& model, int step);
// After every replayable message that arrived at or before `t_us` has been applied.
ShardState state_at_time(const TraceModel& model, double t_us);

}  // namespace distlab::viewer
