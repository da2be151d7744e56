// zero.hpp — data-parallel training with mixed-precision Adam, plain or sharded by ZeRO
// (Rajbhandari et al., SC 2020) stage 1, 2 or 3 (PyTorch's FSDP): the layouts, formulas and
// pieces lessons 08-10 build their steps from, plain data parallel's step, and the reference.
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
// One step on each rank, per stage (ring collectives; `deterministic`: reductions in rank order).
// dp_step below is plain data parallel's; each ZeRO stage's step is in its lesson's main.cpp
// (lessons/08_zero1, 09_zero2, 10_zero3_fsdp), built from Replica's pieces:
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

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/base/half.hpp"
#include "core/base/partition.hpp"
#include "core/comm/comm.hpp"
#include "core/cost/cost_model.hpp"
#include "core/runtime/verify.hpp"
#include "core/training/model.hpp"
#include "core/training/teacher.hpp"

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
// The alpha-beta model of one step's collectives (ring), unit by unit: dp one all-reduce; zero1
// and zero2 a reduce-scatter and an all-gather per unit; zero3 two all-gathers and a
// reduce-scatter per layer. Not `deterministic`'s sums in rank order.
Cost step_cost(Stage stage, const model::MlpShape& shape, int n);
std::string step_cost_formula(Stage stage);  // in words, for the report

// A rank's optimizer state, in Run::master's layout: my part of the master weights and Adam's
// moments, and (before an update) the summed bf16 gradient, widened, that the update uses.
// After a step, loss is my share of its loss: my samples' squared errors over the whole batch's
// count (train() fills it in before the losses are summed).
struct StepState {
  std::vector<float> master, m, v, gradient;
  double loss = NAN;
};

// What one rank saw in a run.
struct Run {
  std::vector<std::pair<int, int>> exchange;  // per step: [first, last] step ids of its collectives
  std::vector<double> losses;                 // rank 0: the whole batch's loss, per step
  StateBytes state;                           // the ledger's model state after the last step
  std::uint64_t params_peak = 0;              // the ledger's peak of Category::params
  std::uint64_t activations_peak = 0;         // and of Category::activations (ZeRO shards none)
  std::vector<float> master;                  // my part of the f32 master weights (padded units)
  std::vector<float> weights16;               // the bf16 weights there, widened, in master's layout
  // Each step's time on this rank's clock (seconds). On a simulated cluster computation takes no
  // time, so this is the step's communication (its collectives and the loss's reduce).
  std::vector<double> step_seconds;
};

// One rank's model and training state, laid out as its stage shards them (units(), the table
// above), and the pieces a step is made of. Lessons 08, 09 and 10 each write their stage's step
// from these pieces in their own main.cpp; dp_step below is plain data parallel's. Every piece
// charges its buffers to the ledger and puts its phase on the trace.
class Replica {
 public:
  Replica(Comm& comm, const Config& config, Ledger& ledger);

  Comm& comm() { return comm_; }
  const Config& config() const { return c_; }
  std::size_t layers() const { return c_.shape.layers(); }
  std::size_t unit_of(std::size_t layer) const;  // 0 for a whole-vector stage, else the layer

  // My share of batch k: the inputs and targets (phase "load batch").
  void load_batch(int k);
  // Layer l's weights in f32 (a workspace reused by the next call): from the bf16 weights I
  // hold whole (dp, ZeRO-1, ZeRO-2), or from a layer gathered whole (ZeRO-3).
  View<const float> weights(std::size_t l);
  View<const float> widen(std::size_t l, View<const BFloat16> layer);
  // The model: layer l forward, the loss after the last layer, layer l backward (from the top;
  // returns the layer's f32 gradient, W then b, in a workspace reused by the next call).
  void forward(std::size_t l, View<const float> w);
  void loss();
  View<const float> backward(std::size_t l, View<const float> w);
  // Rounds layer l's f32 gradient to bf16 into the whole gradient I hold (dp, ZeRO-1).
  void keep_gradient(std::size_t l, View<const float> g);
  // The passes of a stage that holds the weights whole: my share of batch k, every layer's
  // forward and the loss (phase "forward"; dp, ZeRO-1, ZeRO-2); every layer's backward from the
  // top, each gradient kept whole (phase "backward"; dp, ZeRO-1).
  void forward_pass(int k);
  void backward_pass();

  // The bf16 weights and gradients I hold of unit u (whole, or my shard where the stage shards
  // them), my 1/N of a whole unit, and my part of unit u's f32 master weights.
  View<BFloat16> params(std::size_t u);
  View<BFloat16> grads(std::size_t u);
  View<BFloat16> mine(View<BFloat16> whole, std::size_t u) const;
  View<const float> master(std::size_t u);
  View<BFloat16> all_params() { return w16_.view(); }  // every unit's, one after the other
  View<BFloat16> all_grads() { return g16_.view(); }
  View<const float> all_master() { return View<const float>(master_.view()); }
  // The bf16 weights at my master weights' places (all of them for dp), widened.
  std::vector<float> my_weights16();

  // A whole unit u, padded to a multiple of N with zeros, charged to `category`.
  Buffer<BFloat16> whole(std::size_t u, Category category);
  // The exchanges, ring collectives on buffers named "grads" / "params" (per layer "grads L1").
  // reduce_scatter sums in rank order instead with config.deterministic.
  void reduce_scatter(View<BFloat16> whole, std::size_t u);
  void all_gather(View<BFloat16> whole, std::size_t u);
  // ZeRO-2 and 3: layer l's f32 gradient rounded into a whole padded buffer, reduce-scattered
  // (phase "reduce-scatter Ll"), my chunk copied into grads(); returns the whole buffer, which
  // the caller frees (it goes out of scope) as soon as it returns.
  Buffer<BFloat16> reduce_scatter_gradient(std::size_t l, View<const float> g);
  // ZeRO-3: layer l's weights all-gathered whole from every rank's shard (phase "gather Ll
  // (forward)" or "(backward)"); freed when the buffer goes.
  Buffer<BFloat16> gather(std::size_t l, const char* pass);

  // The same as nonblocking operations (core/comm/async.hpp), for lesson 16's overlap: a range
  // of the bf16 gradients all-reduced (in rank order with config.deterministic, as reduce_scatter
  // then all_gather), and ZeRO-3's gather of layer l started now and waited for before use.
  AsyncHandle all_reduce_async(View<BFloat16> part, const std::string& buffer);
  struct Fetch {
    Buffer<BFloat16> layer;  // declared first: it outlives the handle that writes into it
    AsyncHandle done;
  };
  Fetch gather_async(std::size_t l);

  // Adam on my part of the master weights with `my_grads`, the summed gradients in the same
  // layout (phase "Adam"). The first call after record_before() keeps its gradients, for
  // train()'s StepCheck.
  void adam(View<const BFloat16> my_grads);
  // Keeps a buffer that should have been freed to the end of the run (a --break's memory bug).
  void hold(Buffer<BFloat16> buffer);

  View<const float> loss_value() { return View<const float>(loss_.view()); }
  View<float> loss_buffer() { return loss_.view(); }
  // My optimizer state now (no gradient); record_before() keeps it as before(), whose gradient
  // the next adam() call fills in (train(): at the start of every step, when a check is given).
  StepState state();
  void record_before();
  const StepState& before() const { return before_; }

 private:
  template <class T>
  Buffer<T> alloc(std::size_t n, Category category) {
    return Buffer<T>(ledger_, category, n, comm_.device());
  }
  bool sharded_params() const { return c_.stage == Stage::zero3; }
  bool sharded_grads() const { return c_.stage == Stage::zero2 || c_.stage == Stage::zero3; }
  std::size_t layer_count(std::size_t l) const;
  std::string name(const char* what, std::size_t u) const;

  Comm& comm_;
  Ledger& ledger_;
  const Config& c_;
  int n_, me_;
  std::vector<Unit> units_;
  Partition samples_;
  model::Teacher teacher_;
  std::vector<std::size_t> w_offset_, g_offset_,
      m_offset_;  // each unit's place in w16_, g16_, master_
  Buffer<BFloat16> w16_, g16_;
  Buffer<float> master_;
  std::optional<model::Optimizer> adam_;
  std::optional<model::Mlp> mlp_;
  Buffer<float> ws_w_, ws_g_, x_, t_, dy_;
  Buffer<float> loss_{ledger_, Category::data, 1, comm_.device()};
  View<const float> dz_;  // the backward's dL/dz, from the top layer down
  StepState before_;
  bool recording_ = false;  // record_before() was called: adam() fills in before_'s gradient
  std::vector<Buffer<BFloat16>> held_;
};

// One step of a stage on a rank: step k of the run.
using Step = std::function<void(Replica& replica, int k)>;

// Plain data parallel: forward and backward on my share, all-reduce the gradients (reduce-scatter
// in rank order + all-gather with config.deterministic), Adam on all of them, round to bf16.
void dp_step(Replica& replica, int k);

// Called after step k (0-based) of a run, outside its timing and off the trace: my optimizer state
// before the step's update (with its gradient) and after it, and the step's loss on rank 0.
using StepCheck =
    std::function<void(int k, const StepState& before, const StepState& after, double loss)>;

// Trains `config.steps` steps of `step` on this rank's replica of `config.stage`, each followed
// by a reduce of the loss onto rank 0 (its own steps) and by `check`; every buffer on the rank's
// ledger (or on `ledger`: a comparison run that must not disturb the rank's figures).
Run train(Comm& comm, const Config& config, const Step& step, Ledger* ledger = nullptr,
          const StepCheck& check = {});

// My part of the master weights (the padded units' shards, or everything for dp) as positions
// in the flat parameter vector: element i of Run::master is parameter positions()[i], or a
// padding element when it is -1.
std::vector<std::int64_t> master_positions(Stage stage, const model::MlpShape& shape, int n,
                                           int rank);

// The single-device float64 twin, one step at a time: the same mixed-precision recipe on the
// whole batch. The weights are rounded to bf16 for the forward, each of the N ranks' shares of the
// gradient is computed in float64 and rounded to bf16, and the N are summed in rank order with a
// bf16 rounding after each add. The lessons restart it from the weights the ranks held before each
// step, and check that step's gradient, Adam's update and moments from the rank's own state: one
// step's error, which does not accumulate (zero_lesson.hpp).
//
// The sharded run's summed gradient against this one's, at the same weights. Each share is computed
// in float32 there and in float64 here: a float32 forward and backward is off by about 2^-24 per
// term of its sums (the share's samples and the widest layer), 4 x 2^-24 x (samples + widest) of
// the layer's largest |share| for gradients of that size (lesson 05's model, per layer), and
// where a share is a sum that cancels that is more than bf16's unit of its result. Each share is
// then rounded to bf16, off by at most 2^-8 of its result, so the two may land one bf16 unit
// (2 x 2^-8 of it) apart beside their float32 difference; and the N are summed with N - 1 bf16
// rounding adds in another order (the ring's), each off by 2^-8 of its partial sum. So element by
// element (gradient_error)
//   |error| <= 2 N 2^-8 x the sum of the shares' magnitudes                      (bf16 roundings)
//            + (1 + N 2^-7) x the sum of the shares' float32 terms + N 2^-133    (float32)
// the last for bf16's least subnormal, where every share underflows. With the sums in rank order
// (--deterministic) the adds round as here, but a share that lands one unit apart changes every
// sum after it, so the bound is the same.

// Step `step`'s (0-based) summed gradient of the recipe at the master weights `master` (the whole
// flat vector), and element by element the sum of its shares' magnitudes and of their float32
// terms (above), and the batch's loss.
struct StepGradient {
  std::vector<double> sum, magnitude, float32;
  double loss = 0;
  std::vector<double> shares;  // each rank's share of the loss (they sum to loss)
};
StepGradient reference_gradient(const Config& config, int n, const std::vector<double>& master,
                                int step);
// The bound above's two terms for an element: {bf16 roundings, float32}.
ErrorBound::Terms gradient_error(int n, double magnitude, double float32);

}  // namespace distlab::zero
