// threads.hpp — in-process ranks: one thread per rank, messages by direct copy.
//
// Every rank has a mailbox of unmatched sends addressed to it and unmatched receives it has
// posted. Whichever side arrives second finds its partner (first match by (source, tag), in
// posting order) and copies the sender's buffer straight into the receiver's: one memcpy, no
// staging. A send therefore completes when the receiver has its data (rendezvous), so two
// ranks that both send first to each other deadlock exactly as they might under MPI.
// A large message whose receiver already waits is handed to the receiver to copy (or add, for a
// reduce on receipt) rather than copied by the sender: in an exchange each side then moves its
// own incoming data, at once, instead of the later one moving both (ThreadTransport::isend).
//
// With --device cuda the one copy is a cudaMemcpyPeerAsync between the two ranks' device
// buffers, ordered by events and waited for by polling (peer_copy.hpp says how and why).
#pragma once

#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/device/allocator.hpp"
#include "core/transport/transport.hpp"

namespace distlab {

// Shared by all in-process ranks of one run. It sees every rank, so a deadlock is a fact it
// reads off the wait-for graph, not a timeout: when a rank is blocked on a message whose peer
// has finished, or on a peer that is itself stuck (a cycle of waits), no rank can ever match
// it, and the run ends at once with the cycle (exit 3). A rank that computes, or whose message
// can still be matched by a running rank, is never part of a deadlock. The timeout is for what
// the graph cannot see (a rank stuck computing, a wait on the GPU): it fires only when no
// message has been matched and no rank has finished for that long.
// True when the kernel holds thread `tid` of this process runnable (state R in
// /proc/self/task/TID/stat: on a core, or ready and waiting for one) or busy for it in an
// uninterruptible wait (D: mapping memory, I/O). The hang check counts such a rank as
// progressing: on a loaded machine it waits for a core or for the kernel, it is not stuck.
bool thread_runnable(pid_t tid);

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
  // Messages a sender handed to their waiting receiver to move (ThreadTransport::hand_over).
  std::uint64_t handed_over() const { return handed_over_.load(std::memory_order_relaxed); }
  // True when every rank but `rank` has finished its body.
  bool others_finished(int rank) const;
  // True while `rank` waits for a message: a sender then hands it a large message to move.
  bool in_wait(int rank) const;
  // State every rank of this run shares, made by the first rank that asks for `key` (the NCCL
  // id of the library collectives); it lives as long as the hub.
  std::shared_ptr<void> shared(const std::string& key,
                               const std::function<std::shared_ptr<void>()>& make);

  // The deadlock report when the wait-for graph holds a rank no one can ever release: its
  // message waits on a finished rank, or on a cycle of blocked ranks. Empty otherwise.
  struct Deadlock {
    std::string report;
    bool settled = false;  // no rank was running: the report names every wait there will be
  };
  std::optional<Deadlock> deadlock() const;

 private:
  friend class ThreadTransport;
  struct Req;
  struct Slot {
    std::mutex mailbox;                      // guards sends and recvs
    std::deque<std::shared_ptr<Req>> sends;  // unmatched sends addressed to this rank
    std::deque<std::shared_ptr<Req>> recvs;  // unmatched receives this rank posted
    std::mutex wake;                         // the owner sleeps on cv under this mutex
    std::condition_variable cv;
    std::mutex registry;  // what the owner is blocked on, for the graph and the report
    const RequestState* blocked = nullptr;
    std::string blocked_what;  // ... or a wait that is not a message (wait_until)
    bool in_barrier = false;
    unsigned long barrier_generation = 0;  // the barrier it waits in
    double blocked_since = 0;
    bool finished = false;
    // Large messages this rank is to move itself: handed by their sender while it waits for a
    // message (in_wait; hand_over), or kept by its own receive (keep_for_later).
    bool in_wait = false;
    std::vector<std::pair<std::shared_ptr<Req>, std::shared_ptr<Req>>> handed;  // send, recv
    std::atomic<int> handed_count{0};  // handed, not yet moved: the rank counts as running
    clockid_t cpu_clock{};  // the rank thread's CPU clock (started()), for the hang check
    bool has_clock = false;
    pid_t tid = 0;        // its kernel thread id, for its scheduler state (runnable)
    bool exited = false;  // finished, and its thread is gone (its clock no longer reads)
    std::atomic<std::int64_t> watch_ns{0};  // CPU time its thread spent in check(): not work
    double cpu_seen_us = 0;                 // its reading at the last look
    // GPU runs: copies into this rank's memory are enqueued on its copy stream by any rank's
    // thread; one at a time, so that a copy's timing events bracket that copy alone.
    std::mutex copies;
  };
  class Blocked;    // registers a rank as blocked for as long as it lives
  struct Watching;  // charges check()'s own CPU time to the calling rank (not work)
  static thread_local Slot* tl_slot_;
  static std::string wait_line(int r, const Slot& s, double now);

  void complete(Req& r);
  void progressed();  // a message matched, a barrier opened or a rank finished
  void wake_all();
  // Ends the run when the graph shows a deadlock, or when nothing progressed for the timeout.
  // `eager`: look at the graph now rather than at most every few tens of milliseconds.
  void check(bool eager);
  // True when `rank`, about to block on `peer` (-1: the barrier), may have closed a deadlock:
  // nobody runs any more, the peer has finished, or the peer waits for `rank` (a cycle of two).
  // Longer cycles are found by the look every waiter takes every few tens of milliseconds.
  bool worth_a_look(int rank, int peer) const;
  [[noreturn]] void report_hang();
  double quiet_us(
      double now);  // time without a message matched, a rank finished or a rank computing
  // Records a deadlock as the run's failure (once), after giving running ranks a moment to block.
  void end_in_deadlock(Deadlock found);

  int size_;
  double timeout_us_;
  std::atomic<bool> aborting_{false};
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<int> active_;  // ranks neither blocked on a message or barrier nor finished
  std::atomic<std::uint64_t> progress_{0};
  std::atomic<std::uint64_t> handed_over_{0};
  std::atomic<double> last_progress_us_;
  std::atomic<double> last_scan_us_{0};
  mutable std::mutex scan_m_;  // one look at the graph at a time
  std::atomic<bool> reporting_{false};
  std::mutex quiet_m_;
  double last_cpu_look_us_ = 0;

  std::mutex barrier_m_;
  std::condition_variable barrier_cv_;
  int barrier_arrived_ = 0;
  std::atomic<unsigned long> barrier_generation_{0};

  mutable std::mutex fail_m_;
  bool failed_ = false;
  std::string failure_;
  int exit_code_ = 0;

  std::mutex shared_m_;
  std::map<std::string, std::shared_ptr<void>> shared_;
  std::atomic<int> next_context_{1};  // context 0 is every rank (split)
};

// The endpoint one rank uses. It also tells the allocator which of the rank's memory its
// messages still name (InFlight), so that a rank unwinding from an exception holds those
// blocks back until its messages are cancelled or done.
class ThreadTransport : public Transport, public InFlight {
 public:
  ThreadTransport(ThreadHub& hub, int rank) : hub_(hub), rank_(rank) {}
  const char* name() const override { return "threads"; }
  Request isend(const MemRef& mem, int dst, int tag, int context) override;
  Request irecv(const MemRef& mem, int src, int tag, int context) override;
  int split(int parent, int color, int key, const std::vector<int>& members) override;
  void wait(RequestState& request) override;
  bool test(RequestState& request) override;
  void barrier() override;
  bool reduces_on_receive(const MemRef& mem) const override;
  void finished() override;
  // Called on the rank's own thread when it starts: the hang check reads its CPU clock.
  void started();
  void wait_until(const std::function<bool()>& ready, const std::string& what) override;
  bool in_flight(const void* ptr, std::size_t bytes) const override;

  // The way down: takes this rank's unmatched messages out of every mailbox, and waits for
  // those another rank is copying right now. After it no thread touches this rank's memory.
  void cancel_pending() noexcept;

  ThreadHub& hub() { return hub_; }
  int rank() const { return rank_; }

 private:
  std::shared_ptr<ThreadHub::Req> make_request(bool is_send, const MemRef& mem, int peer, int tag,
                                               int context);
  void transfer(ThreadHub::Req& send, ThreadHub::Req& recv);
  // Gives a matched message to its receiver to move, when the receiver waits for a message now
  // and the copy is large enough to be worth a wake-up; false: the caller moves it.
  bool hand_over(const std::shared_ptr<ThreadHub::Req>& send,
                 const std::shared_ptr<ThreadHub::Req>& recv);
  // A receive that finds its large message already sent keeps it to move at its next wait (on
  // anything), after the rank has posted what it sends next: in an exchange the partner is then
  // handed this rank's message at once, and both copy together. False: move it now.
  bool keep_for_later(const std::shared_ptr<ThreadHub::Req>& send,
                      const std::shared_ptr<ThreadHub::Req>& recv);
  // Moves the messages handed to this rank or kept for later (its own thread only). Every way
  // a rank blocks or ends (waits, barrier, poll, test, cancel_pending) calls it first.
  void move_handed() noexcept;
  static void add_into(const MemRef& dst, const MemRef& src);
  void wait_for_match(RequestState& request);
  void barrier_wait();
  // Polls ready() while registered as blocked on `request` (or on `what`), answering aborts
  // and the timeout like a wait for a partner.
  void poll(const std::function<bool()>& ready, const RequestState* request,
            const std::string& what);
  ThreadHub& hub_;
  int rank_;
  std::vector<std::shared_ptr<ThreadHub::Req>>
      pending_;                // posted, not yet seen done (this thread only)
  std::map<int, int> splits_;  // per parent context: how many splits of it this rank made
};

}  // namespace distlab
