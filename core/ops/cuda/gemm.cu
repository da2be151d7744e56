// gemm.cu — row-major GEMM through cuBLAS (cublasGemmEx), on the rank's stream.
//
// cuBLAS is column-major; distlab's matrices are row-major. A row-major (r, c) array read as
// column-major is the (c, r) matrix, its transpose. So for row-major C = op(A) op(B):
//
//   C^T = op(B)^T op(A)^T        (n, m) = (n, k) (k, m), all column-major
//
// and that is exactly what cuBLAS computes when handed B as its first operand and A as its
// second, with m and n swapped: no data moves, no transpose kernel. Each operand keeps its
// own transpose flag, and a leading dimension is the row length of the array as stored:
//   B stored (k, n) if not trans_b, else (n, k)  ->  ldb = trans_b ? k : n
//   A stored (m, k) if not trans_a, else (k, m)  ->  lda = trans_a ? m : k
//   C stored (m, n)                               ->  ldc = n
//
// f32 runs in strict f32 (CUBLAS_COMPUTE_32F: no TF32); f16 and bf16 inputs and output run on
// the tensor cores and accumulate in f32 (also CUBLAS_COMPUTE_32F, alpha and beta f32). The
// handle disallows reduced-precision reductions: by default cuBLAS may split k and add the
// partial products in the output type (f16 / bf16), rounding several times instead of once.
// Disallowed, every C element is rounded to its type once, as ops.hpp promises and the CPU does.
#include <algorithm>
#include <climits>

#include "core/device/cublas_library.hpp"
#include "core/device/cuda_check.hpp"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/ops_cuda.hpp"

namespace distlab::cuda {

namespace {

// The rank's cuBLAS handle, created on first use and bound to the rank's stream;
// cuda_unbind_rank destroys it.
cublasHandle_t rank_cublas() {
  const cudaStream_t stream = rank_stream();  // checks that this thread is bound
  CudaRank& rank = cuda_rank();
  if (!rank.cublas) {
    cublasHandle_t handle = nullptr;
    DL_CUBLAS_CHECK(cublas().create(&handle));
    rank.cublas = handle;
    DL_CUBLAS_CHECK(cublas().set_stream(handle, stream));
    DL_CUBLAS_CHECK(cublas().set_math_mode(
        handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  }
  return static_cast<cublasHandle_t>(rank.cublas);
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      DL_FAIL("ops::gemm on cuda takes f32, f16 or bf16, not {}", to_string(t));
  }
}

int as_int(std::size_t v, const char* name) {
  DL_CHECK(v <= static_cast<std::size_t>(INT_MAX),
           "ops::gemm: {} = {} is more than cuBLAS's int can count", name, v);
  return static_cast<int>(v);
}

}  // namespace

void gemm(void* c, const void* a, const void* b, DType type, std::size_t m, std::size_t n,
          std::size_t k, bool trans_a, bool trans_b, float alpha, float beta) {
  const cublasHandle_t handle = rank_cublas();
  const cudaDataType_t t = cuda_type(type);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // nothing to multiply: C = beta C, without handing cuBLAS empty operands
    if (beta == 0.0f)
      DL_CUDA_CHECK(cudaMemsetAsync(c, 0, m * n * dtype_size(type), rank_stream()));  // +0.0
    else
      scale(c, beta, type, m * n);
    return;
  }
  // Leading dimensions of the arrays as stored (cuBLAS wants >= 1 even when k is 0).
  const int ldb = as_int(std::max<std::size_t>(1, trans_b ? k : n), "ldb");
  const int lda = as_int(std::max<std::size_t>(1, trans_a ? m : k), "lda");
  const int ldc = as_int(n, "n");
  DL_CUBLAS_CHECK(cublas().gemm_ex(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(n, "n"),
                                   as_int(m, "m"), as_int(k, "k"), &alpha, b, t, ldb, a, t, lda,
                                   &beta, c, t, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace distlab::cuda
