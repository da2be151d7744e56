// Lesson 15 — trees, hierarchy and all-to-all: what NCCL and MPI run beyond the ring
//
// Concept: every all-reduce below moves the same 2(N-1) S over all links together; they differ
// in how many steps they take (each step pays the latency alpha) and in where the bytes go.
//   tree                binomial reduce to rank 0, then broadcast: 2 ceil(lg N) steps, but the
//                       whole buffer on every edge, so the root's link carries lg N S each way
//   double_binary_tree  NCCL's pair of binary trees, half the buffer each, cut into segments
//                       that follow each other up and down: about 2 lg N steps; the second tree
//                       mirrors the first (N even) or shifts it by one rank (N odd), so every
//                       rank (but rank 0, for odd N) is a leaf in one tree and inner in the
//                       other: no rank sends more than 2 S
//   hierarchical        nodes of G ranks: reduce-scatter inside the node, all-reduce across the
//                       nodes between ranks of the same local index, all-gather inside the node:
//                       only 2(M-1)/N S per rank crosses between the M nodes
//   ring_chunked        lesson 06's ring: 2(N-1) steps of S/N, the fewest bytes per rank
// So a tree wins for small buffers (latency: lg N steps against N-1) and the ring for large
// ones (bandwidth); the crossover size follows from alpha, beta and gamma, and this lesson
// finds it by measurement too. All-to-all is the collective of expert parallelism: each rank
// sends a different block to every other; pairwise exchange in N-1 steps, or Bruck's in
// ceil(lg N) with each block hopping along the bits of its distance.
// Every rank holds its own input of L float32, S = 4L bytes.
//
// Cost, counted from the trace and checked against these formulas (H = ceil(lg N), k = 4
// segments, G ranks per node, M = N/G nodes):
//                       steps            one rank sends at most    all links
//   tree                2 ceil(lg N)     ceil(lg N) S (the root)   2(N-1) S
//   double_binary_tree  2(k + H - 1)     2 S                       2(N-1) S
//   hierarchical        2(G-1)+2(M-1)    2(N-1)/N S                2(N-1) S
//   ring_chunked        2(N-1)           2(N-1)/N S                2(N-1) S
//
// Run:  ./distlab lesson 15                        8 in-process ranks, 256K float32 per rank
//       ./distlab lesson 15 --ranks 13 --size 1023 any N: the trees and Bruck need no power of two
//       ./distlab lesson 15 --ranks-per-node 4     nodes of 4 ranks for the hierarchical all-reduce
//       ./distlab lesson 15 --sim dgx-pair --ranks 8   two simulated 4-GPU nodes: what hierarchy buys
//       ./distlab lesson 15 --mpi 4                one process per rank; against MPI_Allreduce,
//                                                  MPI_Allgather and MPI_Alltoall
//       ./distlab lesson 15 --tokens 256 --capacity-factor 1.0   the all-to-all's experts drop more
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>
#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/clock.hpp"
#include "core/base/units.hpp"
#include "core/collectives/all_gather_bruck.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/all_to_all.hpp"
#include "core/collectives/all_to_all_bruck.hpp"
#include "core/collectives/baseline.hpp"
#include "core/collectives/tree.hpp"
#include "core/cost/cost_model.hpp"
#include "core/cost/simulated_platform.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/trace_counts.hpp"
#include "core/runtime/verify.hpp"
#include "lessons/common/all_reduce_study.hpp"

using namespace distlab;
using coll::AllReduceAlgo;

namespace {

// The algorithms this lesson runs, in the order they run (library: under mpirun only).
const std::vector<AllReduceAlgo> kAlgos = {AllReduceAlgo::tree, AllReduceAlgo::double_binary_tree,
                                           AllReduceAlgo::hierarchical, AllReduceAlgo::ring_chunked,
                                           AllReduceAlgo::library};
// The crossover sweep: each kind of tree against the ring.
const std::vector<AllReduceAlgo> kSweep = {AllReduceAlgo::tree, AllReduceAlgo::double_binary_tree,
                                           AllReduceAlgo::ring_chunked};

int ceil_lg(int n) {  // ceil(log2 n), 0 for n <= 1: a binomial tree's rounds
  return coll::binomial_rounds(n);
}
// NCCL's trees (ncclGetBtree, ncclGetDtree in src/graph/trees.cc), written out for the checks
// (tree.hpp builds them by climbing): rank r plays role r in tree 1; in tree 2, role N-1-r for
// even N (the mirror), (r - 1) mod N for odd N (a shift by one).
int role_in(int tree, int r, int n) {
  return tree == 0 ? r : n % 2 == 0 ? n - 1 - r : (r - 1 + n) % n;
}
// The edges (to the parent and the children) of role i: role 0 is the root with one child; an
// odd role is a leaf; an even role i >= 2, with lowest set bit b, has the child i - b/2 and, when
// any role follows it (i + 1 <= N-1), a second in (i, i + b).
int role_edges(int i, int n) {
  if (n < 2) return 0;
  if (i == 0) return 1;
  return i % 2 == 1 ? 1 : 2 + (i + 1 <= n - 1 ? 1 : 0);
}
// Tree `tree` (0 or 1) of the double binary tree, as tree.hpp built it, against NCCL's layout
// written out above: one root, rank r's role 0 there; every other rank under a parent that lists
// it, at most two children each; every rank reaches the root, at most ceil(lg N) edges down; a
// rank is a leaf exactly when its role is odd. Returns the first thing that differs ("": none).
std::string tree_problem(const coll::BinaryTree& t, int tree, int n) {
  const std::string name = fmt::format("tree {}", tree + 1);
  int roots = 0, depth = 0;
  for (int r = 0; r < n; ++r) {
    const auto& kids = t.children[std::size_t(r)];
    const int p = t.parent[std::size_t(r)], role = role_in(tree, r, n);
    if (kids.size() > 2) return fmt::format("{}: r{} has {} children", name, r, kids.size());
    if (n >= 2 && kids.empty() != (role % 2 == 1))
      return fmt::format("{}: r{} (role {}) is {}", name, r, role,
                         kids.empty() ? "a leaf" : "inner");
    if (p < 0) {
      ++roots;
      if (role != 0) return fmt::format("{}: the root r{} has role {}, not 0", name, r, role);
      continue;
    }
    if (p >= n ||
        std::count(t.children[std::size_t(p)].begin(), t.children[std::size_t(p)].end(), r) != 1)
      return fmt::format("{}: r{}'s parent r{} does not list it once", name, r, p);
    int up = r, d = 0;
    while (t.parent[std::size_t(up)] >= 0 && d <= n) up = t.parent[std::size_t(up)], ++d;
    if (d > n) return fmt::format("{}: r{} never reaches a root", name, r);
    depth = std::max(depth, d);
  }
  if (roots != 1) return fmt::format("{}: {} roots", name, roots);
  if (depth != ceil_lg(n))
    return fmt::format("{}: {} edges from the root to the deepest leaf, not ceil(lg N) = {}", name,
                       depth, ceil_lg(n));
  return "";
}

// Elements of chunk k (mod parts) of a buffer of L cut into `parts`.
std::uint64_t chunk(std::uint64_t L, int parts, int k) {
  return Partition{L, parts}.size(((k % parts) + parts) % parts);
}

// --- the formulas, in elements of a buffer of L (bytes: times 4) -------------------------------

using Traffic = FormulaTraffic;

// What rank k sends to (shift 0), or receives from (shift -1), the other nodes in the
// hierarchical all-reduce's middle phase: a chunked ring over the m ranks of its local index l
// on fine chunks l m .. l m + m - 1, every chunk but two each way.
std::uint64_t across_nodes(int k, int n, int g, std::uint64_t L, int shift = 0) {
  const int m = n / g, l = k % g, node = k / g;
  if (m <= 1) return 0;
  const auto across = [&](int j) { return chunk(L, n, l * m + ((j % m) + m) % m); };
  std::uint64_t all = 0;
  for (int j = 0; j < m; ++j) all += across(j);
  return 2 * all - across(node + shift) - across(node + 1 + shift);
}

// What rank k of n sends and receives in one all-reduce of L elements (g ranks per node).
Traffic formula_rank(AllReduceAlgo a, int k, int n, int g, std::uint64_t L) {
  if (n == 1) return {};
  Traffic t;
  switch (a) {
    case AllReduceAlgo::tree: {
      // Binomial, rooted at 0: k's children are k + 2^j for j below its lowest set bit (every
      // j < ceil(lg N) for the root). The whole buffer goes up each edge and comes down it.
      const int low = k == 0 ? ceil_lg(n) : std::countr_zero(unsigned(k));
      std::uint64_t edges = k != 0 ? 1 : 0;
      for (int j = 0; j < low; ++j) edges += k + (1 << j) < n ? 1 : 0;
      return {edges * L, edges * L, edges, edges};
    }
    case AllReduceAlgo::double_binary_tree: {
      // Tree t carries half t (chunks t s .. t s + s - 1 of 2s), in s segments up and down
      // each of k's edges in that tree.
      const int s = coll::kTreeSegments;
      for (int tr = 0; tr < 2; ++tr) {
        std::uint64_t half = 0;
        for (int c = tr * s; c < tr * s + s; ++c) half += chunk(L, 2 * s, c);
        const auto edges = std::uint64_t(role_edges(role_in(tr, k, n), n));
        t.sent += half * edges, t.msgs_sent += std::uint64_t(s) * edges;
      }
      t.recv = t.sent, t.msgs_recv = t.msgs_sent;
      return t;
    }
    case AllReduceAlgo::hierarchical: {
      // Fine chunks over N. Inside the node a ring of g over node chunks (fine chunks
      // [i m, (i+1) m)); across, a ring of m over fine chunks l m + j. Each ring sends every
      // chunk but two and receives every chunk but two, as lesson 06's chunked ring.
      const int m = n / g, l = k % g;
      const auto node_chunk = [&](int i) {
        std::uint64_t b = 0;
        for (int c = ((i % g + g) % g) * m; c < ((i % g + g) % g + 1) * m; ++c) b += chunk(L, n, c);
        return b;
      };
      std::uint64_t in_node = 0;
      for (int i = 0; i < g; ++i) in_node += node_chunk(i);
      if (g > 1) {
        t.sent += 2 * in_node - node_chunk(l) - node_chunk(l + 1);
        t.recv += 2 * in_node - node_chunk(l - 1) - node_chunk(l);
      }
      t.sent += across_nodes(k, n, g, L);
      t.recv += across_nodes(k, n, g, L, -1);
      t.msgs_sent = t.msgs_recv = std::uint64_t(2 * (g - 1) + 2 * (m - 1));
      return t;
    }
    case AllReduceAlgo::ring_chunked: {
      const std::uint64_t msgs = 2 * std::uint64_t(n - 1);
      return {2 * L - chunk(L, n, k) - chunk(L, n, k + 1),
              2 * L - chunk(L, n, k - 1) - chunk(L, n, k), msgs, msgs};
    }
    default:
      return {};
  }
}

int formula_steps(AllReduceAlgo a, int n, int g) {
  if (n == 1) return 0;
  switch (a) {
    case AllReduceAlgo::tree:
      return 2 * ceil_lg(n);
    case AllReduceAlgo::double_binary_tree:  // a root over an in-order tree: ceil(lg N) high
      return 2 * (coll::kTreeSegments + ceil_lg(n) - 1);
    case AllReduceAlgo::hierarchical:
      return 2 * (g - 1) + 2 * (n / g - 1);
    case AllReduceAlgo::ring_chunked:
      return 2 * (n - 1);
    default:
      return 0;
  }
}

// The bytes an algorithm's messages carry between ranks of different nodes (node = rank / g),
// off the trace.
std::uint64_t between_nodes(const RunResult& r, int first, int last, int g) {
  std::uint64_t bytes = 0;
  for (const auto& log : r.logs)
    for (const auto& e : log.spans)
      if (e.kind == SpanEvent::Kind::send && e.meta.step >= first && e.meta.step <= last &&
          e.peer / g != log.rank / g)
        bytes += e.bytes;
  return bytes;
}
// The formula's count, in elements, for the two algorithms the nodes shape: the hierarchical
// middle phase, and the ring's messages from the last rank of each node to the next node.
std::uint64_t between_formula(AllReduceAlgo a, int n, int g, std::uint64_t L) {
  std::uint64_t total = 0;
  for (int k = 0; k < n; ++k)
    if (a == AllReduceAlgo::hierarchical)
      total += across_nodes(k, n, g, L);
    else if (a == AllReduceAlgo::ring_chunked && n / g > 1 && k % g == g - 1)
      total += formula_rank(a, k, n, g, L).sent;
  return total;
}

// --- the crossover: a size sweep of tree against ring ------------------------------------------

struct SweepRow {
  std::uint64_t length = 0;     // elements per rank
  std::vector<double> seconds;  // per kSweep algorithm: the median of the timed runs
};

// STEP 3's loop, on every rank: for buffers of 1, 4, 16, .. elements up to L, each sweep
// algorithm `reps` times on a prefix of the input (after one untimed run), from a barrier to a
// barrier (both in every figure, the same for each algorithm); every result checked against the
// float64 reference's prefix. Rank 0 keeps the rows.
std::vector<SweepRow> sweep(Comm& comm, const StudyRank& rank, int reps) {
  const int n = comm.size();
  const std::size_t L = rank.input.size();
  std::vector<std::uint64_t> lengths;
  for (std::uint64_t x = 1; x < L; x *= 4) lengths.push_back(x);
  if (L > 0) lengths.push_back(L);
  Buffer<float> work = comm.alloc<float>(L, Category::data);
  std::vector<SweepRow> rows;
  std::vector<std::string> wrong(kSweep.size());
  comm.recorder().set_enabled(false);  // thousands of messages: the sweep is timed, not traced
  for (std::uint64_t length : lengths) {
    SweepRow row{length, {}};
    const View<float> data = work.view().sub(0, length);
    const View<const float> input = View<const float>(rank.input.view()).sub(0, length);
    for (std::size_t j = 0; j < kSweep.size(); ++j) {
      std::vector<double> times;
      for (int rep = 0; rep <= reps; ++rep) {
        ops::copy(data, input);
        comm.barrier();
        const double t0 = now_us();
        coll::all_reduce(comm, data, kSweep[j], "sweep");
        comm.barrier();
        if (rep > 0) times.push_back((now_us() - t0) * 1e-6);
      }
      const Comparison c =
          compare(View<const float>(data), rank.sum.head(Eigen::Index(length)), sum_tolerance(n));
      if (!c.ok && wrong[j].empty()) wrong[j] = fmt::format("{} elements: {}", length, c.detail());
      row.seconds.push_back(median(times));
    }
    rows.push_back(row);
  }
  comm.recorder().set_enabled(true);
  for (std::size_t j = 0; j < kSweep.size(); ++j)
    comm.check(fmt::format("sweep: {} gives the sum at every size", coll::to_string(kSweep[j])),
               wrong[j].empty(), wrong[j]);
  return rows;
}

// The size (bytes) where the model's tree and ring times meet: tree time - ring time is
// a + b n, falling from a > 0 at n = 0 when the ring takes more steps. 0 when the ring is never
// slower, -1 when it is always slower (no crossover).
double model_crossover(AllReduceAlgo tree, int n, const CostParams& cp) {
  const auto gap = [&](double bytes) {
    return predict_all_reduce(tree, n, bytes).seconds(cp) -
           predict_all_reduce(AllReduceAlgo::ring_chunked, n, bytes).seconds(cp);
  };
  const double a = gap(0), b = gap(1) - a;
  if (a >= 0) return 0;
  if (b <= 0) return -1;
  return -a / b;
}

// --- all-to-all: tokens to their experts and back ----------------------------------------------

struct MoeOptions {
  int tokens = 64;                // per rank
  int hidden = 16;                // a token's width
  double capacity_factor = 1.25;  // an expert takes at most ceil(factor T / N) tokens per rank
};

// Which expert (rank) token t of rank r goes to: a hash, the same on every rank.
int expert_of(std::uint64_t seed, int r, int t, int n) {
  return int(splitmix64(seed ^ 0x6d6f65ull ^ splitmix64(std::uint64_t(r) << 32 | unsigned(t))) %
             std::uint64_t(n));
}
float token_value(std::uint64_t seed, int r, int t, int d, int D) {
  return input_value<float>(seed + 1, r, std::uint64_t(t) * std::uint64_t(D) + std::uint64_t(d));
}
// Expert e's weight (a, b), scaled by 1/D so that a row's products sum to at most 1.
float expert_weight(std::uint64_t seed, int e, int a, int b, int D) {
  return input_value<float>(seed + 2, e, std::uint64_t(a) * std::uint64_t(D) + std::uint64_t(b)) /
         float(D);
}
int capacity(const MoeOptions& o, int n) {
  return int(std::ceil(o.capacity_factor * o.tokens / n));
}

// Rank r's routing: each token's expert and its slot in that expert's block (-1: dropped,
// the expert already had `capacity` of this rank's tokens), and the tokens each expert was sent.
struct Routing {
  std::vector<int> expert, slot;
  std::vector<std::int64_t> wanted;  // per expert, kept or not
};
Routing route(std::uint64_t seed, int r, int n, const MoeOptions& o) {
  Routing x;
  x.wanted.assign(std::size_t(n), 0);
  const int cap = capacity(o, n);
  for (int t = 0; t < o.tokens; ++t) {
    const int e = expert_of(seed, r, t, n);
    const std::int64_t had = x.wanted[std::size_t(e)]++;
    x.expert.push_back(e);
    x.slot.push_back(had < cap ? int(had) : -1);
  }
  return x;
}

// Filled on rank 0 while STEP 4 runs.
struct MoeStudy {
  std::pair<int, int> pairwise_steps{0, -1}, bruck_steps{0, -1};  // dispatch by each
  std::vector<std::int64_t> load;  // N x N: row r, the tokens rank r sent each expert
};

// STEP 4's loop, on every rank: route my tokens, gather every rank's load, send the tokens to
// their experts (pairwise, then Bruck, which must agree), compute, send the results back
// (Bruck), and check every token's output against the float64 reference.
void experts(Comm& comm, const MoeOptions& o, std::uint64_t seed, MoeStudy& study) {
  const int n = comm.size(), me = comm.rank(), D = o.hidden, cap = capacity(o, n);
  const std::size_t block = std::size_t(cap) * std::size_t(D), whole = block * std::size_t(n);
  const auto at = [&](int j, int slot, int d) {  // block j, slot, feature d
    return std::size_t(j) * block + std::size_t(slot) * std::size_t(D) + std::size_t(d);
  };
  std::vector<Routing> routing;  // every rank can route any rank's tokens, from the seed
  for (int r = 0; r < n; ++r) routing.push_back(route(seed, r, n, o));
  const Routing& mine = routing[std::size_t(me)];
  const bool library = baseline::available(comm);

  // STEP 4a: the load: each rank's count of tokens per expert, gathered by Bruck's all-gather
  // (row r of the N x N table is rank r's).
  auto load = comm.alloc<std::int64_t>(std::size_t(n) * std::size_t(n), Category::data);
  from_host(load.view().sub(std::size_t(me) * std::size_t(n), std::size_t(n)), mine.wanted);
  coll::all_gather_bruck(comm, load.view(), "load");
  const std::vector<std::int64_t> gathered = to_host(load.view());
  std::string wrong;
  for (int r = 0; r < n && wrong.empty(); ++r) {
    const Routing& theirs = routing[std::size_t(r)];
    for (int e = 0; e < n; ++e)
      if (gathered[std::size_t(r * n + e)] != theirs.wanted[std::size_t(e)])
        wrong = fmt::format("row r{}, expert {}: {} (r{} routed {})", r, e,
                            gathered[std::size_t(r * n + e)], r, theirs.wanted[std::size_t(e)]);
  }
  comm.check("all_gather_bruck: every rank's load per expert", wrong.empty(), wrong);
  if (library) {
    auto theirs = comm.alloc<std::int64_t>(std::size_t(n) * std::size_t(n), Category::data);
    from_host(theirs.view().sub(std::size_t(me) * std::size_t(n), std::size_t(n)), mine.wanted);
    const std::string call = baseline::all_gather(comm, theirs.data() + std::size_t(me) * n,
                                                  theirs.data(), std::size_t(n) * n, DType::i64);
    comm.check("all_gather_bruck agrees with " + call, to_host(theirs.view()) == gathered);
  }
  if (me == 0) study.load = gathered;

  // STEP 4b: dispatch: my kept tokens packed by expert (block e holds up to `cap` slots; an
  // empty slot is zeros), and one all-to-all sends block e to rank e.
  std::vector<float> packed(whole, 0.0f);
  for (int t = 0; t < o.tokens; ++t)
    if (mine.slot[std::size_t(t)] >= 0)
      for (int d = 0; d < D; ++d)
        packed[at(mine.expert[std::size_t(t)], mine.slot[std::size_t(t)], d)] =
            token_value(seed, me, t, d, D);
  auto send = comm.alloc<float>(whole, Category::data);
  from_host(send.view(), packed);
  auto got = comm.alloc<float>(whole, Category::data);
  auto got_bruck = comm.alloc<float>(whole, Category::data);
  {
    auto phase = comm.phase("dispatch (pairwise)");
    const int first = comm.next_steps(0);
    coll::all_to_all_pairwise(comm, View<const float>(send.view()), got.view(), "dispatch");
    if (me == 0) study.pairwise_steps = {first, comm.next_steps(0) - 1};
  }
  {
    auto phase = comm.phase("dispatch (bruck)");
    const int first = comm.next_steps(0);
    coll::all_to_all_bruck(comm, View<const float>(send.view()), got_bruck.view());
    if (me == 0) study.bruck_steps = {first, comm.next_steps(0) - 1};
  }
  const std::vector<float> tokens = to_host(got.view());
  // What I must have received: every rank's tokens routed to me, in their slots.
  std::vector<float> want_tokens(whole, 0.0f);
  for (int r = 0; r < n; ++r) {
    const Routing& theirs = routing[std::size_t(r)];
    for (int t = 0; t < o.tokens; ++t)
      if (theirs.expert[std::size_t(t)] == me && theirs.slot[std::size_t(t)] >= 0)
        for (int d = 0; d < D; ++d)
          want_tokens[at(r, theirs.slot[std::size_t(t)], d)] = token_value(seed, r, t, d, D);
  }
  comm.check("all_to_all_pairwise: every token routed to me arrived, in its slot",
             tokens == want_tokens);
  comm.check("all_to_all_bruck delivers what the pairwise exchange does",
             to_host(got_bruck.view()) == tokens);
  if (library) {
    auto theirs = comm.alloc<float>(whole, Category::data);
    const std::string call =
        baseline::all_to_all(comm, send.data(), theirs.data(), whole, DType::f32);
    comm.check("all_to_all_pairwise agrees with " + call, to_host(theirs.view()) == tokens);
  }

  // STEP 4c: my expert: y = W_me x for every slot (an empty slot gives zeros), on the host.
  std::vector<float> outputs(whole, 0.0f);
  {
    auto phase =
        comm.phase("expert", {.op = "forward", .text = "each rank's expert on its tokens"});
    for (int j = 0; j < n; ++j)
      for (int slot = 0; slot < cap; ++slot)
        for (int a = 0; a < D; ++a) {
          float y = 0;
          for (int b = 0; b < D; ++b)
            y += expert_weight(seed, me, a, b, D) * tokens[at(j, slot, b)];
          outputs[at(j, slot, a)] = y;
        }
  }

  // STEP 4d: combine: the outputs go back to their tokens' ranks by Bruck's all-to-all, and each
  // rank puts them in token order (a dropped token gets zeros: no expert saw it).
  auto out = comm.alloc<float>(whole, Category::data);
  from_host(out.view(), outputs);
  auto back = comm.alloc<float>(whole, Category::data);
  {
    auto phase = comm.phase("combine (bruck)");
    coll::all_to_all_bruck(comm, View<const float>(out.view()), back.view());
  }
  const std::vector<float> returned = to_host(back.view());
  auto result = comm.alloc<float>(std::size_t(o.tokens) * std::size_t(D), Category::data);
  std::vector<float> ordered(result.size(), 0.0f);
  for (int t = 0; t < o.tokens; ++t)
    if (mine.slot[std::size_t(t)] >= 0)
      for (int d = 0; d < D; ++d)
        ordered[std::size_t(t * D + d)] =
            returned[at(mine.expert[std::size_t(t)], mine.slot[std::size_t(t)], d)];
  from_host(result.view(), ordered);
  if (comm.inject_fault()) inject_fault_into(result.view());

  // The reference: each of my tokens through its expert, in float64, from the seed.
  Eigen::VectorXd want = Eigen::VectorXd::Zero(Eigen::Index(ordered.size()));
  for (int t = 0; t < o.tokens; ++t) {
    if (mine.slot[std::size_t(t)] < 0) continue;
    const int e = mine.expert[std::size_t(t)];
    for (int a = 0; a < D; ++a) {
      double y = 0;
      for (int b = 0; b < D; ++b)
        y += double(expert_weight(seed, e, a, b, D)) * double(token_value(seed, me, t, b, D));
      want[Eigen::Index(t * D + a)] = y;
    }
  }
  // A float32 dot product of D terms, each of magnitude at most 1/D: sum_tolerance(D).
  const Comparison c = compare(View<const float>(result.view()), want, sum_tolerance(D));
  comm.check("experts: every token's output (0 when dropped), against float64", c.ok, c.detail());
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"15", "trees_hierarchy_alltoall",
                 "beyond the ring: trees, two trees, hierarchy and all-to-all", 8, 1 << 18});
  lesson.set_text(
      "A tree all-reduce takes about 2 lg N steps where the ring takes 2(N-1), but sends whole "
      "buffers: trees win for small buffers, the ring for large ones, and the crossover follows "
      "from alpha and beta. NCCL's two trees each carry half the data so that no rank sends more "
      "than 2 S; a hierarchical all-reduce sends only 2(M-1)/N S per rank between nodes. "
      "All-to-all sends each rank a different block: expert parallelism's collective.",
      "Topology: the tree's edges from rank 0, the two trees' edges, the nodes' rings. Shards: "
      "the tree's chunks gather contributions on the way up, then copy down; the pairwise "
      "all-to-all fills the dispatch buffer one block a step.");
  lesson.add_break("hierarchical-skip-across",
                   "hierarchical: the all-reduce across the nodes is left out, so each rank ends "
                   "with its own node's sum (core/collectives/all_reduce_hierarchical.hpp)");
  lesson.add_break(
      "bruck-skip-unrotate",
      "all_to_all_bruck: the last rotation is left out, so block j holds rank me - j's "
      "block instead of rank j's (core/collectives/all_to_all_bruck.hpp)");
  StudyOptions study_options;  // --algo and --calibration; the algorithms once the world is known
  add_study_options(lesson, study_options, kAlgos);
  const std::vector<AllReduceAlgo>& algos = study_options.algos;
  const std::string& calibration_path = study_options.calibration_path;
  int reps = 5;
  lesson.app()
      .add_option("--reps", reps, "timed runs of each algorithm at each size of the sweep (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  MoeOptions moe;
  lesson.app()
      .add_option("--tokens", moe.tokens, "tokens per rank in the all-to-all (expert) part")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  lesson.app()
      .add_option("--hidden", moe.hidden, "a token's width")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  lesson.app()
      .add_option("--capacity-factor", moe.capacity_factor,
                  "an expert takes at most ceil(factor T / N) tokens from each rank; the rest "
                  "are dropped")
      ->check(CLI::Range(0.01, 1000.0))
      ->capture_default_str();
  const auto& opt = lesson.options();

  AllReduceStudy study;  // filled on rank 0: each algorithm's step ids, alpha and beta
  std::vector<SweepRow> rows;
  MoeStudy experts_study;

  // STEP 5 (rank 0, after the run): every count against its formula, the two trees, the bytes
  // between nodes, the times against the model, the crossover, and the all-to-all's counts.
  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    const int g = r.world.ranks_per_node > 0 ? r.world.ranks_per_node
                                             : coll::default_ranks_per_node(n),
              m = n / g;
    const std::uint64_t L = opt.size, e = sizeof(float), S = L * e;
    print_study_header(r, algos, study, L);
    CostParams cp = study_cost_params(r, study, calibration_path, S);
    const StudyCounts counted = count_study(r, algos, study, cp, S);
    const std::vector<StepCounts>& meas = counted.counts;
    const auto index = [&](AllReduceAlgo a) {
      return std::size_t(std::find(algos.begin(), algos.end(), a) - algos.begin());
    };
    for (std::size_t j = 0; j < algos.size(); ++j) {
      const AllReduceAlgo a = algos[j];
      if (a == AllReduceAlgo::library) continue;  // MPI's own schedule is not traced
      const std::string name = coll::to_string(a);
      r.check(fmt::format("{}: steps = {}", name, formula_steps(a, n, g)),
              meas[j].steps == formula_steps(a, n, g), fmt::format("measured {}", meas[j].steps));
      check_rank_formulas(
          r, name, meas[j], [&](int k) { return formula_rank(a, k, n, g, L); }, e, "2(N-1)S");
    }
    const auto row = [](auto... cells) {
      std::string line = fmt::format("  {:<18}  {:>13}  {:>13}  {:>12}  {:>22}", cells...);
      fmt::print("{}\n", line.erase(line.find_last_not_of(' ') + 1));
    };
    fmt::print("\nsummary (S = {}; bytes sent; every rank checked against its formula):\n",
               format_bytes(double(S)));
    row("algorithm", "steps", "busiest rank", "all links", "formula (steps; busiest)");
    for (std::size_t j = 0; j < algos.size(); ++j) {
      const AllReduceAlgo a = algos[j];
      if (a == AllReduceAlgo::library) continue;
      const char* formula = a == AllReduceAlgo::tree                 ? "2 ceil(lg N); lg N S"
                            : a == AllReduceAlgo::double_binary_tree ? "2(k+H-1); 2 S"
                            : a == AllReduceAlgo::hierarchical       ? "2(G-1)+2(M-1); 2(N-1)S/N"
                                                                     : "2(N-1); 2(N-1)S/N";
      row(coll::to_string(a), meas[j].steps, format_bytes(double(meas[j].max_sent)),
          format_bytes(double(meas[j].all_links)), formula);
    }
    fmt::print(
        "  every algorithm moves 2(N-1) S over all links together; they differ in steps\n"
        "  (alpha each) and in which ranks and links carry the bytes\n");

    // The two trees: who is a leaf where. NCCL mirrors the second tree (N even) or shifts it by
    // one rank (N odd) so that every inner rank of one tree is a leaf of the other (rank 0, for
    // odd N, is inner in both, the first tree's root with one child): each sends at most 2 S.
    if (study_options.runs(AllReduceAlgo::double_binary_tree) && n >= 2) {
      const coll::BinaryTree t1 = coll::first_tree(n), t2 = coll::second_tree(n);
      const auto role = [](const coll::BinaryTree& t, int k) {
        const auto& kids = t.children[std::size_t(k)];
        std::string up = t.parent[std::size_t(k)] < 0
                             ? std::string("root")
                             : fmt::format("under r{}", t.parent[std::size_t(k)]);
        if (kids.empty()) return "leaf " + up;
        std::string below;
        for (int c : kids) below += fmt::format("{}r{}", below.empty() ? "" : ",", c);
        return fmt::format("inner {}, over {}", up, below);
      };
      fmt::print("\nthe two trees (double_binary_tree; tree 2 is tree 1 {}):\n",
                 n % 2 == 0 ? "mirrored, rank r in rank N-1-r's place"
                            : "shifted by one rank, rank r in rank r-1's place");
      std::string both;  // ranks inner in both trees, or a leaf in both
      for (int k = 0; k < n; ++k) {
        const bool i1 = !t1.children[std::size_t(k)].empty(),
                   i2 = !t2.children[std::size_t(k)].empty();
        if (i1 == i2 && !(n % 2 == 1 && k == 0 && i1))
          both += fmt::format(" r{} ({} in both)", k, i1 ? "inner" : "leaf");
        if (n <= 16)
          fmt::print("  r{:<3} tree 1: {:<26} tree 2: {}\n", k, role(t1, k), role(t2, k));
      }
      r.check(
          "double_binary_tree: each tree is NCCL's (one root with one child, at most two "
          "children, ceil(lg N) high, the odd roles its leaves)",
          tree_problem(t1, 0, n).empty() && tree_problem(t2, 1, n).empty(),
          tree_problem(t1, 0, n) + tree_problem(t2, 1, n));
      if (n > 2)
        r.check(
            "double_binary_tree: every rank (but rank 0 for odd N) is a leaf in one tree and "
            "inner in the other",
            both.empty(), both);
      // Each rank sends its half of each tree to each of its edges there: at most 3 edges in one
      // tree and 1 in the other, so at most 3 h_max + h_min bytes, 2 S when the halves are equal.
      std::uint64_t half[2] = {0, 0};
      for (int c = 0; c < 2 * coll::kTreeSegments; ++c)
        half[c / coll::kTreeSegments] += chunk(L, 2 * coll::kTreeSegments, c) * e;
      const std::uint64_t hi = std::max(half[0], half[1]), lo = std::min(half[0], half[1]);
      const std::uint64_t busiest = meas[index(AllReduceAlgo::double_binary_tree)].max_sent;
      fmt::print(
          "  busiest rank sends {} = {:.2f} S; one binary tree carrying all of S would make\n"
          "  its inner ranks send 3 S (S up, S to each child){}\n",
          format_bytes(double(busiest)), S ? double(busiest) / double(S) : 0.0,
          study_options.runs(AllReduceAlgo::tree)
              ? fmt::format("; the binomial tree's root sends {}",
                            format_bytes(double(meas[index(AllReduceAlgo::tree)].max_sent)))
              : "");
      if (hi != lo)
        fmt::print(
            "  (the halves are {} and {} elements: L = {} does not split evenly into {} "
            "segments,\n  so the bound is 3 h_max + h_min = {}, not 2 S)\n",
            half[0] / e, half[1] / e, L, 2 * coll::kTreeSegments,
            format_bytes(double(3 * hi + lo)));
      r.check(fmt::format("double_binary_tree: no rank sends more than 3 h_max + h_min = {} B "
                          "(2 S with equal halves)",
                          3 * hi + lo),
              busiest <= 3 * hi + lo, fmt::format("the busiest sends {} B", busiest));
    }

    // The nodes: what crosses between them.
    if (n >= 2) {
      fmt::print(
          "\nnodes: G = {} ranks per node ({}), M = {} node{};\nbytes between nodes, off the "
          "trace:\n",
          g,
          opt.ranks_per_node > 0       ? "--ranks-per-node"
          : r.world.ranks_per_node > 0 ? "the simulated platform's"
                                       : "the default: the largest divisor of N up to sqrt N",
          m, m == 1 ? "" : "s");
      for (std::size_t j = 0; j < algos.size(); ++j) {
        const AllReduceAlgo a = algos[j];
        if (a == AllReduceAlgo::library) continue;
        const auto [first, last] = study.step_range[j];
        const std::uint64_t between = between_nodes(r, first, last, g);
        std::string formula;
        if (a == AllReduceAlgo::hierarchical || a == AllReduceAlgo::ring_chunked) {
          const std::uint64_t want = between_formula(a, n, g, L) * e;
          r.check(fmt::format("{}: bytes between nodes = {}", coll::to_string(a),
                              a == AllReduceAlgo::hierarchical ? "2(M-1) S" : "2M(N-1)/N S"),
                  between == want, fmt::format("measured {} B, formula {} B", between, want));
          formula =
              a == AllReduceAlgo::hierarchical ? "2(M-1) S (checked)" : "2M(N-1)/N S (checked)";
        }
        std::string line = fmt::format("  {:<18}  {:>12}  {}", coll::to_string(a),
                                       format_bytes(double(between)), formula);
        fmt::print("{}\n", line.erase(line.find_last_not_of(' ') + 1));
      }
      if (m > 1 && g > 1)
        fmt::print(
            "  the hierarchical all-reduce crosses between nodes in 2(M-1) = {} steps, the ring\n"
            "  in all 2(N-1) = {}; a rank sends 2(M-1)/N S there, (N-1)/(M-1) = {:.2f} times less\n"
            "  than the ring's last rank of each node, and all G = {} ranks of a node send at "
            "once\n",
            2 * (m - 1), 2 * (n - 1), double(n - 1) / double(m - 1), g);
    }

    // On a simulated platform with nodes: the two-level model (alpha, beta inside a node and
    // between nodes; the G ranks of a node share its one link out, as on dgx-pair).
    if (cp.network && m > 1 && g > 1 && study_options.runs(AllReduceAlgo::hierarchical) &&
        study_options.runs(AllReduceAlgo::ring_chunked)) {
      const std::vector<std::string> hosts = r.hosts();
      const auto in = simulated_route(hosts[0], hosts[1]);
      const auto out = simulated_route(hosts[0], hosts[std::size_t(g)]);
      if (in && out) {
        const double s = double(S), N = n;
        const double flat = 2 * (N - 1) * (out->latency_s + s / N / out->bandwidth_Bps);
        const double hier = 2 * (g - 1) * (in->latency_s + s / g / in->bandwidth_Bps) +
                            2 * (m - 1) * (out->latency_s + g * s / N / out->bandwidth_Bps);
        fmt::print(
            "\nthe two-level model on {} (inside a node: {}, {:.4g} GB/s; between: {}, {:.4g} "
            "GB/s):\n"
            "  ring_chunked = 2(N-1) (a_out + S/N b_out)\n"
            "  hierarchical = 2(G-1) (a_in + S/G b_in) + 2(M-1) (a_out + G S/N b_out)\n"
            "  (every ring step waits for its message between nodes; the hierarchical middle\n"
            "  phase's G messages share the node's one link)\n"
            "  {:<14}  {:>10}  {:>10}\n  {:<14}  {:>10}  {:>10}\n  {:<14}  {:>10}  {:>10}\n",
            cp.network->platform, format_seconds(in->latency_s), in->bandwidth_Bps * 1e-9,
            format_seconds(out->latency_s), out->bandwidth_Bps * 1e-9, "", "model", "simulated",
            "ring_chunked", format_seconds(flat),
            format_seconds(meas[index(AllReduceAlgo::ring_chunked)].seconds), "hierarchical",
            format_seconds(hier), format_seconds(meas[index(AllReduceAlgo::hierarchical)].seconds));
      }
    }

    lesson.set_cost_model(study_cost_model_json(cp, S, n, counted.predictions));
    print_times(r, algos, meas, cp, S);

    // The crossover: measured by the sweep, and where the model puts it.
    if (!rows.empty() && n >= 2) {
      fmt::print(
          "\ncrossover: each algorithm {} times per size on the first L elements (median; a\n"
          "barrier before and after in every figure; dbl tree = double_binary_tree):\n",
          reps);
      fmt::print("  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}\n", "S", "tree", "dbl tree",
                 "ring", "model tree", "model ring");
      std::uint64_t ring_from = 0;  // the smallest size from which the ring is never slower
      for (const SweepRow& row : rows) {
        const double bytes = double(row.length * e);
        std::string line = fmt::format("  {:>10}", format_bytes(bytes));
        for (double sec : row.seconds) line += fmt::format("  {:>10}", format_seconds(sec));
        fmt::print(
            "{}  {:>10}  {:>10}\n", line,
            format_seconds(predict_all_reduce(AllReduceAlgo::tree, n, bytes).seconds(cp)),
            format_seconds(predict_all_reduce(AllReduceAlgo::ring_chunked, n, bytes).seconds(cp)));
        const bool ring_wins = row.seconds[2] <= row.seconds[0];
        if (!ring_wins)
          ring_from = 0;
        else if (ring_from == 0)
          ring_from = row.length * e;
      }
      const double model = model_crossover(AllReduceAlgo::tree, n, cp);
      fmt::print("  the model's crossover (tree = ring): {}\n",
                 model == 0  ? std::string("none: the ring is never slower at N = 2")
                 : model < 0 ? std::string("none: the ring is always slower")
                             : fmt::format("S = {}\n    (from alpha {}, beta {:.3g} s/B, gamma "
                                           "{:.3g} s/B)",
                                           format_bytes(model), format_seconds(cp.alpha_s),
                                           cp.beta_s_per_byte, cp.gamma_s_per_byte));
      fmt::print("  measured: {}\n",
                 ring_from == 0 ? std::string("the tree was faster at the largest size swept")
                                : fmt::format("the ring is faster from S = {} on",
                                              format_bytes(double(ring_from))));
    }

    // All-to-all: the counts of the dispatch by each algorithm, against their formulas.
    if (n >= 1) {
      const int cap = capacity(moe, n);
      const std::uint64_t B = std::uint64_t(cap) * std::uint64_t(moe.hidden) * e;
      const StepCounts pw =
          count_steps(r, experts_study.pairwise_steps.first, experts_study.pairwise_steps.second);
      const StepCounts br =
          count_steps(r, experts_study.bruck_steps.first, experts_study.bruck_steps.second);
      std::uint64_t bruck_blocks =
          0;  // blocks a rank sends: every distance i < N, once per set bit
      for (int i = 1; i < n; ++i) bruck_blocks += std::uint64_t(std::popcount(unsigned(i)));
      const auto all_ranks = [&](const StepCounts& c, std::uint64_t msgs, std::uint64_t bytes) {
        bool ok = c.ranks.size() == std::size_t(n);
        for (const auto& t : c.ranks)
          ok = ok && t.msgs_sent == msgs && t.msgs_recv == msgs && t.bytes_sent == bytes &&
               t.bytes_recv == bytes;
        return ok;
      };
      fmt::print(
          "\nall-to-all: {} tokens per rank of {} float32, N = {} experts (one per rank),\n"
          "capacity {} tokens per expert per rank; a block B = {}:\n",
          moe.tokens, moe.hidden, n, cap, format_bytes(double(B)));
      fmt::print("  {:<9}  {:>6}  {:>12}  formula\n", "dispatch", "steps", "one rank");
      fmt::print("  {:<9}  {:>6}  {:>12}  N-1 steps, (N-1) B\n", "pairwise", pw.steps,
                 format_bytes(double(pw.max_sent)));
      fmt::print("  {:<9}  {:>6}  {:>12}  ceil(lg N) steps, sum_i popcount(i) B = {} blocks\n",
                 "bruck", br.steps, format_bytes(double(br.max_sent)), bruck_blocks);
      fmt::print(
          "  Bruck sends {} messages where pairwise sends {}, but {:.2f} times the bytes:\n"
          "  the winner for small blocks, where alpha dominates\n",
          ceil_lg(n), n - 1, n > 1 ? double(bruck_blocks) / double(n - 1) : 1.0);
      r.check("all_to_all_pairwise: every rank sends and receives N-1 blocks, one a step",
              pw.steps == n - 1 && all_ranks(pw, std::uint64_t(n - 1), std::uint64_t(n - 1) * B),
              fmt::format("{} steps", pw.steps));
      r.check("all_to_all_bruck: ceil(lg N) messages per rank, sum_i popcount(i) blocks",
              br.steps == ceil_lg(n) && all_ranks(br, std::uint64_t(ceil_lg(n)), bruck_blocks * B),
              fmt::format("{} steps", br.steps));
      std::int64_t wanted = 0, kept = 0;
      std::string per_expert;
      for (int x = 0; x < n; ++x) {
        std::int64_t to_x = 0, kept_x = 0;
        for (int k = 0; k < n && !experts_study.load.empty(); ++k) {
          const std::int64_t w = experts_study.load[std::size_t(k * n + x)];
          to_x += w, kept_x += std::min<std::int64_t>(w, cap);
        }
        wanted += to_x, kept += kept_x;
        if (n <= 16) per_expert += fmt::format("{}{}", per_expert.empty() ? "" : " ", to_x);
      }
      if (n <= 16) fmt::print("  tokens per expert (all ranks' load, gathered): {}\n", per_expert);
      fmt::print("  kept {} of {} tokens; {} dropped by the capacity (their output is 0)\n", kept,
                 wanted, wanted - kept);
    }
  });

  // Memory: per rank the input, the result, MPI's result and the sweep's buffer (4 x 4 B per
  // element), the float64 reference (8 B), the algorithms' workspace (4 B): 28 B, 32 with slack.
  lesson.needs_memory([&](const World&) { return MemoryNeed{32.0 * double(opt.size), 0}; });

  return lesson.run(argc, argv, [&](Comm& comm) {
    // STEP 1: every rank fills its own input of L float32; the reference is the float64 sum of
    // all the inputs, made on every rank from the seed (lessons/common/all_reduce_study.cpp).
    StudyRank mine = prepare_study(comm, algos, opt.size, opt.seed, calibration_path, study);

    // STEP 2: each all-reduce in turn (untraced warm-up, traced and timed run, every rank checks
    // the sum). They live in core/collectives, which the README quotes:
    //   tree                all_reduce_tree.hpp (reduce_tree.hpp, then broadcast_tree.hpp)
    //   double_binary_tree  all_reduce_double_binary_tree.hpp (tree.hpp builds the two trees)
    //   hierarchical        all_reduce_hierarchical.hpp (--ranks-per-node, or the platform's)
    //   ring_chunked        reduce_scatter_ring.hpp, all_gather_ring.hpp (lesson 06)
    for (AllReduceAlgo a : algos) run_study_algorithm(comm, mine, a, study);

    // STEP 3: the crossover sweep: tree, double tree and ring on 1, 4, 16, .. elements up to L.
    if (algos.front() != AllReduceAlgo::library) {
      std::vector<SweepRow> mine_rows = sweep(comm, mine, reps);
      if (comm.rank() == 0) rows = std::move(mine_rows);
    }

    // STEP 4: all-to-all, expert parallelism's collective: tokens to their experts and back.
    experts(comm, moe, opt.seed, experts_study);
  });
}
