// staged.cpp — GPU buffers through pinned host memory and MPI (staged.hpp).
#include "core/transport/staged.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/cuda_context.hpp"

namespace distlab {

struct StagedTransport::Req : RequestState {
  Request inner;          // the MPI message, of host memory
  void* block = nullptr;  // the pinned staging buffer of a GPU message (null for host memory)
};

namespace {
// Pinned bytes kept for reuse per rank: a sweep over many message sizes (distlab-bench) would
// otherwise keep a block of every size it ever sent, pinned, for the rest of the run.
constexpr std::size_t kSpareLimit = std::size_t{1} << 30;
}  // namespace

StagedTransport::~StagedTransport() {
  for (auto& [bytes, block] : spare_) cudaFreeHost(block);
}

void* StagedTransport::take(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (auto it = spare_.find(bytes); it != spare_.end()) {
    void* block = it->second;
    spare_.erase(it);
    spare_bytes_ -= bytes;
    return block;
  }
  void* block = nullptr;
  DL_CUDA_CHECK(cudaMallocHost(&block, bytes));
  return block;
}

void StagedTransport::give(void* block, std::size_t bytes) {
  if (!block) return;
  if (spare_bytes_ + bytes > kSpareLimit) {
    DL_CUDA_CHECK(cudaFreeHost(block));
    return;
  }
  spare_.emplace(bytes, block);
  spare_bytes_ += bytes;
}

std::shared_ptr<StagedTransport::Req> StagedTransport::make_request(bool is_send, const MemRef& mem,
                                                                    int peer, int tag,
                                                                    int context) {
  return new_request<Req>(is_send, mem, peer, tag, context);
}

Request StagedTransport::isend(const MemRef& mem, int dst, int tag, int context) {
  auto r = make_request(true, mem, dst, tag, context);
  MemRef host = mem;
  if (mem.device == Device::cuda && mem.bytes > 0) {
    // Copy out after the kernels that produced the data (same stream), and wait: MPI may read
    // the pinned buffer as soon as it has the send.
    const auto stream = static_cast<cudaStream_t>(cuda_stream());
    r->block = take(mem.bytes);
    auto out = std::make_shared<DeviceWork>(fmt::format("stage out to r{}", dst));
    out->record_start(stream);
    DL_CUDA_CHECK(cudaMemcpyAsync(r->block, mem.ptr, mem.bytes, cudaMemcpyDeviceToHost, stream));
    out->record_stop(stream);
    if (!out->done()) mpi_.wait_until([&] { return out->done(); }, *r);
    r->device_work = std::move(out);
    host = {r->block, mem.bytes, mem.dtype, Device::cpu};
  }
  r->inner = mpi_.isend(host, dst, tag, context);
  return r;
}

Request StagedTransport::irecv(const MemRef& mem, int src, int tag, int context) {
  auto r = make_request(false, mem, src, tag, context);
  MemRef host = mem;
  if (mem.device == Device::cuda && mem.bytes > 0) {
    r->block = take(mem.bytes);
    host = {r->block, mem.bytes, mem.dtype, Device::cpu};
  }
  r->inner = mpi_.irecv(host, src, tag, context);
  return r;
}

void StagedTransport::wait(RequestState& request) {
  if (request.done.load(std::memory_order_acquire)) return;
  auto& r = static_cast<Req&>(request);
  mpi_.wait(*r.inner);  // polled, sizes checked, deadlocks reported with this message's numbers
  if (r.block && !r.is_send) {
    // Copy up on the rank's stream: after the kernels that still use the buffer, before the
    // ones enqueued after this wait. Waited for, so the host may read it too.
    const auto stream = static_cast<cudaStream_t>(cuda_stream());
    auto in = std::make_shared<DeviceWork>(fmt::format("stage in from r{}", r.peer));
    in->record_start(stream);
    DL_CUDA_CHECK(cudaMemcpyAsync(r.mem.ptr, r.block, r.mem.bytes, cudaMemcpyHostToDevice, stream));
    in->record_stop(stream);
    if (!in->done()) mpi_.wait_until([&] { return in->done(); }, request);
    r.device_work = std::move(in);
  }
  give(r.block, r.mem.bytes);
  r.block = nullptr;
  r.t_done = now_us();
  r.done.store(true, std::memory_order_release);
}

}  // namespace distlab
