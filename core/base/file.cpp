#include "core/base/file.hpp"

#include <filesystem>
#include <fstream>

#include "core/base/check.hpp"

namespace distlab {

void write_text_file(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  DL_CHECK(f.good(), "cannot write {}", path);
  f << text;
  f.close();
  DL_CHECK(f.good(), "writing {} failed", path);
}

}  // namespace distlab
