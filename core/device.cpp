#include "device.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "check.hpp"

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
  if (requested == "auto") {
    // The CUDA ops and transports are not in this build yet, so auto stays on the CPU.
    return Device::cpu;
  }
  if (requested == "cuda") {
    if (!built_with_cuda())
      throw UsageError("--device cuda: this build has no CUDA support (nvcc was not found at configure time); use --device cpu");
    if (cuda_device_count() == 0)
      throw UsageError("--device cuda: no CUDA device answers on this machine; use --device cpu");
    throw UsageError("--device cuda: the lessons' CUDA ops and transports are not built yet; use --device cpu");
  }
  throw UsageError("--device must be auto, cpu or cuda, not '" + requested + "'");
}

void* device_alloc(Device device, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (device == Device::cpu) {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
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

void device_free(Device device, void* ptr) noexcept {
  if (!ptr) return;
  if (device == Device::cpu) {
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
  const cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  DL_CHECK(err == cudaSuccess, "cudaMemcpy({} B) failed: {}", bytes, cudaGetErrorString(err));
#else
  DL_FAIL("device copy requested in a build without CUDA");
#endif
}

}  // namespace distlab
