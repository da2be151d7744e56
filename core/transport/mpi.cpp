#include "core/transport/mpi.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/transport/mpi_check.hpp"

#ifdef DISTLAB_SMPI
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#endif

namespace distlab {

namespace {

constexpr int kAskTag = 1;             // on the control communicator: "are you progressing?"
constexpr int kAnswerTag = 5;          // ... and the answer (tags 2-4 carry clocks and logs)
constexpr double kAnswerWaitUs = 1e6;  // a rank that does not answer within this is computing
constexpr double kQuickWaitUs = 10;    // poll spins on MPI alone this long first
constexpr std::size_t kPiece = std::size_t{1} << 30;  // MPI counts are int: send >1 GiB in pieces

// A message's MPI requests and statuses, one per piece. Every message under 1 GiB is one piece,
// kept in place: posting and testing it allocates nothing more (small messages feel each malloc).
struct MpiReq : RequestState {
  int pieces = 0;
  MPI_Request first = MPI_REQUEST_NULL;
  MPI_Status first_status{};
  std::vector<MPI_Request> more;  // all the pieces' requests, when there are several
  std::vector<MPI_Status> more_statuses;

  MPI_Request& add_piece() {
    if (pieces++ == 0) return first;
    if (more.empty()) more.push_back(first);
    return more.emplace_back();
  }
  MPI_Request* reqs() { return pieces <= 1 ? &first : more.data(); }
  MPI_Status* statuses() {
    if (pieces <= 1) return &first_status;
    more_statuses.resize(std::size_t(pieces));
    return more_statuses.data();
  }
};

// After MPI_Testall or MPI_Waitall: a failed piece is an error in words; a finished receive must
// have brought the bytes it expected.
bool complete(MpiReq& r, int rank, int rc, bool finished) {
  if (rc == MPI_ERR_IN_STATUS) {
    for (int i = 0; i < r.pieces; ++i)
      if (const MPI_Status& st = r.statuses()[i];
          st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) {
        if (st.MPI_ERROR == MPI_ERR_TRUNCATE)
          throw Error(
              fmt::format("message r{} -> r{} (tag {}) is larger than the {} B the receive expects",
                          r.peer, rank, r.tag, r.mem.bytes));
        throw Error(fmt::format("MPI message failed: {}", mpi_error_string(st.MPI_ERROR)));
      }
  } else if (rc != MPI_SUCCESS) {
    DL_FAIL("MPI_Testall failed: {}", mpi_error_string(rc));
  }
  if (!finished) return false;
  r.t_done = now_us();
  if (!r.is_send) {
    std::size_t got = 0;
    for (int i = 0; i < r.pieces; ++i) {
      int count = 0;
      MPI_Get_count(&r.statuses()[i], MPI_BYTE, &count);
      got += static_cast<std::size_t>(count);
    }
    if (got != r.mem.bytes)
      throw Error(fmt::format("message r{} -> r{} (tag {}) has {} B but the receive expects {} B",
                              r.peer, rank, r.tag, got, r.mem.bytes));
  }
  r.done.store(true, std::memory_order_release);
  return true;
}

#ifdef DISTLAB_SMPI
// A simulated run (smpirun): every rank is a SimGrid actor in one process, and each has its own
// copy of this program, so `live` is this rank's transport. When every rank blocks, SimGrid
// finds nothing left to simulate (a deadlock): it says so, kills the actors and, left alone,
// ends the process with exit 0. Each rank then prints what it waits for, and the first actor
// killed ends the process with exit 3, as the deadlock report does under mpirun. The flag
// that says a deadlock was reported is the environment: the one thing all copies share.
constexpr const char* kSimDeadlock = "DISTLAB_SIM_DEADLOCK";
const MpiTransport* live = nullptr;

void on_sim_deadlock() {
  if (live == nullptr) return;  // this rank has finished
  if (std::getenv(kSimDeadlock) == nullptr) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "distlab: deadlock: every rank waits and no message can move (SimGrid found "
                 "nothing left to simulate). Who waits for whom:\n");
    setenv(kSimDeadlock, "1", 1);
  }
  std::fprintf(stderr, "  %s\n", live->blocked_line().c_str());
  std::fflush(stderr);
}

void on_sim_actor_exit(bool failed) {
  if (failed && std::getenv(kSimDeadlock) != nullptr) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(3);
  }
}
#endif

}  // namespace

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

MpiTransport::MpiTransport(double deadlock_timeout_s)
    : timeout_us_(deadlock_timeout_s * 1e6), last_progress_us_(now_us()) {
  DL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &data_));
  DL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &control_));
  MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(data_, &rank_);
  MPI_Comm_size(data_, &size_);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  host_.assign(name, static_cast<std::size_t>(len));
  estimate_clock_offsets();
#ifdef DISTLAB_SMPI
  static bool hooked = false;  // once per rank (its copy of the program)
  if (!hooked) {
    simgrid::s4u::Engine::on_deadlock_cb(on_sim_deadlock);
    simgrid::s4u::this_actor::on_exit(on_sim_actor_exit);
    hooked = true;
  }
  live = this;
#endif
}

MpiTransport::~MpiTransport() {
#ifdef DISTLAB_SMPI
  if (live == this) live = nullptr;
#endif
  for (auto& c : contexts_)
    if (c.comm != MPI_COMM_NULL) MPI_Comm_free(&c.comm);
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
  if (data_ != MPI_COMM_NULL) MPI_Comm_free(&data_);
}

// Ranks on rank 0's host share its clock. For the others, rank 0 runs a few ping-pongs and
// keeps the offset of the round with the smallest round trip (Cristian's method).
void MpiTransport::estimate_clock_offsets() {
  if constexpr (kSimulatedBuild) return;  // one simulated clock for every rank
  std::vector<char> hosts(static_cast<std::size_t>(size_) * MPI_MAX_PROCESSOR_NAME, 0);
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, 0);
  std::copy(host_.begin(), host_.end(), mine.begin());
  MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, control_);
  auto host_of = [&](int r) {
    return std::string(&hosts[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  };
  const std::string root_host = host_of(0);
  for (int r = 1; r < size_; ++r) {
    if (host_of(r) == root_host) continue;
    if (rank_ == 0) {
      const ClockOffset best = clock_offset_from(8, [&](double t0) {
        double remote = 0;
        MPI_Send(&t0, 1, MPI_DOUBLE, r, 2, control_);
        MPI_Recv(&remote, 1, MPI_DOUBLE, r, 2, control_, MPI_STATUS_IGNORE);
        return remote;
      });
      const double sent[2] = {best.offset_us, best.error_us};
      MPI_Send(sent, 2, MPI_DOUBLE, r, 3, control_);
    } else if (rank_ == r) {
      for (int round = 0; round < 8; ++round) {
        double t0 = 0;
        MPI_Recv(&t0, 1, MPI_DOUBLE, 0, 2, control_, MPI_STATUS_IGNORE);
        const double t = now_us();
        MPI_Send(&t, 1, MPI_DOUBLE, 0, 2, control_);
      }
      double got[2] = {0, 0};
      MPI_Recv(got, 2, MPI_DOUBLE, 0, 3, control_, MPI_STATUS_IGNORE);
      clock_ = {got[0], got[1]};
    }
  }
}

int MpiTransport::split(int parent, int color, int key, const std::vector<int>& members) {
  Context c;
  DL_MPI_CHECK(MPI_Comm_split(comm(parent), color, key, &c.comm));
  MPI_Comm_set_errhandler(c.comm, MPI_ERRORS_RETURN);
  int size = 0, me = -1;
  MPI_Comm_size(c.comm, &size);
  MPI_Comm_rank(c.comm, &me);
  const auto mine = std::find(members.begin(), members.end(), rank_);
  DL_CHECK(size == static_cast<int>(members.size()) && mine - members.begin() == me,
           "r{}: MPI_Comm_split made a group of {} with this rank at {}, but the split worked "
           "out {} members with it at {}",
           rank_, size, me, members.size(), mine - members.begin());
  c.rank_of.assign(static_cast<std::size_t>(size_), -1);
  for (std::size_t i = 0; i < members.size(); ++i)
    c.rank_of[static_cast<std::size_t>(members[i])] = static_cast<int>(i);
  if (contexts_.empty()) contexts_.emplace_back();  // context 0 is data_
  contexts_.push_back(std::move(c));
  return static_cast<int>(contexts_.size()) - 1;
}

const MpiTransport::Context& MpiTransport::context(int id) const {
  DL_CHECK(id >= 1 && static_cast<std::size_t>(id) < contexts_.size(),
           "r{}: no communicator was split off as context {}", rank_, id);
  return contexts_[static_cast<std::size_t>(id)];
}

MPI_Comm MpiTransport::comm(int id) const {
  return id == 0 ? data_ : context(id).comm;
}

// Posts one message as pieces of at most 1 GiB (MPI counts are int), in order. `peer` is a
// world rank; in a split context MPI names it by its rank there.
Request MpiTransport::post(bool is_send, const MemRef& mem, int peer, int tag, int context_id) {
  MPI_Comm on = data_;
  int to = peer;
  if (context_id != 0) {
    const Context& c = context(context_id);
    on = c.comm;
    to = c.rank_of[static_cast<std::size_t>(peer)];
    DL_CHECK(to >= 0, "r{}: r{} is not in the group of context {}", rank_, peer, context_id);
  }
  auto req = new_request<MpiReq>(is_send, mem, peer, tag, context_id);
  auto* p = static_cast<char*>(mem.ptr);
  std::size_t off = 0;
  do {
    const int n = static_cast<int>(std::min(kPiece, mem.bytes - off));
    MPI_Request& r = req->add_piece();
    if (is_send)
      DL_MPI_CHECK(MPI_Isend(p + off, n, MPI_BYTE, to, tag, on, &r));
    else
      DL_MPI_CHECK(MPI_Irecv(p + off, n, MPI_BYTE, to, tag, on, &r));
    off += static_cast<std::size_t>(n);
  } while (off < mem.bytes);
  return req;
}

Request MpiTransport::isend(const MemRef& mem, int dst, int tag, int context) {
  return post(true, mem, dst, tag, context);
}
Request MpiTransport::irecv(const MemRef& mem, int src, int tag, int context) {
  return post(false, mem, src, tag, context);
}

std::string MpiTransport::Waiting::line(int rank, double since, double now) const {
  return what.empty() ? describe_wait(rank, request, since, now)
                      : describe_wait(rank, what, since, now);
}

// What a rank tells a rank that asks (after its wait passed the timeout): how long since it
// last progressed, and its wait as a line of the report.
struct MpiTransport::Answer {
  int round = 0;
  double quiet_s = 0;
  char line[240] = {};
};

#ifdef DISTLAB_SMPI
// Called from SimGrid's own context, not a rank's (whose clock would be MPI_Wtime). The wait
// is forever, so the line says when it began on the simulated clock, not how long it lasted.
std::string MpiTransport::blocked_line() const {
  if (blocked_in_ == nullptr && !in_barrier_)
    return fmt::format("r{} waits in a call of MPI's own (a library collective)", rank_);
  std::string line = describe_wait(rank_, blocked_in_, blocked_since_, blocked_since_);
  line.erase(line.rfind(" for "));
  return line + fmt::format(" since simulated t = {:.6f} s", blocked_since_ * 1e-6);
}
#endif

std::string MpiTransport::my_line(const Waiting& waiting, double since) const {
  const bool idle = !waiting.request && waiting.what.empty();
  return finished_ && idle
             ? fmt::format("r{} has finished and waits for the others at the end", rank_)
             : waiting.line(rank_, since, now_us());
}

void MpiTransport::progressed() {
  last_progress_us_ = now_us();
}

// Answers every question that has arrived: "are you progressing?".
void MpiTransport::poll_control(const Waiting& waiting, double since) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, control_, &flag, &st);
    if (!flag) return;
    int round = 0;
    MPI_Recv(&round, 1, MPI_INT, st.MPI_SOURCE, kAskTag, control_, MPI_STATUS_IGNORE);
    Answer a;
    a.round = round;
    a.quiet_s = (now_us() - last_progress_us_) * 1e-6;
    const std::string line = my_line(waiting, since);
    std::snprintf(a.line, sizeof a.line, "%s", line.c_str());
    MPI_Send(&a, sizeof a, MPI_BYTE, st.MPI_SOURCE, kAnswerTag, control_);
    last_asked_us_ = now_us();
  }
}

// This rank's wait passed the timeout. Under mpirun no rank sees the others, so it asks them:
// each rank in a wait answers with how long ago it last progressed (a message completed, a
// barrier opened, its body finished) and what it waits for; a rank that does not answer
// within a second is computing, and a rank that computes is progressing. If anyone progressed
// within the timeout the run goes on (one line says so); if every rank answered and none did,
// the report of every rank comes out once and the run ends (exit 3). A rank that another rank asked
// within the timeout leaves the asking to that one.
void MpiTransport::on_timeout(const Waiting& waiting, double& since) {
  const double now = now_us();
  if (now - last_asked_us_ < timeout_us_) {
    since = now;  // someone is looking already; they end the run if it must end
    return;
  }
  // Ranks that time out together: the lowest asks, the others hear it meanwhile.
  const double ask_at = now + std::min(rank_, 25) * 20e3;
  while (now_us() < ask_at) {
    poll_control(waiting, since);
    if (now_us() - last_asked_us_ < timeout_us_) {
      since = now_us();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const int round = ++round_;
  std::vector<MPI_Request> asks;
  for (int r = 0; r < size_; ++r)
    if (r != rank_) MPI_Isend(&round_, 1, MPI_INT, r, kAskTag, control_, &asks.emplace_back());
  std::vector<std::string> lines(static_cast<std::size_t>(size_));
  std::vector<char> answered(static_cast<std::size_t>(size_), 0);
  lines[static_cast<std::size_t>(rank_)] = my_line(waiting, since);
  answered[static_cast<std::size_t>(rank_)] = 1;
  int missing = size_ - 1, progressing = -1;
  double progressed_ago = 0;
  const double until = now_us() + kAnswerWaitUs;
  while (missing > 0 && now_us() < until) {
    poll_control(waiting, since);  // another rank may be asking at the same time
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, control_, &flag, &st);
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    Answer a;
    MPI_Recv(&a, sizeof a, MPI_BYTE, st.MPI_SOURCE, kAnswerTag, control_, MPI_STATUS_IGNORE);
    const auto who = static_cast<std::size_t>(st.MPI_SOURCE);
    if (a.round != round || answered[who]) continue;  // a late answer to an earlier question
    answered[who] = 1;
    --missing;
    a.line[sizeof a.line - 1] = 0;
    lines[who] = a.line;
    if (a.quiet_s * 1e6 < timeout_us_ && (progressing < 0 || a.quiet_s < progressed_ago)) {
      progressing = st.MPI_SOURCE;
      progressed_ago = a.quiet_s;
    }
  }
  for (auto& ask : asks) MPI_Request_free(&ask);  // small messages: sent or dropped with the run
  for (int r = 0; r < size_ && progressing < 0; ++r)
    if (!answered[static_cast<std::size_t>(r)]) progressing = r;  // computing, outside any wait
  if (progressing >= 0 && !answered[static_cast<std::size_t>(progressing)]) {
    std::fprintf(
        stderr,
        "distlab: %s; r%d is computing (it did not answer from a wait), so the run goes on\n",
        waiting.line(rank_, since, now_us()).c_str(), progressing);
    std::fflush(stderr);
    since = now_us();
    return;
  }
  if (progressing >= 0) {
    std::fprintf(stderr, "distlab: %s; r%d progressed %.1f s ago, so the run goes on\n",
                 waiting.line(rank_, since, now_us()).c_str(), progressing, progressed_ago);
    std::fflush(stderr);
    since = now_us();
    return;
  }
  print_hang_report(timeout_us_ * 1e-6, lines);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::exit(3);
}

void MpiTransport::poll(const std::function<bool()>& ready, const Waiting& waiting) {
  double since = now_us();
  // A message about to complete costs a few microseconds: for that long ask MPI alone, without
  // the control channel, the timeout's clock or giving up the core. Those are for waits that
  // last, and cost a small message more than its data does.
  for (int spin = 1;; ++spin) {
    if (ready()) {
      progressed();
      return;
    }
    if (spin % 8 == 0 && now_us() - since >= kQuickWaitUs) break;  // the clock costs a test
  }
  long spins = 0;
  while (!ready()) {
    poll_control(waiting, since);
    if (now_us() - since > timeout_us_ && now_us() - last_progress_us_ > timeout_us_)
      on_timeout(waiting, since);
    poll_backoff(spins);
  }
  progressed();
}

void MpiTransport::wait_until(const std::function<bool()>& ready, const std::string& what) {
  poll(ready, Waiting{nullptr, what});
}

void MpiTransport::wait_until(const std::function<bool()>& ready, const RequestState& waiting) {
  poll(ready, Waiting{&waiting, {}});
}

bool MpiTransport::test(RequestState& request) {
  if (request.done.load(std::memory_order_acquire)) return true;
  auto& r = static_cast<MpiReq&>(request);
  int flag = 0;
  int rc = MPI_SUCCESS;
  if (r.pieces == 1) {  // MPI_Test costs less than MPI_Testall of one; its error is the piece's
    rc = MPI_Test(&r.first, &flag, &r.first_status);
    if (rc != MPI_SUCCESS) {
      r.first_status.MPI_ERROR = rc;
      rc = MPI_ERR_IN_STATUS;
    }
  } else {
    rc = MPI_Testall(r.pieces, r.reqs(), &flag, r.statuses());
  }
  return complete(r, rank_, rc, flag != 0);
}

void MpiTransport::wait(RequestState& request) {
  if (request.done.load(std::memory_order_acquire)) return;
  if constexpr (kSimulatedBuild) {
    // Simulated (SMPI): block in MPI_Waitall. A polling loop would hold this rank at one
    // instant of simulated time; SimGrid itself reports ranks that wait for each other forever.
    auto& r = static_cast<MpiReq&>(request);
    blocked_in_ = &request;
    blocked_since_ = now_us();
    const int rc = MPI_Waitall(r.pieces, r.reqs(), r.statuses());
    blocked_in_ = nullptr;
    complete(r, rank_, rc, true);
    progressed();
    return;
  }
  poll([&] { return test(request); }, Waiting{&request, {}});
}

void MpiTransport::barrier() {
  if constexpr (kSimulatedBuild) {
    blocked_since_ = now_us();
    in_barrier_ = true;
    DL_MPI_CHECK(MPI_Barrier(data_));
    in_barrier_ = false;
    return;
  }
  MPI_Request req = MPI_REQUEST_NULL;
  DL_MPI_CHECK(MPI_Ibarrier(data_, &req));
  poll(
      [&] {
        int flag = 0;
        DL_MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
        return flag != 0;
      },
      Waiting{});
}

std::vector<std::vector<char>> MpiTransport::gather_bytes(const std::vector<char>& mine, int root) {
  long long n = static_cast<long long>(mine.size());
  std::vector<long long> sizes(static_cast<std::size_t>(size_));
  DL_MPI_CHECK(MPI_Gather(&n, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, root, data_));
  std::vector<std::vector<char>> out;
  // Point-to-point per rank keeps each log under MPI's int count limit on its own.
  if (rank_ == root) {
    out.resize(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      auto& buf = out[static_cast<std::size_t>(r)];
      buf.resize(static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
      if (r == root)
        buf = mine;
      else
        DL_MPI_CHECK(MPI_Recv(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, r, 4, control_,
                              MPI_STATUS_IGNORE));
    }
  } else {
    DL_MPI_CHECK(MPI_Send(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, root, 4, control_));
  }
  return out;
}

int MpiTransport::broadcast_int(int value, int root) {
  DL_MPI_CHECK(MPI_Bcast(&value, 1, MPI_INT, root, data_));
  return value;
}

void MpiTransport::abort_all(const std::string& message, int exit_code) {
  std::fflush(stdout);
  std::fprintf(stderr, "distlab: %s\n", message.c_str());
  std::fflush(stderr);
  // Simulated: every rank lives in this one process, and SMPI's MPI_Abort ends the simulation
  // with exit 0, so the run ends here with its own code.
  if constexpr (kSimulatedBuild) std::_Exit(exit_code);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

}  // namespace distlab
