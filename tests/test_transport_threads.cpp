// threads.hpp: in-process ranks — matching, ordering, sizes, deadlock reports, abort.
//
// Ranks run on std::threads (thread_world.hpp). Catch's assertions are not thread-safe, so
// rank bodies only record what they saw; the test's own thread asserts after the join.
#include <sys/syscall.h>
#include <unistd.h>
#include "catch.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/comm/comm.hpp"
#include "core/device/allocator.hpp"
#include "core/transport/threads.hpp"
#include "thread_world.hpp"

using namespace distlab;
using Catch::Contains;
using distlab::test::run_ranks;

namespace {

std::vector<std::int64_t> pattern(std::int64_t base, std::size_t n) {
  std::vector<std::int64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = base * 1000 + static_cast<std::int64_t>(i);
  return v;
}

template <class T>
std::vector<T> to_vector(const Buffer<T>& b) {
  return {b.host().begin(), b.host().end()};
}

template <class T>
View<const T> cview(Buffer<T>& b) {
  return View<const T>(b.view());
}

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace

TEST_CASE("threads: a receive matches by (source, tag), receives posted first", "[transport]") {
  // r1 posts tag 2 before tag 1; r0 sends tag 1 then tag 2. Each lands in its own buffer.
  std::vector<std::int64_t> got_a, got_b;
  auto run = run_ranks(2, [&](Comm& comm) {
    auto a = comm.alloc<std::int64_t>(4, Category::data);
    auto b = comm.alloc<std::int64_t>(4, Category::data);
    if (comm.rank() == 1) {
      Request rb = comm.irecv(b.view(), 0, 2);
      Request ra = comm.irecv(a.view(), 0, 1);
      comm.barrier();  // both receives are posted before anything is sent
      comm.wait(rb);
      comm.wait(ra);
      got_a = to_vector(a);
      got_b = to_vector(b);
    } else {
      comm.barrier();
      std::copy_n(pattern(1, 4).begin(), 4, a.data());
      std::copy_n(pattern(2, 4).begin(), 4, b.data());
      comm.send(cview(a), 1, 1);
      comm.send(cview(b), 1, 2);
    }
  });
  REQUIRE_FALSE(run.failed);
  CHECK(got_a == pattern(1, 4));
  CHECK(got_b == pattern(2, 4));
}

TEST_CASE("threads: a receive matches by (source, tag), sends posted first", "[transport]") {
  std::vector<std::int64_t> got_a, got_b;
  auto run = run_ranks(2, [&](Comm& comm) {
    auto a = comm.alloc<std::int64_t>(4, Category::data);
    auto b = comm.alloc<std::int64_t>(4, Category::data);
    if (comm.rank() == 0) {
      std::copy_n(pattern(1, 4).begin(), 4, a.data());
      std::copy_n(pattern(2, 4).begin(), 4, b.data());
      Request sa = comm.isend(cview(a), 1, 1);
      Request sb = comm.isend(cview(b), 1, 2);
      comm.barrier();  // both sends wait in r1's mailbox before r1 posts a receive
      comm.wait(sa);
      comm.wait(sb);
    } else {
      comm.barrier();
      comm.recv(b.view(), 0, 2);  // tag 2 first, though tag 1 was sent first
      comm.recv(a.view(), 0, 1);
      got_a = to_vector(a);
      got_b = to_vector(b);
    }
  });
  REQUIRE_FALSE(run.failed);
  CHECK(got_a == pattern(1, 4));
  CHECK(got_b == pattern(2, 4));
}

TEST_CASE("threads: a receive matches by source among senders with one tag", "[transport]") {
  // r0 and r2 both send tag 7 to r1; r1 receives from r2 first, then from r0.
  std::vector<std::int64_t> from0, from2;
  auto run = run_ranks(3, [&](Comm& comm) {
    auto buf = comm.alloc<std::int64_t>(5, Category::data);
    if (comm.rank() == 1) {
      auto other = comm.alloc<std::int64_t>(5, Category::data);
      comm.barrier();
      comm.recv(buf.view(), 2, 7);
      comm.recv(other.view(), 0, 7);
      from2 = to_vector(buf);
      from0 = to_vector(other);
    } else {
      std::copy_n(pattern(comm.rank() + 10, 5).begin(), 5, buf.data());
      Request r = comm.isend(cview(buf), 1, 7);
      comm.barrier();
      comm.wait(r);
    }
  });
  REQUIRE_FALSE(run.failed);
  CHECK(from0 == pattern(10, 5));
  CHECK(from2 == pattern(12, 5));
}

TEST_CASE("threads: messages with one (source, tag) are never overtaken", "[transport]") {
  constexpr int kMessages = 16;
  for (bool sends_first : {true, false}) {
    INFO((sends_first ? "sends posted first" : "receives posted first"));
    std::vector<std::int64_t> got(kMessages, -1);
    auto run = run_ranks(2, [&](Comm& comm) {
      std::vector<Buffer<std::int64_t>> bufs;
      std::vector<Request> reqs;
      for (int k = 0; k < kMessages; ++k)
        bufs.push_back(comm.alloc<std::int64_t>(2, Category::data));
      const bool early = (comm.rank() == 0) == sends_first;
      if (!early) comm.barrier();
      for (int k = 0; k < kMessages; ++k) {
        if (comm.rank() == 0) {
          bufs[k][0] = k;
          bufs[k][1] = -k;
          reqs.push_back(comm.isend(cview(bufs[k]), 1, 3));
        } else {
          reqs.push_back(comm.irecv(bufs[k].view(), 0, 3));
        }
      }
      if (early) comm.barrier();
      comm.wait_all(reqs);
      if (comm.rank() == 1)
        for (int k = 0; k < kMessages; ++k) got[k] = bufs[k][0] == -bufs[k][1] ? bufs[k][0] : -999;
    });
    REQUIRE_FALSE(run.failed);
    std::vector<std::int64_t> want(kMessages);
    for (int k = 0; k < kMessages; ++k) want[k] = k;
    CHECK(got == want);
    // The trace numbers them in order too: seq k on both sides.
    for (int k = 0; k < kMessages; ++k) {
      CHECK(run.logs[0].spans[k].seq == static_cast<std::uint64_t>(k));
      CHECK(run.logs[1].spans[k].seq == static_cast<std::uint64_t>(k));
    }
  }
}

TEST_CASE("threads: messages of 0, 1 and 2^20 bytes arrive whole", "[transport]") {
  for (std::size_t n : {0ul, 1ul, 1ul << 20}) {
    INFO("length " << n << " B");
    bool same = false;
    auto run = run_ranks(2, [&](Comm& comm) {
      auto buf = comm.alloc<std::uint8_t>(n, Category::data);
      if (comm.rank() == 0) {
        for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<std::uint8_t>(i * 31 + 7);
        comm.send(cview(buf), 1, 0);
      } else {
        for (std::size_t i = 0; i < n; ++i) buf[i] = 0;
        comm.recv(buf.view(), 0, 0);
        same = true;
        for (std::size_t i = 0; i < n; ++i)
          if (buf[i] != static_cast<std::uint8_t>(i * 31 + 7)) same = false;
      }
    });
    REQUIRE_FALSE(run.failed);
    CHECK(same);
    REQUIRE(run.logs[0].spans.size() == 1);
    REQUIRE(run.logs[1].spans.size() == 1);
    CHECK(run.logs[0].spans[0].bytes == n);
    CHECK(run.logs[1].spans[0].bytes == n);
  }
}

TEST_CASE("threads: sendrecv around a ring passes every rank's data to its right", "[transport]") {
  for (int n : {1, 2, 3, 5, 8}) {
    INFO("ranks " << n);
    std::vector<std::vector<std::int64_t>> seen(static_cast<std::size_t>(n));
    auto run = run_ranks(n, [&](Comm& comm) {
      const int me = comm.rank(), right = (me + 1) % n, left = (me - 1 + n) % n;
      auto out = comm.alloc<std::int64_t>(3, Category::comm);
      auto in = comm.alloc<std::int64_t>(3, Category::comm);
      std::copy_n(pattern(me, 3).begin(), 3, out.data());
      // n - 1 rounds: each forwards what it got, so every rank sees every other rank's data.
      for (int s = 0; s < n - 1; ++s) {
        comm.sendrecv(cview(out), right, in.view(), left, 11);
        seen[static_cast<std::size_t>(me)].push_back(in[0] / 1000);
        std::swap(out, in);
      }
      if (n == 1) {
        comm.sendrecv(cview(out), right, in.view(), left, 11);  // to itself
        seen[0].push_back(in[2] - 2);
      }
    });
    REQUIRE_FALSE(run.failed);
    for (int r = 0; r < n; ++r) {
      std::vector<std::int64_t> want;
      for (int s = 1; s < n; ++s) want.push_back((r - s + n) % n);  // from s ranks to the left
      if (n == 1) want.assign(1, 0);  // = {0} warns falsely (GCC 14, ASan, -Warray-bounds)
      CHECK(seen[static_cast<std::size_t>(r)] == want);
    }
  }
}

TEST_CASE("threads: a size mismatch is an Error on both ranks naming both sizes", "[transport]") {
  auto run = run_ranks(
      2,
      [](Comm& comm) {
        if (comm.rank() == 0) {
          auto b = comm.alloc<float>(8, Category::data);
          comm.send(cview(b), 1, 4);
        } else {
          auto b = comm.alloc<float>(4, Category::data);
          comm.recv(b.view(), 0, 4);
        }
      },
      30.0);
  CHECK(run.failed);
  CHECK(run.exit_code == 1);
  for (const auto& e : run.errors) {
    CHECK_THAT(e,
               Contains("32 B") && Contains("16 B") && Contains("r0 -> r1") && Contains("tag 4"));
  }
  CHECK_THAT(run.failure, Contains("32 B") && Contains("16 B"));
  CHECK(run.seconds < 10.0);  // an error, not the 30 s timer
}

TEST_CASE("threads: an element type mismatch is an Error naming both types", "[transport]") {
  auto run = run_ranks(2, [](Comm& comm) {
    if (comm.rank() == 0) {
      auto b = comm.alloc<std::int32_t>(4, Category::data);
      comm.send(cview(b), 1, 0);
    } else {
      auto b = comm.alloc<float>(4, Category::data);
      comm.recv(b.view(), 0, 0);
    }
  });
  CHECK(run.failed);
  CHECK_THAT(run.errors[1], Contains("i32") && Contains("f32"));
}

// The deadlock tests give a 30 s timeout: the verdict comes from the wait-for graph as soon as
// the last wait closes the cycle, so a run that took anything like 30 s would be a timer's
// verdict, not the graph's. Their bound (10 s) holds on a machine however loaded.
TEST_CASE("threads: both ranks receiving first is a deadlock read off the graph, not a timeout",
          "[transport][deadlock]") {
  auto run = run_ranks(
      2,
      [](Comm& comm) {
        auto b = comm.alloc<std::int64_t>(1, Category::data);
        const int peer = 1 - comm.rank();
        comm.recv(b.view(), peer, 5);
        comm.send(cview(b), peer, 5);
      },
      30.0);
  CHECK(run.seconds < 10.0);
  CHECK(run.failed);
  CHECK(run.exit_code == 3);
  CHECK_THAT(run.failure, Contains("deadlock") && Contains("wait-for r0 -> r1 -> r0"));
  CHECK_THAT(run.failure, Contains("r0 waits in recv from r1 (tag 5, 8 B, i64)"));
  CHECK_THAT(run.failure, Contains("r1 waits in recv from r0 (tag 5, 8 B, i64)"));
  CHECK(run.errors == std::vector<std::string>{"aborted", "aborted"});
}

TEST_CASE("threads: both ranks sending first deadlocks too (sends are rendezvous)",
          "[transport][deadlock]") {
  auto run = run_ranks(
      2,
      [](Comm& comm) {
        auto b = comm.alloc<float>(2, Category::data);
        const int peer = 1 - comm.rank();
        comm.send(cview(b), peer, 6);
        comm.recv(b.view(), peer, 6);
      },
      30.0);
  CHECK(run.seconds < 10.0);
  CHECK(run.exit_code == 3);
  CHECK_THAT(run.failure, Contains("wait-for r0 -> r1 -> r0"));
  CHECK_THAT(run.failure, Contains("r0 waits in send to r1 (tag 6, 8 B, f32)"));
  CHECK_THAT(run.failure, Contains("r1 waits in send to r0 (tag 6, 8 B, f32)"));
}

TEST_CASE("threads: a cycle of three waits is found by the periodic look at the graph",
          "[transport][deadlock]") {
  auto run = run_ranks(
      4,
      [](Comm& comm) {
        auto b = comm.alloc<float>(1, Category::data);
        const int r = comm.rank();
        if (r < 3)
          comm.recv(b.view(), (r + 1) % 3, 1);  // r0 <- r1 <- r2 <- r0
        else
          comm.barrier();  // r3 waits for all of them
      },
      30.0);
  CHECK(run.seconds < 10.0);
  CHECK(run.exit_code == 3);
  CHECK_THAT(run.failure, Contains("wait-for r0 -> r1 -> r2 -> r0"));
  CHECK_THAT(run.failure, Contains("r3 waits in barrier"));
}

TEST_CASE("threads: a wait on a finished rank is a deadlock, though another rank is still busy",
          "[transport][deadlock]") {
  auto run = run_ranks(
      3,
      [](Comm& comm) {
        auto b = comm.alloc<std::int32_t>(1, Category::data);
        if (comm.rank() == 0) comm.recv(b.view(), 1, 0);  // r1 never sends
        if (comm.rank() == 2)                             // busy for ever, outside the graph
          comm.transport().wait_until([] { return false; }, "a long computation");
      },
      30.0);
  CHECK(run.seconds < 10.0);
  CHECK(run.exit_code == 3);
  CHECK_THAT(run.failure, Contains("wait-for r0 -> r1, which has finished"));
  CHECK_THAT(run.failure, Contains("r0 waits in recv from r1"));
  CHECK_THAT(run.failure, Contains("r1 has finished and will send nothing more"));
  CHECK_THAT(run.failure, Contains("r2 waits in a long computation"));
  CHECK(run.errors[2] == "aborted");
}

TEST_CASE(
    "threads: a rank that computes is never part of a deadlock, and others' progress holds the "
    "timeout off",
    "[transport][deadlock]") {
  // r0 waits 1.5 s for r1, which computes; r2 and r3 trade messages all the while. With a
  // 0.3 s timeout the old rule (a wait longer than the timeout) would end this valid run.
  std::atomic<bool> r1_sent{false};
  std::atomic<int> trades{0};
  auto run = run_ranks(
      4,
      [&](Comm& comm) {
        auto b = comm.alloc<float>(1, Category::data);
        const int r = comm.rank();
        if (r == 0) comm.recv(b.view(), 1, 0);
        if (r == 1) {
          sleep_ms(1500);
          comm.send(cview(b), 0, 0);
          r1_sent = true;
        }
        if (r >= 2) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2000);
          int round = 0;
          for (bool more = true; more; ++round) {
            more = std::chrono::steady_clock::now() < until;
            int flag = more ? 1 : 0;
            auto f = comm.alloc_from(std::vector<std::int32_t>{flag}, Category::data);
            auto g = comm.alloc<std::int32_t>(1, Category::data);
            comm.sendrecv(View<const std::int32_t>(f.view()), 5 - r, g.view(), 5 - r, round);
            more = more && g.host()[0] == 1;
            if (r == 2) ++trades;
            sleep_ms(10);
          }
        }
      },
      0.3);
  INFO(run.failure);
  CHECK_FALSE(run.failed);
  CHECK(r1_sent);
  CHECK(trades > 10);
}

TEST_CASE("threads: a rank that computes longer than the timeout is progressing, not hung",
          "[transport][deadlock]") {
  std::atomic<bool> r1_sent{false};
  auto run = run_ranks(
      2,
      [&](Comm& comm) {
        auto b = comm.alloc<float>(1, Category::data);
        if (comm.rank() == 0) {
          comm.recv(b.view(), 1, 0);
          return;
        }
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1200);
        volatile double x = 0;
        while (std::chrono::steady_clock::now() < until)  // 4 timeouts of pure computation
          for (int i = 0; i < 1000; ++i) x = x + 1e-9 * i;
        comm.send(cview(b), 0, 0);
        r1_sent = true;
      },
      0.3);
  INFO(run.failure);
  CHECK_FALSE(run.failed);
  CHECK(r1_sent);
}

TEST_CASE(
    "threads: no progress anywhere for the timeout is reported as a hang, with who waits for whom",
    "[transport][deadlock]") {
  auto run = run_ranks(
      2,
      [](Comm& comm) {
        auto b = comm.alloc<float>(1, Category::data);
        if (comm.rank() == 0) {
          comm.recv(b.view(), 1, 0);
        } else {
          // Stuck, as far as anyone can tell: asleep outside any message until the run is
          // ended (at most 60 s, so a check that never fires fails instead of hanging). A
          // fixed sleep would race the timer: on a loaded machine r0 can reach its receive
          // late enough that r1 has already finished.
          auto& hub = static_cast<ThreadTransport&>(comm.transport()).hub();
          for (int i = 0; i < 600 && !hub.aborting(); ++i) sleep_ms(100);
        }
      },
      0.3);
  CHECK(run.exit_code == 3);
  CHECK_THAT(run.failure, Contains("no progress for") && Contains("--deadlock-timeout"));
  CHECK_THAT(run.failure, Contains("r0 waits in recv from r1"));
  CHECK_THAT(run.failure, Contains("r1 is running (not waiting on a message)"));
  CHECK(run.errors[0] == "aborted");
}

TEST_CASE(
    "threads: cancel_pending takes a posted receive out of the mailbox, so no late send writes "
    "into it",
    "[transport][teardown]") {
  ThreadHub hub(2, 10.0);
  ThreadTransport t0(hub, 0), t1(hub, 1);
  std::vector<float> in(4, -1.0f), out(4, 7.0f);
  auto recv = t1.irecv({in.data(), in.size() * sizeof(float), DType::f32, Device::cpu}, 0, 3, 0);
  CHECK(t1.in_flight(in.data() + 2, sizeof(float)));
  CHECK_FALSE(t1.in_flight(out.data(), sizeof(float)));
  t1.cancel_pending();  // r1 goes down
  CHECK_FALSE(t1.in_flight(in.data(), in.size() * sizeof(float)));
  auto send = t0.isend({out.data(), out.size() * sizeof(float), DType::f32, Device::cpu}, 1, 3, 0);
  CHECK_FALSE(send->done.load());  // no receive left to match it
  CHECK(in == std::vector<float>(4, -1.0f));
  t0.cancel_pending();
  CHECK(send->done.load());
}

TEST_CASE(
    "threads: a block a posted message names is held back from the allocator until the rank is "
    "down",
    "[transport][teardown]") {
  ThreadHub hub(2, 10.0);
  ThreadTransport t0(hub, 0);
  constexpr std::size_t kBytes = std::size_t{1} << 20;  // big enough for the allocator to keep
  set_in_flight(&t0);
  void* p = device_alloc(Device::cpu, kBytes);
  t0.irecv({p, kBytes, DType::u8, Device::cpu}, 1, 0, 0);
  device_free(Device::cpu, p, kBytes);  // as a rank unwinding from an exception would
  void* q = device_alloc(Device::cpu, kBytes);
  CHECK(q != p);  // p is still named by the receive: not handed out again
  t0.cancel_pending();
  release_held_blocks();
  void* again = device_alloc(Device::cpu, kBytes);
  CHECK(again == p);  // now it is free, and reused
  device_free(Device::cpu, again, kBytes);
  device_free(Device::cpu, q, kBytes);
  set_in_flight(nullptr);
}

TEST_CASE(
    "threads: a rank that throws with receives posted goes down without a late send touching its "
    "memory",
    "[transport][teardown]") {
  // Run under the asan preset this is the use-after-free the way down prevents: r1's buffers
  // are freed while it unwinds, and r0's send arrives after.
  for (int round = 0; round < 20; ++round) {
    auto run = run_ranks(2, [round](Comm& comm) {
      if (comm.rank() == 1) {
        auto in = comm.alloc<float>(1 << 16, Category::data);
        auto small = comm.alloc<float>(4, Category::data);
        auto r1 = comm.irecv(in.view(), 0, 1);
        auto r2 = comm.irecv(small.view(), 0, 2);
        throw Error("r1 fails with two receives posted");
      }
      auto out = comm.alloc<float>(1 << 16, Category::data);
      auto small = comm.alloc<float>(4, Category::data);
      sleep_ms(round % 3);
      comm.send(View<const float>(out.view()), 1, 1);
      comm.send(View<const float>(small.view()), 1, 2);
    });
    CHECK(run.exit_code == 1);
    CHECK_THAT(run.failure, Contains("rank 1 failed: r1 fails with two receives posted"));
  }
}

TEST_CASE("threads: an exception on one rank aborts a rank blocked in recv", "[transport]") {
  auto run = run_ranks(
      2,
      [](Comm& comm) {
        auto b = comm.alloc<float>(1, Category::data);
        if (comm.rank() == 0) {
          sleep_ms(50);
          throw std::runtime_error("boom on purpose");
        }
        comm.recv(b.view(), 0, 0);  // woken by the abort, not by the 30 s timer
      },
      30.0);
  CHECK(run.seconds < 10.0);
  CHECK(run.failed);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.failure, Contains("rank 0 failed: boom on purpose"));
  CHECK(run.errors[0] == "boom on purpose");
  CHECK(run.errors[1] == "aborted");
}

TEST_CASE("threads: an exception on one rank aborts ranks blocked in a barrier", "[transport]") {
  auto run = run_ranks(
      4,
      [](Comm& comm) {
        if (comm.rank() == 2) {
          sleep_ms(50);
          throw Error("bad input on r2");
        }
        comm.barrier();
      },
      30.0);
  CHECK(run.seconds < 10.0);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.failure, Contains("rank 2 failed: bad input on r2"));
  CHECK(run.errors == std::vector<std::string>{"aborted", "aborted", "bad input on r2", "aborted"});
}

TEST_CASE("threads: a barrier lets nobody through before everyone arrives", "[transport]") {
  constexpr int kRanks = 4, kRounds = 20;
  std::atomic<int> arrived{0};
  std::vector<int> too_early(kRanks, 0);
  auto run = run_ranks(kRanks, [&](Comm& comm) {
    for (int round = 0; round < kRounds; ++round) {
      if (round == 0 && comm.rank() == kRanks - 1) sleep_ms(50);  // one late rank
      arrived.fetch_add(1);
      comm.barrier();
      if (arrived.load() < (round + 1) * kRanks) ++too_early[static_cast<std::size_t>(comm.rank())];
      comm.barrier();  // nobody starts the next round while someone still reads this one
    }
  });
  REQUIRE_FALSE(run.failed);
  CHECK(too_early == std::vector<int>(kRanks, 0));
  CHECK(arrived.load() == kRounds * kRanks);
}

TEST_CASE("threads: a barrier one rank never reaches is a deadlock", "[transport][deadlock]") {
  auto run = run_ranks(
      3,
      [](Comm& comm) {
        if (comm.rank() != 2) comm.barrier();
      },
      30.0);
  CHECK(run.seconds < 10.0);
  CHECK(run.exit_code == 3);
  CHECK_THAT(run.failure, Contains("wait-for r0 -> r2, which has finished"));
  CHECK_THAT(run.failure, Contains("r0 waits in barrier"));
  CHECK_THAT(run.failure, Contains("r1 waits in barrier"));
  CHECK_THAT(run.failure, Contains("r2 has finished"));
}

TEST_CASE("threads: the hub keeps the first failure only", "[transport]") {
  ThreadHub hub(2, 1.0);
  CHECK_FALSE(hub.failed());
  CHECK_FALSE(hub.aborting());
  hub.fail(1, "first", 1);
  hub.fail(0, "second", 3);
  CHECK(hub.failed());
  CHECK(hub.aborting());
  CHECK(hub.failure() == "rank 1 failed: first");
  CHECK(hub.exit_code() == 1);
  ThreadHub other(2, 1.0);
  other.fail(-1, "no rank", 2);
  CHECK(other.failure() == "no rank");
}

TEST_CASE("describe_wait writes one line of a deadlock report", "[transport]") {
  RequestState r;
  r.is_send = false;
  r.peer = 1;
  r.tag = 7;
  r.mem.bytes = 8;
  r.mem.dtype = DType::f32;
  CHECK(describe_wait(0, &r, 0.0, 2.0e6) == "r0 waits in recv from r1 (tag 7, 8 B, f32) for 2.0 s");
  r.is_send = true;
  CHECK(describe_wait(3, &r, 1.0e6, 1.5e6) == "r3 waits in send to r1 (tag 7, 8 B, f32) for 0.5 s");
  CHECK(describe_wait(2, nullptr, 0.0, 1.0e6) == "r2 waits in barrier for 1.0 s");
}

TEST_CASE("threads: the hang check tells a thread that waits for a core from one that sleeps",
          "[transport]") {
  std::atomic<pid_t> spinner{0}, sleeper{0};
  std::atomic<bool> stop{false};
  std::mutex m;
  std::condition_variable cv;
  bool wake = false;
  std::thread spin([&] {
    spinner = pid_t(syscall(SYS_gettid));
    while (!stop.load()) {
    }
  });
  std::thread sleep([&] {
    sleeper = pid_t(syscall(SYS_gettid));
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return wake; });
  });
  while (spinner.load() == 0 || sleeper.load() == 0) std::this_thread::yield();
  // The sleeper is asleep once it waits on the condition variable; give it that long.
  bool asleep = false;
  for (int i = 0; i < 200 && !asleep; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    asleep = !thread_runnable(sleeper.load());
  }
  CHECK(asleep);
  CHECK(thread_runnable(spinner.load()));  // running, or ready and waiting for a core: R either way
  CHECK_FALSE(thread_runnable(0));
  CHECK_FALSE(thread_runnable(pid_t(0x7ffffff0)));  // no such thread
  stop = true;
  {
    std::lock_guard lk(m);
    wake = true;
  }
  cv.notify_all();
  spin.join();
  sleep.join();
}

// --- reduce on receipt, and large messages moved by their receiver ------------------------------

TEST_CASE("threads: a receive posted to reduce adds the message in, as a copy and an add would",
          "[transport][reduce-on-receive]") {
  // 1000 elements are copied by whichever side matches second; 2^17 by the waiting receiver.
  for (std::size_t n : {std::size_t{1000}, std::size_t{1} << 17}) {
    INFO("length " << n);
    bool same_f32 = false, same_f64 = false, refuses_ints = false;
    auto run = run_ranks(2, [&](Comm& comm) {
      auto f = comm.alloc<float>(n, Category::data);
      auto d = comm.alloc<double>(n, Category::data);
      for (std::size_t i = 0; i < n; ++i) {
        f[i] = 0.1f * float(i % 97) + float(comm.rank());  // sums that round
        d[i] = 0.3 * double(i % 89) - double(comm.rank());
      }
      if (comm.rank() == 0) {
        comm.send(cview(f), 1, 3);
        comm.send(cview(d), 1, 4);
        return;
      }
      auto ints = comm.alloc<std::int64_t>(1, Category::data);
      refuses_ints = !comm.reduces_on_receive(ints.view());
      sleep_ms(20);  // the sender comes first: the second to match adds
      auto rf = comm.irecv_reduce(f.view(), 0, 3);
      comm.wait(rf);
      auto rd = comm.irecv_reduce(d.view(), 0, 4);
      comm.wait(rd);
      same_f32 = same_f64 = true;
      for (std::size_t i = 0; i < n; ++i) {
        const float want_f = (0.1f * float(i % 97) + 1.0f) + (0.1f * float(i % 97));
        const double want_d = (0.3 * double(i % 89) - 1.0) + 0.3 * double(i % 89);
        same_f32 = same_f32 && f[i] == want_f;
        same_f64 = same_f64 && d[i] == want_d;
      }
    });
    REQUIRE_FALSE(run.failed);
    CHECK(refuses_ints);
    CHECK(same_f32);
    CHECK(same_f64);
  }
}

TEST_CASE("threads: a large message whose receiver already waits is moved by the receiver",
          "[transport][hand-over]") {
  for (std::size_t bytes : {std::size_t{1} << 10, std::size_t{1} << 20}) {
    INFO(bytes << " B");
    bool whole = false;
    std::uint64_t handed = 0;
    auto run = run_ranks(2, [&](Comm& comm) {
      auto buf = comm.alloc<std::uint8_t>(bytes, Category::data);
      if (comm.rank() == 0) {
        for (std::size_t i = 0; i < bytes; ++i) buf[i] = std::uint8_t(i * 13 + 5);
        const ThreadHub& hub = static_cast<ThreadTransport&>(comm.transport()).hub();
        while (!hub.in_wait(1)) sleep_ms(1);  // rank 1 waits: whatever the scheduler did
        comm.send(cview(buf), 1, 0);
      } else {
        comm.recv(buf.view(), 0, 0);
        whole = true;
        for (std::size_t i = 0; i < bytes; ++i) whole = whole && buf[i] == std::uint8_t(i * 13 + 5);
        handed = static_cast<ThreadTransport&>(comm.transport()).hub().handed_over();
      }
    });
    REQUIRE_FALSE(run.failed);
    CHECK(whole);
    CHECK(handed == (bytes >= (std::size_t{64} << 10) ? 1u : 0u));  // small ones: the sender copies
  }
}

TEST_CASE("threads: exchanges of large messages, moved by their receivers, are never a deadlock",
          "[transport][hand-over]") {
  for (int n : {2, 3}) {
    INFO("ranks " << n);
    std::vector<int> right_data(static_cast<std::size_t>(n), 0);
    auto run = run_ranks(
        n,
        [&](Comm& comm) {
          const int me = comm.rank(), right = (me + 1) % n, left = (me - 1 + n) % n;
          constexpr std::size_t kLen = std::size_t{1} << 16;  // 256 KiB of float
          auto out = comm.alloc<float>(kLen, Category::comm);
          auto in = comm.alloc<float>(kLen, Category::comm);
          for (int round = 0; round < 200; ++round) {
            for (std::size_t i = 0; i < kLen; i += 4096) out[i] = float(me * 1000 + round);
            if (round % 2 == 0) {
              comm.sendrecv(cview(out), right, in.view(), left, 21);
            } else {  // the send waited for first
              Request r[2] = {comm.isend(cview(out), right, 21), comm.irecv(in.view(), left, 21)};
              comm.wait_all(r);
            }
            bool ok = true;
            for (std::size_t i = 0; i < kLen; i += 4096)
              ok = ok && in[i] == float(left * 1000 + round);
            if (!ok) return;
          }
          right_data[static_cast<std::size_t>(me)] = 1;
        },
        5.0);
    REQUIRE_FALSE(run.failed);
    for (int r = 0; r < n; ++r) CHECK(right_data[static_cast<std::size_t>(r)] == 1);
  }
}

TEST_CASE("threads: a sender that fails after handing a message over ends the run cleanly",
          "[transport][hand-over]") {
  auto run = run_ranks(
      2,
      [](Comm& comm) {
        auto buf = comm.alloc<float>(std::size_t{1} << 18, Category::data);
        if (comm.rank() == 1) {
          sleep_ms(30);  // rank 0 waits by now: the message is handed to it
          auto r = comm.isend(cview(buf), 0, 0);
          throw std::runtime_error("sender fails on purpose");  // unwinds with the send open
        }
        comm.recv(buf.view(), 1, 0);
        comm.barrier();  // rank 1 never comes: aborted
      },
      30.0);
  CHECK(run.seconds < 10.0);
  CHECK(run.failed);
  CHECK_THAT(run.failure, Contains("rank 1 failed: sender fails on purpose"));
}
