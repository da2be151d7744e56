// panel_playback.cpp — the Playback strip: one row under the timeline.
//
//   [|<<] [|<] [>] [>|]  (o) steps ( ) measured  speed [1x]  [==|== scrub ==]  step 3 / 6  1.23 ms
//
// start, previous step, play / pause, next step (the keys Home, Left, Space, Right do the same,
// view.cpp); the clock switch; the speed (log scale, 0.25x to 8x); the scrub bar over the beats
// (steps clock, a tick per step) or over the trace's time (measured clock, a tick per step
// frame); and where playback stands. Everything it changes is doc.playback (playback.hpp).
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "viewer/app/colors.hpp"
#include "viewer/app/panels.hpp"

namespace distlab::viewer {

namespace {

enum class Icon { start, prev, play, pause, next };

// A button with a drawn icon (the fonts carry no media glyphs); true when clicked.
bool icon_button(const char* id, Icon icon, const char* tip) {
  const float h = ImGui::GetFrameHeight();
  const bool clicked = ImGui::Button(id, ImVec2(std::round(h * 1.5f), h));
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tip);
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  const ImVec2 c((a.x + b.x) * 0.5f, (a.y + b.y) * 0.5f);
  const float s = h * 0.26f;  // half the icon's height
  ImDrawList* dl = ImGui::GetWindowDrawList();
  auto left = [&](float x) {
    dl->AddTriangleFilled(ImVec2(x, c.y), ImVec2(x + s * 1.2f, c.y - s),
                          ImVec2(x + s * 1.2f, c.y + s), kText);
  };
  auto right = [&](float x) {
    dl->AddTriangleFilled(ImVec2(x + s * 1.2f, c.y), ImVec2(x, c.y - s), ImVec2(x, c.y + s), kText);
  };
  auto bar = [&](float x) {
    dl->AddRectFilled(ImVec2(x, c.y - s), ImVec2(x + s * 0.35f, c.y + s), kText);
  };
  // clang-format off
  switch (icon) {
    case Icon::start: bar(c.x - s * 1.6f); left(c.x - s * 1.2f); left(c.x); break;
    case Icon::prev: bar(c.x - s * 0.9f); left(c.x - s * 0.5f); break;
    case Icon::play: right(c.x - s * 0.5f); break;
    case Icon::pause: bar(c.x - s * 0.55f); bar(c.x + s * 0.2f); break;
    case Icon::next: right(c.x - s * 0.7f); bar(c.x + s * 0.55f); break;
  }
  // clang-format on
  return clicked;
}

// Marks on the scrub bar just drawn: a tick per step (steps clock) or per step frame (measured).
void scrub_ticks(const TraceModel& m, Clock clock, double lo, double hi) {
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  const float grab = ImGui::GetStyle().GrabMinSize * 0.5f + ImGui::GetStyle().FramePadding.y;
  const float x0 = a.x + grab, x1 = b.x - grab;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  auto tick = [&](double v) {
    const float x = x0 + static_cast<float>((v - lo) / (hi - lo)) * (x1 - x0);
    dl->AddLine(ImVec2(x, b.y - 5), ImVec2(x, b.y - 1), with_alpha(kText, 0.45f));
  };
  if (!(hi > lo)) return;
  if (clock == Clock::steps) {
    if (hi <= (x1 - x0) / 4)
      for (int k = 1; k < static_cast<int>(hi); ++k) tick(k);
  } else if (static_cast<float>(m.steps.size()) <= (x1 - x0) / 4) {
    for (const StepFrame& f : m.steps) tick(f.ts - m.t_begin);
  }
}

// The measured clock's scrub unit: us, ms or s, by the trace's length.
void time_unit(double extent_us, double& scale, const char*& unit) {
  if (extent_us >= 1e6)
    scale = 1e6, unit = "s";
  else if (extent_us >= 1e3)
    scale = 1e3, unit = "ms";
  else
    scale = 1, unit = "us";
}

}  // namespace

void draw_playback(PanelContext& ctx) {
  Document& doc = ctx.doc;
  const TraceModel& m = doc.model;
  Playback& pb = doc.playback;
  const Moment& now = ctx.now;
  const int last = last_beat(m);
  const bool at_end =
      pb.clock == Clock::steps ? now.beat >= last : now.time_us >= active_range(m).end;
  const bool narrow = ImGui::GetContentRegionAvail().x < 1000;  // side by side: labels go
  const float gap = narrow ? 10.0f : 18.0f;

  if (icon_button("##start", Icon::start, "Back to the start (Home)")) pb.reset(m);
  ImGui::SameLine();
  if (icon_button("##prev", Icon::prev, "Previous step (Left)"))
    pb.playing = false, pb.prev_step(m);
  ImGui::SameLine();
  if (icon_button("##play", pb.playing ? Icon::pause : Icon::play,
                  pb.playing ? "Pause (Space)" : "Play (Space)")) {
    if (!pb.playing && at_end) pb.reset(m);  // play again from the start
    pb.playing = !pb.playing;
  }
  ImGui::SameLine();
  if (icon_button("##next", Icon::next, "Next step (Right)")) pb.playing = false, pb.next_step(m);

  ImGui::SameLine(0, gap);
  if (ImGui::RadioButton("steps", pb.clock == Clock::steps)) pb.set_clock(m, Clock::steps);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("One beat per algorithm step: every step takes the same time");
  ImGui::SameLine();
  if (ImGui::RadioButton("measured", pb.clock == Clock::measured)) pb.set_clock(m, Clock::measured);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("The trace's own timestamps: slow steps take longer");

  ImGui::SameLine(0, gap);
  if (!narrow) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("speed");
    ImGui::SameLine();
  }
  ImGui::SetNextItemWidth(ImGui::CalcTextSize("0.25x").x * 2.2f);
  float speed = static_cast<float>(pb.speed);
  if (ImGui::SliderFloat("##speed", &speed, 0.25f, 8.0f, "%.2gx",
                         ImGuiSliderFlags_Logarithmic | ImGuiSliderFlags_AlwaysClamp))
    pb.speed = speed;
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(pb.clock == Clock::steps ? "Steps per second"
                                               : "x 1: the whole trace plays in 10 s");

  // The readout takes the right end; the scrub bar the room between.
  char readout[96];
  const int done = static_cast<int>(std::floor(now.beat + 1e-9));  // steps done (now.step: an id)
  std::snprintf(readout, sizeof readout, "step %d / %d   %.3f ms", done, last,
                (now.time_us - m.t_begin) / 1e3);
  ImGui::SameLine(0, gap);
  ImGui::SetNextItemWidth(
      std::max(ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize(readout).x - gap, 60.0f));
  if (pb.clock == Clock::steps) {
    double beat = now.beat;
    const double lo = 0, hi = last;
    if (ImGui::SliderScalar("##scrub", ImGuiDataType_Double, &beat, &lo, &hi, "step %.2f"))
      pb.seek_beat(m, beat);
    scrub_ticks(m, pb.clock, lo, hi);
  } else {
    double scale = 1;
    const char* unit = "us";
    time_unit(m.t_end - m.t_begin, scale, unit);
    char format[32];
    std::snprintf(format, sizeof format, "%%.3f %s", unit);
    double t = (now.time_us - m.t_begin) / scale;
    const double lo = (active_range(m).begin - m.t_begin) / scale,
                 hi = (active_range(m).end - m.t_begin) / scale;
    if (ImGui::SliderScalar("##scrub", ImGuiDataType_Double, &t, &lo, &hi, format))
      pb.seek_time(m, m.t_begin + t * scale);
    scrub_ticks(m, pb.clock, lo * scale, hi * scale);
  }
  if (ImGui::IsItemHovered() && !ImGui::IsItemActive())
    ImGui::SetTooltip("Drag to move through the trace");
  ImGui::SameLine(0, gap);
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(readout);
}

}  // namespace distlab::viewer
