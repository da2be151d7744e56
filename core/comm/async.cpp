// async.cpp — nonblocking operations as fibers of the rank's thread (async.hpp says why).
//
// A fiber is a ucontext with a stack of its own. The rank's own stack resumes one with
// swapcontext; the fiber comes back the same way when it must wait (yield) or when its body has
// ended. Under AddressSanitizer and ThreadSanitizer every switch is announced to them (their
// fiber interfaces), so that they follow the stacks.
#include "core/comm/async.hpp"

#include <ucontext.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/comm/comm.hpp"
#include "core/trace/format.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define DISTLAB_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DISTLAB_ASAN_FIBERS 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define DISTLAB_TSAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DISTLAB_TSAN_FIBERS 1
#endif
#endif

#ifdef DISTLAB_ASAN_FIBERS
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old,
                                     size_t* size_old);
}
#endif
#ifdef DISTLAB_TSAN_FIBERS
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
}
#endif

namespace distlab {

namespace {
// A fiber's stack: the collectives' frames, fmt, the trace's spans and an exception's unwinding
// fit in far less; sanitizers make frames several times larger.
constexpr std::size_t kStackBytes = std::size_t{1} << 20;

// Step ids one operation may take: enough for every algorithm in core/collectives on n ranks.
int step_block(int n) {
  return 4 * n + 64;
}
}  // namespace

// One started operation.
struct AsyncTask {
  std::unique_ptr<Comm> comm;       // its own Comm: a context of its own, its own step ids
  std::function<void(Comm&)> body;  // the operation
  std::unique_ptr<char[]> stack;
  ucontext_t context{};
  bool started = false, finished = false, cancelled = false;
  RequestState* waiting = nullptr;  // the message it yielded for (null: none)
  std::exception_ptr error;         // what its body threw (Aborted when cancelled)
#ifdef DISTLAB_ASAN_FIBERS
  void* fake_stack = nullptr;
#endif
#ifdef DISTLAB_TSAN_FIBERS
  void* tsan_fiber = nullptr;
#endif
  ~AsyncTask() {
#ifdef DISTLAB_TSAN_FIBERS
    if (tsan_fiber) __tsan_destroy_fiber(tsan_fiber);
#endif
  }
};

// A Comm's contexts for its operations, opened by its first start (a collective call).
struct AsyncPool {
  std::vector<int> members;  // the Comm's world ranks, in its order: every context's
  std::vector<int> contexts;
  std::vector<std::weak_ptr<AsyncTask>> in_slot;  // the operation each context serves now
  std::uint64_t started = 0;
};

struct AsyncScheduler;
namespace {
thread_local AsyncScheduler* tl_scheduler = nullptr;  // the rank entering a fiber's first frame
}

// A rank's started operations, in the order they started, and the switching between them.
struct AsyncScheduler {
  std::vector<std::shared_ptr<AsyncTask>> running;
  AsyncTask* current = nullptr;  // the fiber on the thread now; null: the rank's own stack
  ucontext_t own{};              // the rank's own stack while a fiber runs
#ifdef DISTLAB_ASAN_FIBERS
  const void* own_bottom = nullptr;
  std::size_t own_size = 0;
#endif
#ifdef DISTLAB_TSAN_FIBERS
  void* own_fiber = nullptr;
#endif

  static void entry();  // a fiber's first frame

  // From the rank's own stack: runs `t` until it yields or ends.
  void resume(AsyncTask& t) {
    DL_CHECK(current == nullptr, "a nonblocking operation cannot resume another");
    current = &t;
    tl_scheduler = this;
#ifdef DISTLAB_TSAN_FIBERS
    own_fiber = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(t.tsan_fiber, 0);
#endif
#ifdef DISTLAB_ASAN_FIBERS
    void* save = nullptr;
    __sanitizer_start_switch_fiber(&save, t.stack.get(), kStackBytes);
#endif
    swapcontext(&own, &t.context);
#ifdef DISTLAB_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(save, nullptr, nullptr);
#endif
    current = nullptr;
  }

  // From a fiber: back to the rank's own stack; returns when resumed. `last`: the fiber has
  // ended and is never resumed again.
  void yield(AsyncTask& t, bool last) {
    (void)last;  // AddressSanitizer's to know
#ifdef DISTLAB_TSAN_FIBERS
    __tsan_switch_to_fiber(own_fiber, 0);
#endif
#ifdef DISTLAB_ASAN_FIBERS
    __sanitizer_start_switch_fiber(last ? nullptr : &t.fake_stack, own_bottom, own_size);
#endif
    swapcontext(&t.context, &own);
#ifdef DISTLAB_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(t.fake_stack, &own_bottom, &own_size);
#endif
  }

  // Whether `t` can move on: not started yet, or its message has arrived (or it is cancelled).
  static bool ready(AsyncTask& t) {
    if (t.finished) return false;
    if (!t.started || t.cancelled || !t.waiting) return true;
    return t.comm->transport().test(*t.waiting);
  }

  void start_fiber(AsyncTask& t) {
    t.stack = std::make_unique<char[]>(kStackBytes);
    getcontext(&t.context);
    t.context.uc_stack.ss_sp = t.stack.get();
    t.context.uc_stack.ss_size = kStackBytes;
    t.context.uc_link = nullptr;  // entry() never returns: it yields for the last time
    makecontext(&t.context, &AsyncScheduler::entry, 0);
#ifdef DISTLAB_TSAN_FIBERS
    t.tsan_fiber = __tsan_create_fiber(0);
#endif
    t.started = true;
  }

  // Whether any started operation can move on now.
  bool any_ready() const {
    for (const auto& t : running)
      if (ready(*t)) return true;
    return false;
  }

  void forget_finished() {
    std::erase_if(running, [](const auto& t) { return t->finished; });
  }
};

void AsyncScheduler::entry() {
  AsyncScheduler& s = *tl_scheduler;
  AsyncTask& t = *s.current;
#ifdef DISTLAB_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(nullptr, &s.own_bottom, &s.own_size);
#endif
  try {
    if (t.cancelled) throw Aborted();
    t.body(*t.comm);
  } catch (...) {
    t.error = std::current_exception();
  }
  t.finished = true;
  t.waiting = nullptr;
  s.yield(t, true);
  std::terminate();  // never resumed
}

// --- Comm's side ------------------------------------------------------------------------------

AsyncHandle Comm::start(std::function<void(Comm&)> body) {
  if (!rank_->async) rank_->async = std::make_shared<AsyncScheduler>();
  AsyncScheduler& s = *rank_->async;
  DL_CHECK(s.current == nullptr, "r{}: a nonblocking operation cannot start another", world_.rank);
  if (!async_pool_) {  // the contexts, once per Comm: every rank of it gets here together
    finish_started();
    async_pool_ = std::make_shared<AsyncPool>();
    for (int r = 0; r < size(); ++r) async_pool_->members.push_back(world_rank(r));
    for (int k = 0; k < kAsyncSlots; ++k)
      async_pool_->contexts.push_back(transport_.split(context_, 0, rank(), async_pool_->members));
    async_pool_->in_slot.resize(kAsyncSlots);
  }
  AsyncPool& pool = *async_pool_;
  const int slot = static_cast<int>(pool.started++ % kAsyncSlots);
  // The slot's last operation must be done before its context serves another.
  if (auto last = pool.in_slot[static_cast<std::size_t>(slot)].lock())
    AsyncHandle(*this, last).wait();

  auto task = std::make_shared<AsyncTask>();
  World w = world_;
  w.ranks_per_node = members_.empty() ? world_.ranks_per_node : 0;
  const std::string name =
      fmt::format("{}{} {}", group_.empty() ? "" : group_ + " ", kAsyncGroup, slot);
  task->comm.reset(new Comm(rank_, w, transport_,
                            async_pool_->contexts[static_cast<std::size_t>(slot)], pool.members,
                            name));
  const int block = step_block(size());
  task->comm->own_steps_ = next_steps(block);
  task->comm->own_steps_end_ = task->comm->own_steps_ + block;
  task->body = std::move(body);
  pool.in_slot[static_cast<std::size_t>(slot)] = task;

  // GPU transports progress on streams, the simulator on its clock: there the operation runs to
  // its end now, on this stack.
  if (world_.device == Device::cuda || kSimulatedBuild) {
    task->started = task->finished = true;
    try {
      task->body(*task->comm);
    } catch (...) {
      task->error = std::current_exception();
    }
    return AsyncHandle(*this, task);
  }
  s.running.push_back(task);
  s.start_fiber(*task);
  s.resume(*task);  // up to its first wait
  s.forget_finished();
  return AsyncHandle(*this, task);
}

int Comm::progress() {
  AsyncScheduler* s = rank_->async.get();
  if (!s || s->current || s->running.empty()) return 0;
  int moved = 0;
  for (bool again = true; again;) {
    again = false;
    const auto running = s->running;  // a resumed operation may start none, but stay safe
    for (const auto& t : running)
      if (AsyncScheduler::ready(*t)) {
        s->resume(*t);
        ++moved;
        again = true;
      }
    s->forget_finished();
  }
  return moved;
}

void Comm::finish_started() {
  AsyncScheduler* s = rank_->async.get();
  if (!s) return;
  DL_CHECK(s->current == nullptr, "r{}: a nonblocking operation cannot wait for the others",
           world_.rank);
  while (!s->running.empty()) AsyncHandle(*this, s->running.front()).wait();
}

void Comm::await(RequestState& r) {
  AsyncScheduler* s = rank_->async.get();
  if (!s) return;
  if (AsyncTask* t = s->current) {  // inside an operation: give the thread back until r is in
    for (;;) {
      if (t->cancelled) throw Aborted();  // the rank unwinds: so does this operation
      if (transport_.test(r)) return;
      t->waiting = &r;
      s->yield(*t, false);
      t->waiting = nullptr;
    }
  }
  // The rank's own wait: its operations move meanwhile. When none can, block (with the
  // transport's backoff, hang check and abort) until r or one of them can; a fresh wait each
  // time, so a long run of steps never sleeps the backoff's longest.
  while (!transport_.test(r)) {
    if (progress() > 0) continue;
    transport_.wait_until([&] { return transport_.test(r) || s->any_ready(); },
                          "a message, while nonblocking operations run");
  }
}

void Comm::check_own_steps() const {
  DL_CHECK(own_steps_ <= own_steps_end_,
           "a nonblocking operation took more than the {} step ids reserved for it",
           step_block(size()));
}

// --- the handle -------------------------------------------------------------------------------

void AsyncHandle::wait() {
  if (!task_) return;
  Comm& comm = *comm_;
  AsyncTask& t = *task_;
  if (!t.finished) {
    AsyncScheduler& s = *comm.rank_->async;
    DL_CHECK(s.current == nullptr, "a nonblocking operation cannot wait for another");
    while (!t.finished) {  // as Comm::await: move what can move, else block until one can
      if (comm.progress() > 0) continue;
      comm.transport_.wait_until([&] { return s.any_ready(); }, "a nonblocking operation");
    }
  }
  const std::exception_ptr error = t.error;
  task_.reset();
  if (error) std::rethrow_exception(error);
}

bool AsyncHandle::test() {
  if (!task_) return true;
  comm_->progress();
  return task_->finished;
}

AsyncHandle& AsyncHandle::operator=(AsyncHandle&& other) noexcept {
  if (this != &other) {
    finish();
    comm_ = other.comm_;
    task_ = std::move(other.task_);
  }
  return *this;
}

AsyncHandle::~AsyncHandle() {
  finish();
}

void AsyncHandle::finish() noexcept {
  if (!task_) return;
  std::shared_ptr<AsyncTask> task = std::move(task_);
  if (task->finished) return;  // its error, if any, was for a wait that never came
  AsyncScheduler& s = *comm_->rank_->async;
  if (std::uncaught_exceptions() == 0) {
    try {  // a handle that leaves its scope unwaited waits there
      AsyncHandle(*comm_, task).wait();
      return;
    } catch (const Aborted&) {
      // Another rank failed: its failure is what the run reports. Cancel below.
    } catch (const std::exception& e) {
      // This operation failed and nobody waited for it: the run must not lose that.
      comm_->check("a nonblocking operation left without a wait ends", false, e.what());
    } catch (...) {
      comm_->check("a nonblocking operation left without a wait ends", false, "unknown error");
    }
  }
  // Unwinding: the operation's pending wait throws Aborted on its own stack, which unwinds it.
  task->cancelled = true;
  if (!task->started) {
    task->finished = true;
  } else if (s.current == nullptr) {
    while (!task->finished) {
      s.resume(*task);
    }
  }
  s.forget_finished();
}

}  // namespace distlab
