// model_reference.hpp — the single-device float64 twin of model.hpp, written with Eigen.
//
// The lessons that train (parameter server, ZeRO, pipeline, tensor parallelism) check their
// sharded float32 result against this: the same MLP, loss and optimizers, on the whole batch,
// on one device, in float64. It shares nothing with model.cpp but the shape, the formulas and
// the data (Teacher, initial_params), so a bug in the ops, a layer or a shard shows up here.
#pragma once

#include <Eigen/Core>

#include <vector>

#include "core/training/model.hpp"
#include "core/training/teacher.hpp"

namespace distlab::model {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// gelu with the tanh approximation (ops.hpp's formula), and its derivative, in float64.
double reference_gelu(double x);
double reference_gelu_grad(double x);

// y = the MLP of `params` (flat, MlpShape's layout) on x (batch, in).
RowMatrix reference_forward(const MlpShape& shape, const Eigen::VectorXd& params,
                            const RowMatrix& x);

// The whole batch's MSE loss (model.hpp's mse_loss with whole = x.rows()) and, when grad is
// given, its gradient with respect to params by backpropagation.
double reference_loss(const MlpShape& shape, const Eigen::VectorXd& params, const RowMatrix& x,
                      const RowMatrix& t, Eigen::VectorXd* grad = nullptr);

// SGD or Adam (ops::adam_step's formula) on float64 parameters; Adam keeps its moments.
class ReferenceOptimizer {
 public:
  ReferenceOptimizer(std::size_t n, OptimizerConfig config);
  void step(Eigen::VectorXd& params, const Eigen::VectorXd& grad);

 private:
  OptimizerConfig config_;
  Eigen::VectorXd m_, v_;
  int t_ = 0;
};

// How far a float32 run of SGD may part from this float64 one, weight by weight, summed over the
// steps: the terms of the bound the lessons check their weights with. u = 2^-24, float32's
// rounding of one operation. A step is w <- w - lr g:
//   rounding: the product's rounding, u |lr g|, and the new weight's: half a float32 unit of it,
//     or the whole update where that is less (float32 keeps a weight it cannot move: a weight
//     of 1 moved by 1e-9 a step does not move at all, while float64's moves); and this run's
//     own rounding of the new weight, 2^-53 of it (float64 is not exact either: where the
//     updates vanish, 1e-19 on weights of 1e-3 in deep pipelines, it is all that is left);
//   gradient: lr x the largest |g| of the weight's layer; a lesson multiplies it by its float32
//     gradient's error relative to that largest element (the bound it checks step 1's with).
// Neither term follows an error through the later steps' gradients (a weight off by e moves the
// next gradient by about H e, H the loss's curvature): the lessons leave room for that, and
// past the steps where it may matter they check each step from their own weights of the step
// before, which has no such term (lesson 11 does; its README derives both).
struct Float32Drift {
  Eigen::VectorXd rounding, gradient;
};

// Where float32's Adam step (ops::adam_step's arithmetic) from the state (w, m, v) at step t can
// put a weight, for any gradient within [g - dg, g + dg]: [lo, hi] holds float64's result for
// every such gradient (interval arithmetic: the moments' intervals, then the quotient's at its
// corners), widened by float32's roundings (2^-24 of each operation, 16 of them on the quotient,
// one on lr times it, and half a float32 unit of the new weight). `gradient` is how far the
// gradient's interval alone moves the result from float64's at g, `rounding` what float32's
// roundings add: the two terms of a check's bound. Adam's quotient m^ / (sqrt(v^) + eps) turns a
// gradient float32 cannot tell from zero into a step of up to lr either way: where dg reaches
// |g| the interval is about 2 lr wide, elsewhere dg / |g| of lr.
struct AdamStepBound {
  double lo = 0, hi = 0;              // the weight after the step
  double gradient = 0, rounding = 0;  // the bound's terms, from float64's weight at g
  double want = 0;                    // float64's weight after the step, at g
};
AdamStepBound adam_step_bound(double w, double m, double v, double g, double dg,
                              const OptimizerConfig& config, int t);

// Training on one device: step k takes samples [k * batch, (k + 1) * batch) of the teacher's
// dataset, computes the loss and gradient of the whole batch, and steps the optimizer.
struct ReferenceRun {
  Eigen::VectorXd params;      // after the last step
  std::vector<double> losses;  // losses[k]: step k's loss, before its update
  Float32Drift drift;          // SGD's, after the last step (Adam: empty)
};
ReferenceRun reference_train(const MlpShape& shape, const Teacher& teacher,
                             const std::vector<float>& initial, std::size_t batch, int steps,
                             const OptimizerConfig& config);

// The samples step `step` (0-based) trains on: the teacher's [step batch, (step + 1) batch).
struct ReferenceBatch {
  RowMatrix x, t;
};
ReferenceBatch reference_batch(const MlpShape& shape, const Teacher& teacher, std::size_t batch,
                               int step);

// Half a float32 unit in the last place of a value of magnitude |x| (the larger unit at a power
// of two): the most rounding x to float32 can change it by, where float32's range is normal.
double half_float_ulp(double x);

// Helpers: floats to float64 (a vector, or a (rows, cols) row-major matrix).
Eigen::VectorXd widen(const std::vector<float>& v);
RowMatrix widen(const std::vector<float>& v, std::size_t rows, std::size_t cols);

}  // namespace distlab::model
