// splits.hpp — a tensor-parallel layer's splits (otherData.splits, lessons 12 and 13) and which
// part of the layer runs at a moment. Plain C++ over TraceModel (no ImGui): the Splits panel
// (viewer/app/panel_splits.cpp) draws it, the tests check it.
//
// The lesson writes the layer as blocks in the order of the computation (docs/trace-format.md,
// "splits"), e.g. Megatron's MLP:
//   X -> f -> A (columns) -> X A_i -> GeLU -> B (rows) -> H_i B_i (partial) -> g -> Y
// Each weight names the compute phases that multiply by it (forward and backward), f and g the
// phases their all-reduces run in. splits_at() reads the compute spans covering a moment on
// every rank and says which blocks run, in which pass, and which are done.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "viewer/model/playback.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

enum class SplitBlockKind : std::uint8_t { activation, weight, f, g };
// none: every rank holds all of it; rows / columns / heads: each rank its range along `axis`;
// partial: every rank holds a partial sum of all of it (the input of g).
enum class SplitHow : std::uint8_t { none, rows, columns, heads, partial };
const char* to_string(SplitBlockKind k);
const char* to_string(SplitHow h);

struct SplitRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

struct SplitBlock {
  std::string name;
  SplitBlockKind kind = SplitBlockKind::activation;
  std::vector<std::int64_t> shape, rank_shape, head_shape;  // whole, one rank's, one head's
  SplitHow split = SplitHow::none;
  int axis = -1;                   // the dimension of `shape` the ranges cut; -1 when none
  std::vector<SplitRange> ranges;  // per rank, along axis (empty unless rows/columns/heads)
  std::vector<SplitRange> heads;   // per rank, its heads (empty when the tensor has none)
  std::string forward_phase, backward_phase;  // compute span names; "" for none
  std::string forward, backward;              // f and g: "identity" or "all-reduce"
  bool stack = false;                         // drawn under the block before it
  bool is_operator() const { return kind == SplitBlockKind::f || kind == SplitBlockKind::g; }
};

struct Splits {
  std::string layer, formula;  // "mlp", "Y = GeLU(X A + a) B + b"
  int ranks = 0;
  std::vector<SplitBlock> blocks;  // in the order of the computation
  int f = -1, g = -1;              // indices of the f and g blocks, -1 when absent
  std::string error;               // why the field was refused ("" when fine or absent)
  bool empty() const { return blocks.empty(); }
};

// Parses the raw JSON of otherData.splits. Never throws: a missing field gives an empty Splits,
// a malformed one an empty Splits with `error` set (shapes, ranges and counts are bounded, so
// a hostile trace cannot make the panel allocate or draw without end).
Splits parse_splits(std::string_view json);

// Where the layer's phases lie in the trace: for every block, the intervals of the compute
// spans named by its phases, per rank. Built once per model (Document::derived).
struct SplitsIndex {
  Splits splits;
  struct Interval {
    int block = 0, rank = 0;
    bool backward = false;
    double start = 0, end = 0;
  };
  std::vector<Interval> intervals;  // by start
};
SplitsIndex build_splits_index(const TraceModel& model);

// A pass of one block at a moment: no phase in that pass (f forward, g backward, activations),
// not reached yet, running on some rank, or over on every rank that ran it.
enum class PassState : std::uint8_t { none, pending, running, done };
const char* to_string(PassState s);

struct SplitsMoment {
  struct Block {
    PassState forward = PassState::none, backward = PassState::none;
    std::vector<bool> ranks;  // which ranks are in one of its phases now
    bool running() const { return forward == PassState::running || backward == PassState::running; }
    bool filled = false;  // an activation that holds its values (its producer has run)
  };
  std::vector<Block> blocks;  // parallel to Splits::blocks
  int active = -1;            // the running weight or operator most ranks are in; -1 when none
  bool backward = false;      // the pass `active` runs in
};
SplitsMoment splits_at(const SplitsIndex& index, const Moment& at);

}  // namespace distlab::viewer
