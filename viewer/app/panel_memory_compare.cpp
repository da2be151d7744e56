// panel_memory_compare.cpp — ZeRO's picture, measured: memory per device for plain data
// parallel and each ZeRO stage side by side, from every open trace (memory_compare.hpp).
//
//   group      one per stage present (baseline DP, P_os, P_os+g, P_os+g+p), in that order
//   left bar   rank 0's memory from its trace's ledger, stacked bottom-up: params, grads,
//              optimizer (the model state a step leaves) and activations (the peak)
//   dashed     the formula's model state, bytes per parameter x Psi (16, 4 + 12/N, 2 + 14/N,
//              16/N), drawn over the model-state part of the bar
//   right bar  the communication per step, in Psi (right axis), measured from the trace's
//              messages; a tick at the formula (2, 2, 2, 3 Psi). The baseline is trained untraced
//              by the lessons, so its bar is the formula, outlined
// Opened as `distlab-viewer --panel memory-compare 08.json 09.json 10.json` (any subset).
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/base/units.hpp"
#include "viewer/app/colors.hpp"
#include "viewer/app/panels.hpp"
#include "viewer/model/memory_compare.hpp"

namespace distlab::viewer {

namespace {

constexpr ImU32 kFormula = IM_COL32(0, 215, 255, 255);
constexpr ImU32 kComm = IM_COL32(200, 160, 255, 255);
constexpr ImU32 kGrid = IM_COL32(255, 255, 255, 28);

void dashed(ImDrawList* dl, ImVec2 a, float right, ImU32 color, float thickness) {
  for (float x = a.x; x < right; x += 6)
    dl->AddLine(ImVec2(x, a.y), ImVec2(std::min(x + 3, right), a.y), color, thickness);
}

// The chart's top: v with headroom, on a round figure of its unit (as the Memory panel's).
double nice_top(double v) {
  if (v <= 0) return 1;
  double unit = 1;
  while (unit * 1024 <= v) unit *= 1024;
  const double x = v * 1.08 / unit;
  const double decade = std::pow(10.0, std::floor(std::log10(x)));
  for (double k : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
    if (k * decade >= x) return k * decade * unit;
  return x * unit;
}

void swatch(const char* text, bool first, ImU32 color, int kind) {
  const float h = ImGui::GetTextLineHeight();
  if (!first) {
    ImGui::SameLine(0, 12);
    if (ImGui::GetContentRegionAvail().x < h + 4 + ImGui::CalcTextSize(text).x) ImGui::NewLine();
  }
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  if (kind == 0)
    dl->AddRectFilled(ImVec2(p.x, p.y + 2), ImVec2(p.x + h - 4, p.y + h - 2), color);
  else
    dashed(dl, ImVec2(p.x, p.y + h * 0.5f), p.x + h, color, 2.0f);
  ImGui::Dummy(ImVec2(h - 2, h));
  ImGui::SameLine(0, 3);
  ImGui::TextUnformatted(text);
}

void group_tooltip(const StageMemory& s) {
  ImGui::BeginTooltip();
  ImGui::Text("%s (%s), N = %d, Psi = %s parameters", zero_stage_title(s.stage), s.source.c_str(),
              s.ranks, format_count(static_cast<std::uint64_t>(s.psi)).c_str());
  ImGui::Text("formula %s = %.3f bytes per parameter: %s", zero_stage_formula(s.stage),
              zero_bytes_per_param(s.stage, s.ranks), format_bytes(s.formula_bytes()).c_str());
  for (std::size_t r = 0; r < s.bytes.size(); ++r) {
    const auto& b = s.bytes[r];
    const int rank = static_cast<int>(r);
    char who[32];
    std::snprintf(who, sizeof who, s.traced ? "r%d" : "r%d (untraced run)", rank);
    ImGui::Text("%s  state %s (%.3f B/param) = %s + %s + %s, activations peak %s", who,
                format_bytes(double(s.state(rank))).c_str(),
                double(s.state(rank)) / double(std::max<std::int64_t>(1, s.psi)),
                format_bytes(double(b[0])).c_str(), format_bytes(double(b[1])).c_str(),
                format_bytes(double(b[2])).c_str(), format_bytes(double(b[3])).c_str());
  }
  if (s.traced)
    ImGui::Text("sent per step and rank %s = %.3f Psi; formula %.0f Psi (x (N-1)/N x 2 B)",
                format_bytes(s.sent_per_step).c_str(), s.measured_comm_psi(),
                zero_comm_psi(s.stage));
  else
    ImGui::TextDisabled("the lesson trains plain data parallel untraced: its ledger, no traffic");
  if (!s.state_matches_lesson)
    ImGui::TextColored(ImVec4(1, 0.45f, 0.45f, 1),
                       "the ledger's model state differs from what the lesson recorded");
  ImGui::EndTooltip();
}

}  // namespace

void draw_memory_compare(PanelContext& ctx) {
  std::vector<const TraceModel*> models;
  if (ctx.documents)
    for (const Document& d : *ctx.documents) {
      if (d.ok()) models.push_back(&d.model);
    }
  else
    models.push_back(&ctx.model());
  const MemoryCompare mc = build_memory_compare(models);
  if (mc.stages.empty()) {
    ImGui::TextDisabled(
        "no ZeRO trace open: open the traces of lessons 08, 09 and 10 together (otherData.zero)");
    return;
  }
  const StageMemory& first = mc.stages.front();
  bool same = true;
  for (const StageMemory& s : mc.stages)
    same = same && s.ranks == first.ranks && s.psi == first.psi;
  ImGui::Text("ZeRO: memory per device, measured");
  ImGui::SameLine();
  if (same)
    ImGui::TextDisabled("\u00b7 N = %d ranks \u00b7 Psi = %s parameters \u00b7 rank 0's ledger",
                        first.ranks, format_count(static_cast<std::uint64_t>(first.psi)).c_str());
  else
    ImGui::TextDisabled("\u00b7 the traces differ in N or Psi: hover a group for its own");
  for (const std::string& note : mc.notes) ImGui::TextDisabled("%s", note.c_str());

  const char* const kParts[kZeroParts] = {"params", "grads", "optimizer", "activations (peak)"};
  for (int k = 0; k < kZeroParts; ++k) swatch(kParts[k], k == 0, category_color(k), 0);
  swatch("formula: model state", false, kFormula, 1);
  swatch("communication per step (Psi, right axis)", false, kComm, 0);

  // Scales: bytes on the left, Psi on the right.
  double top_bytes = 0, most_psi = 0;
  for (const StageMemory& s : mc.stages) {
    const auto& b = s.bytes.front();
    top_bytes = std::max({top_bytes, double(b[0] + b[1] + b[2] + b[3]), s.formula_bytes()});
    most_psi = std::max(most_psi, s.measured_comm_psi());
  }
  top_bytes = nice_top(top_bytes);
  // the right axis: a multiple of 4 Psi, so that its five lines fall on whole Psi
  const double top_psi = 4.0 * std::max(1.0, std::ceil(most_psi * 1.05 / 4.0));

  const float font = ImGui::GetFontSize();
  const std::string top_label = format_bytes(top_bytes);
  const float axis_l = ImGui::CalcTextSize(top_label.c_str()).x + 8;
  const float axis_r = ImGui::CalcTextSize("12 Psi").x + 10;
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float below = font * 3 + 10;  // three lines of labels under each group
  const float chart_h = std::max(60.0f, avail.y - below);
  const float chart_w = std::max(80.0f, avail.x - axis_l - axis_r);
  ImGui::InvisibleButton("##memory-compare", ImVec2(axis_l + chart_w + axis_r, chart_h + below));
  const bool hovered = ImGui::IsItemHovered();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  ImDrawList* dl = ImGui::GetWindowDrawList();

  const float x0 = origin.x + axis_l, x1 = x0 + chart_w;
  const float y0 = origin.y + font * 1.6f, y1 = origin.y + chart_h;
  const auto y_bytes = [&](double v) { return y1 - static_cast<float>(v / top_bytes) * (y1 - y0); };
  const auto y_psi = [&](double v) { return y1 - static_cast<float>(v / top_psi) * (y1 - y0); };
  for (double f : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const float y = y_bytes(top_bytes * f);
    dl->AddLine(ImVec2(x0, y), ImVec2(x1, y), kGrid);
    const std::string l = format_bytes(top_bytes * f);
    dl->AddText(ImVec2(x0 - 6 - ImGui::CalcTextSize(l.c_str()).x, y - font * 0.5f), kDim,
                l.c_str());
    char p[16];
    std::snprintf(p, sizeof p, "%.3g Psi", top_psi * f);
    dl->AddText(ImVec2(x1 + 6, y - font * 0.5f), kComm, p);
  }

  const float slot = chart_w / static_cast<float>(mc.stages.size());
  const float bar = std::clamp(slot * 0.36f, 6.0f, 90.0f);
  const float comm_w = bar * 0.45f;
  int hovered_group = -1;
  for (std::size_t i = 0; i < mc.stages.size(); ++i) {
    const StageMemory& s = mc.stages[i];
    const float cx = x0 + slot * (static_cast<float>(i) + 0.5f);
    const float left = cx - (bar + comm_w + 6) * 0.5f, right = left + bar;
    // the memory bar, rank 0's
    const auto& b = s.bytes.front();
    double under = 0;
    for (int k = 0; k < kZeroParts; ++k) {
      if (b[k] <= 0) continue;
      dl->AddRectFilled(ImVec2(left, y_bytes(under + double(b[k]))), ImVec2(right, y_bytes(under)),
                        category_color(k));
      under += double(b[k]);
    }
    const double total = under;
    const std::string total_text = format_bytes(total);
    dl->AddText(ImVec2(left + bar * 0.5f - ImGui::CalcTextSize(total_text.c_str()).x * 0.5f,
                       y_bytes(total) - font - 2),
                kText, total_text.c_str());
    // the formula over the model state
    const float fy = y_bytes(s.formula_bytes());
    dashed(dl, ImVec2(left - 6, fy), right + 6, kFormula, 2.0f);
    // the communication bar beside it
    const float cl = right + 6, cr = cl + comm_w;
    const double measured = s.measured_comm_psi();
    const double formula = zero_comm_psi(s.stage);
    if (measured >= 0)
      dl->AddRectFilled(ImVec2(cl, y_psi(measured)), ImVec2(cr, y1), with_alpha(kComm, 0.85f));
    else
      dl->AddRect(ImVec2(cl, y_psi(formula)), ImVec2(cr, y1), kComm, 0, 0, 1.5f);
    dl->AddLine(ImVec2(cl - 3, y_psi(formula)), ImVec2(cr + 3, y_psi(formula)), kText, 2.0f);

    // labels: the stage, its formula at N, and what was measured
    char l1[96], l2[96], l3[96];
    std::snprintf(l1, sizeof l1, "%s", zero_stage_title(s.stage));
    std::snprintf(l2, sizeof l2, "%s = %.2f B/param", zero_stage_formula(s.stage),
                  zero_bytes_per_param(s.stage, s.ranks));
    const double per_param = double(s.state(0)) / double(std::max<std::int64_t>(1, s.psi));
    if (measured >= 0)
      std::snprintf(l3, sizeof l3, "%.2f B/param, %.2f Psi (%.0f)", per_param, measured, formula);
    else
      std::snprintf(l3, sizeof l3, "%.2f B/param, %.0f Psi (formula)", per_param, formula);
    float ly = y1 + 4;
    for (const char* l : {l1, l2, l3}) {
      const ImU32 color = l == l1 ? kText : l == l2 ? kFormula : kDim;
      dl->AddText(ImVec2(cx - ImGui::CalcTextSize(l).x * 0.5f, ly), color, l);
      ly += font + 2;
    }
    if (hovered && mouse.x >= cx - slot * 0.5f && mouse.x < cx + slot * 0.5f)
      hovered_group = static_cast<int>(i);
  }
  dl->AddLine(ImVec2(x0, y1), ImVec2(x1, y1), kDim);
  if (hovered_group >= 0) group_tooltip(mc.stages[hovered_group]);
}

}  // namespace distlab::viewer
