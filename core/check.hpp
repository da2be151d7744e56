// check.hpp — one place for error checks.
//
// DL_CHECK(cond, fmt, args...) throws distlab::Error with file:line and a formatted message.
// DL_MPI_CHECK(call) checks an MPI call and names the call text and MPI's error string.
// DL_CUDA_CHECK / DL_CUBLAS_CHECK / DL_NCCL_CHECK(call), same shape, for CUDA code.
// The runtime catches Error on any rank and ends every rank with that rank's message.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace distlab {

// A failure the user or the program can act on; the message is one sentence.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input: reported as one sentence, exit status 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void fail_at(const char* file, int line, const std::string& message);

// MPI's text for an error code (defined with the MPI transport; use only where mpi.h is).
std::string mpi_error_string(int code);

// CUDA's text for a cudaError_t: its name and string. A sticky error (an illegal address, a
// failed launch, a device-side assert) also says what it does: it poisons the CUDA context of
// the whole process, so every in-process rank on that GPU fails after it, and so does anything
// later in the process (the GPU tests run their groups as separate processes for this reason).
std::string cuda_error_text(int code);
// True for the errors that leave the process's CUDA context unusable.
bool cuda_error_is_sticky(int code);

}  // namespace distlab

#define DL_CHECK(cond, ...)                                                      \
  do {                                                                           \
    if (!(cond)) ::distlab::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

// Checks an MPI call: names the call and MPI's error string.
#define DL_MPI_CHECK(call)                                                                  \
  do {                                                                                      \
    const int dl_mpi_rc = (call);                                                           \
    DL_CHECK(dl_mpi_rc == MPI_SUCCESS, "{} failed: {}", #call, ::distlab::mpi_error_string(dl_mpi_rc)); \
  } while (0)

// CUDA, cuBLAS and NCCL calls: the macros expand only where those headers are included (CUDA
// code), so this header needs none of them. A kernel launch is followed by
// DL_CUDA_LAUNCH_CHECK(): the launch's error, without synchronizing the device.
#define DL_CUDA_CHECK(call)                                                                     \
  do {                                                                                          \
    const cudaError_t dl_cuda_rc = (call);                                                      \
    DL_CHECK(dl_cuda_rc == cudaSuccess, "{} failed: {}", #call, ::distlab::cuda_error_text(dl_cuda_rc)); \
  } while (0)
#define DL_CUDA_LAUNCH_CHECK() DL_CUDA_CHECK(cudaGetLastError())
#define DL_CUBLAS_CHECK(call)                                                                       \
  do {                                                                                              \
    const cublasStatus_t dl_cublas_rc = (call);                                                     \
    DL_CHECK(dl_cublas_rc == CUBLAS_STATUS_SUCCESS, "{} failed: {}", #call, cublasGetStatusString(dl_cublas_rc)); \
  } while (0)
#define DL_NCCL_CHECK(call)                                                                     \
  do {                                                                                          \
    const ncclResult_t dl_nccl_rc = (call);                                                     \
    DL_CHECK(dl_nccl_rc == ncclSuccess, "{} failed: {}", #call, ncclGetErrorString(dl_nccl_rc)); \
  } while (0)

#define DL_FAIL(...) ::distlab::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
