// ops.hpp — the compute the lessons need, on whichever device the buffers live.
//
// Every op takes Views, checks their sizes and that they sit on one device, and runs there:
// plain loops (Eigen for gemm, in gemm_cpu.cpp) on the CPU; kernels and cuBLAS on a GPU
// (cuda/ops_cuda.hpp), enqueued on the rank's stream and not waited for. Lesson code never changes
// with the device.
//
// Float types are f32, f16 (Half) and bf16 (BFloat16, half.hpp). Whatever the type, the math
// is f32: 16-bit elements are widened, computed on, and rounded once to nearest even when
// stored, on both devices alike. Sums accumulate in f64 on the CPU and in f32 trees on a GPU.
//
//   memory       copy, fill
//   elementwise  add, axpy, mul, scale, gelu_forward, gelu_backward, cast
//   optimizer    AdamConfig, adam_step
//   reductions   sum, row_sums, col_sums, softmax_rows, softmax_backward_rows
//   matrices     gemm (row-major); gemm_flops, the FLOP this thread's gemm calls did
//   transformer  layernorm_forward, layernorm_backward, gather_rows, scatter_add_rows,
//                cross_entropy (lesson 14's GPT)
//
// Matrices are row-major: (rows, cols) with element (r, c) at r * cols + c.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/dtype.hpp"
#include "core/base/half.hpp"
#include "core/device/buffer.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include "core/ops/cuda/ops_cuda.hpp"
#endif

namespace distlab::ops {

// The element types the arithmetic ops take (add, copy and fill take every DType).
template <class T>
concept FloatType = std::same_as<T, float> || std::same_as<T, Half> || std::same_as<T, BFloat16>;

// An input view. T is deduced from the output alone, so a View<T> passes for a View<const T>.
template <class T>
using In = std::type_identity_t<View<const T>>;

// The element of an input view whose type only the input gives (View<X>, X const or not).
template <class X>
concept FloatInput = FloatType<std::remove_const_t<X>>;

namespace detail {

// The views sit on one device, and a build without CUDA never sees a GPU pointer.
inline void same_device(const char* op, Device first, std::initializer_list<Device> rest) {
  for (Device d : rest)
    DL_CHECK(d == first, "ops::{}: buffers on different devices ({} vs {})", op, to_string(first),
             to_string(d));
#ifndef DISTLAB_HAVE_CUDA
  DL_CHECK(first == Device::cpu, "ops::{} on {}: this build has no CUDA support", op,
           to_string(first));
#endif
}

inline void check_size(const char* op, const char* name, std::size_t size, std::size_t expected) {
  DL_CHECK(size == expected, "ops::{}: {} has {} elements, the shape needs {}", op, name, size,
           expected);
}

template <class A, class B>
void same_shape(const A& a, const B& b, const char* op) {
  DL_CHECK(a.size() == b.size(), "ops::{}: sizes differ ({} vs {})", op, a.size(), b.size());
  same_device(op, a.device, {b.device});
}

// dst += src for float32 on the CPU, built for AVX2 and for the baseline; the CPU picks
// (elementwise_cpu.cpp). The all-reduces' gamma.
void add_f32(float* dst, const float* src, std::size_t n);

// Row-major float GEMM on the CPU, on Eigen's blocked kernels: C = alpha op(A) op(B) + beta C.
// Compiled once (gemm_cpu.cpp): Eigen's GEMM kernels cost every including file seconds to build.
void gemm_cpu(float* c, const float* a, const float* b, std::size_t m, std::size_t n, std::size_t k,
              bool trans_a, bool trans_b, float alpha, float beta);

template <class T>
std::vector<float> widened(View<const T> v) {
  std::vector<float> out(v.n);
  for (std::size_t i = 0; i < v.n; ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

}  // namespace detail

// --- memory ----------------------------------------------------------------------------------

// dst = src; a no-op when they are the same memory. Either side may be on the CPU or a GPU:
// GPU to GPU is queued on the rank's stream; a copy with the host in it returns when done.
template <class T>
void copy(View<T> dst, In<T> src) {
  DL_CHECK(dst.size() == src.size(), "ops::copy: sizes differ ({} vs {})", dst.size(), src.size());
  if (dst.ptr == src.ptr || dst.empty()) return;
#ifdef DISTLAB_HAVE_CUDA
  if (dst.device == Device::cuda && src.device == Device::cuda)
    return cuda::copy(dst.ptr, src.ptr, dst.bytes());
#endif
  device_copy(dst.ptr, dst.device, src.ptr, src.device, dst.bytes());
}

// dst[i] = value
template <class T>
void fill(View<T> dst, std::type_identity_t<T> value) {
  detail::same_device("fill", dst.device, {});
#ifdef DISTLAB_HAVE_CUDA
  if (dst.device == Device::cuda) return cuda::fill(dst.ptr, &value, dtype_of<T>(), dst.n);
#endif
  for (std::size_t i = 0; i < dst.n; ++i) dst[i] = value;
}

// --- elementwise (all views (n)) -------------------------------------------------------------

// dst += src
template <class T>
void add(View<T> dst, In<T> src) {
  detail::same_shape(dst, src, "add");
#ifdef DISTLAB_HAVE_CUDA
  if (dst.device == Device::cuda) return cuda::add(dst.ptr, src.ptr, dtype_of<T>(), dst.n);
#endif
  if constexpr (std::same_as<T, float>) return detail::add_f32(dst.ptr, src.ptr, dst.n);
  for (std::size_t i = 0; i < dst.n; ++i) {
    if constexpr (FloatType<T> && !std::same_as<T, float>)
      dst[i] = T(static_cast<float>(dst[i]) + static_cast<float>(src[i]));
    else
      dst[i] += src[i];
  }
}

// y += a x
template <FloatType T>
void axpy(View<T> y, float a, In<T> x) {
  detail::same_shape(y, x, "axpy");
#ifdef DISTLAB_HAVE_CUDA
  if (y.device == Device::cuda) return cuda::axpy(y.ptr, a, x.ptr, dtype_of<T>(), y.n);
#endif
  for (std::size_t i = 0; i < y.n; ++i)
    y[i] = T(static_cast<float>(y[i]) + a * static_cast<float>(x[i]));
}

// y *= x, element by element (a dropout's mask, for one)
template <FloatType T>
void mul(View<T> y, In<T> x) {
  detail::same_shape(y, x, "mul");
#ifdef DISTLAB_HAVE_CUDA
  if (y.device == Device::cuda) return cuda::mul(y.ptr, x.ptr, dtype_of<T>(), y.n);
#endif
  for (std::size_t i = 0; i < y.n; ++i)
    y[i] = T(static_cast<float>(y[i]) * static_cast<float>(x[i]));
}

// x *= a
template <FloatType T>
void scale(View<T> x, float a) {
  detail::same_device("scale", x.device, {});
#ifdef DISTLAB_HAVE_CUDA
  if (x.device == Device::cuda) return cuda::scale(x.ptr, a, dtype_of<T>(), x.n);
#endif
  for (std::size_t i = 0; i < x.n; ++i) x[i] = T(a * static_cast<float>(x[i]));
}

// GeLU with the tanh approximation (GPT-2's; within 1e-3 of the exact x Phi(x)):
//   gelu(x)  = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
inline constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluCubic = 0.044715f;

// out = gelu(in); out may be in.
template <FloatType T>
void gelu_forward(View<T> out, In<T> in) {
  detail::same_shape(out, in, "gelu_forward");
#ifdef DISTLAB_HAVE_CUDA
  if (out.device == Device::cuda) return cuda::gelu_forward(out.ptr, in.ptr, dtype_of<T>(), out.n);
#endif
  for (std::size_t i = 0; i < out.n; ++i) {
    const float x = static_cast<float>(in[i]);
    const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
    out[i] = T(0.5f * x * (1.0f + std::tanh(u)));
  }
}

// dx = dy gelu'(x), with x the forward's input; overwrites dx (dx may be dy).
template <FloatType T>
void gelu_backward(View<T> dx, In<T> dy, In<T> x) {
  detail::same_shape(dx, dy, "gelu_backward");
  detail::same_shape(dx, x, "gelu_backward");
#ifdef DISTLAB_HAVE_CUDA
  if (dx.device == Device::cuda)
    return cuda::gelu_backward(dx.ptr, dy.ptr, x.ptr, dtype_of<T>(), dx.n);
#endif
  for (std::size_t i = 0; i < dx.n; ++i) {
    const float xi = static_cast<float>(x[i]);
    const float t = std::tanh(kGeluSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi));
    const float du_dx = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * xi * xi);
    const float grad = 0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * du_dx;
    dx[i] = T(static_cast<float>(dy[i]) * grad);
  }
}

// dst = src converted: f32 <-> f16 / bf16, rounding to nearest even (f16 overflow gives Inf,
// NaN stays NaN); the same type is a copy.
template <FloatType To, FloatInput From>
void cast(View<To> dst, View<From> src) {
  detail::same_shape(dst, src, "cast");
  using F = std::remove_const_t<From>;
#ifdef DISTLAB_HAVE_CUDA
  if (dst.device == Device::cuda)
    return cuda::cast(dst.ptr, dtype_of<To>(), src.ptr, dtype_of<F>(), dst.n);
#endif
  for (std::size_t i = 0; i < dst.n; ++i) {
    if constexpr (std::same_as<To, F>)
      dst[i] = src[i];
    else
      dst[i] = To(static_cast<float>(src[i]));
  }
}

// --- optimizer -------------------------------------------------------------------------------

// Adam, with decoupled weight decay (AdamW) when weight_decay > 0. For step t = 1, 2, ...:
//   m = beta1 m + (1 - beta1) g            first moment (mean of g)
//   v = beta2 v + (1 - beta2) g^2          second moment
//   m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)      bias corrections: m, v start at 0
//   p = p - lr (m_hat / (sqrt(v_hat) + eps) + weight_decay p)
// Parameters, gradients and both moments are f32: 16 bytes of state per parameter with p and g.
struct AdamConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// One step; m and v start zeroed and persist between steps. The gradient may be f16 or bf16
// (mixed precision: 16-bit gradients, f32 master weights and moments); it is widened to f32.
template <FloatInput G>
void adam_step(View<float> param, View<G> grad, View<float> m, View<float> v,
               const AdamConfig& config, int step) {
  detail::same_shape(param, grad, "adam_step");
  detail::same_shape(param, m, "adam_step");
  detail::same_shape(param, v, "adam_step");
  DL_CHECK(step >= 1,
           "ops::adam_step: step counts from 1 (bias correction divides by 1 - beta^t), not {}",
           step);
  const auto c1 = static_cast<float>(1.0 / (1.0 - std::pow(double{config.beta1}, step)));
  const auto c2 = static_cast<float>(1.0 / (1.0 - std::pow(double{config.beta2}, step)));
  const auto& [lr, beta1, beta2, eps, weight_decay] = config;
#ifdef DISTLAB_HAVE_CUDA
  if (param.device == Device::cuda)
    return cuda::adam_step(param.ptr, grad.ptr, dtype_of<std::remove_const_t<G>>(), m.ptr, v.ptr,
                           param.n, lr, beta1, beta2, eps, weight_decay, c1, c2);
#endif
  for (std::size_t i = 0; i < param.n; ++i) {
    const auto g = static_cast<float>(grad[i]);
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    param[i] -= lr * ((m[i] * c1) / (std::sqrt(v[i] * c2) + eps) + weight_decay * param[i]);
  }
}

// --- reductions ------------------------------------------------------------------------------

// out[0] = sum of x. The sum stays on x's device (read it with to_host, or use it in the next
// op): no hidden wait. On a GPU the last bits may vary between runs (blocks add atomically).
template <FloatInput X>
void sum(View<float> out, View<X> x) {
  detail::check_size("sum", "out", out.size(), 1);
  detail::same_device("sum", out.device, {x.device});
#ifdef DISTLAB_HAVE_CUDA
  if (out.device == Device::cuda) return cuda::sum(out.ptr, x.ptr, dtype_of<X>(), x.n);
#endif
  double total = 0;
  for (std::size_t i = 0; i < x.n; ++i) total += static_cast<float>(x[i]);
  out[0] = static_cast<float>(total);
}

// in is (rows, cols), out is (rows): out[r] = sum over c of in[r, c].
template <FloatInput X>
void row_sums(View<float> out, View<X> in, std::size_t rows, std::size_t cols) {
  detail::check_size("row_sums", "in", in.size(), rows * cols);
  detail::check_size("row_sums", "out", out.size(), rows);
  detail::same_device("row_sums", out.device, {in.device});
#ifdef DISTLAB_HAVE_CUDA
  if (out.device == Device::cuda) return cuda::row_sums(out.ptr, in.ptr, dtype_of<X>(), rows, cols);
#endif
  for (std::size_t r = 0; r < rows; ++r) {
    double total = 0;
    for (std::size_t c = 0; c < cols; ++c) total += static_cast<float>(in[r * cols + c]);
    out[r] = static_cast<float>(total);
  }
}

// in is (rows, cols), out is (cols): out[c] = sum over r of in[r, c] (a bias's gradient).
template <FloatInput X>
void col_sums(View<float> out, View<X> in, std::size_t rows, std::size_t cols) {
  detail::check_size("col_sums", "in", in.size(), rows * cols);
  detail::check_size("col_sums", "out", out.size(), cols);
  detail::same_device("col_sums", out.device, {in.device});
#ifdef DISTLAB_HAVE_CUDA
  if (out.device == Device::cuda) return cuda::col_sums(out.ptr, in.ptr, dtype_of<X>(), rows, cols);
#endif
  std::vector<double> total(cols, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) total[c] += static_cast<float>(in[r * cols + c]);
  for (std::size_t c = 0; c < cols; ++c) out[c] = static_cast<float>(total[c]);
}

// in and out are (rows, cols); each row of out = exp(row - max(row)) / sum exp(row - max(row)).
// Subtracting the max keeps exp from overflowing and does not change the result. out may be in.
template <FloatType T>
void softmax_rows(View<T> out, In<T> in, std::size_t rows, std::size_t cols) {
  detail::check_size("softmax_rows", "in", in.size(), rows * cols);
  detail::same_shape(out, in, "softmax_rows");
#ifdef DISTLAB_HAVE_CUDA
  if (out.device == Device::cuda)
    return cuda::softmax_rows(out.ptr, in.ptr, dtype_of<T>(), rows, cols);
#endif
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t row = r * cols;
    float row_max = -INFINITY;
    for (std::size_t c = 0; c < cols; ++c)
      row_max = std::fmax(row_max, static_cast<float>(in[row + c]));
    double total = 0;
    for (std::size_t c = 0; c < cols; ++c)
      total += std::exp(static_cast<float>(in[row + c]) - row_max);
    const auto inv = static_cast<float>(1.0 / total);
    for (std::size_t c = 0; c < cols; ++c)
      out[row + c] = T(std::exp(static_cast<float>(in[row + c]) - row_max) * inv);
  }
}

// Softmax's backward over rows, from its output y = softmax(x) and dy = dL/dy (all (rows, cols)):
//   dx = y (dy - sum over the row of y dy)        (the Jacobian diag(y) - y y^T applied to dy)
// dx may be dy. Sums accumulate in f64 on the CPU and in f32 trees on a GPU.
template <FloatType T>
void softmax_backward_rows(View<T> dx, In<T> y, In<T> dy, std::size_t rows, std::size_t cols) {
  detail::check_size("softmax_backward_rows", "y", y.size(), rows * cols);
  detail::same_shape(dx, y, "softmax_backward_rows");
  detail::same_shape(dx, dy, "softmax_backward_rows");
#ifdef DISTLAB_HAVE_CUDA
  if (dx.device == Device::cuda)
    return cuda::softmax_backward_rows(dx.ptr, y.ptr, dy.ptr, dtype_of<T>(), rows, cols);
#endif
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t row = r * cols;
    double dot = 0;
    for (std::size_t c = 0; c < cols; ++c)
      dot += double(static_cast<float>(y[row + c])) * static_cast<float>(dy[row + c]);
    for (std::size_t c = 0; c < cols; ++c)
      dx[row + c] = T(static_cast<float>(y[row + c]) *
                      (static_cast<float>(dy[row + c]) - static_cast<float>(dot)));
  }
}

// --- the transformer (lesson 14) -------------------------------------------------------------

// LayerNorm over each row of x (rows, cols), with the row's mean and biased variance:
//   xhat = (x - mean) rstd,  rstd = 1 / sqrt(var + eps),  y = xhat gamma + beta   (gamma, beta: cols)
// mean and rstd (rows, f32) are kept for the backward. y may be x.
template <FloatType T>
void layernorm_forward(View<T> y, View<float> mean, View<float> rstd, In<T> x, In<T> gamma,
                       In<T> beta, std::size_t rows, std::size_t cols, float eps) {
  detail::check_size("layernorm_forward", "x", x.size(), rows * cols);
  detail::check_size("layernorm_forward", "gamma", gamma.size(), cols);
  detail::check_size("layernorm_forward", "mean", mean.size(), rows);
  detail::same_shape(y, x, "layernorm_forward");
  detail::same_shape(gamma, beta, "layernorm_forward");
  detail::same_shape(mean, rstd, "layernorm_forward");
  detail::same_device("layernorm_forward", y.device, {gamma.device, mean.device});
#ifdef DISTLAB_HAVE_CUDA
  if (y.device == Device::cuda)
    return cuda::layernorm_forward(y.ptr, mean.ptr, rstd.ptr, x.ptr, gamma.ptr, beta.ptr,
                                   dtype_of<T>(), rows, cols, eps);
#endif
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t row = r * cols;
    double total = 0;
    for (std::size_t c = 0; c < cols; ++c) total += static_cast<float>(x[row + c]);
    const auto mu = static_cast<float>(total / static_cast<double>(cols));
    double squares = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      const double d = static_cast<float>(x[row + c]) - mu;
      squares += d * d;
    }
    const auto rs = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(cols) + eps));
    mean[r] = mu;
    rstd[r] = rs;
    for (std::size_t c = 0; c < cols; ++c)
      y[row + c] = T((static_cast<float>(x[row + c]) - mu) * rs * static_cast<float>(gamma[c]) +
                     static_cast<float>(beta[c]));
  }
}

// LayerNorm's backward, from the forward's x, mean and rstd and dy = dL/dy:
//   g = dy gamma,  dx = rstd (g - mean over the row of g - xhat mean over the row of g xhat)
//   dgamma += sum over rows of dy xhat,  dbeta += sum over rows of dy     (accumulated: micro-batches add up)
// dx may be dy.
template <FloatType T>
void layernorm_backward(View<T> dx, View<T> dgamma, View<T> dbeta, In<T> dy, In<T> x,
                        In<float> mean, In<float> rstd, In<T> gamma, std::size_t rows,
                        std::size_t cols) {
  detail::check_size("layernorm_backward", "x", x.size(), rows * cols);
  detail::check_size("layernorm_backward", "gamma", gamma.size(), cols);
  detail::check_size("layernorm_backward", "mean", mean.size(), rows);
  detail::same_shape(dx, x, "layernorm_backward");
  detail::same_shape(dx, dy, "layernorm_backward");
  detail::same_shape(dgamma, gamma, "layernorm_backward");
  detail::same_shape(dbeta, gamma, "layernorm_backward");
  detail::same_shape(mean, rstd, "layernorm_backward");
  detail::same_device("layernorm_backward", dx.device, {gamma.device, mean.device});
#ifdef DISTLAB_HAVE_CUDA
  if (dx.device == Device::cuda)
    return cuda::layernorm_backward(dx.ptr, dgamma.ptr, dbeta.ptr, dy.ptr, x.ptr, mean.ptr,
                                    rstd.ptr, gamma.ptr, dtype_of<T>(), rows, cols);
#endif
  std::vector<double> dg(cols, 0.0), db(cols, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t row = r * cols;
    const float mu = mean[r], rs = rstd[r];
    double g_sum = 0, gx_sum = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      const float d = static_cast<float>(dy[row + c]);
      const float xh = (static_cast<float>(x[row + c]) - mu) * rs;
      const float g = d * static_cast<float>(gamma[c]);
      g_sum += g;
      gx_sum += double(g) * xh;
      dg[c] += double(d) * xh;
      db[c] += d;
    }
    const auto g_mean = static_cast<float>(g_sum / static_cast<double>(cols));
    const auto gx_mean = static_cast<float>(gx_sum / static_cast<double>(cols));
    for (std::size_t c = 0; c < cols; ++c) {
      const float xh = (static_cast<float>(x[row + c]) - mu) * rs;
      const float g = static_cast<float>(dy[row + c]) * static_cast<float>(gamma[c]);
      dx[row + c] = T(rs * (g - g_mean - xh * gx_mean));
    }
  }
  for (std::size_t c = 0; c < cols; ++c) {
    dgamma[c] = T(static_cast<float>(dgamma[c]) + static_cast<float>(dg[c]));
    dbeta[c] = T(static_cast<float>(dbeta[c]) + static_cast<float>(db[c]));
  }
}

// out's row r = table's row ids[r] (rows of `cols`): an embedding lookup. Every id must be a
// row of the table (checked on the CPU; on a GPU an id out of range reads nothing and writes 0).
template <FloatType T>
void gather_rows(View<T> out, In<T> table, In<std::int32_t> ids, std::size_t cols) {
  detail::check_size("gather_rows", "out", out.size(), ids.size() * cols);
  DL_CHECK(cols > 0 && table.size() % cols == 0,
           "ops::gather_rows: the table's {} elements are no whole rows of {}", table.size(), cols);
  detail::same_device("gather_rows", out.device, {table.device, ids.device});
#ifdef DISTLAB_HAVE_CUDA
  if (out.device == Device::cuda)
    return cuda::gather_rows(out.ptr, table.ptr, ids.ptr, dtype_of<T>(), ids.size(),
                             table.size() / cols, cols);
#endif
  const std::size_t table_rows = table.size() / cols;
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const std::int32_t id = ids[r];
    DL_CHECK(id >= 0 && static_cast<std::size_t>(id) < table_rows,
             "ops::gather_rows: id {} at {} is not a row of the table's {}", id, r, table_rows);
    for (std::size_t c = 0; c < cols; ++c)
      out[r * cols + c] = table[static_cast<std::size_t>(id) * cols + c];
  }
}

// The lookup's backward: table row ids[r] += dout's row r, for every r (an id that appears twice
// gets both). Deterministic on both devices: each table element sums its rows in order.
template <FloatType T>
void scatter_add_rows(View<T> dtable, In<T> dout, In<std::int32_t> ids, std::size_t cols) {
  detail::check_size("scatter_add_rows", "dout", dout.size(), ids.size() * cols);
  DL_CHECK(cols > 0 && dtable.size() % cols == 0,
           "ops::scatter_add_rows: the table's {} elements are no whole rows of {}", dtable.size(),
           cols);
  detail::same_device("scatter_add_rows", dtable.device, {dout.device, ids.device});
#ifdef DISTLAB_HAVE_CUDA
  if (dtable.device == Device::cuda)
    return cuda::scatter_add_rows(dtable.ptr, dout.ptr, ids.ptr, dtype_of<T>(), ids.size(),
                                  dtable.size() / cols, cols);
#endif
  const std::size_t table_rows = dtable.size() / cols;
  std::vector<double> sums(dtable.size(), 0.0);
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const std::int32_t id = ids[r];
    DL_CHECK(id >= 0 && static_cast<std::size_t>(id) < table_rows,
             "ops::scatter_add_rows: id {} at {} is not a row of the table's {}", id, r,
             table_rows);
    for (std::size_t c = 0; c < cols; ++c)
      sums[static_cast<std::size_t>(id) * cols + c] += static_cast<float>(dout[r * cols + c]);
  }
  for (std::size_t i = 0; i < dtable.size(); ++i)
    if (sums[i] != 0) dtable[i] = T(static_cast<float>(dtable[i]) + static_cast<float>(sums[i]));
}

// Softmax cross-entropy of each row of logits (rows, cols) against its target class:
//   loss[r] = log sum_c exp(z_rc) - z_r,target,   dlogits = scale (softmax(z_r) - onehot(target))
// loss is (rows, f32). `scale` is what the caller's loss multiplies each row's by (1 / rows for
// a mean). dlogits may be logits.
template <FloatType T>
void cross_entropy(View<float> loss, View<T> dlogits, In<T> logits, In<std::int32_t> targets,
                   std::size_t rows, std::size_t cols, float scale) {
  detail::check_size("cross_entropy", "logits", logits.size(), rows * cols);
  detail::check_size("cross_entropy", "targets", targets.size(), rows);
  detail::check_size("cross_entropy", "loss", loss.size(), rows);
  detail::same_shape(dlogits, logits, "cross_entropy");
  detail::same_device("cross_entropy", dlogits.device, {loss.device, targets.device});
#ifdef DISTLAB_HAVE_CUDA
  if (dlogits.device == Device::cuda)
    return cuda::cross_entropy(loss.ptr, dlogits.ptr, logits.ptr, targets.ptr, dtype_of<T>(), rows,
                               cols, scale);
#endif
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t row = r * cols;
    const std::int32_t target = targets[r];
    DL_CHECK(target >= 0 && static_cast<std::size_t>(target) < cols,
             "ops::cross_entropy: target {} of row {} is not one of the {} classes", target, r,
             cols);
    float top = -INFINITY;
    for (std::size_t c = 0; c < cols; ++c)
      top = std::fmax(top, static_cast<float>(logits[row + c]));
    double total = 0;
    for (std::size_t c = 0; c < cols; ++c)
      total += std::exp(static_cast<float>(logits[row + c]) - top);
    const auto log_total = static_cast<float>(std::log(total));
    loss[r] = log_total + top - static_cast<float>(logits[row + static_cast<std::size_t>(target)]);
    for (std::size_t c = 0; c < cols; ++c) {
      const float p = std::exp(static_cast<float>(logits[row + c]) - top - log_total);
      dlogits[row + c] = T(scale * (p - (c == static_cast<std::size_t>(target) ? 1.0f : 0.0f)));
    }
  }
}

// --- matrices --------------------------------------------------------------------------------

// The FLOP done by gemm on this thread (a rank's thread, or an MPI rank's process): 2 m n k per
// call, a multiply and an add per term, counted when the call is made, on either device. The
// count only grows; a caller reads it before and after the work it wants counted (lesson 00).
inline std::uint64_t& gemm_flops() {
  thread_local std::uint64_t flops = 0;
  return flops;
}

// C = alpha op(A) op(B) + beta C, row-major, with op(X) = X^T when trans_x:
//   C is (m, n); A is stored (m, k), or (k, m) when trans_a; B is stored (k, n), or (n, k).
// beta = 0 overwrites C without reading it. f16 and bf16 accumulate in f32 (on the CPU: widened
// to f32, multiplied, rounded once). On a GPU: cuBLAS (cuda/gemm.cu explains the row-major call).
template <FloatType T>
void gemm(View<T> c, In<T> a, In<T> b, std::size_t m, std::size_t n, std::size_t k,
          bool trans_a = false, bool trans_b = false, float alpha = 1.0f, float beta = 0.0f) {
  detail::check_size("gemm", "A", a.size(), m * k);
  detail::check_size("gemm", "B", b.size(), k * n);
  detail::check_size("gemm", "C", c.size(), m * n);
  detail::same_device("gemm", c.device, {a.device, b.device});
  gemm_flops() += 2 * std::uint64_t(m) * n * k;
#ifdef DISTLAB_HAVE_CUDA
  if (c.device == Device::cuda)
    return cuda::gemm(c.ptr, a.ptr, b.ptr, dtype_of<T>(), m, n, k, trans_a, trans_b, alpha, beta);
#endif
  if constexpr (std::same_as<T, float>) {
    detail::gemm_cpu(c.ptr, a.ptr, b.ptr, m, n, k, trans_a, trans_b, alpha, beta);
  } else {
    const std::vector<float> a32 = detail::widened(a), b32 = detail::widened(b);
    std::vector<float> c32 = beta == 0.0f ? std::vector<float>(c.n) : detail::widened(In<T>(c));
    detail::gemm_cpu(c32.data(), a32.data(), b32.data(), m, n, k, trans_a, trans_b, alpha, beta);
    for (std::size_t i = 0; i < c.n; ++i) c[i] = T(c32[i]);
  }
}

}  // namespace distlab::ops
