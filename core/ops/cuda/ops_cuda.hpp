// ops_cuda.hpp — the CUDA side of ops.hpp: kernels and cuBLAS behind plain C++ calls.
//
// Plain C++ with no CUDA types, so ops.hpp can include it: pointers are device pointers, the
// element type travels as a DType (as NCCL passes ncclDataType_t), and every call enqueues on
// the calling rank's stream (cuda_context.hpp) and returns without waiting. ops.hpp checks
// sizes and devices; these check the rank binding, the types they support, and every CUDA
// and cuBLAS status.
//
//   ops.cu     copy, fill, add, axpy, mul, scale, gelu_forward, gelu_backward, cast, adam_step
//   reduce.cu  sum, row_sums, col_sums, softmax_rows
//   gemm.cu    gemm (cublasGemmEx)
//   transformer.cu  layernorm_forward, layernorm_backward, gather_rows, scatter_add_rows,
//                   cross_entropy
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/dtype.hpp"
#include "core/base/world.hpp"

namespace distlab::cuda {

// --- ops.cu: elementwise, over n elements -----------------------------------------------------
// Types: copy any bytes; fill and add every DType; the rest f32, f16, bf16 (math in f32).
void copy(void* dst, const void* src, std::size_t bytes);  // device to device, async
void fill(void* dst, const void* value, DType type, std::size_t n);
void add(void* dst, const void* src, DType type, std::size_t n);        // dst += src
void axpy(void* y, float a, const void* x, DType type, std::size_t n);  // y += a x
void mul(void* y, const void* x, DType type, std::size_t n);            // y *= x
void scale(void* x, float a, DType type, std::size_t n);                // x *= a
void gelu_forward(void* out, const void* in, DType type, std::size_t n);
void gelu_backward(void* dx, const void* dy, const void* x, DType type, std::size_t n);
void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n);
// param, m and v f32; grad f32, f16 or bf16 (mixed precision: 16-bit gradients, f32 state);
// c1 = 1 / (1 - beta1^t), c2 = 1 / (1 - beta2^t) (ops.hpp has the formula).
void adam_step(float* param, const void* grad, DType grad_type, float* m, float* v, std::size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, float c1,
               float c2);

// --- reduce.cu: in is f32, f16 or bf16; sums are f32 -------------------------------------------
void sum(float* out, const void* x, DType type, std::size_t n);  // out[0] = sum of x
void row_sums(float* out, const void* in, DType type, std::size_t rows, std::size_t cols);
void col_sums(float* out, const void* in, DType type, std::size_t rows, std::size_t cols);
void softmax_rows(void* out, const void* in, DType type, std::size_t rows, std::size_t cols);
// dx = y (dy - sum over the row of y dy): softmax's backward from its output y; dx may be dy.
void softmax_backward_rows(void* dx, const void* y, const void* dy, DType type, std::size_t rows,
                           std::size_t cols);

// --- gemm.cu: row-major C (m,n) = alpha op(A) op(B) + beta C; f32, f16, bf16 -------------------
void gemm(void* c, const void* a, const void* b, DType type, std::size_t m, std::size_t n,
          std::size_t k, bool trans_a, bool trans_b, float alpha, float beta);

// --- transformer.cu: f32, f16, bf16 values (math in f32); ids and targets i32; mean, rstd and
// loss f32 -------------------------------------------------------------------------------------
void layernorm_forward(void* y, float* mean, float* rstd, const void* x, const void* gamma,
                       const void* beta, DType type, std::size_t rows, std::size_t cols, float eps);
// dgamma and dbeta are added to (ops.hpp has the formulas).
void layernorm_backward(void* dx, void* dgamma, void* dbeta, const void* dy, const void* x,
                        const float* mean, const float* rstd, const void* gamma, DType type,
                        std::size_t rows, std::size_t cols);
void gather_rows(void* out, const void* table, const std::int32_t* ids, DType type,
                 std::size_t rows, std::size_t table_rows, std::size_t cols);
void scatter_add_rows(void* dtable, const void* dout, const std::int32_t* ids, DType type,
                      std::size_t rows, std::size_t table_rows, std::size_t cols);
void cross_entropy(float* loss, void* dlogits, const void* logits, const std::int32_t* targets,
                   DType type, std::size_t rows, std::size_t cols, float scale);

}  // namespace distlab::cuda
