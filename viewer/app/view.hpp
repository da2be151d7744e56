// view.hpp — the viewer's one View (the Tracy model): the open documents, the window layout,
// keyboard shortcuts, and draw(), which places a window per panel and dispatches to the panel
// files. No GL here: the program (main.cpp) renders what draw() built, in a window or into a PNG.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "viewer/app/document.hpp"
#include "viewer/app/panels.hpp"

namespace distlab::viewer {

class View {
 public:
  // Opens each path (a failed load stays open as a document that shows its error).
  void open(const std::string& path);
  // Every path given: PyTorch profiler traces one after another, or a folder of them, open
  // as one run (pytorch_trace.hpp: group_trace_args).
  void open_all(const std::vector<std::string>& paths);

  // One frame of ImGui calls, between ImGui::NewFrame() and ImGui::Render(). `wall_seconds`
  // since the last frame advances a playing document. With `only`, that panel fills the display.
  void draw(double wall_seconds, std::optional<PanelId> only = std::nullopt);

  std::vector<Document>& documents() { return docs_; }
  int current() const { return current_; }
  void set_current(int i);
  // Side by side: the current document on the left, `other` on the right, playback linked.
  void set_compare(int other) { compare_ = other; }
  int compare() const { return compare_; }

  // The directories the picker lists (traces/ and traces/examples/ by default).
  std::vector<std::string> picker_dirs{"traces", "traces/examples"};

 private:
  void draw_menu();
  void draw_picker();
  void draw_document(Document& doc, float x, float y, float w, float h, const char* suffix,
                     std::optional<PanelId> only);
  void handle_keys(Document& doc);

  std::vector<Document> docs_;
  int current_ = 0;
  int compare_ = -1;
  bool picker_open_ = false;
};

}  // namespace distlab::viewer
