// viewer/app/view.cpp: the layout leaves out a panel with nothing to show (panel_content.hpp)
// and the Topology panel carries the step's caption; the View drawn headless, its windows read
// back from the frame's draw lists.
#include "catch.hpp"

#include <set>
#include <string>

#include "imgui_headless.hpp"
#include "viewer/app/view.hpp"

using namespace distlab::viewer;
using distlab::testing::example_trace;
using distlab::testing::HeadlessImGui;

namespace {

// The panel windows of one frame of `view` ("Topology", "Shards", ...; the "##" id cut off).
std::set<std::string> windows_drawn(HeadlessImGui& gui, View& view) {
  gui.begin_frame();
  view.draw(0.0);
  gui.end_frame();
  std::set<std::string> out;
  const ImDrawData* d = ImGui::GetDrawData();
  for (int l = 0; l < d->CmdListsCount; ++l)
    if (const char* name = d->CmdLists[l]->_OwnerName) {
      const std::string s = name;
      out.insert(s.substr(0, s.find("##")));
    }
  return out;
}

}  // namespace

TEST_CASE("layout: panels with nothing to show are left out", "[layout]") {
  HeadlessImGui gui;
  {
    View view;  // a ring all-reduce: buffers and a ledger, every panel
    view.open(example_trace("06_allreduce_sequential_ring_parallel"));
    REQUIRE(view.documents().front().ok());
    const auto w = windows_drawn(gui, view);
    for (const char* p : {"Topology", "Shards", "Stats", "Memory", "Timeline", "Playback"})
      CHECK(w.count(p) == 1);
  }
  {
    View view;  // lesson 11 declares no buffers: no Shards window
    view.open(example_trace("11_pipeline_microbatching"));
    REQUIRE(view.documents().front().ok());
    const auto w = windows_drawn(gui, view);
    CHECK(w.count("Shards") == 0);
    for (const char* p : {"Topology", "Stats", "Memory", "Timeline", "Playback"})
      CHECK(w.count(p) == 1);
  }
  {
    View view;  // no ledger either: no Memory window
    view.open(example_trace("11_pipeline_microbatching"));
    Document& doc = view.documents().front();
    doc.model.memory.assign(doc.model.memory.size(), {});
    doc.model.info.memory_expected_bytes.clear();
    const auto w = windows_drawn(gui, view);
    CHECK(w.count("Shards") == 0);
    CHECK(w.count("Memory") == 0);
    CHECK(w.count("Stats") == 1);
  }
}
