// The shared-memory transport (core/transport/shm.hpp) on ranks that are threads of this test,
// each mapping the segment as a process would (a real shm_open and mmap of its own), with small
// rings so that messages wrap and arrive in pieces. The processes' own paths (launcher, mpirun,
// deadlocks, a killed rank) are the lesson and probe tests' (tests/lessons.cmake).
#include <unistd.h>

#include <barrier>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>
#include "catch.hpp"

#include "core/base/check.hpp"
#include "core/transport/shm.hpp"

using namespace distlab;

namespace {

// What the shared-memory transport asks of its control transport: splits, numbered alike on
// every rank. Nothing else of it may be called.
class SplitsOnly : public Transport {
 public:
  const char* name() const override { return "splits-only"; }
  Request isend(const MemRef&, int, int, int) override { throw Error("isend on the control"); }
  Request irecv(const MemRef&, int, int, int) override { throw Error("irecv on the control"); }
  int split(int, int, int, const std::vector<int>&) override { return ++splits_; }
  void wait(RequestState&) override { throw Error("wait on the control"); }
  void barrier() override { throw Error("barrier on the control"); }
  void wait_until(const std::function<bool()>&, const std::string&) override {
    throw Error("wait_until on the control");
  }

 private:
  int splits_ = 0;
};

std::string fresh_name() {
  static int count = 0;
  return "/distlab-test-shm-" + std::to_string(::getpid()) + "-" + std::to_string(count++);
}

// body(rank's transport) on n threads, each its own ShmTransport over one segment.
void run_ranks(int n, std::size_t ring_bytes, const std::function<void(ShmTransport&)>& body) {
  const std::string name = fresh_name();
  std::barrier sync(n);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        ShmSetup setup;
        setup.rank = r;
        setup.size = n;
        setup.name = name;
        setup.ring_bytes = ring_bytes;
        setup.deadlock_timeout_s = 30;
        SplitsOnly control;
        ShmTransport t(setup, control, [&] { sync.arrive_and_wait(); });
        body(t);
        t.barrier();  // no rank unmaps while another still reads its ring
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) INFO("rank " << r << ": " << errors[std::size_t(r)]);
  for (const auto& e : errors) REQUIRE(e.empty());
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + name));  // unlinked once all had mapped it
}

MemRef bytes_of(std::vector<unsigned char>& v) {
  return MemRef{v.data(), v.size(), DType::u8, Device::cpu};
}

// Message k from `from` to `to`: its bytes, each a function of all three.
std::vector<unsigned char> message(int from, int to, int k, std::size_t bytes) {
  std::vector<unsigned char> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    v[i] = static_cast<unsigned char>(i * 131 + std::size_t(from) * 17 + std::size_t(to) * 5 + k);
  return v;
}

}  // namespace

TEST_CASE("shm: the ring per pair is 1 MiB, smaller as pairs grow, never under 64 KiB",
          "[transport][shm]") {
  CHECK(shm_ring_bytes(2) == (std::size_t(1) << 20));
  CHECK(shm_ring_bytes(4) == (std::size_t(1) << 20));    // 16 rings and pages: 16.06 MiB
  CHECK(shm_ring_bytes(8) == (std::size_t(512) << 10));  // 64 of 1 MiB would be 64.25 MiB
  CHECK(shm_ring_bytes(16) == (std::size_t(128) << 10));
  CHECK(shm_ring_bytes(64) == (std::size_t(64) << 10));
  CHECK(shm_segment_bytes(8, shm_ring_bytes(8)) < (std::size_t(40) << 20));
  CHECK(shm_segment_bytes(4, 4096) >= 16 * 4096 + 4 * 200);
}

TEST_CASE("shm: every rank sends to every rank at once, messages larger than the ring",
          "[transport][shm]") {
  const int n = 3;
  const std::vector<std::size_t> sizes = {0, 1, 7, 1000, 4096, 10'000, 70'000};
  run_ranks(n, 4096, [&](ShmTransport& t) {
    std::vector<std::vector<unsigned char>> out, in;
    std::vector<Request> reqs;
    for (int peer = 0; peer < n; ++peer)  // to itself too
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        out.push_back(message(t.rank(), peer, int(k), sizes[k]));
        in.emplace_back(sizes[k]);
      }
    std::size_t m = 0;
    for (int peer = 0; peer < n; ++peer)
      for (std::size_t k = 0; k < sizes.size(); ++k, ++m) {
        reqs.push_back(t.isend(bytes_of(out[m]), peer, int(k), 0));
        reqs.push_back(t.irecv(bytes_of(in[m]), peer, int(k), 0));
      }
    for (auto& r : reqs) t.wait(*r);
    m = 0;
    for (int peer = 0; peer < n; ++peer)
      for (std::size_t k = 0; k < sizes.size(); ++k, ++m)
        DL_CHECK(in[m] == message(peer, t.rank(), int(k), sizes[k]), "r{}: message {} from r{}",
                 t.rank(), k, peer);
  });
}

TEST_CASE(
    "shm: a receive posted late takes the message that waited, tags are taken out of "
    "order, one tag keeps its order",
    "[transport][shm]") {
  run_ranks(2, 4096, [&](ShmTransport& t) {
    if (t.rank() == 0) {
      auto big = message(0, 1, 1, 20'000), small = message(0, 1, 2, 5);
      auto first = message(0, 1, 3, 300), second = message(0, 1, 4, 300);
      std::vector<Request> sends = {
          t.isend(bytes_of(big), 1, 1, 0), t.isend(bytes_of(small), 1, 2, 0),
          t.isend(bytes_of(first), 1, 3, 0), t.isend(bytes_of(second), 1, 3, 0)};
      for (auto& r : sends) t.wait(*r);
      t.barrier();
    } else {
      t.barrier();  // every message has been sent: all of them wait unmatched, or in the ring
      std::vector<unsigned char> small(5), big(20'000), first(300), second(300);
      t.wait(*t.irecv(bytes_of(small), 0, 2, 0));  // behind a big message of another tag
      t.wait(*t.irecv(bytes_of(big), 0, 1, 0));
      auto b = t.irecv(bytes_of(second), 0, 3, 0), a = t.irecv(bytes_of(first), 0, 3, 0);
      t.wait(*a), t.wait(*b);
      DL_CHECK(small == message(0, 1, 2, 5), "the small message");
      DL_CHECK(big == message(0, 1, 1, 20'000), "the big message");
      // Posted in the other order, the receives still take tag 3's messages in sending order.
      DL_CHECK(second == message(0, 1, 3, 300) && first == message(0, 1, 4, 300),
               "one tag's messages in their order");
    }
  });
}

TEST_CASE("shm: groups split off do not take each other's messages", "[transport][shm]") {
  run_ranks(2, 4096, [&](ShmTransport& t) {
    const int group = t.split(0, 5, t.rank(), {0, 1});
    const int other = t.split(0, 6, t.rank(), {0, 1});
    DL_CHECK(group != other && group > 0, "two contexts: {} and {}", group, other);
    const int peer = 1 - t.rank();
    auto a = message(t.rank(), peer, 1, 64), b = message(t.rank(), peer, 2, 64);
    std::vector<unsigned char> in_a(64), in_b(64), in_w(64);
    auto w = message(t.rank(), peer, 3, 64);
    // One tag in three contexts; received in another order than sent.
    std::vector<Request> reqs = {
        t.isend(bytes_of(a), peer, 9, group),    t.isend(bytes_of(b), peer, 9, other),
        t.isend(bytes_of(w), peer, 9, 0),        t.irecv(bytes_of(in_w), peer, 9, 0),
        t.irecv(bytes_of(in_b), peer, 9, other), t.irecv(bytes_of(in_a), peer, 9, group)};
    for (auto& r : reqs) t.wait(*r);
    DL_CHECK(in_a == message(peer, t.rank(), 1, 64) && in_b == message(peer, t.rank(), 2, 64) &&
                 in_w == message(peer, t.rank(), 3, 64),
             "r{}: a message crossed into another context", t.rank());
  });
}

TEST_CASE("shm: a receive of another size fails with both sizes", "[transport][shm]") {
  std::string what;
  run_ranks(2, 4096, [&](ShmTransport& t) {
    std::vector<unsigned char> v(t.rank() == 0 ? 32 : 16);
    if (t.rank() == 0) {
      t.wait(*t.isend(bytes_of(v), 1, 7, 0));
      return;
    }
    try {
      t.wait(*t.irecv(bytes_of(v), 0, 7, 0));
    } catch (const Error& e) {
      what = e.what();
    }
  });
  CHECK(what.find("message r0 -> r1 (tag 7) has 32 B of u8 but the receive expects 16 B") !=
        std::string::npos);
}

TEST_CASE("shm: the barrier holds every rank until all arrive, many times over",
          "[transport][shm]") {
  const int n = 4, rounds = 200;
  std::vector<std::atomic<int>> arrived(rounds);
  run_ranks(n, 4096, [&](ShmTransport& t) {
    for (int k = 0; k < rounds; ++k) {
      arrived[std::size_t(k)].fetch_add(1);
      t.barrier();
      DL_CHECK(arrived[std::size_t(k)].load() == n, "r{} left barrier {} before all arrived",
               t.rank(), k);
    }
  });
}

TEST_CASE("shm: a segment /dev/shm cannot hold is refused with a sentence", "[transport][shm]") {
  ShmSetup setup;
  setup.size = 1;
  setup.name = fresh_name();
  setup.ring_bytes = std::size_t(1) << 50;  // a petabyte
  SplitsOnly control;
  try {
    ShmTransport t(setup, control, [] {});
    FAIL("a petabyte segment was made");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("could not reserve /dev/shm" + setup.name) !=
          std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + setup.name));
}
