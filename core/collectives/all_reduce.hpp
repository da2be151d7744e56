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
//   library              (MPI_Allreduce)        —                           —
// S is the buffer size in bytes. N not a power of two: the recursive algorithms first fold
// the extra ranks into partners (one more step before and after).
#pragma once

#include <string>
#include <vector>

#include "../library.hpp"
#include "all_reduce_parallel.hpp"
#include "all_reduce_recursive_doubling.hpp"
#include "all_reduce_recursive_halving.hpp"
#include "all_reduce_reduce_broadcast.hpp"
#include "all_reduce_ring.hpp"
#include "all_reduce_ring_chunked.hpp"
#include "all_reduce_sequential.hpp"

namespace distlab::coll {

enum class AllReduceAlgo {
  reduce_broadcast,
  sequential,
  parallel,
  ring,
  ring_chunked,
  recursive_doubling,
  recursive_halving,
  library,
};

inline const std::vector<AllReduceAlgo>& all_reduce_algos() {
  static const std::vector<AllReduceAlgo> all = {
      AllReduceAlgo::reduce_broadcast, AllReduceAlgo::sequential,         AllReduceAlgo::parallel,
      AllReduceAlgo::ring,             AllReduceAlgo::ring_chunked,       AllReduceAlgo::recursive_doubling,
      AllReduceAlgo::recursive_halving, AllReduceAlgo::library};
  return all;
}

inline const char* to_string(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::reduce_broadcast: return "reduce_broadcast";
    case AllReduceAlgo::sequential: return "sequential";
    case AllReduceAlgo::parallel: return "parallel";
    case AllReduceAlgo::ring: return "ring";
    case AllReduceAlgo::ring_chunked: return "ring_chunked";
    case AllReduceAlgo::recursive_doubling: return "recursive_doubling";
    case AllReduceAlgo::recursive_halving: return "recursive_halving";
    case AllReduceAlgo::library: return "library";
  }
  return "?";
}

// "ring_chunked" -> AllReduceAlgo::ring_chunked; throws UsageError naming the choices.
inline AllReduceAlgo parse_all_reduce_algo(const std::string& name) {
  std::string choices;
  for (AllReduceAlgo a : all_reduce_algos()) {
    if (name == to_string(a)) return a;
    choices += std::string(choices.empty() ? "" : ", ") + to_string(a);
  }
  throw UsageError("'" + name + "' is not an all-reduce algorithm; use one of " + choices);
}

// data: this rank's input, replaced by the element-wise sum over all ranks.
// `library` calls MPI_Allreduce (under mpirun only: it throws on in-process ranks).
template <class T>
void all_reduce(Comm& comm, View<T> data, AllReduceAlgo algo, const std::string& buffer = "data") {
  switch (algo) {
    case AllReduceAlgo::reduce_broadcast: return all_reduce_reduce_broadcast(comm, data, buffer);
    case AllReduceAlgo::sequential: return all_reduce_sequential(comm, data, buffer);
    case AllReduceAlgo::parallel: return all_reduce_parallel(comm, data, buffer);
    case AllReduceAlgo::ring: return all_reduce_ring(comm, data, buffer);
    case AllReduceAlgo::ring_chunked: return all_reduce_ring_chunked(comm, data, buffer);
    case AllReduceAlgo::recursive_doubling: return all_reduce_recursive_doubling(comm, data, buffer);
    case AllReduceAlgo::recursive_halving: return all_reduce_recursive_halving(comm, data, buffer);
    case AllReduceAlgo::library:
      library::all_reduce(comm, data.data(), data.data(), data.size(), dtype_of<T>());
      return;
  }
}

}  // namespace distlab::coll
