// transformer.cu — the ops lesson 14's GPT adds: LayerNorm, the embedding lookup and its
// backward, softmax cross-entropy. The math is ops.hpp's, in f32.
//
//   layernorm_forward   one block per row: mean, then the variance about it, then y
//   layernorm_backward  one block per row for dx; dgamma and dbeta one thread per column, down
//                       the rows (coalesced, and no atomics: the sums are in row order)
//   gather_rows         one thread per output element
//   scatter_add_rows    one thread per table element, down the ids: deterministic, no atomics
//   cross_entropy       one block per row: max, log of the sum of exp, then loss and dlogits
#include <cmath>

#include "core/device/cuda_check.hpp"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/ops_cuda.hpp"

namespace distlab::cuda {

namespace {

template <class T>
__global__ void layernorm_forward_kernel(T* y, float* mean, float* rstd, const T* x, const T* gamma,
                                         const T* beta, std::size_t rows, std::size_t cols,
                                         float eps) {
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    float total = 0.0f;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) total += to_float(xr[c]);
    const float mu = block_reduce(total, Sum{}, 0.0f) / static_cast<float>(cols);
    float squares = 0.0f;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float d = to_float(xr[c]) - mu;
      squares += d * d;
    }
    const float rs = rsqrtf(block_reduce(squares, Sum{}, 0.0f) / static_cast<float>(cols) + eps);
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x)
      yr[c] = from_float<T>((to_float(xr[c]) - mu) * rs * to_float(gamma[c]) + to_float(beta[c]));
  }
}

template <class T>
__global__ void layernorm_dx_kernel(T* dx, const T* dy, const T* x, const float* mean,
                                    const float* rstd, const T* gamma, std::size_t rows,
                                    std::size_t cols) {
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const float mu = mean[r], rs = rstd[r];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = to_float(dyr[c]) * to_float(gamma[c]);
      g_sum += g;
      gx_sum += g * (to_float(xr[c]) - mu) * rs;
    }
    // Every thread has read its dy before any dx is written (dx may be dy).
    const float g_mean = block_reduce(g_sum, Sum{}, 0.0f) / static_cast<float>(cols);
    const float gx_mean = block_reduce(gx_sum, Sum{}, 0.0f) / static_cast<float>(cols);
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float xh = (to_float(xr[c]) - mu) * rs;
      const float g = to_float(dyr[c]) * to_float(gamma[c]);
      dxr[c] = from_float<T>(rs * (g - g_mean - xh * gx_mean));
    }
  }
}

template <class T>
__global__ void layernorm_params_kernel(T* dgamma, T* dbeta, const T* dy, const T* x,
                                        const float* mean, const float* rstd, std::size_t rows,
                                        std::size_t cols) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t c = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; c < cols; c += stride) {
    float dg = 0.0f, db = 0.0f;
    for (std::size_t r = 0; r < rows; ++r) {
      const float d = to_float(dy[r * cols + c]);
      dg += d * (to_float(x[r * cols + c]) - mean[r]) * rstd[r];
      db += d;
    }
    dgamma[c] = from_float<T>(to_float(dgamma[c]) + dg);
    dbeta[c] = from_float<T>(to_float(dbeta[c]) + db);
  }
}

template <class T>
__global__ void gather_rows_kernel(T* out, const T* table, const std::int32_t* ids,
                                   std::size_t rows, std::size_t table_rows, std::size_t cols) {
  const std::size_t n = rows * cols, stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    const std::int32_t id = ids[i / cols];
    out[i] = id >= 0 && static_cast<std::size_t>(id) < table_rows
                 ? table[static_cast<std::size_t>(id) * cols + i % cols]
                 : from_float<T>(0.0f);
  }
}

template <class T>
__global__ void scatter_add_rows_kernel(T* dtable, const T* dout, const std::int32_t* ids,
                                        std::size_t rows, std::size_t table_rows,
                                        std::size_t cols) {
  const std::size_t n = table_rows * cols, stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    const auto row = static_cast<std::int32_t>(i / cols);
    const std::size_t c = i % cols;
    float acc = 0.0f;
    bool any = false;
    for (std::size_t r = 0; r < rows; ++r)
      if (ids[r] == row) {
        acc += to_float(dout[r * cols + c]);
        any = true;
      }
    if (any) dtable[i] = from_float<T>(to_float(dtable[i]) + acc);
  }
}

template <class T>
__global__ void cross_entropy_kernel(float* loss, T* dlogits, const T* logits,
                                     const std::int32_t* targets, std::size_t rows,
                                     std::size_t cols, float scale) {
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* z = logits + r * cols;
    T* dz = dlogits + r * cols;
    const std::int32_t target = targets[r];
    float top = -INFINITY;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) top = fmaxf(top, to_float(z[c]));
    top = block_reduce(top, Max{}, -INFINITY);
    float total = 0.0f;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x)
      total += expf(to_float(z[c]) - top);
    const float log_total = logf(block_reduce(total, Sum{}, 0.0f));
    // Every thread has read the row (and the target's logit below) before any dz is written.
    const bool in_range = target >= 0 && static_cast<std::size_t>(target) < cols;
    const float picked = in_range ? to_float(z[target]) : NAN;
    __syncthreads();
    if (threadIdx.x == 0) loss[r] = log_total + top - picked;
    for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float p = expf(to_float(z[c]) - top - log_total);
      dz[c] = from_float<T>(scale * (p - (static_cast<std::int32_t>(c) == target ? 1.0f : 0.0f)));
    }
  }
}

unsigned grid_for_rows(std::size_t rows) {
  return grid_for(rows * kThreads);
}

}  // namespace

void layernorm_forward(void* y, float* mean, float* rstd, const void* x, const void* gamma,
                       const void* beta, DType type, std::size_t rows, std::size_t cols,
                       float eps) {
  const cudaStream_t stream = rank_stream();
  if (rows == 0 || cols == 0) return;
  dispatch_float(type, "layernorm_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    layernorm_forward_kernel<<<grid_for_rows(rows), kThreads, 0, stream>>>(
        static_cast<T*>(y), mean, rstd, static_cast<const T*>(x), static_cast<const T*>(gamma),
        static_cast<const T*>(beta), rows, cols, eps);
    DL_CUDA_LAUNCH_CHECK();
  });
}

void layernorm_backward(void* dx, void* dgamma, void* dbeta, const void* dy, const void* x,
                        const float* mean, const float* rstd, const void* gamma, DType type,
                        std::size_t rows, std::size_t cols) {
  const cudaStream_t stream = rank_stream();
  if (rows == 0 || cols == 0) return;
  dispatch_float(type, "layernorm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // The parameters' sums first: dx may be dy, and they read dy.
    layernorm_params_kernel<<<grid_for(cols), kThreads, 0, stream>>>(
        static_cast<T*>(dgamma), static_cast<T*>(dbeta), static_cast<const T*>(dy),
        static_cast<const T*>(x), mean, rstd, rows, cols);
    DL_CUDA_LAUNCH_CHECK();
    layernorm_dx_kernel<<<grid_for_rows(rows), kThreads, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd,
        static_cast<const T*>(gamma), rows, cols);
    DL_CUDA_LAUNCH_CHECK();
  });
}

void gather_rows(void* out, const void* table, const std::int32_t* ids, DType type,
                 std::size_t rows, std::size_t table_rows, std::size_t cols) {
  const cudaStream_t stream = rank_stream();
  if (rows == 0 || cols == 0) return;
  dispatch_float(type, "gather_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gather_rows_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(table), ids, rows, table_rows, cols);
    DL_CUDA_LAUNCH_CHECK();
  });
}

void scatter_add_rows(void* dtable, const void* dout, const std::int32_t* ids, DType type,
                      std::size_t rows, std::size_t table_rows, std::size_t cols) {
  const cudaStream_t stream = rank_stream();
  if (rows == 0 || table_rows == 0 || cols == 0) return;
  dispatch_float(type, "scatter_add_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scatter_add_rows_kernel<<<grid_for(table_rows * cols), kThreads, 0, stream>>>(
        static_cast<T*>(dtable), static_cast<const T*>(dout), ids, rows, table_rows, cols);
    DL_CUDA_LAUNCH_CHECK();
  });
}

void cross_entropy(float* loss, void* dlogits, const void* logits, const std::int32_t* targets,
                   DType type, std::size_t rows, std::size_t cols, float scale) {
  const cudaStream_t stream = rank_stream();
  if (rows == 0 || cols == 0) return;
  dispatch_float(type, "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_kernel<<<grid_for_rows(rows), kThreads, 0, stream>>>(
        loss, static_cast<T*>(dlogits), static_cast<const T*>(logits), targets, rows, cols, scale);
    DL_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace distlab::cuda
