// common.cuh — what the CUDA ops share: the rank's stream, launch sizes, DType -> device type,
// float conversions, and the warp and block reductions.
//
// The .cu files are compiled as C++17 (nvcc's default): under nvcc's C++20 front end, fmt 9's
// consteval format strings (used by DL_CHECK) do not compile. So they include only C++17
// headers: check.hpp, world.hpp, cuda_context.hpp, ops_cuda.hpp — not buffer.hpp (std::span).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/base/check.hpp"
#include "core/base/dtype.hpp"
#include "core/base/world.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/cuda_context.hpp"

namespace distlab::cuda {

constexpr int kThreads = 256;  // threads per block for every kernel here
constexpr int kWarp = 32;

// The rank's stream; fails with a sentence on a thread that is not bound to a GPU.
inline cudaStream_t rank_stream() {
  return static_cast<cudaStream_t>(cuda_stream());
}

// Blocks for a grid-stride loop over `work` items: enough to cover them, at most one full
// wave of resident threads (2048 per SM on Hopper), so each thread loops when work is large.
inline unsigned grid_for(std::size_t work) {
  thread_local int device = -1, sms = 0;  // cached per thread: a rank's GPU does not change
  if (device != cuda_rank().device || sms <= 0) {
    device = cuda_rank().device;
    DL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  }
  const std::size_t needed = (work + kThreads - 1) / kThreads;
  const std::size_t wave = static_cast<std::size_t>(sms) * (2048 / kThreads);
  return static_cast<unsigned>(needed < wave ? needed : wave);
}

// --- element types ---------------------------------------------------------------------------

// A type as a value, for generic lambdas: dispatch(t, ..., [&](auto tag) { using T = ...; }).
template <class T>
struct Tag {
  using type = T;
};

// The float types the arithmetic ops take, as CUDA's types (Half and BFloat16 in half.hpp
// are bit-compatible with __half and __nv_bfloat16).
template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32:
      return f(Tag<float>{});
    case DType::f16:
      return f(Tag<__half>{});
    case DType::bf16:
      return f(Tag<__nv_bfloat16>{});
    default:
      DL_FAIL("ops::{} on cuda takes f32, f16 or bf16, not {}", op, to_string(t));
  }
}

// Every DType (add and fill).
template <class F>
void dispatch_any(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::u8:
      return f(Tag<std::uint8_t>{});
    case DType::i32:
      return f(Tag<std::int32_t>{});
    case DType::i64:
      return f(Tag<std::int64_t>{});
    case DType::f64:
      return f(Tag<double>{});
    default:
      return dispatch_float(t, op, f);
  }
}

template <class T>
constexpr bool kIs16Bit = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// Loads widen to float and stores round to nearest even: the ops compute in f32 for every type.
__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <class T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return x;
}

// --- reductions ------------------------------------------------------------------------------

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Every lane of the warp gets the reduction of the 32 lanes' values (butterfly).
template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  return v;
}

// Every thread of the block gets the reduction of the block's values: warps reduce, lane 0 of
// each writes to shared memory, the first warp reduces those. Every thread must call it.
template <class Op>
__device__ float block_reduce(float v, Op op, float identity) {
  __shared__ float per_warp[kWarp];
  __shared__ float result;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = warp_reduce(v, op);
  if (lane == 0) per_warp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_reduce(lane < warps ? per_warp[lane] : identity, op);
    if (lane == 0) result = v;
  }
  __syncthreads();
  v = result;
  __syncthreads();  // a second call in the same kernel may overwrite per_warp and result
  return v;
}

}  // namespace distlab::cuda
