// gpt.hpp — lesson 14's model: a small decoder-only transformer (GPT), split over a mesh.
//
//   tokens -> wte[token] + wpe[position] -> L blocks -> LayerNorm -> x head -> softmax
//   cross-entropy against the next token
//   block:  x1 = x + attention(LN1(x))        attention: causal, H heads of d / H
//           x2 = x1 + W2 gelu(W1 LN2(x1))     the MLP: d -> 4d -> d
//
// No biases in the linear layers (LayerNorm has its gain and bias). Every tensor is row-major;
// the unsplit model's parameters are one flat vector in the order of tensors(): what the float64
// reference (gpt_reference.hpp) trains and what every rank's part is compared against.
//
// A rank of a dp x pp x tp mesh holds its pipeline stage's tensors (stage p of P: blocks
// [L p / P, L (p + 1) / P), the embeddings on the first stage, the final LayerNorm and the head
// on the last), split the Megatron way over its tensor-parallel group (rank t of T):
//   wq, wk, wv   the columns of heads [H t / T, H (t + 1) / T), stored head by head (d, d/H)
//   wo           the same heads' rows (d/H rows each), contiguous
//   w1           columns [4d t / T, 4d (t + 1) / T)      w2  the same rows
//   the rest     whole on every tensor-parallel rank (LayerNorms, embeddings, head)
// Layout maps each element of a rank's flat vector to its place in the unsplit one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/comm.hpp"
#include "core/device/buffer.hpp"
#include "core/ops/ops.hpp"

namespace distlab::gpt {

struct Config {
  std::size_t vocab = 64, d = 64, heads = 4, layers = 4, seq = 32;
  float ln_eps = 1e-5f;
  std::uint64_t seed = 1;  // the initial weights
  std::size_t head_dim() const { return d / heads; }
  std::size_t mlp() const { return 4 * d; }
  // Throws UsageError (one sentence) unless the sizes fit a split over tp and pp ranks.
  void check(int tp, int pp) const;
  std::string describe()
      const;  // "vocab 64, d 64, 4 heads, 4 layers, context 32 (208,000 parameters)"
};

// How a tensor is split over the tensor-parallel ranks.
enum class Split : std::uint8_t { whole, head_columns, head_rows, columns, rows };

struct Tensor {
  std::string name;  // "wte", "block 2 wq", "lnf gain", ...
  std::size_t rows = 0, cols = 0;
  Split split = Split::whole;
  int block = -1;          // the block it belongs to, -1 for the embeddings and the head
  std::size_t offset = 0;  // where it starts in the unsplit flat vector
  std::size_t size() const { return rows * cols; }
};

// The unsplit model's tensors, in the flat vector's order: wte, wpe, each block's ln1 gain,
// ln1 bias, wq, wk, wv, wo, ln2 gain, ln2 bias, w1, w2, then lnf gain, lnf bias, head.
std::vector<Tensor> tensors(const Config& c);
std::size_t parameter_count(const Config& c);
// The unsplit model's initial weights: gains 1, biases 0, matrices uniform in +-0.02 sqrt 3
// (wo and w2 further over sqrt(2 L), GPT-2's residual scaling), from the seed.
float initial_value(const Config& c, const Tensor& t, std::size_t element);
std::vector<float> initial_weights(const Config& c);

// One rank's part of the model.
class Layout {
 public:
  Layout(const Config& c, int pp_rank, int pp_size, int tp_rank, int tp_size);

  struct Part {
    Tensor tensor;
    std::size_t offset = 0, size = 0;  // in this rank's flat vector
  };
  const std::vector<Part>& parts() const { return parts_; }
  std::size_t size() const { return size_; }
  int first_block() const { return first_block_; }
  int end_block() const { return end_block_; }
  bool first_stage() const { return first_stage_; }
  bool last_stage() const { return last_stage_; }
  // The position in the unsplit flat vector of element i of `part`.
  std::size_t global_index(const Part& part, std::size_t i) const;
  // This rank's part of the unsplit flat vector `whole` (its initial weights, a reference's).
  template <class V>
  std::vector<float> gather(const V& whole) const {
    std::vector<float> mine(size_);
    for (const auto& p : parts_)
      for (std::size_t i = 0; i < p.size; ++i)
        mine[p.offset + i] = static_cast<float>(whole[global_index(p, i)]);
    return mine;
  }
  const Part& part(const std::string& name) const;
  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }
  std::size_t local_heads() const { return c_.heads / static_cast<std::size_t>(tp_size_); }
  std::size_t local_mlp() const { return c_.mlp() / static_cast<std::size_t>(tp_size_); }

 private:
  Config c_;
  int tp_rank_, tp_size_;
  int first_block_ = 0, end_block_ = 0;
  bool first_stage_ = false, last_stage_ = false;
  std::vector<Part> parts_;
  std::size_t size_ = 0;
};

// What a stage keeps of each block's forward for its backward (lesson 19; Korthikanti et al.
// 2022, "Reducing Activation Recomputation in Large Transformer Models"):
//   none       every tensor a backward reads: the block's input, LN1's output and statistics,
//              my heads' q, k, v, their softmax probabilities and context, x1, LN2's output and
//              statistics, my MLP columns before and after GeLU
//   selective  the same but the probabilities (the (H/T) B S^2 term): backward recomputes
//              q k^T / sqrt(dh) + mask and the softmax, per head and sequence, from the kept q, k
//   full       each block's input only: backward reruns the block's forward (its all-reduces
//              too) into one block's buffers, then its backward
// The recomputation runs the forward's operations in the forward's order on the same inputs, so
// the gradients are bit for bit those of `none`.
enum class Recompute : std::uint8_t { none, selective, full };
const char* to_string(Recompute r);
// "none", "selective" or "full"; anything else is a UsageError naming the three.
Recompute parse_recompute(const std::string& name);

struct StageOptions {
  Recompute recompute = Recompute::none;
  // Each block's kept tensors charged when its forward makes them and released once its backward
  // has read them (the ledger rises through the forward, falls through the backward, and full
  // recompute's one block of buffers dips and refills); otherwise every slot's are charged once,
  // up front, as lesson 14's memory formula counts them.
  bool charge_per_pass = false;
  // Sequence parallelism (Megatron-SP; lessons 12 and 13): the LayerNorms, the residual adds and
  // the block's input and output run on my N/T rows (tokens) of the micro-batch; f all-gathers
  // the LayerNorm's output before the column-parallel GEMMs (forward, and again in backward for
  // the weights' gradients), g reduce-scatters the row-parallel output (its backward all-gathers
  // dY). The embedding takes my rows; the head all-gathers the last block's output. One pipeline
  // stage only, and the tokens must divide over the group.
  bool sequence_parallel = false;
  // Lesson 19's breaks: the block's output written over its input (the input recompute starts
  // from is stale), and GeLU written in place over the MLP's h (freed, yet backward reads it).
  bool stale_input = false;
  bool gelu_in_place = false;
};

// A stage of the model on one rank, for micro-batches of `batch` sequences. Forward and backward
// run on the ops interface (CPU or GPU); the tensor-parallel group's all-reduces (g forward, f
// backward, tensor_parallel.hpp) go over `tp`. Activations are kept per slot: a pipeline keeps
// several micro-batches in flight (1F1B: up to P), each in its own slot until its backward.
class Stage {
 public:
  Stage(Comm& tp, const Config& c, const Layout& layout, std::size_t batch, int slots,
        StageOptions options = {});
  ~Stage();
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  std::size_t tokens() const { return batch_ * c_.seq; }  // rows of a micro-batch's activations
  // Forward of one micro-batch into `slot`. The first stage reads `ids` (tokens() token ids);
  // the others `x` (tokens() x d, the stage before's output). Returns this stage's output, or
  // on the last stage the logits' loss: the sum over the micro-batch of each token's
  // cross-entropy against `targets`, times `loss_scale`, as one float (valid until the next
  // forward into the slot).
  View<const float> forward(int slot, View<const float> params, View<const std::int32_t> ids,
                            View<const std::int32_t> targets, View<const float> x,
                            float loss_scale);
  // Backward of the micro-batch in `slot`: adds its gradients to `grads` (this rank's flat
  // layout) and returns dL/dx for the stage before (empty on the first stage). On the last stage
  // the gradient starts from the loss (scaled as in forward); elsewhere from `dy`.
  View<const float> backward(int slot, View<const float> params, View<float> grads,
                             View<const float> dy);
  // Under sequence parallelism the tensors every tp rank holds whole but computes on its own rows
  // (each block's LayerNorms, the embeddings) have partial gradients: summed here over the group,
  // one all-reduce of them packed together. Once per step, after the last backward (a sum after
  // each micro-batch would count the earlier ones again). Nothing to do without it.
  void sync_replicated(View<float> grads);

  // The blocks' kept activations (each block's input and what options.recompute keeps of it,
  // every slot), on a ledger of their own that also charges the rank's; and the buffers only
  // recomputation needs (selective: one S x S of probabilities; full: one block's tensors).
  const Ledger& kept_ledger() const { return kept_ledger_; }
  const Ledger& recompute_ledger() const { return recompute_ledger_; }
  // What block l of `slot` keeps for its backward, as allocated, between its forward and its
  // backward: its input x, then a, mean1, rstd1, q, k, v, p, ctx, x1, m, mean2, rstd2, h and
  // gelu(h), each with its floats (on this rank: my heads' and my MLP columns'); a tensor the
  // setting does not keep is left out (full: x alone).
  struct KeptTensor {
    std::string name;
    std::size_t floats = 0;
  };
  std::vector<KeptTensor> kept_tensors(int slot, int l) const;
  // The FLOP of the GEMMs that backward's recomputation ran, since the stage was made.
  std::uint64_t recompute_flops() const { return recompute_flops_; }

 private:
  struct Block;
  struct Slot;
  struct Kept;
  void block_forward(Slot& s, int l, View<const float> params, View<float> x,
                     const char* pass = "forward");
  void recompute_block(Slot& s, int l, View<const float> params);
  // p = softmax(q k^T / sqrt(dh) + the causal mask), one head and sequence.
  void scores(View<float> p, View<const float> q, View<const float> k);
  void keep(Slot& s, std::size_t l);  // the block's kept buffers, charged now where not yet
  Kept& kept(Slot& s, std::size_t l);
  void block_backward(Slot& s, int l, View<const float> params, View<float> grads, View<float> dx);

  // The sizes every block uses: tokens N, width d, context S, batch B, head width dh, my heads
  // hl, my MLP columns ml, and attention's 1 / sqrt(dh).
  struct Dims {
    std::size_t N, d, S, B, dh, hl, ml;
    float scale;
  };
  View<float> head(Buffer<float>& m, std::size_t j) const;  // my head j's (N, dh) of m
  // My rows of a (N, d) tensor: all of them without sequence parallelism.
  View<float> mine(View<float> whole) const;
  // The whole (N, d) tensor of which `my` holds my rows: `my` itself without sequence
  // parallelism, else copied into `into` and all-gathered in a phase of that name.
  View<const float> gather(View<const float> my, Buffer<float>& into, const char* phase_name,
                           const char* buffer);
  View<float> sequence(View<float> v, std::size_t b, std::size_t width) const;  // sequence b's rows

  Comm& tp_;
  Config c_;
  Layout layout_;
  std::size_t batch_;
  Dims dims_;
  StageOptions options_;
  Ledger kept_ledger_, recompute_ledger_;  // before the buffers charged to them
  std::uint64_t recompute_flops_ = 0;
  std::vector<Slot> slots_;
  std::unique_ptr<Kept> recomputed_;     // full: the one block's tensors that backward refills
  std::size_t rows_ = 0, row0_ = 0;      // my rows of a micro-batch: [row0_, row0_ + rows_)
  Buffer<float> gathered_, regathered_;  // sequence parallel: the all-gathers' (N, d)
  Buffer<float> scores_;                 // selective: one head and sequence's probabilities
  Buffer<float> mask_;  // (seq, seq): 0 where a token may look, -inf at the tokens after it
  Buffer<std::int32_t> positions_;  // 0 .. seq-1, batch times
  // Scratch shared by the slots' backward passes.
  Buffer<float> dx_, da_, dq_, dk_, dv_, dc_, dp_, dh_, dlogits_;
};

}  // namespace distlab::gpt
