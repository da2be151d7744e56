// Symmetric memory (core/transport/symmetric.hpp) and the all-reduces through it
// (core/collectives/all_reduce_symmetric.hpp) on in-process ranks: every result against a sum
// written out here in rank order (the order every rank sums in, so the bits must match), and
// every count of bytes and synchronisations against its formula.
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include "catch.hpp"
#include "thread_world.hpp"

#include "core/collectives/all_gather_pat.hpp"
#include "core/collectives/all_reduce_symmetric.hpp"
#include "core/cost/crossover.hpp"

using namespace distlab;

namespace {

float input(int rank, std::size_t i, int call) {
  return float((rank + 1) * 0.37 + double(i % 97) * 0.011 + call * 1.3);
}

// The sum every rank must hold: float32, added in rank order 0, 1, ..., N-1.
float expected(int n, std::size_t i, int call) {
  float acc = input(0, i, call);
  for (int r = 1; r < n; ++r) acc += input(r, i, call);
  return acc;
}

enum class Algo { one_shot, two_shot, ll, reducing_switch };

void run(Algo a, SymmetricWindows& w, coll::ReducingSwitch& sw, std::vector<float>& v) {
  View<float> data{v.data(), v.size(), Device::cpu};
  if (a == Algo::one_shot) coll::all_reduce_one_shot(w, data);
  if (a == Algo::two_shot) coll::all_reduce_two_shot(w, data);
  if (a == Algo::ll) coll::all_reduce_one_shot_ll(w, data);
  if (a == Algo::reducing_switch) coll::all_reduce_switch(w, sw, data);
}

int segments_of_this_process() {
  const std::string prefix = "distlab-win-" + std::to_string(::getpid()) + "-";
  int found = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ++found;
    ::closedir(d);
  }
  return found;
}

}  // namespace

TEST_CASE(
    "symmetric: every all-reduce gives the rank-order float32 sum on every rank, in "
    "pieces too",
    "[collectives][symmetric]") {
  // 256-byte regions: 64 floats a piece (32 under LL), so 1000 go in 16 or 32 pieces; 70001 in
  // one piece of regions that hold them, summed in several blocks of detail::kSumBlock.
  const std::pair<std::size_t, std::size_t> cases[] = {
      {0, 256}, {1, 256}, {7, 256}, {1000, 256}, {70001, 8 * 70001}};
  static_assert(70001 / 4 > coll::detail::kSumBlock, "two-shot's 1/N in more than one block");
  for (int n : {1, 2, 3, 4})
    for (const auto& one_case : cases)
      for (Algo a : {Algo::one_shot, Algo::two_shot, Algo::ll, Algo::reducing_switch}) {
        // Named, not bound: clang 14 cannot capture a structured binding in the lambda below.
        const std::size_t count = one_case.first, region = one_case.second;
        INFO("N = " << n << ", " << count << " elements, algorithm " << int(a));
        const auto result = test::run_ranks(n, [&](Comm& comm) {
          auto w = coll::open_windows(comm, region);
          coll::ReducingSwitch sw(*w);
          for (int call = 0; call < 3; ++call) {
            std::vector<float> v(count);
            for (std::size_t i = 0; i < count; ++i) v[i] = input(comm.rank(), i, call);
            run(a, *w, sw, v);
            for (std::size_t i = 0; i < count; ++i)
              DL_CHECK(v[i] == expected(n, i, call), "r{} call {} element {}: {} where {}",
                       comm.rank(), call, i, v[i], expected(n, i, call));
          }
        });
        for (const auto& e : result.errors) CHECK(e.empty());
        for (const auto& e : result.errors) INFO(e);
      }
  CHECK(segments_of_this_process() == 0);  // each segment unlinked once every rank mapped it
}

TEST_CASE("symmetric: calls one after another reuse the windows without waiting for readers",
          "[collectives][symmetric]") {
  const int n = 3;
  const auto result = test::run_ranks(n, [&](Comm& comm) {
    auto w = coll::open_windows(comm, 4096);
    coll::ReducingSwitch sw(*w);
    // Every pair of algorithms one after the other, and one_shot, ll, one_shot (an LL call
    // between two that share a region).
    const Algo order[] = {Algo::one_shot,
                          Algo::two_shot,
                          Algo::ll,
                          Algo::two_shot,
                          Algo::one_shot,
                          Algo::ll,
                          Algo::one_shot,
                          Algo::ll,
                          Algo::ll,
                          Algo::one_shot,
                          Algo::one_shot,
                          Algo::two_shot,
                          Algo::two_shot,
                          Algo::ll,
                          Algo::reducing_switch,
                          Algo::one_shot,
                          Algo::reducing_switch,
                          Algo::reducing_switch,
                          Algo::ll};
    for (int call = 0; call < 400; ++call) {
      std::vector<float> v(300);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = input(comm.rank(), i, call);
      run(order[call % 18], *w, sw, v);
      for (std::size_t i = 0; i < v.size(); ++i)
        DL_CHECK(v[i] == expected(n, i, call), "r{} call {} element {}", comm.rank(), call, i);
    }
  });
  for (const auto& e : result.errors) CHECK(e.empty());
}

TEST_CASE("symmetric: bytes read and written and synchronisations equal each formula",
          "[collectives][symmetric]") {
  for (int n : {2, 3, 4}) {
    const std::size_t count = 1200, S = count * sizeof(float), chunk = S / std::size_t(n);
    const auto N = std::uint64_t(n);
    for (Algo a : {Algo::one_shot, Algo::two_shot, Algo::ll, Algo::reducing_switch}) {
      INFO("N = " << n << ", algorithm " << int(a));
      std::vector<WindowCounts> counts(static_cast<std::size_t>(n));
      std::uint64_t switch_read = 0, switch_written = 0;
      const auto result = test::run_ranks(n, [&](Comm& comm) {
        auto w = coll::open_windows(comm, 16384);  // one piece
        std::vector<float> v(count, 1.0f);
        {
          coll::ReducingSwitch sw(*w);
          run(a, *w, sw, v);
          comm.barrier();  // every rank has its sum: the switch's work is over
          if (comm.rank() == 0)
            switch_read = sw.switch_read(), switch_written = sw.switch_written();
        }
        counts[std::size_t(comm.rank())] = w->counts();
      });
      for (const auto& e : result.errors) REQUIRE(e.empty());
      for (const auto& c : counts) {
        switch (a) {
          case Algo::one_shot:  // S in; S from each window
            CHECK(c.written_local == S);
            CHECK(c.written_remote == 0);
            CHECK(c.read_local == S);
            CHECK(c.read_remote == (N - 1) * S);
            CHECK(c.syncs == N - 1);
            CHECK(c.flags == 1);
            break;
          case Algo::two_shot:  // S in; S/N from each window; S/N to each; S back out
            CHECK(c.written_local == S + chunk);
            CHECK(c.written_remote == (N - 1) * chunk);
            CHECK(c.read_local == chunk + S);
            CHECK(c.read_remote == (N - 1) * chunk);
            CHECK(c.syncs == 2 * (N - 1));
            CHECK(c.flags == 2);
            break;
          case Algo::ll:  // 8 bytes per element: the element and its flag; no other sync
            CHECK(c.written_local == 2 * S);
            CHECK(c.written_remote == 0);
            CHECK(c.read_local == 2 * S);
            CHECK(c.read_remote == (N - 1) * 2 * S);
            CHECK(c.syncs == 0);
            CHECK(c.flags == 0);
            break;
          case Algo::reducing_switch:  // S to the switch and S back: nothing else on the link
            CHECK(c.to_switch == S);
            CHECK(c.from_switch == S);
            CHECK(c.read_local + c.read_remote + c.written_local + c.written_remote == 0);
            CHECK(c.syncs == 1);
            CHECK(c.flags == 1);
            break;
        }
      }
      if (a == Algo::reducing_switch) {  // the switch reads every push and writes the sum once
        CHECK(switch_read == N * S);
        CHECK(switch_written == S);
      }
    }
  }
}

TEST_CASE("symmetric: two-shot on a registered buffer sums in place, reads S and writes S",
          "[collectives][symmetric]") {
  for (int n : {1, 2, 3, 4})
    for (std::size_t count : {std::size_t(1), std::size_t(7), std::size_t(1000),
                              std::size_t(70001)}) {  // 70001: blocks
      INFO("N = " << n << ", " << count << " elements");
      const auto result = test::run_ranks(n, [&](Comm& comm) {
        auto w = coll::open_windows(comm, std::max<std::size_t>(count * sizeof(float), 8));
        const int me = comm.rank();
        const Partition part{count, n};
        const std::uint64_t mine = part.size(me) * sizeof(float);
        for (int call = 0; call < 5; ++call) {  // the buffer rewritten in place each call
          auto* data = reinterpret_cast<float*>(w->region(me, 0));
          for (std::size_t i = 0; i < count; ++i) data[i] = input(me, i, call);
          w->reset_counts();
          coll::all_reduce_two_shot_registered<float>(*w, 0, count);
          for (std::size_t i = 0; i < count; ++i)
            DL_CHECK(data[i] == expected(n, i, call), "r{} call {} element {}: {} where {}", me,
                     call, i, data[i], expected(n, i, call));
          // My 1/N read from every window and stored into every window: S_k each, own and peers'.
          const WindowCounts& c = w->counts();
          DL_CHECK(c.read_local == mine && c.written_local == mine, "r{}: own {} / {}", me,
                   c.read_local, c.written_local);
          DL_CHECK(c.read_remote == std::uint64_t(n - 1) * mine &&
                       c.written_remote == std::uint64_t(n - 1) * mine,
                   "r{}: peers' {} / {}", me, c.read_remote, c.written_remote);
          DL_CHECK(c.syncs == 2 * std::uint64_t(n - 1) && c.flags == 2, "r{}: {} waits, {} flags",
                   me, c.syncs, c.flags);
        }
      });
      for (const auto& e : result.errors) {
        INFO(e);
        CHECK(e.empty());
      }
    }
}

TEST_CASE("symmetric: the switch paused between calls sums when resumed, and ends while paused",
          "[collectives][symmetric]") {
  const int n = 3;
  const auto result = test::run_ranks(n, [&](Comm& comm) {
    auto w = coll::open_windows(comm, 1024);
    coll::ReducingSwitch sw(*w);
    for (int call = 0; call < 20; ++call) {
      // Rank 0 (the switch's) pauses it after each call and resumes it before the next; with the
      // thread parked, the others' pushes of the next call wait for the resume.
      if (comm.rank() == 0) sw.resume();
      std::vector<float> v(100);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = input(comm.rank(), i, call);
      coll::all_reduce_switch(*w, sw, View<float>{v.data(), v.size(), Device::cpu});
      for (std::size_t i = 0; i < v.size(); ++i)
        DL_CHECK(v[i] == expected(n, i, call), "r{} call {} element {}", comm.rank(), call, i);
      if (comm.rank() == 0) {
        sw.pause();
        if (call % 5 == 0)  // long enough for the thread to park (it looks between pushes)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    comm.barrier();  // every rank's last call over; the switch is destroyed while paused
  });
  for (const auto& e : result.errors) CHECK(e.empty());
}

TEST_CASE("pat: every rank gathers every chunk, in the steps and staging the schedule says",
          "[collectives][pat]") {
  for (int n : {1, 2, 3, 5, 6, 8, 9})
    for (int b : {1, 2, 3, 64})
      for (std::size_t count : {std::size_t(1), std::size_t(13), std::size_t(64)}) {
        INFO("N = " << n << ", B = " << b << ", " << count << " elements");
        std::vector<coll::PatStats> stats(static_cast<std::size_t>(n));
        // Catch's assertions are for the test's own thread: ranks throw (DL_CHECK) instead.
        const auto result = test::run_ranks(n, [&](Comm& comm) {
          const Partition part{count, n};
          std::vector<float> v(count, -1.0f);
          for (std::size_t i = part.begin(comm.rank()); i < part.end(comm.rank()); ++i)
            v[i] = float(comm.rank() * 1000 + int(i));
          stats[std::size_t(comm.rank())] =
              coll::all_gather_pat(comm, View<float>{v.data(), count, Device::cpu}, b);
          for (int r = 0; r < n; ++r)
            for (std::size_t i = part.begin(r); i < part.end(r); ++i)
              DL_CHECK(v[i] == float(r * 1000 + int(i)), "r{}: [{}] = {}, r{}'s chunk", comm.rank(),
                       i, v[i], r);
        });
        for (const auto& e : result.errors) {
          INFO(e);
          CHECK(e.empty());
        }
        // Written out: distances 2^(L-1) .. 1 over L = ceil(log2 N) steps; step k moves the
        // held offsets (multiples of 2D below N) whose partner offset stays below N.
        int rounds = 0;
        while ((1 << rounds) < n) ++rounds;
        int steps = 0, most = 0;
        for (int k = 0; k < rounds; ++k) {
          const int d = 1 << (rounds - 1 - k);
          int moved = 0;
          for (int s = 0; s < n; s += 2 * d) moved += s + d < n;
          steps += (moved + b - 1) / b;
          most = std::max(most, std::min(moved, b));
        }
        for (const auto& s : stats) {
          CHECK(s.steps == steps);
          CHECK(s.staged_chunks == most);
          CHECK(s.staged_bytes <= std::uint64_t(b) * ((count + n - 1) / n) * sizeof(float));
        }
      }
  // N = 8: B = 1 takes N - 1 = 7 steps, B = 4 = N/2 takes log2 N = 3.
  std::vector<int> b1(8), b4(8);
  test::run_ranks(8, [&](Comm& comm) {
    std::vector<float> v(8, float(comm.rank()));
    b1[std::size_t(comm.rank())] =
        coll::all_gather_pat(comm, View<float>{v.data(), 8, Device::cpu}, 1).steps;
    b4[std::size_t(comm.rank())] =
        coll::all_gather_pat(comm, View<float>{v.data(), 8, Device::cpu}, 4).steps;
  });
  CHECK(b1 == std::vector<int>(8, 7));
  CHECK(b4 == std::vector<int>(8, 3));
}

TEST_CASE("crossover: alpha-beta's and a sweep's, on hand-made numbers", "[cost][crossover]") {
  // a: 1 us, 1 ns/B; b: 3 us, 0.5 ns/B: equal at 2 us / 0.5 ns/B = 4000 B.
  const AlphaBeta a{1, 1, 1e-6, 1e-9}, b{1, 1, 3e-6, 0.5e-9};
  REQUIRE(model_crossover(a, b).has_value());
  CHECK(std::abs(*model_crossover(a, b) - 4000) < 1e-6);
  CHECK(!model_crossover(b, a).has_value());  // a never beats b from above: its slope is steeper
  const std::vector<std::uint64_t> sizes = {1000, 2000, 4000, 8000, 16000};
  auto swept = sweep_crossover(sizes, {2, 3, 5, 9, 17}, {3.5, 4, 5, 7, 11});
  REQUIRE(swept.at.has_value());
  CHECK(*swept.at == 4000);  // equal counts as b's
  CHECK(swept.flips == 1);
  swept = sweep_crossover(sizes, {1, 1, 1, 1, 1}, {2, 2, 2, 2, 2});
  CHECK(!swept.at.has_value());
  CHECK(swept.flips == 0);
  swept = sweep_crossover(sizes, {1, 3, 1, 3, 1}, {2, 2, 2, 2, 0.5});
  CHECK(*swept.at == 8000);  // b is faster at 2000, 8000 and 16000: from 8000 on to the end
  CHECK(swept.flips == 3);
}
