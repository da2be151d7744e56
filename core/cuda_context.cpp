// cuda_context.cpp — binding a rank to its GPU and stream (cuda_context.hpp).
#include "cuda_context.hpp"

#include "check.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

namespace distlab {

namespace {
thread_local CudaRank t_rank;
}  // namespace

CudaRank& cuda_rank() { return t_rank; }

#ifdef DISTLAB_HAVE_CUDA

void cuda_bind_rank(int rank) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    DL_FAIL("rank {}: no CUDA device answers", rank);
  }
  t_rank.device = rank % count;
  DL_CUDA_CHECK(cudaSetDevice(t_rank.device));
  cudaStream_t s = nullptr;
  DL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  t_rank.stream = s;
}

void cuda_unbind_rank() noexcept {
  if (t_rank.device < 0) return;
  cudaSetDevice(t_rank.device);
  if (t_rank.stream) cudaStreamSynchronize(static_cast<cudaStream_t>(t_rank.stream));
  if (t_rank.cublas) cublasDestroy(static_cast<cublasHandle_t>(t_rank.cublas));
  if (t_rank.stream) cudaStreamDestroy(static_cast<cudaStream_t>(t_rank.stream));
  t_rank = CudaRank{};
}

void* cuda_stream() {
  DL_CHECK(t_rank.device >= 0, "CUDA work on a thread that is not bound to a rank's GPU");
  return t_rank.stream;
}

void cuda_sync() {
  if (t_rank.stream) DL_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(t_rank.stream)));
}

#else

void cuda_bind_rank(int rank) { DL_FAIL("rank {}: this build has no CUDA support", rank); }
void cuda_unbind_rank() noexcept {}
void* cuda_stream() { DL_FAIL("CUDA stream requested in a build without CUDA"); }
void cuda_sync() {}

#endif

}  // namespace distlab
