// panels.cpp — panel names and the dispatch (the panels themselves: panel_<name>.cpp).
#include "viewer/app/panels.hpp"

#include <cctype>

namespace distlab::viewer {

const char* panel_name(PanelId p) {
  switch (p) {
    case PanelId::topology:
      return "topology";
    case PanelId::timeline:
      return "timeline";
    case PanelId::playback:
      return "playback";
    case PanelId::shards:
      return "shards";
    case PanelId::memory:
      return "memory";
    case PanelId::stats:
      return "stats";
    case PanelId::memory_compare:
      return "memory-compare";
    case PanelId::schedule:
      return "schedule";
    case PanelId::splits:
      return "splits";
  }
  return "?";
}

bool parse_panel(std::string_view name, PanelId& out) {
  for (int i = 0; i < kPanels; ++i) {
    const std::string_view n = panel_name(static_cast<PanelId>(i));
    if (n.size() != name.size()) continue;
    bool same = true;
    for (std::size_t k = 0; k < n.size() && same; ++k)
      same = std::tolower(static_cast<unsigned char>(name[k])) == n[k];
    if (same) {
      out = static_cast<PanelId>(i);
      return true;
    }
  }
  return false;
}

void draw_panel(PanelId p, PanelContext& ctx) {
  switch (p) {
    case PanelId::topology:
      draw_topology(ctx);
      break;
    case PanelId::timeline:
      draw_timeline(ctx);
      break;
    case PanelId::playback:
      draw_playback(ctx);
      break;
    case PanelId::shards:
      draw_shards(ctx);
      break;
    case PanelId::memory:
      draw_memory(ctx);
      break;
    case PanelId::stats:
      draw_stats(ctx);
      break;
    case PanelId::memory_compare:
      draw_memory_compare(ctx);
      break;
    case PanelId::schedule:
      draw_schedule(ctx);
      break;
    case PanelId::splits:
      draw_splits(ctx);
      break;
  }
}

std::string panel_nothing_to_show(PanelId p, Document& doc) {
  if (!doc.ok()) return doc.error;
  return p == PanelId::splits ? splits_nothing_to_show(doc) : std::string();
}

}  // namespace distlab::viewer
