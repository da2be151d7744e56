#include "core/transport/threads.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/device/allocator.hpp"
#include "core/transport/peer_copy.hpp"

namespace distlab {

struct ThreadHub::Req : RequestState {
  int owner = -1;  // the rank that posted it and waits on it
  // On a rank bound to a GPU: where its stream stood at post time (peer_copy.hpp).
  std::shared_ptr<PostMark> mark;
  // The device copy that moves this message, once matched; both sides' waits poll its end.
  std::shared_ptr<DeviceWork> copy;
};

namespace {
constexpr auto kWakeSlice = std::chrono::milliseconds(50);  // how often a waiter looks at the clock
constexpr double kScanEveryUs = 50e3;   // how often some waiter looks at the whole graph
constexpr double kCpuLookUs = 20e3;     // how often the hang check reads the ranks' CPU clocks
constexpr double kCpuProgressUs = 1e3;  // CPU time a running rank must gain to count as computing
constexpr double kSettleUs = 2e6;  // how long a deadlock report waits for running ranks to block
// Messages from this size on are moved by their receiver when it waits already: a copy this long
// is worth the receiver's wake-up, and the two sides of an exchange then copy at once.
constexpr std::size_t kHandOverBytes = std::size_t{64} << 10;

// A message its receiver moves (hand_over, keep_for_later): large, and host memory on both sides.
bool moved_by_receiver(const RequestState& send, const RequestState& recv) {
  return recv.mem.bytes >= kHandOverBytes && send.mem.device == Device::cpu &&
         recv.mem.device == Device::cpu;
}
}  // namespace

ThreadHub::ThreadHub(int size, double deadlock_timeout_s)
    : size_(size),
      timeout_us_(deadlock_timeout_s * 1e6),
      active_(size),
      last_progress_us_(now_us()) {
  for (int r = 0; r < size; ++r) slots_.push_back(std::make_unique<Slot>());
}

void ThreadHub::fail(int rank, const std::string& message, int exit_code) {
  {
    std::lock_guard lk(fail_m_);
    if (!failed_) {
      failed_ = true;
      failure_ = rank >= 0 ? fmt::format("rank {} failed: {}", rank, message) : message;
      exit_code_ = exit_code;
    }
  }
  aborting_.store(true, std::memory_order_release);
  wake_all();
}

bool ThreadHub::failed() const {
  std::lock_guard lk(fail_m_);
  return failed_;
}
std::string ThreadHub::failure() const {
  std::lock_guard lk(fail_m_);
  return failure_;
}
int ThreadHub::exit_code() const {
  std::lock_guard lk(fail_m_);
  return exit_code_;
}

std::shared_ptr<void> ThreadHub::shared(const std::string& key,
                                        const std::function<std::shared_ptr<void>()>& make) {
  std::lock_guard lk(shared_m_);
  auto& slot = shared_[key];
  if (!slot) slot = make();
  return slot;
}

void ThreadHub::wake_all() {
  for (auto& s : slots_) {
    { std::lock_guard lk(s->wake); }
    s->cv.notify_all();
  }
  { std::lock_guard lk(barrier_m_); }
  barrier_cv_.notify_all();
}

void ThreadHub::progressed() {
  progress_.fetch_add(1, std::memory_order_seq_cst);
  last_progress_us_.store(now_us(), std::memory_order_relaxed);
}

void ThreadHub::complete(Req& r) {
  r.t_done = now_us();
  r.done.store(true, std::memory_order_release);
  progressed();  // before the matching rank can block anywhere: deadlock() relies on it
  Slot& owner = *slots_[r.owner];
  { std::lock_guard lk(owner.wake); }  // no lost wake-up: the waiter tests `done` under this lock
  owner.cv.notify_all();
}

// One line of a report: what rank `r` does now (its registry lock held).
std::string ThreadHub::wait_line(int r, const Slot& s, double now) {
  if (s.finished) return fmt::format("r{} has finished and will send nothing more", r);
  if (!s.blocked_what.empty()) return describe_wait(r, s.blocked_what, s.blocked_since, now);
  if (s.in_barrier) return describe_wait(r, nullptr, s.blocked_since, now);
  if (s.blocked) return describe_wait(r, s.blocked, s.blocked_since, now);
  return fmt::format("r{} is running (not waiting on a message)", r);
}

// While it lives, its rank is blocked on `request` (a message), in the barrier, or (`what`) on
// something that is not a message. Message and barrier waits are nodes of the wait-for graph.
class ThreadHub::Blocked {
 public:
  Blocked(ThreadHub& hub, int rank, const RequestState* request, std::string what,
          bool barrier = false, unsigned long generation = 0)
      : hub_(hub), slot_(*hub.slots_[rank]), in_graph_(what.empty()), since_(now_us()) {
    std::lock_guard lk(slot_.registry);
    slot_.blocked = request;
    slot_.blocked_what = std::move(what);
    slot_.in_barrier = barrier;
    slot_.barrier_generation = generation;
    slot_.blocked_since = since_;
    if (in_graph_) hub_.active_.fetch_sub(1, std::memory_order_seq_cst);
  }
  ~Blocked() {
    std::lock_guard lk(slot_.registry);
    slot_.blocked = nullptr;
    slot_.blocked_what.clear();
    slot_.in_barrier = false;
    if (in_graph_) hub_.active_.fetch_add(1, std::memory_order_seq_cst);
  }
  Blocked(const Blocked&) = delete;
  Blocked& operator=(const Blocked&) = delete;

 private:
  ThreadHub& hub_;
  Slot& slot_;
  bool in_graph_;
  double since_;
};

// The wait-for graph, read rank by rank. Each rank is finished, running (computing, posting, or
// in a wait that is not a message: it may still release someone), blocked on a message from or
// to one peer, or in the barrier (waiting for every rank that has not arrived). A blocked rank is
// stuck when its peer is finished or stuck; a barrier waiter when some rank that has not arrived
// is finished or stuck. The stuck set is the largest one that holds together, found by starting
// from every blocked rank and releasing any whose peer could still act.
//
// The reading is not one instant, so it is checked: a request is completed only by its peer
// posting, every completion bumps `progress_` before the completer can block again, and a rank
// leaves a wait only on a completion or an abort. If `progress_` did not move while the ranks
// were read, every rank read as blocked was blocked at the end of the reading all at once, and
// none of the stuck ones can be released by anyone: a fact, not a guess.
std::optional<ThreadHub::Deadlock> ThreadHub::deadlock() const {
  std::unique_lock scan(scan_m_, std::try_to_lock);
  if (!scan.owns_lock()) return std::nullopt;  // another rank is looking right now
  enum class Kind { running, finished, message, barrier };
  struct Node {
    Kind kind = Kind::running;
    int peer = -1;
    std::string line;
  };
  const std::uint64_t before = progress_.load(std::memory_order_seq_cst);
  const unsigned long generation = barrier_generation_.load(std::memory_order_seq_cst);
  const double now = now_us();
  bool anyone_running = false;
  std::vector<Node> nodes(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    Slot& s = *slots_[static_cast<std::size_t>(r)];
    Node& n = nodes[static_cast<std::size_t>(r)];
    std::lock_guard lk(s.registry);
    n.line = wait_line(r, s, now);
    if (s.finished) {
      n.kind = Kind::finished;
    } else if (!s.blocked_what.empty() || s.handed_count.load(std::memory_order_acquire) > 0) {
      anyone_running = true;  // waits on something not a message, or moves a handed one
    } else if (s.in_barrier && s.barrier_generation == generation) {
      n.kind = Kind::barrier;
    } else if (s.blocked && !s.blocked->done.load(std::memory_order_acquire)) {
      n.kind = Kind::message;
      n.peer = s.blocked->peer;
    } else {
      anyone_running = true;
    }
  }
  if (progress_.load(std::memory_order_seq_cst) != before) return std::nullopt;

  std::vector<char> stuck(nodes.size(), 0);
  for (std::size_t r = 0; r < nodes.size(); ++r)
    stuck[r] = nodes[r].kind == Kind::message || nodes[r].kind == Kind::barrier;
  auto live = [&](std::size_t r) { return nodes[r].kind != Kind::finished && !stuck[r]; };
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < nodes.size(); ++r) {
      if (!stuck[r]) continue;
      bool released = false;
      if (nodes[r].kind == Kind::message) {
        released = live(static_cast<std::size_t>(nodes[r].peer));
      } else {  // the barrier opens if every rank that has not arrived can still arrive
        released = true;
        for (std::size_t o = 0; o < nodes.size() && released; ++o)
          if (nodes[o].kind != Kind::barrier && !live(o)) released = false;
      }
      if (released) {
        stuck[r] = 0;
        changed = true;
      }
    }
  }
  if (std::find(stuck.begin(), stuck.end(), 1) == stuck.end()) return std::nullopt;

  // One edge per stuck rank, to the rank it waits for (for a barrier: the first that has not
  // arrived and cannot), then the first cycle, or the chain that ends at a finished rank.
  auto next = [&](std::size_t r) -> std::size_t {
    if (nodes[r].kind == Kind::message) return static_cast<std::size_t>(nodes[r].peer);
    for (std::size_t o = 0; o < nodes.size(); ++o)
      if (nodes[o].kind != Kind::barrier && !live(o)) return o;
    return r;
  };
  std::vector<std::string> cycles;
  std::vector<int> seen(nodes.size(), -1);  // the walk that first reached a rank
  for (std::size_t start = 0; start < nodes.size(); ++start) {
    if (!stuck[start] || seen[start] >= 0) continue;
    std::vector<std::size_t> path;
    std::size_t r = start;
    while (stuck[r] && seen[r] < 0) {
      seen[r] = static_cast<int>(start);
      path.push_back(r);
      r = next(r);
    }
    std::string text;
    if (stuck[r] && seen[r] == static_cast<int>(start)) {  // a new cycle through r
      const auto from = std::find(path.begin(), path.end(), r);
      for (auto it = from; it != path.end(); ++it) text += fmt::format("r{} -> ", *it);
      text += fmt::format("r{}", r);
    } else if (!stuck[r]) {  // a chain that ends at a finished rank
      for (std::size_t p : path) text += fmt::format("r{} -> ", p);
      text += fmt::format("r{}, which has finished", r);
    }
    if (!text.empty()) cycles.push_back(std::move(text));
  }
  std::string report = "deadlock: these waits can never be matched (wait-for " + cycles.front();
  if (cycles.size() > 1) report += fmt::format("; and {} more like it", cycles.size() - 1);
  report += "). Who waits for whom:";
  for (const Node& n : nodes) report += "\n  " + n.line;
  return Deadlock{std::move(report), !anyone_running};
}

void ThreadHub::end_in_deadlock(Deadlock found) {
  if (reporting_.exchange(true)) return;  // another rank found it first and reports it
  // The verdict is a fact already; the report waits a little (kSettleUs at most) for the ranks
  // that still run to reach their own waits or finish, so that it names every wait.
  const double until = now_us() + kSettleUs;
  while (!found.settled && now_us() < until && !aborting()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (auto again = deadlock()) found = std::move(*again);
  }
  fail(-1, found.report, 3);
}

// The rank slot of the calling thread (set when its rank starts): check() charges the CPU time
// it spends watching to it, so that the hang check does not take watching for work.
thread_local ThreadHub::Slot* ThreadHub::tl_slot_ = nullptr;

namespace {
std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

struct ThreadHub::Watching {  // charges the CPU time of its scope to the thread's slot
  Slot* slot = tl_slot_;
  std::int64_t start = slot ? thread_cpu_ns() : 0;
  ~Watching() {
    if (slot) slot->watch_ns.fetch_add(thread_cpu_ns() - start, std::memory_order_relaxed);
  }
};

void ThreadHub::check(bool eager) {
  const Watching watching;
  const double now = now_us();
  const double last = last_scan_us_.load(std::memory_order_relaxed);
  if (eager || now - last > kScanEveryUs) {
    last_scan_us_.store(now, std::memory_order_relaxed);
    if (auto found = deadlock()) {
      end_in_deadlock(std::move(*found));
      if (aborting()) throw Aborted();
    }
  }
  if (reporting_.load()) return;  // a deadlock is being reported: that is the verdict
  if (quiet_us(now) > timeout_us_) report_hang();
}

// Time since the last progress. A rank that computes is progressing: every few tens of
// milliseconds the look reads the CPU clock of each rank that runs outside any wait (or has
// finished, while its thread lives on to free its memory), and a
// clock that moved (more than a millisecond) counts as progress; so does a rank the kernel
// holds runnable but has not given a core yet (a loaded machine). What is left is a rank that
// neither messages nor computes: asleep, blocked on a lock or a system call, or in a wait the
// graph cannot see (a GPU wait: such waits poll, so their clocks are not read).
double ThreadHub::quiet_us(double now) {
  // Only a fresh look gives a verdict: the caller that makes it. Any other caller gets 0 (no
  // verdict yet), as a figure from an older look could be stale by the time it is read: when
  // one lock holds everyone up (ASan's allocator returning memory for seconds), the looking
  // thread waits too, and what it sees when it is let go is what counts.
  std::unique_lock lk(quiet_m_, std::try_to_lock);
  if (!lk.owns_lock() || now - last_cpu_look_us_ < kCpuLookUs) return 0;
  {
    last_cpu_look_us_ = now;
    bool progress_seen = false;
    for (auto& slot : slots_) {
      Slot& s = *slot;
      std::lock_guard rl(s.registry);
      // Every live rank thread's clock is read, minus what it spent watching (check()): a rank
      // blocked on a message can still work, e.g. in the allocator (ASan's holds its lock
      // for seconds while it returns memory, and the others wait on it), and a finished rank's
      // thread runs until it has freed its memory. Polling waits (GPU) are left out: they spin.
      if (!s.has_clock || s.exited || !s.blocked_what.empty()) continue;
      timespec ts{};
      if (clock_gettime(s.cpu_clock, &ts) != 0) {
        s.exited = s.finished;
        continue;
      }
      const double cpu_us = ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3 -
                            double(s.watch_ns.load(std::memory_order_relaxed)) * 1e-3;
      const bool computed = cpu_us - s.cpu_seen_us > kCpuProgressUs;
      s.cpu_seen_us = cpu_us;
      // A clock that stood still on a running thread the kernel holds runnable: it waits for a
      // core (a thousand ranks on two), it is not stuck. One such rank is enough, so the rest
      // of the look reads clocks only.
      const bool running = !s.finished && !s.blocked && !s.in_barrier;
      if (computed || (!progress_seen && running && thread_runnable(s.tid))) progress_seen = true;
    }
    const double end = now_us();  // the look may have waited: its findings are as of its end
    last_cpu_look_us_ = end;
    if (progress_seen) last_progress_us_.store(end, std::memory_order_relaxed);
    return end - last_progress_us_.load(std::memory_order_relaxed);
  }
}

bool thread_runnable(pid_t tid) {
  if (tid <= 0) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", int(tid));
  // System calls only, no allocation: the look must not wait on the allocator's lock, which
  // the ranks it looks at may be waiting on (or holding, for seconds, under ASan).
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char line[512];
  const ssize_t got = ::read(fd, line, sizeof line - 1);
  ::close(fd);
  if (got <= 0) return false;
  line[got] = 0;
  const char* close = std::strrchr(line, ')');  // "tid (name) S ...": the name may hold spaces
  return close && close[1] == ' ' && (close[2] == 'R' || close[2] == 'D');
}

bool ThreadHub::worth_a_look(int rank, int peer) const {
  if (active_.load(std::memory_order_seq_cst) == 0) return true;
  if (peer < 0) return false;
  Slot& p = *slots_[static_cast<std::size_t>(peer)];
  std::lock_guard lk(p.registry);
  return p.finished || (p.blocked && p.blocked_what.empty() && p.blocked->peer == rank &&
                        !p.blocked->done.load(std::memory_order_acquire));
}

void ThreadHub::report_hang() {
  const double now = now_us();
  std::string report = fmt::format(
      "no progress for {:.1f} s (--deadlock-timeout {:.1f}): no message was matched, no rank "
      "finished and no "
      "rank computed, yet no wait is a deadlock. A rank is stuck outside the messages (asleep, on "
      "a lock, in a "
      "system call) or waits on the GPU; raise --deadlock-timeout if that wait is only slow. Who "
      "waits for whom:",
      (now - last_progress_us_.load()) * 1e-6, timeout_us_ * 1e-6);
  for (int r = 0; r < size_; ++r) {
    Slot& s = *slots_[static_cast<std::size_t>(r)];
    std::lock_guard lk(s.registry);
    report += "\n  " + wait_line(r, s, now);
  }
  fail(-1, report, 3);
  throw Aborted();
}

namespace {

// Removes and returns the first request in `queue` that `matches`, in posting order.
template <class Queue, class Pred>
auto take_first(Queue& queue, Pred matches) -> typename Queue::value_type {
  for (auto it = queue.begin(); it != queue.end(); ++it)
    if (matches(**it)) {
      auto found = *it;
      queue.erase(it);
      return found;
    }
  return nullptr;
}

}  // namespace

std::shared_ptr<ThreadHub::Req> ThreadTransport::make_request(bool is_send, const MemRef& mem,
                                                              int peer, int tag, int context) {
  auto req = new_request<ThreadHub::Req>(is_send, mem, peer, tag, context);
  req->owner = rank_;
  req->mark = mark_post(mem);  // null on a CPU rank: nothing to order
  // Forget the requests that are over; the rest may still be touched by another rank.
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [](const auto& r) {
                                  return r->done.load(std::memory_order_acquire) &&
                                         (!r->copy || r->copy->done());
                                }),
                 pending_.end());
  pending_.push_back(req);
  return req;
}

// A send looks in the receiver's mailbox for a receive it posted from us with this tag, in this
// context.
Request ThreadTransport::isend(const MemRef& mem, int dst, int tag, int context) {
  auto req = make_request(true, mem, dst, tag, context);
  std::shared_ptr<ThreadHub::Req> match;
  {
    auto& box = *hub_.slots_[dst];
    std::lock_guard lk(box.mailbox);
    match = take_first(box.recvs, [&](const ThreadHub::Req& r) {
      return r.peer == rank_ && r.tag == tag && r.context == context;
    });
    if (!match) box.sends.push_back(req);
  }
  if (match && !hand_over(req, match)) transfer(*req, *match);
  return req;
}

// A receive looks in our own mailbox for a send from `src` with this tag, in this context.
Request ThreadTransport::irecv(const MemRef& mem, int src, int tag, int context) {
  auto req = make_request(false, mem, src, tag, context);
  std::shared_ptr<ThreadHub::Req> match;
  {
    auto& box = *hub_.slots_[rank_];
    std::lock_guard lk(box.mailbox);
    match = take_first(box.sends, [&](const ThreadHub::Req& r) {
      return r.owner == src && r.tag == tag && r.context == context;
    });
    if (!match) box.recvs.push_back(req);
  }
  if (match && !keep_for_later(match, req)) transfer(*match, *req);
  return req;
}

// Every member asks the hub for the id of (parent, the how-manieth split of it, color): the
// first to ask makes it, the others get the same. Nothing else is shared: the hub's mailboxes
// already hold every rank, and matching compares the context.
int ThreadTransport::split(int parent, int color, int /*key*/,
                           const std::vector<int>& /*members*/) {
  const int nth = splits_[parent]++;
  auto id = std::static_pointer_cast<int>(hub_.shared(
      fmt::format("context {} {} {}", parent, nth, color),
      [this] { return std::shared_ptr<void>(std::make_shared<int>(hub_.next_context_++)); }));
  return *id;
}

bool ThreadTransport::reduces_on_receive(const MemRef& mem) const {
  return mem.device == Device::cpu && (mem.dtype == DType::f32 || mem.dtype == DType::f64);
}

namespace {
template <class T>
void add_elements(void* dst, const void* src, std::size_t bytes) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  const std::size_t n = bytes / sizeof(T);
  for (std::size_t i = 0; i < n; ++i) d[i] += s[i];  // ops::add's sum: the same bits
}
}  // namespace

// A receive posted with MemRef::accumulate: the copy becomes dst += src, in one pass.
void ThreadTransport::add_into(const MemRef& dst, const MemRef& src) {
  if (dst.dtype == DType::f32)
    add_elements<float>(dst.ptr, src.ptr, src.bytes);
  else
    add_elements<double>(dst.ptr, src.ptr, src.bytes);
}

// Runs on whichever rank matched second; both requests are out of every mailbox by now, and
// both owners wait (even on their way down) until both are complete, which this always does.
void ThreadTransport::transfer(ThreadHub::Req& send, ThreadHub::Req& recv) {
  try {
    if (send.mem.bytes != recv.mem.bytes || send.mem.dtype != recv.mem.dtype) {
      const std::string why = fmt::format(
          "message r{} -> r{} (tag {}) has {} B of {} but the receive expects {} B of {}",
          send.owner, recv.owner, send.tag, send.mem.bytes, to_string(send.mem.dtype),
          recv.mem.bytes, to_string(recv.mem.dtype));
      send.error = why;
      recv.error = why;
    } else if (recv.mark && (send.mem.device == Device::cuda || recv.mem.device == Device::cuda)) {
      // Device memory on either side: enqueue the copy now, both waits poll its end. Only the
      // receiver shows it on its gpu lane: the copy runs on its GPU, with its events.
      std::lock_guard lk(hub_.slots_[recv.owner]->copies);
      send.copy = recv.copy =
          start_peer_copy(send.mem, send.mark.get(), recv.mem, *recv.mark,
                          fmt::format("copy r{} -> r{}", send.owner, recv.owner));
      recv.device_work = recv.copy;
    } else if (recv.mem.accumulate) {
      add_into(recv.mem, send.mem);
    } else {
      device_copy(recv.mem.ptr, recv.mem.device, send.mem.ptr, send.mem.device, send.mem.bytes);
    }
  } catch (const std::exception& e) {
    send.error = recv.error = e.what();
  }
  hub_.complete(recv);
  hub_.complete(send);
}

bool ThreadTransport::hand_over(const std::shared_ptr<ThreadHub::Req>& send,
                                const std::shared_ptr<ThreadHub::Req>& recv) {
  if (!moved_by_receiver(*send, *recv)) return false;
  ThreadHub::Slot& to = *hub_.slots_[static_cast<std::size_t>(recv->owner)];
  {
    std::lock_guard lk(to.registry);
    if (!to.in_wait) return false;  // it computes: the sender copies, as for small messages
    to.handed.emplace_back(send, recv);
    to.handed_count.fetch_add(1, std::memory_order_release);
  }
  hub_.handed_over_.fetch_add(1, std::memory_order_relaxed);
  hub_.progressed();
  { std::lock_guard lk(to.wake); }  // no lost wake-up: the waiter tests the count under this lock
  to.cv.notify_all();
  return true;
}

bool ThreadTransport::keep_for_later(const std::shared_ptr<ThreadHub::Req>& send,
                                     const std::shared_ptr<ThreadHub::Req>& recv) {
  if (!moved_by_receiver(*send, *recv)) return false;
  ThreadHub::Slot& me = *hub_.slots_[rank_];
  std::lock_guard lk(me.registry);
  me.handed.emplace_back(send, recv);
  me.handed_count.fetch_add(1, std::memory_order_release);
  return true;
}

bool ThreadTransport::test(RequestState& request) {
  move_handed();
  return request.done.load(std::memory_order_acquire);
}

void ThreadTransport::move_handed() noexcept {
  auto& me = *hub_.slots_[rank_];
  if (me.handed_count.load(std::memory_order_acquire) == 0) return;
  std::vector<std::pair<std::shared_ptr<ThreadHub::Req>, std::shared_ptr<ThreadHub::Req>>> work;
  {
    std::lock_guard lk(me.registry);
    work.swap(me.handed);
  }
  for (auto& [send, recv] : work) {
    transfer(*send, *recv);  // completes both; only then may the graph see this rank blocked
    me.handed_count.fetch_sub(1, std::memory_order_release);
  }
}

bool ThreadTransport::in_flight(const void* ptr, std::size_t bytes) const {
  const auto* begin = static_cast<const char*>(ptr);
  for (const auto& r : pending_) {
    if (r->done.load(std::memory_order_acquire) && (!r->copy || r->copy->done())) continue;
    const auto* mine = static_cast<const char*>(r->mem.ptr);
    if (mine < begin + bytes && begin < mine + r->mem.bytes) return true;
  }
  return false;
}

void ThreadTransport::cancel_pending() noexcept {
  move_handed();  // messages kept for later: their senders wait; this rank's memory is still here
  for (const auto& r : pending_) {
    if (!r->done.load(std::memory_order_acquire)) {
      auto& box = *hub_.slots_[static_cast<std::size_t>(r->is_send ? r->peer : rank_)];
      bool taken_out = false;
      {
        std::lock_guard lk(box.mailbox);
        auto& queue = r->is_send ? box.sends : box.recvs;
        if (auto it = std::find(queue.begin(), queue.end(), r); it != queue.end()) {
          queue.erase(it);
          taken_out = true;
        }
      }
      if (taken_out) {
        r->error = "cancelled: the rank stopped";
        r->done.store(true, std::memory_order_release);
        continue;
      }
      // Not in a mailbox and not done: another rank's thread is copying it right now.
      while (!r->done.load(std::memory_order_acquire)) std::this_thread::yield();
    }
    if (r->copy) {  // a device copy may still run into or out of this rank's memory
      const double until = now_us() + 10e6;
      long spins = 0;
      while (!r->copy->done() && now_us() < until) poll_backoff(spins);
    }
  }
  pending_.clear();
}

void ThreadTransport::wait(RequestState& request) {
  try {
    wait_for_match(request);
    if (!request.error.empty()) throw Error(request.error);
    // Matched; on a GPU the copy is enqueued and may still be running. The wait ends when it
    // has finished: received data is then in place for the host and every stream, and a sent
    // buffer may be overwritten (peer_copy.hpp).
    auto& r = static_cast<ThreadHub::Req&>(request);
    if (r.copy) {
      DeviceWork& copy = *r.copy;
      poll([&] { return copy.done(); }, &request, {});
      request.t_done =
          now_us();  // when this rank saw it done; the gpu lane has when the GPU did it
    }
  } catch (...) {
    cancel_pending();  // the rank unwinds now: nobody may write into its buffers after this
    throw;
  }
}

void ThreadTransport::wait_for_match(RequestState& request) {
  auto& me = *hub_.slots_[rank_];
  // While this rank waits, senders may hand it large messages to move (hand_over). It moves
  // them, and those its receives kept for later, as they come and when it leaves, however it
  // leaves: after in_wait is cleared no sender hands it any more.
  struct Waiting {
    ThreadTransport& t;
    ThreadHub::Slot& slot;
    explicit Waiting(ThreadTransport& tt, ThreadHub::Slot& s) : t(tt), slot(s) {
      std::lock_guard lk(slot.registry);
      slot.in_wait = true;
    }
    ~Waiting() {
      {
        std::lock_guard lk(slot.registry);
        slot.in_wait = false;
      }
      t.move_handed();
    }
  } waiting(*this, me);
  auto handed = [&] { return me.handed_count.load(std::memory_order_acquire) > 0; };
  // Spin briefly first: a partner that is about to match costs microseconds, a sleep tens.
  for (int spin = 0; spin < 200 && !request.done.load(std::memory_order_acquire); ++spin) {
    move_handed();
    if (!request.done.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  if (request.done.load(std::memory_order_acquire)) return;
  ThreadHub::Blocked blocked(hub_, rank_, &request, {});
  hub_.check(hub_.worth_a_look(rank_, request.peer));
  for (;;) {
    {
      std::unique_lock lk(me.wake);
      me.cv.wait_for(lk, kWakeSlice, [&] {
        return request.done.load(std::memory_order_acquire) || hub_.aborting() || handed();
      });
    }
    move_handed();
    if (request.done.load(std::memory_order_acquire)) return;
    if (hub_.aborting()) throw Aborted();
    hub_.check(false);
  }
}

void ThreadTransport::poll(const std::function<bool()>& ready, const RequestState* request,
                           const std::string& what) {
  move_handed();  // before blocking: a sender may wait for one of them
  if (ready()) return;
  ThreadHub::Blocked blocked(hub_, rank_, request, what);
  long spins = 0;
  while (!ready()) {
    if (hub_.aborting()) throw Aborted();
    hub_.check(false);
    poll_backoff(spins);
  }
}

void ThreadTransport::wait_until(const std::function<bool()>& ready, const std::string& what) {
  try {
    poll(ready, nullptr, what);
  } catch (...) {
    cancel_pending();
    throw;
  }
}

void ThreadTransport::barrier() {
  try {
    barrier_wait();
  } catch (...) {
    cancel_pending();
    throw;
  }
}

void ThreadTransport::barrier_wait() {
  move_handed();  // before blocking: a sender may wait for one of them
  std::unique_lock lk(hub_.barrier_m_);
  const unsigned long gen = hub_.barrier_generation_.load();
  if (++hub_.barrier_arrived_ == hub_.size_) {
    hub_.barrier_arrived_ = 0;
    hub_.barrier_generation_.fetch_add(1);
    hub_.progressed();
    lk.unlock();
    hub_.barrier_cv_.notify_all();
    return;
  }
  lk.unlock();
  ThreadHub::Blocked blocked(hub_, rank_, nullptr, {}, true, gen);
  hub_.check(hub_.worth_a_look(rank_, -1));
  lk.lock();
  for (;;) {
    hub_.barrier_cv_.wait_for(lk, kWakeSlice,
                              [&] { return gen != hub_.barrier_generation_ || hub_.aborting(); });
    if (gen != hub_.barrier_generation_) return;
    if (hub_.aborting()) throw Aborted();
    lk.unlock();
    hub_.check(false);
    lk.lock();
  }
}

bool ThreadHub::in_wait(int rank) const {
  Slot& slot = *slots_[static_cast<std::size_t>(rank)];
  std::lock_guard lk(slot.registry);
  return slot.in_wait;
}

bool ThreadHub::others_finished(int rank) const {
  for (int r = 0; r < size_; ++r) {
    if (r == rank) continue;
    auto& s = *slots_[static_cast<std::size_t>(r)];
    std::lock_guard lk(s.registry);
    if (!s.finished) return false;
  }
  return true;
}

void ThreadTransport::started() {
  auto& me = *hub_.slots_[rank_];
  std::lock_guard lk(me.registry);
  me.has_clock = pthread_getcpuclockid(pthread_self(), &me.cpu_clock) == 0;
  me.tid = pid_t(syscall(SYS_gettid));
  ThreadHub::tl_slot_ = &me;
}

void ThreadTransport::finished() {
  cancel_pending();  // messages it posted and never waited for: no partner may match them now
  ThreadHub::tl_slot_ = nullptr;
  auto& me = *hub_.slots_[rank_];
  {
    std::lock_guard lk(me.registry);
    me.finished = true;
  }
  hub_.active_.fetch_sub(1, std::memory_order_seq_cst);
  hub_.progressed();
  // A rank that waits for this one now waits forever: say so at once.
  if (!hub_.aborting())
    if (auto found = hub_.deadlock()) hub_.end_in_deadlock(std::move(*found));
}

}  // namespace distlab
