// shm.cpp — messages through one shared-memory segment (shm.hpp).
#include "core/transport/shm.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/base/mix.hpp"
#include "core/base/units.hpp"
#include "core/transport/segment.hpp"

namespace distlab {

namespace {

constexpr std::size_t kLine = 128;  // two cache lines: the adjacent-line prefetcher stays out
constexpr std::uint64_t kMagic = 0x64697374'6c61622dull;  // "distlab-"
constexpr std::size_t kChunk = 64 * 1024;  // bytes copied between two updates of head or tail
constexpr long kSpins = 256;  // polls before a wait yields the core, when every rank has one

enum : std::uint32_t { kComputing = 0, kWaiting = 1, kFinished = 2 };
constexpr std::uint32_t kDeclared = 0x80000000u;  // in Header::hang: the report is out

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<double>::is_always_lock_free);  // shared by processes: no lock inside

struct alignas(kLine) Header {
  std::atomic<std::uint64_t> magic;  // stored last by rank 0: the rest is laid out
  std::int32_t size;
  std::uint64_t ring_bytes;
  std::atomic<std::uint32_t> hang;  // 0, or 1 + the rank declaring the run hung (| kDeclared)
};

struct alignas(kLine) Barrier {
  std::atomic<std::uint32_t> arrived;
  alignas(kLine) std::atomic<std::uint64_t> generation;
};

struct alignas(kLine) RankState {
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint32_t> state;     // kComputing, kWaiting, kFinished
  std::atomic<double> since_us;         // when the wait began
  std::atomic<double> progress_us;      // when this rank last completed a message or a barrier
  std::atomic<std::uint32_t> line_seq;  // odd while `line` is being written
  char line[200];                       // the wait, without its duration
};

struct alignas(kLine) RingControl {
  std::atomic<std::uint64_t> head;                 // bytes the sender has written, ever
  alignas(kLine) std::atomic<std::uint64_t> tail;  // bytes the receiver has read, ever
};

constexpr std::size_t kPage = 4096;
std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

std::size_t states_offset() {
  return round_up(sizeof(Header) + sizeof(Barrier), kLine);
}
std::size_t rings_offset(int size) {
  return round_up(states_offset() + sizeof(RankState) * std::size_t(size), kPage);
}
std::size_t ring_stride(std::size_t ring_bytes) {
  return kPage + ring_bytes;
}

void copy_in(unsigned char* ring, std::size_t cap, std::uint64_t pos, const void* from,
             std::size_t n) {
  const std::size_t at = pos & (cap - 1), first = std::min(n, cap - at);
  std::memcpy(ring + at, from, first);
  std::memcpy(ring, static_cast<const unsigned char*>(from) + first, n - first);
}

void copy_out(void* to, const unsigned char* ring, std::size_t cap, std::uint64_t pos,
              std::size_t n) {
  const std::size_t at = pos & (cap - 1), first = std::min(n, cap - at);
  std::memcpy(to, ring + at, first);
  std::memcpy(static_cast<unsigned char*>(to) + first, ring, n - first);
}

// Times kept in the rank blocks are the wall clock's: ranks in a cluster's namespaces each have
// a monotonic clock of their own (scripts/cluster.sh), the wall clock is one.
double wall_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

namespace {

// The parts of the mapped segment, found from its base.
struct View {
  Header* header;
  Barrier* barrier;
  RankState* states;
  unsigned char* rings;
  std::size_t ring_bytes;
  int size;

  View(unsigned char* base, int n, std::size_t ring)
      : header(reinterpret_cast<Header*>(base)),
        barrier(reinterpret_cast<Barrier*>(base + sizeof(Header))),
        states(reinterpret_cast<RankState*>(base + states_offset())),
        rings(base + rings_offset(n)),
        ring_bytes(ring),
        size(n) {}
  RingControl& control(int src, int dst) const {
    return *reinterpret_cast<RingControl*>(rings + ring_stride(ring_bytes) *
                                                       (std::size_t(src) * size + dst));
  }
  unsigned char* data(int src, int dst) const {
    return rings + ring_stride(ring_bytes) * (std::size_t(src) * size + dst) + kPage;
  }
};

}  // namespace

// A message's header in the ring; its bytes follow.
struct ShmTransport::Frame {
  std::uint32_t key;  // the context's
  std::int32_t tag;
  std::uint64_t bytes;
  std::uint32_t dtype;
  std::uint32_t unused;
  std::uint64_t unused2;
};

struct ShmTransport::Req : RequestState {
  std::uint32_t key = 0;
  bool header_written = false;
  std::size_t moved = 0;  // bytes of the message written (send)
};

// A message that arrived before its receive: its bytes, whole or still arriving.
struct ShmTransport::Unexpected {
  Frame frame{};
  std::vector<unsigned char> data;
  bool complete = false;
  std::shared_ptr<Req> taken_by;  // a receive that matched it while it was still arriving
  bool dropped = false;           // a receive of another size matched it while it arrived
};

// The frame arriving from one source: where its bytes go.
struct ShmTransport::Incoming {
  bool active = false;
  Frame frame{};
  std::size_t got = 0;
  unsigned char* to = nullptr;  // null: the bytes are dropped (a receive of another size)
  std::shared_ptr<Req> recv;
  std::shared_ptr<Unexpected> unexpected;
};

std::size_t shm_ring_bytes(int size) {
  std::size_t ring = std::size_t(1) << 20;
  const std::size_t pairs = std::size_t(size) * std::size_t(size);
  while (ring > (std::size_t(64) << 10) && ring_stride(ring) * pairs > (std::size_t(40) << 20))
    ring /= 2;
  return ring;
}

std::size_t shm_segment_bytes(int size, std::size_t ring_bytes) {
  return rings_offset(size) + ring_stride(ring_bytes) * std::size_t(size) * std::size_t(size);
}

ShmTransport::ShmTransport(const ShmSetup& setup, Transport& control,
                           const std::function<void()>& barrier)
    : setup_(setup), control_(control) {
  const int n = setup.size;
  DL_CHECK(n >= 1 && setup.rank >= 0 && setup.rank < n, "rank {} of {} is not a rank", setup.rank,
           n);
  DL_CHECK(!setup.name.empty() && setup.name[0] == '/', "the segment's name '{}' must start with /",
           setup.name);
  ring_bytes_ = setup.ring_bytes ? setup.ring_bytes : shm_ring_bytes(n);
  DL_CHECK((ring_bytes_ & (ring_bytes_ - 1)) == 0 && ring_bytes_ >= 1024,
           "a ring of {} B: it must be a power of two of at least 1 KiB", ring_bytes_);
  segment_bytes_ = shm_segment_bytes(n, ring_bytes_);

  const std::string where = fmt::format("the shared-memory transport ({})",
                                        n == 1 ? "1 rank" : fmt::format("{} ranks", n));
  if (setup.rank == 0) {
    remove_stale_segments();  // runs under mpirun that died before unlinking
    try {
      make_segment(setup.name, segment_bytes_);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", where, e.what()));
    }
    std::string why;
    base_ = static_cast<unsigned char*>(map_segment(setup.name, segment_bytes_, &why));
    if (!base_) {
      ::shm_unlink(setup.name.c_str());
      throw Error(fmt::format("{}: {}", where, why));
    }
    const View v(base_, n, ring_bytes_);
    new (v.header) Header{};
    v.header->size = n;
    v.header->ring_bytes = ring_bytes_;
    new (v.barrier) Barrier{};
    for (int r = 0; r < n; ++r) new (&v.states[r]) RankState{};
    for (int src = 0; src < n; ++src)
      for (int dst = 0; dst < n; ++dst) new (&v.control(src, dst)) RingControl{};
    v.header->magic.store(kMagic, std::memory_order_release);
  }
  barrier();  // rank 0 has laid the segment out
  // A rank that cannot map it still comes to the second barrier, so that rank 0 unlinks the
  // name, and fails after.
  std::string failed;
  if (setup.rank != 0) {
    base_ = static_cast<unsigned char*>(map_segment(setup.name, segment_bytes_, &failed));
    if (base_ && reinterpret_cast<Header*>(base_)->magic.load(std::memory_order_acquire) != kMagic)
      failed = fmt::format("/dev/shm{} is not this run's segment", setup.name);
  }
  if (failed.empty()) {
    RankState& me = View(base_, n, ring_bytes_).states[setup.rank];
    me.pid.store(::getpid(), std::memory_order_relaxed);
    me.progress_us.store(wall_us(), std::memory_order_release);
  }
  barrier();  // every rank has mapped it, or failed to
  if (setup.rank == 0) ::shm_unlink(setup.name.c_str());
  if (!failed.empty()) throw Error(fmt::format("{}: {}", where, failed));

  // Ranks that share cores yield at once: a spinning rank holds the core its peer needs.
  spin_budget_ = long(n) <= long(std::thread::hardware_concurrency()) ? kSpins : 0;
  contexts_.push_back(Context{});
  sends_.resize(std::size_t(n));
  recvs_.resize(std::size_t(n));
  unexpected_.resize(std::size_t(n));
  for (int r = 0; r < n; ++r) incoming_.push_back(std::make_unique<Incoming>());
}

ShmTransport::~ShmTransport() {
  unmap_segment(base_, segment_bytes_);
}

// --- posting -------------------------------------------------------------------------------------

Request ShmTransport::post(bool is_send, const MemRef& mem, int peer, int tag, int context) {
  DL_CHECK(mem.device == Device::cpu,
           "the shared-memory transport moves host memory; this {} is on the GPU",
           is_send ? "send" : "receive");
  DL_CHECK(peer >= 0 && peer < size(), "r{}: no rank {} in a run of {}", rank(), peer, size());
  DL_CHECK(context >= 0 && std::size_t(context) < contexts_.size(),
           "r{}: no group was split off as context {}", rank(), context);
  auto r = new_request<Req>(is_send, mem, peer, tag, context);
  r->key = contexts_[std::size_t(context)].key;
  if (is_send) {
    sends_[std::size_t(peer)].push_back(r);
    push(peer);  // a message that fits in the ring is on its way before isend returns
    return r;
  }
  // The first message that arrived for it, whole or still arriving; else it waits in line.
  auto& early = unexpected_[std::size_t(peer)];
  for (auto it = early.begin(); it != early.end(); ++it) {
    Unexpected& u = **it;
    if (u.taken_by || u.dropped || u.frame.key != r->key || u.frame.tag != tag) continue;
    if (u.frame.bytes != mem.bytes || u.frame.dtype != std::uint32_t(mem.dtype)) {
      fail(*r, fmt::format("message r{} -> r{} (tag {}) has {} B of {} but the receive expects "
                           "{} B of {}",
                           peer, rank(), tag, u.frame.bytes, to_string(DType(u.frame.dtype)),
                           mem.bytes, to_string(mem.dtype)));
      if (u.complete)
        early.erase(it);
      else
        u.dropped = true;  // the rest of it arrives into its buffer and is let go
      return r;
    }
    if (u.complete) {
      if (mem.bytes) std::memcpy(mem.ptr, u.data.data(), mem.bytes);
      early.erase(it);
      complete(*r);
    } else {
      u.taken_by = r;
    }
    return r;
  }
  recvs_[std::size_t(peer)].push_back(r);
  return r;
}

Request ShmTransport::isend(const MemRef& mem, int dst, int tag, int context) {
  return post(true, mem, dst, tag, context);
}

Request ShmTransport::irecv(const MemRef& mem, int src, int tag, int context) {
  return post(false, mem, src, tag, context);
}

int ShmTransport::split(int parent, int color, int key, const std::vector<int>& members) {
  DL_CHECK(parent >= 0 && std::size_t(parent) < contexts_.size(),
           "r{}: no group was split off as context {}", rank(), parent);
  const int id = control_.split(parent, color, key, members);
  DL_CHECK(std::size_t(id) == contexts_.size(),
           "r{}: the control transport numbered the group {} where this one has {}", rank(), id,
           contexts_.size());
  Context& from = contexts_[std::size_t(parent)];
  const int nth = from.splits++;
  Context c;
  c.key = std::uint32_t(mix64((std::uint64_t{from.key} << 32) ^ mix64(std::uint64_t(nth) << 20) ^
                              std::uint64_t(std::uint32_t(color))));
  if (c.key == 0) c.key = 1;
  for (const auto& other : contexts_)
    DL_CHECK(other.key != c.key,
             "r{}: two groups drew the same key {:#x}; split them in another order", rank(), c.key);
  contexts_.push_back(c);
  return id;
}

// --- moving bytes --------------------------------------------------------------------------------

void ShmTransport::complete(Req& r) {
  r.t_done = now_us();
  r.done.store(true, std::memory_order_release);
  progressed();
}

void ShmTransport::fail(Req& r, const std::string& why) {
  r.error = why;
  complete(r);
}

void ShmTransport::progressed() {
  const View v(base_, size(), ring_bytes_);
  v.states[rank()].progress_us.store(wall_us(), std::memory_order_relaxed);
}

bool ShmTransport::push(int dst) {
  static_assert(sizeof(Frame) == 32);
  auto& queue = sends_[std::size_t(dst)];
  if (queue.empty()) return false;
  const View v(base_, size(), ring_bytes_);
  RingControl& ring = v.control(rank(), dst);
  unsigned char* data = v.data(rank(), dst);
  std::uint64_t head = ring.head.load(std::memory_order_relaxed);  // this rank alone writes it
  const std::uint64_t head_before = head;
  const std::uint64_t tail = ring.tail.load(std::memory_order_acquire);
  std::size_t room = ring_bytes_ - std::size_t(head - tail);
  while (!queue.empty()) {
    Req& s = *queue.front();
    if (!s.header_written) {
      if (room < sizeof(Frame)) break;
      Frame f{};
      f.key = s.key;
      f.tag = s.tag;
      f.bytes = s.mem.bytes;
      f.dtype = std::uint32_t(s.mem.dtype);
      copy_in(data, ring_bytes_, head, &f, sizeof f);
      head += sizeof f;
      room -= sizeof f;
      s.header_written = true;
    }
    while (s.moved < s.mem.bytes && room > 0) {
      const std::size_t n = std::min({room, s.mem.bytes - s.moved, kChunk});
      copy_in(data, ring_bytes_, head, static_cast<const unsigned char*>(s.mem.ptr) + s.moved, n);
      head += n;
      room -= n;
      s.moved += n;
      ring.head.store(head, std::memory_order_release);  // the receiver may start on it
    }
    ring.head.store(head, std::memory_order_release);
    if (s.moved < s.mem.bytes) break;
    complete(s);
    queue.pop_front();
  }
  return head != head_before;
}

bool ShmTransport::drain(int src) {
  const View v(base_, size(), ring_bytes_);
  RingControl& ring = v.control(src, rank());
  std::uint64_t tail = ring.tail.load(std::memory_order_relaxed);  // this rank alone writes it
  const std::uint64_t head = ring.head.load(std::memory_order_acquire);
  if (head == tail) return false;
  const std::uint64_t tail_before = tail;
  const unsigned char* data = v.data(src, rank());
  Incoming& in = *incoming_[std::size_t(src)];
  while (head != tail) {
    if (!in.active) {
      if (head - tail < sizeof(Frame)) break;  // the sender writes a header whole
      copy_out(&in.frame, data, ring_bytes_, tail, sizeof(Frame));
      tail += sizeof(Frame);
      in.active = true;
      in.got = 0;
      in.to = nullptr;
      // The first receive posted for it, else a buffer of its own.
      auto& posted = recvs_[std::size_t(src)];
      const auto match = std::find_if(posted.begin(), posted.end(), [&](const auto& r) {
        return r->key == in.frame.key && r->tag == in.frame.tag;
      });
      if (match != posted.end()) {
        in.recv = *match;
        posted.erase(match);
        if (in.recv->mem.bytes != in.frame.bytes ||
            std::uint32_t(in.recv->mem.dtype) != in.frame.dtype)
          in.recv->error = fmt::format(
              "message r{} -> r{} (tag {}) has {} B of {} but the receive expects {} B of {}", src,
              rank(), in.frame.tag, in.frame.bytes, to_string(DType(in.frame.dtype)),
              in.recv->mem.bytes, to_string(in.recv->mem.dtype));
        else
          in.to = static_cast<unsigned char*>(in.recv->mem.ptr);
      } else {
        in.unexpected = std::make_shared<Unexpected>();
        in.unexpected->frame = in.frame;
        in.unexpected->data.resize(in.frame.bytes);
        in.to = in.unexpected->data.data();
        unexpected_[std::size_t(src)].push_back(in.unexpected);
      }
    }
    while (in.got < in.frame.bytes && head != tail) {
      const std::size_t n = std::min({std::size_t(head - tail), in.frame.bytes - in.got, kChunk});
      if (in.to) copy_out(in.to + in.got, data, ring_bytes_, tail, n);
      tail += n;
      in.got += n;
      ring.tail.store(tail, std::memory_order_release);  // the sender may refill it
    }
    if (in.got < in.frame.bytes) break;
    // The frame is whole.
    in.active = false;
    if (in.recv) {
      complete(*in.recv);
      in.recv.reset();
    } else {
      Unexpected& u = *in.unexpected;
      u.complete = true;
      if (u.taken_by || u.dropped) {  // a receive matched it while it arrived
        if (u.taken_by) {
          if (u.taken_by->mem.bytes)
            std::memcpy(u.taken_by->mem.ptr, u.data.data(), u.taken_by->mem.bytes);
          complete(*u.taken_by);
        }
        auto& early = unexpected_[std::size_t(src)];
        early.erase(std::find(early.begin(), early.end(), in.unexpected));
      }
      in.unexpected.reset();
    }
  }
  ring.tail.store(tail, std::memory_order_release);
  return tail != tail_before;
}

bool ShmTransport::progress() {
  bool moved = false;
  for (int p = 0; p < size(); ++p) {
    moved |= push(p);
    moved |= drain(p);
  }
  return moved;
}

// --- waiting -------------------------------------------------------------------------------------

namespace {

// Another rank's line, read whole (it may be rewriting it: its count is odd meanwhile).
std::string read_line(const RankState& st) {
  char copy[sizeof st.line];
  for (int tries = 0; tries < 1000; ++tries) {
    const std::uint32_t before = st.line_seq.load(std::memory_order_acquire);
    if (before & 1) continue;
    std::memcpy(copy, st.line, sizeof copy);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (st.line_seq.load(std::memory_order_relaxed) != before) continue;
    copy[sizeof copy - 1] = 0;
    return copy;
  }
  return "(its wait was changing as it was read)";
}

}  // namespace

void ShmTransport::set_state(std::uint32_t state, const std::string& line, double since) {
  const View v(base_, size(), ring_bytes_);
  RankState& me = v.states[rank()];
  if (state == kWaiting) {
    me.line_seq.fetch_add(1, std::memory_order_acq_rel);
    const std::size_t n = std::min(line.size(), sizeof me.line - 1);
    std::memcpy(me.line, line.data(), n);
    me.line[n] = 0;
    me.line_seq.fetch_add(1, std::memory_order_release);
    me.since_us.store(since, std::memory_order_relaxed);
  }
  me.state.store(state, std::memory_order_release);
}

void ShmTransport::end_if_hang_declared() const {
  const View v(base_, size(), ring_bytes_);
  if (v.header->hang.load(std::memory_order_acquire) == 0) return;
  // Another rank is printing the report: give it time to finish before this process ends (under
  // mpirun the first process to end may take the others down with it).
  for (int i = 0; i < 200 && !(v.header->hang.load(std::memory_order_acquire) & kDeclared); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::fflush(stdout);
  std::_Exit(3);
}

void ShmTransport::check_peers_alive(const std::string& subject) {
  const View v(base_, size(), ring_bytes_);
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    const RankState& st = v.states[r];
    if (st.state.load(std::memory_order_acquire) == kFinished) continue;
    const int pid = st.pid.load(std::memory_order_relaxed);
    if (process_ended(pid))
      throw Error(fmt::format("{}, but r{}'s process (pid {}) has ended without finishing the run",
                              subject, r, pid));
  }
}

void ShmTransport::check_hang(const std::string& subject, double since) {
  const View v(base_, size(), ring_bytes_);
  const double timeout_us = setup_.deadlock_timeout_s * 1e6, now = wall_us();
  std::string why;
  for (int r = 0; r < size() && why.empty(); ++r) {
    if (r == rank()) continue;
    const RankState& st = v.states[r];
    const std::uint32_t state = st.state.load(std::memory_order_acquire);
    const double quiet = now - st.progress_us.load(std::memory_order_relaxed);
    if (state == kComputing)
      why = fmt::format("r{} is computing (it is in no wait)", r);
    else if (quiet < timeout_us)
      why = fmt::format("r{} progressed {:.1f} s ago", r, quiet * 1e-6);
  }
  const std::string mine = fmt::format("{} for {:.1f} s", subject, (now - since) * 1e-6);
  if (!why.empty()) {
    std::fprintf(stderr, "distlab: %s; %s, so the run goes on\n", mine.c_str(), why.c_str());
    std::fflush(stderr);
    return;
  }
  // Stuck. The first rank to say so prints every rank's wait; every rank ends with exit 3.
  std::uint32_t nobody = 0;
  if (!v.header->hang.compare_exchange_strong(nobody, std::uint32_t(rank() + 1)))
    end_if_hang_declared();  // another rank says it
  {
    std::vector<std::string> lines;
    for (int r = 0; r < size(); ++r) {
      const RankState& st = v.states[r];
      if (r == rank())
        lines.push_back(mine);
      else if (st.state.load(std::memory_order_acquire) == kFinished)
        lines.push_back(fmt::format("r{} has finished and will send nothing more", r));
      else
        lines.push_back(fmt::format("{} for {:.1f} s", read_line(st),
                                    (now - st.since_us.load(std::memory_order_relaxed)) * 1e-6));
    }
    print_hang_report(setup_.deadlock_timeout_s, lines);
  }
  v.header->hang.store(std::uint32_t(rank() + 1) | kDeclared, std::memory_order_release);
  std::fflush(stdout);
  std::_Exit(3);
}

void ShmTransport::polled(const std::function<bool()>& ready, const RequestState* request,
                          const std::string& what) {
  progress();
  if (ready()) return;
  const View v(base_, size(), ring_bytes_);
  const double since = wall_us(), timeout_us = setup_.deadlock_timeout_s * 1e6;
  std::string subject;
  bool published = false;  // a wait shows in this rank's block once it lasts a millisecond
  double next_alive = since + 1e6, next_look = since + timeout_us;
  long spins = 0;
  for (;;) {
    if (progress()) {  // bytes moved: this rank progresses, and polls at full speed again
      progressed();
      spins = 0;
    }
    if (ready()) break;
    if (spins < spin_budget_) {
      ++spins;
      cpu_relax();
      continue;
    }
    poll_backoff(spins);
    end_if_hang_declared();
    const double now = wall_us();
    if (!published && now - since > 1e3) {
      subject = what.empty() ? wait_subject(rank(), request) : wait_subject(rank(), what);
      set_state(kWaiting, subject, since);
      published = true;
    }
    if (now >= next_alive) {
      check_peers_alive(subject);
      next_alive = now + 1e6;
    }
    if (now >= next_look &&
        now - v.states[rank()].progress_us.load(std::memory_order_relaxed) >= timeout_us) {
      check_hang(subject, since);
      next_look = now + timeout_us;  // one look per timeout, as under mpirun
    }
  }
  progressed();  // a wait that ends is progress (a flag seen, a barrier opened)
  if (published) set_state(kComputing, {}, 0);
}

void ShmTransport::wait(RequestState& request) {
  polled([&] { return request.done.load(std::memory_order_acquire); }, &request, {});
  if (!request.error.empty()) throw Error(request.error);
}

bool ShmTransport::test(RequestState& request) {
  if (!request.done.load(std::memory_order_acquire)) progress();
  return request.done.load(std::memory_order_acquire);
}

void ShmTransport::wait_until(const std::function<bool()>& ready, const std::string& what) {
  polled(ready, nullptr, what);
}

// A sense-reversing barrier: the last to arrive opens the next generation.
void ShmTransport::barrier() {
  const View v(base_, size(), ring_bytes_);
  Barrier& b = *v.barrier;
  const std::uint64_t generation = b.generation.load(std::memory_order_acquire);
  if (b.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == std::uint32_t(size())) {
    b.arrived.store(0, std::memory_order_relaxed);
    b.generation.store(generation + 1, std::memory_order_release);
  } else {
    polled([&] { return b.generation.load(std::memory_order_acquire) != generation; }, nullptr, {});
  }
  progressed();
}

void ShmTransport::finished() {
  progressed();
  set_state(kFinished, {}, 0);
}

}  // namespace distlab
