// reduce_tree.hpp — reduce on a binomial tree: ceil(log2 N) rounds instead of N - 1.
//
// Ranks relative to the root, v = (rank - root) mod N (tree.hpp):
//   round k = 0, 1, ..:  v with lowest set bit k sends its partial sum to v - 2^k and is done;
//                        v with no set bit below k + 1 receives from v + 2^k (if it exists)
//                        and adds it
// The root receives ceil(log2 N) whole buffers, one per round: O(log N) at the root against the
// linear reduce's N - 1 (reduce.hpp), every message a whole buffer.
//   cost: ceil(lg N) (alpha + S beta + S gamma)
#pragma once

#include "core/collectives/common.hpp"
#include "core/collectives/tree.hpp"

namespace distlab::coll {

// Bits of the world ranks in v's subtree after `rounds` rounds, v relative to `root`.
inline std::uint64_t binomial_mask(int v, int rounds, int n, int root) {
  std::uint64_t m = 0;
  for (int u : binomial_subtree(v, rounds, n)) m |= rank_bit((u + root) % n);
  return m;
}

// send: this rank's input; recv, as large, on every rank (may be the same memory as send): the
// sum on the root, elsewhere the partial sum of the rank's subtree.
template <class T>
void reduce_tree(Comm& comm, View<const T> send, View<T> recv, int root,
                 const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank();
  const int v = (me - root + n) % n;
  DL_CHECK(recv.size() == send.size(), "reduce_tree: recv holds {} elements, send {}", recv.size(),
           send.size());
  const int first_step = comm.next_steps(binomial_rounds(n));
  comm.declare_buffer(buffer, recv.size(), 1);
  if (recv.data() != send.data()) ops::copy(recv, send);
  const BinomialNode node = binomial_node(v, n);
  Buffer<T> incoming = comm.scratch<T>(node.children.empty() ? 0 : recv.size());
  // quote: reduce-tree
  for (int k = 0; k < int(node.children.size()); ++k) {
    // round k: take child v + 2^k's partial sum and add it
    const int child = node.children[std::size_t(k)];
    comm.mark_step(first_step + k);
    comm.recv(incoming.view(), (child + root) % n, kTagTree,
              meta(first_step + k, buffer, 0, 1, Apply::reduce, binomial_mask(child, k, n, root)));
    auto add = comm.phase("add");
    ops::add(recv, View<const T>(incoming.view()));
  }
  if (node.parent >= 0) {  // round `node.round`: my subtree's sum to my parent, then done
    comm.mark_step(first_step + node.round);
    comm.send(View<const T>(recv), (node.parent + root) % n, kTagTree,
              meta(first_step + node.round, buffer, 0, 1, Apply::reduce,
                   binomial_mask(v, node.round, n, root)));
  }
  // end quote: reduce-tree
}

}  // namespace distlab::coll
