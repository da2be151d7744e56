// reduce_scatter_reduce_scatter.hpp — reduce-scatter built naively: reduce to rank 0, then scatter.
//
//   reduce  N - 1 steps: rank 0 receives N - 1 whole buffers and adds them
//   scatter N - 1 steps: rank 0 sends each rank its chunk of the sum
// 2(N - 1) steps; rank 0 receives (N-1) buffers, every other rank sends one buffer and
// receives 1/N of one.
#pragma once

#include "core/collectives/reduce.hpp"
#include "core/collectives/scatter.hpp"

namespace distlab::coll {

// send: this rank's whole input; recv: this rank's chunk of the sum.
template <class T>
void reduce_scatter_reduce_scatter(Comm& comm, View<const T> send, View<T> recv,
                                   const std::string& buffer = "data") {
  Buffer<T> sum = comm.scratch<T>(comm.rank() == 0 ? send.size() : 0);  // the full sum, on rank 0
  reduce(comm, send, sum.view(), 0, buffer);
  scatter(comm, View<const T>(sum.view()), recv, 0, buffer, all_ranks(comm.size()));
}

}  // namespace distlab::coll
