#include "core/device/allocator.hpp"

#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <vector>

#include <fmt/format.h>

#include "core/base/check.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/cuda_context.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace distlab {

bool built_with_cuda() {
#ifdef DISTLAB_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::string cuda_version_text(int code) {
  return fmt::format("{}.{}", code / 1000, code % 1000 / 10);
}

CudaProbe classify_cuda(int error, int count, int driver_version, int runtime_version) {
  CudaProbe p;
  p.driver_version = driver_version;
  p.runtime_version = runtime_version;
#ifdef DISTLAB_HAVE_CUDA
  const auto rc = static_cast<cudaError_t>(error);
  if (rc == cudaSuccess) {
    p.devices = count;
  } else if (rc == cudaErrorNoDevice ||
             (rc == cudaErrorInsufficientDriver && driver_version == 0)) {
    // no device, or no driver at all: a machine without GPU
  } else {
    p.failure =
        fmt::format("cudaGetDeviceCount failed: {} (driver {}, runtime {})", cuda_error_text(error),
                    driver_version ? cuda_version_text(driver_version) : "none",
                    cuda_version_text(runtime_version));
  }
#else
  (void)error;
  (void)count;
#endif
  return p;
}

namespace {

CudaProbe ask_cuda() {
#ifdef DISTLAB_HAVE_CUDA
  int driver = 0, runtime = 0, count = 0;  // count is left unwritten when the driver is missing
  cudaDriverGetVersion(&driver);           // 0 when no driver is installed
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t rc = cudaGetDeviceCount(&count);
  cudaGetLastError();
  return classify_cuda(rc, count, driver, runtime);
#else
  return {};
#endif
}

}  // namespace

const CudaProbe& cuda_probe() {
  static const CudaProbe probe = ask_cuda();
  return probe;
}

int cuda_device_count() {
  return cuda_probe().devices;
}

double cuda_free_bytes(int device) {
#ifdef DISTLAB_HAVE_CUDA
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  std::size_t free = 0, total = 0;
  const bool ok =
      cudaSetDevice(device) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess;
  if (previous >= 0) cudaSetDevice(previous);
  cudaGetLastError();
  return ok ? static_cast<double>(free) : -1.0;
#else
  (void)device;
  return -1.0;
#endif
}

Device resolve_device(const std::string& requested) {
  if (requested == "cpu") return Device::cpu;
  const CudaProbe& cuda = cuda_probe();
  if (requested == "auto") {
    if (built_with_cuda() && cuda.devices > 0) return Device::cuda;
    if (!cuda.failure.empty())  // a GPU machine whose CUDA does not start: say so
      fmt::print(stderr,
                 "distlab: --device auto: CUDA does not start here ({}); running on the CPU\n",
                 cuda.failure);
    return Device::cpu;
  }
  if (requested == "cuda") {
    if (!built_with_cuda())
      throw UsageError(
          "--device cuda: this build has no CUDA support (nvcc was not found at configure time); "
          "use --device cpu");
    if (!cuda.failure.empty())
      throw UsageError(
          fmt::format("--device cuda: CUDA does not start on this machine: {}; fix the driver or "
                      "use --device cpu",
                      cuda.failure));
    if (cuda.devices == 0)
      throw UsageError("--device cuda: no CUDA device answers on this machine; use --device cpu");
    return Device::cuda;
  }
  throw UsageError("--device must be auto, cpu or cuda, not '" + requested + "'");
}

namespace {

// Blocks from this size on are kept for reuse: a collective's small workspace (recursive
// doubling's 8 KiB) would otherwise cost an aligned malloc, with its heap consolidation, on
// every call.
constexpr std::size_t kCacheMin = std::size_t{4} << 10;    // smaller blocks go straight to malloc
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

std::size_t rounded(std::size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

// Blocks device_free held back because a message still named them (InFlight).
struct HeldBlock {
  Device device;
  void* ptr;
  std::size_t bytes;
};
thread_local const InFlight* t_in_flight = nullptr;
thread_local std::vector<HeldBlock> t_held;

#ifdef DISTLAB_HAVE_CUDA
// Freed device blocks of the rank bound to this thread, by size, for its next allocation of
// that size. cudaFree synchronizes the whole device, so ranks sharing a GPU would serialise on
// every freed workspace, and a timed collective would measure the allocator. Reuse is safe in
// stream order: the rank's kernels run in order on its stream, an in-process copy into the
// block waits for the receiver's stream (peer_copy.hpp), and a message's wait() returns only
// after its copy ended. The blocks go back at unbind, after the streams drained
// (release_device_blocks); a thread that never unbinds leaves them to the process's end.
constexpr std::size_t kGpuCacheLimit = std::size_t{4} << 30;  // per rank
struct GpuBlockCache {
  std::multimap<std::size_t, void*> blocks;
  std::size_t bytes = 0;
};
thread_local GpuBlockCache t_gpu_cache;

std::size_t gpu_rounded(std::size_t bytes) {
  return (bytes + 511) / 512 * 512;
}

// True when `ptr` is memory of the GPU this thread's rank is bound to.
bool on_bound_gpu(const void* ptr) {
  const int device = cuda_rank().device;
  if (device < 0) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice && a.device == device;
}
#endif

}  // namespace

void release_device_blocks() noexcept {
#ifdef DISTLAB_HAVE_CUDA
  for (auto& [size, p] : t_gpu_cache.blocks) cudaFree(p);
  t_gpu_cache.blocks.clear();
  t_gpu_cache.bytes = 0;
  cudaGetLastError();
#endif
}

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
  const std::size_t size = gpu_rounded(bytes);
  if (cuda_rank().device >= 0) {
    if (auto it = t_gpu_cache.blocks.find(size); it != t_gpu_cache.blocks.end()) {
      void* p = it->second;
      t_gpu_cache.blocks.erase(it);
      t_gpu_cache.bytes -= size;
      return p;
    }
  }
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation && t_gpu_cache.bytes > 0) {
    cudaGetLastError();  // the cached blocks first, then once more
    release_device_blocks();
    err = cudaMalloc(&p, size);
  }
  if (err != cudaSuccess) cudaGetLastError();
  DL_CHECK(err == cudaSuccess, "cudaMalloc({} B) failed: {}", bytes, cuda_error_text(err));
  return p;
#else
  DL_FAIL("device memory requested in a build without CUDA");
#endif
}

void set_in_flight(const InFlight* guard) noexcept {
  t_in_flight = guard;
}

void release_held_blocks() noexcept {
  std::vector<HeldBlock> held;
  held.swap(t_held);
  for (const auto& b : held) device_free(b.device, b.ptr, b.bytes);
}

void device_free(Device device, void* ptr, std::size_t bytes) noexcept {
  if (!ptr) return;
  if (t_in_flight && t_in_flight->in_flight(ptr, bytes)) {
    try {
      t_held.push_back({device, ptr, bytes});
      return;
    } catch (...) {  // no memory to remember it: leak it rather than free memory in use
      return;
    }
  }
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
  const std::size_t size = gpu_rounded(bytes);
  if (t_gpu_cache.bytes + size <= kGpuCacheLimit && on_bound_gpu(ptr)) {
    try {
      t_gpu_cache.blocks.emplace(size, ptr);
      t_gpu_cache.bytes += size;
      return;
    } catch (...) {
    }
  }
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
