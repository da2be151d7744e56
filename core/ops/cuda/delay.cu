// delay.cu — a kernel that keeps the rank's stream busy for a while (cuda_context.hpp).
//
// Tests put it before a post to widen the window in which a missing dependency shows: work
// still queued on the stream when the host has moved on.
#include "core/device/cuda_check.hpp"
#include "core/ops/cuda/common.cuh"

namespace distlab {

namespace {

__global__ void spin_for(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

void cuda_delay(double us) {
  if (us <= 0) return;
  int khz = 0;  // the SM clock; clock64 counts its cycles
  DL_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, cuda_rank().device));
  const long long cycles = static_cast<long long>(us * 1e-3 * (khz > 0 ? khz : 1000000));
  spin_for<<<1, 1, 0, cuda::rank_stream()>>>(cycles);
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace distlab
