// mpi.hpp — one process per rank under mpirun, messages through Open MPI.
//
// isend / irecv are MPI_Isend / MPI_Irecv of bytes on a private duplicate of
// MPI_COMM_WORLD (messages over 1 GiB go as several pieces, in order), or on a communicator
// split off it (a context, transport.hpp). wait polls with
// MPI_Testall so it can time out. Under mpirun no rank sees the others' waits, so a deadlock
// is found by asking: when a wait passes --deadlock-timeout and this rank has not progressed
// for that long, it asks every other rank (on a second, control communicator) how long ago it
// last progressed; a rank that does not answer is computing, which is progress. If one
// progressed within the timeout the run goes on, with one line saying so; if every rank
// answered and none did, it prints every rank's wait once and aborts (exit 3).
// In a simulated run (SimGrid's SMPI, the smpi preset) waits block in MPI_Waitall instead: a
// polling rank would never let the simulated clock move. SimGrid finds deadlocks itself (no
// event left to simulate); each rank then prints its wait and the run ends with exit 3.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "core/transport/transport.hpp"

namespace distlab {

class MpiTransport : public Transport {
 public:
  explicit MpiTransport(double deadlock_timeout_s);  // after MPI_Init
  ~MpiTransport() override;

  const char* name() const override { return "mpi"; }
  Request isend(const MemRef& mem, int dst, int tag, int context) override;
  Request irecv(const MemRef& mem, int src, int tag, int context) override;
  // MPI_Comm_split of the parent's communicator; the new one's ranks must be `members`.
  int split(int parent, int color, int key, const std::vector<int>& members) override;
  MpiTransport* mpi_transport() override { return this; }
  void wait(RequestState& request) override;
  void barrier() override;
  void finished() override {
    finished_ = true;
    progressed();
  }
  void wait_until(const std::function<bool()>& ready, const std::string& what) override;

  // True once `request` (one of ours) is complete; throws on a failed match, as wait does. The
  // transports layered on this one (transport_nccl, transport_staged) call it too.
  bool test(RequestState& request) override;
  // wait_until, reported as a wait for `waiting` (a message of the layered transport).
  void wait_until(const std::function<bool()>& ready, const RequestState& waiting);

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return data_; }
  // The communicator of a context (split): data_ for context 0.
  MPI_Comm comm(int context) const;
  const std::string& host() const { return host_; }
  // Add to this rank's clock to read rank 0's, with its error (0 on rank 0's node: one clock).
  ClockOffset clock_offset() const { return clock_; }

  // Root receives every rank's bytes (rank order); others get an empty vector.
  std::vector<std::vector<char>> gather_bytes(const std::vector<char>& mine, int root);
  int broadcast_int(int value, int root);

  // Prints the message and ends every process (MPI_Abort; simulated, the one process).
  [[noreturn]] static void abort_all(const std::string& message, int exit_code);
  // Simulated runs: what this rank is blocked in, as a line of a deadlock report.
  std::string blocked_line() const;

 private:
  // What a blocked rank says it waits for: a message, a named wait, or (neither) the barrier.
  struct Waiting {
    const RequestState* request = nullptr;
    std::string what;
    std::string line(int rank, double since, double now) const;
  };

  struct Answer;
  Request post(bool is_send, const MemRef& mem, int peer, int tag, int context);
  void progressed();
  std::string my_line(const Waiting& waiting, double since) const;
  void poll_control(const Waiting& waiting, double since);
  // After a wait passed the timeout: asks the others; returns (with `since` reset) when some
  // rank still progresses, else reports every rank's wait and ends the run (exit 3).
  void on_timeout(const Waiting& waiting, double& since);
  // Polls ready() until it is true; answers other ranks' reports; reports after the timeout.
  void poll(const std::function<bool()>& ready, const Waiting& waiting);
  void estimate_clock_offsets();

  // A communicator split off data_ (context >= 1), and each world rank's rank in it (-1: not
  // a member).
  struct Context {
    MPI_Comm comm = MPI_COMM_NULL;
    std::vector<int> rank_of;
  };
  const Context& context(int id) const;

  int rank_ = 0, size_ = 1;
  MPI_Comm data_ = MPI_COMM_NULL;
  std::vector<Context> contexts_;  // [0] is unused: context 0 is data_ itself
  MPI_Comm control_ = MPI_COMM_NULL;
  double timeout_us_;
  bool finished_ = false;
  double last_progress_us_ = 0;    // this rank's last completed message, opened barrier or finish
  double last_asked_us_ = -1e300;  // when another rank last asked whether we progress
  int round_ = 0;
  std::string host_;
  ClockOffset clock_;
  // Simulated runs only: the wait this rank blocks in (MPI_Waitall or MPI_Barrier), and since when.
  const RequestState* blocked_in_ = nullptr;
  bool in_barrier_ = false;
  double blocked_since_ = 0;
};

}  // namespace distlab
