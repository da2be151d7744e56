// all_reduce_tree.hpp — all-reduce on a binomial tree: reduce to rank 0, broadcast back.
//
//   reduce_tree     ceil(log2 N) rounds, whole buffers up the tree, each added
//   broadcast_tree  ceil(log2 N) rounds, whole buffers down
// 2 ceil(log2 N) steps: the latency of recursive doubling with a linear algorithm's load on the
// root (it moves 2 ceil(log2 N) whole buffers), and every message a whole buffer. A tree beats
// a ring where alpha dominates (small messages, many ranks): 2 lg N alphas against 2(N-1); a ring
// wins where bandwidth does, moving 2(N-1)/N S per rank against the tree's 2 lg N S at the root.
//   cost: 2 ceil(lg N) (alpha + S beta) + ceil(lg N) S gamma
// Each rank's result is the root's sum, copied: every rank ends with the same bits.
#pragma once

#include "core/collectives/broadcast_tree.hpp"
#include "core/collectives/reduce_tree.hpp"

namespace distlab::coll {

// data: this rank's input, replaced by the sum over all ranks.
template <class T>
void all_reduce_tree(Comm& comm, View<T> data, const std::string& buffer = "data") {
  reduce_tree(comm, View<const T>(data), data, 0, buffer);
  broadcast_tree(comm, data, 0, buffer, all_ranks(comm.size()));
}

}  // namespace distlab::coll
