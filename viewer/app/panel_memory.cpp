// panel_memory.cpp — each rank's memory ledger at the moment, as stacked bars.
//
// A bar per rank stacks the ledger's six categories (params, grads, optimizer, activations,
// comm, data; category_color; the legend names those the trace uses). The scale is the largest peak
// of any rank over the whole trace, so bars grow and shrink as playback moves. A white tick marks
// each rank's own peak; where the lesson states its memory formula (otherData.memory_formula), a
// dashed line shows what the formula expects per rank, so the ledger can be checked against it by
// eye. Where the panel has the height, a strip below the bars draws one rank's activations (its
// total where the trace charges none) over the whole run, with the playhead: the rank under the
// mouse, else rank 0 (lesson 19's rise through each forward and fall through each backward; each
// column shows the most held in its slice of time, so a dip shorter than a slice does not show).
#include <imgui.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "core/base/units.hpp"
#include "viewer/app/colors.hpp"
#include "viewer/app/panels.hpp"
#include "viewer/model/panel_content.hpp"
#include "viewer/model/playback.hpp"
#include "viewer/model/stats.hpp"

namespace distlab::viewer {

namespace {

constexpr ImU32 kPeak = IM_COL32(240, 240, 240, 255);
constexpr ImU32 kFormula = IM_COL32(0, 215, 255, 255);
constexpr ImU32 kGrid = IM_COL32(255, 255, 255, 28);
constexpr float kMaxBar = 56;

// Per loaded model: each rank's peak total, and the scale every frame shares.
struct Peaks {
  std::vector<std::int64_t> peak;              // per rank
  double scale = 0;                            // bytes at the top of the chart
  bool any = false;                            // the trace has ledger samples
  std::array<bool, kMemoryCategories> used{};  // categories some rank ever holds bytes in
};

Peaks build_peaks(const TraceModel& m) {
  Peaks p;
  p.peak.assign(static_cast<std::size_t>(m.world_size()), 0);
  for (std::size_t r = 0; r < m.memory.size() && r < p.peak.size(); ++r)
    for (const MemorySample& s : m.memory[r]) {
      p.peak[r] = std::max(p.peak[r], s.total);
      p.any = true;
      for (int k = 0; k < kMemoryCategories; ++k) p.used[k] = p.used[k] || s.bytes[k] > 0;
    }
  for (std::int64_t v : p.peak) p.scale = std::max(p.scale, static_cast<double>(v));
  for (double v : m.info.memory_expected_bytes) p.scale = std::max(p.scale, v);
  return p;
}

// The chart's top: v plus a little headroom, rounded up to a round number of its unit
// (96 KiB -> 120 KiB, 4.5 MiB -> 5 MiB), so the tallest bar fills most of the chart.
double nice_ceiling(double v) {
  if (v <= 0) return 1;
  double unit = 1;
  while (unit * 1024 <= v) unit *= 1024;
  const double x = v * 1.05 / unit;  // in [1.05, 1075)
  const double decade = std::pow(10.0, std::floor(std::log10(x)));
  for (double k : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
    if (k * decade >= x) return k * decade * unit;
  return x * unit;
}

void dashed_line(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 color, float thickness) {
  const float len = b.x - a.x;
  for (float x = 0; x < len; x += 6)
    dl->AddLine(ImVec2(a.x + x, a.y), ImVec2(a.x + std::min(x + 3, len), a.y), color, thickness);
}

// Starts a legend item on this line when `width` more pixels fit, else on the next.
void flow(bool first, float width) {
  if (first) return;
  ImGui::SameLine(0, 12);
  if (ImGui::GetContentRegionAvail().x < width) ImGui::NewLine();
}

// The categories this trace uses (all six when it uses none), the peak tick, the formula.
void legend(const TraceModel& m, const Peaks& peaks) {
  const float h = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const bool some = std::find(peaks.used.begin(), peaks.used.end(), true) != peaks.used.end();
  bool first = true;
  for (int k = 0; k < kMemoryCategories; ++k) {
    if (some && !peaks.used[k]) continue;
    flow(first, h + ImGui::CalcTextSize(memory_category_name(k)).x);
    first = false;
    const ImVec2 p = ImGui::GetCursorScreenPos();
    dl->AddRectFilled(ImVec2(p.x, p.y + 2), ImVec2(p.x + h - 4, p.y + h - 2), category_color(k));
    ImGui::Dummy(ImVec2(h - 2, h));
    ImGui::SameLine(0, 2);
    ImGui::TextUnformatted(memory_category_name(k));
  }
  flow(false, h + 4 + ImGui::CalcTextSize("peak").x);
  const ImVec2 p = ImGui::GetCursorScreenPos();
  dl->AddLine(ImVec2(p.x, p.y + h * 0.5f), ImVec2(p.x + h, p.y + h * 0.5f), kPeak, 2.0f);
  ImGui::Dummy(ImVec2(h, h));
  ImGui::SameLine(0, 4);
  ImGui::TextDisabled("peak");
  if (!m.info.memory_expected_bytes.empty()) {
    const std::string label = "formula: " + (m.info.memory_formula.empty() ? std::string("expected")
                                                                           : m.info.memory_formula);
    flow(false, h + 4 + ImGui::CalcTextSize(label.c_str()).x);
    const ImVec2 q = ImGui::GetCursorScreenPos();
    dashed_line(dl, ImVec2(q.x, q.y + h * 0.5f), ImVec2(q.x + h, q.y + h * 0.5f), kFormula, 2.0f);
    ImGui::Dummy(ImVec2(h, h));
    ImGui::SameLine(0, 4);
    ImGui::TextDisabled("%s", label.c_str());
  }
}

void bar_tooltip(const MemorySample& s, int rank, std::int64_t peak, const TraceMeta& info) {
  ImGui::BeginTooltip();
  ImGui::Text("r%d now: %s", rank, format_bytes(static_cast<double>(s.total)).c_str());
  for (int k = kMemoryCategories - 1; k >= 0; --k)
    if (s.bytes[k] > 0)
      ImGui::Text("  %-12s %s", memory_category_name(k),
                  format_bytes(static_cast<double>(s.bytes[k])).c_str());
  ImGui::Text("peak: %s", format_bytes(static_cast<double>(peak)).c_str());
  if (rank < static_cast<int>(info.memory_expected_bytes.size()))
    ImGui::Text("formula: %s", format_bytes(info.memory_expected_bytes[rank]).c_str());
  ImGui::EndTooltip();
}

constexpr int kActivations = static_cast<int>(Category::activations);

// The strip of the run: `rank`'s activations (or total) over [active_begin, active_end], a column
// per two pixels, the playhead at `now`. Its height spans the least to the most the rank held
// (a tenth of it for the least), so a change small beside what stays allocated still shows.
void history_strip(const TraceModel& m, const Peaks& peaks, int rank, double now, ImVec2 a,
                   ImVec2 b) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const int category = peaks.used[kActivations] ? kActivations : kMemoryCategories;
  const double t0 = m.active_begin, t1 = m.active_end;
  const int columns = std::max(1, static_cast<int>((b.x - a.x) / 2));
  const std::vector<double> v = memory_history(m, rank, category, t0, t1, columns);
  const double most = v.empty() ? 0 : *std::max_element(v.begin(), v.end());
  double least = most;
  for (double x : v)
    if (x > 0) least = std::min(least, x);
  const float font = ImGui::GetFontSize();
  char label[128];
  std::snprintf(label, sizeof label, "r%d %s over the run: %s to %s", rank,
                category == kActivations ? "activations" : "memory", format_bytes(least).c_str(),
                format_bytes(most).c_str());
  dl->AddText(a, kDim, label);
  const float top = a.y + font + 2, bottom = b.y;
  dl->AddLine(ImVec2(a.x, bottom), ImVec2(b.x, bottom), kDim);
  if (most > 0) {
    const ImU32 color =
        category == kActivations ? category_color(kActivations) : IM_COL32(200, 200, 200, 255);
    const float w = (b.x - a.x) / static_cast<float>(columns);
    for (int c = 0; c < columns; ++c) {
      const double x = v[static_cast<std::size_t>(c)];
      if (x <= 0) continue;
      const double share = most > least ? 0.1 + 0.9 * (x - least) / (most - least) : 1.0;
      const float h = static_cast<float>(share) * (bottom - top);
      const float left = a.x + w * static_cast<float>(c);
      dl->AddRectFilled(ImVec2(left, bottom - h), ImVec2(left + std::max(w, 1.0f), bottom), color);
    }
  }
  if (t1 > t0) {
    const double at = std::clamp((now - t0) / (t1 - t0), 0.0, 1.0);
    const float x = a.x + static_cast<float>(at) * (b.x - a.x);
    dl->AddLine(ImVec2(x, top), ImVec2(x, bottom), kPeak, 1.5f);
  }
}

}  // namespace

void draw_memory(PanelContext& ctx) {
  const TraceModel& m = ctx.model();
  const int n = m.world_size();
  const Peaks& peaks = ctx.doc.derived<Peaks>(build_peaks);
  if (!memory_has_content(m)) {  // drawn only when asked for by name (--panel memory)
    ImGui::TextWrapped("%s", memory_empty_reason(m).c_str());
    return;
  }
  const std::vector<MemorySample> now = memory_at(m, ctx.now);
  legend(m, peaks);

  // The chart: the y axis labels on the left, a bar per rank, rank labels below.
  const float font = ImGui::GetFontSize();
  const double top = nice_ceiling(peaks.scale);
  const std::string top_label = format_bytes(top);
  const float axis_w = ImGui::CalcTextSize(top_label.c_str()).x + 8;
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  // The strip of the run below the bars, where the panel is tall enough for both.
  const float strip_h = avail.y >= 170 ? std::max(40.0f, avail.y * 0.3f) : 0.0f;
  const float chart_h = std::max(40.0f, avail.y - font - 6 - strip_h);
  const float chart_w = std::max(40.0f, avail.x - axis_w);
  ImGui::InvisibleButton("##memory", ImVec2(axis_w + chart_w, chart_h + font + 4 + strip_h));
  const bool hovered = ImGui::IsItemHovered();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  ImDrawList* dl = ImGui::GetWindowDrawList();

  const float x0 = origin.x + axis_w, y0 = origin.y + font * 0.5f, y1 = origin.y + chart_h;
  const auto y_of = [&](double bytes) { return y1 - static_cast<float>(bytes / top) * (y1 - y0); };
  for (double f : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const float y = y_of(top * f);
    dl->AddLine(ImVec2(x0, y), ImVec2(x0 + chart_w, y), kGrid);
    if (f == 0.0 || f == 0.5 || f == 1.0) {
      const std::string label = format_bytes(top * f);
      dl->AddText(ImVec2(x0 - 6 - ImGui::CalcTextSize(label.c_str()).x, y - font * 0.5f), kDim,
                  label.c_str());
    }
  }

  const float slot = chart_w / static_cast<float>(n);
  const float bar = std::max(1.0f, std::min(kMaxBar, slot * 0.7f));
  char widest[16];
  std::snprintf(widest, sizeof widest, "r%d", n - 1);
  const int label_every =
      std::max(1, static_cast<int>(std::ceil((ImGui::CalcTextSize(widest).x + 6) / slot)));
  int hovered_rank = -1;
  for (int r = 0; r < n; ++r) {
    const float cx = x0 + slot * (static_cast<float>(r) + 0.5f);
    const float left = cx - bar * 0.5f, right = cx + bar * 0.5f;
    // categories bottom-up in ledger order
    double below = 0;
    for (int k = 0; k < kMemoryCategories; ++k) {
      const double v = static_cast<double>(now[r].bytes[k]);
      if (v <= 0) continue;
      dl->AddRectFilled(ImVec2(left, y_of(below + v)), ImVec2(right, y_of(below)),
                        category_color(k));
      below += v;
    }
    if (peaks.peak[r] > 0) {
      const float y = y_of(static_cast<double>(peaks.peak[r]));
      dl->AddLine(ImVec2(left - 3, y), ImVec2(right + 3, y), kPeak, 2.0f);
    }
    if (r < static_cast<int>(m.info.memory_expected_bytes.size()))
      dashed_line(dl, ImVec2(left - 5, y_of(m.info.memory_expected_bytes[r])), ImVec2(right + 5, 0),
                  kFormula, 2.0f);
    if (r % label_every == 0) {  // "r0", and the total now where there is room
      char label[48];
      std::snprintf(label, sizeof label, "r%d  %s", r, format_bytes(below).c_str());
      if (ImGui::CalcTextSize(label).x + 6 > slot) std::snprintf(label, sizeof label, "r%d", r);
      dl->AddText(ImVec2(cx - ImGui::CalcTextSize(label).x * 0.5f, y1 + 3), kDim, label);
    }
    if (hovered && mouse.y <= y1 + font + 4 && mouse.x >= cx - slot * 0.5f &&
        mouse.x < cx + slot * 0.5f)
      hovered_rank = r;  // over the bars, not the strip below them
  }
  dl->AddLine(ImVec2(x0, y1), ImVec2(x0 + chart_w, y1), kDim);
  if (strip_h > 0)
    history_strip(m, peaks, std::max(hovered_rank, 0), ctx.now.time_us, ImVec2(x0, y1 + font + 8),
                  ImVec2(x0 + chart_w, y1 + font + 2 + strip_h));
  if (hovered_rank >= 0)
    bar_tooltip(now[hovered_rank], hovered_rank, peaks.peak[hovered_rank], m.info);
}

}  // namespace distlab::viewer
