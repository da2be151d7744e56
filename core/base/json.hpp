// json.hpp — the little JSON writing the trace and calibration files need.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace distlab {

// "a\"b" -> "\"a\\\"b\"" (quotes included).
inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

// A number as JSON: integers plainly, others with enough digits, non-finite as null.
inline std::string json_number(double v) {
  if (!(v == v) || v > 1.7e308 || v < -1.7e308) return "null";
  return fmt::format("{}", v);
}

}  // namespace distlab
