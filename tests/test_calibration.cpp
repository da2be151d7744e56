// calibration.hpp: the alpha-beta fit and the calibration file lesson 01 writes.
#include "catch.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/base/json.hpp"
#include "core/cost/calibration.hpp"

using namespace distlab;

namespace {
std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("distlab_test_") + name)).string();
}
}  // namespace

TEST_CASE("calibration: the fit recovers alpha and beta from exact times", "[calibration]") {
  const double alpha = 2.5e-6, beta = 4e-11;  // 2.5 us, 25 GB/s
  std::vector<std::pair<double, double>> pts;
  for (double n = 8; n <= (1 << 26); n *= 2) pts.emplace_back(n, alpha + beta * n);
  const Calibration c = fit_alpha_beta(pts);
  CHECK(c.alpha_s == Approx(alpha).epsilon(1e-9));
  CHECK(c.beta_s_per_byte == Approx(beta).epsilon(1e-9));
  CHECK(c.points.size() == pts.size());
}

TEST_CASE("calibration: the fit weighs sizes by relative error", "[calibration]") {
  // 10% noise on the largest size must not swamp the latency read off the small ones.
  const double alpha = 1e-6, beta = 1e-10;
  std::vector<std::pair<double, double>> pts;
  for (double n = 8; n <= (1 << 20); n *= 4) pts.emplace_back(n, alpha + beta * n);
  pts.back().second *= 1.1;
  const Calibration c = fit_alpha_beta(pts);
  CHECK(c.alpha_s == Approx(alpha).epsilon(0.02));
}

TEST_CASE("calibration: the lower envelope reads the line under delayed sizes", "[calibration]") {
  // A line 1 us + n / 40 GB/s; load delays the four smallest sizes by 2 ms and one large size by
  // 30%, as a busy machine did: the envelope stays on the undelayed sizes, exactly.
  const double alpha = 1e-6, beta = 2.5e-11;
  std::vector<std::pair<double, double>> pts;
  for (double n = 8; n <= 65536; n *= 2) pts.emplace_back(n, alpha + beta * n);
  for (std::size_t i = 0; i < 4; ++i) pts[i].second += 2e-3;
  pts[10].second *= 1.3;
  const std::optional<Calibration> envelope = fit_lower_envelope(pts);
  REQUIRE(envelope);
  CHECK(envelope->alpha_s == Approx(alpha).epsilon(1e-9));
  CHECK(envelope->beta_s_per_byte == Approx(beta).epsilon(1e-9));
  for (const auto& [n, t] : pts)
    CHECK(t >= (envelope->alpha_s + envelope->beta_s_per_byte * n) * (1 - 1e-9));

  // Times that fall with the size: no line with alpha > 0 and beta > 0 runs under them all.
  CHECK_FALSE(fit_lower_envelope({{8, 3e-6}, {64, 2e-6}, {512, 1e-6}}));
  // A line through the origin is not physical either (alpha = 0).
  CHECK_FALSE(fit_lower_envelope({{8, 8e-10}, {16, 16e-10}, {32, 32e-10}}));
}

TEST_CASE("calibration: fewer than two sizes or a non-positive time is refused", "[calibration]") {
  CHECK_THROWS_WITH(fit_alpha_beta({{8, 1e-6}}), Catch::Contains("at least two sizes"));
  CHECK_THROWS_WITH(fit_alpha_beta({{8, 1e-6}, {16, 0.0}}), Catch::Contains("must be positive"));
}

TEST_CASE("calibration: save keeps other transports' entries and load reads them back",
          "[calibration]") {
  const std::string path = temp_path("calibration.json");
  std::remove(path.c_str());
  CHECK_FALSE(load_calibration(path, "threads-cpu").has_value());
  save_calibration(path, "threads-cpu",
                   Calibration{1e-6, 1e-10, {{8, 1.0008e-6}, {1024, 1.1024e-6}}});
  save_calibration(path, "mpi-cpu", Calibration{3e-6, 2e-10, {}});
  save_calibration(path, "threads-cpu",
                   Calibration{2e-6, 5e-11, {{8, 2e-6}}});  // replaces the first
  const auto threads = load_calibration(path, "threads-cpu");
  const auto mpi = load_calibration(path, "mpi-cpu");
  REQUIRE(threads.has_value());
  REQUIRE(mpi.has_value());
  CHECK(threads->alpha_s == Approx(2e-6));
  CHECK(threads->beta_s_per_byte == Approx(5e-11));
  REQUIRE(threads->points.size() == 1);
  CHECK(threads->points[0].first == 8);
  CHECK(mpi->alpha_s == Approx(3e-6));
  CHECK_FALSE(load_calibration(path, "cuda-nccl").has_value());
  std::remove(path.c_str());
}

TEST_CASE("calibration: an unreadable file is started afresh, not trusted", "[calibration]") {
  const std::string path = temp_path("calibration_bad.json");
  std::ofstream(path) << "{not json";
  CHECK_FALSE(load_calibration(path, "threads-cpu").has_value());
  save_calibration(path, "threads-cpu", Calibration{1e-6, 1e-10, {}});
  CHECK(load_calibration(path, "threads-cpu").has_value());
  std::remove(path.c_str());
}

TEST_CASE("json: strings are escaped, non-finite numbers become null", "[json]") {
  CHECK(json_string("a\"b\\c\nd") == "\"a\\\"b\\\\c\\nd\"");
  CHECK(json_string(std::string(1, '\x01')) == "\"\\u0001\"");
  CHECK(json_number(1.5) == "1.5");
  CHECK(json_number(1.0 / 0.0) == "null");
  CHECK(json_number(0.0 / 0.0) == "null");
}

TEST_CASE("json: a number in JSON's grammar is told from one it cannot spell", "[json]") {
  for (const char* yes : {"0", "-0", "7", "-0.5", "10.25", "1e9", "1E+9", "2.5e-3", "-12"}) {
    INFO(yes);
    CHECK(is_json_number(yes));
  }
  for (const char* no : {"", "-", ".5", "+2", "007", "01", "1.", "1e", "1e+", "inf", "nan", "1x",
                         "0x10", " 1", "1 ", "--1", "1.2.3"}) {
    INFO(no);
    CHECK_FALSE(is_json_number(no));
  }
}
