// transport.hpp — point-to-point messages between ranks, one interface for every mode.
//
// isend / irecv post a message and return a Request; wait completes it. Matching is by
// (source, tag) in posting order, as in MPI: two messages from one source with one tag are
// never overtaken. A receive must name exactly the bytes that were sent.
//
// Implementations: transport_threads (in-process ranks, one copy straight from the sender's
// buffer into the receiver's) and transport_mpi (Open MPI). A wait that blocks longer than
// the deadlock timeout reports who waits for whom and ends every rank.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "trace.hpp"
#include "world.hpp"

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
};

// One posted send or receive. Transports derive their own state from it.
struct RequestState {
  bool is_send = false;
  int peer = -1;
  int tag = -1;
  MemRef mem;
  double t_post = 0;                // when it was posted (us)
  double t_done = 0;                // when the data had moved (us), set by the transport
  std::atomic<bool> done{false};
  std::string error;                // set when the match failed (size or type mismatch)
  // Filled by Comm for the trace: data-flow metadata and the message's sequence number.
  MsgMeta meta;
  std::uint64_t seq = 0;
  bool traced = false;
  virtual ~RequestState() = default;
};
using Request = std::shared_ptr<RequestState>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual Request isend(const MemRef& mem, int dst, int tag) = 0;
  virtual Request irecv(const MemRef& mem, int src, int tag) = 0;
  // Blocks until the request completes; throws Error on a failed match, Aborted when the
  // run is being torn down; reports and ends the run after the deadlock timeout.
  virtual void wait(RequestState& request) = 0;
  virtual void barrier() = 0;
  // Called once when the rank's body returns (the deadlock report lists finished ranks).
  virtual void finished() {}
};

// Largest tag a transport must accept (MPI guarantees at least 32767).
inline constexpr int kMaxTag = 32767;

// One line of a deadlock report: "r0 waits in recv from r1 (tag 7, 8 B, f32) for 2.0 s".
std::string describe_wait(int rank, const RequestState* waiting, double since_us, double now);

}  // namespace distlab
