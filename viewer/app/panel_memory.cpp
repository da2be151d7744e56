// panel_memory.cpp — (being written)
#include <imgui.h>

#include "panels.hpp"

namespace distlab::viewer {

void draw_memory(PanelContext& ctx) {
  (void)ctx;
  ImGui::TextUnformatted("memory: to come");
}

}  // namespace distlab::viewer
