#include "transport_threads.hpp"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "check.hpp"
#include "clock.hpp"
#include "device.hpp"
#include "peer_copy.hpp"

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
}

ThreadHub::ThreadHub(int size, double deadlock_timeout_s)
    : size_(size), timeout_us_(deadlock_timeout_s * 1e6) {
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

std::shared_ptr<void> ThreadHub::shared(const std::string& key, const std::function<std::shared_ptr<void>()>& make) {
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

void ThreadHub::complete(Req& r) {
  r.t_done = now_us();
  r.done.store(true, std::memory_order_release);
  Slot& owner = *slots_[r.owner];
  { std::lock_guard lk(owner.wake); }  // no lost wake-up: the waiter tests `done` under this lock
  owner.cv.notify_all();
}

void ThreadHub::report_deadlock(int detector) {
  const double now = now_us();
  std::string report = fmt::format(
      "deadlock: rank {} waited longer than --deadlock-timeout ({:.1f} s). Who waits for whom:",
      detector, timeout_us_ * 1e-6);
  for (int r = 0; r < size_; ++r) {
    Slot& s = *slots_[r];
    std::lock_guard lk(s.registry);
    std::string line;
    if (!s.blocked_what.empty())
      line = describe_wait(r, s.blocked_what, s.blocked_since, now);
    else if (s.blocked || s.in_barrier)
      line = describe_wait(r, s.in_barrier ? nullptr : s.blocked, s.blocked_since, now);
    else if (s.finished)
      line = fmt::format("r{} has finished and will send nothing more", r);
    else
      line = fmt::format("r{} is running (not waiting on a message)", r);
    report += "\n  " + line;
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

std::shared_ptr<ThreadHub::Req> ThreadTransport::make_request(bool is_send, const MemRef& mem, int peer, int tag) {
  auto req = std::make_shared<ThreadHub::Req>();
  req->is_send = is_send;
  req->peer = peer;
  req->tag = tag;
  req->mem = mem;
  req->owner = rank_;
  req->t_post = now_us();
  req->mark = mark_post(mem);  // null on a CPU rank: nothing to order
  return req;
}

// A send looks in the receiver's mailbox for a receive it posted from us with this tag.
Request ThreadTransport::isend(const MemRef& mem, int dst, int tag) {
  auto req = make_request(true, mem, dst, tag);
  std::shared_ptr<ThreadHub::Req> match;
  {
    auto& box = *hub_.slots_[dst];
    std::lock_guard lk(box.mailbox);
    match = take_first(box.recvs, [&](const ThreadHub::Req& r) { return r.peer == rank_ && r.tag == tag; });
    if (!match) box.sends.push_back(req);
  }
  if (match) transfer(*req, *match);
  return req;
}

// A receive looks in our own mailbox for a send from `src` with this tag.
Request ThreadTransport::irecv(const MemRef& mem, int src, int tag) {
  auto req = make_request(false, mem, src, tag);
  std::shared_ptr<ThreadHub::Req> match;
  {
    auto& box = *hub_.slots_[rank_];
    std::lock_guard lk(box.mailbox);
    match = take_first(box.sends, [&](const ThreadHub::Req& r) { return r.owner == src && r.tag == tag; });
    if (!match) box.recvs.push_back(req);
  }
  if (match) transfer(*match, *req);
  return req;
}

// Runs on whichever rank matched second; both requests are out of every mailbox by now.
void ThreadTransport::transfer(ThreadHub::Req& send, ThreadHub::Req& recv) {
  if (send.mem.bytes != recv.mem.bytes || send.mem.dtype != recv.mem.dtype) {
    const std::string why = fmt::format(
        "message r{} -> r{} (tag {}) has {} B of {} but the receive expects {} B of {}", send.owner,
        recv.owner, send.tag, send.mem.bytes, to_string(send.mem.dtype), recv.mem.bytes,
        to_string(recv.mem.dtype));
    send.error = why;
    recv.error = why;
  } else if (recv.mark && (send.mem.device == Device::cuda || recv.mem.device == Device::cuda)) {
    // Device memory on either side: enqueue the copy now, both waits poll its end. Only the
    // receiver shows it on its gpu lane: the copy runs on its GPU, with its events.
    try {
      std::lock_guard lk(hub_.slots_[recv.owner]->copies);
      send.copy = recv.copy = start_peer_copy(send.mem, send.mark.get(), recv.mem, *recv.mark,
                                              fmt::format("copy r{} -> r{}", send.owner, recv.owner));
      recv.device_work = recv.copy;
    } catch (const Error& e) {
      send.error = recv.error = e.what();
    }
  } else {
    device_copy(recv.mem.ptr, recv.mem.device, send.mem.ptr, send.mem.device, send.mem.bytes);
  }
  hub_.complete(recv);
  hub_.complete(send);
}

void ThreadTransport::wait(RequestState& request) {
  // Spin briefly first: a partner that is about to match costs microseconds, a sleep tens.
  for (int spin = 0; spin < 200 && !request.done.load(std::memory_order_acquire); ++spin) std::this_thread::yield();
  if (!request.done.load(std::memory_order_acquire)) {
    auto& me = *hub_.slots_[rank_];
    const double since = now_us();
    {
      std::lock_guard lk(me.registry);
      me.blocked = &request;
      me.blocked_since = since;
    }
    auto unregister = [&] {
      std::lock_guard lk(me.registry);
      me.blocked = nullptr;
    };
    for (;;) {
      {
        std::unique_lock lk(me.wake);
        me.cv.wait_for(lk, kWakeSlice, [&] {
          return request.done.load(std::memory_order_acquire) || hub_.aborting();
        });
      }
      if (request.done.load(std::memory_order_acquire)) break;
      if (hub_.aborting()) {
        unregister();
        throw Aborted();
      }
      if (now_us() - since > hub_.timeout_us_) {
        try {
          hub_.report_deadlock(rank_);
        } catch (...) {
          unregister();
          throw;
        }
      }
    }
    unregister();
  }
  if (!request.error.empty()) throw Error(request.error);
  // Matched; on a GPU the copy is enqueued and may still be running. The wait ends when it has
  // finished: received data is then in place for the host and every stream, and a sent
  // buffer may be overwritten (peer_copy.hpp).
  auto& r = static_cast<ThreadHub::Req&>(request);
  if (r.copy) {
    DeviceWork& copy = *r.copy;
    poll([&] { return copy.done(); }, &request, {});
    request.t_done = now_us();  // when this rank saw it done; the gpu lane has when the GPU did it
  }
}

void ThreadTransport::poll(const std::function<bool()>& ready, const RequestState* request, const std::string& what) {
  if (ready()) return;
  auto& me = *hub_.slots_[rank_];
  const double since = now_us();
  {
    std::lock_guard lk(me.registry);
    me.blocked = request;
    me.blocked_what = what;
    me.blocked_since = since;
  }
  auto unregister = [&] {
    std::lock_guard lk(me.registry);
    me.blocked = nullptr;
    me.blocked_what.clear();
  };
  try {
    long spins = 0;
    while (!ready()) {
      if (hub_.aborting()) throw Aborted();
      if (now_us() - since > hub_.timeout_us_) hub_.report_deadlock(rank_);
      poll_backoff(spins);
    }
  } catch (...) {
    unregister();
    throw;
  }
  unregister();
}

void ThreadTransport::wait_until(const std::function<bool()>& ready, const std::string& what) {
  poll(ready, nullptr, what);
}

void ThreadTransport::barrier() {
  auto& me = *hub_.slots_[rank_];
  std::unique_lock lk(hub_.barrier_m_);
  const unsigned long gen = hub_.barrier_generation_;
  if (++hub_.barrier_arrived_ == hub_.size_) {
    hub_.barrier_arrived_ = 0;
    ++hub_.barrier_generation_;
    lk.unlock();
    hub_.barrier_cv_.notify_all();
    return;
  }
  const double since = now_us();
  {
    std::lock_guard rl(me.registry);
    me.in_barrier = true;
    me.blocked_since = since;
  }
  auto unregister = [&] {
    std::lock_guard rl(me.registry);
    me.in_barrier = false;
  };
  for (;;) {
    hub_.barrier_cv_.wait_for(lk, kWakeSlice,
                              [&] { return gen != hub_.barrier_generation_ || hub_.aborting(); });
    if (gen != hub_.barrier_generation_) break;
    if (hub_.aborting()) {
      lk.unlock();
      unregister();
      throw Aborted();
    }
    if (now_us() - since > hub_.timeout_us_) {
      lk.unlock();
      try {
        hub_.report_deadlock(rank_);
      } catch (...) {
        unregister();
        throw;
      }
    }
  }
  lk.unlock();
  unregister();
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

void ThreadTransport::finished() {
  auto& me = *hub_.slots_[rank_];
  std::lock_guard lk(me.registry);
  me.finished = true;
}

}  // namespace distlab
