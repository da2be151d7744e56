// collectives/*.hpp: every collective on in-process ranks, against references computed from
// input_value alone — never from what a collective produced.
//
// For each collective, world sizes {1, 2, 3, 4, 5, 8}, lengths {0, 1, 7, 1000} with roots
// {0, N/2, N-1}, and one 2^20-element run on 8 ranks with root N-1. Elements are int64, so
// sums are exact and every result must match exactly. Each run is also checked message by
// message against the algorithm's schedule: which rank sends to which at which step, how
// many bytes, and the data-flow metadata (chunk range, copy or reduce, contributions) on
// both the send and the receive side.
#include "catch.hpp"

#include <fmt/format.h>
#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/collectives/all_gather_bruck.hpp"
#include "core/collectives/all_gather_gather_broadcast.hpp"
#include "core/collectives/all_reduce_reduce_broadcast.hpp"
#include "core/collectives/all_to_all.hpp"
#include "core/collectives/all_to_all_bruck.hpp"
#include "core/collectives/broadcast.hpp"
#include "core/collectives/broadcast_tree.hpp"
#include "core/collectives/gather.hpp"
#include "core/collectives/reduce.hpp"
#include "core/collectives/reduce_scatter_reduce_scatter.hpp"
#include "core/collectives/reduce_tree.hpp"
#include "core/collectives/scatter.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/verify.hpp"
#include "thread_world.hpp"

using namespace distlab;

namespace {

using T = std::int64_t;
constexpr std::uint64_t kSeed = 2024;
constexpr T kUnwritten = 1'000'000;  // outside any input or sum, so an untouched element shows

// One case of the matrix.
struct Case {
  int n;
  std::size_t length;
  int root;
};

std::vector<Case> cases(bool rooted) {
  std::vector<Case> out;
  for (int n : {1, 2, 3, 4, 5, 8})
    for (std::size_t length : {0ul, 1ul, 7ul, 1000ul}) {
      std::set<int> roots = rooted ? std::set<int>{0, n / 2, n - 1} : std::set<int>{0};
      for (int root : roots) out.push_back({n, length, root});
    }
  out.push_back({8, 1ul << 20, rooted ? 7 : 0});
  return out;
}

// Chunk k of `length` elements over n ranks, computed here without Partition: the first
// length % n chunks get one element more.
std::vector<std::size_t> chunk_sizes(std::size_t length, int n) {
  std::vector<std::size_t> sizes(static_cast<std::size_t>(n), length / static_cast<std::size_t>(n));
  for (std::size_t k = 0; k < length % static_cast<std::size_t>(n); ++k) ++sizes[k];
  return sizes;
}
std::vector<std::size_t> chunk_begins(std::size_t length, int n) {
  std::vector<std::size_t> begins;
  std::size_t at = 0;
  for (std::size_t s : chunk_sizes(length, n)) {
    begins.push_back(at);
    at += s;
  }
  return begins;
}

// Reference vectors.
std::vector<T> input_of(int rank, std::size_t offset, std::size_t count) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input_value<T>(kSeed, rank, offset + i);
  return v;
}
std::vector<T> sum_of_inputs(int n, std::size_t offset, std::size_t count) {
  std::vector<T> v(count, 0);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) v[i] += input_value<T>(kSeed, r, offset + i);
  return v;
}

// "" when equal, else where they first differ.
std::string difference(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return fmt::format("{} elements, want {}", got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) return fmt::format("element {} is {}, want {}", i, got[i], want[i]);
  return {};
}

template <class U>
std::vector<U> to_vector(const Buffer<U>& b) {
  return {b.host().begin(), b.host().end()};
}

template <class U>
Buffer<U> filled(Comm& comm, std::size_t n, T value) {
  auto b = comm.alloc<U>(n, Category::data);
  for (auto& x : b.host()) x = static_cast<U>(value);
  return b;
}

// One message the algorithm must send.
struct Msg {
  int src, dst, step;
  int chunk_begin, chunk_end;
  Apply apply;
  std::uint64_t mask;
  std::uint64_t bytes;
  auto key() const { return std::tie(step, src, dst); }
  bool operator<(const Msg& o) const { return key() < o.key(); }
};

std::string describe(const Msg& m) {
  return fmt::format("step {} r{} -> r{} chunks [{}, {}) {} mask 0x{:x} {} B", m.step, m.src, m.dst,
                     m.chunk_begin, m.chunk_end, m.apply == Apply::reduce ? "reduce" : "copy",
                     m.mask, m.bytes);
}

// Checks every recorded message against `want`: the schedule, the bytes, the metadata on
// both sides, and that the steps are exactly 1 .. steps (what RunResult::steps counts).
void check_messages(const test::ThreadRun& run, std::vector<Msg> want, int steps) {
  std::vector<Msg> sent;
  std::set<int> step_ids;
  std::map<std::tuple<int, int, int, std::uint64_t>, const SpanEvent*> recvs;  // src, dst, tag, seq
  for (const auto& log : run.logs)
    for (const auto& e : log.spans) {
      if (e.kind == SpanEvent::Kind::plain) continue;
      step_ids.insert(e.meta.step);
      if (e.kind == SpanEvent::Kind::recv) recvs[{e.peer, log.rank, e.tag, e.seq}] = &e;
    }
  std::size_t unmatched = 0, meta_differs = 0, bad_meta = 0;
  for (const auto& log : run.logs)
    for (const auto& e : log.spans) {
      if (e.kind != SpanEvent::Kind::send) continue;
      sent.push_back({log.rank, e.peer, e.meta.step, e.meta.chunk_begin, e.meta.chunk_end,
                      e.meta.apply, e.meta.contrib_mask, e.bytes});
      if (e.meta.buffer != "data" || e.meta.contributions != std::popcount(e.meta.contrib_mask))
        ++bad_meta;
      auto it = recvs.find({log.rank, e.peer, e.tag, e.seq});
      if (it == recvs.end()) {
        ++unmatched;
        continue;
      }
      const SpanEvent& r = *it->second;
      if (r.bytes != e.bytes || r.meta.step != e.meta.step || r.meta.buffer != e.meta.buffer ||
          r.meta.chunk_begin != e.meta.chunk_begin || r.meta.chunk_end != e.meta.chunk_end ||
          r.meta.apply != e.meta.apply || r.meta.contributions != e.meta.contributions ||
          r.meta.contrib_mask != e.meta.contrib_mask)
        ++meta_differs;
    }
  CHECK(unmatched == 0);
  CHECK(meta_differs == 0);
  CHECK(bad_meta == 0);
  CHECK(recvs.size() == sent.size());

  // Steps: exactly 1 .. steps, as many as the formula says.
  std::set<int> want_steps;
  for (int s = 1; s <= steps; ++s) want_steps.insert(s);
  CHECK(step_ids == want_steps);
  CHECK(static_cast<int>(step_ids.size()) == steps);

  // Every step is marked for the viewer's step frames by the rank that drives it.
  std::set<int> marked;
  for (const auto& log : run.logs)
    for (const auto& s : log.steps) marked.insert(s.step);
  CHECK(marked == want_steps);

  std::sort(sent.begin(), sent.end());
  std::sort(want.begin(), want.end());
  std::vector<std::string> got_text, want_text;
  for (const auto& m : sent) got_text.push_back(describe(m));
  for (const auto& m : want) want_text.push_back(describe(m));
  CHECK(got_text == want_text);
}

std::uint64_t bit(int r) {
  return std::uint64_t{1} << r;
}
std::uint64_t all(int n) {
  return n >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1;
}

// The messages of the linear algorithms (step numbers from `first`).
std::vector<Msg> scatter_msgs(int n, std::size_t length, int root, int first, std::uint64_t mask) {
  std::vector<Msg> m;
  const auto sizes = chunk_sizes(length, n);
  for (int s = 1; s < n; ++s) {
    const int d = (root + s) % n;
    m.push_back({root, d, first + s - 1, d, d + 1, Apply::copy, mask, sizes[d] * sizeof(T)});
  }
  return m;
}
std::vector<Msg> gather_msgs(int n, std::size_t length, int root, int first) {
  std::vector<Msg> m;
  const auto sizes = chunk_sizes(length, n);
  for (int s = 1; s < n; ++s) {
    const int src = (root + s) % n;
    m.push_back(
        {src, root, first + s - 1, src, src + 1, Apply::copy, bit(src), sizes[src] * sizeof(T)});
  }
  return m;
}
std::vector<Msg> broadcast_msgs(int n, std::size_t length, int root, int first,
                                std::uint64_t mask) {
  std::vector<Msg> m;
  for (int s = 1; s < n; ++s)
    m.push_back({root, (root + s) % n, first + s - 1, 0, n, Apply::copy, mask, length * sizeof(T)});
  return m;
}
std::vector<Msg> reduce_msgs(int n, std::size_t length, int root, int first) {
  std::vector<Msg> m;
  for (int s = 1; s < n; ++s) {
    const int src = (root + s) % n;
    m.push_back({src, root, first + s - 1, 0, n, Apply::reduce, bit(src), length * sizeof(T)});
  }
  return m;
}
std::vector<Msg> operator+(std::vector<Msg> a, const std::vector<Msg>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs `body` on c.n ranks; each rank leaves its result in out[rank].
template <class Body>
test::ThreadRun run_case(const Case& c, std::vector<std::vector<T>>& out, Body body) {
  out.assign(static_cast<std::size_t>(c.n), {});
  return test::run_ranks(
      c.n, [&](Comm& comm) { body(comm, out[static_cast<std::size_t>(comm.rank())]); });
}

#define CASE_INFO(c) INFO("ranks " << (c).n << ", length " << (c).length << ", root " << (c).root)

void check_results(const std::vector<std::vector<T>>& out, int rank, const std::vector<T>& want) {
  INFO("result on r" << rank);
  CHECK(difference(out[static_cast<std::size_t>(rank)], want) == "");
}

}  // namespace

TEST_CASE("collectives: scatter gives rank k chunk k of the root's buffer",
          "[collectives][scatter]") {
  for (const Case c : cases(true)) {
    CASE_INFO(c);
    std::vector<std::vector<T>> out;
    const auto sizes = chunk_sizes(c.length, c.n), begins = chunk_begins(c.length, c.n);
    auto run = run_case(c, out, [&](Comm& comm, std::vector<T>& result) {
      const int me = comm.rank();
      auto whole = comm.alloc<T>(me == c.root ? c.length : 0, Category::data);
      if (me == c.root) fill_input(whole.view(), kSeed, c.root);
      auto mine = filled<T>(comm, sizes[static_cast<std::size_t>(me)], kUnwritten);
      coll::scatter(comm, View<const T>(whole.view()), mine.view(), c.root);
      result = to_vector(mine);
    });
    REQUIRE_FALSE(run.failed);
    for (int k = 0; k < c.n; ++k) check_results(out, k, input_of(c.root, begins[k], sizes[k]));
    check_messages(run, scatter_msgs(c.n, c.length, c.root, 1, bit(c.root)), c.n - 1);
  }
}

TEST_CASE("collectives: gather puts every rank's chunk in rank order on the root",
          "[collectives][gather]") {
  for (const Case c : cases(true)) {
    CASE_INFO(c);
    std::vector<std::vector<T>> out;
    const auto sizes = chunk_sizes(c.length, c.n), begins = chunk_begins(c.length, c.n);
    auto run = run_case(c, out, [&](Comm& comm, std::vector<T>& result) {
      const int me = comm.rank();
      auto mine = comm.alloc<T>(sizes[static_cast<std::size_t>(me)], Category::data);
      fill_input(mine.view(), kSeed, me);
      auto whole = filled<T>(comm, me == c.root ? c.length : 0, kUnwritten);
      coll::gather(comm, View<const T>(mine.view()), whole.view(), c.root);
      result = to_vector(whole);
    });
    REQUIRE_FALSE(run.failed);
    std::vector<T> want;
    for (int k = 0; k < c.n; ++k) {
      const auto part = input_of(k, 0, sizes[k]);
      want.insert(want.end(), part.begin(), part.end());
    }
    check_results(out, c.root, want);
    check_messages(run, gather_msgs(c.n, c.length, c.root, 1), c.n - 1);
  }
}

// A broadcast (`call(comm, data, root)`) on every case: every rank ends with the root's input,
// and the messages are `msgs(case)` in `steps(n)` steps.
template <class Call, class Msgs, class Steps>
void check_broadcast(const std::vector<Case>& all, Call call, Msgs msgs, Steps steps) {
  for (const Case c : all) {
    CASE_INFO(c);
    std::vector<std::vector<T>> out;
    auto run = run_case(c, out, [&](Comm& comm, std::vector<T>& result) {
      auto data = filled<T>(comm, c.length, kUnwritten);
      if (comm.rank() == c.root) fill_input(data.view(), kSeed, c.root);
      call(comm, data.view(), c.root);
      result = to_vector(data);
    });
    REQUIRE_FALSE(run.failed);
    const auto want = input_of(c.root, 0, c.length);
    for (int k = 0; k < c.n; ++k) check_results(out, k, want);
    check_messages(run, msgs(c), steps(c.n));
  }
}

TEST_CASE("collectives: broadcast copies the root's buffer to every rank",
          "[collectives][broadcast]") {
  check_broadcast(
      cases(true), [](Comm& comm, View<T> data, int root) { coll::broadcast(comm, data, root); },
      [](const Case& c) { return broadcast_msgs(c.n, c.length, c.root, 1, bit(c.root)); },
      [](int n) { return n - 1; });
}

// A reduce (`call(comm, in, sum, root)`) on every case: the root ends with the sum, every input
// is untouched, and the messages are `msgs(case)` in `steps(n)` steps. `whole`: every rank
// passes a sum buffer as large as its input (a tree's ranks sum their subtree there), else only
// the root.
template <class Call, class Msgs, class Steps>
void check_reduce(const std::vector<Case>& all, bool whole, Call call, Msgs msgs, Steps steps) {
  for (const Case c : all) {
    CASE_INFO(c);
    std::vector<std::vector<T>> out;
    std::vector<int> input_kept(static_cast<std::size_t>(c.n), 0);
    auto run = run_case(c, out, [&](Comm& comm, std::vector<T>& result) {
      const int me = comm.rank();
      auto in = comm.alloc<T>(c.length, Category::data);
      fill_input(in.view(), kSeed, me);
      auto sum = filled<T>(comm, me == c.root || whole ? c.length : 0, kUnwritten);
      call(comm, View<const T>(in.view()), sum.view(), c.root);
      result = to_vector(sum);
      input_kept[static_cast<std::size_t>(me)] = to_vector(in) == input_of(me, 0, c.length);
    });
    REQUIRE_FALSE(run.failed);
    CHECK(input_kept == std::vector<int>(static_cast<std::size_t>(c.n), 1));  // inputs untouched
    check_results(out, c.root, sum_of_inputs(c.n, 0, c.length));
    check_messages(run, msgs(c), steps(c.n));
  }
}

TEST_CASE("collectives: reduce sums every rank's buffer on the root", "[collectives][reduce]") {
  check_reduce(
      cases(true), false,
      [](Comm& comm, View<const T> in, View<T> sum, int root) {
        coll::reduce(comm, in, sum, root);
      },
      [](const Case& c) { return reduce_msgs(c.n, c.length, c.root, 1); },
      [](int n) { return n - 1; });
}

TEST_CASE("collectives: all-gather as gather + broadcast gives every rank every chunk",
          "[collectives][all_gather]") {
  for (const Case c : cases(false)) {
    CASE_INFO(c);
    std::vector<std::vector<T>> out;
    const auto sizes = chunk_sizes(c.length, c.n);
    auto run = run_case(c, out, [&](Comm& comm, std::vector<T>& result) {
      auto mine = comm.alloc<T>(sizes[static_cast<std::size_t>(comm.rank())], Category::data);
      fill_input(mine.view(), kSeed, comm.rank());
      auto whole = filled<T>(comm, c.length, kUnwritten);
      coll::all_gather_gather_broadcast(comm, View<const T>(mine.view()), whole.view());
      result = to_vector(whole);
    });
    REQUIRE_FALSE(run.failed);
    std::vector<T> want;
    for (int k = 0; k < c.n; ++k) {
      const auto part = input_of(k, 0, sizes[k]);
      want.insert(want.end(), part.begin(), part.end());
    }
    for (int k = 0; k < c.n; ++k) check_results(out, k, want);
    check_messages(
        run, gather_msgs(c.n, c.length, 0, 1) + broadcast_msgs(c.n, c.length, 0, c.n, all(c.n)),
        2 * (c.n - 1));
  }
}

TEST_CASE("collectives: reduce-scatter as reduce + scatter gives rank k chunk k of the sum",
          "[collectives][reduce_scatter]") {
  for (const Case c : cases(false)) {
    CASE_INFO(c);
    std::vector<std::vector<T>> out;
    const auto sizes = chunk_sizes(c.length, c.n), begins = chunk_begins(c.length, c.n);
    auto run = run_case(c, out, [&](Comm& comm, std::vector<T>& result) {
      auto in = comm.alloc<T>(c.length, Category::data);
      fill_input(in.view(), kSeed, comm.rank());
      auto mine = filled<T>(comm, sizes[static_cast<std::size_t>(comm.rank())], kUnwritten);
      coll::reduce_scatter_reduce_scatter(comm, View<const T>(in.view()), mine.view());
      result = to_vector(mine);
    });
    REQUIRE_FALSE(run.failed);
    for (int k = 0; k < c.n; ++k) check_results(out, k, sum_of_inputs(c.n, begins[k], sizes[k]));
    check_messages(run,
                   reduce_msgs(c.n, c.length, 0, 1) + scatter_msgs(c.n, c.length, 0, c.n, all(c.n)),
                   2 * (c.n - 1));
  }
}

TEST_CASE("collectives: all-reduce as reduce + broadcast gives every rank the sum",
          "[collectives][all_reduce]") {
  for (const Case c : cases(false)) {
    CASE_INFO(c);
    std::vector<std::vector<T>> out;
    auto run = run_case(c, out, [&](Comm& comm, std::vector<T>& result) {
      auto data = comm.alloc<T>(c.length, Category::data);
      fill_input(data.view(), kSeed, comm.rank());
      coll::all_reduce_reduce_broadcast(comm, data.view());
      result = to_vector(data);
    });
    REQUIRE_FALSE(run.failed);
    const auto want = sum_of_inputs(c.n, 0, c.length);
    for (int k = 0; k < c.n; ++k) check_results(out, k, want);
    check_messages(
        run, reduce_msgs(c.n, c.length, 0, 1) + broadcast_msgs(c.n, c.length, 0, c.n, all(c.n)),
        2 * (c.n - 1));
  }
}

TEST_CASE("collectives: float32 reduce and all-reduce agree with a float64 Eigen sum",
          "[collectives][float]") {
  for (int n : {2, 5, 8}) {
    const std::size_t length = 1000;
    const int root = n - 1;
    INFO("ranks " << n);
    Eigen::VectorXd want = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(length));
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < length; ++i)
        want[static_cast<Eigen::Index>(i)] += static_cast<double>(input_value<float>(kSeed, r, i));
    const double tol = sum_tolerance(n);
    std::vector<Comparison> reduced(static_cast<std::size_t>(n)),
        all_reduced(static_cast<std::size_t>(n));
    auto run = test::run_ranks(n, [&](Comm& comm) {
      const auto me = static_cast<std::size_t>(comm.rank());
      auto in = comm.alloc<float>(length, Category::data);
      fill_input(in.view(), kSeed, comm.rank());
      auto sum = comm.alloc<float>(comm.rank() == root ? length : 0, Category::data);
      coll::reduce(comm, View<const float>(in.view()), sum.view(), root);
      if (comm.rank() == root) reduced[me] = compare(View<const float>(sum.view()), want, tol);
      coll::all_reduce_reduce_broadcast(comm, in.view());
      all_reduced[me] = compare(View<const float>(in.view()), want, tol);
    });
    REQUIRE_FALSE(run.failed);
    {
      INFO(reduced[static_cast<std::size_t>(root)].detail());
      CHECK(reduced[static_cast<std::size_t>(root)].n == length);
      CHECK(reduced[static_cast<std::size_t>(root)].ok);
    }
    for (const auto& c : all_reduced) {
      INFO(c.detail());
      CHECK(c.n == length);
      CHECK(c.ok);
    }
    // Steps continue across collectives: reduce 1 .. N-1, the all-reduce N .. 3(N-1).
    std::set<int> steps;
    for (const auto& log : run.logs)
      for (const auto& e : log.spans)
        if (e.kind != SpanEvent::Kind::plain) steps.insert(e.meta.step);
    CHECK(static_cast<int>(steps.size()) == 3 * (n - 1));
    CHECK(*steps.rbegin() == 3 * (n - 1));
  }
}

TEST_CASE("collectives: reduce charges one peer-sized comm buffer on the root, and frees it",
          "[collectives][reduce][memory]") {
  const int n = 4, root = 1;
  const std::size_t length = 100;
  auto run = test::run_ranks(n, [&](Comm& comm) {
    auto in = comm.alloc<T>(length, Category::data);
    auto sum = comm.alloc<T>(comm.rank() == root ? length : 0, Category::data);
    coll::reduce(comm, View<const T>(in.view()), sum.view(), root);
  });
  REQUIRE_FALSE(run.failed);
  for (int r = 0; r < n; ++r) {
    INFO("r" << r);
    const auto& log = run.logs[static_cast<std::size_t>(r)];
    CHECK(log.peak[static_cast<int>(Category::comm)] ==
          static_cast<std::int64_t>(r == root ? length * sizeof(T) : 0));
    REQUIRE_FALSE(log.counters.empty());
    CHECK(log.counters.back().bytes[static_cast<int>(Category::comm)] == 0);
  }
}

// --- trees, Bruck and all-to-all (tree.hpp and the files named below) --------------------------

namespace {

// World sizes for the algorithms whose shape depends on N's bits: 1 .. 16, 13 among them.
std::vector<Case> tree_cases(bool rooted) {
  std::vector<Case> out;
  for (int n = 1; n <= 16; ++n)
    for (std::size_t length : {0ul, 1ul, std::size_t(n > 1 ? n - 1 : 2), 1000ul}) {
      std::set<int> roots = rooted ? std::set<int>{0, n / 2, n - 1} : std::set<int>{0};
      for (int root : roots) out.push_back({n, length, root});
    }
  out.push_back({13, 1ul << 20, rooted ? 12 : 0});
  return out;
}

int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// The binomial tree's edges, straight from its definition: in round k (of ceil(log2 N)), the
// relative ranks v = 2^k, 3 2^k, 5 2^k, .. (v mod 2^(k+1) = 2^k) pair with v - 2^k. `reduce`:
// children to parents in rounds 0, 1, .. (step first + k), carrying their subtree's ranks
// [v, v + 2^k); else parents to children in the reverse order (step first + K - 1 - k).
std::vector<Msg> binomial_msgs(int n, std::size_t length, int root, int first, bool reduce,
                               std::uint64_t mask) {
  std::vector<Msg> m;
  const int K = ceil_log2(n);
  for (int k = 0; k < K; ++k)
    for (int v = 1 << k; v < n; v += 2 << k) {
      const int child = (v + root) % n, parent = (v - (1 << k) + root) % n;
      std::uint64_t sub = 0;
      for (int u = v; u < std::min(n, v + (1 << k)); ++u) sub |= bit((u + root) % n);
      if (reduce)
        m.push_back({child, parent, first + k, 0, 1, Apply::reduce, sub, length * sizeof(T)});
      else
        m.push_back(
            {parent, child, first + K - 1 - k, 0, 1, Apply::copy, mask, length * sizeof(T)});
    }
  return m;
}

}  // namespace

TEST_CASE("collectives: tree broadcast copies the root's buffer in ceil(log2 N) rounds",
          "[collectives][broadcast][tree]") {
  check_broadcast(
      tree_cases(true),
      [](Comm& comm, View<T> data, int root) { coll::broadcast_tree(comm, data, root); },
      [](const Case& c) { return binomial_msgs(c.n, c.length, c.root, 1, false, bit(c.root)); },
      ceil_log2);
}

TEST_CASE("collectives: tree reduce sums every rank's buffer on the root in ceil(log2 N) rounds",
          "[collectives][reduce][tree]") {
  check_reduce(
      tree_cases(true), true,
      [](Comm& comm, View<const T> in, View<T> sum, int root) {
        coll::reduce_tree(comm, in, sum, root);
      },
      [](const Case& c) { return binomial_msgs(c.n, c.length, c.root, 1, true, 0); }, ceil_log2);
}

TEST_CASE("collectives: Bruck's all-gather gives every rank every chunk in ceil(log2 N) steps",
          "[collectives][all_gather][bruck]") {
  for (const Case c : tree_cases(false)) {
    CASE_INFO(c);
    std::vector<std::vector<T>> out;
    auto run = run_case(c, out, [&](Comm& comm, std::vector<T>& result) {
      const int me = comm.rank();
      auto data = filled<T>(comm, c.length, kUnwritten);
      const auto begins = chunk_begins(c.length, c.n);
      const auto sizes = chunk_sizes(c.length, c.n);
      for (std::size_t i = 0; i < sizes[std::size_t(me)]; ++i)
        data.host()[begins[std::size_t(me)] + i] =
            input_value<T>(kSeed, me, begins[std::size_t(me)] + i);
      coll::all_gather_bruck(comm, data.view());
      result = to_vector(data);
    });
    REQUIRE_FALSE(run.failed);
    // Every chunk k from rank k's input.
    std::vector<T> want(c.length);
    const auto begins = chunk_begins(c.length, c.n);
    const auto sizes = chunk_sizes(c.length, c.n);
    for (int k = 0; k < c.n; ++k)
      for (std::size_t i = 0; i < sizes[std::size_t(k)]; ++i)
        want[begins[std::size_t(k)] + i] = input_value<T>(kSeed, k, begins[std::size_t(k)] + i);
    for (int k = 0; k < c.n; ++k) check_results(out, k, want);
    // ceil(log2 N) steps; each rank receives every chunk but its own once, (N-1)/N of the
    // buffer, in at most two messages a step (a range that wraps past rank N - 1).
    std::set<int> steps;
    for (const auto& log : run.logs) {
      std::uint64_t got = 0, msgs = 0;
      for (const auto& e : log.spans)
        if (e.kind == SpanEvent::Kind::recv) got += e.bytes, ++msgs, steps.insert(e.meta.step);
      INFO("r" << log.rank);
      CHECK(got == (c.length - sizes[std::size_t(log.rank)]) * sizeof(T));
      CHECK(msgs <= std::uint64_t(2 * ceil_log2(c.n)));
      CHECK(msgs >= std::uint64_t(ceil_log2(c.n)));
    }
    CHECK(int(steps.size()) == ceil_log2(c.n));
  }
}

// One all-to-all of `count` elements per block on n ranks (`exchange(comm, send, recv)`), each
// rank's input its own data; checks that rank j's block i is rank i's input block j, elements
// [j count, (j + 1) count), on every rank. Returns the run for its counts.
template <class Exchange>
test::ThreadRun run_all_to_all(int n, std::size_t count, Exchange exchange) {
  std::vector<std::vector<T>> out(static_cast<std::size_t>(n));
  auto run = test::run_ranks(n, [&](Comm& comm) {
    auto send = comm.alloc<T>(count * std::size_t(n), Category::data);
    fill_input(send.view(), kSeed, comm.rank());
    auto recv = filled<T>(comm, count * std::size_t(n), kUnwritten);
    exchange(comm, View<const T>(send.view()), recv.view());
    out[std::size_t(comm.rank())] = to_vector(recv);
  });
  REQUIRE_FALSE(run.failed);
  for (int j = 0; j < n; ++j) {
    std::vector<T> expect;
    for (int i = 0; i < n; ++i)
      for (std::size_t e = 0; e < count; ++e)
        expect.push_back(input_value<T>(kSeed, i, std::size_t(j) * count + e));
    check_results(out, j, expect);
  }
  return run;
}

TEST_CASE(
    "collectives: Bruck's all-to-all delivers what the pairwise exchange does, in ceil(lg N) "
    "messages per rank",
    "[collectives][all_to_all][bruck]") {
  for (int n = 1; n <= 16; ++n)
    for (std::size_t count : {0ul, 1ul, std::size_t(n - 1), 7ul, 250ul}) {
      INFO("ranks " << n << ", " << count << " elements per block");
      const auto run = run_all_to_all(n, count, [](Comm& comm, View<const T> send, View<T> recv) {
        coll::all_to_all_bruck(comm, send, recv);
      });
      // Block i (distance i) hops once per set bit of i: sum_i popcount(i) blocks each way, in
      // one message per step, ceil(lg N) steps.
      std::uint64_t blocks = 0;
      for (int i = 1; i < n; ++i) blocks += std::uint64_t(std::popcount(unsigned(i)));
      std::set<int> steps;
      for (const auto& log : run.logs) {
        std::uint64_t sent = 0, got = 0, msgs_out = 0, msgs_in = 0;
        for (const auto& e : log.spans) {
          if (e.kind == SpanEvent::Kind::send)
            sent += e.bytes, ++msgs_out, steps.insert(e.meta.step);
          if (e.kind == SpanEvent::Kind::recv) got += e.bytes, ++msgs_in;
        }
        INFO("r" << log.rank);
        CHECK(sent == blocks * count * sizeof(T));
        CHECK(got == blocks * count * sizeof(T));
        CHECK(msgs_out == std::uint64_t(ceil_log2(n)));
        CHECK(msgs_in == std::uint64_t(ceil_log2(n)));
      }
      CHECK(int(steps.size()) == ceil_log2(n));
    }
}

TEST_CASE("collectives: pairwise all-to-all delivers block j of rank i to rank j, in N-1 steps",
          "[collectives][all_to_all]") {
  for (int n = 1; n <= 16; ++n)
    for (std::size_t count : {0ul, 1ul, 7ul, 250ul}) {
      INFO("ranks " << n << ", " << count << " elements per block");
      const auto run = run_all_to_all(n, count, [](Comm& comm, View<const T> send, View<T> recv) {
        coll::all_to_all_pairwise(comm, send, recv);
      });
      std::vector<Msg> want;
      for (int j = 0; j < n; ++j)
        for (int s = 1; s < n; ++s)  // rank j sends its block for j + s at step s
          want.push_back({j, (j + s) % n, s, j, j + 1, Apply::copy, bit(j), count * sizeof(T)});
      check_messages(run, want, n - 1);
    }
}
