// symmetric.cpp — windows every rank of a group maps (symmetric.hpp).
#include "core/transport/symmetric.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/base/units.hpp"
#include "core/transport/segment.hpp"

namespace distlab {

namespace {

constexpr std::size_t kFlagLine = 128;                    // a flag's own cache lines
constexpr std::size_t kFlags = kWindowFlags * kFlagLine;  // the flags, at each window's head
constexpr int kTagName = kMaxTag + 3;                     // the segment's name: no lesson's tag
// Polls of a flag on the spot before the transport's wait, where every rank of the group has a
// core: the transport's wait checks its rings and the clock as it polls, which costs a flag
// handed between cores several times over (0.1 us against 0.5 measured for an 8-byte
// all-reduce). With ranks sharing cores a waiting rank yields at once.
constexpr long kSpinsBeforeWait = 4096;

std::size_t whole_lines(std::size_t n) {
  return (n + kFlagLine - 1) / kFlagLine * kFlagLine;
}

// The group's requests, on the transport itself: no trace, no counts.
void send_bytes(Transport& t, const void* data, std::size_t n, int peer, int context) {
  auto r =
      t.isend(MemRef{const_cast<void*>(data), n, DType::u8, Device::cpu}, peer, kTagName, context);
  t.wait(*r);
}
void recv_bytes(Transport& t, void* data, std::size_t n, int peer, int context) {
  auto r = t.irecv(MemRef{data, n, DType::u8, Device::cpu}, peer, kTagName, context);
  t.wait(*r);
}

}  // namespace

SymmetricWindows::SymmetricWindows(Transport& transport, int context,
                                   const std::vector<int>& members, int me, std::size_t bytes,
                                   int regions)
    : transport_(transport), members_(members), me_(me), bytes_(bytes), regions_(regions) {
  const int n = size();
  DL_CHECK(me >= 0 && me < n, "rank {} is not one of the group's {}", me, n);
  DL_CHECK(regions >= 1 && bytes >= 8,
           "windows of {} regions of {} B: a region holds at least one 8-byte word", regions,
           bytes);
  stride_ = kFlags + whole_lines(bytes) * std::size_t(regions);
  spins_ = long(n) <= long(std::thread::hardware_concurrency()) ? kSpinsBeforeWait : 0;
  total_ = stride_ * std::size_t(n);

  static std::atomic<int> opened{0};
  char name[96] = {};
  if (me == 0) {
    remove_stale_segments();
    std::snprintf(name, sizeof name, "/distlab-win-%d-%d", int(::getpid()), opened++);
    try {
      make_segment(name, total_);
    } catch (const Error& e) {
      throw Error(fmt::format("symmetric windows ({} ranks x {} regions of {}): {}", n, regions,
                              format_bytes(double(bytes)), e.what()));
    }
    for (int r = 1; r < n; ++r) send_bytes(transport, name, sizeof name, members[r], context);
  } else {
    recv_bytes(transport, name, sizeof name, members[0], context);
  }
  // Every rank maps it, or says why it could not; the first unlinks the name once all have
  // answered, so that nothing stays in /dev/shm either way.
  std::string failed;
  base_ = static_cast<unsigned char*>(map_segment(name, total_, &failed));
  char ok = failed.empty() ? 1 : 0;
  if (me == 0) {
    int first_bad = ok ? -1 : 0;
    for (int r = 1; r < n; ++r) {
      char theirs = 0;
      recv_bytes(transport, &theirs, 1, members[std::size_t(r)], context);
      if (!theirs && first_bad < 0) first_bad = r;
    }
    ::shm_unlink(name);
    if (first_bad > 0)
      failed = fmt::format("rank {} of the group could not map the windows", first_bad);
  } else {
    send_bytes(transport, &ok, 1, members[0], context);
  }
  if (!failed.empty()) {
    unmap_segment(base_, total_);
    base_ = nullptr;
    throw Error("symmetric windows: " + failed);
  }
}

SymmetricWindows::~SymmetricWindows() {
  unmap_segment(base_, total_);
}

unsigned char* SymmetricWindows::region(int r, int k) const {
  return base_ + stride_ * std::size_t(r) + kFlags + whole_lines(bytes_) * std::size_t(k);
}

void SymmetricWindows::record(SpanEvent::Kind kind, int r, std::size_t n, double t0) {
  if (!recorder_ || n == 0) return;
  SpanEvent e;
  e.kind = kind;
  e.lane = kind == SpanEvent::Kind::load ? Lane::recv : Lane::send;
  e.name = kind == SpanEvent::Kind::load ? "load" : "store";
  e.t1 = now_us();
  e.t0 = t0 < 0 ? e.t1 : t0;
  e.peer = members_[std::size_t(r)];
  e.bytes = n;
  e.meta.step = step_;
  recorder_->span(std::move(e));
}

void SymmetricWindows::count_read(int r, std::size_t n, double t0) {
  (r == me_ ? counts_.read_local : counts_.read_remote) += n;
  record(SpanEvent::Kind::load, r, n, t0);
}

void SymmetricWindows::count_written(int r, std::size_t n, double t0) {
  (r == me_ ? counts_.written_local : counts_.written_remote) += n;
  record(SpanEvent::Kind::store, r, n, t0);
}

void SymmetricWindows::store(int r, int k, std::size_t offset, const void* from, std::size_t n) {
  DL_CHECK(offset + n <= bytes_, "a store of {} B at {} past a region of {} B", n, offset, bytes_);
  const double t0 = trace_clock();
  if (n) std::memcpy(region(r, k) + offset, from, n);
  count_written(r, n, t0);
}

void SymmetricWindows::load(int r, int k, std::size_t offset, void* to, std::size_t n) {
  DL_CHECK(offset + n <= bytes_, "a load of {} B at {} past a region of {} B", n, offset, bytes_);
  const double t0 = trace_clock();
  if (n) std::memcpy(to, region(r, k) + offset, n);
  count_read(r, n, t0);
}

std::atomic<std::uint64_t>& SymmetricWindows::flag_word(int r, int which) const {
  return *reinterpret_cast<std::atomic<std::uint64_t>*>(base_ + stride_ * std::size_t(r) +
                                                        kFlagLine * std::size_t(which));
}

std::uint64_t SymmetricWindows::flag(int r, int which) const {
  return flag_word(r, which).load(std::memory_order_acquire);
}

void SymmetricWindows::raise(int which, std::uint64_t value) {
  flag_word(me_, which).store(value, std::memory_order_release);
  ++counts_.flags;
}

void SymmetricWindows::wait_flag(int r, int which, std::uint64_t value) {
  ++counts_.syncs;
  const double t0 = trace_clock();
  const auto& word = flag_word(r, which);
  await([&] { return word.load(std::memory_order_acquire) >= value; },
        [&] {
          return fmt::format("r{}'s window flag {} to reach {}", members_[std::size_t(r)], which,
                             value);
        });
  if (recorder_) {
    SpanEvent e;
    e.name = fmt::format("wait r{} flag {}", members_[std::size_t(r)], which);
    e.t0 = t0;
    e.t1 = now_us();
    recorder_->span(std::move(e));
  }
}

}  // namespace distlab
