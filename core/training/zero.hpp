// zero.hpp — data-parallel training with mixed-precision Adam, plain or sharded by ZeRO
// (Rajbhandari et al., SC 2020) stage 1, 2 or 3 (PyTorch's FSDP): what lessons 08-10 run.
//
// Mixed precision, in bf16: the weights the model computes with and their gradients are bf16
// (2 bytes each); Adam keeps an f32 master copy of the weights and f32 momentum and variance
// (12 bytes): 16 bytes per parameter in all. bf16 rather than fp16 because its exponent has
// f32's range, so small gradients do not underflow and no loss scaling is needed, and current
// GPUs (A100, H100, H200) run it as fast as fp16. The model itself computes in f32: each layer's
// bf16 weights are widened into an f32 workspace just before use, and its f32 gradients rounded
// to bf16 just after (core/training/model.hpp does the math).
//
// Where the 16 bytes per parameter (Psi parameters, N ranks) live, by stage:
//   stage  bf16 weights  bf16 gradients  f32 master, m, v   bytes per parameter
//   dp     every rank    every rank      every rank         2 + 2 + 12      = 16
//   zero1  every rank    every rank      1/N each           2 + 2 + 12/N    = 4 + 12/N
//   zero2  every rank    1/N each        1/N each           2 + 14/N
//   zero3  1/N each      1/N each        1/N each           16/N
// A sharded buffer is cut in N equal chunks, so it is padded with zeros to a multiple of N
// elements (DeepSpeed does the same): ZeRO-1 pads the whole flat vector, ZeRO-2 and 3 each
// layer (their unit of sharding). The padding is the only difference from the formula.
//
// One step on each rank, per stage (ring collectives; `deterministic`: reductions in rank order):
//   dp     forward, backward; all-reduce the gradients; Adam on all; round to bf16
//   zero1  forward, backward; reduce-scatter the gradients; Adam on my 1/N; round;
//          all-gather the bf16 weights
//   zero2  forward; backward, and after each layer reduce-scatter its gradient into my shard
//          and free the rest; Adam on my 1/N; round; all-gather the bf16 weights layer by layer
//   zero3  forward: all-gather each layer's weights just before it, free them after;
//          backward: gather them again, compute, reduce-scatter the gradient, free; Adam on my
//          1/N; round into my bf16 shard (nothing to gather: the next forward gathers)
// Communication per rank and step, in parameters moved (x 2 bytes): dp, zero1, zero2 2 Psi
// ((N-1)/N of it sent and as much received: a reduce-scatter and an all-gather, or an
// all-reduce); zero3 3 Psi (two all-gathers and a reduce-scatter).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/comm.hpp"
#include "core/training/model.hpp"

namespace distlab::zero {

enum class Stage { dp = 0, zero1 = 1, zero2 = 2, zero3 = 3 };
const char* to_string(Stage s);  // "dp", "zero1", ...
const char* title(Stage s);      // "plain data parallel", "ZeRO-1", ...

struct Config {
  Stage stage = Stage::dp;
  model::MlpShape shape;
  std::size_t batch = 64;  // the global batch: rank r takes its share (Partition)
  int steps = 5;
  model::OptimizerConfig adam{model::OptimizerKind::adam, 0.01f};
  std::uint64_t seed = 42;
  bool deterministic = false;  // every gradient sum in rank order: stages equal bit for bit
};

// The units a stage shards (the whole flat vector, or each layer) and their padding on N ranks.
struct Unit {
  std::size_t begin = 0;   // first parameter (MlpShape's flat layout)
  std::size_t count = 0;   // parameters
  std::size_t padded = 0;  // count rounded up to a multiple of N (count itself for dp)
  std::size_t shard = 0;   // padded / N: each rank's part (dp: all of it, nothing is sharded)
};
std::vector<Unit> units(Stage stage, const model::MlpShape& shape, int n);

// Model-state bytes on one rank, by category (the padded formula: what the ledger must show
// once a step is done), and the formula's bytes per parameter without padding.
struct StateBytes {
  std::uint64_t params = 0, grads = 0, optimizer = 0;
  std::uint64_t total() const { return params + grads + optimizer; }
};
StateBytes state_bytes(Stage stage, const model::MlpShape& shape, int n);
double bytes_per_param(Stage stage, int n);        // 16, 4 + 12/N, 2 + 14/N, 16/N
std::string bytes_per_param_formula(Stage stage);  // "4 + 12/N"
// Bytes rank k sends (and receives: the same) in the exchanges of one step.
std::uint64_t step_bytes_sent(Stage stage, const model::MlpShape& shape, int n, int k);
std::string step_bytes_formula(Stage stage);  // "2 Psi": what ZeRO's paper counts

// What one rank saw in a run.
struct Run {
  std::vector<std::pair<int, int>> exchange;  // per step: [first, last] step ids of its collectives
  std::vector<double> losses;                 // rank 0: the whole batch's loss, per step
  StateBytes state;                           // the ledger's model state after the last step
  std::uint64_t params_peak = 0;              // the ledger's peak of Category::params
  std::vector<float> master;                  // my part of the f32 master weights (padded units)
};

// Trains `config.steps` steps of mixed-precision Adam on this rank, as its stage says; every
// phase on the trace, every buffer on the rank's ledger (or on `ledger`: a comparison run that
// must not disturb the rank's figures). Collective messages name per-unit buffers ("grads L1",
// "params L1"; "grads", "params" for a whole-vector unit).
Run train(Comm& comm, const Config& config, Ledger* ledger = nullptr);

// My part of the master weights (the padded units' shards, or everything for dp) as positions
// in the flat parameter vector: element i of Run::master is parameter positions()[i], or a
// padding element when it is -1.
std::vector<std::int64_t> master_positions(Stage stage, const model::MlpShape& shape, int n,
                                           int rank);

// The single-device float64 twin: the same mixed-precision Adam on the whole batches. Each
// step the weights are rounded to bf16 for the forward, each of the N ranks' shares of the
// gradient is computed in float64 and rounded to bf16, the N are summed in rank order with a
// bf16 rounding after each add, and Adam updates float64 master weights. With
// config.deterministic the sharded runs sum in that order too and match it closely; otherwise
// their ring order rounds differently and the match is looser (the lessons state by how much).
struct Reference {
  std::vector<double> master;  // the flat parameters after the last step
  std::vector<double> losses;
};
Reference reference(const Config& config, int n);

}  // namespace distlab::zero
