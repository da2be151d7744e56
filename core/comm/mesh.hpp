// mesh.hpp — ranks laid out as a 3-D grid: data x pipeline x tensor parallel.
//
//   MeshShape shape{2, 2, 2};              dp x pp x tp; shape.size() must be the ranks
//   shape.coord(5)                         {dp 1, pp 0, tp 1}
//   shape.rank_of({1, 0, 1})               5
//   Mesh mesh(comm, shape);                collective: the three groups of this rank
//   mesh.tp().all_reduce... mesh.dp() ...  each a Comm (Comm::split), named "tp", "pp", "dp"
//
// Tensor parallelism varies fastest (rank = (dp * pp + pp) * tp + tp, Megatron's order): its
// traffic is the heaviest (two all-reduces per block, every micro-batch), so its ranks are
// neighbours, the ones that share a node and its fastest links. Pipeline stages come next (one
// activation per micro-batch crosses a stage boundary), data parallel replicas last (one
// gradient all-reduce per step).
#pragma once

#include <string>

#include "core/comm/comm.hpp"

namespace distlab {

struct MeshCoord {
  int dp = 0, pp = 0, tp = 0;
  bool operator==(const MeshCoord&) const = default;
};

struct MeshShape {
  int dp = 1, pp = 1, tp = 1;

  int size() const { return dp * pp * tp; }
  // Throws UsageError (one sentence) unless every extent is >= 1 and they multiply to `ranks`.
  void check(int ranks) const;
  MeshCoord coord(int rank) const;
  int rank_of(const MeshCoord& c) const;
  std::string to_string() const;  // "dp 2 x pp 2 x tp 2"
};

// One rank's place in the mesh and its three groups. Constructing it is collective over `world`
// (three splits, in the order tp, pp, dp).
class Mesh {
 public:
  Mesh(Comm& world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  Comm& dp() { return dp_; }  // the replicas of this rank's (pp, tp) place
  Comm& pp() { return pp_; }  // the stages of this rank's (dp, tp) place
  Comm& tp() { return tp_; }  // the tensor-parallel ranks of this rank's (dp, pp) place
  // "mesh dp 2 x pp 2 x tp 2: rank 5 = (dp 1, pp 0, tp 1)"
  std::string describe() const;

 private:
  MeshShape shape_;
  int rank_;
  MeshCoord coord_;
  Comm tp_, pp_, dp_;
};

}  // namespace distlab
