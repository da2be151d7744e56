// gloo.hpp — one process per rank, messages over Gloo's TCP pairs: the send/recv scheme PyTorch's
// CPU backend (torch.distributed's "gloo") runs on, sockets underneath.
//
// The processes find each other through Gloo's file store, a folder every rank can read (the
// launcher, `./distlab lesson NN --procs N`, makes one and removes it), and connect a full mesh:
// one TCP connection (a pair) per two ranks, each bound to DISTLAB_HOST (127.0.0.1 unless the
// cluster gives a rank its own address).
//
// isend / irecv post an unbound buffer on the peer's pair. Gloo matches a send to a receive by
// slot, first posted first matched; the slot is this transport's prefix, the context, the tag
// and a hash of the byte count, so two messages from one source with one tag keep their order
// and a message never lands in a receive of another size (Gloo itself would abort the receiver
// or silently deliver less). A size mismatch is therefore a receive that never completes: the
// deadlock report says who sends and who receives how many bytes.
//
// wait blocks in Gloo's own wait (a condition variable its I/O thread signals). Gloo closes
// every pair of a process whose wait times out, so no wait here ever times out: a watchdog
// thread keeps this rank's state in the store folder instead (computing, or waiting for what
// since when), and when this rank's wait passes --deadlock-timeout it reads every rank's state.
// If one progressed within the timeout the run goes on, with one line saying so; if none did,
// one rank prints every rank's wait and the run ends (exit 3), as under mpirun. A peer that dies
// closes its connections: the waits on it throw Error, naming it. test (a nonblocking
// collective's question, async.hpp) hands the wait to a thread of its own the first time.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/transport/transport.hpp"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
namespace transport {
class Device;
}
}  // namespace gloo

namespace distlab {

// What a process started by the launcher finds in its environment.
struct GlooSetup {
  int rank = 0;
  int size = 1;
  std::string store;               // the rendezvous folder (Gloo's file store)
  std::string host = "127.0.0.1";  // the address this rank's pairs bind to
  double deadlock_timeout_s = 10;
  double rendezvous_timeout_s = 60;  // how long to wait for every rank to join
  // Tests only: how long a watchdog that declares the hang holds its report back after making the
  // marker, the window in which the other ranks end and this rank's own wait breaks.
  double hang_report_delay_s = 0;
};

class GlooTransport : public Transport {
 public:
  explicit GlooTransport(const GlooSetup& setup);
  ~GlooTransport() override;

  const char* name() const override { return "gloo"; }
  Request isend(const MemRef& mem, int dst, int tag, int context) override;
  Request irecv(const MemRef& mem, int src, int tag, int context) override;
  // No messages: every member works out the same new context from the parent's and the count
  // of splits it made before (all its ranks split together) and the color.
  int split(int parent, int color, int key, const std::vector<int>& members) override;
  void wait(RequestState& request) override;
  bool test(RequestState& request) override;
  void barrier() override;
  void finished() override;
  void wait_until(const std::function<bool()>& ready, const std::string& what) override;
  GlooTransport* gloo_transport() override { return this; }

  int rank() const { return setup_.rank; }
  int size() const { return setup_.size; }
  // This machine's name (the trace's host), and what to add to this rank's clock to read rank
  // 0's: 0 on rank 0's host (one clock), else estimated at the start (Cristian's method).
  const std::string& host() const { return host_; }
  ClockOffset clock_offset() const { return clock_; }

  // Root receives every rank's bytes (rank order); others get an empty vector.
  std::vector<std::vector<char>> gather_bytes(const std::vector<char>& mine, int root);
  int broadcast_int(int value, int root);

  // Gloo's own context for the library collectives of `context` (the world's for 0; a group's
  // is connected on first use, by all its members alike), and this rank's place in it.
  std::shared_ptr<gloo::Context> library_context(int context);
  // Runs a library collective as a wait the deadlock check sees ("gloo::allreduce").
  void library_call(const std::string& what, const std::function<void()>& call);

  // Prints the message and ends this process; the launcher ends the others.
  [[noreturn]] static void abort_all(const std::string& message, int exit_code);

  // The slot a message of `bytes` with `tag` takes in context key `key` (gloo.cpp; tested).
  static std::uint64_t slot(std::uint32_t key, int tag, std::size_t bytes);

 private:
  struct Context {
    std::uint32_t key = 0;     // in the slot: the same on every member
    std::vector<int> members;  // world ranks, in the group's order
    int splits = 0;            // splits made of this one so far
    std::shared_ptr<gloo::Context> library;
  };
  struct WaitState;
  class Watchdog;

  Request post(bool is_send, const MemRef& mem, int peer, int tag, int context);
  Context& context(int id);
  // The rank's thread enters and leaves a wait; the watchdog reads it.
  void enter_wait(const RequestState* request, const std::string& what);
  void leave_wait(bool progressed);
  void poll(const std::function<bool()>& ready, const RequestState* request,
            const std::string& what);
  // Internal traffic (barrier, gather, broadcast): a context no lesson's split can make.
  void send_internal(const void* data, std::size_t bytes, int peer, int tag);
  void recv_internal(void* data, std::size_t bytes, int peer, int tag);
  void estimate_clock_offsets();
  void end_if_hang_declared() const;  // exit 3 where another rank declared the run hung

  GlooSetup setup_;
  std::string host_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  std::vector<Context> contexts_;  // [0] is the world
  std::unique_ptr<WaitState> state_;
  std::unique_ptr<Watchdog> watchdog_;
  int barrier_depth_ = 0;
  ClockOffset clock_;
};

// The process's setup from the launcher's environment: DISTLAB_RANK, DISTLAB_WORLD_SIZE,
// DISTLAB_STORE and DISTLAB_HOST (gloo.cpp). Throws UsageError naming what is missing.
GlooSetup gloo_setup_from_environment(double deadlock_timeout_s);

}  // namespace distlab
