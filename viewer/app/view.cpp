// view.cpp — the View: menu, picker, layout of the panel windows, keys (view.hpp).
//
// Layout of one document (fractions of the area below the menu bar):
//   +-------------+-------------+-----------+
//   |  Topology   |   Shards    |  Stats    |   (a pipeline trace: Schedule in place of Shards)
//   |             |             +-----------+
//   |             |             |  Memory   |
//   +-------------+-------------+-----------+
//   |  Timeline                             |
//   +---------------------------------------+
//   |  Playback                             |
//   +---------------------------------------+
// A panel with nothing to show for the trace is left out (panel_content.hpp): no Shards column
// for a trace that declares no buffers, no Memory under Stats without a ledger.
// Side by side, each document gets half the width with the same layout; the right one's
// playback follows the left one's.
// A trace of a tensor-parallel layer (otherData.splits, lessons 12 and 13) shows the Splits
// panel in the Topology's place: its ring all-reduces are the Shards panel's too.
#include "viewer/app/view.hpp"

#include <imgui.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "viewer/model/panel_content.hpp"
#include "viewer/model/pytorch_trace.hpp"

namespace distlab::viewer {

namespace {

constexpr float kPlaybackHeight = 74.0f;
constexpr ImGuiWindowFlags kPanelFlags = ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize |
                                         ImGuiWindowFlags_NoCollapse |
                                         ImGuiWindowFlags_NoSavedSettings;

// Places the next window exactly (every frame: the layout follows the display size).
void place(float x, float y, float w, float h) {
  ImGui::SetNextWindowPos(ImVec2(x, y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(std::max(w, 40.0f), std::max(h, 30.0f)), ImGuiCond_Always);
}

// The JSON files in `dir`, sorted; none when it does not exist.
std::vector<std::string> list_traces(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && it->path().extension() == ".json")
      out.push_back(it->path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void View::open(const std::string& path) {
  docs_.push_back(open_document(path));
  current_ = static_cast<int>(docs_.size()) - 1;
}

void View::open_all(const std::vector<std::string>& paths) {
  for (const auto& group : group_trace_args(paths)) docs_.push_back(open_document(group));
  current_ = 0;
}

void View::set_current(int i) {
  if (i >= 0 && i < static_cast<int>(docs_.size())) current_ = i;
  if (compare_ == current_) compare_ = -1;
}

void View::handle_keys(Document& doc) {
  if (!doc.ok() || ImGui::GetIO().WantTextInput) return;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Space), false))
    doc.playback.playing = !doc.playback.playing;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow)))
    doc.playback.playing = false, doc.playback.next_step(doc.model);
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_LeftArrow)))
    doc.playback.playing = false, doc.playback.prev_step(doc.model);
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Home), false)) doc.playback.reset(doc.model);
}

void View::draw_menu() {
  if (!ImGui::BeginMainMenuBar()) return;
  if (ImGui::BeginMenu("File")) {
    if (ImGui::MenuItem("Open trace...", "Ctrl+O")) picker_open_ = true;
    ImGui::Separator();
    for (int i = 0; i < static_cast<int>(docs_.size()); ++i)
      if (ImGui::MenuItem(docs_[i].title().c_str(), nullptr, i == current_)) set_current(i);
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Compare", docs_.size() > 1)) {
    if (ImGui::MenuItem("off", nullptr, compare_ < 0)) compare_ = -1;
    for (int i = 0; i < static_cast<int>(docs_.size()); ++i)
      if (i != current_ && ImGui::MenuItem(docs_[i].title().c_str(), nullptr, i == compare_))
        compare_ = i;
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Help")) {
    ImGui::TextUnformatted("space      play / pause");
    ImGui::TextUnformatted("right/left next / previous algorithm step");
    ImGui::TextUnformatted("home       back to the start");
    ImGui::TextUnformatted("timeline   wheel zooms, drag pans, click selects a message");
    ImGui::TextUnformatted("drop a trace file on the window to open it");
    ImGui::EndMenu();
  }
  if (!docs_.empty()) {
    ImGui::Separator();
    ImGui::TextUnformatted(docs_[current_].title().c_str());
  }
  ImGui::EndMainMenuBar();
}

void View::draw_picker() {
  // ImGui 1.87 named every key (ImGuiKey_O); 1.86 (Debian 12) names no letter keys but A, C, V,
  // X, Y, Z, and its GLFW backend indexes keys by GLFW key code, for letters the upper-case ASCII.
#if IMGUI_VERSION_NUM >= 18700
  const ImGuiKey key_o = ImGuiKey_O;
#else
  const int key_o = 'O';
#endif
  if (ImGui::GetIO().KeyCtrl && ImGui::IsKeyPressed(key_o, false)) picker_open_ = true;
  if (!picker_open_) return;
  const ImVec2 size = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowPos(ImVec2(size.x * 0.5f, size.y * 0.5f), ImGuiCond_Appearing,
                          ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowSize(ImVec2(520, 420), ImGuiCond_Appearing);
  if (ImGui::Begin("Open a trace", &picker_open_, ImGuiWindowFlags_NoSavedSettings)) {
    for (const auto& dir : picker_dirs) {
      const auto files = list_traces(dir);
      ImGui::TextDisabled("%s/ (%zu)", dir.c_str(), files.size());
      for (const auto& f : files)
        if (ImGui::Selectable(std::filesystem::path(f).filename().string().c_str())) {
          open(f);
          picker_open_ = false;
        }
      if (files.empty()) ImGui::TextDisabled("  no traces yet (./distlab tour writes them)");
    }
    ImGui::Separator();
    static char path[1024] = "";
    ImGui::SetNextItemWidth(-70);
    const bool enter =
        ImGui::InputText("##path", path, sizeof path, ImGuiInputTextFlags_EnterReturnsTrue);
    ImGui::SameLine();
    if ((ImGui::Button("Open") || enter) && path[0]) {
      open(path);
      picker_open_ = false;
    }
  }
  ImGui::End();
}

void View::draw_document(Document& doc, float x, float y, float w, float h, const char* suffix,
                         std::optional<PanelId> only) {
  if (!doc.ok()) {
    place(x, y, w, h);
    ImGui::Begin((doc.title() + "##error" + suffix).c_str(), nullptr, kPanelFlags);
    ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(255, 110, 110, 255));
    ImGui::TextWrapped("Could not open %s", doc.path.c_str());
    ImGui::TextWrapped("%s", doc.error.c_str());
    ImGui::PopStyleColor();
    ImGui::TextWrapped("Open another trace from File > Open, or drop one on the window.");
    ImGui::End();
    return;
  }
  PanelContext ctx{doc, doc.playback.moment(doc.model), &docs_};
  if (suffix[0] == '\0')  // alone in the window: a panel may draw the other open documents too
    for (Document& other : docs_)
      if (&other != &doc && other.ok()) ctx.others.push_back(&other);
  auto panel = [&](PanelId p, float px, float py, float pw, float ph) {
    place(px, py, pw, ph);
    std::string name = panel_name(p);
    name[0] = static_cast<char>(name[0] - 'a' + 'A');
    if (ImGui::Begin((name + "##" + suffix).c_str(), nullptr, kPanelFlags)) draw_panel(p, ctx);
    ImGui::End();
  };
  if (only) {
    panel(*only, x, y, w, h);
    return;
  }
  const float timeline_h = std::max(140.0f, (h - kPlaybackHeight) * 0.38f);
  const float top_h = h - kPlaybackHeight - timeline_h;
  // Only panels with something to show (panel_content.hpp): without buffers the top row is two
  // columns, without a ledger Stats takes the whole right column. A lesson's own picture takes
  // the place of a generic panel: Splits (lessons 12, 13) Topology's, Schedule (lesson 11)
  // Shards'.
  const bool schedule = shows_schedule(doc), splits = splits_nothing_to_show(doc).empty();
  const bool shards = schedule || shards_have_content(doc.model);
  const bool memory = memory_has_content(doc.model);
  const float col = w / (shards ? 3.0f : 2.0f);
  panel(splits ? PanelId::splits : PanelId::topology, x, y, col, top_h);
  if (shards) panel(schedule ? PanelId::schedule : PanelId::shards, x + col, y, col, top_h);
  const float right = x + (shards ? 2 : 1) * col, stats_h = memory ? top_h * 0.55f : top_h;
  panel(PanelId::stats, right, y, x + w - right, stats_h);
  if (memory) panel(PanelId::memory, right, y + stats_h, x + w - right, top_h - stats_h);
  panel(PanelId::timeline, x, y + top_h, w, timeline_h);
  panel(PanelId::playback, x, y + top_h + timeline_h, w, kPlaybackHeight);
}

void View::draw(double wall_seconds, std::optional<PanelId> only) {
  const ImVec2 size = ImGui::GetIO().DisplaySize;
  if (docs_.empty()) {
    if (!only) draw_menu();
    place(0, ImGui::GetFrameHeight(), size.x, size.y - ImGui::GetFrameHeight());
    ImGui::Begin("distlab-viewer", nullptr, kPanelFlags);
    ImGui::TextWrapped(
        "No trace open. Run a lesson (./distlab tour writes traces/), then open one from "
        "File > Open, drop a trace file here, or start distlab-viewer with trace paths.");
    if (ImGui::Button("Open a trace...")) picker_open_ = true;
    ImGui::End();
    draw_picker();
    return;
  }
  current_ = std::clamp(current_, 0, static_cast<int>(docs_.size()) - 1);
  Document& doc = docs_[current_];
  if (doc.ok()) doc.playback.advance(doc.model, wall_seconds);
  handle_keys(doc);

  float top = 0;
  if (!only) {
    draw_menu();
    top = ImGui::GetFrameHeight();
  }
  const float h = size.y - top;
  // --compare --panel schedule: one Schedule panel stacks both pipelines instead of two halves.
  if (compare_ >= 0 && compare_ < static_cast<int>(docs_.size()) && compare_ != current_ &&
      only != PanelId::schedule) {
    Document& other = docs_[compare_];
    if (doc.ok() && other.ok()) {  // the right side follows the left one's beat
      other.playback.set_clock(other.model, doc.playback.clock);
      other.playback.seek_beat(other.model, doc.playback.moment(doc.model).beat);
    }
    draw_document(doc, 0, top, size.x * 0.5f, h, "L", only);
    draw_document(other, size.x * 0.5f, top, size.x * 0.5f, h, "R", only);
  } else {
    draw_document(doc, 0, top, size.x, h, "", only);
  }
  if (!only) draw_picker();
}

}  // namespace distlab::viewer
