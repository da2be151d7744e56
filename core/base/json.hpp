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

// True when `s` is a number in JSON's own grammar, -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?:
// "-0.5" and "1e9" are; ".5", "+2", "007", "1." and "inf" are not.
inline bool is_json_number(std::string_view s) {
  std::size_t i = 0;
  const auto digits = [&] {  // how many digits start at i (i moves past them)
    const std::size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - from;
  };
  const auto next_is = [&](std::string_view chars) {  // i moves past one of `chars`
    if (i == s.size() || chars.find(s[i]) == std::string_view::npos) return false;
    ++i;
    return true;
  };
  next_is("-");
  if (!next_is("0") && digits() == 0) return false;
  if (next_is(".") && digits() == 0) return false;
  if (next_is("eE")) {
    next_is("+-");
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// A number as JSON: integers plainly, others with enough digits, non-finite as null.
inline std::string json_number(double v) {
  if (!(v == v) || v > 1.7e308 || v < -1.7e308) return "null";
  return fmt::format("{}", v);
}

}  // namespace distlab
