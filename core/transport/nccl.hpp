// nccl.hpp — mpirun + --device cuda with a GPU per rank: ncclSend / ncclRecv.
//
// NCCL has no request objects: a send or a receive is a kernel on the rank's stream, and one
// that is not fused with its partners in a ncclGroupStart / ncclGroupEnd blocks the stream
// until its peer posts the matching call (two ranks that each send first would hang their
// GPUs). So isend and irecv only queue; the next wait (or barrier) launches everything queued
// as one group, the way MPI's nonblocking calls let the two halves of a sendrecv progress
// together. Waits poll the group's end event (cudaEventQuery) and the communicator's state
// (ncclCommGetAsyncError) through the MPI transport's loop: a hang is reported as a deadlock,
// who waits for whom, never waited on forever. After wait() the data is in place, for the host
// and every stream, as on the CPU.
//
// NCCL pairs the k-th send from a to b with the k-th receive on b from a; it knows no tags and
// does not check sizes. So every message also sends a small header by MPI, which matches by
// (source, tag): the receiver compares bytes, element type, host or GPU memory, and the send's
// place among a's NCCL sends to b with its own, and says what went wrong instead of receiving
// garbage. Host buffers (a CPU View in a cuda run) go by MPI; a message with host memory at one
// end and GPU memory at the other is refused with a sentence.
//
// The one rule MPI does not have: a GPU send or receive holds its rank's stream until its
// partner is launched on the peer, and a stream runs its NCCL work in order. Queued messages
// are launched at the next wait, barrier or library collective, ahead of that collective. So
// the order MPI allows — r0: isend to r1, all-reduce, wait; r1: all-reduce, irecv from r0,
// wait — hangs both GPUs here: r0's all-reduce queues behind its send, r1's receive behind its
// all-reduce. Post both halves of a message before a collective (or wait for them first) on
// both ranks. The hang is reported, not waited on: the collective's wait names the messages it
// was launched behind.
//
// The communicator is non-blocking (ncclConfig_t.blocking = 0): no NCCL call can hang the host,
// and every call that answers ncclInProgress is polled until NCCL has enqueued it. It is made
// with a unique id that rank 0 broadcasts over MPI. A split (a context, transport.hpp) makes a
// NCCL communicator of its own for the group, from a unique id its first member broadcasts over
// the group's MPI communicator, and its headers travel on a split of the headers' communicator.
// One launch may hold messages of several contexts: a NCCL group spans communicators.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/transport/mpi.hpp"
#include "core/transport/nccl_calls.hpp"

namespace distlab {

class NcclTransport : public Transport {
 public:
  // Collective: every rank constructs it after binding its GPU. Throws Error with NCCL's text
  // (two ranks on one GPU: "Duplicate GPU detected").
  explicit NcclTransport(MpiTransport& mpi);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  const char* name() const override { return "nccl"; }
  Request isend(const MemRef& mem, int dst, int tag, int context) override;
  Request irecv(const MemRef& mem, int src, int tag, int context) override;
  int split(int parent, int color, int key, const std::vector<int>& members) override;
  void wait(RequestState& request) override;
  void barrier() override;
  void finished() override { mpi_.finished(); }
  void wait_until(const std::function<bool()>& ready, const std::string& what) override {
    mpi_.wait_until(ready, what);
  }

  // ncclComm_t of a context, for the library collectives (context 0: every rank).
  void* comm(int context = 0) const { return at(context).comm; }
  MpiTransport* mpi_transport() override { return &mpi_; }
  // Launches the queued sends and receives as one group and returns how many it launched. The
  // library collectives call it first, so that every rank issues its NCCL calls in one order.
  std::size_t flush();

 private:
  struct Header;
  struct Req;
  // A communicator: every rank's (context 0) or a group's. Peers are world ranks; rank_of
  // names them in this communicator (-1: not a member).
  struct Context {
    void* comm = nullptr;
    MPI_Comm headers = MPI_COMM_NULL;  // the headers' own communicator: apart from host payloads
    std::vector<int> rank_of;
    std::vector<std::uint64_t> sent_to, received_from;  // NCCL messages per peer, in posting order
  };
  const Context& at(int context) const;
  std::shared_ptr<Req> make(bool is_send, const MemRef& mem, int peer, int tag, int context);
  bool header_arrived(Req& r);

  MpiTransport& mpi_;
  std::vector<Context> contexts_;  // indexed as the MPI transport numbers its contexts
  std::vector<std::shared_ptr<Req>> queued_;
};

}  // namespace distlab
