// distlab-viewer — replay, animate and inspect lesson traces.
//
//   distlab-viewer [trace.json ...]                  open a window (several traces: File menu)
//   distlab-viewer a.json b.json --compare           two traces side by side, playback linked
//   distlab-viewer --png out.png [--step K | --time T] [--panel NAME] trace.json
//                                                    render one frame with no display (EGL)
//   distlab-viewer --png out.png --png-sequence N trace.json
//                                                    N frames over the whole playback, out-000.png
//                                                    ... (scripts/make-animations.sh)
//   distlab-viewer --png out.png --panel memory-compare 08.json 09.json 10.json
//                                                    ZeRO's stages side by side (any subset)
//   distlab-viewer --bench-frames N trace.json       frame-build time statistics (CPU, no GL)
//   distlab-viewer --describe [--step K | --time T] trace.json
//                                                    the step's caption and the panels' state as
//                                                    text (no display, no GL)
//   distlab-viewer traces/torch/ddp4/                a real run: PyTorch profiler traces, one per
//   distlab-viewer rank0.json rank1.json ...         rank (a folder, or files given one after
//                                                    another), opened as one run
//   (distlab-analyze prints a real run's figures as a table and CSV: viewer/analyze/main.cpp)
//
// Exit status: 0; 1 a trace did not load (--png, --bench-frames, --describe) or the PNG was not
// written; 2 bad options or no display.
#include <backends/imgui_impl_opengl3.h>
#include <fmt/format.h>
#include <imgui.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/base/check.hpp"
#include "viewer/app/headless.hpp"
#include "viewer/app/view.hpp"
#include "viewer/app/window.hpp"
#include "viewer/model/caption.hpp"
#include "viewer/model/memory_compare.hpp"
#include "viewer/model/pytorch_trace.hpp"

namespace dv = distlab::viewer;

namespace {

struct Args {
  std::vector<std::string> traces;
  bool compare = false;
  std::string png;
  std::optional<double> step, time_us;
  std::string panel;
  std::string clock;
  int width = 1600, height = 900;
  float font_size = 15.0f;
  int bench_frames = 0;
  int frames = 0;
  int png_sequence = 0;  // with --png: this many frames from the start to the end of playback
  bool describe = false;
};

// DejaVu Sans when the system has it (readable on a projector), else ImGui's built-in font.
void setup_fonts(float size) {
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout is computed every frame; nothing to remember
  const char* kFont = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
  std::error_code ec;
  // Latin-1 plus general punctuation (dashes, ellipsis) and arrows, which the panels use.
  static const ImWchar kRanges[] = {0x0020, 0x00FF, 0x2000, 0x206F, 0x2190, 0x21FF, 0};
  if (!std::filesystem::exists(kFont, ec) ||
      !io.Fonts->AddFontFromFileTTF(kFont, size, nullptr, kRanges)) {
    ImFontConfig cfg;
    cfg.SizePixels = std::max(13.0f, size);
    io.Fonts->AddFontDefault(&cfg);
  }
  ImGui::StyleColorsDark();
  ImGui::GetStyle().WindowRounding = 0;
}

// Places every document's playback where the options ask (--clock, --step, --time).
void position(dv::View& view, const Args& a) {
  for (auto& doc : view.documents()) {
    if (!doc.ok()) continue;
    if (a.clock == "measured" || (a.time_us && a.clock.empty()))
      doc.playback.set_clock(doc.model, dv::Clock::measured);
    if (a.step)
      doc.playback.seek_beat(doc.model, *a.step);
    else if (a.time_us)
      doc.playback.seek_time(doc.model, doc.model.t_begin + *a.time_us);
    else if (!a.png.empty() || a.describe)
      doc.playback.seek_beat(doc.model, dv::last_beat(doc.model));  // the end state
  }
}

int report_load_errors(dv::View& view) {
  int failed = 0;
  for (const auto& doc : view.documents())
    if (!doc.ok()) {
      fmt::print(stderr, "distlab-viewer: {}\n", doc.error);
      ++failed;
    }
  return failed;
}

// out.png, k -> out-00k.png (three digits: a sequence sorts by name).
std::string sequence_path(const std::string& png, int k) {
  const std::filesystem::path p(png);
  std::filesystem::path named = p.parent_path() / fmt::format("{}-{:03d}", p.stem().string(), k);
  named += p.extension();
  return named.string();
}

// What memory-compare drew, one line: the stages found in the traces given.
void print_memory_compare(dv::View& view) {
  std::vector<const dv::TraceModel*> models;
  for (const auto& doc : view.documents())
    if (doc.ok()) models.push_back(&doc.model);
  const dv::MemoryCompare mc = dv::build_memory_compare(models);
  std::string stages;
  for (const auto& s : mc.stages)
    stages += fmt::format("{}{}", stages.empty() ? "" : ", ", dv::zero_stage_title(s.stage));
  fmt::print("memory-compare: {}\n", stages.empty() ? "no ZeRO trace" : stages);
  for (const auto& note : mc.notes) fmt::print("memory-compare: {}\n", note);
}

int render_png(dv::View& view, const Args& a, std::optional<dv::PanelId> only) {
  dv::HeadlessGl gl(a.width, a.height);
  ImGui::CreateContext();
  setup_fonts(a.font_size);
  ImGui::GetIO().DisplaySize = ImVec2(static_cast<float>(a.width), static_cast<float>(a.height));
  if (!ImGui_ImplOpenGL3_Init("#version 330"))
    throw distlab::Error("ImGui's OpenGL 3 renderer did not start");
  auto render = [&](int frames) {
    // ImGui sizes auto-fitting windows and tables from the frame before.
    for (int frame = 0; frame < frames; ++frame) {
      ImGui_ImplOpenGL3_NewFrame();
      ImGui::NewFrame();
      view.draw(0.0, only);
      ImGui::Render();
      gl.bind();
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    }
  };
  render(3);
  if (a.png_sequence > 0) {
    // Frame k of n shows beat k * last / (n - 1): the first is the start, the last the end state.
    for (int k = 0; k < a.png_sequence; ++k) {
      for (auto& doc : view.documents())
        if (doc.ok()) {
          const double last = dv::last_beat(doc.model);
          doc.playback.seek_beat(doc.model,
                                 a.png_sequence > 1 ? last * k / (a.png_sequence - 1) : last);
        }
      render(2);
      dv::write_png(sequence_path(a.png, k), a.width, a.height, gl.read_rgba());
    }
    fmt::print("distlab-viewer: wrote {} frames {} .. {} ({}x{}, {})\n", a.png_sequence,
               sequence_path(a.png, 0), sequence_path(a.png, a.png_sequence - 1), a.width, a.height,
               gl.renderer());
    ImGui_ImplOpenGL3_Shutdown();
    ImGui::DestroyContext();
    return 0;
  }
  dv::write_png(a.png, a.width, a.height, gl.read_rgba());
  std::string where;
  if (!view.documents().empty() && view.documents()[view.current()].ok()) {
    const auto& doc = view.documents()[view.current()];
    const dv::Moment m = doc.playback.moment(doc.model);
    where = fmt::format(", step {:.2f} of {}", m.beat, dv::last_beat(doc.model));
  }
  fmt::print("distlab-viewer: wrote {} ({}x{}{}, {})\n", a.png, a.width, a.height, where,
             gl.renderer());
  if (only == dv::PanelId::memory_compare) print_memory_compare(view);
  if (only && !view.documents().empty() && view.documents()[view.current()].ok()) {
    const std::string empty = dv::panel_nothing_to_show(*only, view.documents()[view.current()]);
    if (!empty.empty())
      fmt::print("distlab-viewer: the {} panel has nothing to show: {}\n", dv::panel_name(*only),
                 empty);
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui::DestroyContext();
  return 0;
}

// Frame build = NewFrame + View::draw + Render (the CPU side: the draw lists), playing.
int bench_frames(dv::View& view, const Args& a, std::optional<dv::PanelId> only) {
  ImGui::CreateContext();
  setup_fonts(a.font_size);
  ImGuiIO& io = ImGui::GetIO();
  io.DisplaySize = ImVec2(static_cast<float>(a.width), static_cast<float>(a.height));
  unsigned char* pixels = nullptr;
  int w = 0, h = 0;
  io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);  // the atlas, as a renderer would build it
  for (auto& doc : view.documents())
    if (doc.ok()) doc.playback.playing = true;
  std::vector<double> ms;
  std::size_t vertices = 0;
  for (int frame = 0; frame < a.bench_frames; ++frame) {
    io.DeltaTime = 1.0f / 60.0f;
    const auto t0 = std::chrono::steady_clock::now();
    ImGui::NewFrame();
    view.draw(1.0 / 60.0, only);
    ImGui::Render();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    vertices = std::max<std::size_t>(vertices, ImGui::GetDrawData()->TotalVtxCount);
    for (auto& doc : view.documents())  // loop the playback so every frame animates
      if (doc.ok() && !doc.playback.playing)
        doc.playback.reset(doc.model), doc.playback.playing = true;
  }
  ImGui::DestroyContext();
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) {
    return ms[std::min(ms.size() - 1, static_cast<std::size_t>(p * (ms.size() - 1) + 0.5))];
  };
  std::size_t events = 0;
  for (const auto& doc : view.documents()) events += doc.model.events;
  fmt::print(
      "frame build over {} frames ({} events, {}x{}, up to {} vertices): min {:.2f} ms, median "
      "{:.2f} ms, "
      "p95 {:.2f} ms, max {:.2f} ms\n",
      ms.size(), events, a.width, a.height, vertices, ms.front(), pct(0.5), pct(0.95), ms.back());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{
      "distlab-viewer: replay, animate and inspect distlab lesson traces (and other Chrome "
      "traces)"};
  app.add_option("traces", a.traces,
                 "trace files (Chrome Trace Event JSON) to open; PyTorch profiler traces of one "
                 "run (one per rank: a folder, or files one after another) open as one run");
  app.add_flag("--compare", a.compare, "show the first two traces side by side, playback linked");
  auto* png = app.add_option(
      "--png", a.png, "render one frame into this PNG file with no display (EGL), then exit");
  auto* step = app.add_option(
      "--step", a.step, "show the moment after this algorithm step (2.5: halfway through step 3)");
  auto* time = app.add_option("--time", a.time_us,
                              "show this moment, in microseconds from the trace's start");
  step->excludes(time);
  app.add_option("--panel", a.panel,
                 "render only this panel: topology, timeline, playback, shards, memory, stats, "
                 "memory-compare (the ZeRO stages of every trace given, side by side), schedule "
                 "(with --compare: both pipelines stacked), splits");
  app.add_option("--clock", a.clock,
                 "playback clock: steps (one beat per algorithm step) or measured")
      ->check(CLI::IsMember({"steps", "measured"}));
  app.add_option("--width", a.width, "window or image width in pixels")
      ->capture_default_str()
      ->check(CLI::Range(16, 8192));
  app.add_option("--height", a.height, "window or image height in pixels")
      ->capture_default_str()
      ->check(CLI::Range(16, 8192));
  app.add_option("--font-size", a.font_size, "font size in pixels (larger for a projector)")
      ->capture_default_str()
      ->check(CLI::Range(8.0, 64.0));
  auto* bench = app.add_option("--bench-frames", a.bench_frames,
                               "build this many frames with no GL and print their CPU time")
                    ->check(CLI::Range(1, 1000000));
  app.add_flag("--describe", a.describe,
               "print the moment's caption (what the step's messages do) and a text summary of "
               "the panels (in flight, shards, memory), then exit; no display needed")
      ->excludes(png)
      ->excludes(bench);
  app.add_option("--png-sequence", a.png_sequence,
                 "with --png: write this many frames over the whole playback (on the steps "
                 "clock), as FILE-000.png, FILE-001.png, ... (for animations)")
      ->check(CLI::Range(1, 10000));
  app.add_option("--frames", a.frames,
                 "close the window after this many frames (tests, scripted runs)")
      ->check(CLI::Range(1, 1000000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is 0; every bad option is 2 (the exit statuses above)
    return app.exit(e) == 0 ? 0 : 2;
  }

  std::optional<dv::PanelId> only;
  if (!a.panel.empty()) {
    dv::PanelId p;
    if (!dv::parse_panel(a.panel, p)) {
      fmt::print(
          stderr,
          "distlab-viewer: --panel {} is not a panel; use topology, timeline, playback, shards, "
          "memory, stats, memory-compare, schedule or splits\n",
          a.panel);
      return 2;
    }
    only = p;
  }
  const bool batch = !a.png.empty() || a.bench_frames > 0 || a.describe;
  if (batch && a.traces.empty()) {
    fmt::print(stderr, "distlab-viewer: --png, --bench-frames and --describe need a trace file\n");
    return 2;
  }
  // A run of PyTorch profiler traces (a folder, or files one after another) is one document.
  const std::size_t documents = dv::group_trace_args(a.traces).size();
  if (a.describe && (documents > 1 || a.compare)) {
    fmt::print(stderr,
               "distlab-viewer: --describe reads one trace, or one run of PyTorch traces ({} "
               "given)\n",
               documents);
    return 2;
  }
  // memory-compare draws every trace given in one panel (View::documents()).
  const bool all_in_one = only == dv::PanelId::memory_compare;
  if (!a.png.empty() && !all_in_one && documents > (a.compare ? 2u : 1u)) {
    fmt::print(stderr,
               "distlab-viewer: --png renders one trace, or two with --compare, or any number with "
               "--panel memory-compare ({} given)\n",
               documents);
    return 2;
  }
  if (a.png_sequence > 0 && (a.png.empty() || a.step || a.time_us)) {
    fmt::print(stderr,
               "distlab-viewer: --png-sequence needs --png FILE and runs over the whole playback "
               "(no --step or --time)\n");
    return 2;
  }
  if (a.compare && documents < 2) {
    fmt::print(stderr, "distlab-viewer: --compare needs two traces\n");
    return 2;
  }

  dv::View view;
  view.open_all(a.traces);
  if (a.compare) view.set_compare(1);
  const int failed = report_load_errors(view);
  if (batch && failed == static_cast<int>(view.documents().size())) {
    fmt::print(stderr, "distlab-viewer: no trace loaded: nothing to draw, nothing written\n");
    return 1;
  }
  position(view, a);
  try {
    if (a.describe) {
      if (failed) return 1;
      const auto& doc = view.documents().front();
      fmt::print("{}", dv::describe(doc.model, doc.playback.moment(doc.model)));
      return 0;
    }
    if (!a.png.empty()) {
      const int rc = render_png(view, a, only);
      return failed ? 1 : rc;
    }
    if (a.bench_frames > 0) return failed ? 1 : bench_frames(view, a, only);
  } catch (const std::exception& e) {
    fmt::print(stderr, "distlab-viewer: {}\n", e.what());
    return 1;
  }
  const int rc = dv::run_window(view, a.width, a.height, setup_fonts, a.font_size, a.frames);
  if (rc == 0 && a.frames > 0) fmt::print("distlab-viewer: closed after {} frames\n", a.frames);
  return rc;
}
