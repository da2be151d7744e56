// gpt_reference.hpp — the single-device float64 twin of gpt.hpp, written with Eigen.
//
// The unsplit model on the whole batch: the loss and its gradient with respect to the flat
// parameter vector (gpt::tensors() order), by backpropagation written out here, and Adam. It
// shares nothing with gpt.cpp but the config, the tensors' order and the formulas, so a wrong
// split, a lost all-reduce or a micro-batch counted twice shows up against it.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <vector>

#include "core/training/gpt.hpp"

namespace distlab::gpt {

// The mean over the batch's tokens of the cross-entropy of the next token, for `ids` and
// `targets` (batch x seq each, row by row), and when grad is given its gradient (resized).
double reference_loss(const Config& c, const Eigen::VectorXd& params,
                      const std::vector<std::int32_t>& ids,
                      const std::vector<std::int32_t>& targets, Eigen::VectorXd* grad = nullptr);

}  // namespace distlab::gpt
