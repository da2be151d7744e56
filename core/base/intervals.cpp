// intervals.cpp — unions of time spans and their overlap (intervals.hpp).
#include "core/base/intervals.hpp"

#include <algorithm>
#include <cstddef>

namespace distlab {

Intervals merged(Intervals spans) {
  std::sort(spans.begin(), spans.end());
  Intervals out;
  for (const auto& s : spans)
    if (!out.empty() && s.first <= out.back().second)
      out.back().second = std::max(out.back().second, s.second);
    else
      out.push_back(s);
  return out;
}

Intervals intersection(const Intervals& a, const Intervals& b) {
  Intervals out;
  std::size_t j = 0;
  for (const auto& span : a) {
    const double a0 = span.first, a1 = span.second;  // not a structured binding: lambdas use it
    // b's ends ascend (merged): a binary search, so that one span against a rank's every
    // interval (the timeline, each frame) costs a log.
    j = static_cast<std::size_t>(
        std::partition_point(b.begin() + static_cast<std::ptrdiff_t>(j), b.end(),
                             [&](const auto& x) { return x.second <= a0; }) -
        b.begin());
    for (std::size_t i = j; i < b.size() && b[i].first < a1; ++i) {
      const double lo = std::max(a0, b[i].first), hi = std::min(a1, b[i].second);
      if (hi > lo) out.push_back({lo, hi});
    }
  }
  return out;
}

double length_before(const Intervals& u, double t) {
  double total = 0;
  for (const auto& [a, b] : u) {
    if (a >= t) break;
    total += std::min(b, t) - a;
  }
  return total;
}

double length(const Intervals& u) {
  double total = 0;
  for (const auto& [a, b] : u) total += b - a;
  return total;
}

}  // namespace distlab
