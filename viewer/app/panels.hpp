// panels.hpp — the viewer's panels, one file each (panel_<name>.cpp). A panel draws its
// contents into the current ImGui window (the View places and sizes the windows) for one
// document at one moment; it may change the document's playback, selection and view state.
// No panel knows which lesson wrote the trace: everything comes from the trace model.
#pragma once

#include <string_view>

#include "viewer/app/document.hpp"

namespace distlab::viewer {

struct PanelContext {
  Document& doc;
  Moment now;  // doc.playback.moment(doc.model), computed once per frame
  const TraceModel& model() const { return doc.model; }
};

void draw_topology(PanelContext& ctx);  // ranks on a circle (grid past 16), packets on links
void draw_timeline(PanelContext& ctx);  // lanes per rank, zoom/pan, flows, merged small spans
void draw_playback(PanelContext& ctx);  // play/pause, step, speed, scrub, clock
void draw_shards(PanelContext& ctx);    // per buffer, a row per rank of chunk cells
void draw_memory(PanelContext& ctx);    // per-rank stacked ledger bars, formula line
void draw_stats(PanelContext& ctx);     // traffic per rank and link, busbw, cost model, text
void draw_caption(PanelContext& ctx);   // the step's caption and phase texts (above Topology)

enum class PanelId { topology, timeline, playback, shards, memory, stats };
inline constexpr int kPanels = 6;
const char* panel_name(PanelId p);                      // "topology", ...
bool parse_panel(std::string_view name, PanelId& out);  // case-insensitive
void draw_panel(PanelId p, PanelContext& ctx);

}  // namespace distlab::viewer
