// panel_shards.cpp — (being written)
#include <imgui.h>

#include "panels.hpp"

namespace distlab::viewer {

void draw_shards(PanelContext& ctx) {
  (void)ctx;
  ImGui::TextUnformatted("shards: to come");
}

}  // namespace distlab::viewer
