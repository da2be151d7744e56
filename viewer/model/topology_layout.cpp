// topology_layout.cpp — rank and packet positions in a unit square (topology_layout.hpp).
#include "viewer/model/topology_layout.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace distlab::viewer {

namespace {

constexpr double kCircleRadius = 0.40;  // leaves 0.1 on each side for the labels
constexpr double kGridMargin = 0.06;
constexpr double kServerRadius = 0.12;  // several servers: a small circle at the centre
constexpr double kMeshGap = 0.5;        // between two replicas' blocks, in cells

int grid_columns(int ranks) {
  return static_cast<int>(std::ceil(std::sqrt(static_cast<double>(ranks))));
}

}  // namespace

std::vector<Point> rank_positions(int ranks) {
  std::vector<Point> out;
  if (ranks <= 0) return out;
  out.reserve(static_cast<std::size_t>(ranks));
  if (ranks == 1) return {{0.5, 0.5}};
  if (ranks <= kCircleMaxRanks) {
    for (int r = 0; r < ranks; ++r) {
      // angle 0 points up; y grows downwards on screen, so +sin is clockwise
      const double a = 2.0 * std::numbers::pi * r / ranks;
      out.push_back({0.5 + kCircleRadius * std::sin(a), 0.5 - kCircleRadius * std::cos(a)});
    }
    return out;
  }
  const int cols = grid_columns(ranks);
  const int rows = (ranks + cols - 1) / cols;
  const double cell = (1.0 - 2 * kGridMargin) / std::max(cols, rows);
  // centre the grid when it has fewer rows than columns
  const double x0 = 0.5 - cell * cols / 2, y0 = 0.5 - cell * rows / 2;
  for (int r = 0; r < ranks; ++r)
    out.push_back({x0 + cell * (r % cols + 0.5), y0 + cell * (r / cols + 0.5)});
  return out;
}

std::vector<std::string> parse_roles(std::string_view json) {
  std::vector<std::string> out;
  if (json.empty()) return out;
  simdjson::dom::parser parser;
  simdjson::dom::array roles;
  if (parser.parse(json.data(), json.size()).get_array().get(roles)) return out;
  for (simdjson::dom::element e : roles) {
    std::string_view role;
    if (e.get_string().get(role)) return {};
    out.emplace_back(role);
  }
  return out;
}

bool has_servers(const std::vector<std::string>& roles) {
  return std::find(roles.begin(), roles.end(), kServerRole) != roles.end();
}

std::vector<Point> role_positions(const std::vector<std::string>& roles) {
  const int n = static_cast<int>(roles.size());
  if (!has_servers(roles)) return rank_positions(n);
  const int servers = static_cast<int>(std::count(roles.begin(), roles.end(), kServerRole));
  const int workers = n - servers;
  std::vector<Point> out(static_cast<std::size_t>(n));
  int s = 0, w = 0;
  for (int r = 0; r < n; ++r) {
    const bool server = roles[r] == kServerRole;
    const int i = server ? s++ : w++;
    const int of = server ? servers : workers;
    const double radius = server ? (servers == 1 ? 0.0 : kServerRadius) : kCircleRadius;
    // angle 0 points up, clockwise; the inner circle turned by half a step so that its servers
    // sit between the spokes of the first workers
    const double a = 2.0 * std::numbers::pi * (i + (server ? 0.5 : 0.0)) / std::max(1, of);
    out[r] = {0.5 + radius * std::sin(a), 0.5 - radius * std::cos(a)};
  }
  return out;
}

MeshDims parse_mesh(std::string_view json, int ranks) {
  if (json.empty()) return {};
  simdjson::dom::parser parser;
  simdjson::dom::object mesh;
  if (parser.parse(json.data(), json.size()).get_object().get(mesh)) return {};
  MeshDims out;
  for (auto [key, value] : mesh) {
    std::int64_t v = 0;
    if (value.get_int64().get(v) || v < 1 || v > (1 << 16)) continue;
    if (key == "dp") out.dp = static_cast<int>(v);
    if (key == "pp") out.pp = static_cast<int>(v);
    if (key == "tp") out.tp = static_cast<int>(v);
  }
  if (!out.any() || std::int64_t{out.dp} * out.pp * out.tp != ranks) return {};
  return out;
}

namespace {
// The mesh's cell, and the grid's corner, in the unit square.
struct MeshGrid {
  double cell = 0, x0 = 0, y0 = 0;
};
MeshGrid mesh_grid(const MeshDims& m) {
  const double cols = m.dp * m.tp + (m.dp - 1) * kMeshGap;
  const double cell = (1.0 - 2 * kGridMargin) / std::max(cols, double(m.pp));
  return {cell, 0.5 - cell * cols / 2, 0.5 - cell * m.pp / 2};
}
}  // namespace

std::vector<Point> mesh_positions(const MeshDims& m) {
  std::vector<Point> out;
  if (!m.any()) return out;
  const MeshGrid g = mesh_grid(m);
  out.reserve(static_cast<std::size_t>(m.size()));
  for (int r = 0; r < m.size(); ++r) {
    const int tp = r % m.tp, pp = r / m.tp % m.pp, dp = r / (m.tp * m.pp);
    out.push_back(
        {g.x0 + g.cell * (dp * (m.tp + kMeshGap) + tp + 0.5), g.y0 + g.cell * (pp + 0.5)});
  }
  return out;
}

double mesh_node_radius(const MeshDims& m) {
  return m.any() ? std::min(0.06, 0.3 * mesh_grid(m).cell) : node_radius(0);
}

NodeLayout node_layout(int n, int g) {
  NodeLayout out;
  if (g <= 0 || g >= n || n % g != 0) return out;
  const int nodes = n / g;
  const int cols = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(nodes))));
  const int rows = (nodes + cols - 1) / cols;
  const double cell = (1.0 - 2 * kGridMargin) / std::max(cols, rows);
  const double x0 = 0.5 - cell * cols / 2, y0 = 0.5 - cell * rows / 2;
  const double pad = 0.1 * cell;  // between neighbouring boxes: room for a box's label above it
  // The ranks of a node on a circle of its box, leaving room for their labels; a node of two
  // side by side.
  const double radius = 0.26 * cell;
  const double spacing = g == 1 ? cell : 2.0 * radius * std::sin(std::numbers::pi / std::max(g, 2));
  out.node_radius = std::min({0.06, 0.3 * spacing, 0.12 * cell});
  for (int k = 0; k < nodes; ++k) {
    const double bx = x0 + cell * (k % cols), by = y0 + cell * (k / cols);
    out.nodes.push_back(
        {bx + pad, by + pad, bx + cell - pad, by + cell - pad, k * g, k * g + g - 1});
    const double cx = bx + cell / 2, cy = by + cell / 2;
    for (int i = 0; i < g; ++i) {
      const double a = 2.0 * std::numbers::pi * i / g;
      out.ranks.push_back({cx + radius * std::sin(a), cy - radius * std::cos(a)});
    }
  }
  return out;
}

double node_radius(int ranks) {
  if (ranks <= 1) return 0.06;
  const double spacing = ranks <= kCircleMaxRanks
                             ? 2.0 * kCircleRadius * std::sin(std::numbers::pi / ranks)
                             : (1.0 - 2 * kGridMargin) / grid_columns(ranks);
  return std::min(0.06, 0.3 * spacing);
}

double packet_scale(std::int64_t bytes, std::int64_t min_bytes, std::int64_t max_bytes) {
  if (bytes <= 0 || min_bytes <= 0 || max_bytes <= min_bytes) return 0.5;
  const double lo = std::log2(static_cast<double>(min_bytes)),
               hi = std::log2(static_cast<double>(max_bytes));
  return std::clamp((std::log2(static_cast<double>(bytes)) - lo) / (hi - lo), 0.0, 1.0);
}

Point packet_position(Point a, Point b, double progress, double bend) {
  const double f = std::clamp(progress, 0.0, 1.0);
  const double dx = b.x - a.x, dy = b.y - a.y;
  // (-dy, dx) is the right-hand normal, as long as the link, with y pointing down; 4 f (1 - f)
  // is 0 at the ends and 1 in the middle
  const double off = bend * 4 * f * (1 - f);
  return {a.x + dx * f - dy * off, a.y + dy * f + dx * off};
}

}  // namespace distlab::viewer
