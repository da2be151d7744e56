#include "device.hpp"

#include <cstdlib>
#include <cstring>
#include <map>
#include <new>

#include "check.hpp"
#include "cuda_context.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace distlab {

const char* to_string(Mode m) { return m == Mode::threads ? "threads" : "mpi"; }
const char* to_string(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

const char* to_string(DType t) {
  switch (t) {
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
  }
  return 1;
}

bool built_with_cuda() {
#ifdef DISTLAB_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef DISTLAB_HAVE_CUDA
  int count = 0;  // left unwritten when the driver is missing: any error means "no device"
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

Device resolve_device(const std::string& requested) {
  if (requested == "cpu") return Device::cpu;
  if (requested == "auto") return built_with_cuda() && cuda_device_count() > 0 ? Device::cuda : Device::cpu;
  if (requested == "cuda") {
    if (!built_with_cuda())
      throw UsageError("--device cuda: this build has no CUDA support (nvcc was not found at configure time); use --device cpu");
    if (cuda_device_count() == 0)
      throw UsageError("--device cuda: no CUDA device answers on this machine; use --device cpu");
    return Device::cuda;
  }
  throw UsageError("--device must be auto, cpu or cuda, not '" + requested + "'");
}

namespace {

constexpr std::size_t kCacheMin = std::size_t{64} << 10;    // smaller blocks go straight to malloc
constexpr std::size_t kCacheLimit = std::size_t{1} << 30;  // per thread

// Freed CPU blocks by size, for this thread's next allocation of that size.
struct BlockCache {
  std::multimap<std::size_t, void*> blocks;
  std::size_t bytes = 0;
  ~BlockCache() {
    for (auto& [size, p] : blocks) std::free(p);
  }
};
thread_local BlockCache t_cache;

std::size_t rounded(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

void* device_alloc(Device device, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (device == Device::cpu) {
    const std::size_t size = rounded(bytes);
    if (auto it = t_cache.blocks.find(size); it != t_cache.blocks.end()) {
      void* p = it->second;
      t_cache.blocks.erase(it);
      t_cache.bytes -= size;
      return p;
    }
    void* p = std::aligned_alloc(64, size);
    if (!p) throw std::bad_alloc();
    return p;
  }
#ifdef DISTLAB_HAVE_CUDA
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  DL_CHECK(err == cudaSuccess, "cudaMalloc({} B) failed: {}", bytes, cudaGetErrorString(err));
  return p;
#else
  DL_FAIL("device memory requested in a build without CUDA");
#endif
}

void device_free(Device device, void* ptr, std::size_t bytes) noexcept {
  if (!ptr) return;
  if (device == Device::cpu) {
    const std::size_t size = rounded(bytes);
    if (size >= kCacheMin && t_cache.bytes + size <= kCacheLimit) {
      try {
        t_cache.blocks.emplace(size, ptr);
        t_cache.bytes += size;
        return;
      } catch (...) {
      }
    }
    std::free(ptr);
    return;
  }
#ifdef DISTLAB_HAVE_CUDA
  cudaFree(ptr);
#endif
}

void device_copy(void* dst, Device dst_device, const void* src, Device src_device,
                 std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == Device::cpu && src_device == Device::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef DISTLAB_HAVE_CUDA
  // In the rank's stream order (after the kernels that produced the data), then waited for:
  // a plain cudaMemcpy would run on the legacy stream, which does not wait for the rank's
  // non-blocking stream.
  if (cuda_rank().device >= 0) {
    const auto stream = static_cast<cudaStream_t>(cuda_rank().stream);
    DL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    DL_CUDA_CHECK(cudaStreamSynchronize(stream));
  } else {
    DL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  }
#else
  DL_FAIL("device copy requested in a build without CUDA");
#endif
}

void device_zero(Device device, void* ptr, std::size_t bytes) {
  if (bytes == 0) return;
  if (device == Device::cpu) {
    std::memset(ptr, 0, bytes);
    return;
  }
#ifdef DISTLAB_HAVE_CUDA
  if (cuda_rank().device >= 0)
    DL_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(cuda_rank().stream)));
  else
    DL_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
#else
  DL_FAIL("device memory requested in a build without CUDA");
#endif
}

}  // namespace distlab
