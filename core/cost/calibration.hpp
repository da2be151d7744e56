// calibration.hpp — alpha (latency, s) and beta (s per byte) measured by lesson 01's ping-pong.
//
// Saved in one JSON file (default traces/calibration.json) under a key per transport and
// device ("threads-cpu", "mpi-cpu", ...), so the cost models of later lessons can predict
// times as alpha + beta * bytes for the transport they run on.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/world.hpp"

namespace distlab {

struct Calibration {
  double alpha_s = 0;                             // seconds per message
  double beta_s_per_byte = 0;                     // seconds per byte
  std::vector<std::pair<double, double>> points;  // (bytes, one-way seconds) the fit used
};

// Weighted least squares fit of t = alpha + beta * n, each point weighted by 1/t^2 so every
// size counts by its relative error (plain least squares would let 64 MiB drown 8 B).
Calibration fit_alpha_beta(const std::vector<std::pair<double, double>>& points);

// The lower envelope: of the lines through two measured points with alpha > 0 and beta > 0 that
// no point lies below, the one the points exceed least (summed relative excess). The noise
// model: on a busy machine noise only delays (a descheduled rank, a late wakeup), so the fastest
// times are the truest and the line runs under every point. nullopt when no such line exists
// (every pair gives alpha <= 0 or beta <= 0, or leaves a point below it).
std::optional<Calibration> fit_lower_envelope(const std::vector<std::pair<double, double>>& points);

class Comm;

// Ranks 0 and 1 ping-pong messages of 8 B, 8 B * factor, ... up to max_bytes (median one-way
// time of a few repetitions each, the first a warm-up) and fit alpha and beta; the other
// ranks return at once with an empty result. Lesson 01 is the full, explained version.
Calibration ping_pong_fit(Comm& comm, std::size_t max_bytes, std::size_t factor = 4,
                          int tag = 32000);

// Rank 0 looks `key` up in `path`; when it is not there, ranks 0 and 1 measure one now with
// ping_pong_fit (untraced). Rank 0 tells rank 1 which, so ranks that see different files
// (nodes without a shared disk) still agree. The result is meant for rank 0; elsewhere it
// is empty.
struct FoundCalibration {
  std::optional<Calibration> fit;
  bool from_file = false;
};
FoundCalibration find_or_measure_calibration(Comm& comm, const std::string& path,
                                             const std::string& key, std::size_t max_bytes,
                                             std::size_t factor);

// The key a run's fit is saved under: how its messages travel, and where its data lives
// ("threads-cpu", "mpi-cuda", "gloo-cpu", "shm-cpu"): processes over shared memory move bytes
// unlike the same processes over Gloo's sockets.
std::string calibration_key(const World& world);

// Replaces the entry `key` in the file (keeping the others) or creates the file.
void save_calibration(const std::string& path, const std::string& key, const Calibration& c);
std::optional<Calibration> load_calibration(const std::string& path, const std::string& key);
// Every entry of the file, by key (empty when there is no file).
std::map<std::string, Calibration> load_calibrations(const std::string& path);

}  // namespace distlab
