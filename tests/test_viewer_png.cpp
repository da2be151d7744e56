// viewer/app/headless.hpp: the whole viewer rendered with no display (EGL surfaceless on Mesa)
// into a PNG, read back and checked: its size, and that it is a picture, not a blank frame.
#include <backends/imgui_impl_opengl3.h>
#include <stb_image.h>
#include "catch.hpp"

#include <cstdio>
#include <filesystem>
#include <set>

#include "imgui_headless.hpp"
#include "viewer/app/headless.hpp"
#include "viewer/app/view.hpp"

using namespace distlab::viewer;

TEST_CASE("the viewer renders a trace into a PNG with no display", "[png]") {
  constexpr int kWidth = 960, kHeight = 540;
  HeadlessGl gl(kWidth,
                kHeight);  // throws with a sentence when EGL is missing: that fails the test
  distlab::testing::HeadlessImGui gui(kWidth, kHeight);
  REQUIRE(ImGui_ImplOpenGL3_Init("#version 330"));

  View view;
  view.open(distlab::testing::example_trace("06_allreduce_sequential_ring_parallel"));
  REQUIRE(view.documents().front().ok());
  view.documents().front().playback.seek_beat(view.documents().front().model, 2.5);
  for (int frame = 0; frame < 3; ++frame) {
    ImGui_ImplOpenGL3_NewFrame();
    gui.begin_frame();
    view.draw(0.0);
    CHECK(gui.end_frame() > 1000);
    gl.bind();
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  }
  const auto path = (std::filesystem::temp_directory_path() / "distlab_viewer_test.png").string();
  write_png(path, kWidth, kHeight, gl.read_rgba());
  ImGui_ImplOpenGL3_Shutdown();

  int w = 0, h = 0, channels = 0;
  unsigned char* px = stbi_load(path.c_str(), &w, &h, &channels, 4);
  REQUIRE(px);
  CHECK(w == kWidth);
  CHECK(h == kHeight);
  // Not blank: many colours, and a good share of the pixels differ from the clear colour.
  std::set<std::uint32_t> colours;
  std::size_t not_background = 0;
  const std::uint32_t background = px[0] | px[1] << 8 | px[2] << 16;
  for (int i = 0; i < w * h; ++i) {
    const std::uint32_t c = px[4 * i] | px[4 * i + 1] << 8 | px[4 * i + 2] << 16;
    colours.insert(c);
    not_background += c != background;
  }
  stbi_image_free(px);
  std::remove(path.c_str());
  INFO("colours " << colours.size() << ", pixels not background " << not_background);
  CHECK(colours.size() >= 32);
  CHECK(not_background >= static_cast<std::size_t>(w * h / 20));
}
