// verify.hpp — comparing a rank's result with an independent Eigen reference.
//
// References are computed in float64 with Eigen from the inputs (data.hpp), never from
// what the collective produced. A float32 sum of N terms in another order differs from the
// float64 sum by at most about N * 2^-24 of the terms' magnitudes, so reductions are
// compared with |got - want| <= tol * (1 + |want|) and copies must match exactly (tol 0).
#pragma once

#include <fmt/format.h>
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/device/buffer.hpp"
#include "core/runtime/data.hpp"

namespace distlab {

struct Comparison {
  bool ok = true;
  double max_error = 0;  // max |got - want|
  std::size_t worst = 0;
  double got = 0, want = 0;  // at the worst index
  std::size_t n = 0;

  std::string detail() const {
    if (n == 0) return "empty";
    return fmt::format("max |error| {:.3g} at [{}] (got {:.9g}, want {:.9g}) over {} elements",
                       max_error, worst, got, want, n);
  }
};

// Elements [0, count) of `rank`'s float32 input (data.hpp), in float64: a reference's start.
inline Eigen::VectorXd reference_input(std::uint64_t seed, int rank, std::size_t count) {
  Eigen::VectorXd x(static_cast<Eigen::Index>(count));
  for (std::size_t i = 0; i < count; ++i)
    x[static_cast<Eigen::Index>(i)] = input_value<float>(seed, rank, i);
  return x;
}

template <class T>
Comparison compare(View<const T> got, const Eigen::VectorXd& want, double tol) {
  if (got.device != Device::cpu) {  // checked on the host, against the same reference
    const std::vector<T> host = to_host(got);
    return compare(View<const T>{host.data(), host.size(), Device::cpu}, want, tol);
  }
  Comparison c;
  c.n = got.size();
  if (static_cast<std::size_t>(want.size()) != got.size()) {
    c.ok = false;
    c.max_error = INFINITY;
    return c;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = want[static_cast<Eigen::Index>(i)];
    const double err = std::fabs(g - w);
    if (!(err <= tol * (1.0 + std::fabs(w)))) c.ok = false;  // NaN fails too
    if (i == 0 || !(err <= c.max_error)) {
      c.max_error = err;
      c.worst = i;
      c.got = g;
      c.want = w;
    }
  }
  return c;
}

// --inject-fault: adds 1 to the first element (wherever the view lives), so the check that
// follows must fail.
template <class T>
void inject_fault_into(View<T> v) {
  if (v.n == 0) return;
  std::vector<T> first = to_host(v.sub(0, 1));
  first[0] += T(1);
  from_host(v.sub(0, 1), first);
}

// Element by element, an error against a bound of two terms (an error model's, computed per
// element): ok while every |error| is within its bound (a NaN never is). detail() names the
// worst element, the one with the largest share of its bound, and its bound's terms, so a
// failing check says what the model allowed and why.
class ErrorBound {
 public:
  struct Terms {
    double first = 0, second = 0;
  };
  void add(double error, Terms bound) {
    const double e = std::fabs(error), limit = bound.first + bound.second;
    if (!(e <= limit)) ++over_;
    max_error_ = std::isnan(e) ? INFINITY : std::max(max_error_, e);
    const double share = e == 0 ? 0 : limit > 0 ? e / limit : INFINITY;
    // A NaN's share is the worst, and stays so: nothing after it is worse.
    if (n_ == 0 || (!std::isnan(share_) && !(share <= share_))) {
      share_ = share;
      worst_ = n_;
      error_ = e;
      terms_ = bound;
    }
    ++n_;
  }
  bool ok() const { return over_ == 0; }
  double worst_share() const { return share_; }    // the worst element's |error| / bound
  double max_error() const { return max_error_; }  // the largest |error| (NaN: infinity)
  std::string detail(const char* first, const char* second) const {
    if (n_ == 0) return "empty";
    return fmt::format(
        "{} of {} over their bound; the worst, [{}]: |error| {:.3g}, {:.2g} of its bound {:.3g} "
        "= {} {:.3g} + {} {:.3g}",
        over_, n_, worst_, error_, share_, terms_.first + terms_.second, first, terms_.first,
        second, terms_.second);
  }

 private:
  std::size_t n_ = 0, over_ = 0, worst_ = 0;
  double share_ = 0, error_ = 0, max_error_ = 0;
  Terms terms_;
};

// Tolerance for a float32 sum of `terms` values of magnitude about 1, against float64.
inline double sum_tolerance(int terms) {
  return 4.0 * terms * std::ldexp(1.0, -24);
}

}  // namespace distlab
