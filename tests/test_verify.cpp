// verify.hpp: results are compared with a float64 reference, with a stated tolerance.
#include "catch.hpp"

#include <Eigen/Core>

#include <cmath>
#include <limits>
#include <vector>

#include "core/runtime/verify.hpp"

using namespace distlab;

namespace {
template <class T>
View<const T> view_of(const std::vector<T>& v) {
  return {v.data(), v.size(), Device::cpu};
}
}  // namespace

TEST_CASE("compare: an exact copy passes with tolerance 0", "[verify]") {
  const std::vector<float> got = {1.0f, -0.5f, 0.25f};
  Eigen::VectorXd want(3);
  want << 1.0, -0.5, 0.25;
  const auto c = compare(view_of(got), want, 0.0);
  CHECK(c.ok);
  CHECK(c.max_error == 0.0);
  CHECK(c.n == 3);
}

TEST_CASE("compare: one wrong element fails and is named in the detail", "[verify]") {
  const std::vector<float> got = {1.0f, 2.5f, 3.0f};
  Eigen::VectorXd want(3);
  want << 1.0, 2.0, 3.0;
  const auto c = compare(view_of(got), want, 1e-6);
  CHECK_FALSE(c.ok);
  CHECK(c.worst == 1);
  CHECK(c.max_error == Approx(0.5));
  CHECK(c.got == 2.5);
  CHECK(c.want == 2.0);
  CHECK_THAT(c.detail(),
             Catch::Contains("[1]") && Catch::Contains("got 2.5") && Catch::Contains("want 2"));
}

TEST_CASE("compare: the tolerance is relative to 1 + |want|", "[verify]") {
  Eigen::VectorXd want(1);
  want << 1000.0;
  const std::vector<double> inside = {1000.0 + 0.9 * 1e-3 * 1001.0},
                            outside = {1000.0 + 1.1 * 1e-3 * 1001.0};
  CHECK(compare(view_of(inside), want, 1e-3).ok);
  CHECK_FALSE(compare(view_of(outside), want, 1e-3).ok);
}

TEST_CASE("compare: NaN, Inf and a length mismatch fail", "[verify]") {
  Eigen::VectorXd want = Eigen::VectorXd::Zero(2);
  const std::vector<float> nan = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> inf = {std::numeric_limits<float>::infinity(), 0.0f};
  const std::vector<float> short_one = {0.0f};
  CHECK_FALSE(compare(view_of(nan), want, 1.0).ok);
  CHECK_FALSE(compare(view_of(inf), want, 1.0).ok);
  CHECK_FALSE(compare(view_of(short_one), want, 1.0).ok);
  // A NaN is the worst element, so the detail points at it.
  CHECK(compare(view_of(nan), want, 1.0).worst == 1);
}

TEST_CASE("compare: empty against empty passes and says so", "[verify]") {
  const std::vector<float> none;
  const auto c = compare(view_of(none), Eigen::VectorXd(0), 0.0);
  CHECK(c.ok);
  CHECK(c.detail() == "empty");
}

TEST_CASE("sum_tolerance grows with the number of terms and covers float32 rounding", "[verify]") {
  CHECK(sum_tolerance(1) == Approx(4.0 * std::ldexp(1.0, -24)));
  CHECK(sum_tolerance(8) == Approx(8 * sum_tolerance(1)));
  // A float32 sum of 8 values in [-1, 1) in a different order stays inside the tolerance.
  const float xs[8] = {0.1f, -0.7f, 0.33f, 0.9f, -0.2f, 0.55f, -0.99f, 0.01f};
  float fwd = 0, bwd = 0;
  double exact = 0;
  for (int i = 0; i < 8; ++i) {
    fwd += xs[i];
    bwd += xs[7 - i];
    exact += xs[i];
  }
  CHECK(std::fabs(fwd - exact) <= sum_tolerance(8) * (1 + std::fabs(exact)));
  CHECK(std::fabs(bwd - exact) <= sum_tolerance(8) * (1 + std::fabs(exact)));
}

TEST_CASE("ErrorBound: each element within its own bound, and the worst share named", "[verify]") {
  ErrorBound b;
  b.add(0.5, {1.0, 0.0});   // half its bound
  b.add(-0.9, {0.5, 0.5});  // 0.9 of it: the worst so far, and a negative error counts by size
  b.add(0.0, {0.0, 0.0});   // an exact element needs no bound
  CHECK(b.ok());
  CHECK(b.detail("a", "b") ==
        "0 of 3 over their bound; the worst, [1]: |error| 0.9, 0.9 of its bound 1 = a 0.5 + b 0.5");
  b.add(2e-9, {1e-9, 5e-10});  // over: 1.3 of its bound
  CHECK_FALSE(b.ok());
  CHECK(b.detail("a", "b").rfind("1 of 4 over their bound; the worst, [3]", 0) == 0);
}

TEST_CASE("ErrorBound: a NaN or an error where the bound is 0 fails", "[verify]") {
  ErrorBound nan;
  nan.add(0.1, {1, 1});
  nan.add(std::numeric_limits<double>::quiet_NaN(), {1, 1});
  CHECK_FALSE(nan.ok());
  CHECK(nan.detail("a", "b").find("the worst, [1]") != std::string::npos);
  ErrorBound zero;
  zero.add(1e-300, {0, 0});
  CHECK_FALSE(zero.ok());
  CHECK(ErrorBound{}.detail("a", "b") == "empty");
}
