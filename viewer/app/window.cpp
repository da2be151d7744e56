// window.cpp — the GLFW main loop (after ocornut/imgui examples/example_glfw_opengl3).
#include "viewer/app/window.hpp"

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <fmt/format.h>
#include <imgui.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace distlab::viewer {

namespace {

std::vector<std::string> g_dropped;  // paths dropped since the last frame (GLFW calls back)

void on_drop(GLFWwindow*, int count, const char** paths) {
  for (int i = 0; i < count; ++i) g_dropped.emplace_back(paths[i]);
}

void on_glfw_error(int code, const char* what) {
  fmt::print(stderr, "distlab-viewer: GLFW error {}: {}\n", code, what);
}

}  // namespace

int run_window(View& view, int width, int height, void (*setup_fonts)(float), float font_size,
               int max_frames) {
  if (!std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY")) {
    fmt::print(
        stderr,
        "distlab-viewer: no display (neither DISPLAY nor WAYLAND_DISPLAY is set); render a frame "
        "without one with --png out.png, or run under xvfb-run\n");
    return 2;
  }
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    fmt::print(stderr,
               "distlab-viewer: GLFW cannot start (no usable display); try --png out.png\n");
    return 2;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  GLFWwindow* window = glfwCreateWindow(width, height, "distlab-viewer", nullptr, nullptr);
  if (!window) {
    fmt::print(stderr,
               "distlab-viewer: no OpenGL 3.3 core window on this display; try --png out.png\n");
    glfwTerminate();
    return 2;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);
  glfwSetDropCallback(window, on_drop);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  setup_fonts(font_size);
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330");

  double last = glfwGetTime();
  for (int frame = 0; !glfwWindowShouldClose(window) && (max_frames <= 0 || frame < max_frames);
       ++frame) {
    // Paused and idle, wait for input instead of spinning a core.
    const bool animating =
        !view.documents().empty() && view.documents()[view.current()].playback.playing;
    if (animating || max_frames > 0)
      glfwPollEvents();
    else
      glfwWaitEventsTimeout(0.25);
    for (auto& path : g_dropped) view.open(path);
    g_dropped.clear();

    const double now = glfwGetTime();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    view.draw(now - last);
    last = now;
    ImGui::Render();
    int w = 0, h = 0;
    glfwGetFramebufferSize(window, &w, &h);
    glViewport(0, 0, w, h);
    glClearColor(0.06f, 0.06f, 0.07f, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    glfwSwapBuffers(window);
  }

  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return 0;
}

}  // namespace distlab::viewer
