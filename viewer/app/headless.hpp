// headless.hpp — rendering the viewer with no display: an OpenGL 3.3 core context from EGL on
// Mesa's surfaceless platform (llvmpipe), drawn into a framebuffer object and read back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distlab::viewer {

class HeadlessGl {
 public:
  // Throws distlab::Error with a sentence when no surfaceless EGL / GL 3.3 context can be made.
  HeadlessGl(int width, int height);
  ~HeadlessGl();
  HeadlessGl(const HeadlessGl&) = delete;
  HeadlessGl& operator=(const HeadlessGl&) = delete;

  void bind();                                  // the framebuffer, viewport, cleared
  std::vector<std::uint8_t> read_rgba() const;  // width x height x 4, top row first
  int width() const { return width_; }
  int height() const { return height_; }
  std::string renderer() const;  // GL_RENDERER, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)"

 private:
  int width_, height_;
  void* display_ = nullptr;
  void* context_ = nullptr;
  unsigned fbo_ = 0, color_ = 0;
};

// Writes RGBA pixels (top row first) as a PNG; throws distlab::Error when it cannot.
void write_png(const std::string& path, int width, int height,
               const std::vector<std::uint8_t>& rgba);

}  // namespace distlab::viewer
