// cuda_check.hpp — CUDA's errors in words, and the checks around CUDA, cuBLAS and NCCL calls.
#pragma once

#include <string>

#include "core/base/check.hpp"

namespace distlab {

// CUDA's text for a cudaError_t: its name and string. A sticky error (an illegal address, a
// failed launch, a device-side assert) also says what it does: it poisons the CUDA context of
// the whole process, so every in-process rank on that GPU fails after it, and so does anything
// later in the process (the GPU tests run their groups as separate processes for this reason).
std::string cuda_error_text(int code);
// True for the errors that leave the process's CUDA context unusable.
bool cuda_error_is_sticky(int code);

}  // namespace distlab

// CUDA, cuBLAS and NCCL calls: the macros expand only where those headers are included (CUDA
// code; cuBLAS's through cublas_library.hpp), so this header needs none of them. A kernel launch is
// followed by DL_CUDA_LAUNCH_CHECK(): the launch's error, without synchronizing the device.
#define DL_CUDA_CHECK(call)                                     \
  do {                                                          \
    const cudaError_t dl_cuda_rc = (call);                      \
    DL_CHECK(dl_cuda_rc == cudaSuccess, "{} failed: {}", #call, \
             ::distlab::cuda_error_text(dl_cuda_rc));           \
  } while (0)
#define DL_CUDA_LAUNCH_CHECK() DL_CUDA_CHECK(cudaGetLastError())
#define DL_CUBLAS_CHECK(call)                                               \
  do {                                                                      \
    const cublasStatus_t dl_cublas_rc = (call);                             \
    DL_CHECK(dl_cublas_rc == CUBLAS_STATUS_SUCCESS, "{} failed: {}", #call, \
             ::distlab::cublas().status_string(dl_cublas_rc));              \
  } while (0)
#define DL_NCCL_CHECK(call)                                                                      \
  do {                                                                                           \
    const ncclResult_t dl_nccl_rc = (call);                                                      \
    DL_CHECK(dl_nccl_rc == ncclSuccess, "{} failed: {}", #call, ncclGetErrorString(dl_nccl_rc)); \
  } while (0)
