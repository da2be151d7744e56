// imgui_headless.hpp — an ImGui context for tests: font atlas built, display size set, no GL
// and no ini file. Frames are built (NewFrame .. Render) and their draw lists inspected.
#pragma once

#include <imgui.h>

#include <string>

#include "example_traces.hpp"
#include "viewer/app/panels.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::testing {

class HeadlessImGui {
 public:
  explicit HeadlessImGui(float width = 1600, float height = 900) {
    ctx_ = ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;
    io.DisplaySize = ImVec2(width, height);
    io.DeltaTime = 1.0f / 60.0f;
    unsigned char* pixels = nullptr;
    int w = 0, h = 0;
    io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);
  }
  ~HeadlessImGui() { ImGui::DestroyContext(ctx_); }
  HeadlessImGui(const HeadlessImGui&) = delete;
  HeadlessImGui& operator=(const HeadlessImGui&) = delete;

  void begin_frame() { ImGui::NewFrame(); }
  // Ends the frame; returns the number of vertices drawn (every window's draw list).
  int end_frame() {
    ImGui::Render();
    return ImGui::GetDrawData()->TotalVtxCount;
  }

 private:
  ImGuiContext* ctx_ = nullptr;
};

// One panel alone in a full-display window for one frame; returns the vertices drawn.
inline int draw_panel_frame(HeadlessImGui& gui, viewer::PanelId panel, viewer::Document& doc) {
  gui.begin_frame();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImGui::GetIO().DisplaySize);
  ImGui::Begin("panel");
  viewer::PanelContext ctx{doc, doc.playback.moment(doc.model)};
  viewer::draw_panel(panel, ctx);
  ImGui::End();
  return gui.end_frame();
}

}  // namespace distlab::testing
