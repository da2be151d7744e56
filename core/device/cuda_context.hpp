// cuda_context.hpp — the CUDA side of one rank: its GPU, its streams, its cuBLAS handle.
//
// Every rank (a thread of this process, or a process under mpirun) binds once, before its body
// runs: rank r uses GPU r % count, so several in-process ranks can share one GPU (each with
// its own stream) and a multi-GPU node gives each rank its own. Ops and transports enqueue on
// the rank's stream; nothing uses the legacy default stream.
//
// Binding also fixes the rank's clock epoch for the trace's gpu lane (device_timing.hpp): an
// event recorded on the idle stream whose host time is measured once, here.
//
// The types are opaque here (void*), so C++ files that never touch CUDA need no CUDA headers;
// CUDA code includes the CUDA headers and casts (checks: DL_CUDA_CHECK in cuda_check.hpp). Every
// function is a no-op or an error in a build without CUDA (DISTLAB_HAVE_CUDA undefined). This
// header stays C++17: the .cu files include it.
#pragma once

#include <functional>
#include <map>

namespace distlab {

struct CudaRank {
  int device = -1;         // the GPU this rank uses, -1 when not bound
  void* stream = nullptr;  // cudaStream_t, non-blocking
  void* cublas = nullptr;  // cublasHandle_t on `stream`, made on first use (core/ops/cuda/gemm.cu)
  // In-process messages into this rank's memory are copied on this stream (transport_threads):
  // apart from `stream`, so a copy never queues behind the rank's own kernels, and the other
  // ranks' threads never enqueue on the stream the rank's ops use.
  void* copy_stream = nullptr;
  // The trace's clock epoch (device_timing.hpp): a timing event and its host time in us.
  void* epoch_event = nullptr;
  double epoch_us = 0;
  // ncclComm_t for the library collectives on in-process ranks, one per context (a split
  // group, Comm::split; 0: every rank), created on first use (baseline_gpu.cpp); finalized and
  // destroyed at unbind, on this thread.
  std::map<int, void*> nccl;
  // Whether finalizing an NCCL communicator may stop waiting for the other ranks (set by the
  // runtime for in-process ranks: the run failed, or every other rank has finished). Unset:
  // it waits up to kNcclFinalizeCapS.
  std::function<bool()> nccl_give_up;
};

// How long finalizing an NCCL communicator waits for the other ranks at most. Finalize ends
// when every rank has finalized, and ranks may end their bodies far apart (one verifies while
// the others are done), so this is no allowance for a healthy run: a failed run ends sooner
// through nccl_give_up, and under mpirun through MPI_Abort.
constexpr double kNcclFinalizeCapS = 600;

// Binds the calling thread to rank `rank`'s GPU, creates its streams and measures its clock
// epoch; `cuda_unbind_rank` synchronizes and destroys them. The runtime calls both around
// each rank's body.
void cuda_bind_rank(int rank);
void cuda_unbind_rank() noexcept;

// In-process ranks on several GPUs: lets this rank's GPU read and write the others' memory
// directly (cudaDeviceEnablePeerAccess where the hardware allows it; already enabled is fine).
// Copies between GPUs work either way: without peer access the driver stages them.
void cuda_enable_peer_access();

// Ends an NCCL communicator (ncclComm_t) of the calling rank: finalized and destroyed when the
// rank's stream drains, aborted when it does not within seconds, when the communicator failed,
// or when finalizing gives up (nccl_give_up, kNcclFinalizeCapS): an NCCL kernel waiting for a
// rank that has left would otherwise hold the stream, and ncclCommDestroy, for ever.
void cuda_release_nccl(void* nccl_comm) noexcept;

// The calling thread's binding (device -1 when unbound).
CudaRank& cuda_rank();
// The stream ops and copies use: the rank's stream (cudaStream_t as void*).
void* cuda_stream();
// Waits for everything the rank enqueued.
void cuda_sync();
// Enqueues a kernel on the rank's stream that spins for about `us` microseconds (core/ops/cuda/
// delay.cu): the GPU tests put it before posts to widen race windows.
void cuda_delay(double us);

// Makes `device` current for a scope and restores the previous one: a rank's thread that
// enqueues work for another rank's GPU (an in-process copy into its memory).
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device);
  ~CudaDeviceScope();
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace distlab
