// panel_shards.cpp — which pieces of each buffer every rank holds, and whose data is in them.
//
// One block per buffer the trace declares (otherData.buffers), one row per rank, one cell per
// chunk, from the shard replay (shard_replay.hpp, ShardState):
//   empty cell      dark, outlined
//   held cell       the chunk's colour (the packets' colours in Topology). In a buffer that is
//                   reduced into, the colour rises with the ranks whose data is summed in it
//                   ("3/4"): a ring reduce-scatter fills one cell per rank, the all-gather then
//                   copies the full cells around. In a buffer that is only copied, the cell is
//                   full and names the rank whose data it is ("r0").
//   outlined        a message landing in that cell right now; its bar shows how far it is
// Hover a cell for the list of ranks.
#include <imgui.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "core/base/units.hpp"
#include "viewer/app/colors.hpp"
#include "viewer/app/panels.hpp"
#include "viewer/model/panel_content.hpp"
#include "viewer/model/shard_replay.hpp"
#include "viewer/model/stats.hpp"

namespace distlab::viewer {

namespace {

constexpr ImU32 kEmptyFill = IM_COL32(32, 34, 40, 255);
constexpr ImU32 kEmptyEdge = IM_COL32(75, 80, 92, 255);
constexpr ImU32 kShadow = IM_COL32(0, 0, 0, 200);
constexpr float kMaxBarWidth = 440;  // a buffer's row; its chunks split it
constexpr float kMaxCellHeight = 24, kMinCell = 3;
constexpr float kBlockGap = 4;  // between two buffers

// Per loaded model: which declared buffer each string id names, which are reduced into, and
// which buffer each step moves.
struct Buffers {
  std::map<std::uint32_t, int> by_string;
  std::vector<bool> reduced;
  std::map<int, int> by_step;  // step id -> the buffer of its first message
};

Buffers build_buffers(const TraceModel& m) {
  Buffers b;
  b.reduced.assign(m.info.buffers.size(), false);
  for (std::uint32_t s = 1; s < m.strings.size(); ++s)
    for (std::size_t i = 0; i < m.info.buffers.size(); ++i)
      if (m.strings[s] == m.info.buffers[i].name) b.by_string.emplace(s, static_cast<int>(i));
  for (const Message& msg : m.messages) {
    const auto it = b.by_string.find(msg.buffer);
    if (it == b.by_string.end()) continue;
    if (msg.apply == ApplyKind::reduce) b.reduced[it->second] = true;
    if (msg.step >= 0) b.by_step.emplace(msg.step, it->second);
  }
  return b;
}

// A message landing in a cell now.
struct Incoming {
  int message = -1;
  double progress = 0;
};

// "r0 r1 r3", or "3 of 128 ranks" when the mask cannot say (past 64 ranks).
std::string rank_list(const ChunkState& c, int ranks) {
  if (ranks > 64 || c.mask == 0)
    return std::to_string(c.count) + " of " + std::to_string(ranks) + " ranks";
  std::string out;
  for (int r = 0; r < ranks; ++r)
    if (c.mask >> r & 1) out += (out.empty() ? "r" : " r") + std::to_string(r);
  return out;
}

void text_centered(ImDrawList* dl, ImVec2 a, ImVec2 b, const char* text) {
  const ImVec2 ts = ImGui::CalcTextSize(text);
  if (ts.x > b.x - a.x - 2 || ts.y > b.y - a.y + 2) return;  // does not fit: the colour says it
  const ImVec2 p((a.x + b.x - ts.x) * 0.5f, (a.y + b.y - ts.y) * 0.5f);
  dl->AddText(ImVec2(p.x + 1, p.y + 1), kShadow, text);
  dl->AddText(p, kText, text);
}

// One cell [a, z): empty, or held in its chunk's colour. A buffer that is reduced into fills it
// to the share of ranks summed in ("3/4"); one that is only copied fills it and names whose
// data it is ("r0").
void draw_cell(ImDrawList* dl, ImVec2 a, ImVec2 z, const ChunkState& cs, ImU32 color, bool reduced,
               int ranks) {
  char text[24] = "";
  if (!cs.held) {
    dl->AddRectFilled(a, z, kEmptyFill);
    if (z.x - a.x >= 6 && z.y - a.y >= 6) dl->AddRect(a, z, kEmptyEdge);
    return;
  }
  if (reduced) {
    const float level =
        std::clamp(static_cast<float>(cs.count) / static_cast<float>(ranks), 0.0f, 1.0f);
    dl->AddRectFilled(a, z, with_alpha(color, 0.22f));
    dl->AddRectFilled(ImVec2(a.x, z.y - (z.y - a.y) * level), z, color);
    std::snprintf(text, sizeof text, "%d/%d", cs.count, ranks);
    if (ImGui::CalcTextSize(text).x > z.x - a.x - 2)
      std::snprintf(text, sizeof text, "%d", cs.count);
  } else {
    dl->AddRectFilled(a, z, color);
    if (std::popcount(cs.mask) == 1)
      std::snprintf(text, sizeof text, "r%d", std::countr_zero(cs.mask));
    else
      std::snprintf(text, sizeof text, "%d", cs.count);
  }
  text_centered(dl, a, z, text);
}

void cell_tooltip(const TraceModel& m, const BufferInfo& info, const ChunkState& c, int rank,
                  int chunk, const Incoming& in) {
  ImGui::BeginTooltip();
  ImGui::Text("r%d  %s  chunk %d of %d", rank, info.name.c_str(), chunk, info.chunks);
  if (c.held)
    ImGui::Text("holds the data of %s (%d of %d)", rank_list(c, m.world_size()).c_str(), c.count,
                m.world_size());
  else
    ImGui::TextDisabled("not held");
  if (in.message >= 0) {
    const Message& msg = m.messages[in.message];
    ImGui::Text("arriving now from r%d: %s, %s, %.0f%% of the way", msg.src,
                format_bytes(static_cast<double>(std::max<std::int64_t>(0, msg.bytes))).c_str(),
                msg.apply == ApplyKind::reduce ? "reduce" : "copy", in.progress * 100);
  }
  ImGui::EndTooltip();
}

}  // namespace

void draw_shards(PanelContext& ctx) {
  const TraceModel& m = ctx.model();
  const auto& infos = m.info.buffers;
  const int n = m.world_size();
  if (!shards_have_content(m)) {  // drawn only when asked for by name (--panel shards)
    ImGui::TextWrapped("%s", shards_empty_reason(m).c_str());
    return;
  }
  const Buffers& meta = ctx.doc.derived<Buffers>(build_buffers);
  const ShardState& state = ctx.doc.shards(ctx.now);
  // A child region: a buffer of more chunks than fit at the smallest cells scrolls sideways.
  int most_chunks = 1;
  for (const BufferState& b : state.buffers) most_chunks = std::max(most_chunks, b.chunks);
  const bool wide = static_cast<float>(most_chunks) * kMinCell > kMaxBarWidth;
  ImGui::BeginChild("##shards", ImVec2(0, 0), false,
                    wide ? ImGuiWindowFlags_HorizontalScrollbar : 0);
  if (state.train_step >= 0)  // the replay starts over at each training step (train_steps.hpp)
    ImGui::TextDisabled("training step %d: this iteration's exchange only", state.train_step + 1);

  // What lands where right now; the buffer that is moving is the one to watch.
  std::vector<std::map<std::pair<int, int>, Incoming>> incoming(infos.size());
  std::vector<bool> active(infos.size(), false);
  for (const InFlight& f : in_flight(m, ctx.now)) {
    const Message& msg = m.messages[f.message];
    const auto it = meta.by_string.find(msg.buffer);
    if (it == meta.by_string.end() || msg.dst < 0 || msg.dst >= n) continue;
    const int b = it->second;
    active[b] = true;
    const int c0 = msg.chunk >= 0 ? msg.chunk : 0;
    const int c1 = msg.chunk >= 0 ? std::max(msg.chunk_end, msg.chunk + 1) : infos[b].chunks;
    const int replayed = b < static_cast<int>(state.buffers.size()) ? state.buffers[b].chunks : 0;
    for (int c = c0; c < std::min(c1, replayed); ++c)
      incoming[b][{msg.dst, c}] = {static_cast<int>(f.message), f.progress};
  }
  // The selected message's cells at its receiver get a thin outline.
  const int selected = ctx.doc.selection.message;
  const Message* sel = selected >= 0 && selected < static_cast<int>(m.messages.size())
                           ? &m.messages[selected]
                           : nullptr;
  int sel_buffer = -1;
  if (sel)
    if (const auto it = meta.by_string.find(sel->buffer); it != meta.by_string.end())
      sel_buffer = it->second;

  // The buffer to watch: the one moving now, else the one the current step moved.
  int focus = -1;
  for (std::size_t b = 0; b < active.size(); ++b)
    if (active[b]) focus = static_cast<int>(b);
  if (focus < 0)
    if (const auto it = meta.by_step.find(ctx.now.step); it != meta.by_step.end())
      focus = it->second;

  // Cell sizes: each buffer is one bar split into its chunks. Rows shrink so that every buffer
  // fits the panel; when they would get too thin to read, the buffer to watch keeps readable
  // rows and the others share what is left (the panel scrolls when even that does not fit).
  char widest[16];
  std::snprintf(widest, sizeof widest, "r%d", n - 1);
  const float label_w = ImGui::CalcTextSize(widest).x + 8;
  const float line = ImGui::GetTextLineHeightWithSpacing(), gap_y = ImGui::GetStyle().ItemSpacing.y;
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float bar = std::clamp(avail.x - label_w - 8, 60.0f, kMaxBarWidth);
  const float blocks = static_cast<float>(infos.size());
  // per buffer: its title line, its rows, the space after; then the legend line
  const float rows_h = avail.y - blocks * (line + kBlockGap + 2 * gap_y) - line;
  float pitch = rows_h / (blocks * static_cast<float>(n)), focus_pitch = pitch;
  const float readable = ImGui::GetFontSize() + 4;
  if (pitch < readable && focus >= 0 && infos.size() > 1) {
    focus_pitch = std::clamp(rows_h * 0.6f / static_cast<float>(n), pitch, readable);
    pitch = (rows_h - focus_pitch * static_cast<float>(n)) / ((blocks - 1) * static_cast<float>(n));
  }
  const auto row_gap_of = [](float p) { return p >= 10 ? 2.0f : 0.0f; };
  const auto cell_h_of = [&](float p) {
    return std::clamp(p - row_gap_of(p), kMinCell, kMaxCellHeight);
  };

  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const float pulse = 0.6f + 0.4f * std::sin(static_cast<float>(ImGui::GetTime()) * 6.0f);
  for (std::size_t b = 0; b < infos.size() && b < state.buffers.size(); ++b) {
    const BufferInfo& info = infos[b];
    const BufferState& bs = state.buffers[b];
    if (bs.chunks == 0) {  // the model does not replay buffers of more than 2^24 cells
      ImGui::TextDisabled("%s: %d chunks on %d ranks, too many cells to replay", info.name.c_str(),
                          info.chunks, n);
      continue;
    }
    const bool reduced = meta.reduced[b];
    const float p = static_cast<int>(b) == focus ? focus_pitch : pitch;
    const float cell_h = cell_h_of(p), row_gap = cell_h >= 8 ? row_gap_of(p) : 0.0f;
    const float cell_w = std::max(kMinCell, bar / static_cast<float>(bs.chunks));
    const float col_gap = cell_w >= 8 ? 2.0f : 0.0f;

    ImGui::PushID(static_cast<int>(b));
    if (active[b])
      ImGui::TextColored(ImVec4(1.0f, 0.9f, 0.25f, 1.0f), "%s", info.name.c_str());
    else
      ImGui::TextUnformatted(info.name.c_str());
    ImGui::SameLine();
    ImGui::TextDisabled("%s element%s in %d chunk%s%s%s", format_count(info.length).c_str(),
                        info.length == 1 ? "" : "s", info.chunks, info.chunks == 1 ? "" : "s",
                        reduced ? " \u00b7 reduced into" : " \u00b7 copied",
                        active[b] ? " \u00b7 moving now" : "");

    const ImVec2 top = ImGui::GetCursorScreenPos();
    const float block_w = label_w + cell_w * static_cast<float>(bs.chunks);
    const float block_h = (cell_h + row_gap) * static_cast<float>(n);
    ImGui::InvisibleButton("##cells", ImVec2(block_w, std::max(block_h, 1.0f)));
    const bool hovered = ImGui::IsItemHovered();
    if (ImGui::IsItemVisible()) {
      for (int r = 0; r < n; ++r) {
        const float y = top.y + static_cast<float>(r) * (cell_h + row_gap);
        if (cell_h >= ImGui::GetFontSize() * 0.8f ||
            r % std::max(1, static_cast<int>(ImGui::GetFontSize() / cell_h) + 1) == 0) {
          char label[16];
          std::snprintf(label, sizeof label, "r%d", r);
          dl->AddText(ImVec2(top.x, y + (cell_h - ImGui::GetFontSize()) * 0.5f), kDim, label);
        }
        for (int c = 0; c < bs.chunks; ++c) {
          const ImVec2 a(top.x + label_w + static_cast<float>(c) * cell_w, y);
          const ImVec2 z(a.x + cell_w - col_gap, y + cell_h);
          const ChunkState& cs = bs.at(r, c);
          draw_cell(dl, a, z, cs, chunk_color(c, bs.chunks), reduced, n);
          const auto in = incoming[b].find({r, c});
          if (in != incoming[b].end()) {  // landing now: outline, and a bar for how far it is
            dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(z.x + 1, z.y + 1),
                        with_alpha(kHighlight, pulse), 0, 0, 2.0f);
            dl->AddRectFilled(a,
                              ImVec2(a.x + (z.x - a.x) * static_cast<float>(in->second.progress),
                                     a.y + std::max(2.0f, cell_h * 0.15f)),
                              kHighlight);
          }
          if (static_cast<int>(b) == sel_buffer && sel->dst == r &&
              (sel->chunk < 0 || (c >= sel->chunk && c < std::max(sel->chunk_end, sel->chunk + 1))))
            dl->AddRect(ImVec2(a.x - 2, a.y - 2), ImVec2(z.x + 2, z.y + 2), kHighlight, 0, 0, 1.0f);
          if (hovered && mouse.x >= a.x && mouse.x < a.x + cell_w && mouse.y >= a.y &&
              mouse.y < a.y + cell_h + row_gap)
            cell_tooltip(m, info, cs, r, c, in != incoming[b].end() ? in->second : Incoming{});
        }
      }
    }
    ImGui::Dummy(ImVec2(0, kBlockGap));
    ImGui::PopID();
  }
  ImGui::TextDisabled("colour = chunk \u00b7 fill = ranks summed in \u00b7 yellow = arriving now");
  ImGui::EndChild();
}

}  // namespace distlab::viewer
