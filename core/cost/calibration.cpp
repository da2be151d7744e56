#include "core/cost/calibration.hpp"

#include <fmt/format.h>
#include <simdjson.h>
#include <Eigen/Dense>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/base/file.hpp"
#include "core/base/json.hpp"
#include "core/comm/comm.hpp"

namespace distlab {

Calibration fit_alpha_beta(const std::vector<std::pair<double, double>>& points) {
  DL_CHECK(points.size() >= 2, "fitting alpha and beta needs at least two sizes, got {}",
           points.size());
  // Rows [w, w n] [alpha beta]^T = w t with w = 1 / t: minimises the sum of squared relative
  // errors.
  Eigen::MatrixXd A(static_cast<Eigen::Index>(points.size()), 2);
  Eigen::VectorXd b(static_cast<Eigen::Index>(points.size()));
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto [n, t] = points[i];
    DL_CHECK(t > 0, "a measured time must be positive (size {} B took {} s)", n, t);
    const double w = 1.0 / t;
    A(Eigen::Index(i), 0) = w;
    A(Eigen::Index(i), 1) = w * n;
    b[Eigen::Index(i)] = 1.0;
  }
  const Eigen::Vector2d x = A.colPivHouseholderQr().solve(b);
  return {x[0], x[1], points};
}

std::optional<Calibration> fit_lower_envelope(
    const std::vector<std::pair<double, double>>& points) {
  std::optional<Calibration> best;
  double best_excess = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    for (std::size_t j = i + 1; j < points.size(); ++j) {
      const auto [ni, ti] = points[i];
      const auto [nj, tj] = points[j];
      if (ni == nj) continue;
      const double beta = (tj - ti) / (nj - ni), alpha = ti - beta * ni;
      if (!(alpha > 0 && beta > 0)) continue;
      double excess = 0;
      bool under_all = true;
      for (const auto& [n, t] : points) {
        const double line = alpha + beta * n;
        // The two points on the line may sit a rounding below it.
        under_all = under_all && t >= line * (1 - 1e-12);
        excess += t / line - 1;
      }
      if (under_all && (!best || excess < best_excess)) {
        best = Calibration{alpha, beta, points};
        best_excess = excess;
      }
    }
  }
  return best;
}

Calibration ping_pong_fit(Comm& comm, std::size_t max_bytes, std::size_t factor, int tag) {
  const int me = comm.rank();
  if (me > 1 || comm.size() < 2) return {};
  const int other = 1 - me;
  std::vector<std::pair<double, double>> points;  // (bytes, one-way seconds)
  Buffer<std::uint8_t> msg = comm.alloc<std::uint8_t>(max_bytes, Category::comm);
  for (std::size_t bytes = 8; bytes <= max_bytes; bytes *= std::max<std::size_t>(factor, 2)) {
    View<std::uint8_t> v = msg.sub(0, bytes);
    const int reps =
        static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / bytes, 3, 30));
    std::vector<double> times;
    for (int rep = -1; rep < reps; ++rep) {  // rep -1 warms up
      const double t0 = now_us();
      if (me == 0) comm.send(View<const std::uint8_t>(v), other, tag);
      comm.recv(v, other, tag);
      if (me == 1) comm.send(View<const std::uint8_t>(v), other, tag);
      if (rep >= 0) times.push_back((now_us() - t0) * 0.5e-6);
    }
    std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2),
                     times.end());
    points.emplace_back(static_cast<double>(bytes), times[times.size() / 2]);
  }
  return fit_alpha_beta(points);
}

FoundCalibration find_or_measure_calibration(Comm& comm, const std::string& path,
                                             const std::string& key, std::size_t max_bytes,
                                             std::size_t factor) {
  constexpr int kTagFound = 32001;
  const int me = comm.rank();
  FoundCalibration found;
  if (me == 0) {
    found.fit = load_calibration(path, key);
    found.from_file = found.fit.has_value();
  }
  if (comm.size() < 2 || me > 1) return found;
  const bool was_enabled = comm.recorder().enabled();
  comm.recorder().set_enabled(false);  // housekeeping, not part of the lesson's trace
  Buffer<std::int32_t> flag = comm.alloc<std::int32_t>(1, Category::comm);
  flag[0] = found.from_file ? 1 : 0;
  if (me == 0)
    comm.send(View<const std::int32_t>(flag.view()), 1, kTagFound);
  else
    comm.recv(flag.view(), 0, kTagFound);
  if (flag[0] == 0) {
    Calibration fit = ping_pong_fit(comm, max_bytes, factor);
    if (me == 0) found.fit = std::move(fit);
  }
  comm.recorder().set_enabled(was_enabled);
  return found;
}

namespace {

std::string entry_json(const Calibration& c) {
  std::string pts;
  for (std::size_t i = 0; i < c.points.size(); ++i)
    pts += fmt::format("{}[{},{}]", i ? "," : "", json_number(c.points[i].first),
                       json_number(c.points[i].second));
  return fmt::format(
      R"({{"alpha_s":{},"beta_s_per_byte":{},"bandwidth_bytes_per_s":{},"points":[{}]}})",
      json_number(c.alpha_s), json_number(c.beta_s_per_byte),
      json_number(c.beta_s_per_byte > 0 ? 1.0 / c.beta_s_per_byte : 0.0), pts);
}

std::map<std::string, Calibration> read_all(const std::string& path) {
  std::map<std::string, Calibration> out;
  std::ifstream f(path);
  if (!f) return out;
  std::stringstream ss;
  ss << f.rdbuf();
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(ss.str()).get(root)) return out;  // unreadable: start afresh
  simdjson::dom::object entries;
  if (root["calibrations"].get_object().get(entries)) return out;
  for (auto [key, value] : entries) {
    Calibration c;
    double a = 0, b = 0;
    if (value["alpha_s"].get_double().get(a) || value["beta_s_per_byte"].get_double().get(b))
      continue;
    c.alpha_s = a;
    c.beta_s_per_byte = b;
    simdjson::dom::array pts;
    if (!value["points"].get_array().get(pts))
      for (auto p : pts) {
        double n = 0, t = 0;
        if (!p.at(0).get_double().get(n) && !p.at(1).get_double().get(t))
          c.points.emplace_back(n, t);
      }
    out[std::string(key)] = c;
  }
  return out;
}

}  // namespace

std::string calibration_key(const World& world) {
  return fmt::format("{}-{}", run_kind(world), to_string(world.device));
}

void save_calibration(const std::string& path, const std::string& key, const Calibration& c) {
  auto all = read_all(path);
  all[key] = c;
  std::string text =
      "{\"schema_version\":1,\"model\":\"t = alpha + beta * bytes\",\"calibrations\":{\n";
  bool first = true;
  for (const auto& [k, v] : all) {
    text += fmt::format("{}  {}:{}", first ? "" : ",\n", json_string(k), entry_json(v));
    first = false;
  }
  text += "\n}}\n";
  write_text_file(path, text);
}

std::map<std::string, Calibration> load_calibrations(const std::string& path) {
  return read_all(path);
}

std::optional<Calibration> load_calibration(const std::string& path, const std::string& key) {
  auto all = read_all(path);
  auto it = all.find(key);
  if (it == all.end()) return std::nullopt;
  return it->second;
}

}  // namespace distlab
