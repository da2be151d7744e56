// window.hpp — the interactive viewer: a GLFW window with an OpenGL 3.3 core context.
#pragma once

#include "viewer/app/view.hpp"

namespace distlab::viewer {

// Runs until the window closes. Returns 0, or 2 with a sentence on stderr when there is no
// display or no OpenGL 3.3 context. Trace files dropped on the window open in `view`.
// `setup_fonts` runs once the ImGui context exists (fonts, style). With `max_frames` > 0 the
// window closes after that many frames (tests, scripted runs under xvfb-run).
int run_window(View& view, int width, int height, void (*setup_fonts)(float), float font_size,
               int max_frames = 0);

}  // namespace distlab::viewer
