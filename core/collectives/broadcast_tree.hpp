// broadcast_tree.hpp — broadcast on a binomial tree: ceil(log2 N) rounds instead of N - 1.
//
// The reduce tree's edges in the other order (tree.hpp), v = (rank - root) mod N, K rounds:
//   round j = 0 .. K-1 (k = K - 1 - j):  v with no set bit below k + 1 sends the buffer to
//                                          v + 2^k (if it exists), which receives it
// Every rank that holds the buffer sends it on, so the holders double each round: the root
// sends ceil(log2 N) whole buffers, against the linear broadcast's N - 1 (broadcast.hpp).
//   cost: ceil(lg N) (alpha + S beta)
#pragma once

#include "core/collectives/common.hpp"
#include "core/collectives/tree.hpp"

namespace distlab::coll {

// data: the root's input; the output everywhere. `contributors`: whose data it holds.
template <class T>
void broadcast_tree(Comm& comm, View<T> data, int root, const std::string& buffer = "data",
                    std::uint64_t contributors = 0) {
  const int n = comm.size(), me = comm.rank();
  const int v = (me - root + n) % n, rounds = binomial_rounds(n);
  const int first_step = comm.next_steps(rounds);
  comm.declare_buffer(buffer, data.size(), 1);
  if (contributors == 0) contributors = rank_bit(root);
  const BinomialNode node = binomial_node(v, n);
  const auto step_of = [&](int k) { return first_step + rounds - 1 - k; };
  // quote: broadcast-tree
  if (node.parent >= 0) {  // my parent's round: the buffer arrives
    comm.mark_step(step_of(node.round));
    comm.recv(data, (node.parent + root) % n, kTagTree,
              meta(step_of(node.round), buffer, 0, 1, Apply::copy, contributors));
  }
  for (int k = int(node.children.size()) - 1; k >= 0; --k) {
    // round for bit k: pass the buffer on to child v + 2^k
    comm.mark_step(step_of(k));
    comm.send(View<const T>(data), (node.children[std::size_t(k)] + root) % n, kTagTree,
              meta(step_of(k), buffer, 0, 1, Apply::copy, contributors));
  }
  // end quote: broadcast-tree
}

}  // namespace distlab::coll
