// headless.cpp — EGL surfaceless context, framebuffer object, PNG (headless.hpp).
#include "viewer/app/headless.hpp"

#define EGL_EGLEXT_PROTOTYPES
#include <EGL/egl.h>
#include <EGL/eglext.h>
#define GL_GLEXT_PROTOTYPES
#include <GL/gl.h>
#include <GL/glext.h>
#include <fmt/format.h>
#include <stb_image_write.h>

#include <algorithm>
#include <filesystem>

#include "core/base/check.hpp"

namespace distlab::viewer {

namespace {

template <class F>
F egl_proc(const char* name) {
  return reinterpret_cast<F>(eglGetProcAddress(name));
}

std::string egl_error() {
  return fmt::format("EGL error 0x{:x}", eglGetError());
}

}  // namespace

HeadlessGl::HeadlessGl(int width, int height) : width_(width), height_(height) {
  if (width < 16 || height < 16 || width > 8192 || height > 8192)
    throw Error(
        fmt::format("image size {}x{} is out of range (16 .. 8192 pixels a side)", width, height));
  auto get_display = egl_proc<PFNEGLGETPLATFORMDISPLAYEXTPROC>("eglGetPlatformDisplayEXT");
  EGLDisplay d = get_display
                     ? get_display(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, nullptr)
                     : EGL_NO_DISPLAY;
  EGLint major = 0, minor = 0;
  if (d == EGL_NO_DISPLAY || !eglInitialize(d, &major, &minor))
    throw Error(fmt::format(
        "no surfaceless EGL display ({}); install Mesa's EGL (libegl-mesa0, libgl1-mesa-dri)",
        egl_error()));
  display_ = d;
  if (!eglBindAPI(EGL_OPENGL_API))
    throw Error(fmt::format("EGL cannot bind desktop OpenGL ({})", egl_error()));
  const EGLint attrs[] = {EGL_CONTEXT_MAJOR_VERSION,
                          3,
                          EGL_CONTEXT_MINOR_VERSION,
                          3,
                          EGL_CONTEXT_OPENGL_PROFILE_MASK,
                          EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT,
                          EGL_NONE};
  EGLContext c = eglCreateContext(d, EGL_NO_CONFIG_KHR, EGL_NO_CONTEXT, attrs);
  if (c == EGL_NO_CONTEXT)
    throw Error(fmt::format("EGL gives no OpenGL 3.3 core context ({})", egl_error()));
  context_ = c;
  if (!eglMakeCurrent(d, EGL_NO_SURFACE, EGL_NO_SURFACE, c))
    throw Error(
        fmt::format("EGL cannot make the context current without a surface ({})", egl_error()));

  // GL 3.x entry points come from EGL, not from the GL 1.x library's exports.
  auto gen_framebuffers = egl_proc<PFNGLGENFRAMEBUFFERSPROC>("glGenFramebuffers");
  auto bind_framebuffer = egl_proc<PFNGLBINDFRAMEBUFFERPROC>("glBindFramebuffer");
  auto framebuffer_texture = egl_proc<PFNGLFRAMEBUFFERTEXTURE2DPROC>("glFramebufferTexture2D");
  auto check_status = egl_proc<PFNGLCHECKFRAMEBUFFERSTATUSPROC>("glCheckFramebufferStatus");
  if (!gen_framebuffers || !bind_framebuffer || !framebuffer_texture || !check_status)
    throw Error("the OpenGL context has no framebuffer objects");
  glGenTextures(1, &color_);
  glBindTexture(GL_TEXTURE_2D, color_);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, width, height, 0, GL_RGBA, GL_UNSIGNED_BYTE, nullptr);
  gen_framebuffers(1, &fbo_);
  bind_framebuffer(GL_FRAMEBUFFER, fbo_);
  framebuffer_texture(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_TEXTURE_2D, color_, 0);
  if (check_status(GL_FRAMEBUFFER) != GL_FRAMEBUFFER_COMPLETE)
    throw Error("the offscreen framebuffer is incomplete");
}

HeadlessGl::~HeadlessGl() {
  if (color_) glDeleteTextures(1, &color_);
  if (fbo_) {
    if (auto del = egl_proc<PFNGLDELETEFRAMEBUFFERSPROC>("glDeleteFramebuffers")) del(1, &fbo_);
  }
  if (display_) {
    eglMakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    if (context_) eglDestroyContext(display_, context_);
    eglTerminate(display_);
  }
}

void HeadlessGl::bind() {
  egl_proc<PFNGLBINDFRAMEBUFFERPROC>("glBindFramebuffer")(GL_FRAMEBUFFER, fbo_);
  glViewport(0, 0, width_, height_);
  glClearColor(0.06f, 0.06f, 0.07f, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
}

std::vector<std::uint8_t> HeadlessGl::read_rgba() const {
  const std::size_t row = static_cast<std::size_t>(width_) * 4;
  std::vector<std::uint8_t> px(row * height_), flipped(row * height_);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width_, height_, GL_RGBA, GL_UNSIGNED_BYTE, px.data());
  for (int y = 0; y < height_; ++y)  // GL's first row is the bottom one
    std::copy_n(px.data() + (height_ - 1 - y) * row, row, flipped.data() + y * row);
  return flipped;
}

std::string HeadlessGl::renderer() const {
  const auto* r = reinterpret_cast<const char*>(glGetString(GL_RENDERER));
  return r ? r : "?";
}

void write_png(const std::string& path, int width, int height,
               const std::vector<std::uint8_t>& rgba) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path(), ec);
  if (!stbi_write_png(path.c_str(), width, height, 4, rgba.data(), width * 4))
    throw Error(fmt::format("cannot write {}", path));
}

}  // namespace distlab::viewer
