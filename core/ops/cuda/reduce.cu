// reduce.cu — the CUDA reductions: sum, row_sums, col_sums, and softmax over rows.
//
// A block reduction (common.cuh) is the building block: each thread folds its strided share,
// warps fold with shuffles, the first warp folds the warps. Sums accumulate in f32 whatever
// the input type.
//
//   sum           grid-stride partial sums, one block_reduce per block, atomicAdd into out[0]
//   row_sums      one block per row (rows strided over the grid)
//   col_sums      one thread per column, down the rows: neighbouring threads read neighbouring
//                 columns, so every row's read is coalesced
//   softmax_rows  one block per row: max, sum of exp(x - max), then write exp(x - max) / sum
//   softmax_backward_rows  one block per row: d = sum of y dy, then write y (dy - d)
#include <cmath>

#include "core/device/cuda_check.hpp"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/ops_cuda.hpp"

namespace distlab::cuda {

namespace {

// out[0] must be zero on entry. The blocks' partial sums arrive in whatever order the blocks
// finish, so the last bits of the sum can differ from run to run (f32 addition is not
// associative); the CPU twin sums in f64.
template <class T>
__global__ void sum_kernel(float* out, const T* x, std::size_t n) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  float acc = 0.0f;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += stride)
    acc += to_float(x[i]);
  acc = block_reduce(acc, Sum{}, 0.0f);
  if (threadIdx.x == 0) atomicAdd(out, acc);
}

// in is (rows, cols), out is (rows).
template <class T>
__global__ void row_sums_kernel(float* out, const T* in, std::size_t rows, std::size_t cols) {
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = in + r * cols;
    float acc = 0.0f;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) acc += to_float(row[c]);
    acc = block_reduce(acc, Sum{}, 0.0f);
    if (threadIdx.x == 0) out[r] = acc;
  }
}

// in is (rows, cols), out is (cols).
template <class T>
__global__ void col_sums_kernel(float* out, const T* in, std::size_t rows, std::size_t cols) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t c = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; c < cols; c += stride) {
    float acc = 0.0f;
    for (std::size_t r = 0; r < rows; ++r) acc += to_float(in[r * cols + c]);
    out[c] = acc;
  }
}

// in and out are (rows, cols) and may be the same memory: a row is read in full (twice)
// before any of it is written.
template <class T>
__global__ void softmax_rows_kernel(T* out, const T* in, std::size_t rows, std::size_t cols) {
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = in + r * cols;
    T* y = out + r * cols;
    // Subtracting the row's max makes every exponent <= 0: no overflow, and the result is
    // unchanged since exp(x - M) / sum exp(x - M) = exp(x) / sum exp(x).
    float row_max = -INFINITY;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x)
      row_max = fmaxf(row_max, to_float(x[c]));
    row_max = block_reduce(row_max, Max{}, -INFINITY);
    float total = 0.0f;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x)
      total += expf(to_float(x[c]) - row_max);
    total = block_reduce(total, Sum{}, 0.0f);
    const float inv = 1.0f / total;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x)
      y[c] = from_float<T>(expf(to_float(x[c]) - row_max) * inv);
  }
}

// dx = y (dy - sum(y dy)) per row; dx may be dy.
template <class T>
__global__ void softmax_backward_rows_kernel(T* dx, const T* y, const T* dy, std::size_t rows,
                                             std::size_t cols) {
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    float dot = 0.0f;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x)
      dot += to_float(yr[c]) * to_float(dyr[c]);
    dot = block_reduce(dot, Sum{}, 0.0f);  // every thread has read its dy before any dx is written
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x)
      dxr[c] = from_float<T>(to_float(yr[c]) * (to_float(dyr[c]) - dot));
  }
}

// Blocks for a block-per-row kernel: one per row, at most one wave's worth.
unsigned grid_for_rows(std::size_t rows) {
  return grid_for(rows * kThreads);
}

}  // namespace

void sum(float* out, const void* x, DType type, std::size_t n) {
  const cudaStream_t stream = rank_stream();
  DL_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), stream));  // the sum of nothing is 0
  if (n == 0) return;
  dispatch_float(type, "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    sum_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, static_cast<const T*>(x), n);
    DL_CUDA_LAUNCH_CHECK();
  });
}

void row_sums(float* out, const void* in, DType type, std::size_t rows, std::size_t cols) {
  const cudaStream_t stream = rank_stream();
  if (rows == 0) return;
  if (cols == 0) {  // empty rows sum to 0
    DL_CUDA_CHECK(cudaMemsetAsync(out, 0, rows * sizeof(float), stream));
    return;
  }
  dispatch_float(type, "row_sums", [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_sums_kernel<<<grid_for_rows(rows), kThreads, 0, stream>>>(out, static_cast<const T*>(in),
                                                                  rows, cols);
    DL_CUDA_LAUNCH_CHECK();
  });
}

void col_sums(float* out, const void* in, DType type, std::size_t rows, std::size_t cols) {
  const cudaStream_t stream = rank_stream();
  if (cols == 0) return;
  if (rows == 0) {
    DL_CUDA_CHECK(cudaMemsetAsync(out, 0, cols * sizeof(float), stream));
    return;
  }
  dispatch_float(type, "col_sums", [&](auto tag) {
    using T = typename decltype(tag)::type;
    col_sums_kernel<<<grid_for(cols), kThreads, 0, stream>>>(out, static_cast<const T*>(in), rows,
                                                             cols);
    DL_CUDA_LAUNCH_CHECK();
  });
}

void softmax_rows(void* out, const void* in, DType type, std::size_t rows, std::size_t cols) {
  const cudaStream_t stream = rank_stream();
  if (rows == 0 || cols == 0) return;
  dispatch_float(type, "softmax_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_rows_kernel<<<grid_for_rows(rows), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(in), rows, cols);
    DL_CUDA_LAUNCH_CHECK();
  });
}

void softmax_backward_rows(void* dx, const void* y, const void* dy, DType type, std::size_t rows,
                           std::size_t cols) {
  const cudaStream_t stream = rank_stream();
  if (rows == 0 || cols == 0) return;
  dispatch_float(type, "softmax_backward_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_rows_kernel<<<grid_for_rows(rows), kThreads, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(y), static_cast<const T*>(dy), rows, cols);
    DL_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace distlab::cuda
