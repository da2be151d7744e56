// collectives/async.hpp — the collectives as nonblocking operations (core/comm/async.hpp).
//
//   AsyncHandle h = coll::all_reduce_async(comm, bucket, AllReduceAlgo::ring_chunked, "bucket 2");
//   ... backward of the layers below, calling comm.progress() ...
//   h.wait();
//
// Each runs the blocking algorithm of this folder on the operation's own Comm, so its messages,
// steps and trace metadata are the blocking one's; the views must stay valid until the wait.
// `library` (MPI_Allreduce) blocks inside the operation: it runs to its end when started.
#pragma once

#include <string>

#include "core/collectives/all_gather_ring.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/reduce_scatter_ring.hpp"
#include "core/comm/comm.hpp"

namespace distlab::coll {

template <class T>
AsyncHandle all_reduce_async(Comm& comm, View<T> data, AllReduceAlgo algo,
                             std::string buffer = "data") {
  return comm.start(
      [data, algo, buffer = std::move(buffer)](Comm& c) { all_reduce(c, data, algo, buffer); });
}

// The ring all-gather (all_gather_ring.hpp): chunk r of `data` from rank r to every rank.
template <class T>
AsyncHandle all_gather_async(Comm& comm, View<T> data, std::string buffer = "data") {
  return comm.start(
      [data, buffer = std::move(buffer)](Comm& c) { all_gather_ring(c, data, buffer); });
}

// The ring reduce-scatter (reduce_scatter_ring.hpp): chunk r of the sum ends on rank r.
template <class T>
AsyncHandle reduce_scatter_async(Comm& comm, View<T> data, std::string buffer = "data") {
  return comm.start(
      [data, buffer = std::move(buffer)](Comm& c) { reduce_scatter_ring(c, data, buffer); });
}

}  // namespace distlab::coll
