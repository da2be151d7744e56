// Lesson 20 — mixed precision: bf16, fp16 with loss scaling, and fp8
//
// Concept: the 16 bytes per parameter of lessons 08-10 assume a recipe: the model computes with
// 16-bit weights, activations and gradients, while Adam keeps float32 master weights, momentum
// and variance (2 + 2 + 12 bytes). Half the bytes and twice the tensor-core speed, for rounding
// every stored tensor to 8 (bf16) or 11 (fp16) significant bits. The same MLP is trained here
// for S steps five ways, data parallel over the ranks, each against a float64 run of it:
//   fp32           everything float32: the baseline (4 + 4 + 8 bytes per parameter)
//   bf16           bfloat16 weights, activations and gradients; float32 master and Adam
//   fp16           float16 the same, with dynamic loss scaling: dL/dy times S = 2^16 before
//                  backward, so gradients under fp16's smallest subnormal (2^-24) survive; any
//                  inf or NaN in the gradients skips the step and halves S, a window of clean
//                  steps doubles it; the optimizer divides by S (Micikevicius et al. 2018)
//   fp16-unscaled  float16 without the scale: small gradients flush to zero, counted
//   fp8            bf16 storage, and every GEMM's operands cast to fp8 (E4M3 forward, E5M2
//                  gradients) with a per-tensor power-of-two scale from an amax history
//                  (Transformer Engine's recipe, emulated: core/base/fp8.hpp rounds)
// Every GEMM accumulates in float32 and rounds its result once, as tensor cores do.
//
// Verification, each recipe on every rank, against float64 (core/training/precision_reference.hpp):
//   each stored tensor of every micro-batch is its operation on the stored inputs before it,
//   rounded to the format (one unit of its last place decides: tight, nothing compounds); the
//   micro-batches' sum, the ranks' sum and the unscale likewise;
//   each step's gradient into Adam within a worst-case bound of float64's at the step's own
//   weights (a float64 run carrying a bound on every element of every tensor: whole, loose);
//   each overflow and skip where float64 says one may or must be, the scale by the rule;
//   each Adam step within float32's rounding of float64 Adam from the step's own state;
//   every weight after S steps within 4 x the drift the bounds allow (lesson 14's model);
//   16 bytes per parameter of model state on the ledger; M micro-batches against one batch of
//   M times the size.
//
// Run:  ./distlab lesson 20                        2 ranks, the five recipes, 16 steps each
//       ./distlab lesson 20 --recipe fp16          one recipe
//       ./distlab lesson 20 --micro-batches 4      gradient accumulation over 4 micro-batches
//       ./distlab lesson 20 --break forget-unscale the classic bugs (--break list)
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/base/fp8.hpp"
#include "core/base/half.hpp"
#include "core/base/partition.hpp"
#include "core/base/units.hpp"
#include "core/collectives/all_gather_ring.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"
#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"
#include "core/training/precision.hpp"
#include "core/training/precision_reference.hpp"
#include "core/training/teacher.hpp"

using namespace distlab;
using model::Teacher;
using ops::In;

namespace {

enum class Recipe { fp32, bf16, fp16, fp16_unscaled, fp8 };
constexpr Recipe kRecipes[] = {Recipe::fp32, Recipe::bf16, Recipe::fp16, Recipe::fp16_unscaled,
                               Recipe::fp8};
const char* to_string(Recipe r) {
  switch (r) {
    case Recipe::fp32:
      return "fp32";
    case Recipe::bf16:
      return "bf16";
    case Recipe::fp16:
      return "fp16";
    case Recipe::fp16_unscaled:
      return "fp16-unscaled";
    case Recipe::fp8:
      return "fp8";
  }
  return "?";
}
bool scaled(Recipe r) {
  return r == Recipe::fp16;
}

struct Setup {
  model::MlpShape shape = model::make_shape({16, 32, 32, 32, 32, 32, 8});
  std::size_t batch = 128;  // the step's samples, over all ranks
  std::size_t micro = 2;    // M: micro-batches per rank and step
  int steps = 16;
  model::OptimizerConfig adam{model::OptimizerKind::adam, 1e-3f};
  precision::LossScaleSettings scaling{16, 1, 1, 1};
  std::size_t amax_history = 16;
  std::vector<Recipe> recipes;
};

// The error model's view of a recipe (precision_reference.hpp).
precision::Model reference_model(const Setup& s, Recipe r) {
  precision::Model m;
  m.store = r == Recipe::fp32                                 ? precision::rounding_f32()
            : r == Recipe::fp16 || r == Recipe::fp16_unscaled ? precision::rounding_f16()
                                                              : precision::rounding_bf16();
  m.fp8 = r == Recipe::fp8;
  m.amax_history = s.amax_history;
  return m;
}

// The samples of step k (0-based) on rank r, micro-batch j: the teacher's [k B, (k + 1) B) split
// over the ranks, each rank's part over its micro-batches.
struct Slice {
  std::size_t first = 0, count = 0;
};
Slice slice(const Setup& s, int ranks, int k, int r, std::size_t j, std::size_t micro) {
  const Partition over_ranks{s.batch, ranks};
  const Partition over_micro{over_ranks.size(r), int(micro)};
  return {std::size_t(k) * s.batch + over_ranks.begin(r) + over_micro.begin(int(j)),
          over_micro.size(int(j))};
}

// The float64 reference's shards of step k: every rank's micro-batches.
std::vector<std::vector<precision::Shard>> reference_shards(const Setup& s, const Teacher& teacher,
                                                            int ranks, int k, std::size_t micro) {
  std::vector<std::vector<precision::Shard>> out(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    for (std::size_t j = 0; j < micro; ++j) {
      const Slice sl = slice(s, ranks, k, r, j, micro);
      out[std::size_t(r)].push_back(
          {model::widen(teacher.inputs(sl.first, sl.count), sl.count, s.shape.in()),
           model::widen(teacher.targets(sl.first, sl.count), sl.count, s.shape.out())});
    }
  return out;
}

// fp8's cast of a GEMM operand, emulated on the host: its amax recorded, the scale from the
// history (a power of two), each element x * scale rounded to the format (fp8::round_to:
// nearest, ties to even, saturating) and divided by the scale again. The values fit T exactly.
template <class T>
double cast_fp8(View<T> out, In<T> in, const fp8::Format& format, precision::AmaxHistory& history) {
  std::vector<T> x = to_host(in);
  double amax = 0;
  for (const T& v : x) amax = std::max(amax, double(std::fabs(float(v))));
  history.record(amax);
  const double scale = history.power_of_two_scale(format);
  for (T& v : x)
    v = T(float(double(fp8::round_to(format, float(double(float(v)) * scale))) / scale));
  from_host(out, x);
  return scale;
}

// A tensor's stored values, widened (exactly) to double: what the checks read.
template <class T>
std::vector<double> widened(View<T> v) {
  std::vector<double> out;
  for (const auto& x : to_host(v)) out.push_back(double(float(x)));
  return out;
}

// One micro-batch's tensors as the run stored them, for the checks of each operation from its own
// stored inputs (check_micro_batch). Per layer l: in (its input as stored), a and w (what its
// GEMMs read: in and W, or their fp8 casts, with their scales), b, z; from the backward: dh (the
// gradient arriving from above), dz, d (dz or its fp8 cast), dw, db, and dh_out (to the layer
// below).
struct MicroTape {
  std::size_t rows = 0;
  std::vector<float> x, t;
  std::vector<std::vector<double>> in, w_in, a, w, b, z, dh, dz, d, dw, db, dh_out;
  std::vector<double> a_scale, w_scale, d_scale;
  std::vector<double> dy;  // dL/dy times the scale, as stored
};

// One recipe's run on this rank, and what the checks and the report read off it.
struct RecipeRun {
  std::vector<double> losses;  // per step, the whole batch's (every rank's sum)
  std::vector<double> scales;  // S each step's loss was multiplied by
  std::vector<bool> skipped;
  std::vector<float> master;  // after the last step
  std::uint64_t zeros = 0,
                elements = 0;  // gradient elements into Adam that were 0, where float64's is not
  std::uint64_t lost_updates = 0;            // Adam steps that left a weight where it was
  std::uint64_t state_bytes[3] = {0, 0, 0};  // params, grads, optimizer on the ledger
  std::vector<float> first_gradient;         // step 1's gradient into Adam
};

// The model of one recipe on this rank: T the storage format of the weights the GEMMs read,
// the activations and the gradients; float32 master weights and Adam's moments.
template <class T>
class Replica {
 public:
  Replica(Comm& comm, const Setup& s, Recipe recipe, std::size_t micro)
      : comm_(comm), s_(s), recipe_(recipe), micro_(micro), n_(s.shape.params()) {
    const bool f32 = std::is_same_v<T, float>;
    // STEP 1: the model state: the compute copy of the weights and the gradients in T, the
    // float32 master weights (fp32 trains those directly) and Adam's moments.
    w_ = comm.alloc<T>(n_, Category::params);
    g_ = comm.alloc<T>(n_, Category::grads);
    if (!f32) master_ = comm.alloc<float>(n_, Category::optimizer);
    m_ = comm.alloc<float>(n_, Category::optimizer);
    v_ = comm.alloc<float>(n_, Category::optimizer);
    // ... and one micro-batch's activations, in T.
    const Partition over_ranks{s.batch, comm.size()};
    rows_ = Partition{over_ranks.size(comm.rank()), int(micro)}.size(0);  // the largest
    std::size_t widest = 0;
    for (std::size_t d : s.shape.dims) widest = std::max(widest, d);
    ones_ = comm.alloc<T>(rows_, Category::activations);
    ops::fill(ones_.view(), T(1.0f));
    x_ = comm.alloc<float>(rows_ * s.shape.in(), Category::data);
    t_ = comm.alloc<float>(rows_ * s.shape.out(), Category::data);
    for (std::size_t l = 0; l < s.shape.layers(); ++l) {
      in_.push_back(comm.alloc<T>(rows_ * s.shape.dims[l], Category::activations));
      z_.push_back(comm.alloc<T>(rows_ * s.shape.dims[l + 1], Category::activations));
      if (recipe == Recipe::fp8)
        w8_.push_back(comm.alloc<T>(s.shape.dims[l] * s.shape.dims[l + 1], Category::activations));
    }
    dz_ = comm.alloc<T>(rows_ * widest, Category::activations);
    dh_ = comm.alloc<T>(rows_ * widest, Category::activations);
    dz8_ = comm.alloc<T>(rows_ * widest, Category::activations);
    part_ = comm.alloc<T>(widest * widest, Category::activations);
    y32_ = comm.alloc<float>(rows_ * s.shape.out(), Category::activations);
    dy32_ = comm.alloc<float>(rows_ * s.shape.out(), Category::activations);
    db32_ = comm.alloc<float>(widest, Category::activations);
    loss_ = comm.alloc<float>(1, Category::data);
    hist_in_.assign(s.shape.layers(), precision::AmaxHistory(s.amax_history));
    hist_w_ = hist_in_;
    hist_dz_ = hist_in_;
  }

  void load(const std::vector<float>& initial) {
    Buffer<float> init = comm_.alloc_from(initial, Category::data);
    ops::cast(w_.view(), View<const float>(init.view()));
    if (!master_.empty()) ops::copy(master_.view(), View<const float>(init.view()));
  }
  // The float32 weights Adam steps: the master copy, or fp32's weights themselves.
  View<float> master() {
    if constexpr (std::is_same_v<T, float>)
      return w_.view();
    else
      return master_.view();
  }
  View<const float> m() { return View<const float>(m_.view()); }
  View<const float> v() { return View<const float>(v_.view()); }

  // STEP 2: forward and backward of one micro-batch, its gradient (times the loss scale) added
  // into g in T: written there by the first micro-batch, added by the others.
  double micro_batch(const Teacher& teacher, const Slice& sl, bool first, double loss_scale,
                     MicroTape* tape = nullptr) {
    const model::MlpShape& s = s_.shape;
    const std::size_t L = s.layers(), rows = sl.count;
    if (tape) {
      *tape = MicroTape{};
      tape->rows = rows;
      tape->x = teacher.inputs(sl.first, rows);
      tape->t = teacher.targets(sl.first, rows);
      for (auto* v : {&tape->in, &tape->w_in, &tape->a, &tape->w, &tape->b, &tape->z, &tape->dh,
                      &tape->dz, &tape->d, &tape->dw, &tape->db, &tape->dh_out})
        v->resize(L);
      tape->a_scale.assign(L, 1);
      tape->w_scale.assign(L, 1);
      tape->d_scale.assign(L, 1);
    }
    from_host(x_.view().sub(0, rows * s.in()), teacher.inputs(sl.first, rows));
    from_host(t_.view().sub(0, rows * s.out()), teacher.targets(sl.first, rows));
    ops::cast(in_[0].view().sub(0, rows * s.in()),
              View<const float>(x_.view().sub(0, rows * s.in())));
    const In<T> ones = In<T>(ones_.view().sub(0, rows));
    std::vector<In<T>> weight(L);  // what each layer's GEMMs read: W in T, or its fp8 cast
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t d_in = s.dims[l], d_out = s.dims[l + 1];
      View<T> a = in_[l].view().sub(0, rows * d_in);
      weight[l] = In<T>(w_.view().sub(s.weight_offset(l), d_in * d_out));
      if (tape) tape->in[l] = widened(In<T>(a)), tape->w_in[l] = widened(weight[l]);
      if (recipe_ == Recipe::fp8) {  // the GEMM's operands in E4M3
        const double sa = cast_fp8(a, In<T>(a), fp8::kE4M3, hist_in_[l]);
        const double sw = cast_fp8(w8_[l].view(), weight[l], fp8::kE4M3, hist_w_[l]);
        weight[l] = In<T>(w8_[l].view());
        if (tape) tape->a_scale[l] = sa, tape->w_scale[l] = sw;
      }
      if (tape) {
        tape->a[l] = widened(In<T>(a));
        tape->w[l] = widened(weight[l]);
        tape->b[l] = widened(In<T>(w_.view().sub(s.bias_offset(l), d_out)));
      }
      View<T> z = z_[l].view().sub(0, rows * d_out);
      ops::gemm(z, In<T>(a), weight[l], rows, d_out, d_in);
      ops::gemm(z, ones, In<T>(w_.view().sub(s.bias_offset(l), d_out)), rows, d_out, 1, false,
                false, 1.0f, 1.0f);  // + b
      if (tape) tape->z[l] = widened(In<T>(z));
      if (l + 1 < L) ops::gelu_forward(in_[l + 1].view().sub(0, rows * d_out), In<T>(z));
    }
    // The loss (the mean over the whole step's batch) and dL/dy, in float32; times the scale,
    // then rounded to T: where fp16 without a scale loses what is under 2^-24.
    const std::size_t no = rows * s.out();
    ops::cast(y32_.view().sub(0, no), In<T>(z_[L - 1].view().sub(0, no)));
    model::mse_loss(loss_.view(), dy32_.view().sub(0, no), In<float>(y32_.view().sub(0, no)),
                    In<float>(t_.view().sub(0, no)), s_.batch, s.out());
    ops::scale(dy32_.view().sub(0, no), float(loss_scale));
    View<T> dz = dz_.view().sub(0, no);
    ops::cast(dz, View<const float>(dy32_.view().sub(0, no)));
    if (tape) tape->dy = widened(In<T>(dz));
    for (std::size_t l = L; l-- > 0;) {
      const std::size_t d_in = s.dims[l], d_out = s.dims[l + 1];
      dz = dz_.view().sub(0, rows * d_out);
      if (l + 1 < L) {  // through GeLU: dz = dh gelu'(z)
        if (tape) tape->dh[l] = widened(In<T>(dh_.view().sub(0, rows * d_out)));
        ops::gelu_backward(dz, In<T>(dh_.view().sub(0, rows * d_out)),
                           In<T>(z_[l].view().sub(0, rows * d_out)));
      }
      In<T> d = In<T>(dz);
      if (recipe_ == Recipe::fp8) {  // the backward GEMMs' gradient operand in E5M2
        View<T> d8 = dz8_.view().sub(0, rows * d_out);
        const double sd = cast_fp8(d8, d, fp8::kE5M2, hist_dz_[l]);
        d = In<T>(d8);
        if (tape) tape->d_scale[l] = sd;
      }
      if (tape) tape->dz[l] = widened(In<T>(dz)), tape->d[l] = widened(d);
      // dW = in^T dz and db = the column sums of dz, each rounded to T, into g
      View<T> gw = g_.view().sub(s.weight_offset(l), d_in * d_out);
      View<T> part = part_.view().sub(0, d_in * d_out);
      ops::gemm(first ? gw : part, In<T>(in_[l].view().sub(0, rows * d_in)), d, d_in, d_out, rows,
                true, false);
      if (tape) tape->dw[l] = widened(In<T>(first ? gw : part));
      if (!first) ops::add(gw, In<T>(part));
      ops::col_sums(db32_.view().sub(0, d_out), In<T>(dz), rows, d_out);
      View<T> gb = g_.view().sub(s.bias_offset(l), d_out);
      ops::cast(first ? gb : part.sub(0, d_out), View<const float>(db32_.view().sub(0, d_out)));
      if (tape) tape->db[l] = widened(In<T>(first ? gb : part.sub(0, d_out)));
      if (!first) ops::add(gb, In<T>(part.sub(0, d_out)));
      if (l > 0) {  // dh = dz W^T, for the layer below
        ops::gemm(dh_.view().sub(0, rows * d_in), d, weight[l], rows, d_in, d_out, false, true);
        if (tape) tape->dh_out[l] = widened(In<T>(dh_.view().sub(0, rows * d_in)));
      }
    }
    return double(to_host(View<const float>(loss_.view()))[0]);
  }

  // STEP 3: the micro-batches' sums added over the ranks, in T.
  void all_reduce() {
    auto phase = comm_.phase("all-reduce gradients");
    coll::all_reduce(comm_, g_.view(), coll::AllReduceAlgo::ring_chunked, "grads");
  }
  std::vector<double> gradient() { return widened(In<T>(g_.view())); }
  std::vector<double> weights() { return widened(In<T>(w_.view())); }

  // STEP 4: Adam on the float32 master weights, from g divided by the loss scale in float32
  // (in chunks: an f32 window, not a second gradient), then the compute copy rounded from them.
  // Returns the gradient Adam took.
  std::vector<float> adam(double loss_scale) {
    auto phase = comm_.phase("Adam");
    ++t_step_;
    std::vector<float> took(n_);
    constexpr std::size_t kChunk = 4096;
    Buffer<float> window = comm_.alloc<float>(std::min(kChunk, n_), Category::grads);
    View<float> params = master();
    for (std::size_t at = 0; at < n_; at += kChunk) {
      const std::size_t n = std::min(kChunk, n_ - at);
      View<float> g32 = window.view().sub(0, n);
      ops::cast(g32, View<const T>(g_.view().sub(at, n)));
      if (!broken("forget-unscale")) ops::scale(g32, float(1.0 / loss_scale));
      const std::vector<float> part = to_host(View<const float>(g32));
      std::copy(part.begin(), part.end(), took.begin() + std::ptrdiff_t(at));
      ops::adam_step(params.sub(at, n), View<const float>(g32), m_.view().sub(at, n),
                     v_.view().sub(at, n), adam_config(), t_step_);
    }
    if (broken("fp16-master")) {  // the master weights kept in float16: each rounded to it
      Buffer<Half> h = comm_.alloc<Half>(n_, Category::grads);
      ops::cast(h.view(), View<const float>(params));
      ops::cast(params, View<const Half>(h.view()));
    }
    if (!master_.empty()) ops::cast(w_.view(), View<const float>(master_.view()));
    return took;
  }
  ops::AdamConfig adam_config() const {
    return {s_.adam.lr, s_.adam.beta1, s_.adam.beta2, s_.adam.eps, 0.0f};
  }
  int adam_steps() const { return t_step_; }

 private:
  Comm& comm_;
  const Setup& s_;
  Recipe recipe_;
  std::size_t micro_, n_, rows_ = 0;
  Buffer<T> w_, g_, ones_, dz_, dh_, dz8_, part_;
  Buffer<float> master_, m_, v_, x_, t_, y32_, dy32_, db32_, loss_;
  std::vector<Buffer<T>> in_, z_, w8_;
  std::vector<precision::AmaxHistory> hist_in_, hist_w_, hist_dz_;
  int t_step_ = 0;
};

// --- each operation from its own stored inputs ---------------------------------------------------
//
// The end-to-end bound (precision_reference.hpp) holds for any correct run but is worst-case, and
// so loose (a layer multiplies E by |W|'s row sums) that it misses a gradient off by 2. These
// checks are tight: each tensor the run stored must be what its one operation gives on the
// tensors the run stored before it, rounded to the format: float64 computes the exact result c
// and the most float32's arithmetic can move it, d; rounding is monotone, so the stored value
// lies in [round(c - d), round(c + d)] (precision::rounds_from), mostly one value of the format.
// Nothing is carried from one operation to the next, so nothing compounds.

using Matrix = model::RowMatrix;
constexpr double kU32 = 0x1p-24;

Matrix as_matrix(const std::vector<double>& v, std::size_t rows, std::size_t cols) {
  return Eigen::Map<const Matrix>(v.data(), Eigen::Index(rows), Eigen::Index(cols));
}

// The first element of `got` that is not what [c - d, c + d] rounds to, said; "" if none.
std::string first_off(const precision::Rounding& f, const std::vector<double>& got, const Matrix& c,
                      const Matrix& d, const std::string& what) {
  for (Eigen::Index i = 0; i < c.size(); ++i) {
    const double lo = c.data()[i] - d.data()[i], hi = c.data()[i] + d.data()[i];
    if (!precision::rounds_from(f, got[std::size_t(i)], lo, hi))
      return fmt::format("{}[{}] = {:.9g}, float64 {:.9g} rounds to [{:.9g}, {:.9g}]", what, i,
                         got[std::size_t(i)], c.data()[i], precision::round_to(f, lo),
                         precision::round_to(f, hi));
  }
  return "";
}

// C = op(A) op(B) accumulated in float32 over k terms: c and d = k u32 |A| |B| (and C's own
// float32 rounding).
std::pair<Matrix, Matrix> product(const Matrix& a, const Matrix& b) {
  const double k = double(a.cols());
  return {a * b, (k + 1) * kU32 * (a.cwiseAbs() * b.cwiseAbs())};
}

// fp8's cast: each element x of the tensor becomes round(x s) / s in the format, s a power of
// two under which the tensor's largest |x| fits.
std::string check_cast(const precision::Rounding& f8, const std::vector<double>& from,
                       const std::vector<double>& got, double scale, const std::string& what) {
  int exponent = 0;
  if (std::frexp(scale, &exponent) != 0.5)
    return fmt::format("{}: scale {} is not a power of 2", what, scale);
  double amax = 0;
  for (double x : from) amax = std::max(amax, std::fabs(x));
  if (amax * scale > f8.largest)
    return fmt::format("{}: its largest |x| {:.6g} times the scale {} passes {}'s {}", what, amax,
                       scale, f8.name, f8.largest);
  for (std::size_t i = 0; i < from.size(); ++i) {
    const double want = precision::round_to(f8, from[i] * scale) / scale;
    if (got[i] != want)
      return fmt::format("{}[{}] = {:.9g}, {} of {:.9g} at scale {} is {:.9g}", what, i, got[i],
                         f8.name, from[i], scale, want);
  }
  return "";
}

struct OpFailures {
  std::string forward, backward, sums;  // the first failure of each kind; "" if none
};

// One micro-batch's stored tensors, each against its operation on the stored inputs before it.
void check_micro_batch(const Setup& s, Recipe recipe, const MicroTape& tp, double scale,
                       const std::string& at, OpFailures& out) {
  const precision::Rounding f = reference_model(s, recipe).store;
  const precision::Rounding e4m3 = precision::rounding_e4m3(), e5m2 = precision::rounding_e5m2();
  const bool fp8 = recipe == Recipe::fp8;
  const model::MlpShape& sh = s.shape;
  const std::size_t L = sh.layers(), m = tp.rows;
  auto note = [&](std::string& slot, std::string failure) {
    if (slot.empty() && !failure.empty()) slot = at + ": " + failure;
  };
  // The forward. The data, rounded to the format:
  {
    Matrix x =
        Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
            tp.x.data(), Eigen::Index(m), Eigen::Index(sh.in()))
            .cast<double>();
    note(out.forward, first_off(f, tp.in[0], x, Matrix::Zero(x.rows(), x.cols()), "x"));
  }
  for (std::size_t l = 0; l < L; ++l) {
    const std::size_t di = sh.dims[l], dn = sh.dims[l + 1];
    const std::string layer = fmt::format("layer {} ", l);
    if (fp8) {
      note(out.forward, check_cast(e4m3, tp.in[l], tp.a[l], tp.a_scale[l], layer + "input"));
      note(out.forward, check_cast(e4m3, tp.w_in[l], tp.w[l], tp.w_scale[l], layer + "W"));
    }
    // z = round(round(a W) + b): a W's interval, rounded, then the bias added (one float32 add)
    const auto [c, d] = product(as_matrix(tp.a[l], m, di), as_matrix(tp.w[l], di, dn));
    Matrix lo(c.rows(), c.cols()), hi(c.rows(), c.cols());
    for (Eigen::Index i = 0; i < c.size(); ++i) {
      const double b = tp.b[l][std::size_t(i % Eigen::Index(dn))];
      const double l1 = precision::round_to(f, c.data()[i] - d.data()[i]) + b;
      const double h1 = precision::round_to(f, c.data()[i] + d.data()[i]) + b;
      lo.data()[i] = l1 - kU32 * std::fabs(l1);
      hi.data()[i] = h1 + kU32 * std::fabs(h1);
    }
    note(out.forward, first_off(f, tp.z[l], (lo + hi) / 2, (hi - lo) / 2, layer + "z = a W + b"));
    if (l + 1 < L) {  // the next layer's input: gelu(z) in float32, rounded
      Matrix g = as_matrix(tp.z[l], m, dn).unaryExpr(&model::reference_gelu);
      const Matrix dg = 32 * kU32 * (as_matrix(tp.z[l], m, dn).cwiseAbs() + g.cwiseAbs());
      note(out.forward, first_off(f, tp.in[l + 1], g, dg, layer + "gelu(z)"));
    }
  }
  // The loss's gradient: S 2 (y - t) / (B out), three float32 roundings, then the format's.
  {
    Matrix t =
        Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
            tp.t.data(), Eigen::Index(m), Eigen::Index(sh.out()))
            .cast<double>();
    const Matrix c =
        scale * 2.0 / double(s.batch * sh.out()) * (as_matrix(tp.z[L - 1], m, sh.out()) - t);
    note(out.backward, first_off(f, tp.dy, c, 4 * kU32 * c.cwiseAbs(), "dL/dy times S"));
  }
  for (std::size_t l = L; l-- > 0;) {
    const std::size_t di = sh.dims[l], dn = sh.dims[l + 1];
    const std::string layer = fmt::format("layer {} ", l);
    if (l + 1 < L) {  // dz = dh gelu'(z)
      const Matrix slope = as_matrix(tp.z[l], m, dn).unaryExpr(&model::reference_gelu_grad);
      const Matrix dh = as_matrix(tp.dh[l], m, dn);
      note(out.backward,
           first_off(f, tp.dz[l], dh.cwiseProduct(slope),
                     32 * kU32 * dh.cwiseAbs().cwiseProduct(slope.cwiseAbs() + Matrix::Ones(m, dn)),
                     layer + "dz = dh gelu'(z)"));
    }
    if (fp8)
      note(out.backward, check_cast(e5m2, tp.dz[l], tp.d[l], tp.d_scale[l], layer + "dz's cast"));
    const Matrix a = as_matrix(tp.a[l], m, di), dd = as_matrix(tp.d[l], m, dn);
    {
      const auto [c, d] = product(a.transpose(), dd);
      note(out.backward, first_off(f, tp.dw[l], c, d, layer + "dW = a^T dz"));
    }
    {
      const Matrix dz = as_matrix(tp.dz[l], m, dn);
      const Matrix c = dz.colwise().sum();
      note(out.backward,
           first_off(f, tp.db[l], c, double(m + 1) * kU32 * dz.cwiseAbs().colwise().sum(),
                     layer + "db = the column sums of dz"));
    }
    if (l > 0) {
      const auto [c, d] = product(dd, as_matrix(tp.w[l], di, dn).transpose());
      note(out.backward, first_off(f, tp.dh_out[l], c, d, layer + "dh = dz W^T"));
    }
  }
}

// A micro-batch's gradient in the flat layout [W0 b0 W1 b1 ...], from its tape.
std::vector<double> tape_gradient(const model::MlpShape& sh, const MicroTape& tp) {
  std::vector<double> g(sh.params());
  for (std::size_t l = 0; l < sh.layers(); ++l) {
    std::copy(tp.dw[l].begin(), tp.dw[l].end(), g.begin() + std::ptrdiff_t(sh.weight_offset(l)));
    std::copy(tp.db[l].begin(), tp.db[l].end(), g.begin() + std::ptrdiff_t(sh.bias_offset(l)));
  }
  return g;
}

// The loss scale's rule, written out apart from precision::DynamicLossScale (hysteresis 1):
// halve on an overflow (not below min), double after `window` clean steps in a row.
struct ScaleRule {
  double scale;
  int clean = 0;
  void after(bool overflow, const precision::LossScaleSettings& s) {
    if (overflow) {
      scale = std::max(scale / 2, s.min_scale);
      clean = 0;
    } else if (++clean == s.window) {
      scale *= 2;
      clean = 0;
    }
  }
};

std::string power(double scale) {
  return fmt::format("2^{}", int(std::lround(std::log2(scale))));
}

// The float64 reference's results, computed once per process for all the ranks it runs: keyed
// by everything they depend on (the recipe, the step, the weights or the skips), so that ranks
// whose weights differ (a bug) each get their own.
struct StepKey {
  Recipe recipe;
  int step;
  double scale;
  std::vector<float> weights;
  bool operator==(const StepKey&) const = default;
};
struct StepValue {
  precision::BoundedGradient ref;
  std::vector<precision::Fp8History> history;  // fp8's, after this step
};
struct DriftKey {
  Recipe recipe;
  std::vector<double> scales;
  std::vector<bool> skipped;
  bool operator==(const DriftKey&) const = default;
};
struct DriftValue {
  Eigen::VectorXd weights;
  model::Float32Drift drift;
  double last_loss = 0;
};
template <class Key, class Value>
class Cache {
 public:
  template <class Make>
  Value get(const Key& key, const Make& make) {
    std::lock_guard<std::mutex> lock(mutex_);  // the first rank computes, the others wait
    for (const auto& [k, v] : entries_)
      if (k == key) return v;
    entries_.emplace_back(key, make());
    return entries_.back().second;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<Key, Value>> entries_;
};
Cache<StepKey, StepValue> step_cache;
Cache<DriftKey, DriftValue> drift_cache;

// One recipe's S steps on this rank, and their checks.
template <class T>
RecipeRun train(Comm& world, const Setup& s, Recipe recipe, const Teacher& teacher,
                const std::vector<float>& initial) {
  const char* name = to_string(recipe);
  const int N = world.size(), me = world.rank();
  const std::size_t n = s.shape.params();
  const precision::Model ref_model = reference_model(s, recipe);
  RecipeRun run;
  ErrorBound grads_worst, adam_worst;
  std::string grads_fail, adam_fail, skip_fail;
  OpFailures ops_fail;
  bool skips_ok = true, scales_ok = true;
  std::vector<precision::Fp8History> ref_history(static_cast<std::size_t>(N));
  precision::DynamicLossScale scaler(s.scaling);
  ScaleRule rule{scaled(recipe) ? std::ldexp(1.0, s.scaling.initial_scale_power) : 1.0};
  {
    Replica<T> rep(world, s, recipe, s.micro);
    rep.load(initial);
    for (int k = 0; k < s.steps; ++k) {
      auto phase = world.phase(fmt::format("{} step {}", name, k + 1));
      const double scale = scaled(recipe) ? scaler.scale() : 1.0;
      if (scaled(recipe)) world.recorder().value("fp16 loss scale", scale);  // a Timeline track
      const std::vector<float> before = to_host(View<const float>(rep.master()));
      const std::vector<float> m0 = to_host(rep.m()), v0 = to_host(rep.v());
      const std::vector<double> copy = rep.weights();  // the compute copy this step reads
      double loss = 0;
      std::vector<MicroTape> tapes(s.micro);
      std::vector<std::vector<double>> g_after;  // my gradient after each micro-batch
      {
        auto fw = world.phase("forward and backward");
        for (std::size_t j = 0; j < s.micro; ++j) {
          loss +=
              rep.micro_batch(teacher, slice(s, N, k, me, j, s.micro), j == 0, scale, &tapes[j]);
          g_after.push_back(rep.gradient());
        }
      }
      rep.all_reduce();
      const std::vector<double> g_sum = rep.gradient();
      // Every rank's sum before the all-reduce, for the check of the ranks' sum (off the
      // lesson's exchanges: a check's own).
      std::vector<double> g_ranks;
      if (N > 1) {
        auto check_phase = world.phase("check: the ranks' sums");
        Buffer<float> all = world.alloc<float>(n * std::size_t(N), Category::data);
        std::vector<float> mine(g_after.back().begin(), g_after.back().end());
        from_host(all.view().sub(std::size_t(me) * n, n), mine);
        coll::all_gather_ring(world, all.view(), "check: sums");
        for (float x : to_host(View<const float>(all.view()))) g_ranks.push_back(x);
      }
      Buffer<float> total = world.alloc_from(std::vector<float>{float(loss)}, Category::data);
      coll::all_reduce(world, total.view(), coll::AllReduceAlgo::ring_chunked, "loss");
      run.losses.push_back(to_host(View<const float>(total.view()))[0]);
      run.scales.push_back(scale);
      // Any inf or NaN in the summed gradient: the same answer on every rank (they hold one sum).
      const bool overflow =
          std::any_of(g_sum.begin(), g_sum.end(), [](double x) { return !std::isfinite(x); });

      // The float64 reference at this step's own weights: the gradient and its bound.
      const StepValue cached = step_cache.get(StepKey{recipe, k, scale, before}, [&] {
        StepValue v;
        v.history = ref_history;
        v.ref = precision::bounded_gradient(s.shape, model::widen(before),
                                            reference_shards(s, teacher, N, k, s.micro), s.batch,
                                            ref_model, scale, &v.history);
        return v;
      });
      const precision::BoundedGradient& ref = cached.ref;
      ref_history = cached.history;
      if ((overflow && !ref.overflow.possible) || (!overflow && ref.overflow.sure)) {
        skips_ok = false;
        skip_fail += fmt::format("step {}: {} where float64 says {}; ", k + 1,
                                 overflow ? "an overflow" : "none",
                                 ref.overflow.sure ? "one must be" : "none can be");
      }
      // The loss scale: skip the step on an overflow (fp16), and the scale's change.
      const bool skip = scaled(recipe) && overflow;
      run.skipped.push_back(skip);
      if (scaled(recipe)) {
        const precision::LossScaleStep st = scaler.update(overflow);
        rule.after(overflow, s.scaling);
        if (st.scale_after != rule.scale && scales_ok) {
          scales_ok = false;
          skip_fail +=
              fmt::format("step {}: the scale went {} -> {}, the rule says {}; ", k + 1,
                          power(st.scale_before), power(st.scale_after), power(rule.scale));
        }
        if (me == 0 && (st.skipped || st.changed()))
          world.say("  {} step {}: {}loss scale {} -> {}\n", name, k + 1,
                    st.skipped ? "inf/NaN in the gradients, step skipped; " : "",
                    power(st.scale_before), power(st.scale_after));
      }
      if (skip) {
        const std::vector<float> after = to_host(View<const float>(rep.master()));
        if (after != before)
          adam_fail += fmt::format("step {} was skipped but moved weights; ", k + 1);
        continue;
      }
      const std::vector<float> took = rep.adam(scale);
      if (k == 0) run.first_gradient = took;
      // Each operation from its own stored inputs (not on an overflow's step: inf and NaN).
      {
        const std::string at = fmt::format("step {}", k + 1);
        const precision::Rounding f = ref_model.store;
        if (!std::is_same_v<T, float>)  // the compute copy: the master weights rounded
          for (std::size_t i = 0; i < n && ops_fail.forward.empty(); ++i)
            if (copy[i] != precision::round_to(f, before[i]))
              ops_fail.forward = fmt::format(
                  "{}: weight [{}] = {:.9g}, the master {:.9g} rounds "
                  "to {:.9g}",
                  at, i, copy[i], before[i], precision::round_to(f, before[i]));
        for (std::size_t j = 0; j < s.micro; ++j)
          check_micro_batch(s, recipe, tapes[j], scale, fmt::format("{} micro-batch {}", at, j),
                            ops_fail);
        // the micro-batches added in the format, each addition from its own state
        std::string sums;
        for (std::size_t j = 1; j < s.micro && sums.empty(); ++j) {
          const std::vector<double> part = tape_gradient(s.shape, tapes[j]);
          for (std::size_t i = 0; i < n && sums.empty(); ++i) {
            const double c = g_after[j - 1][i] + part[i];
            if (!precision::rounds_from(f, g_after[j][i], c - kU32 * std::fabs(c),
                                        c + kU32 * std::fabs(c)))
              sums = fmt::format("micro-batch {}: [{}] = {:.9g}, {:.9g} + {:.9g} in {}", j, i,
                                 g_after[j][i], g_after[j - 1][i], part[i], f.name);
          }
        }
        // the ranks' sums added in the format: N - 1 additions, each within a rounding
        for (std::size_t i = 0; i < n && sums.empty() && N > 1; ++i) {
          double c = 0, magnitude = 0;
          for (int r = 0; r < N; ++r) {
            c += g_ranks[std::size_t(r) * n + i];
            magnitude += std::fabs(g_ranks[std::size_t(r) * n + i]);
          }
          const double d = (N - 1) * ((f.u + kU32) * magnitude + f.a) * (1 + N * f.u);
          if (!(std::fabs(g_sum[i] - c) <= d))
            sums = fmt::format("the ranks' sum [{}] = {:.9g}, float64 {:.9g} within {:.3g}", i,
                               g_sum[i], c, d);
        }
        // the unscale: divided by S in float32
        for (std::size_t i = 0; i < n && sums.empty(); ++i)
          if (double(took[i]) != double(float(g_sum[i] / scale)))
            sums = fmt::format("Adam took [{}] = {:.9g}, the sum {:.9g} / S = {:.9g}", i, took[i],
                               g_sum[i], double(float(g_sum[i] / scale)));
        if (ops_fail.sums.empty() && !sums.empty()) ops_fail.sums = at + ": " + sums;
      }
      // The gradient Adam took against float64's, element by element.
      ErrorBound g_bound;
      for (std::size_t i = 0; i < n; ++i) {
        const auto I = Eigen::Index(i);
        g_bound.add(double(took[i]) - ref.g[I], {ref.e[I], 0});
        run.elements += 1;
        if (took[i] == 0 && ref.g[I] != 0) run.zeros += 1;
      }
      if (!g_bound.ok() && grads_fail.empty())
        grads_fail = fmt::format("step {}: {}", k + 1, g_bound.detail("bound", "-"));
      if (g_bound.worst_share() > grads_worst.worst_share() || k == 0) grads_worst = g_bound;
      // Adam's step from this step's own state: within float32's rounding of float64's Adam.
      const std::vector<float> after = to_host(View<const float>(rep.master()));
      ErrorBound a_bound;
      for (std::size_t i = 0; i < n; ++i) {
        const model::StepBound b =
            model::adam_step_bound(before[i], m0[i], v0[i], took[i], 0, s.adam, rep.adam_steps());
        a_bound.add(double(after[i]) - b.want, {b.rounding, b.gradient});
        if (after[i] == before[i] && took[i] != 0) run.lost_updates += 1;
      }
      if (!a_bound.ok() && adam_fail.empty())
        adam_fail = fmt::format("step {}: {}", k + 1, a_bound.detail("rounding", "gradient"));
      if (a_bound.worst_share() > adam_worst.worst_share() || k == 0) adam_worst = a_bound;
    }
    run.master = to_host(View<const float>(rep.master()));
    const Ledger& ledger = world.ledger();  // the model state, once the steps are done
    run.state_bytes[0] = std::uint64_t(ledger.current(Category::params));
    run.state_bytes[1] = std::uint64_t(ledger.current(Category::grads));
    run.state_bytes[2] = std::uint64_t(ledger.current(Category::optimizer));
  }
  if (world.inject_fault() && recipe == s.recipes.back()) run.master[0] = NAN;  // a lost weight
  const std::string where = fmt::format("{}: rank {}", name, me);
  world.check(fmt::format("{}: each step's gradient into Adam equals float64's within the error "
                          "model's bound",
                          where),
              grads_fail.empty(),
              grads_fail.empty()
                  ? fmt::format("worst {:.3g} of its bound", grads_worst.worst_share())
                  : grads_fail);
  const char* fmt_name = reference_model(s, recipe).store.name;
  world.check(
      fmt::format("{}: each forward tensor is its operation on the stored inputs, rounded "
                  "to {}{}",
                  where, fmt_name, recipe == Recipe::fp8 ? " (the GEMMs' operands: fp8)" : ""),
      ops_fail.forward.empty(), ops_fail.forward);
  world.check(fmt::format("{}: each backward tensor is its operation on the stored inputs, "
                          "rounded to {}",
                          where, fmt_name),
              ops_fail.backward.empty(), ops_fail.backward);
  world.check(fmt::format("{}: the micro-batches' sum, the ranks' sum and the unscale, each "
                          "from its own inputs",
                          where),
              ops_fail.sums.empty(), ops_fail.sums);
  world.check(fmt::format("{}: each overflow where float64 allows one{}", where,
                          scaled(recipe) ? ", each skip and loss scale by the rule" : ""),
              skips_ok && scales_ok, skip_fail);
  world.check(fmt::format("{}: each Adam step equals float64's from its own state within "
                          "float32's rounding",
                          where),
              adam_fail.empty(),
              adam_fail.empty() ? fmt::format("worst {:.3g} of its bound", adam_worst.worst_share())
                                : adam_fail);

  // Every weight after S steps against float64's run of the same steps (the same skips: each
  // was checked above), within kDriftRoom x the drift its bounds allow.
  {
    const DriftValue ref = drift_cache.get(DriftKey{recipe, run.scales, run.skipped}, [&] {
      DriftValue out;
      Eigen::VectorXd w = model::widen(initial);
      model::ReferenceOptimizer opt(n, s.adam);
      out.drift = {Eigen::VectorXd::Zero(Eigen::Index(n)), Eigen::VectorXd::Zero(Eigen::Index(n))};
      std::vector<precision::Fp8History> history(static_cast<std::size_t>(N));
      int t = 0;
      for (int k = 0; k < s.steps; ++k) {
        const precision::BoundedGradient g =
            precision::bounded_gradient(s.shape, w, reference_shards(s, teacher, N, k, s.micro),
                                        s.batch, ref_model, run.scales[std::size_t(k)], &history);
        out.last_loss = g.loss;
        if (run.skipped[std::size_t(k)]) continue;
        ++t;
        for (Eigen::Index i = 0; i < Eigen::Index(n); ++i) {
          const model::StepBound b =
              model::step_bound(s.adam, w[i], opt.m()[i], opt.v()[i], g.g[i], g.e[i], t);
          out.drift.rounding[i] += b.rounding;
          out.drift.gradient[i] += b.gradient;
        }
        opt.step(w, g.g);
      }
      out.weights = std::move(w);
      return out;
    });
    const Eigen::VectorXd& w = ref.weights;
    const model::Float32Drift& drift = ref.drift;
    const double last_loss = ref.last_loss;
    ErrorBound bound;
    for (std::size_t i = 0; i < n; ++i) {
      const auto I = Eigen::Index(i);
      bound.add(double(run.master[i]) - w[I],
                {model::kDriftRoom * drift.rounding[I], model::kDriftRoom * drift.gradient[I]});
    }
    world.check(fmt::format("{}: every weight after {} steps equals float64's run within {} x "
                            "the drift its bounds allow",
                            where, s.steps, model::kDriftRoom),
                bound.ok(), bound.detail("rounding", "gradient error"));
    if (me == 0) {
      world.recorder().value(fmt::format("{} drift share", name), bound.worst_share());
      world.recorder().value(fmt::format("{} float64 loss", name), last_loss);
    }
  }
  if (me == 0) {
    world.recorder().value(fmt::format("{} first loss", name), run.losses.front());
    world.recorder().value(fmt::format("{} last loss", name), run.losses.back());
    world.recorder().value(fmt::format("{} skipped", name),
                           double(std::count(run.skipped.begin(), run.skipped.end(), true)));
    world.recorder().value(fmt::format("{} zeros", name),
                           double(run.zeros) / double(std::max<std::uint64_t>(run.elements, 1)));
    world.recorder().value(fmt::format("{} lost updates", name), double(run.lost_updates));
    world.recorder().value(
        fmt::format("{} bytes per parameter", name),
        double(run.state_bytes[0] + run.state_bytes[1] + run.state_bytes[2]) / double(n));
  }
  // The model state on the ledger: 2 + 2 + 12 bytes per parameter (fp32: 4 + 4 + 8).
  if (me == 0) {
    const std::uint64_t w_bytes = sizeof(T) * n, opt_bytes = (sizeof(T) == 4 ? 8 : 12) * n;
    world.check(fmt::format("{}: the model state on the ledger, {} + {} + {} = 16 bytes per "
                            "parameter",
                            where, sizeof(T), sizeof(T), sizeof(T) == 4 ? 8 : 12),
                run.state_bytes[0] == w_bytes && run.state_bytes[1] == w_bytes &&
                    run.state_bytes[2] == opt_bytes,
                fmt::format("params {} B, grads {} B, optimizer {} B for {} parameters",
                            run.state_bytes[0], run.state_bytes[1], run.state_bytes[2], n));
  }
  return run;
}

// Gradient accumulation: step 1's gradient from M micro-batches per rank against one batch of
// M times the size, the same recipe; each within its bound of float64's, so within the sum of
// both of each other; and float64's two sums within float64's own rounding.
template <class T>
void check_accumulation(Comm& world, const Setup& s, Recipe recipe, const Teacher& teacher,
                        const std::vector<float>& initial, const std::vector<float>& accumulated) {
  const int N = world.size(), me = world.rank();
  const double scale = scaled(recipe) ? std::ldexp(1.0, s.scaling.initial_scale_power) : 1.0;
  std::vector<float> one;
  {
    Replica<T> rep(world, s, recipe, 1);
    rep.load(initial);
    auto phase = world.phase(fmt::format("{} step 1 as one batch", to_string(recipe)));
    rep.micro_batch(teacher, slice(s, N, 0, me, 0, 1), true, scale);
    rep.all_reduce();
    one = rep.adam(scale);
  }
  const Eigen::VectorXd w = model::widen(initial);
  std::vector<precision::Fp8History> h1(static_cast<std::size_t>(N)),
      hm(static_cast<std::size_t>(N));
  const precision::Model m = reference_model(s, recipe);
  const auto ref_one = precision::bounded_gradient(
      s.shape, w, reference_shards(s, teacher, N, 0, 1), s.batch, m, scale, &h1);
  const auto ref_acc = precision::bounded_gradient(
      s.shape, w, reference_shards(s, teacher, N, 0, s.micro), s.batch, m, scale, &hm);
  ErrorBound run_bound;
  for (std::size_t i = 0; i < one.size(); ++i) {
    const auto I = Eigen::Index(i);
    run_bound.add(double(accumulated[i]) - double(one[i]), {ref_acc.e[I], ref_one.e[I]});
  }
  const std::string where = fmt::format("{}: rank {}", to_string(recipe), me);
  world.check(fmt::format("{}: step 1's gradient over {} micro-batches equals one batch of {} "
                          "times the size, within both bounds",
                          where, s.micro, s.micro),
              run_bound.ok(), run_bound.detail("accumulated's bound", "one batch's bound"));
  // float64: the two ways differ by float64's own rounding only.
  precision::Model f64;
  f64.store = precision::rounding_f64();
  f64.accumulate = 0x1p-53;
  const auto f_one = precision::bounded_gradient(s.shape, w, reference_shards(s, teacher, N, 0, 1),
                                                 s.batch, f64, 1.0);
  const auto f_acc = precision::bounded_gradient(
      s.shape, w, reference_shards(s, teacher, N, 0, s.micro), s.batch, f64, 1.0);
  ErrorBound f_bound;
  for (Eigen::Index i = 0; i < f_one.g.size(); ++i)
    f_bound.add(f_acc.g[i] - f_one.g[i], {f_acc.e[i], f_one.e[i]});
  world.check(fmt::format("{}: in float64 the same two sums agree to float64's rounding", where),
              f_bound.ok(), f_bound.detail("accumulated's", "one batch's"));
}

template <class T>
void run_recipe(Comm& world, const Setup& s, Recipe recipe, const Teacher& teacher,
                const std::vector<float>& initial) {
  const RecipeRun run = train<T>(world, s, recipe, teacher, initial);
  if (s.micro == 1) return;
  if (run.skipped.front()) {  // an overflow: no gradient to compare
    if (world.rank() == 0)
      world.say("  {}: step 1 was skipped (an overflow): its accumulation is not compared\n",
                to_string(recipe));
    return;
  }
  check_accumulation<T>(world, s, recipe, teacher, initial, run.first_gradient);
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"20", "mixed_precision",
                 "mixed precision: bf16, fp16 with loss scaling and fp8, each against float64", 2,
                 1});
  lesson.set_text(
      "The same MLP trained for S steps five ways, data parallel: fp32; bf16 with float32 master "
      "weights and Adam (16 bytes per parameter); fp16 with dynamic loss scaling (skip and halve "
      "on inf/NaN, double after a clean window); fp16 without a scale (gradients flush to zero); "
      "fp8 GEMMs with power-of-two scales from an amax history. Each against float64 within a "
      "stated error model.",
      "Memory: the params and grads bars halve from fp32 to bf16 while the optimizer's grows by "
      "the master copy. Timeline: each recipe's steps; fp16's skipped steps have no Adam.");
  lesson.set_value_tracks({"fp16 loss scale"});
  lesson.describe_size("not used: --layers, --width, --batch and --steps size the run");
  Setup s;
  std::string recipe = "all";
  int hidden_layers = 5;
  std::size_t width = 32;
  float lr = s.adam.lr;
  auto& app = lesson.app();
  app.add_option("--recipe", recipe, "all, fp32, bf16, fp16, fp16-unscaled or fp8")
      ->check(CLI::IsMember({"all", "fp32", "bf16", "fp16", "fp16-unscaled", "fp8"}))
      ->capture_default_str();
  app.add_option("--steps", s.steps, "S: training steps per recipe")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--batch", s.batch, "samples per step, over all ranks")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 16));
  app.add_option("--micro-batches", s.micro,
                 "M: micro-batches per rank and step, their gradients added (accumulation)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}));
  app.add_option("--layers", hidden_layers, "hidden layers of the MLP")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  app.add_option("--width", width, "units per hidden layer")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}));
  app.add_option("--lr", lr, "Adam's learning rate")
      ->capture_default_str()
      ->check(CLI::Range(1e-7f, 1.0f));
  app.add_option("--initial-scale-power", s.scaling.initial_scale_power,
                 "fp16: the loss scale starts at 2^this (DeepSpeed's initial_scale_power)")
      ->capture_default_str()
      ->check(CLI::Range(0, 40));
  app.add_option("--scale-window", s.scaling.window,
                 "fp16: clean steps in a row before the scale doubles (loss_scale_window)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--amax-history", s.amax_history, "fp8: steps of amax each scale looks back on")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}));
  lesson.add_break("scale-never-lowered",
                   "fp16: an overflow skips the step but leaves the loss scale where it was, so "
                   "every later step overflows too (precision.cpp, DynamicLossScale::update)");
  lesson.add_break("forget-unscale",
                   "the gradients reach Adam still multiplied by the loss scale (main.cpp, STEP "
                   "4)");
  lesson.add_break("fp16-master",
                   "the master weights kept in float16: each Adam step rounded to fp16's spacing, "
                   "small updates lost (main.cpp, STEP 4)");

  std::optional<Teacher> teacher;
  std::vector<float> initial;
  lesson.on_world([&](const World& w) {
    std::vector<std::size_t> dims{16};
    for (int l = 0; l < hidden_layers; ++l) dims.push_back(width);
    dims.push_back(8);
    s.shape = model::make_shape(dims);
    s.adam.lr = lr;
    if (s.batch < std::size_t(w.size) * s.micro)
      throw UsageError(
          fmt::format("--batch {} leaves some of {} ranks x {} micro-batches no sample", s.batch,
                      w.size, s.micro));
    s.recipes.clear();
    for (Recipe r : kRecipes)
      if (recipe == "all" || recipe == to_string(r)) s.recipes.push_back(r);
    teacher.emplace(s.shape, lesson.options().seed);
    initial = model::initial_params(s.shape, lesson.options().seed);
    lesson.set_algorithm(fmt::format("{}, {} steps, {} micro-batches", recipe, s.steps, s.micro));
  });

  lesson.on_report([&](RunResult& r) {
    auto value = [&](const std::string& name) {
      for (const ValueEvent& v : r.logs[0].values)
        if (v.name == name) return v.value;
      return double(NAN);
    };
    fmt::print("\nthe recipes after {} steps (rank 0; float64: the same steps in float64):\n",
               s.steps);
    fmt::print("  {:<14} {:>10} {:>10} {:>10} {:>7} {:>9} {:>6} {:>7} {:>6}\n", "recipe", "loss 1",
               "loss S", "float64 S", "skipped", "grads = 0", "lost", "B/param", "drift");
    for (Recipe rc : s.recipes) {
      const std::string n = to_string(rc);
      fmt::print("  {:<14} {:>10.4e} {:>10.4e} {:>10.4e} {:>7} {:>8.2f}% {:>6} {:>7} {:>6.3f}\n", n,
                 value(n + " first loss"), value(n + " last loss"), value(n + " float64 loss"),
                 value(n + " skipped"), 100 * value(n + " zeros"), value(n + " lost updates"),
                 value(n + " bytes per parameter"), value(n + " drift share"));
    }
    fmt::print(
        "  grads = 0: gradient elements Adam took as 0 where float64's is not; lost: Adam "
        "steps\n  that left a weight unchanged; drift: the worst weight's share of its "
        "bound\n");
  });

  return lesson.run(argc, argv, [&](Comm& world) {
    if (world.rank() == 0)
      world.say("the model: {}\n{} samples per step over {} ranks, {} micro-batches each\n",
                s.shape.describe(), s.batch, world.size(), s.micro);
    for (Recipe r : s.recipes) {
      switch (r) {
        case Recipe::fp32:
          run_recipe<float>(world, s, r, *teacher, initial);
          break;
        case Recipe::bf16:
        case Recipe::fp8:
          run_recipe<BFloat16>(world, s, r, *teacher, initial);
          break;
        case Recipe::fp16:
        case Recipe::fp16_unscaled:
          run_recipe<Half>(world, s, r, *teacher, initial);
          break;
      }
    }
  });
}
