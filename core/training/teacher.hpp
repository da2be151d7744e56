// teacher.hpp — the data the lessons train on: a regression task whose answer is a fixed random
// MLP (the teacher), and the student's starting parameters. Both come from the seed alone, so
// every rank and the float64 reference (model_reference.hpp) compute the same samples.
#pragma once

#include <cstdint>
#include <vector>

#include "core/training/model.hpp"

namespace distlab::model {

// A regression task with a known answer: inputs are data.hpp values in [-1, 1), and targets are
// a fixed random "teacher" MLP of the same shape applied to them (in float64, rounded once to
// float). Every rank computes any sample from the seed, so no data is sent.
class Teacher {
 public:
  Teacher(MlpShape shape, std::uint64_t seed);

  // Samples [first, first + count) of the dataset: x (count, in) and t (count, out), row-major.
  std::vector<float> inputs(std::size_t first, std::size_t count) const;
  std::vector<float> targets(std::size_t first, std::size_t count) const;

 private:
  MlpShape shape_;
  std::uint64_t seed_;
  std::vector<double> weights_;  // the teacher's flat parameters
};

// The student's starting parameters: W_l uniform in [-1, 1) / sqrt(dims[l]) (so activations keep
// their scale), biases zero. The same on every rank and in the reference.
std::vector<float> initial_params(const MlpShape& shape, std::uint64_t seed);

}  // namespace distlab::model
