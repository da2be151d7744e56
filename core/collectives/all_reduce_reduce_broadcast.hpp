// all_reduce_reduce_broadcast.hpp — all-reduce built naively: reduce to rank 0, then broadcast.
//
//   reduce    N - 1 steps: rank 0 receives N - 1 whole buffers and adds them
//   broadcast N - 1 steps: rank 0 sends N - 1 whole buffers
// 2(N - 1) steps; rank 0 moves 2(N-1) buffers, the others 2: the parameter server's shape.
// The ring and recursive-halving all-reduces spread this load evenly.
#pragma once

#include "core/collectives/broadcast.hpp"
#include "core/collectives/reduce.hpp"

namespace distlab::coll {

// data: this rank's input, replaced by the sum over all ranks.
template <class T>
void all_reduce_reduce_broadcast(Comm& comm, View<T> data, const std::string& buffer = "data") {
  reduce(comm, View<const T>(data), data, 0, buffer);
  broadcast(comm, data, 0, buffer, all_ranks(comm.size()));
}

}  // namespace distlab::coll
