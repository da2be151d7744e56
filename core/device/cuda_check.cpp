#include "core/device/cuda_check.hpp"

#include <fmt/format.h>

#ifdef DISTLAB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace distlab {

bool cuda_error_is_sticky(int code) {
#ifdef DISTLAB_HAVE_CUDA
  switch (static_cast<cudaError_t>(code)) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
#else
  (void)code;
  return false;
#endif
}

std::string cuda_error_text(int code) {
#ifdef DISTLAB_HAVE_CUDA
  const auto rc = static_cast<cudaError_t>(code);
  std::string text = fmt::format("{} ({})", cudaGetErrorString(rc), cudaGetErrorName(rc));
  if (cuda_error_is_sticky(code))
    text +=
        "; this error poisons the CUDA context of the whole process: every in-process rank on this "
        "GPU fails "
        "after it, and so does every later CUDA call in this process (run again in a fresh "
        "process)";
  return text;
#else
  return fmt::format("CUDA error {} in a build without CUDA", code);
#endif
}

}  // namespace distlab
