// gpt_reference.hpp — the single-device float64 twin of gpt.hpp, written with Eigen.
//
// The unsplit model on the whole batch: the loss and its gradient with respect to the flat
// parameter vector (gpt::tensors() order), by backpropagation written out here, and Adam. It
// shares nothing with gpt.cpp but the config, the tensors' order and the formulas, so a wrong
// split, a lost all-reduce or a micro-batch counted twice shows up against it.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <string>
#include <vector>

#include "core/training/corpus.hpp"
#include "core/training/gpt.hpp"
#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"

namespace distlab::gpt {

// The mean over the batch's tokens of the cross-entropy of the next token, for `ids` and
// `targets` (batch x seq each, row by row), and when grad is given its gradient (resized).
double reference_loss(const Config& c, const Eigen::VectorXd& params,
                      const std::vector<std::int32_t>& ids,
                      const std::vector<std::int32_t>& targets, Eigen::VectorXd* grad = nullptr);

// The float32 error model of the split model's loss and gradient against this reference, as a
// fraction of the largest value (the loss, or the largest gradient element): every value is a
// sum of products through at most 4 L + 4 layers of sums (the depth), each of at most `tokens`
// (the step's, or a micro-batch's) + 4d + vocab + d terms, plus `extra_terms` (a sum over dp
// replicas); each sum is off by its terms x u_f32 of the magnitudes it adds.
double float32_bound(const Config& c, std::size_t tokens, std::size_t extra_terms = 0);

// Each of a rank's parts' bound on its gradient's error: `fraction` (float32_bound) of the largest
// |g| of its whole tensor in one device's gradient `want` (every element of it, on any rank), so
// a small tensor's error is not hidden under the model's largest.
std::vector<double> tensor_bounds(const Layout& layout, const Eigen::VectorXd& want,
                                  double fraction);

// The worst |got - want| against its tensor's bound (tensor_bounds) over the elements [begin,
// end) of a rank's flat vector; got holds those elements (got[0] is element `begin`), want is
// the whole model's. share <= 1: within the bounds; a NaN counts as infinitely far.
struct WorstShare {
  double share = 0, bound = 0;  // the worst error / its bound, and that bound
  std::string where = "-";      // the tensor
};
WorstShare worst_share(const Layout& layout, const std::vector<float>& got, std::size_t begin,
                       std::size_t end, const Eigen::VectorXd& want,
                       const std::vector<double>& bounds);

// Step k's sequences (global of them: sequence_index's order), ids and targets row by row.
void reference_batch(const Config& c, const Corpus& corpus, int step, std::size_t global,
                     std::vector<std::int32_t>& ids, std::vector<std::int32_t>& targets);

// Training on one device: step k takes reference_batch(k), the mean loss over its tokens and its
// gradient, and an optimizer step (model_reference.hpp's float64 SGD or Adam). With a
// GradientError (`largest`: the whole model's largest |g|), float32's drift from this run
// (model::Float32Drift) over the steps.
struct ReferenceRun {
  Eigen::VectorXd params;      // after the last step
  std::vector<double> losses;  // losses[k]: step k's loss, before its update
  Eigen::VectorXd first_gradient;
  model::Float32Drift drift;
};
ReferenceRun reference_train(const Config& c, const Corpus& corpus,
                             const std::vector<float>& initial, int steps, std::size_t global,
                             const model::OptimizerConfig& optimizer,
                             const model::GradientError& gradient_error = {});

}  // namespace distlab::gpt
