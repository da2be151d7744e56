// all_gather_gather_broadcast.hpp — all-gather built naively: gather to rank 0, then broadcast.
//
//   gather    N - 1 steps: rank 0 receives (N-1)/N of the result
//   broadcast N - 1 steps: rank 0 sends N - 1 whole results
// 2(N - 1) steps; rank 0 moves about N times the buffer while every other rank moves about
// one buffer: the central bottleneck the ring algorithms remove.
#pragma once

#include "core/collectives/broadcast.hpp"
#include "core/collectives/gather.hpp"

namespace distlab::coll {

// send: this rank's chunk; recv: the whole result, on every rank.
template <class T>
void all_gather_gather_broadcast(Comm& comm, View<const T> send, View<T> recv,
                                 const std::string& buffer = "data") {
  gather(comm, send, recv, 0, buffer);
  broadcast(comm, recv, 0, buffer, all_ranks(comm.size()));
}

}  // namespace distlab::coll
