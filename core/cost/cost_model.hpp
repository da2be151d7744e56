// cost_model.hpp — the alpha-beta-gamma model of collective algorithms.
//
// A message of n bytes costs alpha + n beta; reducing n bytes costs n gamma (Hockney's model
// as Thakur, Rabenseifner & Gropp 2005 use it). For p ranks and an n-byte buffer, e.g.:
//   ring_chunked        2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma
//   recursive_doubling  lg p (alpha + n beta + n gamma)
//   recursive_halving   2 lg p alpha + 2(p-1)/p n beta + (p-1)/p n gamma   (Rabenseifner)
// alpha and beta come from lesson 01's calibration (traces/calibration.json) or a ping-pong
// measured on the spot; gamma from timing the reduction kernel (ops::add) on this machine.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/base/world.hpp"
#include "core/collectives/algo.hpp"
#include "core/cost/calibration.hpp"
#include "core/cost/simulated_platform.hpp"

namespace distlab {

struct CostParams {
  double alpha_s = 0;           // seconds per message
  double beta_s_per_byte = 0;   // seconds per byte moved
  double gamma_s_per_byte = 0;  // seconds per byte reduced
  std::string source{};         // where alpha and beta came from, for the printout
  // Ranks per core on one machine (>= 1). The model gives each rank its own core; ranks that
  // share cores take turns copying and adding, so the byte terms stretch by this factor.
  double sharing = 1;
  // In a simulated run: the platform alpha and beta come from (simulated_cost_params).
  std::optional<SimulatedNetwork> network{};
};

// Ranks per core for this world on this machine: in-process ranks, or the ranks mpirun put
// on this host (OMPI_COMM_WORLD_LOCAL_SIZE), over std::thread::hardware_concurrency(); >= 1.
double core_sharing(const World& world);

// A prediction, split by term so tables can show where the time goes.
struct Cost {
  double messages = 0;       // the count multiplying alpha (sequential steps of messages)
  double bytes_moved = 0;    // the bytes multiplying beta (on the busiest rank's path)
  double bytes_reduced = 0;  // the bytes multiplying gamma
  double seconds(const CostParams& c) const {
    return messages * c.alpha_s +
           c.sharing * (bytes_moved * c.beta_s_per_byte + bytes_reduced * c.gamma_s_per_byte);
  }
};

// Prediction for an all-reduce of `bytes` bytes over p ranks (p not a power of two: the
// recursive algorithms pay the fold's extra steps). `library` is predicted as ring_chunked.
// `ranks_per_node`: the hierarchical algorithm's nodes (0: coll::default_ranks_per_node).
Cost predict_all_reduce(coll::AllReduceAlgo algo, int p, double bytes, int ranks_per_node = 0);

// Prediction for the ring (chunked) or linear (root-based) forms of the other collectives:
// all_gather / reduce_scatter with ring = true use the ring, else the naive root versions.
Cost predict_collective(Collective c, bool ring, int p, double bytes);

// Prediction for a collective done by the algorithm `name` (distlab-bench's algorithm column):
//   allreduce                  every all-reduce algorithm (predict_all_reduce)
//   allgather                  ring, gather_broadcast, bruck (ceil(lg p) steps, (p-1)/p n)
//   reducescatter              ring, reduce_scatter
//   broadcast, reduce          linear, tree (a binomial tree: ceil(lg p) whole buffers through
//                              the root's link)
//   alltoall                   pairwise (p-1 steps of one block, n/p: (p-1)/p n), bruck
//                              (ceil(lg p) steps; block i hops popcount(i) times:
//                              sum_i popcount(i) / p n, lg p / 2 n for p a power of two)
//   library                    as the bandwidth-optimal form (ring; tree for broadcast and
//                              reduce; pairwise for alltoall)
// Throws UsageError for a name the collective does not have.
Cost predict_algorithm(Collective c, const std::string& name, int p, double bytes);

// beta for messages of at least `min_bytes`: the alpha-beta fit redone on the calibration's
// points of that size and up. A ping-pong's small messages stay in cache, so the fit over all
// sizes gives the cache's bandwidth; large collectives stream their buffers from memory and pay
// this beta instead (2-4x the other on a typical machine: see lesson 01's bandwidth column).
// nullopt when fewer than two points are that large or the slope is not positive.
std::optional<double> streaming_beta(const Calibration& calibration, double min_bytes);

// Seconds per byte of ops::add on float32, timed on this machine (median of a few runs).
double measure_gamma();

// alpha and beta from `calibration_path` under `key` ("threads-cpu", "mpi-cpu"); when the
// file or the key is missing, the defaults passed in are used and `source` says so.
// gamma is measured on the spot (measure_gamma(), a few milliseconds).
CostParams load_cost_params(const std::string& calibration_path, const std::string& key,
                            double fallback_alpha_s, double fallback_beta_s_per_byte);

// A simulated time is checked against its formula for messages of 1 MiB and more, within 10%:
// the model leaves out what SMPI charges beside a route's latency and bandwidth (a sender
// waiting for its receiver to post, the start-up of each step's handshake), a few latencies per
// message, which weigh little once each message takes 40 or more latencies to stream. Smaller
// messages are reported, not checked.
inline constexpr double kSimulatedCheckBytes = 1 << 20;
inline constexpr double kSimulatedTolerance = 0.10;
// "within 10%" or "NOT within 10%": a simulated/predicted ratio's verdict, for the tables.
std::string simulated_verdict(double ratio);

// In a simulated run (the smpi build): alpha and beta from the platform between `hosts` (each
// rank's, in rank order), gamma 0 (computation is not simulated), no core sharing; `source`
// names the platform and its slowest route. nullopt in any other build.
std::optional<CostParams> simulated_cost_params(const std::vector<std::string>& hosts);

}  // namespace distlab
