// all_reduce.hpp — every all-reduce algorithm behind one call, picked by name.
//
//   algorithm            steps (N = 2^k)        bytes sent by one rank      messages in flight per rank
//   reduce_broadcast     2(N-1)                 rank 0: (N-1) S             1
//   sequential           N rounds               (N-1) S in its round        1 (one after another)
//   parallel             1                      (N-1) S                     N-1 at once
//   ring                 N-1                    (N-1) S                     1 send + 1 recv
//   ring_chunked         2(N-1)                 2(N-1)/N S                  1 send + 1 recv
//   recursive_doubling   log2 N                 log2 N * S                  1 send + 1 recv
//   recursive_halving    2 log2 N               2(N-1)/N S                  1 send + 1 recv
//   tree                 2 ceil(log2 N)         root: 2 ceil(log2 N) S      1 send + 1 recv
//   double_binary_tree   2(G + H - 1)           about 2 S (inner: 3 S/2)   up to 3 sends, 4 recvs
//   hierarchical         2(g-1) + 2(m-1)        2(N-1)/N S, 2(m-1)/N S of it between nodes
//   library              (MPI_Allreduce)        —                           —
// S is the buffer size in bytes; G = kTreeSegments, the segments of each half that follow each
// other through the double binary tree, H = floor(log2 N) its trees' height;
// g ranks per node (default_ranks_per_node) and m = N/g nodes. N not a power of two:
// the recursive algorithms first fold the extra ranks into partners (one more step before and
// after).
#pragma once

#include "core/collectives/algo.hpp"
#include "core/collectives/all_reduce_double_binary_tree.hpp"
#include "core/collectives/all_reduce_hierarchical.hpp"
#include "core/collectives/all_reduce_parallel.hpp"
#include "core/collectives/all_reduce_recursive_doubling.hpp"
#include "core/collectives/all_reduce_recursive_halving.hpp"
#include "core/collectives/all_reduce_reduce_broadcast.hpp"
#include "core/collectives/all_reduce_ring.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/collectives/all_reduce_sequential.hpp"
#include "core/collectives/all_reduce_tree.hpp"
#include "core/collectives/baseline.hpp"

namespace distlab::coll {

// data: this rank's input, replaced by the element-wise sum over all ranks.
// `library` calls MPI_Allreduce (under mpirun only: it throws on in-process ranks).
template <class T>
void all_reduce(Comm& comm, View<T> data, AllReduceAlgo algo, const std::string& buffer = "data") {
  switch (algo) {
    case AllReduceAlgo::reduce_broadcast:
      return all_reduce_reduce_broadcast(comm, data, buffer);
    case AllReduceAlgo::sequential:
      return all_reduce_sequential(comm, data, buffer);
    case AllReduceAlgo::parallel:
      return all_reduce_parallel(comm, data, buffer);
    case AllReduceAlgo::ring:
      return all_reduce_ring(comm, data, buffer);
    case AllReduceAlgo::ring_chunked:
      return all_reduce_ring_chunked(comm, data, buffer);
    case AllReduceAlgo::recursive_doubling:
      return all_reduce_recursive_doubling(comm, data, buffer);
    case AllReduceAlgo::recursive_halving:
      return all_reduce_recursive_halving(comm, data, buffer);
    case AllReduceAlgo::tree:
      return all_reduce_tree(comm, data, buffer);
    case AllReduceAlgo::double_binary_tree:
      return all_reduce_double_binary_tree(comm, data, buffer);
    case AllReduceAlgo::hierarchical:
      return all_reduce_hierarchical(comm, data, 0, buffer);
    case AllReduceAlgo::library:
      baseline::all_reduce(comm, data.data(), data.data(), data.size(), dtype_of<T>());
      return;
  }
}

}  // namespace distlab::coll
