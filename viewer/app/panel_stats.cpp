// panel_stats.cpp — (being written)
#include <imgui.h>

#include "panels.hpp"

namespace distlab::viewer {

void draw_stats(PanelContext& ctx) {
  (void)ctx;
  ImGui::TextUnformatted("stats: to come");
}

}  // namespace distlab::viewer
