// panels.hpp — the viewer's panels, one file each (panel_<name>.cpp). A panel draws its
// contents into the current ImGui window (the View places and sizes the windows) for one
// document at one moment; it may change the document's playback, selection and view state.
// No panel knows which lesson wrote the trace: everything comes from the trace model.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "viewer/app/document.hpp"

namespace distlab::viewer {

struct PanelContext {
  Document& doc;
  Moment now;  // doc.playback.moment(doc.model), computed once per frame
  // Every open document, for a panel that draws several traces at once (memory-compare);
  // null: doc alone.
  std::vector<Document>* documents = nullptr;
  // The other open documents a panel may draw beside this one (the Schedule panel stacks the
  // pipelines among them); empty when the View shows documents side by side.
  std::vector<Document*> others = {};
  const TraceModel& model() const { return doc.model; }
};

void draw_topology(PanelContext& ctx);  // ranks on a circle (grid past 16), packets on links
void draw_timeline(PanelContext& ctx);  // lanes per rank, zoom/pan, flows, merged small spans
void draw_playback(PanelContext& ctx);  // play/pause, step, speed, scrub, clock
void draw_shards(PanelContext& ctx);    // per buffer, a row per rank of chunk cells
void draw_memory(PanelContext& ctx);    // per-rank stacked ledger bars, formula line
void draw_stats(PanelContext& ctx);     // traffic per rank and link, busbw, cost model, text
// ZeRO stages side by side, from every open trace (PanelContext::documents)
void draw_memory_compare(PanelContext& ctx);
void draw_schedule(PanelContext& ctx);  // pipeline stages x time: F/B blocks, bubble, in flight
// The trace is a pipeline's (the default layout shows Schedule in place of Shards).
bool shows_schedule(Document& doc);
void draw_splits(PanelContext& ctx);   // a tensor-parallel layer's weights split over the ranks
void draw_caption(PanelContext& ctx);  // the step's caption and phase texts (above Topology)

enum class PanelId {
  topology,
  timeline,
  playback,
  shards,
  memory,
  stats,
  memory_compare,
  schedule,
  splits
};
inline constexpr int kPanels = 9;
const char* panel_name(PanelId p);                      // "topology", ...
bool parse_panel(std::string_view name, PanelId& out);  // case-insensitive
void draw_panel(PanelId p, PanelContext& ctx);
// Why panel p has nothing to show for this document ("" when it has something): the sentence
// the panel shows instead, which --png also prints.
std::string panel_nothing_to_show(PanelId p, Document& doc);
// The Splits panel's sentence for a trace without otherData.splits ("" when it has them).
std::string splits_nothing_to_show(Document& doc);

}  // namespace distlab::viewer
