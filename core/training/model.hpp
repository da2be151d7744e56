// model.hpp — the training pieces the lessons share: an MLP of Linear layers with GeLU between
// them, the MSE loss, SGD and Adam. The data they train on is teacher.hpp.
//
// Everything runs on the ops interface (ops.hpp), so the same code trains on the CPU and, with
// --device cuda, on the GPU. The float64 Eigen twin that checks it is model_reference.hpp.
//
//   MlpShape      dims {in, hidden..., out}; the parameters of every layer in one flat vector
//                 [W0 b0 W1 b1 ...], so one message moves them all and a shard is a range of it
//   Mlp           forward(params, x) and backward(grads, params, x, dy) for a fixed batch; keeps
//                 the activations it needs (charged to Category::activations)
//   mse_loss      the loss and dL/dy for one shard of a batch, normalised by the whole batch
//   Optimizer     SGD or Adam over a range of parameters (Adam's moments: Category::optimizer)
//
// Shapes are row-major (ops.hpp): a batch of B samples is (B, dims[0]); layer l's weight W_l is
// (dims[l], dims[l+1]) and its bias b_l is (dims[l+1]):
//   z_l = h_{l-1} W_l + b_l          h_{-1} = x, h_l = gelu(z_l) except after the last layer
//   y   = z_{L-1}                    no activation on the output (a regression)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device/buffer.hpp"
#include "core/device/memory_ledger.hpp"
#include "core/ops/ops.hpp"

namespace distlab::model {

using ops::In;  // an input view: View<const float>

struct MlpShape {
  std::vector<std::size_t> dims;  // {in, hidden..., out}: at least two entries

  std::size_t layers() const { return dims.size() - 1; }
  std::size_t in() const { return dims.front(); }
  std::size_t out() const { return dims.back(); }
  std::size_t params() const;                      // every W and b
  std::size_t weight_offset(std::size_t l) const;  // where W_l starts in the flat vector
  std::size_t bias_offset(std::size_t l) const;    // where b_l starts
  std::string describe() const;                    // "16 -> 64 -> 8 (1,608 parameters)"
};

// Checks the dims (>= 2 entries, none zero); throws UsageError with one sentence.
MlpShape make_shape(std::vector<std::size_t> dims);

// --- layers, on the ops interface ---------------------------------------------------------------

// y = x W + b for a batch of `batch` rows: x is (batch, in), W (in, out), b (out), y (batch, out).
// `ones` holds `batch` ones: the bias is added as the rank-1 product ones b^T (one GEMM, so it
// runs on either device with no kernel of its own).
void linear_forward(View<float> y, In<float> x, In<float> w, In<float> b, In<float> ones,
                    std::size_t batch, std::size_t in, std::size_t out);

// From dy = dL/dy: dW = x^T dy, db = column sums of dy, and dx = dy W^T unless dx is empty
// (the first layer needs no gradient for its input). Overwrites dW, db and dx.
void linear_backward(View<float> dx, View<float> dw, View<float> db, In<float> dy, In<float> x,
                     In<float> w, std::size_t batch, std::size_t in, std::size_t out);

// The mean squared error over a whole batch of `whole` samples, computed on a shard of it:
//   L = 1 / (whole * out) * sum over the shard's samples and outputs of (y - t)^2
//   dy = dL/dy = 2 (y - t) / (whole * out)
// Shards of one batch add up: the sum of their L and of their gradients is the whole batch's.
// loss (one float) and dy stay on the device; dy may not alias y or t.
void mse_loss(View<float> loss, View<float> dy, In<float> y, In<float> t, std::size_t whole,
              std::size_t out);

// The MLP over a fixed batch size. Parameters and gradients are the caller's flat vectors
// (shape.params() floats), so a lesson can shard, send and sum them as it likes.
class Mlp {
 public:
  // activate_output: gelu after the last layer too (a pipeline stage in the middle of a model,
  // whose output is the next stage's input); the default is a model's last layer, no activation.
  Mlp(Ledger& ledger, Device device, MlpShape shape, std::size_t batch,
      bool activate_output = false);

  const MlpShape& shape() const { return shape_; }
  std::size_t batch() const { return batch_; }

  // x is (batch, in); returns y, (batch, out), valid until the next forward.
  View<const float> forward(In<float> params, In<float> x);
  // The gradients of the forward just run, from dy = dL/dy; overwrites grads, and dx = dL/dx
  // (the input's gradient, which a pipeline sends to the stage before) unless dx is empty.
  void backward(View<float> grads, In<float> params, In<float> x, In<float> dy,
                View<float> dx = {});
  // The same backward in two halves, as a zero-bubble pipeline runs it. backward_input computes
  // dx (unless empty) and keeps every layer's dL/dz (activation memory, charged to the ledger
  // until this Mlp goes); backward_weights, any time later, computes grads from them. Together
  // they do backward's arithmetic, operation for operation.
  void backward_input(In<float> params, In<float> dy, View<float> dx = {});
  void backward_weights(View<float> grads, In<float> x);

  // Layer by layer, for lessons that fetch each layer's weights just in time (ZeRO-3). Layers
  // run forward 0, 1, ..., L-1 (x is the batch; later layers read what the one before kept),
  // then backward L-1, ..., 0, starting from dz = dy; backward_layer returns dL/dz of the layer
  // below (empty for layer 0), valid until the next call.
  void forward_layer(std::size_t l, In<float> w, In<float> b, In<float> x);
  View<const float> output() const {
    return activate_output_ ? h_.back().view() : z_.back().view();
  }
  View<const float> backward_layer(std::size_t l, View<float> dw, View<float> db, In<float> w,
                                   In<float> x, In<float> dz, View<float> dx = {});

 private:
  bool activated(std::size_t l) const { return l + 1 < shape_.layers() || activate_output_; }
  MlpShape shape_;
  std::size_t batch_;
  bool activate_output_;
  Buffer<float> ones_;
  std::vector<Buffer<float>> z_, h_;    // per layer: pre-activation, and gelu(z) for hidden layers
  Buffer<float> dz_, dh_;               // backward scratch, as wide as the widest layer
  std::vector<Buffer<float>> kept_dz_;  // per layer: dL/dz from backward_input, for the weights
  Ledger* ledger_;
  Device device_;
};

// --- optimizers ---------------------------------------------------------------------------------

enum class OptimizerKind { sgd, adam };
OptimizerKind parse_optimizer(const std::string& name);  // "sgd" or "adam"; UsageError otherwise
const char* to_string(OptimizerKind k);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  float lr = 0.05f;  // SGD: p -= lr g; Adam: ops::AdamConfig's lr
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};

// One optimizer over `n` parameters (all of them, or one rank's shard): SGD keeps no state,
// Adam keeps m and v (8 bytes per parameter, Category::optimizer).
class Optimizer {
 public:
  Optimizer(Ledger& ledger, Device device, std::size_t n, OptimizerConfig config);
  // The t-th call is step t. Gradients may be bf16 or f16 for Adam (mixed precision: 16-bit
  // gradients, f32 master weights and moments); SGD takes f32 ones.
  template <ops::FloatInput G>
  void step(View<float> params, View<G> grads) {
    ++t_;
    if (config_.kind == OptimizerKind::adam)
      return ops::adam_step(params, grads, m_.view(), v_.view(), adam_config(), t_);
    if constexpr (std::is_same_v<std::remove_const_t<G>, float>)
      return ops::axpy(params, -config_.lr, In<float>(grads));
    DL_FAIL("SGD takes f32 gradients; mixed precision here is Adam's");
  }
  int steps() const { return t_; }
  // Adam's moments (empty for SGD), for the checks that restart a step from them.
  View<const float> m() const { return m_.view(); }
  View<const float> v() const { return v_.view(); }

 private:
  ops::AdamConfig adam_config() const {
    return {config_.lr, config_.beta1, config_.beta2, config_.eps, 0.0f};
  }
  OptimizerConfig config_;
  Buffer<float> m_, v_;
  int t_ = 0;
};

}  // namespace distlab::model
