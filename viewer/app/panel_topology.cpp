// panel_topology.cpp — the ranks and the messages between them, as playback moves.
//
//   node    a rank ("r3"); it glows green while it computes (see working())
//   line    a pair of ranks that exchange messages somewhere in the trace (thin, dim); its
//           width grows with the bytes that have arrived on it so far
//   packet  a message on the wire, moving from sender to receiver; coloured by its chunk
//           (the Shards panel's colours), sized by its bytes on a log scale
//   window  a window access under way (schema 4: no message, the rank itself reads or writes a
//           symmetric window): a dashed arrow in the load or store colour, from the owner's window
//           to the rank that loads, or from the rank that stores to the owner's window, with a
//           window glyph at the owner and "load 4 KiB" beside it; an access of the rank's own
//           window is the glyph on its node
// Positions come from topology_layout.hpp (a circle, a grid past 16 ranks; servers in the middle
// and workers around them when the trace records roles, as lesson 05's parameter server does).
// With roles, every link is labelled with its bytes so far and every node with its role and
// traffic, a server's as a multiple of a worker's (N workers: N times); a trace whose phases are
// numbered ("1 pull" .. "5 update", phase_steps.hpp) gets a legend of its steps, lit while ranks
// are in them. A trace whose messages name their groups (lesson 14's dp, pp and tp) colours links
// and packets by group (group_color) with a legend of each group's bytes; one that records its
// mesh is laid out as the mesh: replicas side by side, a row per pipeline stage, the
// tensor-parallel ranks of a stage next to each other. One that records its ranks per node
// (the hierarchical all-reduce's nodes) draws each node as a box around its ranks.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "core/base/units.hpp"
#include "viewer/app/colors.hpp"
#include "viewer/app/panels.hpp"
#include "viewer/model/caption.hpp"
#include "viewer/model/phase_steps.hpp"
#include "viewer/model/real_run.hpp"
#include "viewer/model/stats.hpp"
#include "viewer/model/topology_layout.hpp"

namespace distlab::viewer {

namespace {

constexpr ImU32 kLinkIdle = IM_COL32(120, 130, 150, 70);
constexpr ImU32 kLinkUsed = IM_COL32(150, 175, 215, 170);
constexpr ImU32 kNodeBorder = IM_COL32(170, 180, 200, 255);
constexpr ImU32 kPacketBorder = IM_COL32(15, 15, 20, 220);
constexpr double kBend = 0.08;  // packets' arcs: off the line by this much of its length
// A mesh's links that pass over other ranks (dp across the replicas, pp past a stage) bow out
// this far, links and packets alike, so that they do not run through the nodes between.
constexpr double kMeshBend = 0.2;
constexpr int kTrailPoints = 12;
constexpr float kDash = 6.0f, kDashGap = 4.0f;  // a window access's dashed arrow, px
constexpr std::size_t kMostWindowLabels = 12;   // more under way at once: their arrows only

// An unordered pair of ranks that exchange messages, and what has arrived on it.
struct Pair {
  int a = 0, b = 0;        // a < b
  std::int64_t total = 0;  // both directions, whole trace
};

// Computed once per loaded model: it does not change after loading.
struct Layout {
  std::vector<Point> pos;
  double node = 0;  // node radius, unit square
  std::vector<Pair> pairs;
  std::map<std::pair<int, int>, std::size_t> pair_index;
  std::int64_t max_pair = 0;
  std::int64_t min_bytes = 0, max_bytes = 0;  // over messages with a known size
  std::map<std::uint32_t, int> chunks;        // buffer string id -> its declared chunk count
  std::vector<std::string> roles;             // otherData.roles when it names every rank
  bool star = false;                          // some rank is a server: the star layout
  int servers = 0;
  std::vector<PhaseStep> steps;           // numbered phases ("1 pull"), for the legend
  MeshDims mesh;                          // otherData.mesh when it covers every rank
  NodeLayout nodes;                       // otherData.ranks_per_node, when it forms nodes
  std::vector<GroupTraffic> groups;       // empty when no message names a group
  std::vector<std::uint32_t> pair_group;  // per pair: the group that carried most of its bytes
  // Traffic that has arrived, for the moment last drawn (recomputed when the moment moves).
  Clock clock = Clock::steps;
  double moment_key = -1;
  std::vector<std::int64_t> pair_so_far;
  std::vector<RankTraffic> rank_so_far;
};

Layout build_layout(const TraceModel& m) {
  Layout l;
  l.roles = parse_roles(m.info.extra_json("roles"));
  if (static_cast<int>(l.roles.size()) != m.world_size()) l.roles.clear();
  l.star = has_servers(l.roles);
  l.servers = static_cast<int>(std::count(l.roles.begin(), l.roles.end(), kServerRole));
  l.mesh = l.star ? MeshDims{} : parse_mesh(m.info.extra_json("mesh"), m.world_size());
  if (!l.star && !l.mesh.any()) l.nodes = node_layout(m.world_size(), m.info.ranks_per_node);
  l.pos = l.star          ? role_positions(l.roles)
          : l.mesh.any()  ? mesh_positions(l.mesh)
          : l.nodes.any() ? l.nodes.ranks
                          : rank_positions(m.world_size());
  l.steps = phase_steps(m);
  l.node = l.mesh.any()    ? mesh_node_radius(l.mesh)
           : l.nodes.any() ? l.nodes.node_radius
                           : node_radius(m.world_size());
  l.groups = group_totals(m);
  for (const LinkTraffic& t : link_totals(m)) {
    const auto key = std::minmax(t.src, t.dst);
    if (t.src == t.dst) continue;
    auto [it, fresh] = l.pair_index.emplace(key, l.pairs.size());
    if (fresh) l.pairs.push_back({key.first, key.second, 0});
    l.pairs[it->second].total += t.bytes;
  }
  for (const Pair& p : l.pairs) l.max_pair = std::max(l.max_pair, p.total);
  if (!l.groups.empty()) {
    const auto groups = pair_groups(m);
    for (const Pair& p : l.pairs) {
      const auto it = groups.find({p.a, p.b});
      l.pair_group.push_back(it == groups.end() ? 0 : it->second);
    }
  }
  for (const Message& msg : m.messages) {
    if (msg.bytes <= 0) continue;
    l.min_bytes = l.min_bytes == 0 ? msg.bytes : std::min(l.min_bytes, msg.bytes);
    l.max_bytes = std::max(l.max_bytes, msg.bytes);
  }
  for (std::uint32_t s = 0; s < m.strings.size(); ++s)
    for (const BufferInfo& b : m.info.buffers)
      if (m.strings[s] == b.name) l.chunks[s] = b.chunks;
  return l;
}

// How far a packet from a to b bows off the line (packet_position): a mesh's long links clear the
// nodes between; elsewhere no further than a node's size (a grid's row wrap).
double link_bend(const Layout& l, Point a, Point b) {
  const double len = std::hypot(b.x - a.x, b.y - a.y);
  if (len <= 0) return 0;
  if (l.mesh.any() && len > 3.5 * l.node) return kMeshBend;
  return std::min(kBend, 1.2 * l.node / len);
}

// Arrived traffic changes only when the moment does: on the steps clock, once per step.
void update_traffic(Layout& l, const TraceModel& m, const Moment& now) {
  const double key = now.clock == Clock::steps ? now.step : now.time_us;
  if (l.clock == now.clock && l.moment_key == key && !l.rank_so_far.empty()) return;
  l.clock = now.clock;
  l.moment_key = key;
  const auto links = link_traffic(m, now);
  l.rank_so_far = rank_totals(links, m.world_size());
  l.pair_so_far.assign(l.pairs.size(), 0);
  for (const LinkTraffic& t : links) {
    const auto it = l.pair_index.find(std::minmax(t.src, t.dst));
    if (it != l.pair_index.end()) l.pair_so_far[it->second] += t.bytes;
  }
}

// True when some send or recv span of `rank`, or a window access of it, starts in [begin, end).
bool messages_within(const TraceModel& m, int rank, double begin, double end) {
  for (std::uint32_t li : m.ranks[rank].lanes) {
    const Lane& lane = m.lanes[li];
    const auto first = m.spans.begin() + lane.span_begin, last = m.spans.begin() + lane.span_end;
    auto it =
        std::lower_bound(first, last, begin, [](const Span& s, double t) { return s.start < t; });
    for (; it != last && it->start < end; ++it)
      if (it->kind == SpanKind::send || it->kind == SpanKind::recv || it->kind == SpanKind::load ||
          it->kind == SpanKind::store)
        return true;
  }
  return false;
}

// Which ranks glow. computing() is true under any compute span, but lessons wrap each
// algorithm in a phase span ("ring", "scatter", "ping-pong 8 B") that would light every rank
// all the time. So a rank glows under a compute span with nothing nested in it and no message
// of its own inside it (the work itself: "add"), and, on the steps clock, while a message it
// reduces into its buffer lands (the last quarter of the beat): the reduction a step ends with.
std::vector<bool> working(const TraceModel& m, const Moment& now,
                          const std::vector<InFlight>& flying) {
  std::vector<bool> out = computing(m, now);
  for (std::size_t r = 0; r < out.size(); ++r) {
    if (!out[r]) continue;
    out[r] = false;
    for (std::uint32_t li : m.ranks[r].lanes) {
      const Lane& lane = m.lanes[li];
      const auto first = m.spans.begin() + lane.span_begin, last = m.spans.begin() + lane.span_end;
      // Spans nest strictly and are sorted by start: the last one starting at or before t is
      // the innermost that can cover t; any span after it starts past t.
      const auto it = std::upper_bound(first, last, now.time_us,
                                       [](double t, const Span& s) { return t < s.start; });
      if (it == first) continue;
      const Span& s = *std::prev(it);
      const bool leaf = it == last || it->start >= s.end();
      if (s.kind == SpanKind::compute && now.time_us < s.end() && leaf &&
          !messages_within(m, static_cast<int>(r), s.start, s.end())) {
        out[r] = true;
        break;
      }
    }
  }
  if (now.clock == Clock::steps)
    for (const InFlight& f : flying) {
      const Message& msg = m.messages[f.message];
      if (msg.apply == ApplyKind::reduce && f.progress >= 0.75 && msg.dst >= 0 &&
          msg.dst < static_cast<int>(out.size()))
        out[msg.dst] = true;
    }
  return out;
}

ImVec2 to_screen(Point p, ImVec2 origin, float side) {
  return ImVec2(origin.x + static_cast<float>(p.x) * side,
                origin.y + static_cast<float>(p.y) * side);
}

float distance(ImVec2 a, ImVec2 b) {
  return std::hypot(a.x - b.x, a.y - b.y);
}

int chunk_count(const Layout& l, std::uint32_t buffer) {
  const auto it = l.chunks.find(buffer);
  return it == l.chunks.end() ? 1 : it->second;
}

// A symmetric window: a pane with a cross, `half` from its centre to an edge.
void window_glyph(ImDrawList* dl, ImVec2 c, float half, ImU32 color) {
  const ImVec2 a(c.x - half, c.y - half), b(c.x + half, c.y + half);
  dl->AddRectFilled(a, b, IM_COL32(20, 22, 28, 230));
  dl->AddRect(a, b, color, 0.0f, 0, 1.5f);
  dl->AddLine(ImVec2(c.x, a.y), ImVec2(c.x, b.y), color);
  dl->AddLine(ImVec2(a.x, c.y), ImVec2(b.x, c.y), color);
}

// A dashed line from a to b with a head at b: a window access, which no message carries.
void dashed_arrow(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 color, float thickness) {
  const float len = distance(a, b);
  if (len < 1) return;
  const float ux = (b.x - a.x) / len, uy = (b.y - a.y) / len, head = 4 + 2 * thickness;
  for (float t = 0; t < len - head; t += kDash + kDashGap) {
    const float e = std::min(t + kDash, len - head);
    dl->AddLine(ImVec2(a.x + ux * t, a.y + uy * t), ImVec2(a.x + ux * e, a.y + uy * e), color,
                thickness);
  }
  const ImVec2 base(b.x - ux * head, b.y - uy * head);
  dl->AddTriangleFilled(b, ImVec2(base.x - uy * head * 0.5f, base.y + ux * head * 0.5f),
                        ImVec2(base.x + uy * head * 0.5f, base.y - ux * head * 0.5f), color);
}

// Text on a dark box centred at c.
void boxed_text(ImDrawList* dl, ImVec2 c, ImU32 color, const std::string& text) {
  const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
  const ImVec2 p(c.x - ts.x * 0.5f, c.y - ts.y * 0.5f);
  dl->AddRectFilled(ImVec2(p.x - 2, p.y), ImVec2(p.x + ts.x + 2, p.y + ts.y),
                    IM_COL32(20, 22, 28, 210));
  dl->AddText(p, color, text.c_str());
}

// "load 4 KiB", "store ? B".
std::string access_label(const WindowAccess& w) {
  return std::string(w.store ? "store " : "load ") +
         (w.bytes >= 0 ? format_bytes(static_cast<double>(w.bytes)) : std::string("? B"));
}

// The window accesses under way: each a dashed arrow between the rank and the window's owner
// (from the owner to a loader, from a storer to the owner), offset to the right of its direction
// so that a pair's two ways pass each other, the window glyph at the owner's end; an access of
// the rank's own window is the glyph on its node's rim. Labelled while few are under way.
// Returns the access under the mouse, -1 when none.
int draw_accesses(ImDrawList* dl, const TraceModel& m, const std::vector<InProgress>& under_way,
                  const std::vector<ImVec2>& at, float node_px, bool hovered, ImVec2 mouse) {
  const int n = static_cast<int>(at.size());
  const bool labels = under_way.size() <= kMostWindowLabels;
  const float glyph = std::max(3.0f, node_px * 0.38f);
  int hit = -1;
  for (const InProgress& p : under_way) {
    const WindowAccess& w = m.accesses[p.access];
    if (w.rank < 0 || w.owner < 0 || w.rank >= n || w.owner >= n) continue;
    const ImU32 color = w.store ? kWindowStore : kWindowLoad;
    if (w.owner == w.rank) {  // its own window: the glyph on its rim, up and to the right
      const ImVec2 c(at[w.rank].x + node_px * 0.8f, at[w.rank].y - node_px * 0.8f);
      window_glyph(dl, c, glyph, color);
      dl->AddCircle(at[w.rank], node_px + 2.5f, with_alpha(color, 0.8f), 0, 2.0f);
      if (labels)
        boxed_text(
            dl,
            ImVec2(c.x + glyph + 4 + ImGui::CalcTextSize(access_label(w).c_str()).x * 0.5f, c.y),
            color, access_label(w));
      if (hovered && distance(mouse, c) <= glyph + 2) hit = static_cast<int>(p.access);
      continue;
    }
    const ImVec2 o = at[w.owner], r = at[w.rank];
    const float len = distance(o, r);
    if (len < 1) continue;
    const float ux = (r.x - o.x) / len, uy = (r.y - o.y) / len;
    const float side = w.store ? -3.0f : 3.0f;  // to the right of the way the data goes
    const ImVec2 shift(-uy * side, ux * side);
    // From the owner's rim to the rank's, the window glyph just outside the owner.
    const ImVec2 window(o.x + ux * (node_px + glyph + 2) + shift.x,
                        o.y + uy * (node_px + glyph + 2) + shift.y);
    const ImVec2 near_rank(r.x - ux * (node_px + 2) + shift.x, r.y - uy * (node_px + 2) + shift.y);
    const ImVec2 from = w.store ? near_rank : window, to = w.store ? window : near_rank;
    dashed_arrow(dl, from, to, with_alpha(color, 0.45f), 1.5f);
    // How far it has gone: the part behind the moment bright.
    const float f = static_cast<float>(p.progress);
    const ImVec2 now(from.x + (to.x - from.x) * f, from.y + (to.y - from.y) * f);
    if (f > 0) dashed_arrow(dl, from, now, color, 2.5f);
    window_glyph(dl, window, glyph, color);
    // The label two thirds of the way to the rank: apart from the other way's, and from the
    // labels of links that cross this one in the middle.
    const ImVec2 mark(o.x + (r.x - o.x) * 0.68f + shift.x * 4,
                      o.y + (r.y - o.y) * 0.68f + shift.y * 4);
    if (labels) boxed_text(dl, mark, color, access_label(w));
    if (hovered && (distance(mouse, window) <= glyph + 2 || distance(mouse, now) <= 5))
      hit = static_cast<int>(p.access);
  }
  return hit;
}

void access_tooltip(const TraceModel& m, const WindowAccess& w) {
  ImGui::BeginTooltip();
  if (w.owner == w.rank)
    ImGui::Text("r%d %s its own window", w.rank, w.store ? "stores into" : "loads from");
  else
    ImGui::Text("r%d %s r%d's window", w.rank, w.store ? "stores into" : "loads from", w.owner);
  ImGui::Text("%s, no message: the rank %s the window itself",
              w.bytes >= 0 ? format_bytes(static_cast<double>(w.bytes)).c_str() : "? B",
              w.store ? "writes" : "reads");
  if (w.step >= 0) ImGui::Text("step %d", w.step);
  if (w.buffer) {
    const std::string_view b = m.str(w.buffer);
    if (w.chunk >= 0)
      ImGui::Text("%.*s chunks [%d, %d)", static_cast<int>(b.size()), b.data(), w.chunk,
                  w.chunk_end);
    else
      ImGui::Text("%.*s", static_cast<int>(b.size()), b.data());
  }
  ImGui::EndTooltip();
}

void message_tooltip(const TraceModel& m, const Message& msg) {
  ImGui::BeginTooltip();
  ImGui::Text("r%d -> r%d  %s", msg.src, msg.dst,
              msg.bytes >= 0 ? format_bytes(static_cast<double>(msg.bytes)).c_str() : "? B");
  if (msg.step >= 0) ImGui::Text("step %d", msg.step);
  if (msg.group) ImGui::Text("group %s", std::string(m.str(msg.group)).c_str());
  if (msg.buffer) {
    const std::string_view b = m.str(msg.buffer);
    if (msg.chunk >= 0)
      ImGui::Text("%.*s chunk %d%s%s", static_cast<int>(b.size()), b.data(), msg.chunk,
                  msg.chunk_end > msg.chunk + 1 ? ".." : "",
                  msg.chunk_end > msg.chunk + 1 ? std::to_string(msg.chunk_end - 1).c_str() : "");
    else
      ImGui::Text("%.*s (whole buffer)", static_cast<int>(b.size()), b.data());
  }
  if (msg.apply != ApplyKind::none)
    ImGui::Text("%s, %d rank%s' data", msg.apply == ApplyKind::reduce ? "reduce" : "copy",
                msg.contributions, msg.contributions == 1 ? "" : "s");
  ImGui::TextDisabled("click to select");
  ImGui::EndTooltip();
}

void rank_tooltip(const TraceModel& m, const Layout& l, int r, bool busy) {
  ImGui::BeginTooltip();
  ImGui::Text("r%d  %s", r, m.ranks[r].name.c_str());
  const RankTraffic t =
      r < static_cast<int>(l.rank_so_far.size()) ? l.rank_so_far[r] : RankTraffic{};
  ImGui::Text("sent so far      %s in %d message%s",
              format_bytes(static_cast<double>(t.bytes_sent)).c_str(), t.messages_sent,
              t.messages_sent == 1 ? "" : "s");
  ImGui::Text("received so far  %s in %d message%s",
              format_bytes(static_cast<double>(t.bytes_recv)).c_str(), t.messages_recv,
              t.messages_recv == 1 ? "" : "s");
  ImGui::TextDisabled(busy ? "computing (or reducing what just arrived)" : "not computing");
  ImGui::EndTooltip();
}

// One legend entry: a swatch drawn by `swatch` in a square the size of the text, then text;
// on this line when it fits, else on the next.
template <class Swatch>
void legend_item(const char* text, bool first, Swatch swatch) {
  const float h = ImGui::GetTextLineHeight();
  if (!first) {
    ImGui::SameLine(0, 14);
    if (ImGui::GetContentRegionAvail().x < h + 4 + ImGui::CalcTextSize(text).x) ImGui::NewLine();
  }
  const ImVec2 p = ImGui::GetCursorScreenPos();
  swatch(ImGui::GetWindowDrawList(), ImVec2(p.x + h * 0.5f, p.y + h * 0.5f), h * 0.5f);
  ImGui::Dummy(ImVec2(h, h));
  ImGui::SameLine(0, 4);
  ImGui::TextDisabled("%s", text);
}

void legend(const TraceModel& m, const Layout& l) {
  legend_item("computing", true, [](ImDrawList* d, ImVec2 c, float r) {
    d->AddCircleFilled(c, r * 0.9f, with_alpha(kRankGlow, 0.35f));
    d->AddCircle(c, r * 0.6f, kRankGlow, 0, 2.0f);
  });
  const bool messages = !m.messages.empty() || m.accesses.empty();  // a window-only run: none
  if (l.groups.empty() && messages)
    legend_item("message: colour = chunk, size = bytes", false,
                [](ImDrawList* d, ImVec2 c, float r) {
                  d->AddCircleFilled(c, r * 0.6f, chunk_color(0, 4));
                });
  for (const GroupTraffic& g : l.groups) {  // colour = group, with its bytes over the run
    const std::string_view name = g.group ? m.str(g.group) : std::string_view("world");
    const std::string text = std::string(name) + " " + format_bytes(static_cast<double>(g.bytes));
    const ImU32 color = group_color(m.str(g.group));
    legend_item(text.c_str(), false, [color](ImDrawList* d, ImVec2 c, float r) {
      d->AddCircleFilled(c, r * 0.6f, color);
    });
  }
  if (messages)
    legend_item("width = bytes arrived", false, [](ImDrawList* d, ImVec2 c, float r) {
      d->AddLine(ImVec2(c.x - r, c.y), ImVec2(c.x + r, c.y), kLinkUsed, 3.0f);
    });
  if (m.accesses.empty()) return;
  for (const bool store : {false, true}) {
    const ImU32 color = store ? kWindowStore : kWindowLoad;
    legend_item(store ? "window store (no message)" : "window load (no message)", false,
                [color, store](ImDrawList* d, ImVec2 c, float r) {
                  const ImVec2 a(c.x - r, c.y), b(c.x + r * 0.2f, c.y);
                  dashed_arrow(d, store ? a : b, store ? b : a, color, 1.5f);
                  window_glyph(d, ImVec2(c.x + r * 0.55f, c.y), r * 0.45f, color);
                });
  }
}

// The algorithm's numbered steps as a row of labels: lit while some rank is in the step, plain
// once a rank has been through it, dim before.
void step_legend(const Layout& l, const Moment& now) {
  const auto states = phase_states(l.steps, now);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  for (std::size_t i = 0; i < l.steps.size(); ++i) {
    const char* text = l.steps[i].name.c_str();
    const ImVec2 ts = ImGui::CalcTextSize(text);
    if (i > 0) {
      ImGui::SameLine(0, 8);
      if (ImGui::GetContentRegionAvail().x < ts.x + 10) ImGui::NewLine();
    }
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const bool lit = !states[i].ranks.empty();
    const ImVec2 a(p.x, p.y), b(p.x + ts.x + 10, p.y + ts.y + 2);
    if (lit) dl->AddRectFilled(a, b, with_alpha(kRankGlow, 0.75f), 4.0f);
    dl->AddRect(a, b, lit ? kRankGlow : kDim, 4.0f);
    dl->AddText(ImVec2(p.x + 5, p.y + 1),
                lit                ? IM_COL32(10, 20, 10, 255)
                : states[i].passed ? kText
                                   : kDim,
                text);
    ImGui::Dummy(ImVec2(ts.x + 10, ts.y + 2));
    if (ImGui::IsItemHovered()) {
      std::string who;
      for (int r : states[i].ranks) who += (who.empty() ? "r" : ", r") + std::to_string(r);
      ImGui::SetTooltip("%s: %s", text, who.empty() ? "no rank now" : who.c_str());
    }
  }
}

// A mesh's captions: "dp k" over each replica's block, "pp s" left of each stage's row.
void mesh_labels(ImDrawList* dl, const Layout& l, const std::vector<ImVec2>& at, float node_px) {
  const MeshDims& m = l.mesh;
  const float h = ImGui::GetTextLineHeight();
  for (int dp = 0; dp < m.dp; ++dp) {
    const int first = dp * m.pp * m.tp, last = first + m.tp - 1;  // stage 0's row of the block
    char text[24];
    std::snprintf(text, sizeof text, "dp %d", dp);
    const float x = (at[first].x + at[last].x) * 0.5f - ImGui::CalcTextSize(text).x * 0.5f;
    dl->AddText(ImVec2(x, at[first].y - node_px - h - 4), group_color("dp"), text);
  }
  for (int pp = 0; pp < m.pp; ++pp) {
    char text[24];
    std::snprintf(text, sizeof text, "pp %d", pp);
    const ImVec2 first = at[static_cast<std::size_t>(pp * m.tp)];
    dl->AddText(ImVec2(first.x - node_px - ImGui::CalcTextSize(text).x - 6, first.y - h * 0.5f),
                group_color("pp"), text);
  }
}

// Each node's box, behind its ranks and links, labelled "node 1: r4-r7" above it.
void node_boxes(ImDrawList* dl, const Layout& l, ImVec2 origin, float side) {
  for (std::size_t k = 0; k < l.nodes.nodes.size(); ++k) {
    const NodeBox& b = l.nodes.nodes[k];
    const ImVec2 a = to_screen({b.x0, b.y0}, origin, side),
                 z = to_screen({b.x1, b.y1}, origin, side);
    dl->AddRectFilled(a, z, kNodeBoxFill, 6.0f);
    dl->AddRect(a, z, kNodeBoxEdge, 6.0f);
    char text[48];
    std::snprintf(text, sizeof text, "node %zu: r%d-r%d", k, b.first, b.last);
    // Above the box, clear of the rank at the top of its circle.
    dl->AddText(ImVec2(a.x + 4, a.y - ImGui::GetTextLineHeight() - 1), kNodeBoxEdge, text);
  }
}

// Bytes a rank has moved so far (sent + received).
std::int64_t bytes_moved(const Layout& l, int r) {
  if (r < 0 || r >= static_cast<int>(l.rank_so_far.size())) return 0;
  return l.rank_so_far[r].bytes_sent + l.rank_so_far[r].bytes_recv;
}

// A real run (real_run.hpp): under each rank, how it came to the step's collective: how long it
// waited for the last rank, or, on the straggler, that the others waited for it; and its time in
// the call.
void call_labels(PanelContext& ctx, ImDrawList* dl, const std::vector<ImVec2>& at, float node_px) {
  const TraceModel& m = ctx.model();
  const RealRun& run = ctx.doc.derived<RealRun>(analyze_real_run);
  const int k = caption_beat(m, ctx.now) - 1;
  if (k < 0 || k >= static_cast<int>(run.calls.size())) return;
  const CallStats& c = run.calls[static_cast<std::size_t>(k)];
  for (std::size_t r = 0; r < at.size() && r < c.wait.size(); ++r) {
    if (c.wait[r] < 0) continue;
    const bool last = c.straggler && static_cast<int>(r) == c.last_rank;
    const std::string text = (last ? std::string("last in: the others wait")
                                   : "waits " + format_seconds(c.wait[r] * 1e-6)) +
                             "\nin the call " + format_seconds(c.dur[r] * 1e-6);
    const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
    const ImVec2 p(at[r].x - ts.x * 0.5f, at[r].y + node_px * 1.35f + 2);
    dl->AddRectFilled(ImVec2(p.x - 2, p.y), ImVec2(p.x + ts.x + 2, p.y + ts.y),
                      IM_COL32(20, 22, 28, 220));
    dl->AddText(p, last ? IM_COL32(255, 107, 107, 255) : kDim, text.c_str());
    if (last) dl->AddCircle(at[r], node_px * 1.5f, IM_COL32(255, 107, 107, 255), 0, 2.5f);
  }
}

}  // namespace

void draw_topology(PanelContext& ctx) {
  const TraceModel& m = ctx.model();
  const int n = m.world_size();
  if (n == 0) {
    ImGui::TextDisabled("this trace has no ranks");
    return;
  }
  Layout& l = ctx.doc.derived<Layout>(build_layout);
  update_traffic(l, m, ctx.now);
  const auto flying = in_flight(m, ctx.now);
  const auto busy = working(m, ctx.now, flying);
  const auto under_way = accesses_in_progress(m, ctx.now);

  std::int64_t moved = 0;
  for (const RankTraffic& t : l.rank_so_far) moved += t.bytes_recv;
  if (ctx.now.clock == Clock::steps && std::fabs(ctx.now.beat - std::round(ctx.now.beat)) < 1e-6)
    ImGui::Text("step %d of %d", static_cast<int>(std::round(ctx.now.beat)), last_beat(m));
  else if (ctx.now.clock == Clock::steps)
    ImGui::Text("step %.2f of %d", ctx.now.beat, last_beat(m));
  else
    ImGui::Text("t = %s", format_seconds((ctx.now.time_us - m.t_begin) * 1e-6).c_str());
  ImGui::SameLine();
  ImGui::TextDisabled("\u00b7 %d rank%s \u00b7 %zu in flight \u00b7 %s arrived", n,
                      n == 1 ? "" : "s", flying.size(),
                      format_bytes(static_cast<double>(moved)).c_str());
  if (!m.accesses.empty()) {
    ImGui::SameLine();
    ImGui::TextDisabled("\u00b7 %zu window access%s", under_way.size(),
                        under_way.size() == 1 ? "" : "es");
  }
  draw_caption(ctx);  // what this step's messages do (panel_caption.cpp)

  legend(m, l);
  if (!l.steps.empty()) step_legend(l, ctx.now);

  // The canvas: the largest square that fits below the legend.
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float side = std::max(40.0f, std::min(avail.x, avail.y));
  const ImVec2 corner = ImGui::GetCursorScreenPos();
  const ImVec2 origin(corner.x + std::max(0.0f, (avail.x - side) * 0.5f), corner.y);
  ImGui::InvisibleButton("##topology", ImVec2(std::max(avail.x, side), side));
  const bool hovered = ImGui::IsItemHovered();
  const bool clicked = ImGui::IsItemClicked();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  ImDrawList* dl = ImGui::GetWindowDrawList();

  const float node_px = std::clamp(static_cast<float>(l.node) * side, 3.0f, 22.0f);
  const float thin = n > 32 ? 0.75f : 1.0f;
  std::vector<ImVec2> at(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) at[r] = to_screen(l.pos[r], origin, side);
  if (l.nodes.any()) node_boxes(dl, l, origin, side);

  // Links: every pair that ever talks, then the bytes that have arrived on it so far.
  for (std::size_t i = 0; i < l.pairs.size(); ++i) {
    const Pair& p = l.pairs[i];
    const bool grouped = i < l.pair_group.size();
    const ImU32 group = grouped ? group_color(m.str(l.pair_group[i])) : kLinkUsed;
    // a mesh's long link is the arc its packets fly (link_bend); every other one straight
    const double bend = l.mesh.any() ? link_bend(l, l.pos[p.a], l.pos[p.b]) : 0;
    ImVec2 arc[kTrailPoints + 1];
    for (int k = 0; k <= kTrailPoints; ++k)
      arc[k] =
          bend > kBend
              ? to_screen(packet_position(l.pos[p.a], l.pos[p.b], double(k) / kTrailPoints, bend),
                          origin, side)
              : ImVec2(at[p.a].x + (at[p.b].x - at[p.a].x) * k / kTrailPoints,
                       at[p.a].y + (at[p.b].y - at[p.a].y) * k / kTrailPoints);
    dl->AddPolyline(arc, kTrailPoints + 1, grouped ? with_alpha(group, 0.3f) : kLinkIdle, 0, thin);
    if (l.pair_so_far[i] > 0 && l.max_pair > 0) {
      const float w = thin + (node_px * 0.5f) * std::sqrt(static_cast<float>(l.pair_so_far[i]) /
                                                          static_cast<float>(l.max_pair));
      dl->AddPolyline(arc, kTrailPoints + 1, grouped ? with_alpha(group, 0.7f) : kLinkUsed, 0, w);
    }
  }
  if (l.mesh.any()) mesh_labels(dl, l, at, node_px);
  if (l.star)  // the bytes each link has carried so far, along it
    for (std::size_t i = 0; i < l.pairs.size(); ++i) {
      if (l.pair_so_far[i] <= 0) continue;
      const Pair& p = l.pairs[i];
      const std::string text = format_bytes(static_cast<double>(l.pair_so_far[i]));
      const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
      // nearer the worker than the middle, clear of the server's own label
      const bool from_a = l.roles[p.a] == kServerRole || l.roles[p.b] != kServerRole;
      const ImVec2 a = from_a ? at[p.a] : at[p.b], b = from_a ? at[p.b] : at[p.a];
      // (several servers: nearer the middle, where their links to one worker are apart)
      const float f = l.roles[p.a] == l.roles[p.b] ? 0.5f : l.servers == 1 ? 0.66f : 0.42f;
      const ImVec2 c(a.x + (b.x - a.x) * f, a.y + (b.y - a.y) * f);
      dl->AddRectFilled(ImVec2(c.x - ts.x * 0.5f - 2, c.y - ts.y * 0.5f),
                        ImVec2(c.x + ts.x * 0.5f + 2, c.y + ts.y * 0.5f),
                        IM_COL32(20, 22, 28, 200));
      dl->AddText(ImVec2(c.x - ts.x * 0.5f, c.y - ts.y * 0.5f), kLinkUsed, text.c_str());
    }
  const int selected = ctx.doc.selection.message;
  if (selected >= 0 && selected < static_cast<int>(m.messages.size())) {
    const Message& s = m.messages[selected];
    if (s.src >= 0 && s.dst >= 0 && s.src < n && s.dst < n)
      dl->AddLine(at[s.src], at[s.dst], kHighlight, 2.0f);
  }

  // Packets, to the right of their direction so that opposite ones pass each other.
  const float r_min = std::max(2.0f, node_px * 0.28f), r_max = std::max(3.5f, node_px * 0.6f);
  int hovered_packet = -1;
  for (const InFlight& f : flying) {
    const Message& msg = m.messages[f.message];
    if (msg.src < 0 || msg.dst < 0 || msg.src >= n || msg.dst >= n) continue;
    const ImU32 color = l.groups.empty() ? chunk_color(msg.chunk, chunk_count(l, msg.buffer))
                                         : group_color(m.str(msg.group));
    // long links (a grid's row wrap) bow no further than a node's size off their line
    const Point a = l.pos[msg.src], b = l.pos[msg.dst];
    const double bend = link_bend(l, a, b);
    // its trail from the sender: which link it is on, and which way it goes
    ImVec2 trail[kTrailPoints + 1];
    for (int k = 0; k <= kTrailPoints; ++k)
      trail[k] =
          to_screen(packet_position(a, b, f.progress * k / kTrailPoints, bend), origin, side);
    dl->AddPolyline(trail, kTrailPoints + 1, with_alpha(color, 0.45f), 0, 2.0f);
    const ImVec2 p = trail[kTrailPoints];
    const float rad = r_min + (r_max - r_min) * static_cast<float>(packet_scale(
                                                    msg.bytes, l.min_bytes, l.max_bytes));
    dl->AddCircleFilled(p, rad + 1.0f, kPacketBorder);
    dl->AddCircleFilled(p, rad, color);
    if (static_cast<int>(f.message) == selected) dl->AddCircle(p, rad + 3.0f, kHighlight, 0, 2.0f);
    if (hovered && distance(mouse, p) <= rad + 2.0f) hovered_packet = static_cast<int>(f.message);
  }

  // Ranks on top.
  int hovered_rank = -1;
  for (int r = 0; r < n; ++r) {
    const bool glow = busy[r];
    if (glow) {
      dl->AddCircleFilled(at[r], node_px * 1.7f, with_alpha(kRankGlow, 0.18f));
      dl->AddCircleFilled(at[r], node_px * 1.35f, with_alpha(kRankGlow, 0.35f));
    }
    dl->AddCircleFilled(at[r], node_px, kRankFill);
    dl->AddCircle(at[r], node_px, glow ? kRankGlow : kNodeBorder, 0, glow ? 2.0f : 1.0f);
    if (hovered && distance(mouse, at[r]) <= node_px + 2.0f) hovered_rank = r;

    char label[16];
    std::snprintf(label, sizeof label, "r%d", r);
    const ImVec2 ts = ImGui::CalcTextSize(label);
    if (ts.x <= node_px * 1.8f) {  // inside the node
      dl->AddText(ImVec2(at[r].x - ts.x * 0.5f, at[r].y - ts.y * 0.5f), kText, label);
    } else if (l.mesh.any()) {  // under the node: a mesh's neighbours sit in rows
      dl->AddText(ImVec2(at[r].x - ts.x * 0.5f, at[r].y + node_px + 2), kText, label);
    } else if (n <= kCircleMaxRanks) {  // outside, along the spoke from the centre
      const ImVec2 c(origin.x + side * 0.5f, origin.y + side * 0.5f);
      const float d = std::max(1.0f, distance(at[r], c));
      const float k = node_px + 4 + std::max(ts.x, ts.y) * 0.5f;
      dl->AddText(ImVec2(at[r].x + (at[r].x - c.x) / d * k - ts.x * 0.5f,
                         at[r].y + (at[r].y - c.y) / d * k - ts.y * 0.5f),
                  kText, label);
    }
  }

  if (l.star) {  // role and traffic beside each node; a server's as a multiple of a worker's
    std::int64_t worker_sum = 0;
    int workers = 0;
    for (int r = 0; r < n; ++r)
      if (l.roles[r] != kServerRole) worker_sum += bytes_moved(l, r), ++workers;
    const double worker_mean = workers ? double(worker_sum) / workers : 0.0;
    for (int r = 0; r < n; ++r) {
      const bool server = l.roles[r] == kServerRole;
      std::string text = l.roles[r] + " " + format_bytes(static_cast<double>(bytes_moved(l, r)));
      if (server && worker_mean > 0) {
        char times[32];
        std::snprintf(times, sizeof times, "\n= %.1fx a worker",
                      double(bytes_moved(l, r)) / worker_mean);
        text += times;
      }
      const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
      // a server's under it; a worker's beside it, away from the centre (clear of its link),
      // else under it where the panel has no room at the side
      const float below = at[r].y + node_px * 1.35f + 2, k = node_px * 1.35f + 4;
      const float left = corner.x, right = corner.x + std::max(avail.x, side);
      ImVec2 p(at[r].x - ts.x * 0.5f, below);
      if (!server) {
        p = at[r].x >= origin.x + side * 0.45f ? ImVec2(at[r].x + k, at[r].y - ts.y * 0.5f)
                                               : ImVec2(at[r].x - k - ts.x, at[r].y - ts.y * 0.5f);
        if (p.x < left || p.x + ts.x > right) p = ImVec2(at[r].x - ts.x * 0.5f, below);
      }
      p.x = std::clamp(p.x, left, std::max(left, right - ts.x));
      if (server)
        dl->AddRectFilled(ImVec2(p.x - 2, p.y), ImVec2(p.x + ts.x + 2, p.y + ts.y),
                          IM_COL32(20, 22, 28, 220));
      dl->AddText(p, server ? kHighlight : kDim, text.c_str());
    }
  }

  if (m.info.source == "pytorch") call_labels(ctx, dl, at, node_px);
  const int hovered_access = draw_accesses(dl, m, under_way, at, node_px, hovered, mouse);

  if (hovered_access >= 0) {
    access_tooltip(m, m.accesses[static_cast<std::size_t>(hovered_access)]);
  } else if (hovered_rank >= 0) {
    rank_tooltip(m, l, hovered_rank, busy[hovered_rank]);
  } else if (hovered_packet >= 0) {
    message_tooltip(m, m.messages[hovered_packet]);
    if (clicked) ctx.doc.selection.message = hovered_packet;
  }
}

}  // namespace distlab::viewer
