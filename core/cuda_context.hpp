// cuda_context.hpp — the CUDA side of one rank: its GPU, its stream, its cuBLAS handle.
//
// Every rank (a thread of this process, or a process under mpirun) binds once, before its body
// runs: rank r uses GPU r % count, so several in-process ranks can share one GPU (each with
// its own stream) and a multi-GPU node gives each rank its own. Ops and transports enqueue on
// the rank's stream; nothing uses the legacy default stream.
//
// The types are opaque here (void*), so C++ files that never touch CUDA need no CUDA headers;
// CUDA code includes the CUDA headers and casts (checks: DL_CUDA_CHECK in check.hpp). Every function is a no-op or an
// error in a build without CUDA (DISTLAB_HAVE_CUDA undefined).
#pragma once

namespace distlab {

struct CudaRank {
  int device = -1;          // the GPU this rank uses, -1 when not bound
  void* stream = nullptr;   // cudaStream_t, non-blocking
  void* cublas = nullptr;   // cublasHandle_t on `stream`, created on first use (cuda_cublas())
};

// Binds the calling thread to rank `rank`'s GPU and creates its stream; `cuda_unbind_rank`
// synchronizes and destroys them. The runtime calls both around each rank's body.
void cuda_bind_rank(int rank);
void cuda_unbind_rank() noexcept;

// The calling thread's binding (device -1 when unbound).
CudaRank& cuda_rank();
// The stream ops and copies use: the rank's stream (cudaStream_t as void*).
void* cuda_stream();
// Waits for everything the rank enqueued.
void cuda_sync();

}  // namespace distlab
