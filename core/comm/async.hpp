// async.hpp — nonblocking operations: a collective started now, finished later.
//
//   AsyncHandle h = coll::all_reduce_async(comm, grads, AllReduceAlgo::ring_chunked);
//   ... compute, calling comm.progress() now and then ...
//   h.wait();  // grads now holds the sum
//
// How it moves on. The operation is the blocking code of core/collectives, run on a stack of its
// own (a fiber: ucontext) of the rank's one thread. Where it would block (Comm::wait on a message
// that has not arrived) it hands the thread back to the rank's own code, which resumes it at the
// next place it enters comm: comm.progress(), any wait of its own (while it waits, it runs the
// operations that can move), a handle's wait or test. So an operation advances while the rank
// computes as often as the computation calls progress: MPI's progress rule (a nonblocking
// collective moves only inside the library) made visible. Everything stays on the rank's thread:
// the trace, the memory ledger and the transport see one caller, as with blocking code.
//
// Each operation gets a Comm of its own over the same ranks: one of a few contexts (kAsyncSlots)
// that Comm::start opens on its first call (a collective call: every rank starts the same
// operations in the same order), so its messages never match another's, and step ids of its own
// (a block reserved when it starts). Its messages carry the group name "async k" (k its
// context), which the viewer colours.
//
// A handle waits in its destructor; while the rank unwinds from an exception it cancels instead:
// the operation's pending wait throws Aborted on its own stack, which unwinds it, so nothing it
// owns outlives it and no message lands in memory freed meanwhile (the transport holds back the
// blocks its messages name). Declare the handle after the buffers it uses. Comm::barrier and
// Comm::split first finish every operation started on the rank.
//
// On a GPU rank and under the simulator (SMPI) an operation runs to its end when it starts:
// their transports progress on streams or on the simulated clock, which a fiber cannot drive.
#pragma once

#include <memory>

namespace distlab {

class Comm;
struct AsyncTask;  // async.cpp

// At most this many operations of one Comm run at once: starting one more first finishes the
// oldest (its context is reused).
inline constexpr int kAsyncSlots = 8;

class AsyncHandle {
 public:
  AsyncHandle() = default;
  AsyncHandle(AsyncHandle&&) noexcept = default;
  AsyncHandle& operator=(AsyncHandle&& other) noexcept;  // finishes what this one held first
  AsyncHandle(const AsyncHandle&) = delete;
  AsyncHandle& operator=(const AsyncHandle&) = delete;
  ~AsyncHandle();

  // Runs the rank's operations until this one is done; rethrows what it threw.
  void wait();
  // Lets every operation that can move on do so, then says whether this one is done (its
  // error, if any, is thrown by wait).
  bool test();
  bool valid() const { return task_ != nullptr; }

 private:
  friend class Comm;
  AsyncHandle(Comm& comm, std::shared_ptr<AsyncTask> task) : comm_(&comm), task_(std::move(task)) {}
  void finish() noexcept;  // the destructor's work

  Comm* comm_ = nullptr;
  std::shared_ptr<AsyncTask> task_;
};

}  // namespace distlab
