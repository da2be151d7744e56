// The Gloo transport (core/transport/gloo.hpp): real processes, forked here, joined through a
// fresh file store over loopback TCP, as distlab's launcher joins them.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>
#include "catch.hpp"

#include "core/base/check.hpp"
#include "core/transport/gloo.hpp"

using namespace distlab;

namespace {

constexpr int kThrewError = 10, kAborted = 11, kCheckFailed = 12;

struct Outcome {
  int code = -1;    // the exit status, or 128 + the signal
  std::string err;  // what it wrote to stderr
};

// Runs body(transport) in n forked processes, one per rank, and returns how each ended: 0 when
// the body returned true, kCheckFailed when false, kThrewError or kAborted when it threw, or
// the code the transport ended the process with (3: a deadlock). Children still running after
// 60 s are killed, so a hang fails the test instead of stopping the suite.
// Each rank's watchdog waits deadlock_timeout_s[rank] before it looks.
std::vector<Outcome> run_ranks(const std::vector<double>& deadlock_timeout_s,
                               const std::function<bool(GlooTransport&)>& body,
                               double hang_report_delay_s = 0) {
  const int n = static_cast<int>(deadlock_timeout_s.size());
  char pattern[] = "/tmp/distlab-gloo-test.XXXXXX";
  const std::string store = ::mkdtemp(pattern);
  std::vector<pid_t> pids;
  std::cout.flush();  // what is buffered would be written once more by every child
  std::fflush(nullptr);
  for (int rank = 0; rank < n; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string err = store + "/stderr." + std::to_string(rank);
      const int fd = ::open(err.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
      ::dup2(fd, 2);
      int code = 0;
      try {
        GlooSetup setup;
        setup.rank = rank;
        setup.size = n;
        setup.store = store;
        setup.deadlock_timeout_s = deadlock_timeout_s[static_cast<std::size_t>(rank)];
        setup.rendezvous_timeout_s = 20;
        setup.hang_report_delay_s = hang_report_delay_s;
        GlooTransport t(setup);
        code = body(t) ? 0 : kCheckFailed;
        t.finished();
        t.barrier();  // nobody closes its pairs while another still reads
      } catch (const Aborted&) {
        code = kAborted;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        code = kThrewError;
      }
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<Outcome> out(static_cast<std::size_t>(n));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int left = n;
  while (left > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (std::chrono::steady_clock::now() > deadline)
        for (pid_t p : pids) ::kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    for (int r = 0; r < n; ++r)
      if (pids[static_cast<std::size_t>(r)] == pid) {
        Outcome& o = out[static_cast<std::size_t>(r)];
        o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        std::ifstream in(store + "/stderr." + std::to_string(r));
        std::stringstream text;
        text << in.rdbuf();
        o.err = text.str();
        --left;
      }
  }
  std::filesystem::remove_all(store);
  return out;
}

std::vector<Outcome> run_ranks(int n, double deadlock_timeout_s,
                               const std::function<bool(GlooTransport&)>& body) {
  return run_ranks(std::vector<double>(static_cast<std::size_t>(n), deadlock_timeout_s), body);
}

bool exchange(GlooTransport& t, std::size_t bytes) {
  const int peer = 1 - t.rank();
  std::vector<unsigned char> out(bytes), in(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(i * 7 + t.rank());
  Request r = t.irecv({in.data(), bytes}, peer, 5, 0);
  Request s = t.isend({out.data(), bytes}, peer, 5, 0);
  t.wait(*s);
  t.wait(*r);
  for (std::size_t i = 0; i < bytes; ++i)
    if (in[i] != static_cast<unsigned char>(i * 7 + peer)) return false;
  return true;
}

// Every rank ended with exit 3 (a hang); what they printed, together (one of them reports).
std::string hang_report(const std::vector<Outcome>& out) {
  std::string text;
  for (const auto& o : out) {
    CHECK(o.code == 3);
    text += o.err;
  }
  return text;
}

}  // namespace

TEST_CASE("gloo: the slot keeps contexts, tags and sizes apart", "[gloo]") {
  CHECK(GlooTransport::slot(0, 5, 16) == GlooTransport::slot(0, 5, 16));
  CHECK(GlooTransport::slot(0, 5, 16) != GlooTransport::slot(0, 6, 16));
  CHECK(GlooTransport::slot(0, 5, 16) != GlooTransport::slot(1, 5, 16));
  // Sizes that agree in their low bits still differ: the size is hashed, not cut.
  CHECK(GlooTransport::slot(0, 5, std::size_t{1} << 20) !=
        GlooTransport::slot(0, 5, std::size_t{1} << 21));
  CHECK(GlooTransport::slot(0, 5, 16) != GlooTransport::slot(0, 5, 16 + 65536));
  // Gloo's own collectives put their prefix (1..8) in the top byte; these never do.
  CHECK((GlooTransport::slot(7, 3, 9) >> 56) >= 0xc0);
}

TEST_CASE("gloo: messages of 0, 1 and 2^20 bytes arrive whole, both ways", "[gloo]") {
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{1} << 20}) {
    INFO(bytes << " bytes");
    const auto out = run_ranks(2, 10, [&](GlooTransport& t) { return exchange(t, bytes); });
    CHECK(out[0].code == 0);
    CHECK(out[1].code == 0);
  }
}

TEST_CASE("gloo: two messages with one tag keep their order, and contexts do not mix", "[gloo]") {
  const auto out = run_ranks(3, 10, [](GlooTransport& t) {
    // r0 sends 1 then 2 to r1 in the world, and 3 in a context of r0 and r1 only.
    const int group = t.split(0, t.rank() < 2 ? 0 : 1, t.rank(),
                              t.rank() < 2 ? std::vector<int>{0, 1} : std::vector<int>{2});
    if (t.rank() == 0) {
      int a = 1, b = 2, c = 3;
      Request s3 = t.isend({&c, sizeof c}, 1, 4, group);
      Request s1 = t.isend({&a, sizeof a}, 1, 4, 0);
      Request s2 = t.isend({&b, sizeof b}, 1, 4, 0);
      t.wait(*s1);
      t.wait(*s2);
      t.wait(*s3);
    } else if (t.rank() == 1) {
      int x = 0, y = 0, z = 0;
      Request r1 = t.irecv({&x, sizeof x}, 0, 4, 0);
      Request r2 = t.irecv({&y, sizeof y}, 0, 4, 0);
      Request r3 = t.irecv({&z, sizeof z}, 0, 4, group);
      t.wait(*r3);
      t.wait(*r2);
      t.wait(*r1);
      if (x != 1 || y != 2 || z != 3) return false;
    }
    // The internal traffic the launcher uses: every rank's bytes to r0, one int from it.
    const auto parts = t.gather_bytes(std::vector<char>(std::size_t(t.rank()) + 1, 'a'), 0);
    if (t.rank() == 0)
      for (int r = 0; r < t.size(); ++r)
        if (parts[std::size_t(r)].size() != std::size_t(r) + 1) return false;
    return t.broadcast_int(t.rank() == 0 ? 42 : 0, 0) == 42;
  });
  for (const auto& o : out) CHECK(o.code == 0);
}

TEST_CASE("gloo: test() hands a receive to a thread and sees it arrive", "[gloo]") {
  const auto out = run_ranks(2, 10, [](GlooTransport& t) {
    int v = t.rank() == 0 ? 17 : 0, go = 0;
    if (t.rank() == 0) {
      Request g = t.irecv({&go, sizeof go}, 1, 3, 0);  // r1 has tested once: send now
      t.wait(*g);
      Request s = t.isend({&v, sizeof v}, 1, 2, 0);
      t.wait(*s);
      return true;
    }
    Request r = t.irecv({&v, sizeof v}, 0, 2, 0);
    const bool early = t.test(*r);  // r0 sends only after the go below: not yet, whatever the load
    Request g = t.isend({&go, sizeof go}, 0, 3, 0);
    t.wait(*g);
    while (!t.test(*r)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    t.wait(*r);
    return !early && v == 17;
  });
  CHECK(out[0].code == 0);
  CHECK(out[1].code == 0);
}

TEST_CASE("gloo: a deadlock ends every rank with exit 3 and one report of who waits", "[gloo]") {
  const auto out = run_ranks(2, 1, [](GlooTransport& t) {
    int v = 0;
    Request r = t.irecv({&v, sizeof v}, 1 - t.rank(), 9, 0);  // both receive first: stuck
    t.wait(*r);
    return true;
  });
  const std::string report = hang_report(out);
  INFO("what the ranks printed:\n" << report);
  CHECK(report.find("deadlock or hang") != std::string::npos);
  CHECK(report.find("r0 waits in recv from r1 (tag 9") != std::string::npos);
  CHECK(report.find("r1 waits in recv from r0 (tag 9") != std::string::npos);
}

TEST_CASE("gloo: a size mismatch never matches: the report shows both sizes", "[gloo]") {
  const auto out = run_ranks(2, 1, [](GlooTransport& t) {
    std::vector<char> buf(32);
    Request q =
        t.rank() == 0 ? t.isend({buf.data(), 32}, 1, 7, 0) : t.irecv({buf.data(), 16}, 0, 7, 0);
    t.wait(*q);
    return true;
  });
  const std::string report = hang_report(out);
  INFO("what the ranks printed:\n" << report);
  CHECK(report.find("r0 waits in send to r1 (tag 7, 32 B") != std::string::npos);
  CHECK(report.find("r1 waits in recv from r0 (tag 7, 16 B") != std::string::npos);
}

TEST_CASE("gloo: the rank that declares the hang prints its report whole, though its wait breaks",
          "[gloo]") {
  // Both watchdogs look after 1 s; the first makes the marker and holds its report 2 s. The other
  // sees the marker and ends, which breaks the first rank's own wait in that window: its main
  // thread must leave the exit to the watchdog, or the report is cut.
  const auto out = run_ranks(
      {1, 1},
      [](GlooTransport& t) {
        int v = 0;
        Request r = t.irecv({&v, sizeof v}, 1 - t.rank(), 9, 0);
        t.wait(*r);
        return true;
      },
      2.0);
  const std::string report = hang_report(out);
  INFO("what the ranks printed:\n" << report);
  CHECK(report.find("deadlock or hang") != std::string::npos);
  CHECK(report.find("r0 waits in recv from r1 (tag 9") != std::string::npos);
  CHECK(report.find("r1 waits in recv from r0 (tag 9") != std::string::npos);
}

TEST_CASE("gloo: a rank whose watchdog has not looked yet ends with the hang's exit 3 too",
          "[gloo]") {
  // r0 looks after 1 s, declares the hang and ends; r1 would look after 30 s. Its receive breaks
  // when r0's connections close: that is the hang's verdict, not an error of r1's own (under load
  // two watchdogs a tick apart race the same way).
  const auto out = run_ranks({1, 30}, [](GlooTransport& t) {
    int v = 0;
    Request r = t.irecv({&v, sizeof v}, 1 - t.rank(), 9, 0);
    t.wait(*r);
    return true;
  });
  const std::string report = hang_report(out);
  INFO("what the ranks printed:\n" << report);
  CHECK(report.find("deadlock or hang") != std::string::npos);
  CHECK(report.find("r1 waits in recv from r0 (tag 9") != std::string::npos);
}

// Rank 1 ends at once, its sockets closed by the kernel; rank 0, `delay` later, posts a receive
// from it and waits. Gloo throws in the wait, or at the post once it has seen the pair break: the
// error names the rank that ended either way.
namespace {
void check_receive_from_dead_rank(std::chrono::milliseconds delay) {
  const auto out = run_ranks(2, 30, [delay](GlooTransport& t) {
    if (t.rank() == 1) ::_exit(1);
    std::this_thread::sleep_for(delay);
    int v = 0;
    Request r = t.irecv({&v, sizeof v}, 1, 3, 0);
    t.wait(*r);
    return true;
  });
  CHECK(out[1].code == 1);
  CHECK(out[0].code == kThrewError);
  CHECK(out[0].err.find("r1 has ended or closed it") != std::string::npos);
}
}  // namespace

TEST_CASE("gloo: a wait on a rank that died throws, naming it", "[gloo]") {
  check_receive_from_dead_rank(std::chrono::milliseconds(0));
}

// Posted after the pair broke: rank 0 gives rank 1 time to go first.
TEST_CASE("gloo: a message posted to a rank that died throws, naming it", "[gloo]") {
  check_receive_from_dead_rank(std::chrono::milliseconds(500));
}
