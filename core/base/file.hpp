// file.hpp — writing a whole file.
#pragma once

#include <string>

namespace distlab {

// Writes text to path, creating parent directories; throws Error when it cannot.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace distlab
