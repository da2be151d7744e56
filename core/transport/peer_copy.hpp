// peer_copy.hpp — the GPU half of the in-process transport (threads.cpp).
//
// In-process ranks send device buffers with one cudaMemcpyPeerAsync straight from the
// sender's buffer into the receiver's, on either GPU or on one shared GPU. Three orderings
// make that copy safe, each with an event:
//
//   1. the sender's data is produced on the sender's stream: isend records `ready` there and
//      the copy waits for it (cudaStreamWaitEvent), so kernels enqueued before isend are in;
//   2. the receive buffer may still be read or written by the receiver's earlier kernels
//      (last step's add reads the buffer this step receives into): irecv records `ready` on
//      the receiver's stream and the copy waits for that too;
//   3. the copy's own end event (a DeviceWork: it also times the copy for the trace) is what
//      both waits poll: the receiver's wait returns when the data is in place, the sender's
//      when its buffer may be overwritten. The host polls (cudaEventQuery), so the deadlock
//      timeout keeps working, and after wait() the data is there for the host and for every
//      stream, as on the CPU; the price is a host round trip per message.
//
// The copy runs on the receiver's copy stream (cuda_context.hpp), enqueued by whichever rank's
// thread matched second: not on the receiver's compute stream, which would put the copy behind
// kernels it does not depend on, and not on the matching rank's own streams, which would make
// that rank's later work wait for another rank's. Every wait points back at work enqueued
// before it, so no cycle of waits can form on the GPUs.
//
// Host memory on one side works too (cudaMemcpyAsync, cudaMemcpyDefault): a host buffer needs
// no ordering event, and the copy is still done when wait returns.
#pragma once

#include <memory>
#include <string>

#include "core/device/device_timing.hpp"
#include "core/transport/transport.hpp"

namespace distlab {

// Where a rank stood when it posted a message: its GPU and copy stream, and for device memory
// an event on its stream. Made on the posting rank's thread; destroyed on any.
class PostMark {
 public:
  ~PostMark();
  PostMark(const PostMark&) = delete;
  PostMark& operator=(const PostMark&) = delete;

  int device = -1;
  void* copy_stream = nullptr;  // cudaStream_t: messages into this rank's memory are copied here
  void* ready = nullptr;  // cudaEvent_t on the rank's stream at post time; null for host memory

  friend std::shared_ptr<PostMark> mark_post(const MemRef& mem);

 private:
  PostMark() = default;
};

// Null on a thread that is not bound to a GPU (a CPU run): the transport then copies on the host.
std::shared_ptr<PostMark> mark_post(const MemRef& mem);

// Enqueues the copy send -> recv on the receiver's copy stream, after both marks; returns its
// DeviceWork (events on the receiver's GPU, named `name`). Callable from any rank's thread.
std::shared_ptr<DeviceWork> start_peer_copy(const MemRef& send, const PostMark* send_mark,
                                            const MemRef& recv, const PostMark& recv_mark,
                                            const std::string& name);

}  // namespace distlab
