// peer_copy.cpp — device copies between in-process ranks (peer_copy.hpp).
#include "core/transport/peer_copy.hpp"

#include "core/base/check.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/cuda_context.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace distlab {

#ifdef DISTLAB_HAVE_CUDA

PostMark::~PostMark() {
  if (!ready) return;
  int previous = -1;  // events are destroyed on their own device
  cudaGetDevice(&previous);
  if (previous != device) cudaSetDevice(device);
  cudaEventDestroy(static_cast<cudaEvent_t>(ready));
  if (previous != device) cudaSetDevice(previous);
  cudaGetLastError();
}

std::shared_ptr<PostMark> mark_post(const MemRef& mem) {
  const CudaRank& rank = cuda_rank();
  if (rank.device < 0) return nullptr;
  std::shared_ptr<PostMark> mark(new PostMark());
  mark->device = rank.device;
  mark->copy_stream = rank.copy_stream;
  if (mem.device == Device::cuda && mem.bytes > 0) {
    cudaEvent_t e = nullptr;
    // Ordering only, never timed: cudaEventDisableTiming makes recording it cheaper.
    DL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    mark->ready = e;
    DL_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(rank.stream)));
  }
  return mark;
}

std::shared_ptr<DeviceWork> start_peer_copy(const MemRef& send, const PostMark* send_mark,
                                            const MemRef& recv, const PostMark& recv_mark,
                                            const std::string& name) {
  // The receiver's GPU is current while its events are created and recorded on its stream.
  CudaDeviceScope on_receiver(recv_mark.device);
  const auto stream = static_cast<cudaStream_t>(recv_mark.copy_stream);
  auto work = std::make_shared<DeviceWork>(name);
  if (send_mark && send_mark->ready)
    DL_CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(send_mark->ready), 0));
  if (recv_mark.ready)
    DL_CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(recv_mark.ready), 0));
  work->record_start(stream);
  if (send.bytes == 0) {
    // An empty message (an empty chunk of an uneven split): no copy, whose pointers may be null;
    // the events still order and time it like any other.
  } else if (send.device == Device::cuda && recv.device == Device::cuda && send_mark) {
    DL_CUDA_CHECK(cudaMemcpyPeerAsync(recv.ptr, recv_mark.device, send.ptr, send_mark->device,
                                      send.bytes, stream));
  } else {
    DL_CUDA_CHECK(cudaMemcpyAsync(recv.ptr, send.ptr, send.bytes, cudaMemcpyDefault, stream));
  }
  work->record_stop(stream);
  return work;
}

#else

PostMark::~PostMark() = default;
std::shared_ptr<PostMark> mark_post(const MemRef&) {
  return nullptr;
}
std::shared_ptr<DeviceWork> start_peer_copy(const MemRef&, const PostMark*, const MemRef&,
                                            const PostMark&, const std::string&) {
  DL_FAIL("device copy requested in a build without CUDA");
}

#endif

}  // namespace distlab
