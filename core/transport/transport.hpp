// transport.hpp — point-to-point messages between ranks, one interface for every mode.
//
// isend / irecv post a message and return a Request; wait completes it. Matching is by
// (source, tag) in posting order, as in MPI: two messages from one source with one tag are
// never overtaken. A receive must name exactly the bytes that were sent.
//
// Implementations: transport_threads (in-process ranks, one copy straight from the sender's
// buffer into the receiver's; on GPUs a cudaMemcpyPeerAsync), transport_mpi (Open MPI),
// transport_gloo (Gloo's TCP pairs, one process per rank started by distlab's launcher),
// transport_shm (rings in one shared-memory segment, processes on one host), and
// under mpirun with --device cuda transport_nccl (ncclSend / ncclRecv) or transport_staged
// (MPI through pinned host buffers). A deadlock ends every rank with who waits for whom: on
// in-process ranks as soon as the wait-for graph shows one, under mpirun once a wait passes
// the timeout and no rank still progresses (threads.hpp, mpi.hpp).
//
// A context is a communicator: a message matches only a receive posted in the same context.
// Context 0 holds every rank; split opens one for a group of them (Comm::split, MPI_Comm_split's
// meaning). Peers are world ranks in every context; each transport maps them to its own
// communicator's ranks (MPI_Comm_split, a NCCL communicator per group), and a deadlock report
// names world ranks.
//
// On a GPU a completed wait means what it means on the CPU: the data is in place (receive)
// or the buffer may be reused (send), for the host and for any stream. A message's data is
// taken as it stands on the sender's stream when isend is called.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/base/clock.hpp"
#include "core/base/dtype.hpp"
#include "core/base/world.hpp"
#include "core/device/device_timing.hpp"
#include "core/trace/recorder.hpp"

namespace distlab {

// Raised on ranks that are told to stop because another rank failed or deadlocked.
class Aborted : public std::exception {
 public:
  const char* what() const noexcept override { return "aborted because another rank failed"; }
};

// Memory a message reads from or writes to.
struct MemRef {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  DType dtype = DType::u8;
  Device device = Device::cpu;
  // A receive that adds the message into this memory instead of overwriting it; posted only
  // where the transport says it can (Transport::reduces_on_receive).
  bool accumulate = false;
};

// One posted send or receive. Transports derive their own state from it.
struct RequestState {
  bool is_send = false;
  int peer = -1;  // a world rank
  int tag = -1;
  int context = 0;  // the communicator it matches in (split)
  MemRef mem;
  double t_post = 0;  // when it was posted (us)
  double t_done = 0;  // when the data had moved (us), set by the transport
  std::atomic<bool> done{false};
  std::string error;  // set when the match failed (size or type mismatch)
  // Filled by Comm for the trace: data-flow metadata and the message's sequence number.
  MsgMeta meta;
  std::uint64_t seq = 0;
  bool traced = false;
  // GPU transports: the device work that moved the data, on this rank's GPU (the trace's gpu
  // lane); null on the CPU and where another rank's GPU did the work.
  std::shared_ptr<DeviceWork> device_work;
  virtual ~RequestState() = default;
};
using Request = std::shared_ptr<RequestState>;

// A transport's own request type R (derived from RequestState) for a message posted now.
template <class R>
std::shared_ptr<R> new_request(bool is_send, const MemRef& mem, int peer, int tag, int context) {
  auto r = std::make_shared<R>();
  r->is_send = is_send;
  r->peer = peer;
  r->tag = tag;
  r->context = context;
  r->mem = mem;
  r->t_post = now_us();
  return r;
}

class MpiTransport;
class GlooTransport;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual Request isend(const MemRef& mem, int dst, int tag, int context) = 0;
  virtual Request irecv(const MemRef& mem, int src, int tag, int context) = 0;
  // Collective over the ranks of context `parent`, each passing its color and key: opens the
  // context of the ranks with this rank's color and returns its id. `members` are their world
  // ranks in the new group's order (by key, then by rank in the parent: MPI_Comm_split's), this
  // rank among them; Comm::split works them out. Messages in it never match another context's.
  virtual int split(int parent, int color, int key, const std::vector<int>& members) = 0;
  // Blocks until the request completes; throws Error on a failed match, Aborted when the
  // run is being torn down; reports and ends the run on a deadlock or when nothing progresses.
  virtual void wait(RequestState& request) = 0;
  // True once the request has completed, without blocking (wait then only finishes it): what a
  // nonblocking collective's fiber asks before it yields (async.hpp). Where the library moves
  // data only when entered (MPI), this is such an entry.
  virtual bool test(RequestState& request) { return request.done.load(std::memory_order_acquire); }
  virtual void barrier() = 0;
  // True when irecv can add a message into `mem` as it arrives (MemRef::accumulate): one pass
  // over memory where a receive and then an add take two. In-process ranks on the CPU can, as
  // the one copy they make becomes the add; elsewhere the message lands whole first.
  virtual bool reduces_on_receive(const MemRef& /*mem*/) const { return false; }
  // Called once when the rank's body returns (the deadlock report lists finished ranks).
  virtual void finished() {}
  // Blocks until ready() is true, polling as wait() does: Aborted when another rank failed;
  // after the deadlock timeout the run reports who waits for whom, this rank as waiting in
  // `what` ("ncclAllReduce"). The host waits for GPU work (NCCL calls, copies) through here.
  virtual void wait_until(const std::function<bool()>& ready, const std::string& what) = 0;
  // The MPI transport this one is (or runs over, for the GPU transports under mpirun): the
  // library collectives' communicators. Null on in-process ranks.
  virtual MpiTransport* mpi_transport() { return nullptr; }
  // The Gloo transport this one is: the library collectives' contexts under the launcher.
  virtual GlooTransport* gloo_transport() { return nullptr; }
};

// Largest tag a transport must accept (MPI guarantees at least 32767).
inline constexpr int kMaxTag = 32767;

// One line of a deadlock report: "r0 waits in recv from r1 (tag 7, 8 B, f32) for 2.0 s".
std::string describe_wait(int rank, const RequestState* waiting, double since_us, double now);
// The same for a wait that is not a message: "r0 waits in ncclAllReduce for 2.0 s".
std::string describe_wait(int rank, const std::string& what, double since_us, double now);
// Either line without its duration ("r0 waits in recv from r1 (tag 7, 8 B, f32)").
std::string wait_subject(int rank, const RequestState* waiting);
std::string wait_subject(int rank, const std::string& what);

// The hang report of a run of processes (mpi.cpp, gloo.cpp), printed to stderr: nobody progressed
// for `timeout_s`, then every rank's wait, one line each (rank order).
void print_hang_report(double timeout_s, const std::vector<std::string>& lines);

// What to add to another rank's clock to read this one's, and how far off it can be: the other
// read its clock at some moment inside the round trip, so the true offset lies within half the
// round trip of the estimate (clocks that tick at one rate: the cluster's time namespaces).
struct ClockOffset {
  double offset_us = 0;
  double error_us = 0;  // the true offset is within offset_us +- error_us
};

// Cristian's method: `rounds` round trips to a rank with a clock of its own, each `ask` sending
// this rank's time and returning the time the other read on receipt; the offset from the round
// with the smallest round trip, and half that round trip as its error.
ClockOffset clock_offset_from(int rounds, const std::function<double(double now)>& ask);

// Polls with a backoff that sleeps a little longer the longer a wait lasts: ranks may share a
// core (oversubscribed), and a GPU event cannot wake a sleeping thread.
void poll_backoff(long& spins);

}  // namespace distlab
