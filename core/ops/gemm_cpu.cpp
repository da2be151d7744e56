// gemm_cpu.cpp — row-major float GEMM on the CPU through Eigen (ops.hpp's detail::gemm_cpu).
#include <Eigen/Core>

#include "core/ops/ops.hpp"

namespace distlab::ops::detail {

void gemm_cpu(float* c, const float* a, const float* b, std::size_t m, std::size_t n, std::size_t k,
              bool trans_a, bool trans_b, float alpha, float beta) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto idx = [](std::size_t v) { return static_cast<Eigen::Index>(v); };
  const Eigen::Map<const Matrix> A(a, idx(trans_a ? k : m), idx(trans_a ? m : k));
  const Eigen::Map<const Matrix> B(b, idx(trans_b ? n : k), idx(trans_b ? k : n));
  Eigen::Map<Matrix> C(c, idx(m), idx(n));
  const auto run = [&](const auto& op_a, const auto& op_b) {
    if (beta == 0.0f) {
      C.noalias() = alpha * (op_a * op_b);  // C is not read: it may hold garbage, even NaN
    } else {
      C *= beta;
      C.noalias() += alpha * (op_a * op_b);
    }
  };
  if (trans_a && trans_b)
    run(A.transpose(), B.transpose());
  else if (trans_a)
    run(A.transpose(), B);
  else if (trans_b)
    run(A, B.transpose());
  else
    run(A, B);
}

}  // namespace distlab::ops::detail
