#include "core/base/units.hpp"

#include <cctype>
#include <cmath>
#include <limits>

#include "core/base/check.hpp"

namespace distlab {

std::uint64_t parse_size(const std::string& text) {
  std::size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0) {
    throw UsageError("'" + text +
                     "' is not a size; write a whole number with an optional suffix K, M or G, "
                     "e.g. 1000, 4K, 64M");
  }
  std::string suffix = text.substr(pos);
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.size() == 2 && suffix[1] == 'I') suffix.pop_back();  // "Ki" == "K"
  std::uint64_t scale = 1;
  if (suffix == "K")
    scale = 1ull << 10;
  else if (suffix == "M")
    scale = 1ull << 20;
  else if (suffix == "G")
    scale = 1ull << 30;
  else if (!suffix.empty())
    throw UsageError("'" + text + "' has an unknown suffix; use K, M or G (powers of 1024)");
  const std::string digits = text.substr(0, pos);
  if (digits.size() > 15) throw UsageError("'" + text + "' is too large a size");
  const std::uint64_t value = std::stoull(digits);
  if (value > std::numeric_limits<std::uint64_t>::max() / scale)
    throw UsageError("'" + text + "' is too large a size");
  return value * scale;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", bytes);
  return fmt::format("{:.{}f} {}", bytes, bytes < 10 ? 2 : (bytes < 100 ? 1 : 0), units[u]);
}

std::string format_seconds(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1.0) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

std::string format_count(std::uint64_t n) {
  if (n >= (1ull << 30) && n % (1ull << 30) == 0) return fmt::format("{}G", n >> 30);
  if (n >= (1ull << 20) && n % (1ull << 20) == 0) return fmt::format("{}M", n >> 20);
  if (n >= (1ull << 10) && n % (1ull << 10) == 0) return fmt::format("{}K", n >> 10);
  return fmt::format("{}", n);
}

}  // namespace distlab
