// gloo.cpp — messages over Gloo's TCP pairs, one process per rank (gloo.hpp).
#include "core/transport/gloo.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/base/mix.hpp"

namespace distlab {

namespace {

constexpr auto kForever = std::chrono::hours(24);    // Gloo's waits never time out here
constexpr double kWatchEveryS = 0.1;                 // the watchdog's tick: state file, checks
constexpr std::uint32_t kInternalKey = 0x3fffffffu;  // barrier, gather, broadcast
constexpr int kBarrierTag = 1, kGatherTag = 2, kBroadcastTag = 3, kClockTag = 4;
char zero_bytes[1];  // where a message of 0 bytes points

double wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The file a watchdog makes when it declares the run hung, before its rank ends with exit 3.
std::string hang_marker(const std::string& store) {
  return store + "/distlab.deadlock";
}

// The error of a message whose pair broke, when it was posted or waited for: the peer has ended
// or closed the connection (Gloo says which way in `what`).
Error broken_pair(int rank, bool is_send, int peer, int tag, std::size_t bytes, const char* what) {
  return Error(fmt::format(
      "r{}: the {} {} r{} (tag {}, {} B) failed: the connection broke ({}); r{} has ended or "
      "closed it",
      rank, is_send ? "send" : "receive", is_send ? "to" : "from", peer, tag, bytes, what, peer));
}

// One posted message: Gloo's buffer over the caller's memory, and, once test() asked about it,
// the thread that waits for it.
struct GlooReq : RequestState {
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  std::thread watcher;
  std::atomic<bool> watched{false};  // the watcher's wait returned
  bool aborted = false;

  // Blocks in Gloo's wait; false when it was aborted. Throws Error when the pair broke.
  bool gloo_wait(int rank) {
    try {
      return is_send ? buffer->waitSend(nullptr, kForever) : buffer->waitRecv(nullptr, kForever);
    } catch (const std::exception& e) {
      throw broken_pair(rank, is_send, peer, tag, mem.bytes, e.what());
    }
  }
  ~GlooReq() override {
    if (!watcher.joinable()) return;
    if (!watched.load()) {  // torn down before the message moved: let the watcher go
      if (is_send)
        buffer->abortWaitSend();
      else
        buffer->abortWaitRecv();
    }
    watcher.join();
  }
};

}  // namespace

std::uint64_t GlooTransport::slot(std::uint32_t key, int tag, std::size_t bytes) {
  DL_CHECK(tag >= 0 && tag <= 0xffff, "tag {} does not fit Gloo's slot", tag);
  const std::uint64_t size_hash = mix64(bytes) & 0xffff;
  return (std::uint64_t{3} << 62) | (std::uint64_t{key & 0x3fffffffu} << 32) |
         (std::uint64_t(tag) << 16) | size_hash;
}

// --- the wait this rank is in, and the watchdog that reads it ----------------------------------

struct GlooTransport::WaitState {
  std::mutex m;
  bool waiting = false;
  bool finished = false;
  double since_wall = 0, since_us = 0;
  bool message = false;  // waits for a message (below), or for `what`
  bool is_send = false;
  int peer = -1, tag = -1;
  std::size_t bytes = 0;
  DType dtype = DType::u8;
  std::string what;
  std::atomic<double> last_progress_wall{wall_s()};
  std::atomic<bool> declaring{false};  // this rank's watchdog ends the run: it reports, then exits

  std::string line(int rank) {  // under m
    if (!waiting) return fmt::format("r{} is computing (in no wait)", rank);
    if (finished && !message && what == "the barrier")
      return fmt::format("r{} has finished and waits for the others at the end", rank);
    if (!message) return describe_wait(rank, what, since_us, now_us());
    RequestState r;
    r.is_send = is_send;
    r.peer = peer;
    r.tag = tag;
    r.mem.bytes = bytes;
    r.mem.dtype = dtype;
    return describe_wait(rank, &r, since_us, now_us());
  }
};

// Every tick: writes this rank's state to the store folder; when this rank's wait has passed the
// timeout, reads every rank's and decides whether the run is stuck (gloo.hpp).
class GlooTransport::Watchdog {
 public:
  Watchdog(GlooTransport& t) : t_(t), thread_([this] { run(); }) {}
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }

 private:
  struct Peer {
    bool read = false;
    std::string state;
    double since = 0, progress = 0;
    std::string line;
  };

  std::string path(int rank) const {
    return fmt::format("{}/distlab.status.{}", t_.setup_.store, rank);
  }

  Peer read(int rank) const {
    Peer p;
    std::ifstream in(path(rank));
    if (in >> p.state >> p.since >> p.progress) {
      in.ignore(1);
      p.read = static_cast<bool>(std::getline(in, p.line));
    }
    return p;
  }

  void write(const std::string& state, double since, double progress, const std::string& line) {
    const std::string tmp = path(t_.rank()) + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << fmt::format("{} {:.6f} {:.6f}\n{}\n", state, since, progress, line);
    }
    std::rename(tmp.c_str(), path(t_.rank()).c_str());  // whole, or the last one: never half
  }

  void run() {
    double next_check = 0;
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::duration<double>(kWatchEveryS));
      WaitState& s = *t_.state_;
      std::string state, line;
      double since = 0;
      {
        std::lock_guard<std::mutex> lock(s.m);
        state = s.waiting ? "wait" : "run";
        since = s.since_wall;
        line = s.line(t_.rank());
      }
      const double progress = s.last_progress_wall.load();
      write(state, since, progress, line);
      const double now = wall_s(), timeout = t_.setup_.deadlock_timeout_s;
      if (state != "wait" || now - since < timeout || now - progress < timeout || now < next_check)
        continue;
      next_check = now + timeout;  // one look per timeout, as under mpirun
      check(line);
    }
  }

  // This rank has waited past the timeout and not progressed. Is any other rank moving?
  void check(const std::string& my_line) {
    const double timeout = t_.setup_.deadlock_timeout_s;
    std::vector<Peer> peers(static_cast<std::size_t>(t_.size()));
    auto moving = [&](std::string* why) {
      for (int r = 0; r < t_.size(); ++r) {
        if (r == t_.rank()) continue;
        Peer& p = peers[static_cast<std::size_t>(r)] = read(r);
        const double quiet = wall_s() - p.progress;
        if (!p.read || p.state != "wait") {
          *why = fmt::format("r{} is computing (it is in no wait)", r);
          return true;
        }
        if (quiet < timeout) {
          *why = fmt::format("r{} progressed {:.1f} s ago", r, quiet);
          return true;
        }
      }
      return false;
    };
    std::string why;
    bool go_on = moving(&why);
    if (!go_on) {  // the others' files are a tick old: look once more before ending the run
      const std::vector<Peer> first = peers;
      std::this_thread::sleep_for(std::chrono::duration<double>(3 * kWatchEveryS));
      go_on = moving(&why);
      for (std::size_t r = 0; r < peers.size() && !go_on; ++r)
        if (static_cast<int>(r) != t_.rank() && peers[r].progress != first[r].progress) {
          go_on = true;
          why = fmt::format("r{} progressed just now", r);
        }
    }
    if (go_on) {
      std::fprintf(stderr, "distlab: %s; %s, so the run goes on\n", my_line.c_str(), why.c_str());
      std::fflush(stderr);
      return;
    }
    // Stuck. One rank says so (the first to make the marker); every rank ends with exit 3.
    t_.state_->declaring = true;  // from here this thread ends the process, after its report
    const std::string marker = hang_marker(t_.setup_.store);
    const int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd >= 0) {
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::duration<double>(t_.setup_.hang_report_delay_s));
      std::vector<std::string> lines;
      for (int r = 0; r < t_.size(); ++r)
        lines.push_back(r == t_.rank() ? my_line : peers[static_cast<std::size_t>(r)].line);
      print_hang_report(timeout, lines);
    }
    std::fflush(stdout);
    std::_Exit(3);
  }

  GlooTransport& t_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// --- the transport -------------------------------------------------------------------------------

GlooTransport::GlooTransport(const GlooSetup& setup)
    : setup_(setup), state_(std::make_unique<WaitState>()) {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) host_ = name;
  DL_CHECK(setup.size >= 1 && setup.rank >= 0 && setup.rank < setup.size,
           "rank {} of {} is not a rank", setup.rank, setup.size);
  gloo::transport::tcp::attr attr;
  attr.hostname = setup.host;
  try {
    device_ = gloo::transport::tcp::CreateDevice(attr);
    store_ = std::make_shared<gloo::rendezvous::FileStore>(setup.store);
    auto world = std::make_shared<gloo::rendezvous::Context>(setup.rank, setup.size);
    world->setTimeout(std::chrono::milliseconds(long(setup.rendezvous_timeout_s * 1000)));
    world->connectFullMesh(*store_, device_);
    world->setTimeout(kForever);  // the library collectives: the watchdog decides, not Gloo
    Context c;
    for (int r = 0; r < setup.size; ++r) c.members.push_back(r);
    c.library = world;
    contexts_.push_back(std::move(c));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(fmt::format(
        "r{}: Gloo could not connect the {} ranks through the store {} on {} within {:.0f} s: {}",
        setup.rank, setup.size, setup.store, setup.host, setup.rendezvous_timeout_s, e.what()));
  }
  watchdog_ = std::make_unique<Watchdog>(*this);
  estimate_clock_offsets();
}

// Ranks on rank 0's host share its clock. For the others (a cluster of namespaces with clocks
// of their own), rank 0 runs a few ping-pongs and keeps the offset of the round with the
// smallest round trip, as the MPI transport does.
void GlooTransport::estimate_clock_offsets() {
  const auto hosts = gather_bytes(std::vector<char>(host_.begin(), host_.end()), 0);
  constexpr int kRounds = 8;
  if (rank() == 0) {
    for (int r = 1; r < size(); ++r) {
      const char measure = hosts[std::size_t(r)] != hosts[0] ? 1 : 0;
      send_internal(&measure, 1, r, kClockTag);
      if (!measure) continue;
      const ClockOffset offset = clock_offset_from(kRounds, [&](double t0) {
        double remote = 0;
        send_internal(&t0, sizeof t0, r, kClockTag);
        recv_internal(&remote, sizeof remote, r, kClockTag);
        return remote;
      });
      send_internal(&offset, sizeof offset, r, kClockTag);
    }
    return;
  }
  char measure = 0;
  recv_internal(&measure, 1, 0, kClockTag);
  if (!measure) return;
  for (int round = 0; round < kRounds; ++round) {
    double t0 = 0;
    recv_internal(&t0, sizeof t0, 0, kClockTag);
    const double t = now_us();
    send_internal(&t, sizeof t, 0, kClockTag);
  }
  recv_internal(&clock_, sizeof clock_, 0, kClockTag);
}

GlooTransport::~GlooTransport() {
  watchdog_.reset();
  for (auto& c : contexts_) c.library.reset();
  std::error_code ec;  // this rank's state file; the launcher removes the folder
  std::filesystem::remove(fmt::format("{}/distlab.status.{}", setup_.store, setup_.rank), ec);
}

GlooTransport::Context& GlooTransport::context(int id) {
  DL_CHECK(id >= 0 && static_cast<std::size_t>(id) < contexts_.size(),
           "r{}: no group was split off as context {}", rank(), id);
  return contexts_[static_cast<std::size_t>(id)];
}

int GlooTransport::split(int parent, int color, int /*key*/, const std::vector<int>& members) {
  Context& from = context(parent);
  const int nth = from.splits++;
  Context c;
  c.members = members;
  const std::uint64_t h = mix64((std::uint64_t{from.key} << 32) ^ mix64(std::uint64_t(nth) << 20) ^
                                std::uint64_t(std::uint32_t(color)));
  c.key = std::uint32_t(h % (kInternalKey - 1)) + 1;  // never the world's 0, never the internal key
  for (const auto& other : contexts_)
    DL_CHECK(other.key != c.key,
             "r{}: two groups drew the same Gloo slot key {:#x}; split them in another order",
             rank(), c.key);
  contexts_.push_back(std::move(c));
  return static_cast<int>(contexts_.size()) - 1;
}

Request GlooTransport::post(bool is_send, const MemRef& mem, int peer, int tag, int context_id) {
  DL_CHECK(mem.device == Device::cpu, "the Gloo transport moves host memory only");
  DL_CHECK(peer >= 0 && peer < size(), "r{}: there is no rank {}", rank(), peer);
  const std::uint32_t key = context_id < 0 ? kInternalKey : context(context_id).key;
  auto req = new_request<GlooReq>(is_send, mem, peer, tag, context_id);
  void* ptr = mem.bytes == 0 ? zero_bytes : mem.ptr;
  try {
    req->buffer = contexts_[0].library->createUnboundBuffer(ptr, mem.bytes);
    if (is_send)
      req->buffer->send(peer, slot(key, tag, mem.bytes));
    else
      req->buffer->recv(peer, slot(key, tag, mem.bytes));
  } catch (const gloo::IoException& e) {  // the pair broke before the message was posted
    throw broken_pair(rank(), is_send, peer, tag, mem.bytes, e.what());
  } catch (const std::exception& e) {
    throw Error(fmt::format("r{}: Gloo could not post the {} {} r{} (tag {}): {}", rank(),
                            is_send ? "send" : "receive", is_send ? "to" : "from", peer, tag,
                            e.what()));
  }
  return req;
}

Request GlooTransport::isend(const MemRef& mem, int dst, int tag, int context) {
  return post(true, mem, dst, tag, context);
}
Request GlooTransport::irecv(const MemRef& mem, int src, int tag, int context) {
  return post(false, mem, src, tag, context);
}

void GlooTransport::enter_wait(const RequestState* r, const std::string& what) {
  std::lock_guard<std::mutex> lock(state_->m);
  WaitState& s = *state_;
  s.waiting = true;
  s.since_wall = wall_s();
  s.since_us = now_us();
  s.message = r != nullptr && barrier_depth_ == 0;
  if (s.message) {
    s.is_send = r->is_send;
    s.peer = r->peer;
    s.tag = r->tag;
    s.bytes = r->mem.bytes;
    s.dtype = r->mem.dtype;
  } else {
    s.what = barrier_depth_ > 0 ? "the barrier" : what;
  }
}

void GlooTransport::leave_wait(bool progressed) {
  if (progressed) state_->last_progress_wall.store(wall_s());
  std::lock_guard<std::mutex> lock(state_->m);
  state_->waiting = false;
}

void GlooTransport::poll(const std::function<bool()>& ready, const RequestState* request,
                         const std::string& what) {
  if (ready()) return;
  enter_wait(request, what);
  long spins = 0;
  try {
    while (!ready()) poll_backoff(spins);
  } catch (...) {
    leave_wait(false);
    throw;
  }
  leave_wait(true);
}

void GlooTransport::wait(RequestState& request) {
  if (request.done.load(std::memory_order_acquire)) return;
  auto& r = static_cast<GlooReq&>(request);
  if (r.watcher.joinable()) {  // test() handed it to a thread: wait for that thread
    poll([&] { return test(r); }, &r, {});
    return;
  }
  enter_wait(&r, {});
  bool moved = false;
  try {
    moved = r.gloo_wait(rank());
  } catch (...) {
    leave_wait(false);
    end_if_hang_declared();
    throw;
  }
  leave_wait(moved);
  if (!moved) throw Aborted();
  r.t_done = now_us();
  r.done.store(true, std::memory_order_release);
}

// Another rank's watchdog declared the run hung and ended its rank, which broke this rank's wait:
// the run's verdict is the hang (exit 3, its report printed once, by that rank), not a failure of
// this rank's own. Without it a rank whose own watchdog had not looked yet (under load, a tick
// later) would end with the broken connection's error instead.
// Where this rank's own watchdog made the marker, its report is still being written: the watchdog
// ends the process once it is out, so this thread waits (an exit here would cut the report).
void GlooTransport::end_if_hang_declared() const {
  if (::access(hang_marker(setup_.store).c_str(), F_OK) != 0) return;
  while (state_->declaring) std::this_thread::sleep_for(std::chrono::seconds(1));
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(3);
}

bool GlooTransport::test(RequestState& request) {
  if (request.done.load(std::memory_order_acquire)) return true;
  auto& r = static_cast<GlooReq&>(request);
  if (!r.watcher.joinable()) {
    r.watcher = std::thread([&r, me = rank()] {
      try {
        if (r.gloo_wait(me)) {
          r.t_done = now_us();
        } else {
          r.aborted = true;
        }
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      r.watched.store(true, std::memory_order_release);
    });
    return false;
  }
  if (!r.watched.load(std::memory_order_acquire)) return false;
  if (!r.error.empty()) {
    end_if_hang_declared();
    throw Error(r.error);
  }
  if (r.aborted) throw Aborted();
  state_->last_progress_wall.store(wall_s());
  r.done.store(true, std::memory_order_release);
  return true;
}

void GlooTransport::wait_until(const std::function<bool()>& ready, const std::string& what) {
  poll(ready, nullptr, what);
}

void GlooTransport::library_call(const std::string& what, const std::function<void()>& call) {
  enter_wait(nullptr, what);
  try {
    call();
  } catch (const std::exception& e) {
    leave_wait(false);
    throw Error(fmt::format("r{}: {} failed: {}", rank(), what, e.what()));
  }
  leave_wait(true);
}

void GlooTransport::send_internal(const void* data, std::size_t bytes, int peer, int tag) {
  Request r = post(true, {const_cast<void*>(data), bytes}, peer, tag, -1);
  wait(*r);
}
void GlooTransport::recv_internal(void* data, std::size_t bytes, int peer, int tag) {
  Request r = post(false, {data, bytes}, peer, tag, -1);
  wait(*r);
}

// Dissemination: in round k every rank tells the rank 2^k ahead and hears from the rank 2^k
// behind; after ceil(log2 N) rounds each has heard, through some chain, from every rank.
void GlooTransport::barrier() {
  ++barrier_depth_;
  try {
    char out = 1, in = 0;
    for (int step = 1; step < size(); step *= 2) {
      Request s = post(true, {&out, 1}, (rank() + step) % size(), kBarrierTag, -1);
      Request r = post(false, {&in, 1}, (rank() - step + size()) % size(), kBarrierTag, -1);
      wait(*r);
      wait(*s);
    }
  } catch (...) {
    --barrier_depth_;
    throw;
  }
  --barrier_depth_;
}

void GlooTransport::finished() {
  std::lock_guard<std::mutex> lock(state_->m);
  state_->finished = true;
  state_->last_progress_wall.store(wall_s());
}

std::vector<std::vector<char>> GlooTransport::gather_bytes(const std::vector<char>& mine,
                                                           int root) {
  std::vector<std::vector<char>> out;
  if (rank() != root) {
    const std::uint64_t n = mine.size();
    send_internal(&n, sizeof n, root, kGatherTag);
    send_internal(mine.data(), mine.size(), root, kGatherTag);
    return out;
  }
  out.resize(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) {
    auto& buf = out[static_cast<std::size_t>(r)];
    if (r == root) {
      buf = mine;
      continue;
    }
    std::uint64_t n = 0;
    recv_internal(&n, sizeof n, r, kGatherTag);
    buf.resize(n);
    recv_internal(buf.data(), buf.size(), r, kGatherTag);
  }
  return out;
}

int GlooTransport::broadcast_int(int value, int root) {
  if (rank() == root) {
    for (int r = 0; r < size(); ++r)
      if (r != root) send_internal(&value, sizeof value, r, kBroadcastTag);
  } else {
    recv_internal(&value, sizeof value, root, kBroadcastTag);
  }
  return value;
}

std::shared_ptr<gloo::Context> GlooTransport::library_context(int id) {
  Context& c = context(id);
  if (c.library) return c.library;
  const auto me = std::find(c.members.begin(), c.members.end(), rank());
  DL_CHECK(me != c.members.end(), "r{} is not in the group of context {}", rank(), id);
  library_call("connecting a group's Gloo context", [&] {
    gloo::rendezvous::PrefixStore group(fmt::format("distlab.group.{:08x}", c.key), *store_);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(int(me - c.members.begin()),
                                                           int(c.members.size()));
    ctx->setTimeout(std::chrono::milliseconds(long(setup_.rendezvous_timeout_s * 1000)));
    ctx->connectFullMesh(group, device_);
    ctx->setTimeout(kForever);
    c.library = ctx;
  });
  return c.library;
}

void GlooTransport::abort_all(const std::string& message, int exit_code) {
  std::fflush(stdout);
  std::fprintf(stderr, "distlab: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(exit_code);
}

GlooSetup gloo_setup_from_environment(double deadlock_timeout_s) {
  auto text = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  GlooSetup s;
  const std::string rank = text("DISTLAB_RANK"), size = text("DISTLAB_WORLD_SIZE");
  s.store = text("DISTLAB_STORE");
  if (rank.empty() || size.empty() || s.store.empty())
    throw UsageError(
        "--transport gloo runs one process per rank, started by distlab's launcher with "
        "DISTLAB_RANK, DISTLAB_WORLD_SIZE and DISTLAB_STORE set: ./distlab lesson NN --procs 4 "
        "--transport gloo");
  s.rank = std::atoi(rank.c_str());
  s.size = std::atoi(size.c_str());
  if (s.size < 1 || s.rank < 0 || s.rank >= s.size)
    throw UsageError(fmt::format(
        "DISTLAB_RANK={} and DISTLAB_WORLD_SIZE={} are not a rank of a run", rank, size));
  if (const std::string host = text("DISTLAB_HOST"); !host.empty()) s.host = host;
  s.deadlock_timeout_s = deadlock_timeout_s;
  return s;
}

}  // namespace distlab
