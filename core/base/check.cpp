#include "core/base/check.hpp"

#include <cstring>

namespace distlab {

void fail_at(const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  throw Error(fmt::format("{} ({}:{})", message, base ? base + 1 : file, line));
}

}  // namespace distlab
