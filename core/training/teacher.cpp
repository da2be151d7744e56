// teacher.cpp — the teacher dataset and the initial parameters (teacher.hpp). The targets are the
// teacher MLP evaluated in float64 by the reference's forward pass.
#include "core/training/teacher.hpp"

#include <cmath>

#include "core/runtime/data.hpp"
#include "core/training/model_reference.hpp"

namespace distlab::model {

namespace {
// data.hpp streams (its `rank` argument) for the dataset's inputs and the two parameter sets,
// far from any rank number so no lesson's input data repeats them.
constexpr int kInputStream = 1'000'001;
constexpr int kTeacherStream = 1'000'002;
constexpr int kStudentStream = 1'000'003;

// Uniform in [-1, 1) / sqrt(fan in) for weights, zero for biases.
std::vector<double> random_params(const MlpShape& shape, std::uint64_t seed, int stream) {
  std::vector<double> p(shape.params(), 0.0);
  for (std::size_t l = 0; l < shape.layers(); ++l) {
    const double scale = 1.0 / std::sqrt(double(shape.dims[l]));
    const std::size_t begin = shape.weight_offset(l), count = shape.dims[l] * shape.dims[l + 1];
    for (std::size_t i = begin; i < begin + count; ++i)
      p[i] = input_value<float>(seed, stream, i) * scale;
  }
  return p;
}
}  // namespace

Teacher::Teacher(MlpShape shape, std::uint64_t seed)
    : shape_(std::move(shape)),
      seed_(seed),
      weights_(random_params(shape_, seed, kTeacherStream)) {}

std::vector<float> Teacher::inputs(std::size_t first, std::size_t count) const {
  std::vector<float> x(count * shape_.in());
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = input_value<float>(seed_, kInputStream, first * shape_.in() + i);
  return x;
}

std::vector<float> Teacher::targets(std::size_t first, std::size_t count) const {
  const RowMatrix y = reference_forward(
      shape_, Eigen::Map<const Eigen::VectorXd>(weights_.data(), Eigen::Index(weights_.size())),
      widen(inputs(first, count), count, shape_.in()));
  std::vector<float> t(count * shape_.out());
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(y.data()[i]);
  return t;
}

std::vector<float> initial_params(const MlpShape& shape, std::uint64_t seed) {
  const std::vector<double> p = random_params(shape, seed, kStudentStream);
  return std::vector<float>(p.begin(), p.end());
}

}  // namespace distlab::model
