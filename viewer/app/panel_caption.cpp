// panel_caption.cpp — the step's caption (caption.hpp), drawn at the top of the Topology panel:
// what the step's messages do, in one sentence, then the lesson's phase texts for the moment.
// Not a panel of its own: it reads the same moment and sits above the ranks it describes.
#include <imgui.h>

#include <string>

#include "viewer/app/panels.hpp"
#include "viewer/model/caption.hpp"

namespace distlab::viewer {

namespace {

constexpr ImU32 kCaptionText = IM_COL32(250, 225, 150, 255);

// The index, built once per model, and the caption of the moment last drawn: the steps clock
// changes it once per beat; the measured clock's phase texts follow the time.
struct CaptionCache {
  CaptionIndex index;
  bool valid = false;
  Clock clock = Clock::steps;
  int beat = -1;
  double time_us = 0;
  Caption caption;
};

CaptionCache build_cache(const TraceModel& m) {
  CaptionCache c;
  c.index = index_captions(m);
  return c;
}

}  // namespace

void draw_caption(PanelContext& ctx) {
  const TraceModel& m = ctx.model();
  CaptionCache& c = ctx.doc.derived<CaptionCache>(build_cache);
  const int beat = caption_beat(m, ctx.now);
  if (!c.valid || c.clock != ctx.now.clock || c.beat != beat ||
      (ctx.now.clock == Clock::measured && c.time_us != ctx.now.time_us)) {
    c.caption = caption_at(m, c.index, ctx.now);
    c.valid = true;
    c.clock = ctx.now.clock;
    c.beat = beat;
    c.time_us = ctx.now.time_us;
  }
  ImGui::PushStyleColor(ImGuiCol_Text, kCaptionText);
  ImGui::TextWrapped("%s", c.caption.body().c_str());
  ImGui::PopStyleColor();
  for (const std::string& text : c.caption.phase_texts) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%s", text.c_str());
    ImGui::PopStyleColor();
  }
}

}  // namespace distlab::viewer
