// How a machine's CUDA and NCCL are read without running anything on a GPU (allocator.hpp,
// check.hpp, nccl_calls.hpp): "no device" apart from CUDA that fails to start, sticky errors
// named as such, cuBLAS opened at run time, NCCL's versions, and NCCL's newer calls looked up
// at run time. These run on
// the CPU: CUDA's runtime answers them without a driver. In a build without CUDA they are
// skipped with a line saying so.
#include "catch.hpp"

#include <string>

#include "core/base/check.hpp"
#include "core/device/allocator.hpp"
#include "core/device/cuda_check.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/device/cublas_library.hpp"
#endif
#ifdef DISTLAB_HAVE_NCCL
#include "core/transport/nccl_calls.hpp"
#endif

using namespace distlab;
using Catch::Contains;

#ifdef DISTLAB_HAVE_CUDA

TEST_CASE("cuda probe: no driver or no device is 'no device', any other error is a setup failure",
          "[device]") {
  // No libcuda at all (a machine without GPU): the runtime answers insufficient driver, and
  // the driver's version is 0.
  const CudaProbe none = classify_cuda(cudaErrorInsufficientDriver, 0, 0, 13000);
  CHECK(none.no_device());
  CHECK(none.failure.empty());
  CHECK(none.devices == 0);
  const CudaProbe no_device = classify_cuda(cudaErrorNoDevice, 0, 13000, 13000);
  CHECK(no_device.no_device());
  CHECK(no_device.failure.empty());
  // A driver that is there but older than the runtime: a failure, in CUDA's words, with both.
  const CudaProbe old = classify_cuda(cudaErrorInsufficientDriver, 0, 12040, 13000);
  CHECK_FALSE(old.no_device());
  CHECK(old.devices == 0);
  CHECK_THAT(old.failure, Contains("cudaErrorInsufficientDriver") && Contains("driver 12.4") &&
                              Contains("runtime 13.0"));
  const CudaProbe broken = classify_cuda(cudaErrorInitializationError, 0, 13000, 13000);
  CHECK_FALSE(broken.no_device());
  CHECK_THAT(broken.failure, Contains("cudaErrorInitializationError"));
  const CudaProbe one = classify_cuda(cudaSuccess, 1, 13000, 13000);
  CHECK(one.devices == 1);
  CHECK_FALSE(one.no_device());
  CHECK(one.failure.empty());
}

TEST_CASE("cuda probe: this machine's answer is one of the three, and --device follows it",
          "[device]") {
  const CudaProbe& p = cuda_probe();
  if (!p.failure.empty()) {
    CHECK(p.devices == 0);
    CHECK_THROWS_WITH(resolve_device("cuda"),
                      Contains("CUDA does not start") && Contains(p.failure));
  } else if (p.devices == 0) {
    CHECK_THROWS_WITH(resolve_device("cuda"), Contains("no CUDA device answers"));
    CHECK(resolve_device("auto") == Device::cpu);
  } else {
    CHECK(resolve_device("auto") == Device::cuda);
  }
}

TEST_CASE("cuda errors: a sticky error says it poisons the process, others do not", "[device]") {
  CHECK(cuda_error_is_sticky(cudaErrorIllegalAddress));
  CHECK(cuda_error_is_sticky(cudaErrorLaunchFailure));
  CHECK_FALSE(cuda_error_is_sticky(cudaErrorInvalidValue));
  CHECK_FALSE(cuda_error_is_sticky(cudaErrorMemoryAllocation));
  CHECK_THAT(cuda_error_text(cudaErrorIllegalAddress),
             Contains("cudaErrorIllegalAddress") &&
                 Contains("poisons the CUDA context of the whole process"));
  CHECK_THAT(cuda_error_text(cudaErrorInvalidValue),
             Contains("cudaErrorInvalidValue") && !Contains("poisons"));
}

TEST_CASE("cublas: opened at run time, every call distlab makes found, once per process",
          "[device]") {
  // dlopen needs no GPU, only the library: it is where the CUDA toolkit is.
  const CublasLibrary& lib = cublas();
  CHECK(lib.create != nullptr);
  CHECK(lib.destroy != nullptr);
  CHECK(lib.set_stream != nullptr);
  CHECK(lib.set_math_mode != nullptr);
  CHECK(lib.gemm_ex != nullptr);
  REQUIRE(lib.status_string != nullptr);
  CHECK(&cublas() == &lib);
  // The library's own words for a status: what DL_CUBLAS_CHECK puts in its Error.
  const std::string text = lib.status_string(CUBLAS_STATUS_NOT_INITIALIZED);
  INFO(text);
  CHECK_THAT(text, Contains("not initialized"));
}

#else

TEST_CASE("cuda probe: skipped, this build has no CUDA", "[device]") {
  WARN("SKIPPED: this build has no CUDA");
  CHECK(cuda_probe().no_device());
}

#endif

#ifdef DISTLAB_HAVE_NCCL

TEST_CASE("nccl: versions are read at run time and spelt as NCCL does", "[device]") {
  CHECK(nccl_version_text(22803) == "2.28.3");
  CHECK(nccl_version_text(21903) == "2.19.3");
  CHECK(nccl_version_text(2708) == "2.7.8");  // before 2.9: X*1000 + Y*100 + Z
  CHECK(nccl_runtime_version() >= 20900);     // the library linked here answers without a GPU
  CHECK(nccl_build_version() >= 20900);
}

TEST_CASE("nccl: a call newer than the loaded library is looked up, never bound", "[device]") {
  const int have = nccl_runtime_version();
  // The library loaded here has ncclAllReduce since long; a version beyond it yields nothing.
  CHECK(nccl_function("ncclAllReduce", 20900) != nullptr);
  CHECK(nccl_function("ncclAllReduce", have + 1) == nullptr);
  CHECK(nccl_function("ncclNoSuchCall", 0) == nullptr);
  if (have >= 22800) CHECK(nccl_function("ncclScatter", 22800) != nullptr);
}

#endif
