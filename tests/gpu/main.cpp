// main.cpp — the GPU tests' entry: with no CUDA device they report "skipped" to CTest (exit 77,
// the tests' SKIP_RETURN_CODE), never a silent pass; with one, Catch2 runs them.
//
// `distlab_gpu_tests --probe` only answers, for run_gpu.sh and scripts/gpu-check.sh:
//   0  a device answers; prints the driver, runtime, cuBLAS and NCCL versions and the devices
//   77 no CUDA device (no driver installed, or no device)
//   3  CUDA does not start though a driver is there (a driver older than the runtime, ...):
//      prints CUDA's error; never reported as "no GPU"
// (A missing libcudart or libcublas stops the loader before main: exit 127 and its message.)
// `--list-tests` and `--list-tags` work without a device.
//
// Test groups: every test carries one group tag — [ops] [model] [context] [transport]
// [ordering] [all_reduce] [trace] [library] [nccl] — and gpu-check.sh runs each group as its
// own process, because a sticky CUDA error poisons every later test in the process. The
// hidden [stress] tests run only when asked for (gpu-check.sh repeats them).
#define CATCH_CONFIG_RUNNER
#include <fmt/format.h>
#include "catch.hpp"

#include <string_view>

#include "core/device/allocator.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#endif
#ifdef DISTLAB_HAVE_NCCL
#include "core/transport/nccl_calls.hpp"
#endif

namespace {

void print_environment(const distlab::CudaProbe& cuda) {
  using distlab::cuda_version_text;
  fmt::print("cuda driver {}, runtime {}\n",
             cuda.driver_version ? cuda_version_text(cuda.driver_version) : "none",
             cuda_version_text(cuda.runtime_version));
#ifdef DISTLAB_HAVE_CUDA
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  fmt::print("cublas {}.{}.{}\n", major, minor, patch);
#endif
#ifdef DISTLAB_HAVE_NCCL
  fmt::print("nccl {} (built against {})\n",
             distlab::nccl_version_text(distlab::nccl_runtime_version()),
             distlab::nccl_version_text(distlab::nccl_build_version()));
#else
  fmt::print("nccl: not in this build\n");
#endif
#ifdef DISTLAB_HAVE_CUDA
  for (int d = 0; d < cuda.devices; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    fmt::print("gpu {}: {}, sm_{}{}, {:.1f} GiB\n", d, p.name, p.major, p.minor,
               static_cast<double>(p.totalGlobalMem) / (1 << 30));
  }
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const bool probe = argc == 2 && std::string_view(argv[1]) == "--probe";
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    listing = listing || std::string_view(argv[i]).rfind("--list", 0) == 0;
  if (listing) return Catch::Session().run(argc, argv);
  if (!distlab::built_with_cuda()) {
    fmt::print("SKIPPED: this build has no CUDA; the GPU tests need one\n");
    return 77;
  }
  const distlab::CudaProbe& cuda = distlab::cuda_probe();
  if (!cuda.failure.empty()) {
    fmt::print("CUDA does not start here: {}\n", cuda.failure);
    print_environment(cuda);
    return 3;
  }
  if (cuda.devices == 0) {
    fmt::print("SKIPPED: no CUDA device answers on this machine; the GPU tests need one\n");
    if (probe) print_environment(cuda);
    return 77;
  }
  if (probe) {
    print_environment(cuda);
    return 0;
  }
  return Catch::Session().run(argc, argv);
}
