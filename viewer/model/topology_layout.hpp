// topology_layout.hpp — where the Topology panel puts ranks and packets, in a unit square.
// Plain geometry (no ImGui) so the tests can check it; the panel scales it to its canvas.
//
//   up to 16 ranks  a circle, rank 0 at the top, clockwise: a ring algorithm's neighbours sit
//                   side by side, and the ring is the circle.
//   past 16 ranks   a grid, row-major: partners rank ^ mask of recursive halving are in one row
//                   (small masks) or one column (large masks), so their links stay straight.
//   with roles      a trace that records its ranks' roles (otherData.roles, e.g. lesson 05's
//                   parameter server) puts its servers in the middle (one at the centre, more on
//                   a small inner circle) and the workers on the circle around them: the star.
//   as a mesh       a trace that records its mesh (otherData.mesh, lesson 14's dp x pp x tp)
//                   puts each data-parallel replica in a block, the blocks side by side; in a
//                   block the pipeline stages are rows (stage 0 at the top) and the
//                   tensor-parallel ranks of a stage sit next to each other in its row.
//   in nodes        a trace that records its ranks per node G (otherData.ranks_per_node, the
//                   hierarchical all-reduce's nodes), when 0 < G < N and G divides N: each node
//                   a box, the boxes in a grid (node 0 top left), the node's G ranks on a small
//                   circle inside its box from the top, clockwise, so the ring inside a node is
//                   its circle and rank r's partner r + G in the next node sits at the same
//                   place of the next box.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace distlab::viewer {

inline constexpr int kCircleMaxRanks = 16;

struct Point {
  double x = 0, y = 0;
};

// Rank centres inside [0, 1]^2, distinct, with room around them for labels.
std::vector<Point> rank_positions(int ranks);

// otherData.roles: a JSON array with one string per rank ("server", "worker"); empty when the
// text is not one.
std::vector<std::string> parse_roles(std::string_view json);
inline constexpr std::string_view kServerRole = "server";
bool has_servers(const std::vector<std::string>& roles);

// Rank centres by role: the servers in the middle, every other rank on the outer circle in rank
// order from the top, clockwise; rank_positions(roles.size()) when no rank is a server.
std::vector<Point> role_positions(const std::vector<std::string>& roles);

// otherData.mesh: {"dp": D, "pp": P, "tp": T} with rank = (dp x P + pp) x T + tp (tp fastest).
struct MeshDims {
  int dp = 0, pp = 0, tp = 0;
  bool any() const { return dp > 0 && pp > 0 && tp > 0; }
  int size() const { return dp * pp * tp; }
};
// The mesh of the text; all zeros when it is not one, or its product is not `ranks`.
MeshDims parse_mesh(std::string_view json, int ranks);

// Rank centres of a mesh (see above): a grid of D x T columns, with a gap of half a cell
// between replicas, and P rows.
std::vector<Point> mesh_positions(const MeshDims& mesh);
// A node radius that keeps a mesh's neighbours apart.
double mesh_node_radius(const MeshDims& mesh);

// Nodes of `ranks_per_node` consecutive ranks (see above): the ranks' centres and each node's box.
struct NodeBox {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // inside [0, 1]^2
  int first = 0, last = 0;                // its ranks, first .. last
};
struct NodeLayout {
  std::vector<Point> ranks;  // empty when the ranks do not form nodes (see above)
  std::vector<NodeBox> nodes;
  double node_radius = 0;  // a rank's radius that keeps a node's ranks apart
  bool any() const { return !ranks.empty(); }
};
NodeLayout node_layout(int ranks, int ranks_per_node);

// A node radius (unit-square units) that keeps neighbouring nodes apart for this many ranks.
double node_radius(int ranks);

// A packet's size in [0, 1] on a log scale of its bytes between the trace's smallest and
// largest message; clamped; 0.5 when all messages are equally large or the size is unknown.
double packet_scale(std::int64_t bytes, std::int64_t min_bytes, std::int64_t max_bytes);

// Where a packet is after `progress` (0 .. 1) of the way from a to b. It flies on a shallow arc
// bowed to the right of its direction, `bend` times the link's length off the line at the
// middle: a -> b and b -> a pass each other, and packets crossing at the centre of the circle
// (partners rank ^ 2 in recursive halving) do not pile up there.
Point packet_position(Point a, Point b, double progress, double bend);

}  // namespace distlab::viewer
