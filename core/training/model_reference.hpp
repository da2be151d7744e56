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

// Training on one device: step k takes samples [k * batch, (k + 1) * batch) of the teacher's
// dataset, computes the loss and gradient of the whole batch, and steps the optimizer.
struct ReferenceRun {
  Eigen::VectorXd params;      // after the last step
  std::vector<double> losses;  // losses[k]: step k's loss, before its update
};
ReferenceRun reference_train(const MlpShape& shape, const Teacher& teacher,
                             const std::vector<float>& initial, std::size_t batch, int steps,
                             const OptimizerConfig& config);

// Helpers: floats to float64 (a vector, or a (rows, cols) row-major matrix).
Eigen::VectorXd widen(const std::vector<float>& v);
RowMatrix widen(const std::vector<float>& v, std::size_t rows, std::size_t cols);

}  // namespace distlab::model
