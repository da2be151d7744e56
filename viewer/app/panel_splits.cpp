// panel_splits.cpp — a tensor-parallel layer (otherData.splits, lessons 12 and 13): its weight
// matrices and activations in the order of the computation, each rank's slice in its colour,
// and Megatron's f and g where their collectives run, lit as playback passes them.
//
//   X --> (f) --> [A|A|A|A] --> [X A_i] --> [GeLU] --> [B/B/B/B] --> [H_i B_i] --> (g) --> Y
//
//   weight       a rectangle to scale (rows down, columns across); each rank's columns (a
//                column split) or rows (a row split) in its colour (rank_color); thin lines
//                between heads where the tensor goes by head
//   activation   the same for its shape; replicated ones grey, split ones striped, partial sums
//                as a stack of sheets, one per rank; outlined only until its producer has run
//   f, g         circles: lit yellow while one of their collectives runs (the all-reduce of
//                one pass, or under sequence parallelism an all-gather and a reduce-scatter,
//                one each pass), green once one is over, dim before; their forward and
//                backward written under them
//   running      the matrix being multiplied by (splits_at: the compute phases covering the
//                moment on each rank) is outlined yellow; the ranks not in it yet fade
// Beside a weight's name, -> and <- tell whether its forward and backward pass are to come (dim),
// running (yellow) or done (green). Hover a block for its shape and each rank's range.
// Layout (flow()): blocks marked `stack` (Wk, Wv under Wq) go under or beside the one before,
// and the columns wrap into 1 to 4 rows, whichever draws the tensors largest at one common scale
// with columns wide enough for their labels.
// The model (which phases cover the moment) is viewer/model/splits.hpp.
// In this file: the geometry (extent, columns_of, fit_scale, flow), the pieces (tooltip,
// draw_tensor, draw_operator, arrow, status), then draw_splits, which places them.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "viewer/app/colors.hpp"
#include "viewer/app/panels.hpp"
#include "viewer/model/splits.hpp"

namespace distlab::viewer {

namespace {

constexpr ImU32 kReplicated = IM_COL32(150, 155, 165, 255);
constexpr ImU32 kEmpty = IM_COL32(32, 34, 40, 255);
constexpr ImU32 kEdge = IM_COL32(90, 95, 108, 255);
constexpr ImU32 kHeadLine = IM_COL32(20, 20, 24, 160);
constexpr ImU32 kDone = IM_COL32(76, 175, 80, 255);
constexpr ImU32 kArrow = IM_COL32(140, 140, 150, 255);
constexpr float kOperatorUnits = 0.8f;  // f and g columns are narrower than a tensor's
constexpr float kMinSide = 5;

std::string dims(const std::vector<std::int64_t>& shape) {
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? " x " : "") + std::to_string(shape[i]);
  return s;
}

// The 2-D picture of a tensor: (rows, columns) as drawn. A tensor of 3 or more axes that goes by
// head (the first axis) is drawn as its heads side by side, each (product of the middle axes) x
// (the last axis): lesson 13's scores, (B S) x S per head.
struct Extent {
  double rows = 1, cols = 1;
  double head_cols = 0;  // columns per head along the drawing, 0 when not drawn by head
};
Extent extent(const SplitBlock& b) {
  Extent e;
  const auto& s = b.shape;
  if (s.size() == 1) {
    e.cols = static_cast<double>(s[0]);
  } else if (s.size() == 2) {
    e.rows = static_cast<double>(s[0]), e.cols = static_cast<double>(s[1]);
  } else if (s.size() >= 3) {
    e.rows = 1;
    for (std::size_t i = 1; i + 1 < s.size(); ++i) e.rows *= static_cast<double>(s[i]);
    e.head_cols = static_cast<double>(s.back());
    e.cols = static_cast<double>(s[0]) * e.head_cols;
  }
  e.rows = std::max(e.rows, 1.0), e.cols = std::max(e.cols, 1.0);
  return e;
}

// Columns of the picture: a block, or blocks stacked under the first (Wq, Wk, Wv).
// Blocks marked `stack` go under the block before them (`stacked`), or beside it with no arrow
// between them (a wide panel's choice: Wq Wk Wv in a row).
struct Column {
  std::vector<int> blocks;
  float units = 1;
  bool joined = false;  // beside the column before it, in the same group: no arrow
};

std::vector<Column> columns_of(const Splits& s, bool stacked) {
  std::vector<Column> cols;
  for (int i = 0; i < static_cast<int>(s.blocks.size()); ++i) {
    const SplitBlock& b = s.blocks[i];
    const bool with_previous =
        b.stack && !b.is_operator() && !cols.empty() && !s.blocks[i - 1].is_operator();
    if (with_previous && stacked)
      cols.back().blocks.push_back(i);
    else
      cols.push_back({{i}, b.is_operator() ? kOperatorUnits : 1.0f, with_previous});
  }
  return cols;
}

// Text sizes: a block's name in the panel's font, its shapes a little smaller.
struct Lines {
  float name = 0, small = 0;                             // line heights
  float small_size = 0;                                  // the small font's size
  float labels() const { return name + 2 * small + 4; }  // name above, two shape lines below
};

// Rows of columns, and the one scale (pixels per element) every tensor is drawn at.
struct Flow {
  std::vector<Column> cols;
  std::vector<std::vector<int>> rows;  // indices into cols, per row
  float unit = 0, row_h = 0;           // a unit column's width, a row's height
  float gap = 0;                       // between two columns' pictures, for the arrow
  double scale = 0;
};

// The largest scale at which every tensor fits its slot: its column's width less the gap, its
// share of the row's height less its labels. One scale for all, so their sizes compare.
double fit_scale(const Splits& s, const std::vector<Column>& cols, const Flow& f,
                 const Lines& lines) {
  double scale = 1e30;
  for (const auto& row : f.rows)
    for (int ci : row) {
      const Column& c = cols[ci];
      const double slot_w = std::max(1.0f, f.unit * c.units - f.gap);
      const double slot_h =
          std::max(1.0f, f.row_h / static_cast<float>(c.blocks.size()) - lines.labels());
      for (int bi : c.blocks) {
        if (s.blocks[bi].is_operator()) continue;
        const Extent e = extent(s.blocks[bi]);
        scale = std::min({scale, slot_w / e.cols, slot_h / e.rows});
      }
    }
  return scale > 1e29 ? 1.0 : scale;
}

// The layout that draws the tensors largest: stacks under or beside each other, in 1 to 4
// rows (the columns split into rows as evenly as their widths allow), with columns wide enough
// for their labels (`min_unit`) where any layout has them.
Flow flow(const Splits& s, float w, float h, const Lines& lines, float min_unit) {
  Flow best;
  bool best_wide = false;
  for (const bool stacked : {true, false}) {
    const std::vector<Column> cols = columns_of(s, stacked);
    float total = 0;
    for (const Column& c : cols) total += c.units;
    for (int k = 1; k <= std::min<int>(4, static_cast<int>(cols.size())); ++k) {
      Flow f;
      f.cols = cols;
      f.rows.assign(static_cast<std::size_t>(k), {});
      float widest = 0, acc = 0;
      int row = 0;
      for (int i = 0; i < static_cast<int>(cols.size());) {
        // a group (a column and those joined to it) stays on one row
        int end = i + 1;
        float units = cols[i].units;
        while (end < static_cast<int>(cols.size()) && cols[end].joined) units += cols[end++].units;
        if (row < k - 1 && acc > 0 && acc + units * 0.5f > total * (row + 1) / k) ++row;
        for (; i < end; ++i) f.rows[row].push_back(i);
        acc += units;
      }
      for (const auto& r : f.rows) {
        float u = 0;
        for (int i : r) u += cols[i].units;
        widest = std::max(widest, u);
      }
      f.unit = w / std::max(widest, 1.0f);
      f.row_h = h / static_cast<float>(k);
      f.gap = std::clamp(f.unit * 0.16f, 6.0f, 22.0f);
      f.scale = fit_scale(s, cols, f, lines);
      const bool wide = f.unit >= min_unit;
      // a row more, or the stacks beside each other, only for a clearly larger picture
      if ((wide && !best_wide) || (wide == best_wide && f.scale > best.scale * 1.05))
        best = f, best_wide = wide;
    }
  }
  return best;
}

ImU32 pass_color(PassState s) {
  switch (s) {
    case PassState::running:
      return kHighlight;
    case PassState::done:
      return kDone;
    default:
      return kDim;
  }
}

const char* pass_word(PassState s) {
  switch (s) {
    case PassState::pending:
      return "to come";
    case PassState::running:
      return "running";
    case PassState::done:
      return "done";
    default:
      return "none";
  }
}

void tooltip(const Splits& s, const SplitBlock& b, const SplitsMoment::Block& now) {
  ImGui::BeginTooltip();
  if (b.is_operator()) {
    ImGui::Text("%s: forward %s, backward %s", b.name.c_str(), b.forward.c_str(),
                b.backward.c_str());
    if (!b.forward_phase.empty())
      ImGui::Text("its forward %s runs in the phase \"%s\"", b.forward.c_str(),
                  b.forward_phase.c_str());
    if (!b.backward_phase.empty())
      ImGui::Text("its backward %s runs in the phase \"%s\"", b.backward.c_str(),
                  b.backward_phase.c_str());
  } else {
    ImGui::Text("%s (%s), %s", b.name.c_str(), to_string(b.kind), dims(b.shape).c_str());
    switch (b.split) {
      case SplitHow::none:
        ImGui::TextUnformatted("every rank holds all of it");
        break;
      case SplitHow::partial:
        ImGui::Text("every rank holds a partial sum of all of it (%s)", dims(b.rank_shape).c_str());
        break;
      default:
        ImGui::Text("split by %s: each rank holds %s", to_string(b.split),
                    dims(b.rank_shape).c_str());
        for (std::size_t r = 0; r < b.ranges.size(); ++r) {
          char heads[64] = "";
          if (r < b.heads.size() && b.split != SplitHow::heads)
            std::snprintf(heads, sizeof heads, " (heads %lld..%lld)",
                          static_cast<long long>(b.heads[r].begin),
                          static_cast<long long>(b.heads[r].end - 1));
          ImGui::TextColored(
              ImGui::ColorConvertU32ToFloat4(rank_color(static_cast<int>(r), s.ranks)),
              "r%zu: %s %lld..%lld%s", r, to_string(b.split),
              static_cast<long long>(b.ranges[r].begin),
              static_cast<long long>(b.ranges[r].end - 1), heads);
        }
    }
  }
  if (!b.forward_phase.empty())
    ImGui::Text("forward: \"%s\", %s", b.forward_phase.c_str(), pass_word(now.forward));
  if (!b.backward_phase.empty())
    ImGui::Text("backward: \"%s\", %s", b.backward_phase.c_str(), pass_word(now.backward));
  ImGui::EndTooltip();
}

// Text centred on x, clipped to the width w around it, in the panel's font at `size` (0: its
// own size).
void centred_text(ImDrawList* dl, float x, float y, float w, ImU32 color, const std::string& text,
                  float size = 0) {
  ImFont* font = ImGui::GetFont();
  if (size <= 0) size = ImGui::GetFontSize();
  const float tw = font->CalcTextSizeA(size, 1e30f, 0, text.c_str()).x;
  const ImVec2 at(x - std::min(tw, w) * 0.5f, y);
  dl->PushClipRect(ImVec2(x - w * 0.5f, y), ImVec2(x + w * 0.5f, y + size + 2), true);
  dl->AddText(font, size, at, color, text.c_str());
  dl->PopClipRect();
}

// The forward (->) and backward (<-) marks of a block with phases, from x on.
void pass_marks(ImDrawList* dl, float x, float y, const SplitsMoment::Block& now) {
  const char* fwd = "\u2192";
  const char* bwd = "\u2190";
  const float aw = ImGui::CalcTextSize(fwd).x;
  if (now.forward != PassState::none) dl->AddText(ImVec2(x, y), pass_color(now.forward), fwd);
  if (now.backward != PassState::none)
    dl->AddText(ImVec2(x + aw + 2, y), pass_color(now.backward), bwd);
}

// Rank r's colour, faded when the block runs but r is not in it yet (or any more).
ImU32 slice_color(const Splits& s, const SplitsMoment::Block& now, int r) {
  const ImU32 c = rank_color(r, s.ranks);
  const bool out = now.running() && r < static_cast<int>(now.ranks.size()) && !now.ranks[r];
  return out ? with_alpha(c, 0.3f) : c;
}

// The tensor's rectangle at (p0, p1): its ranks' slices, head lines, sheets of partial sums.
void draw_tensor(ImDrawList* dl, const Splits& s, const SplitBlock& b,
                 const SplitsMoment::Block& now, ImVec2 p0, ImVec2 p1) {
  const bool filled = b.kind == SplitBlockKind::weight || now.filled;
  const float alpha = filled ? 1.0f : 0.18f;
  const Extent e = extent(b);
  const float w = p1.x - p0.x, h = p1.y - p0.y;
  switch (b.split) {
    case SplitHow::none:
      dl->AddRectFilled(p0, p1, with_alpha(kReplicated, alpha));
      break;
    case SplitHow::partial: {
      // One sheet per rank, each a little lower and to the right: N partial sums of Y.
      const int n = std::max(1, s.ranks);
      const float off = std::min(6.0f, std::min(w, h) * 0.25f / static_cast<float>(n));
      for (int r = n - 1; r >= 0; --r) {
        const float d = off * static_cast<float>(r);
        const ImVec2 a(p0.x + d, p0.y + d), z(p1.x - off * (n - 1) + d, p1.y - off * (n - 1) + d);
        dl->AddRectFilled(a, z, with_alpha(slice_color(s, now, r), alpha));
        dl->AddRect(a, z, IM_COL32(0, 0, 0, 120));
      }
      break;
    }
    default: {
      // The ranges cut the picture's rows (a row split) or columns (the rest).
      const bool by_rows = b.axis == 0 && b.split == SplitHow::rows;
      const double along = std::max(1.0, static_cast<double>(b.shape[b.axis]));
      dl->AddRectFilled(p0, p1, kEmpty);
      for (std::size_t r = 0; r < b.ranges.size(); ++r) {
        const float f0 = static_cast<float>(b.ranges[r].begin / along),
                    f1 = static_cast<float>(b.ranges[r].end / along);
        const ImU32 c = with_alpha(slice_color(s, now, static_cast<int>(r)), alpha);
        if (by_rows)
          dl->AddRectFilled(ImVec2(p0.x, p0.y + h * f0), ImVec2(p1.x, p0.y + h * f1), c);
        else
          dl->AddRectFilled(ImVec2(p0.x + w * f0, p0.y), ImVec2(p0.x + w * f1, p1.y), c);
      }
      // Lines between heads: every head_shape[axis] along the split (a picture by head: every
      // head's columns), when they are at least 3 pixels apart.
      double per_head = 0;
      if (e.head_cols > 0)
        per_head = e.head_cols / e.cols;
      else if (b.axis >= 0 && static_cast<std::size_t>(b.axis) < b.head_shape.size() &&
               b.head_shape.size() == b.shape.size())
        per_head = static_cast<double>(b.head_shape[b.axis]) / along;
      const float span = by_rows ? h : w;
      if (per_head > 0 && per_head * span >= 3)
        for (double f = per_head; f < 1 - 1e-9; f += per_head) {
          const float at = static_cast<float>(f) * span;
          if (by_rows)
            dl->AddLine(ImVec2(p0.x, p0.y + at), ImVec2(p1.x, p0.y + at), kHeadLine);
          else
            dl->AddLine(ImVec2(p0.x + at, p0.y), ImVec2(p0.x + at, p1.y), kHeadLine);
        }
    }
  }
  dl->AddRect(p0, p1, kEdge);
  if (now.running())
    dl->AddRect(ImVec2(p0.x - 2, p0.y - 2), ImVec2(p1.x + 2, p1.y + 2), kHighlight, 0, 0, 2.5f);
}

// The state of f's or g's collectives: running while either pass's runs, done once one is over
// (the passes without a collective, "none", do not count).
PassState operator_state(const SplitsMoment::Block& now) {
  const PassState f = now.forward, b = now.backward;
  if (f == PassState::running || b == PassState::running) return PassState::running;
  if (f == PassState::done || b == PassState::done) return PassState::done;
  return f == PassState::none && b == PassState::none ? PassState::none : PassState::pending;
}

// f or g at the centre c: a circle lit by its collectives' state, its name, its two passes.
void draw_operator(ImDrawList* dl, const SplitBlock& b, const SplitsMoment::Block& now, ImVec2 c,
                   float radius, float w, float small) {
  const PassState reduce = operator_state(now);
  if (reduce == PassState::running)
    dl->AddCircleFilled(c, radius + 4, with_alpha(kHighlight, 0.35f));
  const ImU32 fill = reduce == PassState::running ? kHighlight
                     : reduce == PassState::done  ? kDone
                                                  : IM_COL32(45, 48, 56, 255);
  dl->AddCircleFilled(c, radius, fill);
  dl->AddCircle(c, radius, reduce == PassState::pending ? kDim : kText, 0, 1.5f);
  const ImU32 letter =
      reduce == PassState::running || reduce == PassState::done ? IM_COL32(20, 20, 20, 255) : kText;
  const ImVec2 ts = ImGui::CalcTextSize(b.name.c_str());
  dl->AddText(ImVec2(c.x - ts.x * 0.5f, c.y - ts.y * 0.5f), letter, b.name.c_str());
  float y = c.y + radius + 3;
  const auto line = [&](const char* arrow, const std::string& what, PassState st) {
    if (what.empty()) return;
    const ImU32 col = st == PassState::none ? kDim : pass_color(st);
    centred_text(dl, c.x, y, w, col, std::string(arrow) + " " + what, small);
    y += small + 1;
  };
  line("\u2192", b.forward, now.forward);
  line("\u2190", b.backward, now.backward);
}

void arrow(ImDrawList* dl, float x0, float x1, float y) {
  if (x1 - x0 < 6) return;
  dl->AddLine(ImVec2(x0, y), ImVec2(x1 - 1, y), kArrow, 1.5f);
  dl->AddTriangleFilled(ImVec2(x1, y), ImVec2(x1 - 5, y - 3.5f), ImVec2(x1 - 5, y + 3.5f), kArrow);
}

// The line above the picture: what runs now, on which ranks.
std::string status(const Splits& s, const SplitsMoment& now) {
  if (now.active < 0) {
    bool any_done = false;
    for (const auto& b : now.blocks)
      any_done = any_done || b.forward == PassState::done || b.backward == PassState::done;
    return any_done ? "between the layer's phases" : "before the layer";
  }
  const SplitBlock& b = s.blocks[static_cast<std::size_t>(now.active)];
  const auto& blk = now.blocks[static_cast<std::size_t>(now.active)];
  std::string on;
  int count = 0;
  for (int r = 0; r < static_cast<int>(blk.ranks.size()); ++r)
    if (blk.ranks[r]) on += (count++ ? " r" : "r") + std::to_string(r);
  if (count == s.ranks) on = "every rank";
  const std::string pass = now.backward ? "backward" : "forward";
  if (b.is_operator())
    return pass + ": " + b.name + "'s " + (now.backward ? b.backward : b.forward) + ", on " + on;
  const std::string& phase = now.backward ? b.backward_phase : b.forward_phase;
  return pass + ": " + phase + ", on " + on;
}

}  // namespace

std::string splits_nothing_to_show(Document& doc) {
  const SplitsIndex& index = doc.derived<SplitsIndex>(build_splits_index);
  if (!index.splits.empty()) return {};
  std::string why =
      "this trace declares no tensor-parallel splits (otherData.splits; lessons 12 and 13 write "
      "them)";
  if (!index.splits.error.empty()) why += ": " + index.splits.error;
  return why;
}

void draw_splits(PanelContext& ctx) {
  const SplitsIndex& index = ctx.doc.derived<SplitsIndex>(build_splits_index);
  const Splits& s = index.splits;
  if (s.empty()) {
    ImGui::TextWrapped("%s", splits_nothing_to_show(ctx.doc).c_str());
    return;
  }
  const SplitsMoment now = splits_at(index, ctx.now);
  draw_caption(ctx);  // the step's caption: Splits stands in Topology's place in the layout
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();

  // Header: the formula, the ranks' colours, what runs now.
  ImGui::Text("%s, over %d rank%s", s.formula.empty() ? s.layer.c_str() : s.formula.c_str(),
              s.ranks, s.ranks == 1 ? "" : "s");
  const int shown = std::min(s.ranks, 16);
  for (int r = 0; r < shown; ++r) {
    ImGui::SameLine(0, r == 0 ? 12 : 6);
    if (ImGui::GetContentRegionAvail().x < font * 2.6f) ImGui::NewLine();  // the legend wraps
    const ImVec2 p = ImGui::GetCursorScreenPos();
    dl->AddRectFilled(ImVec2(p.x, p.y + 3), ImVec2(p.x + font - 4, p.y + font - 1),
                      rank_color(r, s.ranks));
    ImGui::Dummy(ImVec2(font - 2, font));
    ImGui::SameLine(0, 2);
    ImGui::Text("r%d", r);
  }
  if (shown < s.ranks) {
    ImGui::SameLine();
    ImGui::TextDisabled("...");
  }
  // In the text colour: yellow is kept for what runs in the picture (the tests count it).
  ImGui::PushStyleColor(ImGuiCol_Text, now.active >= 0 ? kText : kDim);
  ImGui::TextUnformatted(status(s, now).c_str());
  ImGui::PopStyleColor();

  // The picture: columns in rows, each column's blocks stacked.
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float area_w = std::max(60.0f, avail.x), area_h = std::max(60.0f, avail.y - 2);
  ImGui::InvisibleButton("##splits", ImVec2(area_w, area_h));
  const bool hovered = ImGui::IsItemHovered();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  Lines lines;
  lines.name = font + 2;
  lines.small_size = std::max(9.0f, font * 0.82f);
  lines.small = lines.small_size + 1;
  const Flow f = flow(s, area_w, area_h, lines, font * 4.5f);
  const std::vector<Column>& cols = f.cols;
  const float arrow_w = ImGui::CalcTextSize("\u2192\u2190").x + 6;

  int hovered_block = -1;
  for (std::size_t ri = 0; ri < f.rows.size(); ++ri) {
    float x = origin.x;
    const float y_row = origin.y + f.row_h * static_cast<float>(ri);
    float prev_right = -1;  // the right edge of the previous column's picture, for the arrow
    for (int ci : f.rows[ri]) {
      const Column& c = cols[ci];
      const float cw = f.unit * c.units;
      const float cx = x + cw * 0.5f;
      const float item_h = f.row_h / static_cast<float>(c.blocks.size());
      float left = cx, right = cx, mid_y = y_row + f.row_h * 0.5f;
      for (std::size_t k = 0; k < c.blocks.size(); ++k) {
        const int bi = c.blocks[k];
        const SplitBlock& b = s.blocks[bi];
        const SplitsMoment::Block& bn = now.blocks[bi];
        const float y0 = y_row + item_h * static_cast<float>(k);
        ImVec2 p0, p1;
        if (b.is_operator()) {
          const float radius = std::clamp(std::min(cw - f.gap, item_h) * 0.2f, 8.0f, 22.0f);
          const ImVec2 centre(cx, y0 + item_h * 0.5f - font);
          draw_operator(dl, b, bn, centre, radius, cw, lines.small_size);
          p0 = ImVec2(centre.x - radius, centre.y - radius);
          p1 = ImVec2(centre.x + radius, centre.y + radius);
        } else {
          const Extent e = extent(b);
          const float w = std::max(kMinSide, static_cast<float>(e.cols * f.scale));
          const float h = std::max(kMinSide, static_cast<float>(e.rows * f.scale));
          const float top = y0 + lines.name + (item_h - lines.labels() - h) * 0.5f;
          p0 = ImVec2(cx - w * 0.5f, top);
          p1 = ImVec2(cx + w * 0.5f, top + h);
          // name above (with its passes' marks beside it), whole shape and one rank's below
          const bool marks = !b.forward_phase.empty() || !b.backward_phase.empty();
          const float name_w = ImGui::CalcTextSize(b.name.c_str()).x;
          const float name_x = marks ? cx - arrow_w * 0.5f : cx;
          centred_text(dl, name_x, p0.y - lines.name, cw - (marks ? arrow_w : 0),
                       bn.running() ? kHighlight : kText, b.name);
          if (marks)
            pass_marks(dl, name_x + std::min(name_w, cw - arrow_w) * 0.5f + 4, p0.y - lines.name,
                       bn);
          draw_tensor(dl, s, b, bn, p0, p1);
          std::string whole = dims(b.shape), each;
          if (b.split == SplitHow::partial)
            each = std::to_string(s.ranks) + " partial sums";
          else if (b.split != SplitHow::none)
            each = "each " + dims(b.rank_shape);
          centred_text(dl, cx, p1.y + 2, cw, kDim, whole, lines.small_size);
          if (!each.empty())
            centred_text(dl, cx, p1.y + 2 + lines.small, cw, kDim, each, lines.small_size);
        }
        if (c.blocks.size() == 1) mid_y = (p0.y + p1.y) * 0.5f;
        left = std::min(left, p0.x), right = std::max(right, p1.x);
        if (hovered && mouse.x >= x && mouse.x < x + cw && mouse.y >= y0 && mouse.y < y0 + item_h)
          hovered_block = bi;
      }
      if (prev_right >= 0 && !c.joined) arrow(dl, prev_right + 3, left - 3, mid_y);
      prev_right = right;
      x += cw;
    }
  }
  if (hovered_block >= 0)
    tooltip(s, s.blocks[hovered_block], now.blocks[static_cast<std::size_t>(hovered_block)]);
}

}  // namespace distlab::viewer
