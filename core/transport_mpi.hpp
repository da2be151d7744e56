// transport_mpi.hpp — one process per rank under mpirun, messages through Open MPI.
//
// isend / irecv are MPI_Isend / MPI_Irecv of bytes on a private duplicate of
// MPI_COMM_WORLD (messages over 1 GiB go as several pieces, in order). wait polls with
// MPI_Testall so it can time out: after --deadlock-timeout the blocked rank prints its wait,
// asks every other rank (on a second, control communicator) to print theirs, and aborts.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "transport.hpp"

namespace distlab {

class MpiTransport : public Transport {
 public:
  explicit MpiTransport(double deadlock_timeout_s);  // after MPI_Init
  ~MpiTransport() override;

  const char* name() const override { return "mpi"; }
  Request isend(const MemRef& mem, int dst, int tag) override;
  Request irecv(const MemRef& mem, int src, int tag) override;
  void wait(RequestState& request) override;
  void barrier() override;
  void finished() override { finished_ = true; }
  void wait_until(const std::function<bool()>& ready, const std::string& what) override;

  // For the transports layered on this one (transport_nccl, transport_staged):
  // true once `request` (one of ours) is complete; throws on a failed match, as wait does.
  bool test(RequestState& request);
  // wait_until, reported as a wait for `waiting` (a message of the layered transport).
  void wait_until(const std::function<bool()>& ready, const RequestState& waiting);

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return data_; }
  const std::string& host() const { return host_; }
  // Add to this rank's clock to read rank 0's (0 on rank 0's node: one clock there).
  double clock_offset_us() const { return clock_offset_us_; }

  // Root receives every rank's bytes (rank order); others get an empty vector.
  std::vector<std::vector<char>> gather_bytes(const std::vector<char>& mine, int root);
  int broadcast_int(int value, int root);

  // Prints the message and ends every process (MPI_Abort).
  [[noreturn]] static void abort_all(const std::string& message, int exit_code);

 private:
  // What a blocked rank says it waits for: a message, a named wait, or (neither) the barrier.
  struct Waiting {
    const RequestState* request = nullptr;
    std::string what;
    std::string line(int rank, double since, double now) const;
  };

  Request post(bool is_send, const MemRef& mem, int peer, int tag);
  void poll_control(const Waiting& waiting, double since);
  [[noreturn]] void report_deadlock(const Waiting& waiting, double since);
  // Polls ready() until it is true; answers other ranks' reports; reports after the timeout.
  void poll(const std::function<bool()>& ready, const Waiting& waiting);
  void estimate_clock_offsets();

  int rank_ = 0, size_ = 1;
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;
  double timeout_us_;
  bool finished_ = false;
  bool reported_ = false;
  std::string host_;
  double clock_offset_us_ = 0;
};

}  // namespace distlab
