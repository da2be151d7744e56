// all_reduce_hierarchical.hpp — a two-level all-reduce for ranks grouped into nodes.
//
// N = G x M ranks: M nodes of G consecutive ranks (node k = r / G, local index l = r mod G).
// Links inside a node (NVLink, shared memory) are much faster than between nodes (the network),
// so the algorithm sends as little as it can between nodes:
//   1. inside each node, a ring reduce-scatter over its G ranks: local rank l ends with chunk l
//      of its node's sum                                               G - 1 steps of S/G
//   2. across the nodes, the M ranks of local index l all-reduce chunk l (a chunked ring):
//      every node's chunk l summed                                     2(M - 1) steps of S/N
//   3. inside each node, a ring all-gather of the G summed chunks       G - 1 steps of S/G
// Each rank sends 2(N-1)/N S in all, as the flat chunked ring, but only 2(M-1)/N S of it between
// nodes, in 2(M-1) steps, where the flat ring's last rank of each node sends its whole 2(N-1)/N S
// to the next node, in 2(N-1) steps: (N-1)/(M-1) times the bytes and the steps on that link.
// MPI libraries (Open MPI's HAN, MPICH's and MVAPICH2's SMP-aware all-reduce) and Horovod's
// hierarchical all-reduce do this on multi-node machines; NCCL's defaults are the ring and its
// double tree, whose rings and trees cross each node in a chain of its GPUs instead.
//   cost: 2(G-1) + 2(M-1) steps; 2(G-1)/G S + 2(M-1)/N S moved; (G-1)/G S + (M-1)/N S added
// The buffer is cut into N fine chunks (Partition): chunk l of the node's ring is the fine chunks
// [l M, (l + 1) M), and the cross-node ring's chunk j of local index l is fine chunk l M + j.
// Each fine chunk is summed in one order and copied: every rank ends with the same bits.
#pragma once

#include <vector>

#include "core/collectives/algo.hpp"
#include "core/collectives/common.hpp"

namespace distlab::coll {

namespace detail {

// One ring over `members` (comm ranks in ring order; I am members[pos]): reduce-scatter
// (reduce = true, ring chunk i ends summed on member i) or all-gather (ring chunk i starts on
// member i). Ring chunk i is the fine chunks range(i) = [c0, c1) of data. `brings(m)`: the
// ranks whose data member m holds before the ring starts (reduce-scatter), or `whole` (all-gather:
// every chunk is a finished sum).
template <class T, class Range, class Brings>
void ring_over(Comm& comm, View<T> data, const Partition& fine, const std::vector<int>& members,
               int pos, Range range, Brings brings, bool reduce, int first_step,
               const std::string& buffer, std::uint64_t whole) {
  const int g = int(members.size());
  if (g <= 1) return;
  const int right = members[std::size_t((pos + 1) % g)],
            left = members[std::size_t((pos - 1 + g) % g)];
  const auto chunk = [&](int i) {
    const auto [c0, c1] = range(i);
    return data.sub(fine.begin(c0), fine.begin(c1) - fine.begin(c0));
  };
  // Whose data ring chunk sent by member m at step s holds: m, m - 1, .., m - s (reduce).
  const auto held = [&](int m, int s) {
    std::uint64_t mask = 0;
    for (int k = 0; k <= s; ++k) mask |= brings(((m - k) % g + g) % g);
    return mask;
  };
  std::size_t largest = 0;
  for (int i = 0; i < g; ++i) largest = std::max(largest, chunk(i).size());
  Buffer<T> incoming = comm.scratch<T>(reduce ? largest : 0);
  for (int s = 0; s < g - 1; ++s) {
    const int step = first_step + s;
    // reduce-scatter: send chunk pos - s - 1, add chunk pos - s - 2 (as reduce_scatter_ring);
    // all-gather: pass chunk pos - s on, take chunk pos - s - 1 (as all_gather_ring)
    const int out = (((reduce ? pos - s - 1 : pos - s) % g) + g) % g;
    const int in = (((reduce ? pos - s - 2 : pos - s - 1) % g) + g) % g;
    const auto [o0, o1] = range(out);
    const auto [i0, i1] = range(in);
    comm.mark_step(step);
    if (reduce) {
      View<T> got = incoming.sub(0, chunk(in).size());
      comm.sendrecv(cview(chunk(out)), right, got, left, kTagHierarchical,
                    meta(step, buffer, o0, o1, Apply::reduce, held(pos, s)),
                    meta(step, buffer, i0, i1, Apply::reduce, held((pos - 1 + g) % g, s)));
      auto add = comm.phase("add");
      ops::add(chunk(in), cview(got));
    } else {
      comm.sendrecv(cview(chunk(out)), right, chunk(in), left, kTagHierarchical,
                    meta(step, buffer, o0, o1, Apply::copy, whole),
                    meta(step, buffer, i0, i1, Apply::copy, whole));
    }
  }
}

}  // namespace detail

// data: this rank's input, replaced by the sum over all ranks. `ranks_per_node` must divide the
// ranks (0: the world's, World::ranks_per_node, from --ranks-per-node or the simulated platform;
// when that is 0 too, default_ranks_per_node).
template <class T>
void all_reduce_hierarchical(Comm& comm, View<T> data, int ranks_per_node = 0,
                             const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank();
  const int G = ranks_per_node > 0                ? ranks_per_node
                : comm.world().ranks_per_node > 0 ? comm.world().ranks_per_node
                                                  : default_ranks_per_node(n);
  DL_CHECK(n % G == 0, "hierarchical all-reduce: {} ranks per node do not divide {} ranks", G, n);
  const int M = n / G, node = me / G, l = me % G;
  const Partition fine{data.size(), n};
  const int first_step = comm.next_steps(2 * (G - 1) + 2 * (M - 1));
  comm.declare_buffer(buffer, data.size(), n);
  std::vector<int> in_node, across;
  for (int k = 0; k < G; ++k) in_node.push_back(node * G + k);
  for (int k = 0; k < M; ++k) across.push_back(k * G + l);
  const auto node_chunk = [&](int i) { return std::pair{i * M, (i + 1) * M}; };
  const auto node_ranks = [&](int k) {  // the ranks of node k
    std::uint64_t m = 0;
    for (int i = 0; i < G; ++i) m |= rank_bit(k * G + i);
    return m;
  };
  // quote: hierarchical
  // 1. reduce-scatter inside my node: chunk l of my node's sum ends on me
  detail::ring_over(
      comm, data, fine, in_node, l, node_chunk, [&](int m) { return rank_bit(node * G + m); }, true,
      first_step, buffer, 0);
  // 2. across the nodes, among the ranks of local index l: chunk l all-reduced (a chunked ring)
  const auto fine_chunk = [&](int j) { return std::pair{l * M + j, l * M + j + 1}; };
  if (!broken("hierarchical-skip-across")) {  // lesson 15's --break: each node keeps its own sum
    detail::ring_over(comm, data, fine, across, node, fine_chunk, node_ranks, true,
                      first_step + G - 1, buffer, 0);
    detail::ring_over(comm, data, fine, across, node, fine_chunk, node_ranks, false,
                      first_step + G - 1 + M - 1, buffer, all_ranks(n));
  }
  // 3. all-gather inside my node: every summed chunk to every rank of it
  detail::ring_over(
      comm, data, fine, in_node, l, node_chunk, [](int) { return 0ull; }, false,
      first_step + G - 1 + 2 * (M - 1), buffer, all_ranks(n));
  // end quote: hierarchical
}

}  // namespace distlab::coll
