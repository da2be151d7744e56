// panel_topology.cpp — (being written)
#include <imgui.h>

#include "panels.hpp"

namespace distlab::viewer {

void draw_topology(PanelContext& ctx) {
  (void)ctx;
  ImGui::TextUnformatted("topology: to come");
}

}  // namespace distlab::viewer
