// cost_model.cpp — the alpha-beta-gamma formulas, one per algorithm, read off the step loops.
//
// Each formula counts what lies on the critical path of distlab's own implementation (the
// files in collectives/), in the form Thakur, Rabenseifner & Gropp (2005) write them:
//   messages       sequential message start-ups on the busiest path    (x alpha)
//   bytes_moved    bytes that path pushes through one rank's link       (x beta)
//   bytes_reduced  bytes that path adds                                 (x gamma)
// p is the number of ranks, n the buffer's bytes. A message of m bytes costs alpha + m beta.
#include "core/cost/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/cost/calibration.hpp"
#include "core/ops/ops.hpp"

namespace distlab {

namespace {

// The fold of fold.hpp (p not a power of two): the extra ranks send their whole buffer to a
// partner, which adds it (alpha + n beta + n gamma); at the end the partner sends the result
// back (alpha + n beta). p2 is the largest power of two <= p.
Cost fold(int p, double n) {
  if (std::has_single_bit(static_cast<unsigned>(p))) return {};
  return {2, 2 * n, n};
}

int floor_pow2(int p) {
  return static_cast<int>(std::bit_floor(static_cast<unsigned>(p)));
}
int log2_floor(int p) {
  return std::countr_zero(static_cast<unsigned>(floor_pow2(p)));
}

Cost operator+(Cost a, const Cost& b) {
  a.messages += b.messages;
  a.bytes_moved += b.bytes_moved;
  a.bytes_reduced += b.bytes_reduced;
  return a;
}

}  // namespace

Cost predict_all_reduce(coll::AllReduceAlgo algo, int p, double n, int ranks_per_node) {
  DL_CHECK(p >= 1, "a world has at least one rank, not {}", p);
  if (p == 1) return {};  // nothing to send, nothing to add
  const double q = p - 1;
  using A = coll::AllReduceAlgo;
  switch (algo) {
    case A::reduce_broadcast:
      // reduce: rank 0 receives p-1 whole buffers one after another and adds each;
      // broadcast: rank 0 sends p-1 whole buffers one after another.
      return {2 * q, 2 * q * n, q * n};
    case A::sequential: {
      // p rounds; in round i rank i sends its whole buffer to i+1, i+2, .. in turn, and each
      // send ends when its receiver takes it. Rank i+1 starts its round as soon as it holds
      // rank i's buffer, so the rounds overlap like a wave: round i+1's first send waits for
      // rank i+2 to take round i's second message. The path is 3(p-1) messages (2 when p = 2:
      // rank 0 is ready at once), of n bytes each; p-1 adds.
      const double path = p == 2 ? 2 : 3 * q;
      return {path, path * n, q * n};
    }
    case A::parallel:
      // One step, but every rank posts p-1 sends and p-1 receives of n bytes at once. They
      // share the rank's one link, so their bytes queue: (p-1) n beta. Their start-ups are
      // made one after another by one CPU, so we count p-1 alphas too (a model that lets the
      // start-ups overlap would count 1; for the sizes where alpha matters the difference is
      // small next to the (p-1) n beta). Then p-1 buffers are added: (p-1) n gamma.
      return {q, q * n, q * n};
    case A::ring:
      // p-1 steps; each passes a whole buffer right, takes one from the left and adds it.
      return {q, q * n, q * n};
    case A::ring_chunked:
    case A::library:  // MPI_Allreduce is predicted as the bandwidth-optimal ring
      // reduce-scatter, p-1 steps of n/p (add each), then all-gather, p-1 steps of n/p.
      return {2 * q, 2 * q / p * n, q / p * n};
    case A::recursive_doubling: {
      // lg p2 steps, each a whole-buffer exchange and an add; plus the fold.
      const double k = log2_floor(p);
      return Cost{k, k * n, k * n} + fold(p, n);
    }
    case A::tree: {
      // Binomial reduce to rank 0 then broadcast: ceil(lg p) rounds each way of a whole buffer
      // through the root's one link, an add per round on the way up.
      const double k = std::ceil(std::log2(double(p)));
      return {2 * k, 2 * k * n, k * n};
    }
    case A::hierarchical: {
      // g ranks per node, m nodes: a ring reduce-scatter and all-gather inside the node (g-1
      // steps of n/g each), a chunked ring across the nodes on n/g (2(m-1) steps of n/p).
      const double g = ranks_per_node > 0 ? ranks_per_node : coll::default_ranks_per_node(p),
                   m = p / g;
      return {2 * (g - 1) + 2 * (m - 1), 2 * (g - 1) / g * n + 2 * (m - 1) / p * n,
              (g - 1) / g * n + (m - 1) / p * n};
    }
    case A::double_binary_tree: {
      // Two trees of height H = ceil(lg p) (NCCL's: a root over an in-order tree), each reducing
      // and broadcasting half the buffer in G segments of n / 2G that follow each other: 2(G + H -
      // 1) steps. In each, an inner rank takes (or sends) a segment from (to) each of its two
      // children on its one link: 2 n / 2G bytes a step; it adds its children's n / 2 (two halves
      // of n / 2) in all.
      const double G = coll::kTreeSegments, H = std::ceil(std::log2(double(p))),
                   steps = 2 * (G + H - 1);
      return {steps, steps * n / G, n};
    }
    case A::recursive_halving: {
      // Rabenseifner: reduce-scatter by halving (lg p2 steps: n/2, n/4, .., n/p2, each added)
      // then all-gather by doubling (the same sizes back up): (p2-1)/p2 n each way.
      const double k = log2_floor(p), p2 = floor_pow2(p), share = (p2 - 1) / p2 * n;
      return Cost{2 * k, 2 * share, share} + fold(p, n);
    }
  }
  return {};
}

Cost predict_collective(Collective c, bool ring, int p, double n) {
  DL_CHECK(p >= 1, "a world has at least one rank, not {}", p);
  if (p == 1) return {};
  const double q = p - 1;
  switch (c) {
    case Collective::all_reduce:
      return predict_all_reduce(
          ring ? coll::AllReduceAlgo::ring_chunked : coll::AllReduceAlgo::reduce_broadcast, p, n);
    case Collective::all_gather:
      // ring: p-1 steps of one chunk (n/p). Else gather (the root takes p-1 chunks, one after
      // another) then broadcast (the root sends p-1 whole results).
      if (ring) return {q, q / p * n, 0};
      return {2 * q, q / p * n + q * n, 0};
    case Collective::reduce_scatter:
      // ring: p-1 steps of one chunk, each added. Else reduce (p-1 whole buffers to the
      // root, each added) then scatter (the root sends p-1 chunks).
      if (ring) return {q, q / p * n, q / p * n};
      return {2 * q, q * n + q / p * n, q * n};
    case Collective::broadcast:
      // Linear: the root sends p-1 whole buffers one after another.
      return {q, q * n, 0};
    case Collective::reduce:
      // Linear: the root receives p-1 whole buffers one after another and adds each.
      return {q, q * n, q * n};
    case Collective::all_to_all:
      // Pairwise: p-1 steps, each one block (n/p) out and one in.
      return {q, q / p * n, 0};
  }
  return {};
}

Cost predict_algorithm(Collective c, const std::string& name, int p, double n) {
  DL_CHECK(p >= 1, "a world has at least one rank, not {}", p);
  const double k = p > 1 ? std::ceil(std::log2(double(p))) : 0, q = p - 1;
  switch (c) {
    case Collective::all_reduce:
      return predict_all_reduce(coll::parse_all_reduce_algo(name), p, n);
    case Collective::all_gather:
      if (name == "ring" || name == "library") return predict_collective(c, true, p, n);
      if (name == "gather_broadcast") return predict_collective(c, false, p, n);
      if (name == "bruck") return p == 1 ? Cost{} : Cost{k, q / p * n, 0};
      break;
    case Collective::reduce_scatter:
      if (name == "ring" || name == "library") return predict_collective(c, true, p, n);
      if (name == "reduce_scatter") return predict_collective(c, false, p, n);
      break;
    case Collective::broadcast:
    case Collective::reduce:
      if (name == "linear") return predict_collective(c, false, p, n);
      if (name == "tree" || name == "library")  // ceil(lg p) whole buffers through the root
        return {k, k * n, c == Collective::reduce ? k * n : 0};
      break;
    case Collective::all_to_all:
      if (name == "pairwise" || name == "library") return predict_collective(c, false, p, n);
      if (name == "bruck") {  // ceil(lg p) steps; block i (of n/p) travels popcount(i) of them
        double blocks = 0;
        for (int i = 1; i < p; ++i) blocks += std::popcount(unsigned(i));
        return p == 1 ? Cost{} : Cost{k, blocks / p * n, 0};
      }
      break;
  }
  throw UsageError(fmt::format("{} has no algorithm '{}'", to_string(c), name));
}

std::optional<double> streaming_beta(const Calibration& calibration, double min_bytes) {
  std::vector<std::pair<double, double>> large;
  for (const auto& point : calibration.points)
    if (point.first >= min_bytes) large.push_back(point);
  if (large.size() < 2) return std::nullopt;
  const double beta = fit_alpha_beta(large).beta_s_per_byte;
  if (!(beta > 0)) return std::nullopt;
  return beta;
}

double measure_gamma() {
  // 16 MiB per operand: three streams (two read, one written) of 16 MiB leave any cache, so
  // this is the rate a large reduction really gets from memory.
  constexpr std::size_t kCount = std::size_t{4} << 20;
  constexpr int kRuns = 5;
  std::vector<float> dst(kCount, 1.0f), src(kCount, 0.0f);  // src zero: dst stays bounded
  const View<float> d{dst.data(), kCount, Device::cpu};
  const View<const float> s{src.data(), kCount, Device::cpu};
  ops::add(d, s);  // first touch and page faults out of the timing
  std::vector<double> seconds;
  for (int i = 0; i < kRuns; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ops::add(d, s);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + kRuns / 2, seconds.end());
  return seconds[kRuns / 2] / double(kCount * sizeof(float));
}

double core_sharing(const World& world) {
  if (kSimulatedBuild) return 1;  // simulated hosts: each rank its own, on the simulated clock
  int local = world.size;
  if (world.mode == Mode::mpi)
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
      if (const char* v = std::getenv(name); v && std::atoi(v) > 0) {
        local = std::atoi(v);
        break;
      }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1.0, static_cast<double>(local) / cores);
}

std::string simulated_verdict(double ratio) {
  return fmt::format("{}within {:.0f}%", std::abs(ratio - 1) <= kSimulatedTolerance ? "" : "NOT ",
                     kSimulatedTolerance * 100);
}

std::optional<CostParams> simulated_cost_params(const std::vector<std::string>& hosts) {
  std::optional<SimulatedNetwork> net = simulated_network(hosts);
  if (!net) return std::nullopt;
  CostParams c;
  c.alpha_s = net->alpha_s;
  c.beta_s_per_byte = net->beta_s_per_byte;
  c.gamma_s_per_byte = 0;  // the simulated clock counts no computation
  c.source = fmt::format(
      "the simulated platform {}: its slowest route ({}), latency {:.3g} us, bandwidth {:.4g} "
      "GB/s; computation is not simulated, so gamma is 0",
      net->platform, net->slowest, net->alpha_s * 1e6, 1e-9 / net->beta_s_per_byte);
  c.network = std::move(net);
  return c;
}

CostParams load_cost_params(const std::string& calibration_path, const std::string& key,
                            double fallback_alpha_s, double fallback_beta_s_per_byte) {
  CostParams c;
  if (auto cal = load_calibration(calibration_path, key)) {
    // A least-squares fit over noisy small sizes can land a hair below zero; no time is negative.
    c.alpha_s = std::max(0.0, cal->alpha_s);
    c.beta_s_per_byte = std::max(0.0, cal->beta_s_per_byte);
    c.source = fmt::format("\"{}\" in {}", key, calibration_path);
  } else {
    c.alpha_s = fallback_alpha_s;
    c.beta_s_per_byte = fallback_beta_s_per_byte;
    c.source = fmt::format("defaults (no \"{}\" in {}; run lesson 01 to calibrate)", key,
                           calibration_path);
  }
  c.gamma_s_per_byte = measure_gamma();
  return c;
}

}  // namespace distlab
