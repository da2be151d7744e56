// algo.hpp — the names of the collectives and of the all-reduce algorithms, without their code.
//
// The cost model, the benchmark and the lessons' options pick an algorithm by name; only the
// code that runs one includes all_reduce.hpp (and through it comm, ops and the transports).
#pragma once

#include <string>
#include <vector>

#include "core/base/check.hpp"

namespace distlab {

// The collectives distlab-bench measures and the cost model predicts.
enum class Collective { all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all };
inline const char* to_string(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return "allreduce";
    case Collective::all_gather:
      return "allgather";
    case Collective::reduce_scatter:
      return "reducescatter";
    case Collective::broadcast:
      return "broadcast";
    case Collective::reduce:
      return "reduce";
    case Collective::all_to_all:
      return "alltoall";
  }
  return "?";
}

}  // namespace distlab

namespace distlab::coll {

enum class AllReduceAlgo {
  reduce_broadcast,
  sequential,
  parallel,
  ring,
  ring_chunked,
  recursive_doubling,
  recursive_halving,
  tree,
  double_binary_tree,
  hierarchical,
  library,
};

// The double binary tree cuts each half of the buffer into this many segments, which follow each
// other up and down its trees (all_reduce_double_binary_tree.hpp): the pipeline's depth.
inline constexpr int kTreeSegments = 4;

// The node size a hierarchical all-reduce uses on n ranks when none is given: the largest
// divisor of n no greater than its square root (8 -> 2, 16 -> 4, 12 -> 3; a prime n -> 1).
inline int default_ranks_per_node(int n) {
  int g = 1;
  for (int d = 1; d * d <= n; ++d)
    if (n % d == 0) g = d;
  return g;
}

inline const std::vector<AllReduceAlgo>& all_reduce_algos() {
  static const std::vector<AllReduceAlgo> all = {AllReduceAlgo::reduce_broadcast,
                                                 AllReduceAlgo::sequential,
                                                 AllReduceAlgo::parallel,
                                                 AllReduceAlgo::ring,
                                                 AllReduceAlgo::ring_chunked,
                                                 AllReduceAlgo::recursive_doubling,
                                                 AllReduceAlgo::recursive_halving,
                                                 AllReduceAlgo::tree,
                                                 AllReduceAlgo::double_binary_tree,
                                                 AllReduceAlgo::hierarchical,
                                                 AllReduceAlgo::library};
  return all;
}

inline const char* to_string(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::reduce_broadcast:
      return "reduce_broadcast";
    case AllReduceAlgo::sequential:
      return "sequential";
    case AllReduceAlgo::parallel:
      return "parallel";
    case AllReduceAlgo::ring:
      return "ring";
    case AllReduceAlgo::ring_chunked:
      return "ring_chunked";
    case AllReduceAlgo::recursive_doubling:
      return "recursive_doubling";
    case AllReduceAlgo::recursive_halving:
      return "recursive_halving";
    case AllReduceAlgo::tree:
      return "tree";
    case AllReduceAlgo::double_binary_tree:
      return "double_binary_tree";
    case AllReduceAlgo::hierarchical:
      return "hierarchical";
    case AllReduceAlgo::library:
      return "library";
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

}  // namespace distlab::coll
