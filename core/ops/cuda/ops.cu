// ops.cu — the elementwise CUDA ops: one grid-stride kernel, one functor per op.
//
// Elementwise ops are bound by memory bandwidth, not arithmetic: add on n floats reads 8n
// bytes and writes 4n and does n additions. So the kernel's only job is to keep the memory
// system busy: every thread loads 16 bytes at a time (a float4's worth: 4 floats, 8 halves)
// when the pointers allow it, and one wave of resident threads strides over the array.
// Compare its GB/s with a device-to-device copy: distlab_ops_bench --device cuda.
//
//   map_kernel   out[i] = op(in[i]...): a short head one by one up to a 16-byte boundary, then
//                16-byte packs, then the tail one by one
//   launch_map   picks packed (every pointer reaches a 16-byte boundary after the same head) or
//                element by element (views misaligned against each other), grid size, stream
//   functors     AddOp, AxpyOp, ScaleOp, FillOp, GeluOp, GeluBackwardOp, CastOp
//   adam_kernel  four arrays in, three out: written out in full
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/device/cuda_check.hpp"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/ops_cuda.hpp"

namespace distlab::cuda {

namespace {

// N elements that are loaded and stored as one (16 bytes at most: one vector instruction).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <int N, class T>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p, std::size_t pack) {
  return reinterpret_cast<const Pack<T, N>*>(p)[pack];
}

template <class TOut, int N, class Op, class... TIn>
__device__ __forceinline__ Pack<TOut, N> apply(const Op& op, const Pack<TIn, N>&... in) {
  Pack<TOut, N> out;
#pragma unroll
  for (int j = 0; j < N; ++j) out.v[j] = op(in.v[j]...);
  return out;
}

// out[i] = op(in[i]...) for i < n. out may be one of the inputs (add: dst += src): each element
// is read before it is written, by the same thread. Elements [0, head) go one by one (head < N,
// so the first threads take one each); from `head` on, out and every input are N-pack aligned
// and go N at a time; the (n - head) % N left at the end go one by one again.
template <int N, class Op, class TOut, class... TIn>
__global__ void map_kernel(Op op, std::size_t n, std::size_t head, TOut* out, const TIn*... in) {
  const std::size_t first = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  if (first < head) out[first] = op(in[first]...);
  const std::size_t packs = (n - head) / N;
  auto* out_packs = reinterpret_cast<Pack<TOut, N>*>(out + head);
  for (std::size_t p = first; p < packs; p += stride)
    out_packs[p] = apply<TOut, N>(op, load_pack<N>(in + head, p)...);
  for (std::size_t i = head + packs * N + first; i < n; i += stride) out[i] = op(in[i]...);  // tail
}

template <int N, class T>
bool aligned(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % (sizeof(T) * N) == 0;
}

// Elements from p to the next N-element boundary (an N-pack of T: 16 bytes, or 8 for the f16
// side of a cast): 0 .. N - 1.
template <int N, class T>
std::size_t to_boundary(const T* p) {
  const std::size_t bytes = sizeof(T) * N;
  const std::size_t past = reinterpret_cast<std::uintptr_t>(p) % bytes;
  return past == 0 ? 0 : (bytes - past) / sizeof(T);
}

template <class Op, class TOut, class... TIn>
void launch_map(Op op, std::size_t n, TOut* out, const TIn*... in) {
  if (n == 0) return;
  const cudaStream_t stream = rank_stream();
  // Elements per pack: 16 bytes of the widest type (4 for f32, 8 for f16; a cast f32 -> f16
  // loads 16 bytes and stores 8).
  constexpr int kPack = static_cast<int>(16 / std::max({sizeof(TOut), sizeof(TIn)...}));
  // Sub-views (a rank's shard) start anywhere: when every pointer reaches its boundary after the
  // same number of elements, only that head goes one by one.
  const std::size_t head = to_boundary<kPack>(out);
  if (head < n && aligned<kPack>(out + head) && (aligned<kPack>(in + head) && ...)) {
    map_kernel<kPack><<<grid_for((n - head + kPack - 1) / kPack), kThreads, 0, stream>>>(
        op, n, head, out, in...);
  } else {  // views misaligned against each other (or shorter than the head): one by one
    map_kernel<1><<<grid_for(n), kThreads, 0, stream>>>(op, n, std::size_t{0}, out, in...);
  }
  DL_CUDA_LAUNCH_CHECK();
}

// --- the ops, one element each ---------------------------------------------------------------

struct AddOp {
  template <class T>
  __device__ T operator()(T d, T s) const {
    if constexpr (kIs16Bit<T>)
      return from_float<T>(to_float(d) + to_float(s));
    else
      return static_cast<T>(d + s);
  }
};

struct AxpyOp {
  float a;
  template <class T>
  __device__ T operator()(T y, T x) const {
    return from_float<T>(to_float(y) + a * to_float(x));
  }
};

struct MulOp {
  template <class T>
  __device__ T operator()(T y, T x) const {
    return from_float<T>(to_float(y) * to_float(x));
  }
};

struct ScaleOp {
  float a;
  template <class T>
  __device__ T operator()(T x) const {
    return from_float<T>(a * to_float(x));
  }
};

template <class T>
struct FillOp {
  T value;
  __device__ T operator()() const { return value; }
};

// GeLU, tanh approximation (as GPT-2 and ops.hpp):
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

struct GeluOp {
  template <class T>
  __device__ T operator()(T in) const {
    const float x = to_float(in);
    const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    return from_float<T>(0.5f * x * (1.0f + tanhf(u)));
  }
};

struct GeluBackwardOp {
  template <class T>
  __device__ T operator()(T dy, T in) const {
    const float x = to_float(in);
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    const float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
    return from_float<T>(to_float(dy) * grad);
  }
};

template <class TOut>
struct CastOp {
  template <class TIn>
  __device__ TOut operator()(TIn x) const {
    return from_float<TOut>(to_float(x));
  }
};

// AdamW on f32 state, one element per iteration (ops.hpp gives the formula).
template <class G>
__global__ void adam_kernel(float* param, const G* grad, float* m, float* v, std::size_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            float c1, float c2) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    const float g = to_float(grad[i]);
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float p = param[i];
    param[i] = p - lr * ((mi * c1) / (sqrtf(vi * c2) + eps) + weight_decay * p);
  }
}

}  // namespace

// --- the calls (ops_cuda.hpp) ----------------------------------------------------------------

void copy(void* dst, const void* src, std::size_t bytes) {
  const cudaStream_t stream = rank_stream();
  if (bytes == 0 || dst == src) return;
  DL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void fill(void* dst, const void* value, DType type, std::size_t n) {
  dispatch_any(type, "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    FillOp<T> op;
    std::memcpy(&op.value, value, sizeof(T));  // Half / BFloat16 bits are __half's
    launch_map(op, n, static_cast<T*>(dst));
  });
}

void add(void* dst, const void* src, DType type, std::size_t n) {
  dispatch_any(type, "add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(AddOp{}, n, static_cast<T*>(dst), static_cast<const T*>(dst),
               static_cast<const T*>(src));
  });
}

void axpy(void* y, float a, const void* x, DType type, std::size_t n) {
  dispatch_float(type, "axpy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(AxpyOp{a}, n, static_cast<T*>(y), static_cast<const T*>(y),
               static_cast<const T*>(x));
  });
}

void mul(void* y, const void* x, DType type, std::size_t n) {
  dispatch_float(type, "mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(MulOp{}, n, static_cast<T*>(y), static_cast<const T*>(y), static_cast<const T*>(x));
  });
}

void scale(void* x, float a, DType type, std::size_t n) {
  dispatch_float(type, "scale", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(ScaleOp{a}, n, static_cast<T*>(x), static_cast<const T*>(x));
  });
}

void gelu_forward(void* out, const void* in, DType type, std::size_t n) {
  dispatch_float(type, "gelu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(GeluOp{}, n, static_cast<T*>(out), static_cast<const T*>(in));
  });
}

void gelu_backward(void* dx, const void* dy, const void* x, DType type, std::size_t n) {
  dispatch_float(type, "gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(GeluBackwardOp{}, n, static_cast<T*>(dx), static_cast<const T*>(dy),
               static_cast<const T*>(x));
  });
}

void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n) {
  if (dst_type == src_type) return copy(dst, src, n * dtype_size(dst_type));
  dispatch_float(dst_type, "cast", [&](auto to) {
    using TOut = typename decltype(to)::type;
    dispatch_float(src_type, "cast", [&](auto from) {
      using TIn = typename decltype(from)::type;
      launch_map(CastOp<TOut>{}, n, static_cast<TOut*>(dst), static_cast<const TIn*>(src));
    });
  });
}

void adam_step(float* param, const void* grad, DType grad_type, float* m, float* v, std::size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, float c1,
               float c2) {
  const cudaStream_t stream = rank_stream();
  if (n == 0) return;
  dispatch_float(grad_type, "adam_step", [&](auto tag) {
    using G = typename decltype(tag)::type;
    adam_kernel<<<grid_for(n), kThreads, 0, stream>>>(param, static_cast<const G*>(grad), m, v, n,
                                                      lr, beta1, beta2, eps, weight_decay, c1, c2);
    DL_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace distlab::cuda
