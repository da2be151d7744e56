// shm.hpp — one process per rank on one host, messages through shared memory: the path an MPI
// library or NCCL takes between processes of one node, with no library call in the data path.
//
// The run maps one segment of POSIX shared memory (/dev/shm/<name>), laid out alike in every
// rank: a header, one state block per rank, and one ring per ordered pair of ranks (the sender
// writes, the receiver reads; every block on cache lines of its own). Rank 0 makes it, every
// rank maps it, and once all have (the control transport's barrier) rank 0 unlinks the name (a
// rank that cannot map it still comes to that barrier, then fails): from then on a run that is
// killed leaves nothing in /dev/shm. Should a rank die before that, distlab's launcher removes
// the name; under mpirun it stays until a later run's first rank removes names whose process
// has ended.
//
// A message is a frame in the sender's ring to the receiver: a header (context, tag, bytes, type)
// and the bytes, written as the ring has room; the sender's head and the receiver's tail are
// atomics (release after the bytes, acquire before reading them), so the ring needs no lock.
// Every wait drains every incoming ring and fills every outgoing one, so two ranks that send to
// each other both progress. An arriving frame goes straight into the first matching receive
// posted (by context, source and tag, as in MPI), or into a buffer of its own that a later
// receive takes (eager, at any size: no message waits for its receive). A receive of another
// size fails, naming both sizes.
//
// Deadlocks: every rank keeps its state in its block (computing, waiting in what since when,
// when it last progressed). A wait that passes --deadlock-timeout without this rank progressing
// reads the others' blocks: when one computes or progressed within the timeout the run goes on
// (one line says so); when none did, the first rank to say so prints every rank's wait and every
// rank ends with exit 3, as under mpirun. A message moving counts as progress, a wait that ends
// too. The blocks keep wall-clock times: ranks in a cluster's namespaces have monotonic clocks
// of their own. A peer whose process has ended without finishing fails
// the waits on it, naming it.
//
// The control transport (MPI under mpirun, Gloo under distlab's launcher) starts the run (the
// barriers around the mapping), splits its groups alongside (so MPI's and Gloo's own collectives
// still run on every group) and carries what a run of processes sends besides messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/transport/transport.hpp"

namespace distlab {

struct ShmSetup {
  int rank = 0;
  int size = 1;
  std::string name;  // the segment's name, the same on every rank ("/distlab-...")
  double deadlock_timeout_s = 10;
  std::size_t ring_bytes = 0;  // per ordered pair of ranks; 0: shm_ring_bytes(size)
};

// The ring per ordered pair that a run of `size` ranks gets: 1 MiB, less as the pairs grow in
// number (the segment stays under 40 MiB: a container's /dev/shm is 64 MiB by default), never
// under 64 KiB.
std::size_t shm_ring_bytes(int size);
// The bytes of a run's segment: header, rank states and size * size rings.
std::size_t shm_segment_bytes(int size, std::size_t ring_bytes);

class ShmTransport : public Transport {
 public:
  // Maps the segment: rank 0 makes it, `barrier` (the control transport's) lets the others map
  // it, a second lets rank 0 unlink it. Throws Error with a sentence when /dev/shm has no room.
  ShmTransport(const ShmSetup& setup, Transport& control, const std::function<void()>& barrier);
  ~ShmTransport() override;

  const char* name() const override { return "shm"; }
  Request isend(const MemRef& mem, int dst, int tag, int context) override;
  Request irecv(const MemRef& mem, int src, int tag, int context) override;
  // The control transport's split (so library collectives run on the group), and a key every
  // member works out alike (the parent's, how many splits it made before, the color) that the
  // group's frames carry.
  int split(int parent, int color, int key, const std::vector<int>& members) override;
  void wait(RequestState& request) override;
  bool test(RequestState& request) override;
  void barrier() override;
  void finished() override;
  void wait_until(const std::function<bool()>& ready, const std::string& what) override;
  MpiTransport* mpi_transport() override { return control_.mpi_transport(); }
  GlooTransport* gloo_transport() override { return control_.gloo_transport(); }

  int rank() const { return setup_.rank; }
  int size() const { return setup_.size; }
  std::size_t ring_bytes() const { return ring_bytes_; }

  // Ends the process (exit 3) where another rank declared the run hung, once its report is out.
  void end_if_hang_declared() const;

 private:
  struct Frame;
  struct Req;
  struct Incoming;
  struct Unexpected;
  struct Context {
    std::uint32_t key = 0;
    int splits = 0;
  };

  Request post(bool is_send, const MemRef& mem, int peer, int tag, int context);
  // One pass over every ring: fills the outgoing ones, drains the incoming ones. True when bytes
  // moved.
  bool progress();
  bool push(int dst);
  bool drain(int src);
  void complete(Req& r);
  void fail(Req& r, const std::string& why);
  void polled(const std::function<bool()>& ready, const RequestState* request,
              const std::string& what);
  // This rank's wait passed the timeout without progress: is any other rank moving?
  void check_hang(const std::string& subject, double since);
  // Throws Error when a peer's process has ended without finishing.
  void check_peers_alive(const std::string& subject);
  void set_state(std::uint32_t state, const std::string& line, double since);
  void progressed();

  ShmSetup setup_;
  Transport& control_;
  std::size_t ring_bytes_ = 0, segment_bytes_ = 0;
  long spin_budget_ = 0;  // polls of a wait before it yields the core
  unsigned char* base_ = nullptr;
  std::vector<Context> contexts_;                        // [0] is the world
  std::vector<std::deque<std::shared_ptr<Req>>> sends_;  // per destination, in posting order
  std::vector<std::deque<std::shared_ptr<Req>>> recvs_;  // per source, posted, unmatched
  std::vector<std::unique_ptr<Incoming>> incoming_;      // per source: the frame arriving
  std::vector<std::deque<std::shared_ptr<Unexpected>>> unexpected_;  // per source
};

}  // namespace distlab
