// call_align.cpp — two sequences of calls aligned (call_align.hpp).
#include "viewer/model/call_align.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <unordered_map>

namespace distlab::viewer {

bool compatible(const AlignCall& a, const AlignCall& b) {
  return a.name == b.name && (a.bytes < 0 || b.bytes < 0 || a.bytes == b.bytes) &&
         (a.seq < 0 || b.seq < 0 || a.seq == b.seq);
}

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// The median gap between consecutive calls of a (at least a nanosecond).
double spacing(const std::vector<AlignCall>& a) {
  std::vector<double> gaps;
  for (std::size_t i = 1; i < a.size(); ++i) gaps.push_back(std::abs(a[i].time - a[i - 1].time));
  return gaps.empty() ? 1.0 : std::max(1e-3, median(std::move(gaps)));
}

struct Cell {
  int gaps = std::numeric_limits<int>::max();
  double cost = 0;
  std::uint8_t move = 0;  // 0 start, 1 pair, 2 a alone, 3 b alone
};

bool better(int gaps, double cost, const Cell& c) {
  return gaps < c.gaps || (gaps == c.gaps && cost < c.cost - 1e-12);
}

// The best alignment within diagonals d = i - j in [lo, hi] (the band holds 0 and n - m).
Alignment band_align(const std::vector<AlignCall>& a, const std::vector<AlignCall>& b,
                     double offset, double scale, int lo, int hi) {
  const int n = static_cast<int>(a.size()), m = static_cast<int>(b.size());
  const int width = hi - lo + 1;
  std::vector<Cell> dp(static_cast<std::size_t>(n + 1) * static_cast<std::size_t>(width));
  auto at = [&](int i, int j) -> Cell& {
    return dp[static_cast<std::size_t>(i) * static_cast<std::size_t>(width) +
              static_cast<std::size_t>(i - j - lo)];
  };
  auto inside = [&](int i, int j) { return j >= 0 && j <= m && i - j >= lo && i - j <= hi; };
  at(0, 0) = Cell{0, 0, 0};
  for (int i = 0; i <= n; ++i) {
    const int j0 = std::max(0, i - hi), j1 = std::min(m, i - lo);
    for (int j = j0; j <= j1; ++j) {
      if (i == 0 && j == 0) continue;
      Cell& c = at(i, j);
      if (i > 0 && j > 0 && inside(i - 1, j - 1)) {
        const Cell& p = at(i - 1, j - 1);
        const AlignCall &x = a[static_cast<std::size_t>(i - 1)],
                        &y = b[static_cast<std::size_t>(j - 1)];
        if (p.gaps != std::numeric_limits<int>::max() && compatible(x, y)) {
          const double t = std::min(0.5, std::abs(x.time - (y.time + offset)) / scale);
          if (better(p.gaps, p.cost + t, c)) c = Cell{p.gaps, p.cost + t, 1};
        }
      }
      if (i > 0 && inside(i - 1, j)) {
        const Cell& p = at(i - 1, j);
        if (p.gaps != std::numeric_limits<int>::max() && better(p.gaps + 1, p.cost, c))
          c = Cell{p.gaps + 1, p.cost, 2};
      }
      if (j > 0 && inside(i, j - 1)) {
        const Cell& p = at(i, j - 1);
        if (p.gaps != std::numeric_limits<int>::max() && better(p.gaps + 1, p.cost, c))
          c = Cell{p.gaps + 1, p.cost, 3};
      }
    }
  }
  Alignment out;
  out.gaps = at(n, m).gaps;
  for (int i = n, j = m; i > 0 || j > 0;) {
    const std::uint8_t move = at(i, j).move;
    if (move == 1)
      out.path.push_back({--i, --j});
    else if (move == 2)
      out.path.push_back({--i, -1});
    else
      out.path.push_back({-1, --j});
  }
  std::reverse(out.path.begin(), out.path.end());
  return out;
}

Alignment dp_align(const std::vector<AlignCall>& a, const std::vector<AlignCall>& b,
                   double offset) {
  const int n = static_cast<int>(a.size()), m = static_cast<int>(b.size());
  const double scale = spacing(a.size() >= b.size() ? a : b);
  for (int w = 16;; w *= 2) {
    const int lo = std::min(0, n - m) - w, hi = std::max(0, n - m) + w;
    Alignment best = band_align(a, b, offset, scale, lo, hi);
    // Every alignment with G gaps stays within G of the diagonal: when the band's best has no
    // more gaps than the band is wide, nothing outside it can do better.
    if (best.gaps <= w || (lo <= -m && hi >= n)) return best;
  }
}

// Sequence numbers on every call: equal numbers (and collectives) pair.
Alignment seq_align(const std::vector<AlignCall>& a, const std::vector<AlignCall>& b) {
  std::unordered_map<std::int64_t, int> in_b;
  for (std::size_t j = 0; j < b.size(); ++j) in_b.emplace(b[j].seq, static_cast<int>(j));
  Alignment out;
  int j = 0;  // b's calls before j are placed
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto it = in_b.find(a[i].seq);
    if (it != in_b.end() && it->second >= j &&
        compatible(a[i], b[static_cast<std::size_t>(it->second)])) {
      for (; j < it->second; ++j) out.path.push_back({-1, j}), ++out.gaps;
      out.path.push_back({static_cast<int>(i), j++});
    } else {
      out.path.push_back({static_cast<int>(i), -1});
      ++out.gaps;
    }
  }
  for (; j < static_cast<int>(b.size()); ++j) out.path.push_back({-1, j}), ++out.gaps;
  return out;
}

double pair_offset(const std::vector<AlignCall>& a, const std::vector<AlignCall>& b,
                   const Alignment& al, double fallback) {
  std::vector<double> d;
  for (const auto& [i, j] : al.path)
    if (i >= 0 && j >= 0)
      d.push_back(a[static_cast<std::size_t>(i)].time - b[static_cast<std::size_t>(j)].time);
  return d.empty() ? fallback : median(std::move(d));
}

}  // namespace

Alignment align_calls(const std::vector<AlignCall>& a, const std::vector<AlignCall>& b,
                      double prior) {
  auto numbered = [](const std::vector<AlignCall>& v) {
    return std::all_of(v.begin(), v.end(), [](const AlignCall& c) { return c.seq >= 0; });
  };
  Alignment al;
  if (numbered(a) && numbered(b)) {
    al = seq_align(a, b);
    al.offset = pair_offset(a, b, al, prior);
    return al;
  }
  al = dp_align(a, b, prior);
  const double offset = pair_offset(a, b, al, prior);
  if (offset != prior) al = dp_align(a, b, offset);
  al.offset = pair_offset(a, b, al, prior);
  return al;
}

}  // namespace distlab::viewer
