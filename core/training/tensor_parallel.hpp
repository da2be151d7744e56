// tensor_parallel.hpp — what lessons 12 (MLP) and 13 (attention) share: Megatron's operators f
// and g (Shoeybi et al., 2019), the tensors every rank can make from the seed, the checks of a
// split layer against its unsplit float64 reference, and the report of its communication.
//
//   f   forward: identity (every rank already holds X)     backward: all-reduce of dL/dX
//   g   forward: all-reduce of the partial outputs Y_i     backward: identity (dL/dY is everyone's)
// A block split the Megatron way (columns first, rows second) needs one g and one f: one
// all-reduce in each direction, of the block's input size (rows x hidden).
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/base/partition.hpp"
#include "core/comm/comm.hpp"
#include "core/runtime/runtime.hpp"

namespace distlab::tp {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A (rows, cols) matrix of data.hpp values in [-1, 1) times `scale`, the same on every rank:
// `stream` tells the tensors apart (X, A, B, dY ...).
std::vector<float> make_tensor(std::uint64_t seed, int stream, std::size_t rows, std::size_t cols,
                               double scale = 1);
RowMatrix as_matrix(const std::vector<float>& v, std::size_t rows, std::size_t cols);
// Columns [c0, c0 + count) of a (rows, cols) row-major matrix.
std::vector<float> columns(const std::vector<float>& m, std::size_t rows, std::size_t cols,
                           std::size_t c0, std::size_t count);
// Rows [r0, r0 + count) of a row-major (rows x cols) matrix (a row split, as B's).
std::vector<float> rows(const std::vector<float>& m, std::size_t cols, std::size_t r0,
                        std::size_t count);

// The phases g's and f's all-reduces run in (the trace's compute spans; the report counts them,
// the viewer's Splits panel lights f and g while they run).
inline constexpr const char* kGPhase = "g: all-reduce";
inline constexpr const char* kFPhase = "f: all-reduce";

// The step ids an all-reduce took, for counting its bytes in the trace.
struct AllReduceSteps {
  int first = 0, last = -1;
};
// Runs `collective` inside a phase of that name and returns the step ids it took.
AllReduceSteps collective_phase(Comm& comm, const char* phase_name,
                                const std::function<void()>& collective);
// g, forward: partial becomes the sum over the ranks (ring all-reduce, phase "g: all-reduce").
AllReduceSteps g_forward(Comm& comm, View<float> partial);
// f, backward: the input gradient's partial sums become the whole (phase "f: all-reduce").
AllReduceSteps f_backward(Comm& comm, View<float> partial);

// --- sequence parallelism (Megatron-SP; Korthikanti et al., 2022) -----------------------------
// The tokens (the rows of a (T x h) activation) cut into N equal parts (a Partition of the T h
// elements: T must divide by N); the LayerNorm and dropout regions run on a rank's own rows, and
// f and g change collective:
//   f  forward: all-gather my rows into the whole      backward: reduce-scatter the partial dX
//   g  forward: reduce-scatter the partial Y           backward: all-gather dY's rows
// A ring all-gather and a ring reduce-scatter each send (N-1)/N of the tensor per rank: the two
// of a pass together send what one ring all-reduce does, 2(N-1)/N.
inline constexpr const char* kFGatherPhase = "f: all-gather";
inline constexpr const char* kFScatterPhase = "f: reduce-scatter";
inline constexpr const char* kGScatterPhase = "g: reduce-scatter";
inline constexpr const char* kGGatherPhase = "g: all-gather";
// whole: the (T x h) tensor with my rows filled in; afterwards every rank's are (ring all-gather).
AllReduceSteps sp_all_gather(Comm& comm, View<float> whole, const char* phase_name,
                             const char* buffer);
// whole: my partial sum of the (T x h) tensor, used as workspace; afterwards my rows of it hold
// the sum over the ranks (ring reduce-scatter).
AllReduceSteps sp_reduce_scatter(Comm& comm, View<float> whole, const char* phase_name,
                                 const char* buffer);
// g's forward and f's backward for a block that may run sequence parallel: with `sp` a
// reduce-scatter into my rows (sp_reduce_scatter, in kGScatterPhase / kFScatterPhase), without
// it the all-reduce (g_forward, f_backward).
AllReduceSteps g_forward(Comm& comm, View<float> partial, bool sp);
AllReduceSteps f_backward(Comm& comm, View<float> partial, bool sp);
// The bytes rank k sends in one ring all-gather, or one ring reduce-scatter, of `elements`
// floats' worth cut in n parts (every part but one: the one it receives last).
std::uint64_t sp_gather_bytes(int k, int n, std::uint64_t elements);
std::uint64_t sp_scatter_bytes(int k, int n, std::uint64_t elements);

// One tensor of the split layer against the reference: max |got - want| / max |want|.
struct Compared {
  std::string name;
  double error = 0;
  bool ok = false;
};
Compared compare_tensor(Comm& comm, const std::string& name, View<const float> got,
                        const RowMatrix& want, double tol);
// Element by element against an error bound: error = max over elements of |got - want| / bound
// (the caller's error model), ok when at most 1.
Compared compare_within(Comm& comm, const std::string& name, View<const float> got,
                        const RowMatrix& want, const RowMatrix& bound);

// What rank 0 keeps of a run for the report.
struct Outcome {
  AllReduceSteps forward, backward;
  std::vector<Compared> compared;                           // rank 0's
  std::string error_measure = "max |error| / max |value|";  // what Compared::error is
};

// The tensors rank 0 compared, each with its error and verdict, under a heading naming the
// reference (`what`: "layer", "block") and the error measure.
void print_compared(const std::string& what, const std::string& measure,
                    const std::vector<Compared>& compared);

// The report's shared part: the all-reduces found in forward and backward on every rank (count
// of g and f phases, bytes from the trace) against one each of `elements` floats, and the weight
// bytes on every rank's ledger against its share: the split part of the unsplit layer's
// `unsplit_bytes` over N ranks, plus the `replicated_bytes` every rank keeps whole.
void report(RunResult& r, const Outcome& o, std::uint64_t elements, std::uint64_t unsplit_bytes,
            std::uint64_t replicated_bytes = 0);

// --- otherData.splits: the layer as the viewer's Splits panel draws it -------------------------
// The tensors of one split layer in the order of the computation (X, f, the column-split
// weights, their outputs, the row-split weights, the partial sums, g, Y), with what each rank
// holds of them. docs/trace-format.md ("splits") describes the field.

struct SplitRange {
  std::size_t begin = 0, end = 0;
};
// Each rank's part of `part` ([begin(r), end(r)), times `unit`: d columns per head, ...): the
// ranges come from the Partition the lesson cuts its tensors with, never from retyped numbers.
std::vector<SplitRange> rank_ranges(const Partition& part, std::size_t unit = 1);

struct SplitBlock {
  std::string name;
  std::string kind = "activation";      // "activation", "weight", "f" or "g"
  std::vector<std::size_t> shape;       // the whole tensor (rows, columns, ...)
  std::vector<std::size_t> rank_shape;  // what one rank holds of it
  std::vector<std::size_t> head_shape;  // one head's part, for tensors that go by head
  // "none" (every rank holds all of it), "rows", "columns", "heads" (the first axis of a tensor
  // kept per head), or "partial" (every rank holds a partial sum of all of it)
  std::string split = "none";
  std::vector<SplitRange> ranges;  // per rank, along the split axis (rows, columns or heads)
  std::vector<SplitRange> heads;   // per rank, the heads its range holds
  // The compute phases (trace span names) that multiply by this weight, or run this operator's
  // all-reduce, in the forward and the backward pass; "" for none.
  std::string forward_phase, backward_phase;
  std::string forward, backward;  // f and g: "identity" or "all-reduce"
  bool stack = false;             // drawn under the block before it (Wk under Wq)
};

// A tensor as a block: its name, kind, whole and per-rank shape and how it is split (ranges,
// heads and phases are the caller's to add).
SplitBlock split_block(std::string name, std::string kind, std::vector<std::size_t> shape,
                       std::vector<std::size_t> rank_shape, std::string split);

// Megatron's operators as blocks: f before the column-split weights (identity forward,
// all-reduce backward in phase kFPhase), g after the row-split ones (all-reduce forward in
// kGPhase, identity backward).
SplitBlock f_block();
SplitBlock g_block();

// The otherData.splits JSON value: the layer ("mlp", "attention"), its formula, the ranks and
// the blocks in the order of the computation.
std::string splits_json(const std::string& layer, const std::string& formula, int ranks,
                        const std::vector<SplitBlock>& blocks);

}  // namespace distlab::tp
