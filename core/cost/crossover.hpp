// crossover.hpp — where one algorithm starts to beat another: from the alpha-beta model, and
// from a sweep of measured times (lesson 21's --sweep).
//
// An algorithm that waits k times and moves m S bytes over links of beta seconds a byte takes
// t(S) = k alpha + m S beta. Two of them, a (fewer waits: k_a < k_b) and b (fewer bytes:
// m_b < m_a), take the same time at
//   S* = (k_b alpha_b - k_a alpha_a) / (m_a beta_a - m_b beta_b)
// and b is faster from there up; no crossover when b never is (S* <= 0 or m_b beta_b >= m_a
// beta_a).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace distlab {

struct AlphaBeta {
  double waits = 0;  // k: latencies per call
  double bytes = 0;  // m: bytes moved per byte of the buffer
  double alpha = 0;  // seconds per latency
  double beta = 0;   // seconds per byte
  double time(double s) const { return waits * alpha + bytes * s * beta; }
};

// The buffer size from which b is faster than a (a: fewer waits), or none.
inline std::optional<double> model_crossover(const AlphaBeta& a, const AlphaBeta& b) {
  const double slope = a.bytes * a.beta - b.bytes * b.beta;
  const double start = b.waits * b.alpha - a.waits * a.alpha;
  if (!(slope > 0)) return std::nullopt;
  return start > 0 ? start / slope : 0.0;
}

// A sweep's answer: the smallest size from which b is at least as fast as a at every larger size
// measured (`at`), b never faster at the largest (`none`), or b faster from the first size on.
// `flips` counts the changes of the faster one along the sweep: more than one is noise or a
// curve the model does not have.
struct SweepCrossover {
  std::optional<std::uint64_t> at;  // none: a stays faster at the largest size
  int flips = 0;
};

inline SweepCrossover sweep_crossover(const std::vector<std::uint64_t>& sizes,
                                      const std::vector<double>& a, const std::vector<double>& b) {
  SweepCrossover out;
  if (sizes.empty()) return out;
  for (std::size_t i = 1; i < sizes.size(); ++i)
    if ((b[i] <= a[i]) != (b[i - 1] <= a[i - 1])) ++out.flips;
  std::size_t i = sizes.size();
  while (i > 0 && b[i - 1] <= a[i - 1]) --i;
  if (i < sizes.size()) out.at = sizes[i];
  return out;
}

}  // namespace distlab
