// collectives/all_reduce*.hpp: every all-reduce algorithm on in-process ranks, against sums
// computed from input_value alone, and its recorded trace against the cost formulas.
//
//   results    N in {1, 2, 3, 4, 5, 6, 7, 8, 13, 16}, lengths {0, 1, N-1, 1000, 2^20}
//              (2^20 with int64 only): int64 and double sums must match exactly (whole numbers, and
//              float-valued doubles whose sums of <= 16 terms fit in 53 bits); float32 must lie
//              within sum_tolerance of a float64 Eigen sum
//   counts     steps, bytes and messages per rank, counted from the send and recv spans
//   bits       the algorithms that promise it leave identical float32 bits on every rank
//   data flow  chunk ranges, copy or reduce and contributions in the message metadata
//   building   reduce_scatter_ring and all_gather_ring on their own
// Rank bodies only record into their own slot; every assertion runs on the test thread.
#include "catch.hpp"

#include <fmt/format.h>
#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/partition.hpp"
#include "core/collectives/all_gather_ring.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/reduce_scatter_ring.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/verify.hpp"
#include "thread_world.hpp"

using namespace distlab;
using coll::AllReduceAlgo;

namespace {

constexpr std::uint64_t kSeed = 2025;
constexpr std::int64_t kUnwritten = 1'000'000;  // outside any input, so an untouched element shows

const std::vector<int> kWorlds = {1, 2, 3, 4, 5, 6, 7, 8, 13, 16};

// Every algorithm that runs on in-process ranks (library needs mpirun).
std::vector<AllReduceAlgo> algos() {
  std::vector<AllReduceAlgo> out;
  for (AllReduceAlgo a : coll::all_reduce_algos())
    if (a != AllReduceAlgo::library) out.push_back(a);
  return out;
}

// Lengths {0, 1, N-1, 1000}; with `large`, also 2^20 (seconds on 2 cores, so one element type
// only).
std::vector<std::size_t> lengths(int n, bool large) {
  std::set<std::size_t> s = {0, 1, static_cast<std::size_t>(n - 1), 1000};
  if (large) s.insert(std::size_t{1} << 20);
  return {s.begin(), s.end()};
}

bool is_power_of_two(int n) {
  return (n & (n - 1)) == 0;
}
int floor_power_of_two(int n) {
  int p = 1;
  while (2 * p <= n) p *= 2;
  return p;
}
int log2_exact(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}
std::uint64_t bit(int r) {
  return std::uint64_t{1} << r;
}
std::uint64_t all(int n) {
  return n >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1;
}
int mod(int a, int n) {
  return ((a % n) + n) % n;
}

// Element-wise sum of every rank's input, elements [offset, offset + count), added in T.
template <class T>
std::vector<T> sum_of_inputs(int n, std::size_t offset, std::size_t count) {
  std::vector<T> v(count, T{});
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) v[i] += input_value<T>(kSeed, r, offset + i);
  return v;
}

Eigen::VectorXd float64_sum(int n, std::size_t length) {
  Eigen::VectorXd want = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(length));
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < length; ++i)
      want[static_cast<Eigen::Index>(i)] += static_cast<double>(input_value<float>(kSeed, r, i));
  return want;
}

// "" when equal, else where they first differ.
template <class T>
std::string difference(View<const T> got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return fmt::format("{} elements, want {}", got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i])) return fmt::format("element {} is {}, want {}", i, got[i], want[i]);
  return {};
}

// Runs one all-reduce of `length` T on n ranks; `record(rank, result)` keeps what it needs.
template <class T, class Record>
test::ThreadRun run_all_reduce(AllReduceAlgo algo, int n, std::size_t length, Record record) {
  return test::run_ranks(n, [&](Comm& comm) {
    auto data = comm.alloc<T>(length, Category::data);
    fill_input(data.view(), kSeed, comm.rank());
    coll::all_reduce(comm, data.view(), algo);
    record(comm.rank(), View<const T>(data.view()));
  });
}

#define RUN_INFO(algo, n, length) \
  INFO(coll::to_string(algo) << " on " << (n) << " ranks, length " << (length))

// --- counting the trace -------------------------------------------------------------------

struct RankCounts {
  std::uint64_t bytes_sent = 0, bytes_recv = 0, msgs_sent = 0, msgs_recv = 0;
  bool operator==(const RankCounts& o) const {
    return std::tie(bytes_sent, bytes_recv, msgs_sent, msgs_recv) ==
           std::tie(o.bytes_sent, o.bytes_recv, o.msgs_sent, o.msgs_recv);
  }
};
std::ostream& operator<<(std::ostream& os, const RankCounts& c) {
  return os << "sent " << c.bytes_sent << " B in " << c.msgs_sent << " msgs, received "
            << c.bytes_recv << " B in " << c.msgs_recv << " msgs";
}

struct TraceCounts {
  std::vector<RankCounts> ranks;
  std::set<int> steps;           // distinct meta.step of every message of every rank
  std::set<int> marked;          // steps some rank marked for the viewer
  std::size_t unpaired = 0;      // sends without their receive, or receives without their send
  std::size_t meta_differs = 0;  // pairs whose two sides disagree on bytes or metadata
  std::size_t bad_meta = 0;      // contributions != popcount(mask), or no buffer name
};

TraceCounts count(const test::ThreadRun& run) {
  TraceCounts t;
  t.ranks.resize(run.logs.size());
  std::map<std::tuple<int, int, int, std::uint64_t>, const SpanEvent*> sends,
      recvs;  // src, dst, tag, seq
  for (const auto& log : run.logs) {
    auto& c = t.ranks[static_cast<std::size_t>(log.rank)];
    for (const auto& s : log.steps) t.marked.insert(s.step);
    for (const auto& e : log.spans) {
      if (e.kind == SpanEvent::Kind::plain) continue;
      t.steps.insert(e.meta.step);
      if (e.meta.buffer.empty() || e.meta.contributions != std::popcount(e.meta.contrib_mask))
        ++t.bad_meta;
      if (e.kind == SpanEvent::Kind::send) {
        c.bytes_sent += e.bytes, ++c.msgs_sent;
        sends[{log.rank, e.peer, e.tag, e.seq}] = &e;
      } else {
        c.bytes_recv += e.bytes, ++c.msgs_recv;
        recvs[{e.peer, log.rank, e.tag, e.seq}] = &e;
      }
    }
  }
  for (const auto& [key, s] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end()) {
      ++t.unpaired;
      continue;
    }
    const SpanEvent& r = *it->second;
    if (r.bytes != s->bytes || r.meta.step != s->meta.step || r.meta.buffer != s->meta.buffer ||
        r.meta.chunk_begin != s->meta.chunk_begin || r.meta.chunk_end != s->meta.chunk_end ||
        r.meta.apply != s->meta.apply || r.meta.contributions != s->meta.contributions ||
        r.meta.contrib_mask != s->meta.contrib_mask)
      ++t.meta_differs;
  }
  t.unpaired += recvs.size() > sends.size() ? recvs.size() - sends.size() : 0;
  return t;
}

// The sends of a run in (step, src) order, with their sender.
struct Sent {
  int src;
  const SpanEvent* e;
};
std::vector<Sent> sends_of(const test::ThreadRun& run) {
  std::vector<Sent> out;
  for (const auto& log : run.logs)
    for (const auto& e : log.spans)
      if (e.kind == SpanEvent::Kind::send) out.push_back({log.rank, &e});
  std::sort(out.begin(), out.end(), [](const Sent& a, const Sent& b) {
    return std::tie(a.e->meta.step, a.src) < std::tie(b.e->meta.step, b.src);
  });
  return out;
}

// The messages that broke a rule, the first few spelled out (a broken schedule has thousands).
struct Wrong {
  std::size_t count = 0;
  std::vector<std::string> first;
  void add(std::string what) {
    if (count++ < 6) first.push_back(std::move(what));
  }
};
std::ostream& operator<<(std::ostream& os, const Wrong& w) {
  os << w.count << " wrong messages";
  for (const auto& line : w.first) os << "\n  " << line;
  return os;
}

// --- the formulas ---------------------------------------------------------------------------

// NCCL's binary tree (ncclGetBtree), built from its definition (independently of tree.hpp's
// climbing): role 0 is the root, over the in-order binary tree of roles 1..n-1, whose root of
// roles [lo, hi] is the one with the most trailing zeros, the roles below it its left subtree,
// those above its right. Returns, per rank, how many tree edges it has: tree 0 gives rank r the
// role r; tree 1 (ncclGetDtree) the role n-1-r for even n, r-1 (mod n) for odd n.
void inorder_edges(int lo, int hi, int parent, std::vector<int>& edges) {
  if (lo > hi) return;
  int root = lo;
  for (int p = lo; p <= hi; ++p)
    if (std::countr_zero(unsigned(p)) > std::countr_zero(unsigned(root))) root = p;
  if (parent > 0) ++edges[std::size_t(root)], ++edges[std::size_t(parent)];
  inorder_edges(lo, root - 1, root, edges);
  inorder_edges(root + 1, hi, root, edges);
}
std::vector<std::uint64_t> nccl_tree_links(int n, int t) {
  std::vector<int> by_role(std::size_t(n), 0);
  if (n >= 2) {
    inorder_edges(1, n - 1, 0, by_role);
    ++by_role[0], ++by_role[std::size_t(floor_power_of_two(n - 1))];  // role 0 over the top
  }
  std::vector<std::uint64_t> out(static_cast<std::size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    const int role = t == 0 ? r : n % 2 == 0 ? n - 1 - r : (r - 1 + n) % n;
    out[std::size_t(r)] = std::uint64_t(by_role[std::size_t(role)]);
  }
  return out;
}
// The tree's height: role 0 over the in-order tree of 1..n-1, whose top is the largest power of
// two <= n-1 at height log2 of it: ceil(lg n).
int nccl_tree_height(int n) {
  return n < 2 ? 0 : 1 + std::countr_zero(unsigned(floor_power_of_two(n - 1)));
}
// Bytes of half t of a buffer of `length` elements cut into 2G chunks (chunks t G .. t G + G - 1).
std::uint64_t block2(std::size_t length, std::size_t elem, int G, int t) {
  std::uint64_t b = 0;
  for (int k = t * G; k < t * G + G; ++k) b += Partition{length, 2 * G}.size(k) * elem;
  return b;
}

// What the trace of one all-reduce must show: S = length * elem bytes, p2 the largest power
// of two <= N, rem = N - p2, L = log2 p2. One rank sends nothing, in no steps.
struct Expected {
  int steps = 0;
  std::vector<RankCounts> ranks;
};

// `g`: the hierarchical algorithm's ranks per node (0: coll::default_ranks_per_node).
Expected expected(AllReduceAlgo algo, int n, std::size_t length, std::size_t elem,
                  int g_given = 0) {
  Expected x;
  x.ranks.resize(static_cast<std::size_t>(n));
  if (n == 1) return x;
  const std::uint64_t S = length * elem;
  const int p2 = floor_power_of_two(n), rem = n - p2, L = log2_exact(p2);
  const int fold_steps = rem > 0 ? 2 : 0;
  // Bytes of chunk k when the buffer is cut into `parts` chunks.
  const auto chunk = [&](int parts, int k) {
    return Partition{length, parts}.size(mod(k, parts)) * elem;
  };
  // Bytes of chunks [first, first + width) of p2 chunks.
  const auto block = [&](int first, int width) {
    std::uint64_t b = 0;
    for (int k = first; k < first + width; ++k) b += chunk(p2, k);
    return b;
  };
  for (int r = 0; r < n; ++r) {
    auto& c = x.ranks[static_cast<std::size_t>(r)];
    switch (algo) {
      case AllReduceAlgo::reduce_broadcast:  // rank 0 takes N-1 buffers in, sends N-1 out
        x.steps = 2 * (n - 1);
        c = r == 0
                ? RankCounts{(n - 1) * S, (n - 1) * S, std::uint64_t(n - 1), std::uint64_t(n - 1)}
                : RankCounts{S, S, 1, 1};
        break;
      case AllReduceAlgo::sequential:  // N rounds; each rank speaks N-1 times in its own round
        x.steps = n;
        c = {(n - 1) * S, (n - 1) * S, std::uint64_t(n - 1), std::uint64_t(n - 1)};
        break;
      case AllReduceAlgo::parallel:  // one step, N-1 whole buffers each way
        x.steps = 1;
        c = {(n - 1) * S, (n - 1) * S, std::uint64_t(n - 1), std::uint64_t(n - 1)};
        break;
      case AllReduceAlgo::ring:  // N-1 steps of one whole buffer each way
        x.steps = n - 1;
        c = {(n - 1) * S, (n - 1) * S, std::uint64_t(n - 1), std::uint64_t(n - 1)};
        break;
      case AllReduceAlgo::ring_chunked:
        // Reduce-scatter sends every chunk but r and receives every chunk but r-1; all-gather
        // sends every chunk but r+1 and receives every chunk but r.
        x.steps = 2 * (n - 1);
        c = {2 * S - chunk(n, r) - chunk(n, r + 1), 2 * S - chunk(n, r - 1) - chunk(n, r),
             std::uint64_t(2 * (n - 1)), std::uint64_t(2 * (n - 1))};
        break;
      case AllReduceAlgo::recursive_doubling:
        x.steps = L + fold_steps;
        if (r >= p2)
          c = {S, S, 1, 1};  // fold in, fold out
        else
          c = {L * S, L * S, std::uint64_t(L), std::uint64_t(L)};
        if (r < rem) c = {c.bytes_sent + S, c.bytes_recv + S, c.msgs_sent + 1, c.msgs_recv + 1};
        break;
      case AllReduceAlgo::recursive_halving:
        x.steps = 2 * L + fold_steps;
        if (r >= p2) {
          c = {S, S, 1, 1};
        } else {
          // Reduce-scatter at distance d: give away the aligned block of width d holding r ^ d,
          // keep (receive into) the one holding r; the all-gather swaps the same blocks back.
          for (int d = p2 / 2; d >= 1; d /= 2) {
            const std::uint64_t give = block((r ^ d) & ~(d - 1), d), keep = block(r & ~(d - 1), d);
            c.bytes_sent += give + keep;
            c.bytes_recv += keep + give;
          }
          c.msgs_sent = c.msgs_recv = std::uint64_t(2 * L);
        }
        if (r < rem) c = {c.bytes_sent + S, c.bytes_recv + S, c.msgs_sent + 1, c.msgs_recv + 1};
        break;
      case AllReduceAlgo::tree: {
        // A binomial tree rooted at 0: rank r != 0 sends one whole buffer up and gets one down;
        // its children are r + 2^k for k below its lowest set bit (every k < K for the root).
        const int K = log2_exact(n);  // ceil(log2 N)
        x.steps = 2 * K;
        std::uint64_t kids = 0;
        for (int k = 0; k < (r == 0 ? K : std::countr_zero(unsigned(r))); ++k)
          kids += r + (1 << k) < n ? 1 : 0;
        const std::uint64_t links = kids + (r != 0 ? 1 : 0);
        c = {links * S, links * S, links, links};
        break;
      }
      case AllReduceAlgo::double_binary_tree: {
        // NCCL's two binary trees (tree 2 mirrored for even N, shifted by one for odd), each
        // carrying half t of the buffer in kTreeSegments segments up and down each edge.
        const int G = coll::kTreeSegments;
        const std::uint64_t half[2] = {block2(length, elem, G, 0), block2(length, elem, G, 1)};
        int top = 0;
        for (int t = 0; t < 2; ++t) {
          const auto links = nccl_tree_links(n, t);  // per rank: edges to parent and children
          top = std::max(top, nccl_tree_height(n));
          c.bytes_sent += half[t] * links[std::size_t(r)];
          c.msgs_sent += std::uint64_t(G) * links[std::size_t(r)];
        }
        c.bytes_recv = c.bytes_sent, c.msgs_recv = c.msgs_sent;
        x.steps = 2 * (G + top - 1);
        break;
      }
      case AllReduceAlgo::hierarchical: {
        // g ranks per node, m nodes; fine chunks over N. Inside the node a ring of g over node
        // chunks (fine chunks [i m, (i+1) m)); across, a ring of m over fine chunks l m + j.
        // Each ring: the reduce-scatter sends every chunk but its position's and receives every
        // chunk but the one before it; the all-gather sends every chunk but the one after its
        // position and receives every chunk but its own (as ring_chunked).
        const int g = g_given > 0 ? g_given : coll::default_ranks_per_node(n), m = n / g, l = r % g,
                  node = r / g;
        const auto node_chunk = [&](int i) {
          std::uint64_t b = 0;
          for (int k = mod(i, g) * m; k < (mod(i, g) + 1) * m; ++k) b += chunk(n, k);
          return b;
        };
        const auto across_chunk = [&](int j) { return chunk(n, l * m + mod(j, m)); };
        std::uint64_t node_total = 0, across_total = 0;
        for (int i = 0; i < g; ++i) node_total += node_chunk(i);
        for (int j = 0; j < m; ++j) across_total += across_chunk(j);
        x.steps = 2 * (g - 1) + 2 * (m - 1);
        if (g > 1) {
          c.bytes_sent += 2 * node_total - node_chunk(l) - node_chunk(l + 1);
          c.bytes_recv += 2 * node_total - node_chunk(l - 1) - node_chunk(l);
        }
        if (m > 1) {
          c.bytes_sent += 2 * across_total - across_chunk(node) - across_chunk(node + 1);
          c.bytes_recv += 2 * across_total - across_chunk(node - 1) - across_chunk(node);
        }
        c.msgs_sent = c.msgs_recv = std::uint64_t(x.steps);
        break;
      }
      case AllReduceAlgo::library:
        break;
    }
  }
  return x;
}

// Real ranks whose data virtual rank u holds after the fold: u, and u + p2 when u < rem.
std::uint64_t weight_mask(int u, int rem, int p2) {
  return bit(u) | (u < rem ? bit(u + p2) : 0);
}

}  // namespace

// --- results ---------------------------------------------------------------------------------

TEST_CASE("all-reduce: every algorithm gives every rank the exact int64 sum",
          "[all_reduce][int64]") {
  for (int n : kWorlds)
    for (std::size_t length : lengths(n, /*large=*/true)) {
      const auto want = sum_of_inputs<std::int64_t>(n, 0, length);
      for (AllReduceAlgo algo : algos()) {
        RUN_INFO(algo, n, length);
        std::vector<std::string> diff(static_cast<std::size_t>(n), "not run");
        auto run =
            run_all_reduce<std::int64_t>(algo, n, length, [&](int r, View<const std::int64_t> got) {
              diff[static_cast<std::size_t>(r)] = difference(got, want);
            });
        REQUIRE_FALSE(run.failed);
        for (int r = 0; r < n; ++r) {
          INFO("result on r" << r);
          CHECK(diff[static_cast<std::size_t>(r)] == "");
        }
      }
    }
}

TEST_CASE("all-reduce: every algorithm gives every rank the exact double sum",
          "[all_reduce][double]") {
  for (int n : kWorlds)
    for (std::size_t length : lengths(n, /*large=*/false)) {
      const auto want = sum_of_inputs<double>(n, 0, length);
      for (AllReduceAlgo algo : algos()) {
        RUN_INFO(algo, n, length);
        std::vector<std::string> diff(static_cast<std::size_t>(n), "not run");
        auto run = run_all_reduce<double>(algo, n, length, [&](int r, View<const double> got) {
          diff[static_cast<std::size_t>(r)] = difference(got, want);
        });
        REQUIRE_FALSE(run.failed);
        for (int r = 0; r < n; ++r) {
          INFO("result on r" << r);
          CHECK(diff[static_cast<std::size_t>(r)] == "");
        }
      }
    }
}

TEST_CASE(
    "all-reduce: float32 sums lie within sum_tolerance, with identical bits on every rank "
    "for all but the lecture ring",
    "[all_reduce][float][bits]") {
  for (int n : kWorlds)
    for (std::size_t length : {std::size_t{1000}, std::size_t{4099}}) {
      const Eigen::VectorXd want = float64_sum(n, length);
      for (AllReduceAlgo algo : algos()) {
        RUN_INFO(algo, n, length);
        std::vector<Comparison> close(static_cast<std::size_t>(n));
        std::vector<std::vector<float>> bits(static_cast<std::size_t>(n));
        auto run = run_all_reduce<float>(algo, n, length, [&](int r, View<const float> got) {
          close[static_cast<std::size_t>(r)] = compare(got, want, sum_tolerance(n));
          bits[static_cast<std::size_t>(r)].assign(got.ptr, got.ptr + got.size());
        });
        REQUIRE_FALSE(run.failed);
        for (int r = 0; r < n; ++r) {
          INFO("result on r" << r << ": " << close[static_cast<std::size_t>(r)].detail());
          CHECK(close[static_cast<std::size_t>(r)].n == length);
          CHECK(close[static_cast<std::size_t>(r)].ok);
        }
        // Each rank adds the ring's whole buffers in its own order: only the tolerance holds.
        if (algo == AllReduceAlgo::ring) continue;
        for (int r = 1; r < n; ++r) {
          INFO("r" << r << " against r0");
          const auto& a = bits[0];
          const auto& b = bits[static_cast<std::size_t>(r)];
          REQUIRE(a.size() == b.size());
          CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        }
      }
    }
}

// --- counts from the trace -------------------------------------------------------------------

TEST_CASE("all-reduce: steps, bytes and messages per rank match the formulas",
          "[all_reduce][counts]") {
  for (int n : kWorlds)
    for (std::size_t length : lengths(n, /*large=*/false))
      for (AllReduceAlgo algo : algos()) {
        RUN_INFO(algo, n, length);
        auto run =
            run_all_reduce<std::int64_t>(algo, n, length, [](int, View<const std::int64_t>) {});
        REQUIRE_FALSE(run.failed);
        const TraceCounts got = count(run);
        const Expected want = expected(algo, n, length, sizeof(std::int64_t));
        // Steps: exactly 1 .. steps (the first collective of the run), each marked for the viewer.
        std::set<int> want_steps;
        for (int s = 1; s <= want.steps; ++s) want_steps.insert(s);
        CHECK(static_cast<int>(got.steps.size()) == want.steps);
        CHECK(got.steps == want_steps);
        CHECK(got.marked == want_steps);  // a world of one moves nothing and marks nothing
        for (int r = 0; r < n; ++r) {
          INFO("r" << r);
          CHECK(got.ranks[static_cast<std::size_t>(r)] == want.ranks[static_cast<std::size_t>(r)]);
        }
        CHECK(got.unpaired == 0);
        CHECK(got.meta_differs == 0);
        CHECK(got.bad_meta == 0);
      }
}

TEST_CASE(
    "all-reduce: hierarchical with every node size that divides N (the World's or given), "
    "exact sums and counts",
    "[all_reduce][hierarchical]") {
  // Nodes of g ranks from World::ranks_per_node (--ranks-per-node, or the platform's under
  // --sim), and the same g passed to all_reduce_hierarchical: both obey the formulas for g.
  for (int n : {4, 6, 8, 12, 16})
    for (int g = 1; g <= n; ++g) {
      if (n % g != 0) continue;
      for (bool from_world : {true, false})
        for (std::size_t length : {std::size_t(0), std::size_t(n - 1), std::size_t(1000)}) {
          INFO(n << " ranks, " << g << " per node (" << (from_world ? "World" : "argument")
                 << "), length " << length);
          const auto want = sum_of_inputs<std::int64_t>(n, 0, length);
          std::vector<std::string> diff(static_cast<std::size_t>(n), "not run");
          auto run = test::run_ranks(
              n,
              [&](Comm& comm) {
                auto data = comm.alloc<std::int64_t>(length, Category::data);
                fill_input(data.view(), kSeed, comm.rank());
                coll::all_reduce_hierarchical(comm, data.view(), from_world ? 0 : g);
                diff[std::size_t(comm.rank())] =
                    difference(View<const std::int64_t>(data.view()), want);
              },
              10.0, from_world ? g : 0);
          REQUIRE_FALSE(run.failed);
          const TraceCounts got = count(run);
          const Expected x =
              expected(AllReduceAlgo::hierarchical, n, length, sizeof(std::int64_t), g);
          CHECK(int(got.steps.size()) == x.steps);
          for (int r = 0; r < n; ++r) {
            INFO("r" << r);
            CHECK(diff[std::size_t(r)] == "");
            CHECK(got.ranks[std::size_t(r)] == x.ranks[std::size_t(r)]);
          }
        }
    }
  // A node size that does not divide N is refused with a sentence.
  auto bad = test::run_ranks(6, [](Comm& comm) {
    auto data = comm.alloc<float>(10, Category::data);
    coll::all_reduce_hierarchical(comm, data.view(), 4);
  });
  CHECK(bad.failed);
  CHECK_THAT(bad.failure, Catch::Contains("4 ranks per node do not divide 6 ranks"));
}

TEST_CASE("all-reduce: the headline formulas hold on 8 ranks", "[all_reduce][counts]") {
  // The table in all_reduce.hpp, spelled out for N = 8, S = 8000 B (1000 int64).
  const int n = 8;
  const std::uint64_t S = 8000;
  auto check = [&](AllReduceAlgo algo, int steps, std::uint64_t busiest) {
    INFO(coll::to_string(algo));
    auto run = run_all_reduce<std::int64_t>(algo, n, 1000, [](int, View<const std::int64_t>) {});
    REQUIRE_FALSE(run.failed);
    const TraceCounts t = count(run);
    std::uint64_t most = 0;
    for (const auto& c : t.ranks) most = std::max(most, c.bytes_sent);
    CHECK(static_cast<int>(t.steps.size()) == steps);
    CHECK(most == busiest);
  };
  check(AllReduceAlgo::ring_chunked, 2 * (n - 1), 2 * (n - 1) * S / n);
  check(AllReduceAlgo::recursive_halving, 2 * 3, 2 * (n - 1) * S / n);
  check(AllReduceAlgo::recursive_doubling, 3, 3 * S);
  check(AllReduceAlgo::ring, n - 1, (n - 1) * S);
  check(AllReduceAlgo::parallel, 1, (n - 1) * S);
  check(AllReduceAlgo::sequential, n, (n - 1) * S);
  check(AllReduceAlgo::reduce_broadcast, 2 * (n - 1), (n - 1) * S);
  check(AllReduceAlgo::tree, 2 * 3, 3 * S);  // the root sends the sum down 3 times
  // 2 ranks per node, 4 nodes: 2 steps inside the node, 6 across; 2(N-1)/N S, as the ring
  check(AllReduceAlgo::hierarchical, 2 * 1 + 2 * 3, 2 * (n - 1) * S / n);
}

TEST_CASE(
    "all-reduce: parallel keeps N-1 sends in flight, the double binary tree its pipeline, "
    "every other algorithm one",
    "[all_reduce][concurrency]") {
  // In flight = posted and not yet waited for (Comm::take_most_open_sends): program order, the
  // same whatever the scheduler does. (The trace's send spans are not: on threads a send whose
  // receive is already posted is copied at once and its span ends there.)
  for (int n : {2, 3, 4, 5, 8})
    for (AllReduceAlgo algo : algos()) {
      RUN_INFO(algo, n, 1000);
      std::vector<int> open(std::size_t(n), 0);
      const auto run = test::run_ranks(n, [&](Comm& comm) {
        auto data = comm.alloc<std::int64_t>(1000, Category::data);
        fill_input(data.view(), kSeed, comm.rank());
        comm.take_most_open_sends();  // the count starts here
        coll::all_reduce(comm, data.view(), algo);
        open[std::size_t(comm.rank())] = comm.take_most_open_sends();
      });
      REQUIRE_FALSE(run.failed);
      const int most = *std::max_element(open.begin(), open.end());
      if (algo == AllReduceAlgo::double_binary_tree)  // segments up to two parents, down to
        CHECK(most <= 6 * coll::kTreeSegments);       // up to four children, in flight at once
      else
        CHECK(most == (algo == AllReduceAlgo::parallel ? n - 1 : 1));
    }
}

// --- data flow -------------------------------------------------------------------------------

TEST_CASE(
    "all-reduce: ring_chunked's reduce-scatter sends chunks with s+1 contributions, "
    "its all-gather chunks with all N",
    "[all_reduce][ring_chunked][meta]") {
  for (int n : kWorlds)
    for (std::size_t length :
         {std::size_t{0}, std::size_t{1000}, static_cast<std::size_t>(n + 1)}) {
      RUN_INFO(AllReduceAlgo::ring_chunked, n, length);
      auto run = run_all_reduce<std::int64_t>(AllReduceAlgo::ring_chunked, n, length,
                                              [](int, View<const std::int64_t>) {});
      REQUIRE_FALSE(run.failed);
      const Partition part{length, n};
      Wrong wrong;
      int rs = 0, ag = 0;
      for (const auto& [src, e] : sends_of(run)) {
        const auto& m = e->meta;
        const bool reduce_scatter = m.step <= n - 1;  // steps 1 .. N-1, then N .. 2(N-1)
        const int s = reduce_scatter ? m.step - 1 : m.step - n;
        // reduce-scatter step s: chunk (r - s - 1) holding ranks r, r-1, .., r-s, to be added;
        // all-gather step s: chunk (r - s), the finished sum, to be copied
        const int c = reduce_scatter ? mod(src - s - 1, n) : mod(src - s, n);
        std::uint64_t mask = 0;
        for (int k = 0; k <= s; ++k) mask |= bit(mod(src - k, n));
        const int contributions = reduce_scatter ? s + 1 : n;
        if (!reduce_scatter) mask = all(n);
        const Apply apply = reduce_scatter ? Apply::reduce : Apply::copy;
        (reduce_scatter ? rs : ag)++;
        if (e->peer != mod(src + 1, n) || m.chunk_begin != c || m.chunk_end != c + 1 ||
            m.apply != apply || m.contributions != contributions || m.contrib_mask != mask ||
            e->bytes != part.size(c) * 8)
          wrong.add(fmt::format(
              "step {} r{} -> r{}: chunks [{}, {}) {} {} contributions mask 0x{:x} {} B", m.step,
              src, e->peer, m.chunk_begin, m.chunk_end,
              m.apply == Apply::reduce ? "reduce" : "copy", m.contributions, m.contrib_mask,
              e->bytes));
      }
      INFO(wrong);
      CHECK(wrong.count == 0);
      CHECK(rs == n * (n - 1));
      CHECK(ag == n * (n - 1));
      CHECK(count(run).meta_differs == 0);
    }
}

TEST_CASE("all-reduce: recursive halving's chunk ranges halve each step, then double",
          "[all_reduce][recursive_halving][meta]") {
  for (int n : kWorlds) {
    if (n == 1) continue;
    const std::size_t length = 1000;
    RUN_INFO(AllReduceAlgo::recursive_halving, n, length);
    auto run = run_all_reduce<std::int64_t>(AllReduceAlgo::recursive_halving, n, length,
                                            [](int, View<const std::int64_t>) {});
    REQUIRE_FALSE(run.failed);
    const int p2 = floor_power_of_two(n), rem = n - p2, L = log2_exact(p2);
    const int first = rem > 0 ? 2 : 1;    // after the fold-in step
    std::map<int, std::set<int>> widths;  // step -> chunk widths of its messages
    Wrong wrong;
    for (const auto& [src, e] : sends_of(run)) {
      const auto& m = e->meta;
      if (e->tag == coll::kTagFold) continue;  // the next test case
      const int j = m.step - first;
      REQUIRE(j >= 0);
      REQUIRE(j < 2 * L);
      widths[m.step].insert(m.chunk_end - m.chunk_begin);
      const bool halving = j < L;
      const int d = halving ? p2 >> (j + 1) : 1 << (j - L);
      // Halving at distance d: give away the aligned block of width d that holds src ^ d; it
      // holds the real ranks of src's group so far (virtual ranks agreeing on the bits below 2d).
      // Doubling at distance d: send my aligned block of width d, finished.
      const int begin = halving ? (src ^ d) & ~(d - 1) : src & ~(d - 1);
      std::uint64_t mask = 0;
      for (int u = 0; u < p2; ++u)
        if (u % (2 * d) == src % (2 * d)) mask |= weight_mask(u, rem, p2);
      if (!halving) mask = all(n);
      const Apply apply = halving ? Apply::reduce : Apply::copy;
      if (e->peer != (src ^ d) || m.chunk_begin != begin || m.chunk_end != begin + d ||
          m.apply != apply || m.contrib_mask != mask)
        wrong.add(fmt::format("step {} r{} -> r{}: chunks [{}, {}) {} mask 0x{:x}", m.step, src,
                              e->peer, m.chunk_begin, m.chunk_end,
                              m.apply == Apply::reduce ? "reduce" : "copy", m.contrib_mask));
    }
    INFO(wrong);
    CHECK(wrong.count == 0);
    // Widths p2/2, p2/4, .., 1, then 1, 2, .., p2/2: one width per step.
    std::vector<int> got, want;
    for (const auto& [step, w] : widths) {
      CHECK(w.size() == 1);
      got.push_back(*w.begin());
    }
    for (int d = p2 / 2; d >= 1; d /= 2) want.push_back(d);
    for (int d = 1; d < p2; d *= 2) want.push_back(d);
    CHECK(got == want);
  }
}

TEST_CASE("all-reduce: recursive doubling's partners are rank ^ 2^k and groups double each step",
          "[all_reduce][recursive_doubling][meta]") {
  for (int n : kWorlds) {
    if (n == 1) continue;
    RUN_INFO(AllReduceAlgo::recursive_doubling, n, 1000);
    auto run = run_all_reduce<std::int64_t>(AllReduceAlgo::recursive_doubling, n, 1000,
                                            [](int, View<const std::int64_t>) {});
    REQUIRE_FALSE(run.failed);
    const int p2 = floor_power_of_two(n), rem = n - p2;
    const int first = rem > 0 ? 2 : 1;
    Wrong wrong;
    for (const auto& [src, e] : sends_of(run)) {
      const auto& m = e->meta;
      if (e->tag == coll::kTagFold) continue;
      const int k = m.step - first, d = 1 << k;
      // Before step k my group is the virtual ranks agreeing with me on every bit from 2^k up.
      std::uint64_t mask = 0;
      for (int u = 0; u < p2; ++u)
        if ((u >> k) == (src >> k)) mask |= weight_mask(u, rem, p2);
      if (e->peer != (src ^ d) || m.chunk_begin != 0 || m.chunk_end != 1 ||
          m.apply != Apply::reduce || m.contrib_mask != mask || e->bytes != 8000)
        wrong.add(fmt::format("step {} r{} -> r{}: mask 0x{:x} {} B", m.step, src, e->peer,
                              m.contrib_mask, e->bytes));
    }
    INFO(wrong);
    CHECK(wrong.count == 0);
  }
}

TEST_CASE("all-reduce: fold messages exist only when N is not a power of two",
          "[all_reduce][fold][meta]") {
  for (AllReduceAlgo algo : {AllReduceAlgo::recursive_doubling, AllReduceAlgo::recursive_halving})
    for (int n : kWorlds) {
      const std::size_t length = 1000;
      RUN_INFO(algo, n, length);
      auto run =
          run_all_reduce<std::int64_t>(algo, n, length, [](int, View<const std::int64_t>) {});
      REQUIRE_FALSE(run.failed);
      const int p2 = floor_power_of_two(n), rem = n - p2;
      const int chunks = algo == AllReduceAlgo::recursive_halving ? p2 : 1;
      const int last = expected(algo, n, length, 8).steps;
      // Fold in at step 1: extra rank p2 + i hands its input to i, which adds it. Fold out at
      // the last step: i hands the finished sum back, which p2 + i copies.
      std::set<std::string> got, want;
      for (int i = 0; i < rem; ++i) {
        want.insert(fmt::format("step 1 r{} -> r{} [0, {}) reduce mask 0x{:x} 8000 B", p2 + i, i,
                                chunks, bit(p2 + i)));
        want.insert(fmt::format("step {} r{} -> r{} [0, {}) copy mask 0x{:x} 8000 B", last, i,
                                p2 + i, chunks, all(n)));
      }
      for (const auto& [src, e] : sends_of(run))
        if (e->tag == coll::kTagFold)
          got.insert(fmt::format("step {} r{} -> r{} [{}, {}) {} mask 0x{:x} {} B", e->meta.step,
                                 src, e->peer, e->meta.chunk_begin, e->meta.chunk_end,
                                 e->meta.apply == Apply::reduce ? "reduce" : "copy",
                                 e->meta.contrib_mask, e->bytes));
      CHECK(got == want);
      CHECK(got.empty() == is_power_of_two(n));
    }
}

// --- the two halves of ring_chunked on their own -----------------------------------------------

TEST_CASE("reduce_scatter_ring: rank r holds chunk r of the sum",
          "[all_reduce][reduce_scatter_ring]") {
  for (int n : kWorlds)
    for (std::size_t length : lengths(n, /*large=*/false)) {
      INFO("ranks " << n << ", length " << length);
      const Partition part{length, n};
      std::vector<std::string> diff(static_cast<std::size_t>(n), "not run");
      auto run = test::run_ranks(n, [&](Comm& comm) {
        const int me = comm.rank();
        auto data = comm.alloc<std::int64_t>(length, Category::data);
        fill_input(data.view(), kSeed, me);
        coll::reduce_scatter_ring(comm, data.view());
        diff[static_cast<std::size_t>(me)] =
            difference(View<const std::int64_t>(data.sub(part.begin(me), part.size(me))),
                       sum_of_inputs<std::int64_t>(n, part.begin(me), part.size(me)));
      });
      REQUIRE_FALSE(run.failed);
      const TraceCounts t = count(run);
      CHECK(static_cast<int>(t.steps.size()) == n - 1);
      for (int r = 0; r < n; ++r) {
        INFO("r" << r);
        CHECK(diff[static_cast<std::size_t>(r)] == "");
        // Every chunk but my own goes right; every chunk but my left neighbour's comes in.
        const std::uint64_t S = length * 8;
        const RankCounts want{S - part.size(r) * 8, S - part.size(mod(r - 1, n)) * 8,
                              std::uint64_t(n - 1), std::uint64_t(n - 1)};
        CHECK(t.ranks[static_cast<std::size_t>(r)] == want);
      }
      CHECK(t.unpaired == 0);
      CHECK(t.meta_differs == 0);
    }
}

TEST_CASE("all_gather_ring: every rank ends with chunk k of rank k's input, for every k",
          "[all_reduce][all_gather_ring]") {
  for (int n : kWorlds)
    for (std::size_t length : lengths(n, /*large=*/false)) {
      INFO("ranks " << n << ", length " << length);
      const Partition part{length, n};
      std::vector<std::int64_t> want(length);
      for (int k = 0; k < n; ++k)
        for (std::size_t i = part.begin(k); i < part.end(k); ++i)
          want[i] = input_value<std::int64_t>(kSeed, k, i);
      std::vector<std::string> diff(static_cast<std::size_t>(n), "not run");
      auto run = test::run_ranks(n, [&](Comm& comm) {
        const int me = comm.rank();
        auto data = comm.alloc<std::int64_t>(length, Category::data);
        ops::fill(data.view(), kUnwritten);
        fill_input(data.sub(part.begin(me), part.size(me)), kSeed, me, part.begin(me));
        coll::all_gather_ring(comm, data.view());
        diff[static_cast<std::size_t>(me)] =
            difference(View<const std::int64_t>(data.view()), want);
      });
      REQUIRE_FALSE(run.failed);
      const TraceCounts t = count(run);
      CHECK(static_cast<int>(t.steps.size()) == n - 1);
      for (int r = 0; r < n; ++r) {
        INFO("r" << r);
        CHECK(diff[static_cast<std::size_t>(r)] == "");
        // Every chunk but my right neighbour's goes right; every chunk but mine comes in.
        const std::uint64_t S = length * 8;
        const RankCounts want_counts{S - part.size(mod(r + 1, n)) * 8, S - part.size(r) * 8,
                                     std::uint64_t(n - 1), std::uint64_t(n - 1)};
        CHECK(t.ranks[static_cast<std::size_t>(r)] == want_counts);
      }
      // Not reduced: each chunk carries its one owner's data and is copied.
      std::size_t wrong = 0;
      for (const auto& [src, e] : sends_of(run))
        if (e->meta.apply != Apply::copy || e->meta.contrib_mask != bit(e->meta.chunk_begin) ||
            e->meta.chunk_end != e->meta.chunk_begin + 1)
          ++wrong;
      CHECK(wrong == 0);
      CHECK(t.meta_differs == 0);
    }
}

// --- choosing an algorithm by name -------------------------------------------------------------

TEST_CASE("all-reduce: parse_all_reduce_algo round-trips every name and rejects others",
          "[all_reduce][parse]") {
  std::set<std::string> names;
  for (AllReduceAlgo a : coll::all_reduce_algos()) {
    names.insert(coll::to_string(a));
    CHECK(coll::parse_all_reduce_algo(coll::to_string(a)) == a);
  }
  CHECK(names.size() == 11);
  CHECK((names.count("tree") == 1 && names.count("double_binary_tree") == 1));
  CHECK(names.count("library") == 1);
  for (const std::string bad : {"ring-chunked", "Ring", "", "rings"}) {
    INFO("'" << bad << "'");
    std::string message;
    try {
      coll::parse_all_reduce_algo(bad);
    } catch (const UsageError& e) {
      message = e.what();
    }
    CHECK_THAT(message, Catch::Contains("'" + bad + "' is not an all-reduce algorithm"));
    for (const auto& name : names) CHECK_THAT(message, Catch::Contains(name));
  }
}

TEST_CASE(
    "all-reduce: the messages' metadata, replayed, leaves every rank every chunk with all "
    "N ranks' data",
    "[all_reduce][data_flow]") {
  // Independently of each algorithm's schedule: each rank starts with its own data in every
  // chunk; a message it receives into chunks [b, e) adds its contributors (reduce) or replaces
  // them (copy). In step order, every chunk of every rank must end with all N (what the viewer's
  // Shards panel replays).
  for (int n : kWorlds)
    for (AllReduceAlgo algo : algos()) {
      RUN_INFO(algo, n, 1000);
      auto run = run_all_reduce<std::int64_t>(algo, n, 1000, [](int, View<const std::int64_t>) {});
      REQUIRE_FALSE(run.failed);
      for (const auto& log : run.logs) {
        std::vector<const SpanEvent*> in;
        int chunks = 1;
        for (const auto& e : log.spans)
          if (e.kind == SpanEvent::Kind::recv) {
            in.push_back(&e);
            chunks = std::max(chunks, e.meta.chunk_end);
          }
        std::stable_sort(in.begin(), in.end(), [](const SpanEvent* a, const SpanEvent* b) {
          return a->meta.step < b->meta.step;
        });
        std::vector<std::uint64_t> held(static_cast<std::size_t>(chunks), bit(log.rank));
        for (const SpanEvent* e : in)
          for (int c = e->meta.chunk_begin; c < e->meta.chunk_end; ++c) {
            auto& h = held[static_cast<std::size_t>(c)];
            h = e->meta.apply == Apply::reduce ? h | e->meta.contrib_mask : e->meta.contrib_mask;
          }
        INFO("r" << log.rank);
        for (int c = 0; c < chunks; ++c) {
          INFO("chunk " << c);
          CHECK(held[static_cast<std::size_t>(c)] == all(n));
        }
      }
    }
}
