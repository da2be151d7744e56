// panel_timeline.cpp — (being written)
#include <imgui.h>

#include "panels.hpp"

namespace distlab::viewer {

void draw_timeline(PanelContext& ctx) {
  (void)ctx;
  ImGui::TextUnformatted("timeline: to come");
}

}  // namespace distlab::viewer
