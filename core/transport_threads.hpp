// transport_threads.hpp — in-process ranks: one thread per rank, messages by direct copy.
//
// Every rank has a mailbox of unmatched sends addressed to it and unmatched receives it has
// posted. Whichever side arrives second finds its partner (first match by (source, tag), in
// posting order) and copies the sender's buffer straight into the receiver's: one memcpy, no
// staging. A send therefore completes when the receiver has its data (rendezvous), so two
// ranks that both send first to each other deadlock exactly as they might under MPI.
//
// With --device cuda the one copy is a cudaMemcpyPeerAsync between the two ranks' device
// buffers, ordered by events and waited for by polling (peer_copy.hpp says how and why).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport.hpp"

namespace distlab {

// Shared by all in-process ranks of one run.
class ThreadHub {
 public:
  ThreadHub(int size, double deadlock_timeout_s);

  int size() const { return size_; }
  bool aborting() const { return aborting_.load(std::memory_order_acquire); }

  // Records the first failure (later ones are dropped) and wakes every waiting rank.
  void fail(int rank, const std::string& message, int exit_code);
  bool failed() const;
  std::string failure() const;
  int exit_code() const;

  double timeout_s() const { return timeout_us_ * 1e-6; }
  // True when every rank but `rank` has finished its body.
  bool others_finished(int rank) const;
  // State every rank of this run shares, made by the first rank that asks for `key` (the NCCL
  // id of the library collectives); it lives as long as the hub.
  std::shared_ptr<void> shared(const std::string& key, const std::function<std::shared_ptr<void>()>& make);

 private:
  friend class ThreadTransport;
  struct Req;
  struct Slot {
    std::mutex mailbox;                  // guards sends and recvs
    std::deque<std::shared_ptr<Req>> sends;  // unmatched sends addressed to this rank
    std::deque<std::shared_ptr<Req>> recvs;  // unmatched receives this rank posted
    std::mutex wake;                     // the owner sleeps on cv under this mutex
    std::condition_variable cv;
    std::mutex registry;                 // what the owner is blocked on, for the report
    const RequestState* blocked = nullptr;
    std::string blocked_what;            // ... or a wait that is not a message (wait_until)
    bool in_barrier = false;
    double blocked_since = 0;
    bool finished = false;
    // GPU runs: copies into this rank's memory are enqueued on its copy stream by any rank's
    // thread; one at a time, so that a copy's timing events bracket that copy alone.
    std::mutex copies;
  };

  void complete(Req& r);
  void wake_all();
  // Builds the who-waits-for-whom report, records it as the failure and aborts.
  [[noreturn]] void report_deadlock(int detector);

  int size_;
  double timeout_us_;
  std::atomic<bool> aborting_{false};
  std::vector<std::unique_ptr<Slot>> slots_;

  std::mutex barrier_m_;
  std::condition_variable barrier_cv_;
  int barrier_arrived_ = 0;
  unsigned long barrier_generation_ = 0;

  mutable std::mutex fail_m_;
  bool failed_ = false;
  std::string failure_;
  int exit_code_ = 0;

  std::mutex shared_m_;
  std::map<std::string, std::shared_ptr<void>> shared_;
};

// The endpoint one rank uses.
class ThreadTransport : public Transport {
 public:
  ThreadTransport(ThreadHub& hub, int rank) : hub_(hub), rank_(rank) {}
  const char* name() const override { return "threads"; }
  Request isend(const MemRef& mem, int dst, int tag) override;
  Request irecv(const MemRef& mem, int src, int tag) override;
  void wait(RequestState& request) override;
  void barrier() override;
  void finished() override;
  void wait_until(const std::function<bool()>& ready, const std::string& what) override;

  ThreadHub& hub() { return hub_; }
  int rank() const { return rank_; }

 private:
  std::shared_ptr<ThreadHub::Req> make_request(bool is_send, const MemRef& mem, int peer, int tag);
  void transfer(ThreadHub::Req& send, ThreadHub::Req& recv);
  // Polls ready() while registered as blocked on `request` (or on `what`), answering aborts
  // and the deadlock timeout like a wait for a partner.
  void poll(const std::function<bool()>& ready, const RequestState* request, const std::string& what);
  ThreadHub& hub_;
  int rank_;
};

}  // namespace distlab
