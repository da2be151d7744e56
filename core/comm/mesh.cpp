#include "core/comm/mesh.hpp"

#include <fmt/format.h>

#include "core/base/check.hpp"

namespace distlab {

void MeshShape::check(int ranks) const {
  if (dp < 1 || pp < 1 || tp < 1)
    throw UsageError(
        fmt::format("--dp, --pp and --tp must each be at least 1 (got {})", to_string()));
  if (size() != ranks)
    throw UsageError(
        fmt::format("the mesh {} has {} ranks, but the run has {}: --dp x --pp x "
                    "--tp must equal the ranks",
                    to_string(), size(), ranks));
}

MeshCoord MeshShape::coord(int rank) const {
  return {rank / (pp * tp), rank / tp % pp, rank % tp};
}

int MeshShape::rank_of(const MeshCoord& c) const {
  return (c.dp * pp + c.pp) * tp + c.tp;
}

std::string MeshShape::to_string() const {
  return fmt::format("dp {} x pp {} x tp {}", dp, pp, tp);
}

namespace {
// Each group holds the ranks that agree on the two other coordinates: that pair is its color,
// its own coordinate its key (its rank in the group).
Comm split_tp(Comm& world, const MeshShape& s, const MeshCoord& c) {
  return world.split(c.dp * s.pp + c.pp, c.tp, "tp");
}
Comm split_pp(Comm& world, const MeshShape& s, const MeshCoord& c) {
  return world.split(c.dp * s.tp + c.tp, c.pp, "pp");
}
Comm split_dp(Comm& world, const MeshShape& s, const MeshCoord& c) {
  return world.split(c.pp * s.tp + c.tp, c.dp, "dp");
}
}  // namespace

Mesh::Mesh(Comm& world, MeshShape shape)
    : shape_((shape.check(world.size()), shape)),
      rank_(world.rank()),
      coord_(shape_.coord(rank_)),
      tp_(split_tp(world, shape_, coord_)),
      pp_(split_pp(world, shape_, coord_)),
      dp_(split_dp(world, shape_, coord_)) {}

std::string Mesh::describe() const {
  return fmt::format("mesh {}: rank {} = (dp {}, pp {}, tp {})", shape_.to_string(), rank_,
                     coord_.dp, coord_.pp, coord_.tp);
}

}  // namespace distlab
