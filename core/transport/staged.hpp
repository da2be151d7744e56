// staged.hpp — mpirun + --device cuda when ranks share a GPU: MPI through host memory.
//
// NCCL refuses two ranks on one GPU, and this build does not assume a CUDA-aware MPI. So a GPU
// buffer is staged: isend copies it to a pinned host buffer (cudaMemcpyAsync on the rank's
// stream, after the kernels that produced it; isend returns once the copy is done) and sends
// that with MPI; a receive lands in a pinned host buffer and wait copies it up (on the rank's
// stream, after the buffer's earlier uses) and returns when it is there, for the host and every
// stream. Each message pays two PCIe copies and a host round trip on top of MPI: the price
// the lesson can show next to NCCL. Host buffers go by MPI as they are, so host and GPU memory
// may meet at the two ends of a message. Pinned buffers are kept for reuse, per size (up to
// 1 GiB in all).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/transport/mpi.hpp"

namespace distlab {

class StagedTransport : public Transport {
 public:
  explicit StagedTransport(MpiTransport& mpi) : mpi_(mpi) {}
  ~StagedTransport() override;
  StagedTransport(const StagedTransport&) = delete;
  StagedTransport& operator=(const StagedTransport&) = delete;

  const char* name() const override { return "staged"; }
  Request isend(const MemRef& mem, int dst, int tag, int context) override;
  Request irecv(const MemRef& mem, int src, int tag, int context) override;
  int split(int parent, int color, int key, const std::vector<int>& members) override {
    return mpi_.split(parent, color, key, members);
  }
  void wait(RequestState& request) override;
  void barrier() override { mpi_.barrier(); }
  void finished() override { mpi_.finished(); }
  void wait_until(const std::function<bool()>& ready, const std::string& what) override {
    mpi_.wait_until(ready, what);
  }
  MpiTransport* mpi_transport() override { return &mpi_; }

 private:
  struct Req;
  static std::shared_ptr<Req> make_request(bool is_send, const MemRef& mem, int peer, int tag,
                                           int context);
  void* take(std::size_t bytes);  // cudaMallocHost'd, from the spares when one fits exactly
  void give(void* block, std::size_t bytes);

  MpiTransport& mpi_;
  std::multimap<std::size_t, void*> spare_;
  std::size_t spare_bytes_ = 0;
};

}  // namespace distlab
