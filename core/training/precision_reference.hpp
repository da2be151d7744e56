// precision_reference.hpp — lesson 20's float64 reference: the MLP's gradient in float64, with a
// bound, element by element, on how far a mixed-precision run's gradient can be from it.
//
// The run (lessons/20_mixed_precision) stores every tensor in a format T (float32, bfloat16 or
// float16) and computes in float32: each GEMM widens its operands, accumulates in float32 and
// rounds its result once to T, as tensor cores do. fp8 adds a cast of each GEMM's operands to
// E4M3 (forward) or E5M2 (backward) with a per-tensor power-of-two scale. The error model runs
// beside the float64 forward and backward (a running error analysis): every tensor carries its
// float64 value V and a bound E >= |computed - V| on each element, pushed through each step the
// run takes, with these rules (u: the format's unit roundoff, a: half its smallest subnormal):
//   rounding to a format        E' = E + u (|V| + E) + a
//   fp8 cast at scale s         E' = E + u8 (|V| + E) + a8 / s      (no saturation: see below)
//   C = A B, k terms, float32   E_C = |A| E_B + E_A |B| + E_A E_B + k u32 (|A| + E_A)(|B| + E_B)
//   gelu(z), gelu'(z)           E_z times sup |gelu'| (1.13) and sup |gelu''| (0.8): the mean
//                               value theorem (tests/test_precision.cpp holds both constants to
//                               a fine grid), plus float32's evaluation, 32 u32 of the operands
//   sums in a format            each partial sum rounded: u (sum of |V| + E) + a per addition
// The products E_A E_B make the GEMM rule exact rather than first-order, so the bound holds for
// any size of error: it is a bound, not an estimate. The run's gradient must lie within it.
//
// fp8's scale s = 2^floor(log2(largest / amax)), amax the largest |x| over the tensor's history
// with this cast's included: no element saturates. The reference does not know the run's
// amax, only that it is at most float64's plus the largest E, so it bounds a8 / s with the
// smallest scale that upper amax could give.
//
// The loss scale S multiplies dL/dy before it is rounded to T; every backward tensor is S times
// its unscaled value until the optimizer divides by S (exact: S is a power of two). The bound is
// computed in scaled units, so that a (absolute) is where it bites: float16 without a scale
// flushes to zero what S lifts above its subnormals. Overflow: a scaled tensor whose computed
// value may reach float16's 65520 rounds to infinity; `overflow.possible` says some tensor may,
// `overflow.sure` that one must.
#pragma once

#include <Eigen/Core>

#include <cstddef>
#include <deque>
#include <vector>

#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"

namespace distlab::precision {

using model::RowMatrix;

// How a format rounds, as the error model sees it. overflow: the magnitude from which a value
// rounds to infinity (0: the format saturates instead, fp8 here).
struct Rounding {
  const char* name;
  double u;         // unit roundoff: half a unit in the last place, relative
  double a;         // half the smallest subnormal: the most an underflow can lose
  double overflow;  // values at or past it round to infinity; 0: never
  double largest;   // the largest finite value
};
Rounding rounding_f32();
Rounding rounding_bf16();
Rounding rounding_f16();
Rounding rounding_e4m3();
Rounding rounding_e5m2();
Rounding rounding_f64();  // for the float64 reference's own rounding (accumulate 2^-53)

// What the run does, as the reference needs it: the storage format, fp8's casts and history.
struct Model {
  Rounding store;
  bool fp8 = false;
  std::size_t amax_history = 16;
  double accumulate = 0x1p-24;  // the unit roundoff of the arithmetic: float32's
};

// A tensor and its bound, element by element.
struct Bounded {
  RowMatrix v, e;
};

// One micro-batch of one rank: inputs (rows, in) and targets (rows, out).
struct Shard {
  RowMatrix x, t;
};

// fp8's amax histories on one rank, per layer: the forward's input and weight, the backward's
// dL/dz. Each holds upper bounds of the run's amax (float64's plus the largest E).
struct Fp8History {
  std::vector<std::deque<double>> input, weight, grad;
};

struct Overflow {
  bool possible = false, sure = false;
};

struct BoundedGradient {
  Eigen::VectorXd g, e;  // the step's gradient (MlpShape's layout), unscaled, and its bound
  double loss = 0, loss_e = 0;
  Overflow overflow;  // of any stored tensor, scaled
};

// The step's gradient at weights w (the run's float32 master weights, exact here): shards[r][j]
// is rank r's micro-batch j, each normalised by `whole` samples; each rank adds its micro-batches
// in T, then the ranks' sums are added in T (a ring: N - 1 additions each), then divided by
// `scale`. history (one per rank, for fp8) carries over from step to step.
BoundedGradient bounded_gradient(const model::MlpShape& shape, const Eigen::VectorXd& w,
                                 const std::vector<std::vector<Shard>>& shards, std::size_t whole,
                                 const Model& model, double scale,
                                 std::vector<Fp8History>* history = nullptr);

// x rounded to the format, in float64 arithmetic written out here (not half.hpp's or fp8.hpp's,
// the code under test): the nearest value with -log2(u) significant bits, on the subnormal grid of
// 2a below the normal range, ties to even; past the largest finite value infinity where the format
// overflows, else the largest (fp8's saturating casts).
double round_to(const Rounding& r, double x);

// Whether `got` is what rounding some value in [lo, hi] to the format can give: rounding is
// monotone, so the stored value of an operation whose exact result lies in [lo, hi] lies in
// [round_to(lo), round_to(hi)]. Checks an operation from its own stored inputs: no error carried.
bool rounds_from(const Rounding& r, double got, double lo, double hi);

// The constants of the GeLU rules: sup |gelu'| and sup |gelu''| over the reals (tanh form).
inline constexpr double kGeluSlope = 1.13;
inline constexpr double kGeluCurvature = 0.8;

// fp8's power-of-two scale for a tensor whose history's largest |x| is amax:
// 2^floor(log2(largest / amax)); 1 where amax is 0. Written out here apart from the run's.
double fp8_scale(double largest, double amax);

}  // namespace distlab::precision
