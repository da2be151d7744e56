// calibration.hpp — alpha (latency, s) and beta (s per byte) measured by lesson 01's ping-pong.
//
// Saved in one JSON file (default traces/calibration.json) under a key per transport and
// device ("threads-cpu", "mpi-cpu", ...), so the cost models of later lessons can predict
// times as alpha + beta * bytes for the transport they run on.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distlab {

struct Calibration {
  double alpha_s = 0;          // seconds per message
  double beta_s_per_byte = 0;  // seconds per byte
  std::vector<std::pair<double, double>> points;  // (bytes, one-way seconds) the fit used
};

// Weighted least squares fit of t = alpha + beta * n, each point weighted by 1/t^2 so every
// size counts by its relative error (plain least squares would let 64 MiB drown 8 B).
Calibration fit_alpha_beta(const std::vector<std::pair<double, double>>& points);

// Replaces the entry `key` in the file (keeping the others) or creates the file.
void save_calibration(const std::string& path, const std::string& key, const Calibration& c);
std::optional<Calibration> load_calibration(const std::string& path, const std::string& key);

}  // namespace distlab
