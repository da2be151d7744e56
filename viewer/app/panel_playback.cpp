// panel_playback.cpp — (being written)
#include <imgui.h>

#include "panels.hpp"

namespace distlab::viewer {

void draw_playback(PanelContext& ctx) {
  (void)ctx;
  ImGui::TextUnformatted("playback: to come");
}

}  // namespace distlab::viewer
