// panel_timeline.cpp — the Timeline panel: every rank's lanes on one time axis.
//
//   [fit] | ruler: times from the trace start; click or drag on it to seek playback
//   rank 0      header row (click the name to fold the rank)
//     compute   one row per nesting depth: phase, then the adds inside it
//     send      sends; a flow arrow from each send to where it is delivered (coloured by chunk,
//               or by group when the messages name groups: lesson 14's dp, pp, tp, whose send
//               and recv spans take the group's colour too)
//     recv      receives, and a thin grey row of deliver spans where the arrows land
//   rank 1 ...
// Window accesses (schema 4: a rank's loads from and stores to symmetric windows, no message)
// are slices of their own colours, loads on the recv lane and stores on the send lane, with no
// arrow; a trace that has any gets a legend of the span colours under the ruler.
// When nonblocking operations run beside forward and backward phases (lesson 16), each rank's
// header says how much of their communication so far ran under those phases, and those parts of
// the send and recv spans are hatched: hidden under compute, against the plain (exposed) rest
// (viewer/model/overlap.hpp).
// Wheel zooms around the cursor, dragging pans (and scrolls the ranks), a click selects a span
// and its message; a click on a merged block zooms onto it. The red line is the playback moment.
// What each lane shows at this zoom (culling, merging of spans under 3 px) is decided by
// viewer/model/timeline_lod, without ImGui; this file only lays the rows out and draws.
//
// Sections: constants and geometry / ruler / tooltips / the steps of a frame / draw_timeline.
#include <imgui.h>
#include <imgui_internal.h>  // SetItemUsingMouseWheel (1.86): the wheel zooms, not scrolls

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "core/base/units.hpp"
#include "viewer/app/colors.hpp"
#include "viewer/app/panels.hpp"
#include "viewer/model/overlap.hpp"
#include "viewer/model/playback.hpp"
#include "viewer/model/timeline_lod.hpp"

namespace distlab::viewer {

namespace {

constexpr std::size_t kMaxFlows = 1500;  // more in view: only the selected message's arrow
constexpr double kWheelZoom = 0.8;       // view width per wheel notch
constexpr double kMinViewUs = 0.01;      // 10 ns across the whole canvas is as deep as it goes
constexpr float kClickSlopSq = 16.0f;    // a press that moved less than 4 px is a click
constexpr float kThinRow = 0.35f;        // a row of deliver spans, in rows

constexpr ImU32 kRulerBg = IM_COL32(34, 37, 45, 255);
constexpr ImU32 kHeaderBg = IM_COL32(50, 57, 74, 255);
constexpr ImU32 kLaneBg[2] = {IM_COL32(26, 28, 34, 255), IM_COL32(31, 34, 41, 255)};
constexpr ImU32 kMerged = IM_COL32(128, 132, 150, 230);
constexpr ImU32 kSpanText = IM_COL32(12, 12, 12, 255);
constexpr ImU32 kNowLine = IM_COL32(255, 85, 85, 255);
constexpr ImU32 kStepLine = IM_COL32(255, 255, 255, 30);
constexpr ImU32 kValueLine = IM_COL32(240, 200, 80, 255);
constexpr ImU32 kTick = IM_COL32(150, 155, 170, 255);
constexpr float kHatchStep = 5.0f;  // px between the lines of the hidden communication's hatch

ImU32 darker(ImU32 c, float f) {
  auto ch = [&](int shift) {
    return static_cast<ImU32>(static_cast<float>((c >> shift) & 0xFF) * f) << shift;
  };
  return ch(IM_COL32_R_SHIFT) | ch(IM_COL32_G_SHIFT) | ch(IM_COL32_B_SHIFT) | (c & IM_COL32_A_MASK);
}

// Row heights for this frame: a depth row holds one line of text; a row of deliver spans only.
struct Rows {
  float row = 18, thin = 6, header = 18, gap = 3;
  float height(const TimelineIndex& index, std::uint32_t lane, int depth) const {
    return index.deliver_row(lane, depth) ? thin : row;
  }
  float lane_height(const TimelineIndex& index, std::uint32_t lane) const {
    float h = 0;
    for (int d = 0; d < index.lane_depth(lane); ++d) h += height(index, lane, d);
    return std::max(h, row);  // a lane with no spans keeps one empty row
  }
  float depth_offset(const TimelineIndex& index, std::uint32_t lane, int depth) const {
    float h = 0;
    for (int d = 0; d < depth; ++d) h += height(index, lane, d);
    return h;
  }
};

// One index per document (Document::derived), built on first sight (a few ms per 100k spans).
TimelineIndex build_index(const TraceModel& model) {
  return TimelineIndex(model);
}

int chunks_of(const TraceModel& m, std::uint32_t buffer) {
  const std::string_view name = m.str(buffer);
  for (const auto& b : m.info.buffers)
    if (b.name == name) return b.chunks;
  return 1;
}

// ---- ruler ----------------------------------------------------------------------------------

// Ticks with labels (times from the trace start), minor ticks between them, and the playback
// moment as a red marker.
void draw_ruler(ImDrawList* dl, const TraceModel& m, const ViewWindow& view, ImVec2 p0, ImVec2 p1,
                double now_us) {
  dl->AddRectFilled(p0, p1, kRulerBg);
  // Labels must not touch: space the ticks by the widest label this view can have.
  RulerTicks ticks = ruler_ticks(view, m.t_begin, 80.0f);
  const float label_w =
      ImGui::CalcTextSize(tick_label(ticks, view.t1, m.t_begin).c_str()).x + 24.0f;
  if (label_w > 80.0f) ticks = ruler_ticks(view, m.t_begin, label_w);
  const double mantissa = ticks.step / std::pow(10.0, std::floor(std::log10(ticks.step) + 1e-9));
  const double minor = ticks.step / (mantissa > 1.5 && mantissa < 3 ? 2 : 5);
  const float h = p1.y - p0.y;
  for (int k = 0; k < 2000; ++k) {  // by index: far from zero, t += minor could stand still
    const double t = ticks.first - ticks.step + k * minor;
    if (t > view.t1) break;
    const float x = p0.x + static_cast<float>(view.x(t));
    if (x >= p0.x)
      dl->AddLine(ImVec2(x, p1.y - h * 0.22f), ImVec2(x, p1.y), with_alpha(kTick, 0.5f));
  }
  for (int k = 0;; ++k) {
    const double t = ticks.first + k * ticks.step;
    if (t > view.t1 || k > 1000) break;
    const float x = p0.x + static_cast<float>(view.x(t));
    dl->AddLine(ImVec2(x, p0.y + h * 0.35f), ImVec2(x, p1.y), kTick);
    const std::string label = tick_label(ticks, t, m.t_begin);
    dl->AddText(ImVec2(x + 3, p0.y + 1), kText, label.c_str());
  }
  const float nx = p0.x + static_cast<float>(view.x(now_us));
  if (nx >= p0.x - 6 && nx <= p1.x + 6)
    dl->AddTriangleFilled(ImVec2(nx - 6, p0.y), ImVec2(nx + 6, p0.y), ImVec2(nx, p0.y + 9),
                          kNowLine);
}

// ---- tooltips -------------------------------------------------------------------------------

void span_tooltip(const TraceModel& m, const TimelineIndex& index, std::uint32_t i) {
  const Span& s = m.spans[i];
  const std::string_view name = m.str(s.name);
  ImGui::BeginTooltip();
  ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(span_color(s.kind)), "%.*s",
                     static_cast<int>(name.size()), name.data());
  ImGui::SameLine();
  ImGui::TextDisabled("(%s)", to_string(s.kind));
  ImGui::Text("duration %s, from %s", format_duration(s.dur).c_str(),
              format_duration(s.start - m.t_begin).c_str());
  if (const SpanArgs* a = m.args(s)) {
    if (a->step >= 0) {  // as the Playback panel counts steps; the trace's id when it differs
      const auto& ids = m.step_ids;
      const auto it = std::lower_bound(ids.begin(), ids.end(), a->step);
      const int k = static_cast<int>(it - ids.begin()) + 1;
      if (it == ids.end() || *it != a->step)
        ImGui::Text("step id %d", a->step);
      else if (k == a->step)
        ImGui::Text("step %d of %zu", k, ids.size());
      else
        ImGui::Text("step %d of %zu (id %d in the trace)", k, ids.size(), a->step);
    }
    if (a->peer >= 0) ImGui::Text("%s rank %d", s.kind == SpanKind::send ? "to" : "from", a->peer);
    if (a->window >= 0)
      ImGui::Text("%s rank %d's window (no message)", s.kind == SpanKind::store ? "into" : "from",
                  a->window);
    if (a->bytes >= 0)
      ImGui::Text("%s (%lld B)", format_bytes(static_cast<double>(a->bytes)).c_str(),
                  static_cast<long long>(a->bytes));
    if (a->chunk >= 0) {
      const std::string_view buffer = m.str(a->buffer);
      ImGui::Text("chunks [%d, %d) of %.*s%s", a->chunk, a->chunk_end,
                  static_cast<int>(buffer.size()), buffer.data(),
                  a->apply == ApplyKind::reduce ? ", reduced in"
                  : a->apply == ApplyKind::copy ? ", copied"
                                                : "");
    }
  }
  if (const int k = index.message_of_span(i); k >= 0) {
    const Message& msg = m.messages[k];
    ImGui::TextDisabled("message %llu: rank %d -> rank %d, %s on the wire",
                        static_cast<unsigned long long>(msg.id), msg.src, msg.dst,
                        format_duration(msg.arrival - msg.send_time).c_str());
  }
  ImGui::TextDisabled("click to select");
  ImGui::EndTooltip();
}

void merged_tooltip(const TraceModel& m, const DrawItem& item) {
  const double t0 = m.spans[item.span].start, t1 = m.spans[item.last].end();
  ImGui::BeginTooltip();
  ImGui::Text("%u spans, too small to draw one by one", item.count);
  ImGui::Text("from %s, over %s", format_duration(t0 - m.t_begin).c_str(),
              format_duration(t1 - t0).c_str());
  ImGui::TextDisabled("click to zoom in on them");
  ImGui::EndTooltip();
}

// ---- the steps of a frame ----------------------------------------------------------------------

// Where everything of this frame sits, worked out before anything is drawn.
struct Frame {
  Frame(const TraceModel& model, const TimelineIndex& timeline_index)
      : m(model), index(timeline_index) {}
  const TraceModel& m;
  const TimelineIndex& index;
  Rows rows;
  float line = 0;  // a line of text
  ImVec2 top;      // the lanes' child window, top left
  float canvas_x = 0, canvas_w = 0, x_right = 0;
  float win_y0 = 0, win_y1 = 0;  // the visible part of the child window
  std::vector<float> rank_y;     // the top of each rank's header
  std::vector<float> lane_y;     // the top of each lane (-1: folded away)
  float content_h = 0;
  ViewWindow view;
  ImDrawList* dl = nullptr;
  const OverlapIndex* overlap = nullptr;  // null: nothing to show (OverlapIndex::shown)
  std::vector<RankOverlap> hidden_now;    // per rank, up to the playback moment

  float sx(double t) const {
    return canvas_x + static_cast<float>(std::clamp(view.x(t), -8.0, view.width + 8.0));
  }
  bool lane_visible(std::uint32_t l) const {
    const float ly = lane_y[l];
    return ly >= 0 && ly <= win_y1 && ly + rows.lane_height(index, l) >= win_y0;
  }
  // Where a span sits on screen (its row), folded ranks falling back to the header.
  bool span_row(std::int32_t span, int rank, float& y0, float& h) const {
    if (span >= 0) {
      const std::uint32_t lane = m.spans[span].lane;
      if (lane_y[lane] >= 0) {
        const int d = index.depth_of(static_cast<std::uint32_t>(span));
        y0 = lane_y[lane] + rows.depth_offset(index, lane, d), h = rows.height(index, lane, d);
        return true;
      }
      rank = m.lanes[lane].rank;
    }
    if (rank < 0 || rank >= static_cast<int>(rank_y.size())) return false;
    y0 = rank_y[rank], h = rows.header;
    return true;
  }
};

ImGuiID fold_id(int rank) {
  return ImGui::GetID(reinterpret_cast<void*>(static_cast<std::intptr_t>(rank + 1)));
}

// The view: the whole trace when asked (or never set), and while playing the moment kept in
// view, a page at a time.
void keep_view(TimelineState& tl, const TraceModel& m, bool playing, double now_us) {
  if (tl.fit || !(tl.view_end > tl.view_begin)) {
    const TimeRange all = fit_range(m);
    tl.view_begin = all.begin, tl.view_end = all.end, tl.fit = false;
  }
  if (playing && (now_us < tl.view_begin || now_us > tl.view_end)) {
    const double w = tl.view_end - tl.view_begin;
    tl.view_begin = now_us - 0.05 * w, tl.view_end = tl.view_begin + w;
  }
}

// The label column: wide enough for the longest rank name, at most 220 px.
float label_width(const TraceModel& m) {
  float w = ImGui::CalcTextSize("compute").x + 24;
  for (const Rank& r : m.ranks) w = std::max(w, ImGui::CalcTextSize(r.name.c_str()).x + 24);
  return std::min(w, 220.0f);
}

// Row height: a line of text when every rank fits, less (down to 60%, no labels in the spans)
// so that the messages between all ranks stay in sight; past that the ranks scroll.
void fit_rows(Frame& f, ImGuiStorage* folded, float window_h) {
  float depth_rows = 0, headers = 0;
  for (std::size_t r = 0; r < f.m.ranks.size(); ++r) {
    headers += f.rows.header + f.rows.gap;
    if (folded->GetBool(fold_id(static_cast<int>(r)))) continue;
    for (const std::uint32_t l : f.m.ranks[r].lanes) {
      float n = 0;
      for (int d = 0; d < f.index.lane_depth(l); ++d)
        n += f.index.deliver_row(l, d) ? kThinRow : 1.0f;
      depth_rows += std::max(n, 1.0f);
    }
  }
  const float fit = (window_h - headers) / std::max(depth_rows, 1.0f);
  f.rows.row = std::floor(std::clamp(fit, std::round(f.line * 0.6f), std::round(f.line + 5)));
  f.rows.thin = std::max(3.0f, std::round(f.rows.row * kThinRow));
}

// Layout: the top of each rank's header and of each lane, and the height of them all.
void lay_out(Frame& f, ImGuiStorage* folded) {
  f.rank_y.assign(f.m.ranks.size(), 0);
  f.lane_y.assign(f.m.lanes.size(), -1.0f);
  float y = f.top.y;
  for (std::size_t r = 0; r < f.m.ranks.size(); ++r) {
    f.rank_y[r] = y;
    y += f.rows.header;
    if (!folded->GetBool(fold_id(static_cast<int>(r))))
      for (const std::uint32_t l : f.m.ranks[r].lanes)
        f.lane_y[l] = y, y += f.rows.lane_height(f.index, l);
    y += f.rows.gap;
  }
  f.content_h = y - f.top.y;
}

// Rank headers (with their fold buttons) and lane labels, in the label column.
void draw_labels(const Frame& f, ImGuiStorage* folded, float label_w) {
  const ImGuiIO& io = ImGui::GetIO();
  const TraceModel& m = f.m;
  const bool label_hovered =
      ImGui::IsWindowHovered() && io.MousePos.x >= f.top.x && io.MousePos.x < f.canvas_x;
  for (std::size_t r = 0; r < m.ranks.size(); ++r) {
    const float hy = f.rank_y[r];
    if (hy > f.win_y1 || hy + f.rows.header < f.win_y0) continue;
    const bool is_folded = folded->GetBool(fold_id(static_cast<int>(r)));
    f.dl->AddRectFilled(ImVec2(f.top.x, hy), ImVec2(f.x_right, hy + f.rows.header), kHeaderBg);
    ImGui::RenderArrow(f.dl, ImVec2(f.top.x + 3, hy + (f.rows.header - f.line) * 0.5f), kText,
                       is_folded ? ImGuiDir_Right : ImGuiDir_Down, 0.7f);
    f.dl->AddText(ImVec2(f.top.x + 4 + f.line * 0.8f, hy + (f.rows.header - f.line) * 0.5f), kText,
                  m.ranks[r].name.c_str());
    if (f.overlap && r < f.hidden_now.size()) {
      const std::string counter =
          "communication hidden under compute: " + overlap_text(f.hidden_now[r]);
      f.dl->AddText(ImVec2(f.canvas_x + 6, hy + (f.rows.header - f.line) * 0.5f), kHiddenText,
                    counter.c_str());
    }
    ImGui::SetCursorScreenPos(ImVec2(f.top.x, hy));
    ImGui::PushID(static_cast<int>(r));
    if (ImGui::InvisibleButton("##fold", ImVec2(label_w, f.rows.header)))
      folded->SetBool(fold_id(static_cast<int>(r)), !is_folded);
    ImGui::PopID();
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(is_folded ? "Show this rank's lanes" : "Fold this rank's lanes");
  }
  for (std::uint32_t l = 0; l < m.lanes.size(); ++l) {
    if (!f.lane_visible(l)) continue;
    const float ly = f.lane_y[l], lane_h = f.rows.lane_height(f.index, l);
    f.dl->AddRectFilled(ImVec2(f.top.x, ly), ImVec2(f.x_right, ly + lane_h), kLaneBg[l % 2]);
    // Rows too low for a label leave it out (the colours say compute, send and recv); the
    // tooltip still names the lane.
    if (lane_h >= f.line)
      f.dl->AddText(
          ImVec2(f.top.x + 14, ly + std::max(0.0f, (std::min(f.rows.row, lane_h) - f.line) * 0.5f)),
          kDim, m.lanes[l].name.c_str());
    if (label_hovered && io.MousePos.y >= ly && io.MousePos.y < ly + lane_h)
      ImGui::SetTooltip("%s: %s", m.ranks[m.lanes[l].rank].name.c_str(), m.lanes[l].name.c_str());
  }
}

// Step frames: a faint line where each algorithm step starts, while they stay apart.
void draw_step_frames(const Frame& f) {
  std::size_t in_view = 0;
  for (const StepFrame& s : f.m.steps) in_view += s.ts >= f.view.t0 && s.ts <= f.view.t1;
  if (in_view == 0 || in_view >= f.canvas_w / 8) return;
  for (const StepFrame& s : f.m.steps)
    if (s.ts >= f.view.t0 && s.ts <= f.view.t1)
      f.dl->AddLine(ImVec2(f.sx(s.ts), std::max(f.top.y, f.win_y0)),
                    ImVec2(f.sx(s.ts), std::min(f.top.y + f.content_h, f.win_y1)), kStepLine);
}

// Diagonal lines over [x0, x1] x [y0, y1], spaced so that they read as a hatch at any width.
void hatch(ImDrawList* dl, float x0, float x1, float y0, float y1) {
  dl->PushClipRect(ImVec2(x0, y0), ImVec2(x1, y1), true);
  const float h = y1 - y0;
  for (float x = x0 - h; x < x1; x += kHatchStep)
    dl->AddLine(ImVec2(x, y1), ImVec2(x + h, y0), kHiddenHatch);
  dl->PopClipRect();
}

// The parts of a nonblocking operation's message span under its rank's forward and backward
// phases, hatched.
void hatch_hidden(const Frame& f, const Span& s, float y0, float y1) {
  if (!f.overlap) return;
  const SpanArgs* a = f.m.args(s);
  if (!a || !is_async_group(f.m.str(a->group))) return;  // a blocking call's: never hidden
  const int r = f.m.lanes[s.lane].rank;
  if (r < 0 || static_cast<std::size_t>(r) >= f.overlap->hidden.size()) return;
  const Intervals under = intersection({{s.start, s.end()}}, f.overlap->hidden[r]);
  for (const auto& [t0, t1] : under) {
    const float x0 = f.sx(t0), x1 = std::max(f.sx(t1), x0 + 1.0f);
    if (x1 >= f.canvas_x && x0 <= f.x_right) hatch(f.dl, x0, x1, y0, y1);
  }
}

// Spans: what timeline_lod says each visible lane shows at this zoom. Returns true, with the
// item in `hovered`, when the mouse is over one (and may hover).
bool draw_spans(const Frame& f, bool can_hover, DrawItem& hovered) {
  static std::vector<DrawItem> items;  // reused frame to frame
  const float pad_x = 3.0f;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  bool any_hovered = false;
  for (std::uint32_t l = 0; l < f.m.lanes.size(); ++l) {
    if (!f.lane_visible(l)) continue;
    const float ly = f.lane_y[l];
    items.clear();
    lane_draw_items(f.m, f.index, l, f.view, items);
    for (const DrawItem& it : items) {
      const float y0 = ly + f.rows.depth_offset(f.index, l, it.depth);
      const float h = f.rows.height(f.index, l, it.depth);
      const ImVec2 a(f.canvas_x + it.x0, y0 + 1),
          b(f.canvas_x + std::max(it.x1, it.x0 + 1.0f), y0 + h - 1);
      const Span& s = f.m.spans[it.span];
      if (it.merged()) {
        f.dl->AddRectFilled(a, b, kMerged);
      } else {
        const SpanArgs* args = s.kind != SpanKind::compute ? f.m.args(s) : nullptr;
        const ImU32 col =
            args && args->group ? group_color(f.m.str(args->group)) : span_color(s.kind);
        f.dl->AddRectFilled(a, b, col);
        if (s.kind == SpanKind::send || s.kind == SpanKind::recv) hatch_hidden(f, s, a.y, b.y);
        if (b.x - a.x > 4 && h > 8) f.dl->AddRect(a, b, darker(col, 0.6f));
        if (b.x - a.x > 24 && h >= f.line) {
          const std::string_view name = f.m.str(s.name);
          const ImVec4 clip(std::max(a.x, f.canvas_x) + pad_x, a.y, b.x - pad_x, b.y);
          f.dl->AddText(nullptr, 0.0f,
                        ImVec2(std::max(a.x, f.canvas_x) + pad_x, y0 + (h - f.line) * 0.5f),
                        kSpanText, name.data(), name.data() + name.size(), 0.0f, &clip);
        }
      }
      if (can_hover && mouse.y >= y0 && mouse.y < y0 + h && mouse.x >= a.x - 1 && mouse.x < b.x + 1)
        hovered = it, any_hovered = true;
    }
  }
  return any_hovered;
}

// A message's arrow, from its send to where it is delivered.
void draw_arrow(const Frame& f, const Message& msg, ImU32 col, float thickness) {
  float ya = 0, ha = 0, yb = 0, hb = 0;
  if (!f.span_row(msg.send_span, msg.src, ya, ha) || !f.span_row(msg.deliver_span, msg.dst, yb, hb))
    return;
  const ImVec2 p(f.sx(msg.send_time), ya + ha * 0.5f), q(f.sx(msg.arrival), yb + hb * 0.5f);
  if (std::max(p.y, q.y) < f.win_y0 || std::min(p.y, q.y) > f.win_y1) return;
  const float dx = q.x - p.x, dy = q.y - p.y, len = std::sqrt(dx * dx + dy * dy);
  if (len < 1) return;
  const float ux = dx / len, uy = dy / len, head = 4 + 2 * thickness;
  const ImVec2 base(q.x - ux * head, q.y - uy * head);
  f.dl->AddLine(p, base, col, thickness);
  f.dl->AddTriangleFilled(q, ImVec2(base.x - uy * head * 0.5f, base.y + ux * head * 0.5f),
                          ImVec2(base.x + uy * head * 0.5f, base.y - ux * head * 0.5f), col);
}

// Flows: messages with an end in view, coloured by chunk as in the other panels. False when
// there are too many to draw.
bool draw_flows(const Frame& f) {
  static std::vector<std::uint32_t> flows;
  flows.clear();
  const bool all_flows = f.index.messages_in_view(f.m, f.view.t0, f.view.t1, kMaxFlows, flows);
  if (all_flows)
    for (const std::uint32_t k : flows) {
      const Message& msg = f.m.messages[k];
      const ImU32 col = msg.group ? group_color(f.m.str(msg.group))
                                  : chunk_color(msg.chunk, chunks_of(f.m, msg.buffer));
      draw_arrow(f, msg, with_alpha(col, 0.85f), 1.5f);
    }
  return all_flows;
}

// The selection on top: its span and its message's ends outlined, its arrow bold.
void draw_selection(const Frame& f, const Selection& sel) {
  const TraceModel& m = f.m;
  auto outline = [&](std::int32_t span) {
    float y0 = 0, h = 0;
    if (span < 0 || f.lane_y[m.spans[span].lane] < 0 || !f.span_row(span, -1, y0, h)) return;
    const Span& s = m.spans[span];
    const float x0 = f.sx(s.start), x1 = std::max(f.sx(s.end()), x0 + kMinSpanPx);
    f.dl->AddRect(ImVec2(x0 - 1, y0), ImVec2(x1 + 1, y0 + h), kHighlight, 0.0f, 0, 2.0f);
  };
  if (sel.message >= 0 && sel.message < static_cast<int>(m.messages.size())) {
    const Message& msg = m.messages[sel.message];
    outline(msg.send_span);
    outline(msg.deliver_span);
    draw_arrow(f, msg, kHighlight, 2.5f);
  }
  if (sel.span >= 0 && sel.span < static_cast<int>(m.spans.size())) outline(sel.span);
}

// The playback moment, and the note when the arrows were left out.
void draw_moment(const Frame& f, double now_us, bool all_flows) {
  const float nx = f.sx(now_us);
  if (now_us >= f.view.t0 && now_us <= f.view.t1)
    f.dl->AddLine(ImVec2(nx, f.win_y0), ImVec2(nx, std::min(f.top.y + f.content_h, f.win_y1)),
                  kNowLine, 2.0f);
  if (!all_flows) {
    const char* note = "too many messages in view to draw their arrows: zoom in";
    const ImVec2 size = ImGui::CalcTextSize(note);
    const ImVec2 at(f.x_right - size.x - 16, f.win_y0 + 4);
    f.dl->AddRectFilled(ImVec2(at.x - 6, at.y - 2), ImVec2(at.x + size.x + 6, at.y + size.y + 2),
                        IM_COL32(20, 22, 28, 230));
    f.dl->AddText(at, kText, note);
  }
}

// Hover and click, from what was drawn this frame: a tooltip; a click selects a span and its
// message, zooms onto a merged run, or clears the selection.
void hover_and_click(Document& doc, const Frame& f, bool released, bool any_hovered,
                     const DrawItem& hovered) {
  const TraceModel& m = f.m;
  TimelineState& tl = doc.timeline;
  if (any_hovered && hovered.merged())
    merged_tooltip(m, hovered);
  else if (any_hovered)
    span_tooltip(m, f.index, hovered.span);
  if (!released || ImGui::GetIO().MouseDragMaxDistanceSqr[ImGuiMouseButton_Left] >= kClickSlopSq)
    return;
  if (!any_hovered) {
    doc.selection.clear();
  } else if (hovered.merged()) {  // zoom onto the run, with a margin
    const double t0 = m.spans[hovered.span].start, t1 = m.spans[hovered.last].end();
    const double margin = std::max(0.1 * (t1 - t0), kMinViewUs);
    tl.view_begin = t0 - margin, tl.view_end = t1 + margin;
  } else {
    doc.selection.span = static_cast<int>(hovered.span);
    doc.selection.message = f.index.message_of_span(hovered.span);
  }
}

}  // namespace

// ---- draw_timeline --------------------------------------------------------------------------

// The value tracks (value_tracks: lesson 20's loss scale, a training lesson's loss), one row each
// between the ruler and the ranks: the name and the value at the playhead on the left, the series
// as a step line over the view (on a log scale where it spans a factor of 16), the playhead's
// point on it; hovered, the value at that time. Returns the rows' height.
float draw_value_tracks(const TraceModel& m, const ViewWindow& view, ImVec2 origin, float label_w,
                        float width, double now_us) {
  const std::vector<const ValueSeries*> tracks = value_tracks(m);
  const float line = ImGui::GetTextLineHeight(), row_h = std::round(2 * line + 4);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImGuiIO& io = ImGui::GetIO();
  constexpr std::size_t kMostTracks = 4;
  for (std::size_t k = 0; k < tracks.size() && k < kMostTracks; ++k) {
    const ValueSeries& v = *tracks[k];
    const ValueScale scale = value_scale(v);
    const float y0 = origin.y + float(k) * row_h, y1 = y0 + row_h - 2;
    const float x0 = origin.x + label_w, x1 = x0 + width;
    dl->AddRectFilled(ImVec2(origin.x, y0), ImVec2(x1, y1), kLaneBg[k % 2]);
    const double now = value_at(v, now_us);
    dl->AddText(ImVec2(origin.x + 6, y0 + 2), kTick, v.name.c_str());
    const std::string label =
        fmt::format("r{}  {}", v.rank, std::isnan(now) ? "-" : format_value(now));
    dl->AddText(ImVec2(origin.x + 6, y0 + 2 + line), IM_COL32(230, 230, 230, 255), label.c_str());
    auto y_of = [&](double value) { return y1 - 3 - float(scale.height(value)) * (row_h - 8); };
    dl->PushClipRect(ImVec2(x0, y0), ImVec2(x1, y1), true);
    // The step line: each sample's value held until the next.
    for (std::size_t i = 0; i < v.samples.size(); ++i) {
      const double t_end = i + 1 < v.samples.size() ? v.samples[i + 1].ts : m.t_end;
      const float xa = x0 + float(view.x(v.samples[i].ts)), xb = x0 + float(view.x(t_end));
      if (xb < x0 || xa > x1) continue;
      const float y = y_of(v.samples[i].value);
      dl->AddLine(ImVec2(xa, y), ImVec2(xb, y), kValueLine, 2.0f);
      if (i + 1 < v.samples.size())
        dl->AddLine(ImVec2(xb, y), ImVec2(xb, y_of(v.samples[i + 1].value)), kValueLine, 1.0f);
    }
    if (!std::isnan(now))
      dl->AddCircleFilled(ImVec2(x0 + float(view.x(now_us)), y_of(now)), 4, kNowLine);
    dl->PopClipRect();
    // Hovered: the value at that time.
    if (io.MousePos.x >= x0 && io.MousePos.x < x1 && io.MousePos.y >= y0 && io.MousePos.y < y1 &&
        ImGui::IsWindowHovered(ImGuiHoveredFlags_AllowWhenBlockedByActiveItem)) {
      const double t = view.time_at(io.MousePos.x - x0);
      const double at = value_at(v, t);
      ImGui::SetTooltip("%s on rank %d: %s at %s (from %s to %s%s)", v.name.c_str(), v.rank,
                        std::isnan(at) ? "not yet recorded" : format_value(at).c_str(),
                        format_duration(t - m.t_begin).c_str(), format_value(scale.lo).c_str(),
                        format_value(scale.hi).c_str(), scale.log ? ", log scale" : "");
    }
  }
  return float(std::min(tracks.size(), kMostTracks)) * row_h;
}

// The span colours, one row under the ruler, for a trace with window accesses: their loads and
// stores are slices like the messages' but carry none. Returns the row's height.
float draw_kind_legend(ImVec2 origin, float label_w) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float line = ImGui::GetTextLineHeight();
  float x = origin.x + label_w;
  for (const auto& [kind, text] : {std::pair{SpanKind::compute, "compute"},
                                   {SpanKind::send, "send"},
                                   {SpanKind::recv, "recv"},
                                   {SpanKind::load, "load from a window (no message)"},
                                   {SpanKind::store, "store to a window (no message)"}}) {
    dl->AddRectFilled(ImVec2(x, origin.y + 3), ImVec2(x + line * 1.6f, origin.y + line - 1),
                      span_color(kind));
    x += line * 1.6f + 4;
    dl->AddText(ImVec2(x, origin.y), kDim, text);
    x += ImGui::CalcTextSize(text).x + 14;
  }
  return line + 4;
}

void draw_timeline(PanelContext& ctx) {
  Document& doc = ctx.doc;
  const TraceModel& m = doc.model;
  TimelineState& tl = doc.timeline;
  if (m.lanes.empty()) {
    ImGui::TextDisabled("This trace has no spans to show.");
    return;
  }
  Frame f(m, ctx.doc.derived<TimelineIndex>(build_index));
  const OverlapIndex& overlap = ctx.doc.derived<OverlapIndex>(index_overlap);
  if (overlap.shown) f.overlap = &overlap;
  const ImGuiIO& io = ImGui::GetIO();
  const ImGuiStyle& style = ImGui::GetStyle();
  const double max_view = 4 * std::max(m.t_end - m.t_begin, 1.0);
  double now_us = ctx.now.time_us;
  keep_view(tl, m, doc.playback.playing, now_us);

  // Geometry: labels on the left, the canvas (a time axis) on the right.
  f.line = ImGui::GetTextLineHeight();
  f.rows.header = std::round(f.line + 4);
  const float label_w = label_width(m);
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  f.canvas_w = std::max(avail.x - label_w, 20.0f);  // less the lanes' scrollbar, once known
  const float ruler_h = ImGui::GetFrameHeight();
  auto view_now = [&] { return ViewWindow{tl.view_begin, tl.view_end, f.canvas_w}; };

  // Zoom: the wheel over the ruler or the canvas; Shift+wheel scrolls the ranks instead.
  bool wheel_here = false;
  auto zoom_at = [&](float mouse_x) {
    if (io.MouseWheel == 0 || io.KeyShift) return;
    const double anchor = view_now().time_at(mouse_x);
    const TimeRange r = zoom_around({tl.view_begin, tl.view_end}, anchor,
                                    std::pow(kWheelZoom, io.MouseWheel), kMinViewUs, max_view);
    tl.view_begin = r.begin, tl.view_end = r.end;
  };

  // Row 1: the fit button, then the ruler (click or drag on it: seek).
  if (ImGui::Button("fit", ImVec2(label_w - style.ItemSpacing.x, ruler_h))) {
    const TimeRange all = fit_range(m);
    tl.view_begin = all.begin, tl.view_end = all.end;
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Show the whole trace");
  const ImVec2 ruler0(origin.x + label_w, origin.y);
  ImGui::SetCursorScreenPos(ruler0);
  ImGui::InvisibleButton("##ruler", ImVec2(f.canvas_w, ruler_h));
  ImGui::SetItemUsingMouseWheel();
  if (ImGui::IsItemHovered()) {
    wheel_here = true;
    zoom_at(io.MousePos.x - ruler0.x);
    const double t = view_now().time_at(io.MousePos.x - ruler0.x);
    if (!ImGui::IsItemActive())
      ImGui::SetTooltip("%s from the start; click to move playback here",
                        format_duration(t - m.t_begin).c_str());
  }
  if (ImGui::IsItemActive()) {
    doc.playback.seek_time(m, view_now().time_at(io.MousePos.x - ruler0.x));
    now_us = doc.playback.moment(m).time_us;
  }

  // The lesson's values over the run, under the ruler.
  const float tracks_h = draw_value_tracks(m, view_now(), ImVec2(origin.x, origin.y + ruler_h + 2),
                                           label_w, f.canvas_w, now_us);

  // The span colours, where the trace has window accesses.
  const float legend_h =
      m.accesses.empty()
          ? 0.0f
          : draw_kind_legend(ImVec2(origin.x, origin.y + ruler_h + 2 + tracks_h), label_w);

  // The ranks: a child window that scrolls vertically; the wheel is ours, not its.
  const float lanes_top = origin.y + ruler_h + 2 + tracks_h + legend_h;
  ImGui::SetCursorScreenPos(ImVec2(origin.x, lanes_top));
  ImGui::BeginChild("##lanes", ImVec2(avail.x, std::max(avail.y - (lanes_top - origin.y), 20.0f)),
                    false, ImGuiWindowFlags_NoScrollWithMouse);
  f.top = ImGui::GetCursorScreenPos();
  f.canvas_w = std::max(ImGui::GetContentRegionAvail().x - label_w, 20.0f);
  f.win_y0 = ImGui::GetWindowPos().y, f.win_y1 = f.win_y0 + ImGui::GetWindowHeight();
  f.canvas_x = f.top.x + label_w;
  f.x_right = f.canvas_x + f.canvas_w;
  ImGuiStorage* folded = ImGui::GetStateStorage();
  fit_rows(f, folded, ImGui::GetWindowHeight());
  lay_out(f, folded);

  // The canvas: one button over every row right of the labels: press-drag pans, click selects.
  ImGui::SetCursorScreenPos(ImVec2(f.canvas_x, f.top.y));
  const bool released =
      ImGui::InvisibleButton("##canvas", ImVec2(f.canvas_w, std::max(f.content_h, 1.0f)));
  ImGui::SetItemUsingMouseWheel();
  const bool canvas_hovered = ImGui::IsItemHovered();
  if (canvas_hovered) {
    wheel_here = true;
    zoom_at(io.MousePos.x - f.canvas_x);
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2.0f)) {
    const double dt = io.MouseDelta.x / view_now().px_per_us();
    tl.view_begin -= dt, tl.view_end -= dt;
    ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseDelta.y);
    ImGui::SetMouseCursor(ImGuiMouseCursor_ResizeAll);
  }
  if (wheel_here && io.KeyShift && io.MouseWheel != 0)
    ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * f.rows.row * 3);
  f.view = view_now();
  f.dl = ImGui::GetWindowDrawList();
  if (f.overlap) f.hidden_now = overlap_until(*f.overlap, now_us);

  draw_labels(f, folded, label_w);
  f.dl->PushClipRect(ImVec2(f.canvas_x, f.win_y0), ImVec2(f.x_right, f.win_y1), true);
  draw_step_frames(f);
  DrawItem hovered;
  const bool can_hover = canvas_hovered && !ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2.0f);
  const bool any_hovered = draw_spans(f, can_hover, hovered);
  const bool all_flows = draw_flows(f);
  draw_selection(f, doc.selection);
  draw_moment(f, now_us, all_flows);
  f.dl->PopClipRect();
  hover_and_click(doc, f, released, any_hovered, hovered);
  ImGui::EndChild();

  // The ruler last, with the view as this frame's panning and zooming left it.
  ImDrawList* panel_dl = ImGui::GetWindowDrawList();
  const ImVec2 ruler1(ruler0.x + f.canvas_w, ruler0.y + ruler_h);
  panel_dl->PushClipRect(ruler0, ruler1, true);
  draw_ruler(panel_dl, m, f.view, ruler0, ruler1, now_us);
  if (now_us >= f.view.t0 && now_us <= f.view.t1)
    panel_dl->AddLine(ImVec2(f.sx(now_us), ruler0.y + 8), ImVec2(f.sx(now_us), ruler1.y), kNowLine,
                      2.0f);
  panel_dl->PopClipRect();
}

}  // namespace distlab::viewer
