// panel_schedule.cpp — the pipeline diagram: stages as rows, time as columns, one iteration.
//
// From the trace's schedule (viewer/model/schedule.hpp, built once per document):
//   header       the trace, its schedule and shape, the iteration, and the schedule's formula
//   blocks       every pass, labelled "F m" / "B m" / "I m" / "W m" where it fits ("F m.c" for
//                chunk c of an interleaved schedule, whose blocks also carry a grey stripe at
//                their foot, light for chunk 0 to dark for the last), in its micro-batch's colour
//                (micro_color: F light, B dark, I deep, W pale); runs of blocks narrower than 2
//                pixels merge into one grey block
//   bubble       idle time inside the iteration, shaded (kBubble); hovered: its length
//   utilisation  per stage, busy / the iteration's extent, beside the schedule's formula
//                (M/(M+P-1), vM/(vM+P-1) interleaved, 3M/(3M+P-1) zero bubble)
//   in flight    under the blocks, per stage, the micro-batches whose activations the stage holds
//                (a forward takes one, a backward or a W lets it go) over time, with the count at
//                the cursor
//   cursor       the playback moment; clicking a row seeks there
// On the steps clock the panel draws the ideal schedule (core/base/pipeline.hpp's ideal machine:
// F 1 unit, B 2, I 1, W 1), its cursor placed through the beats; on the measured clock, what ran.
// It shows the iteration the cursor is in.
//
// Several pipeline traces open at once stack: the View passes the other open documents
// (PanelContext::others) and each pipeline among them is drawn under the current one, at the
// same moment of the same iteration (steps: the same ideal time; measured: the same time since
// the iteration's start), on one scale, so GPipe's and 1F1B's activations can be compared.
#include <fmt/format.h>
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "viewer/app/colors.hpp"
#include "viewer/app/panels.hpp"
#include "viewer/model/schedule.hpp"

namespace distlab::viewer {

namespace {

constexpr float kMinBlockPx = 2.0f;
constexpr ImU32 kMerged = IM_COL32(150, 150, 150, 255);
constexpr ImU32 kRowBack = IM_COL32(28, 30, 36, 255);
constexpr ImU32 kFlightFill = IM_COL32(52, 168, 83, 200);  // activations' colour (category_color)
constexpr ImU32 kAxis = IM_COL32(255, 255, 255, 40);

const PipelineSchedule& schedule_of(Document& doc) {
  return doc.derived<PipelineSchedule>(build_pipeline_schedule);
}

// One document's picture at this frame: which times, which iteration, where the cursor is.
struct Picture : ScheduleMoment {
  Document* doc = nullptr;
  const PipelineSchedule* s = nullptr;
  const ScheduleTimes* times = nullptr;
};

Picture picture_of(Document& doc, const Moment& now) {
  Picture p;
  p.doc = &doc;
  p.s = &schedule_of(doc);
  static_cast<ScheduleMoment&>(p) = schedule_moment(*p.s, now);
  p.times = p.ideal ? &p.s->ideal : &p.s->measured;
  return p;
}

// A stacked document at the current one's moment: the same iteration, and the same ideal time
// or the same time since the iteration's start.
Picture follow(Document& doc, const Picture& lead, const Moment& own) {
  Picture p = picture_of(doc, own);
  if (p.ideal != lead.ideal) return p;  // one shows the ideal, the other cannot: its own moment
  p.iteration = std::min(lead.iteration, p.iterations - 1);
  if (p.ideal) {
    p.cursor = std::min(lead.cursor, p.length);
  } else if (!p.times->iterations.empty()) {
    const Interval it = p.times->iterations[static_cast<std::size_t>(p.iteration)];
    p.t0 = it.start;
    p.length = it.end - it.start;
    p.cursor = p.t0 + (lead.cursor - lead.t0);
  }
  return p;
}

std::string percent(double f, bool compact) {
  char b[16];
  std::snprintf(b, sizeof b, compact ? "%.0f%%" : "%.1f%%", 100 * f);
  return b;
}

// The micro-batches' colours in each pass the pictures hold (F and B; F, I and W where some
// picture splits its backwards), and the chunks' stripes where some picture interleaves.
void legend(int micros, bool fb, bool split, int chunks) {
  const float h = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const int shown = std::min(micros, 8);
  using pipeline::Pass;
  std::vector<Pass> passes{Pass::forward};
  if (fb) passes.push_back(Pass::backward);
  if (split) passes.insert(passes.end(), {Pass::input, Pass::weight});
  const float w = h * 0.6f;
  for (int m = 0; m < shown; ++m) {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    float x = p.x;
    for (Pass pass : passes) {
      dl->AddRectFilled(ImVec2(x, p.y + 2), ImVec2(x + w, p.y + h - 2), micro_color(m, pass));
      x += w;
    }
    ImGui::Dummy(ImVec2(w * static_cast<float>(passes.size()), h));
    ImGui::SameLine(0, 3);
    ImGui::Text("%d", m);
    ImGui::SameLine(0, 8);
  }
  if (micros > shown) {
    ImGui::TextDisabled("...");
    ImGui::SameLine(0, 8);
  }
  std::string shades;
  for (Pass pass : passes)
    shades += fmt::format("{}{} {}", shades.empty() ? "" : ", ", pipeline::letter(pass),
                          pass == Pass::forward    ? "light"
                          : pass == Pass::backward ? "dark"
                          : pass == Pass::input    ? "deep"
                                                   : "pale");
  ImGui::TextDisabled("micro-batch (%s)", shades.c_str());
  ImGui::SameLine(0, 14);
  for (int c = 0; chunks > 1 && c < std::min(chunks, 8); ++c) {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    dl->AddRectFilled(ImVec2(p.x, p.y + h - 5), ImVec2(p.x + h, p.y + h - 2),
                      model_chunk_color(c, chunks));
    ImGui::Dummy(ImVec2(h, h));
    ImGui::SameLine(0, 3);
    ImGui::Text("%d", c);
    ImGui::SameLine(0, 8);
  }
  if (chunks > 1) {
    ImGui::TextDisabled("chunk (the stripe; F m.c)");
    ImGui::SameLine(0, 14);
  }
  const ImVec2 p = ImGui::GetCursorScreenPos();
  dl->AddRectFilled(ImVec2(p.x, p.y + 2), ImVec2(p.x + h, p.y + h - 2), kBubble);
  ImGui::Dummy(ImVec2(h, h));
  ImGui::SameLine(0, 4);
  ImGui::TextDisabled("bubble (idle)");
}

// "zb-h1, P = 4, M = 8 · 3M/(3M+P-1) = 24/27 · iteration 1 of 2 · ideal machine: F 1 unit, I 1,
// W 1" (interleaved: ", v = 2" after M)
std::string details(const Picture& p) {
  const PipelineSchedule& s = *p.s;
  std::string clock = "measured";
  if (p.ideal)
    clock = s.split ? "ideal machine: F 1 unit, I 1, W 1"
            : s.chunks > 1
                ? fmt::format("ideal machine: a chunk's F 1/{} unit, its B twice that", s.chunks)
                : "ideal machine: F 1 unit, B 2";
  const std::string chunks = s.chunks > 1 ? fmt::format(", v = {}", s.chunks) : "";
  return fmt::format(
      "{}, P = {}, M = {}{} \xc2\xb7 {} = {} \xc2\xb7 iteration {} of {} \xc2\xb7 {}",
      s.params.present ? schedule_name(s.params) : "pipeline", s.stages, s.microbatches, chunks,
      s.formula_symbol(), s.formula_fraction(), p.iteration + 1, p.iterations, clock);
}

// Lines the title takes in `width` pixels: the file name and the details on one, or the details
// wrapped under it.
int title_lines(const Picture& p, float width) {
  const float title = ImGui::CalcTextSize(p.doc->title().c_str()).x,
              what = ImGui::CalcTextSize(details(p).c_str()).x;
  if (title + 10 + what <= width) return 1;
  return 1 + static_cast<int>(std::ceil(what / std::max(width, 1.0f)));
}

struct Geometry {
  float left = 0, right = 0;  // the time axis, in screen pixels
  float row_h = 12, flight_h = 8;
  float label_w = 0, util_w = 0;
  float formula_dx = 0;  // the formula's column, right of the measured utilisation
  bool compact = false;  // a narrow panel: short labels, whole percents
};

void tooltip_block(const Picture& p, int stage, const PipeBlock& b) {
  ImGui::BeginTooltip();
  ImGui::Text("%s on stage %d", block_text(b, p.s->chunks).c_str(), stage);
  if (p.ideal)
    ImGui::Text("units %.0f - %.0f (ideal machine)", b.start, b.end);
  else
    ImGui::Text("%s, from %s into the iteration", format_duration(b.end - b.start).c_str(),
                format_duration(b.start - p.t0).c_str());
  ImGui::EndTooltip();
}

// One document: its title, a row of blocks per stage, the activations in flight, the axis.
void draw_picture(const Picture& p, const Geometry& g, double length, bool current,
                  std::vector<BlockItem>& items, std::vector<int>& columns) {
  const PipelineSchedule& s = *p.s;
  const ScheduleTimes& times = *p.times;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const int P = static_cast<int>(times.stages.size());

  // Title: which trace, and its schedule beside it when they fit on one line, else under it.
  const std::string title = p.doc->title(), what = details(p);
  const bool one_line = title_lines(p, ImGui::GetContentRegionAvail().x) == 1;
  ImGui::TextUnformatted(title.c_str());
  if (one_line) ImGui::SameLine(0, 10);
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("%s", what.c_str());
  ImGui::PopStyleColor();
  const float width = g.right - g.left;
  ViewWindow view{p.t0, p.t0 + std::max(length, 1e-9), width};
  const Interval extent = p.ideal ? Interval{0, p.length}
                                  : (times.iterations.empty()
                                         ? Interval{}
                                         : times.iterations[static_cast<std::size_t>(p.iteration)]);
  const ImVec2 top = ImGui::GetCursorScreenPos();
  const float x0 = g.left;
  const auto x_of = [&](double t) { return x0 + static_cast<float>(view.x(t)); };
  const ImVec2 mouse = ImGui::GetIO().MousePos;

  // Column headers on the right.
  const float util_x = g.right + 8;
  dl->AddText(ImVec2(util_x, top.y), kDim, "busy");
  // The formula (M/(M+P-1), ...), or its fraction where the panel is narrow.
  const std::string formula_head = g.compact ? s.formula_fraction() : s.formula_symbol();
  dl->AddText(ImVec2(util_x + g.formula_dx, top.y), kDim, formula_head.c_str());
  float y = top.y + font + 2;
  const std::string formula = percent(s.formula(), g.compact);
  int hovered_stage = -1, hovered_block = -1, hovered_bubble = -1;
  for (int r = 0; r < P; ++r, y += g.row_h) {
    const StageTimes& st = times.stages[static_cast<std::size_t>(r)];
    const float y0 = y + 1, y1 = y + g.row_h - 1;
    if (!ImGui::IsRectVisible(ImVec2(top.x, y0), ImVec2(g.right + g.util_w, y1))) continue;
    char label[24];
    std::snprintf(label, sizeof label, g.compact ? "s%d" : "stage %d", r);
    dl->AddText(ImVec2(top.x, y0 + (y1 - y0 - font) * 0.5f), kDim, label);
    dl->AddRectFilled(ImVec2(x0, y0), ImVec2(g.right, y1), kRowBack);
    // The bubble: the whole iteration shaded, the blocks drawn over it.
    dl->AddRectFilled(ImVec2(std::max(x0, x_of(extent.start)), y0),
                      ImVec2(std::min(g.right, x_of(extent.end)), y1), kBubble);
    dl->PushClipRect(ImVec2(x0, y0), ImVec2(g.right, y1), true);
    block_items(st.blocks, view, kMinBlockPx, items);
    for (const BlockItem& it : items) {
      const ImVec2 a(x0 + it.x0, y0), b(x0 + std::max(it.x1, it.x0 + 1), y1);
      if (it.merged()) {
        dl->AddRectFilled(a, b, kMerged);
        continue;
      }
      const PipeBlock& blk = st.blocks[it.first];
      dl->AddRectFilled(a, b, micro_color(blk.micro, blk.pass));
      if (s.chunks > 1) {  // the chunk's stripe along the block's foot
        const float stripe = std::max(2.0f, (y1 - y0) * 0.18f);
        dl->AddRectFilled(ImVec2(a.x, y1 - stripe), b, model_chunk_color(blk.chunk, s.chunks));
      }
      if (b.x - a.x > 3) dl->AddRect(a, b, IM_COL32(0, 0, 0, 120));
      // "F 2" ("F 2.1" with chunks), or "F2.1" where that does not fit, or "F2" (the stripe
      // still tells the chunk)
      std::string text = block_label(blk, s.chunks);
      ImVec2 size = ImGui::CalcTextSize(text.c_str());
      for (int chunks : {s.chunks, 1}) {
        if (size.x + 4 <= b.x - a.x) break;
        text = block_label(blk, chunks, true);
        size = ImGui::CalcTextSize(text.c_str());
      }
      if (size.x + 2 <= b.x - a.x && size.y <= y1 - y0 + 2)
        dl->AddText(ImVec2((a.x + b.x - size.x) * 0.5f, (y0 + y1 - size.y) * 0.5f),
                    micro_text_color(blk.pass), text.c_str());
    }
    dl->PopClipRect();
    if (mouse.y >= y0 && mouse.y < y1 && mouse.x >= x0 && mouse.x < g.right) {
      hovered_stage = r;
      hovered_block = block_at(st.blocks, view.time_at(mouse.x - x0));
      hovered_bubble = bubble_at(st, view.time_at(mouse.x - x0));
    }
    const std::string util = percent(times.utilisation(r, p.ideal ? 0 : p.iteration), g.compact);
    dl->AddText(ImVec2(util_x, y0 + (y1 - y0 - font) * 0.5f), kText, util.c_str());
    dl->AddText(ImVec2(util_x + g.formula_dx, y0 + (y1 - y0 - font) * 0.5f), kDim, formula.c_str());
  }
  const float blocks_bottom = y;

  // Activations in flight, one strip per stage, on one scale (the most any stage holds).
  dl->AddText(ImVec2(top.x, y + 2), kDim,
              g.compact ? "in flight" : "activations in flight (micro-batches)");
  dl->AddText(ImVec2(util_x, y + 2), kDim, "now  peak");
  y += font + 4;
  int most = 1;
  for (const StageTimes& st : times.stages) most = std::max(most, st.peak_flight);
  for (int r = 0; r < P; ++r, y += g.flight_h) {
    const StageTimes& st = times.stages[static_cast<std::size_t>(r)];
    const float y0 = y + 1, y1 = y + g.flight_h - 1;
    if (!ImGui::IsRectVisible(ImVec2(top.x, y0), ImVec2(g.right + g.util_w, y1))) continue;
    dl->AddRectFilled(ImVec2(x0, y0), ImVec2(g.right, y1), kRowBack);
    flight_columns(st, view, columns);
    for (std::size_t c = 0; c < columns.size();) {  // runs of one height: one rectangle each
      std::size_t e = c + 1;
      while (e < columns.size() && columns[e] == columns[c]) ++e;
      if (columns[c] > 0) {
        const float h = (y1 - y0) * static_cast<float>(columns[c]) / static_cast<float>(most);
        dl->AddRectFilled(ImVec2(x0 + static_cast<float>(c), y1 - h),
                          ImVec2(std::min(g.right, x0 + static_cast<float>(e)), y1), kFlightFill);
      }
      c = e;
    }
    if (g.flight_h >= font) {
      char label[24];
      std::snprintf(label, sizeof label, g.compact ? "s%d" : "stage %d", r);
      dl->AddText(ImVec2(top.x, y0 + (y1 - y0 - font) * 0.5f), kDim, label);
      std::snprintf(label, sizeof label, "%3d  %3d", flight_at(st, p.cursor), st.peak_flight);
      dl->AddText(ImVec2(util_x, y0 + (y1 - y0 - font) * 0.5f), kText, label);
    }
  }

  // The axis: ideal units, or time since the iteration's start.
  dl->AddLine(ImVec2(x0, y), ImVec2(g.right, y), kAxis);
  RulerTicks ticks = ruler_ticks(view, p.t0, 70.0f);
  for (double t = ticks.first; t <= view.t1 + 1e-9; t += ticks.step) {
    const float x = x_of(t);
    dl->AddLine(ImVec2(x, top.y + font + 2), ImVec2(x, y + 3), kAxis);
    const std::string label = p.ideal ? std::to_string(static_cast<long long>(std::llround(t)))
                                      : tick_label(ticks, t, p.t0);
    dl->AddText(ImVec2(x + 2, y + 2), kDim, label.c_str());
  }
  if (p.ideal) dl->AddText(ImVec2(util_x, y + 2), kDim, "units");

  // The cursor, across blocks and strips.
  if (p.cursor >= view.t0 && p.cursor <= view.t1) {
    const float x = x_of(p.cursor);
    dl->AddLine(ImVec2(x, top.y + font), ImVec2(x, y), kHighlight, 2.0f);
  }
  ImGui::SetCursorScreenPos(ImVec2(top.x, top.y));
  ImGui::InvisibleButton(current ? "##schedule" : "##schedule-other",
                         ImVec2(std::max(1.0f, g.right - top.x), y + font + 4 - top.y));
  if (hovered_block >= 0) {
    tooltip_block(p, hovered_stage,
                  times.stages[static_cast<std::size_t>(hovered_stage)]
                      .blocks[static_cast<std::size_t>(hovered_block)]);
  } else if (hovered_bubble >= 0) {  // idle: how long, and how much of the iteration idles so
    const StageTimes& st = times.stages[static_cast<std::size_t>(hovered_stage)];
    const Interval b = st.bubbles[static_cast<std::size_t>(hovered_bubble)];
    const double idle = 1 - times.utilisation(hovered_stage, p.ideal ? 0 : p.iteration);
    if (p.ideal)
      ImGui::SetTooltip("stage %d idle (bubble): %g units; idle %.1f%% of the iteration",
                        hovered_stage, b.end - b.start, 100 * idle);
    else
      ImGui::SetTooltip("stage %d idle (bubble): %s; idle %.1f%% of the iteration", hovered_stage,
                        format_duration(b.end - b.start).c_str(), 100 * idle);
  }
  // Clicking a row of the current document seeks its playback there.
  if (current && ImGui::IsItemClicked() && mouse.x >= x0 && mouse.x < g.right &&
      mouse.y < blocks_bottom) {
    Document& doc = *p.doc;
    const double t = view.time_at(mouse.x - x0);
    if (p.ideal)
      doc.playback.seek_beat(doc.model, p.s->beat_at_ideal_time(p.iteration * p.length + t));
    else
      doc.playback.seek_time(doc.model, t);
    doc.playback.playing = false;
  }
}

}  // namespace

bool shows_schedule(Document& doc) {
  return doc.ok() && schedule_of(doc).any();
}

void draw_schedule(PanelContext& ctx) {
  const PipelineSchedule& s = schedule_of(ctx.doc);
  if (!s.any()) {
    ImGui::TextDisabled(
        "this trace has no pipeline schedule (no forward, backward, backward-input or "
        "backward-weight phases with a micro-batch)");
    return;
  }
  std::vector<Picture> pics{picture_of(ctx.doc, ctx.now)};
  for (Document* other : ctx.others)
    if (other && other != &ctx.doc && shows_schedule(*other))
      pics.push_back(follow(*other, pics[0], other->playback.moment(other->model)));

  int micros = 0, rows = 0, chunks = 1;
  bool fb = false, split = false;
  std::string widest_formula = "M/(M+P-1)";
  for (const Picture& p : pics) {
    micros = std::max(micros, p.s->microbatches);
    rows += static_cast<int>(p.times->stages.size());
    chunks = std::max(chunks, p.s->chunks);
    split = split || p.s->split;
    fb = fb || !p.s->split;
    const std::string f = p.s->formula_symbol();
    if (f.size() > widest_formula.size()) widest_formula = f;
  }
  legend(micros, fb, split, chunks);
  if (pics[0].times->stages.empty()) {
    ImGui::TextDisabled(
        "the trace declares a pipeline but holds none of its passes (forwards, backwards, ...)");
    return;
  }
  // One scale for every picture of one kind: the longest iteration fills the width.
  double ideal_len = 0, measured_len = 0;
  for (const Picture& p : pics) {
    double& len = p.ideal ? ideal_len : measured_len;
    len = std::max(len, p.length);
  }

  const float font = ImGui::GetFontSize();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  float fixed = static_cast<float>(pics.size()) * (3 * font + 20);
  for (const Picture& p : pics) fixed += static_cast<float>(title_lines(p, avail.x)) * (font + 4);
  Geometry g;
  g.compact = avail.x < 40 * font;
  g.label_w = ImGui::CalcTextSize(g.compact ? "s00" : "stage 00").x + 8;
  g.formula_dx = ImGui::CalcTextSize(g.compact ? "100%  " : "100.0%  ").x;
  g.util_w = g.formula_dx + ImGui::CalcTextSize(g.compact ? "100%" : widest_formula.c_str()).x + 12;
  g.left = ImGui::GetCursorScreenPos().x + g.label_w;
  g.right = std::max(g.left + 40, ImGui::GetCursorScreenPos().x + avail.x - g.util_w);
  // A block row, and a strip at 60% of it (at least a line of text where the row has one), for
  // every stage of every picture.
  g.row_h = std::clamp((avail.y - fixed) / (1.6f * static_cast<float>(std::max(rows, 1))), 5.0f,
                       2.6f * font);
  g.flight_h = std::max({3.0f, 0.6f * g.row_h, std::min(font + 2, g.row_h)});
  std::vector<BlockItem> items;
  std::vector<int> columns;
  for (std::size_t i = 0; i < pics.size(); ++i) {
    if (i) ImGui::Separator();
    ImGui::PushID(static_cast<int>(i));
    draw_picture(pics[i], g, pics[i].ideal ? ideal_len : measured_len, i == 0, items, columns);
    ImGui::PopID();
  }
}

}  // namespace distlab::viewer
