// cuda_context.cpp — binding a rank to its GPU and streams (cuda_context.hpp).
#include "core/device/cuda_context.hpp"

#include <chrono>
#include <exception>
#include <thread>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/device/allocator.hpp"
#include "core/device/clock_sync.hpp"
#include "core/device/cuda_check.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/device/cublas_library.hpp"
#endif
#ifdef DISTLAB_HAVE_NCCL
#include <nccl.h>
#endif

namespace distlab {

namespace {
thread_local CudaRank t_rank;
}  // namespace

CudaRank& cuda_rank() {
  return t_rank;
}

#ifdef DISTLAB_HAVE_CUDA

namespace {

constexpr int kEpochRounds = 5;

// The rank's clock epoch: a few rounds of (host clock, record an event on the idle stream,
// wait for it, host clock); the event of the tightest round is kept (clock_sync.hpp).
void measure_epoch(cudaStream_t stream) {
  std::vector<cudaEvent_t> events(kEpochRounds, nullptr);
  std::vector<ClockRound> rounds(kEpochRounds);
  std::size_t best = events.size();  // none kept yet
  auto destroy_all_but = [&](std::size_t keep) {
    for (std::size_t i = 0; i < events.size(); ++i)
      if (i != keep && events[i]) cudaEventDestroy(events[i]);
  };
  try {
    for (std::size_t i = 0; i < events.size(); ++i) {
      DL_CUDA_CHECK(cudaEventCreate(&events[i]));
      rounds[i].before_us = now_us();
      DL_CUDA_CHECK(cudaEventRecord(events[i], stream));
      DL_CUDA_CHECK(cudaEventSynchronize(events[i]));
      rounds[i].after_us = now_us();
    }
    best = tightest_round(rounds);
  } catch (...) {
    destroy_all_but(events.size());
    throw;
  }
  destroy_all_but(best);
  t_rank.epoch_event = events[best];
  t_rank.epoch_us = round_midpoint(rounds[best]);
}

}  // namespace

void cuda_bind_rank(int rank) {
  DL_CHECK(t_rank.device < 0, "rank {}: this thread is bound to GPU {} already", rank,
           t_rank.device);
  const CudaProbe& cuda = cuda_probe();
  if (!cuda.failure.empty()) DL_FAIL("rank {}: CUDA does not start: {}", rank, cuda.failure);
  if (cuda.devices == 0) DL_FAIL("rank {}: no CUDA device answers", rank);
  t_rank.device = rank % cuda.devices;
  // A bind that fails half way releases what it made: the caller's unbind never runs then.
  try {
    DL_CUDA_CHECK(cudaSetDevice(t_rank.device));
    cudaStream_t s = nullptr, copies = nullptr;
    DL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    t_rank.stream = s;
    DL_CUDA_CHECK(cudaStreamCreateWithFlags(&copies, cudaStreamNonBlocking));
    t_rank.copy_stream = copies;
    measure_epoch(s);
  } catch (...) {
    cuda_unbind_rank();
    throw;
  }
}

void cuda_unbind_rank() noexcept {
  if (t_rank.device < 0) return;
  cudaSetDevice(t_rank.device);
  auto stream = static_cast<cudaStream_t>(t_rank.stream);
  for (auto& [context, nccl] : t_rank.nccl)
    if (nccl) cuda_release_nccl(nccl);
  t_rank.nccl.clear();
  if (stream) cudaStreamSynchronize(stream);
  if (t_rank.copy_stream) cudaStreamSynchronize(static_cast<cudaStream_t>(t_rank.copy_stream));
  release_device_blocks();  // nothing of this rank's runs any more
  if (t_rank.cublas) cublas().destroy(static_cast<cublasHandle_t>(t_rank.cublas));
  if (t_rank.epoch_event) cudaEventDestroy(static_cast<cudaEvent_t>(t_rank.epoch_event));
  if (t_rank.copy_stream) cudaStreamDestroy(static_cast<cudaStream_t>(t_rank.copy_stream));
  if (stream) cudaStreamDestroy(stream);
  cudaGetLastError();  // nothing left over for the next binding of this thread to trip on
  t_rank = CudaRank{};
}

void cuda_enable_peer_access() {
  const int me = t_rank.device;
  DL_CHECK(me >= 0, "peer access asked for on a thread that is not bound to a GPU");
  int count = 0;
  DL_CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int peer = 0; peer < count; ++peer) {
    if (peer == me) continue;
    int can = 0;
    DL_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, me, peer));
    if (!can) continue;
    // Several ranks on one GPU ask for the same pair: "already enabled" is success. Past the
    // hardware's peer limit copies still work, staged by the driver. Either error is cleared
    // so that the next launch check does not report it.
    const cudaError_t rc = cudaDeviceEnablePeerAccess(peer, 0);
    if (rc == cudaErrorPeerAccessAlreadyEnabled || rc == cudaErrorTooManyPeers)
      cudaGetLastError();
    else
      DL_CUDA_CHECK(rc);
  }
}

// A stream that does not drain within seconds holds an NCCL kernel that waits for a rank that
// has left (a failed run): that communicator is aborted, which ends its kernels.
void cuda_release_nccl(void* nccl_comm) noexcept {
#ifdef DISTLAB_HAVE_NCCL
  auto comm = static_cast<ncclComm_t>(nccl_comm);
  if (!comm) return;
  // Unbinding while an exception leaves the rank's body: the rank failed, and the others will
  // not finalize with it. Abort at once.
  const bool failing = std::uncaught_exceptions() > 0;
  auto give_up = [] {
    try {
      return t_rank.nccl_give_up && t_rank.nccl_give_up();
    } catch (...) {
      return true;
    }
  };
  auto stream = static_cast<cudaStream_t>(t_rank.stream);
  const double drain_until = now_us() + 10e6;
  bool idle = !stream;
  while (!failing && !idle && !(idle = cudaStreamQuery(stream) != cudaErrorNotReady) &&
         now_us() < drain_until && !give_up())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ncclResult_t state = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
  bool finalized = false;
  if (!failing && idle && state == ncclSuccess) {
    // Non-blocking communicator: finalize answers ncclInProgress and reports through the
    // async error when it is done, once every rank has finalized. The others may still be
    // busy, so it waits as long as the run is healthy (kNcclFinalizeCapS at most); once the run
    // failed, or the others finished without finalizing, a grace of seconds is enough.
    const double cap_until = now_us() + kNcclFinalizeCapS * 1e6;
    constexpr double kGraceUs = 10e6;
    double grace_until = 0;
    state = ncclCommFinalize(comm);
    while (state == ncclInProgress && now_us() < cap_until) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
      if (grace_until == 0 && give_up()) grace_until = now_us() + kGraceUs;
      if (grace_until != 0 && now_us() > grace_until) break;
    }
    finalized = state == ncclSuccess;
  }
  // Destroy only a finalized communicator: on one whose kernels still wait for a rank that has
  // left, ncclCommDestroy would finalize it itself and block for ever. Anything else is aborted.
  if (finalized)
    ncclCommDestroy(comm);
  else
    ncclCommAbort(comm);
  cudaGetLastError();
#else
  (void)nccl_comm;
#endif
}

void* cuda_stream() {
  DL_CHECK(t_rank.device >= 0, "CUDA work on a thread that is not bound to a rank's GPU");
  return t_rank.stream;
}

void cuda_sync() {
  if (t_rank.stream) DL_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(t_rank.stream)));
}

CudaDeviceScope::CudaDeviceScope(int device) {
  DL_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ == device)
    previous_ = -1;  // nothing to restore
  else
    DL_CUDA_CHECK(cudaSetDevice(device));
}

CudaDeviceScope::~CudaDeviceScope() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

#else

void cuda_bind_rank(int rank) {
  DL_FAIL("rank {}: this build has no CUDA support", rank);
}
void cuda_unbind_rank() noexcept {}
void cuda_enable_peer_access() {
  DL_FAIL("peer access asked for in a build without CUDA");
}
void cuda_release_nccl(void*) noexcept {}
void* cuda_stream() {
  DL_FAIL("CUDA stream requested in a build without CUDA");
}
void cuda_sync() {}
void cuda_delay(double) {
  DL_FAIL("a GPU delay asked for in a build without CUDA");
}
CudaDeviceScope::CudaDeviceScope(int) {}
CudaDeviceScope::~CudaDeviceScope() = default;

#endif

}  // namespace distlab
