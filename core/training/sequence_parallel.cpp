// sequence_parallel.cpp — the dropout's mask, the LayerNorm in float64 and the sequence-parallel
// report (sequence_parallel.hpp).
#include "core/training/sequence_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/base/units.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/runtime/data.hpp"

namespace distlab::tp {

std::vector<float> dropout_mask(std::uint64_t seed, int stream, std::size_t rows, std::size_t h,
                                double p) {
  std::vector<float> mask(rows * h);
  const auto keep = static_cast<float>(1.0 / (1.0 - p));
  for (std::size_t i = 0; i < mask.size(); ++i)
    mask[i] = (input_value<float>(seed, stream, i) + 1.0) / 2.0 >= p ? keep : 0.0f;
  return mask;
}

std::vector<float> layernorm_gain(std::uint64_t seed, int stream, std::size_t h) {
  std::vector<float> gamma = make_tensor(seed, stream, 1, h, 0.1);
  for (float& g : gamma) g += 1.0f;
  return gamma;
}

LayerNormReference layernorm_reference(const RowMatrix& x, const RowMatrix& gamma,
                                       const RowMatrix& beta) {
  const Eigen::Index T = x.rows(), h = x.cols();
  LayerNormReference ln{RowMatrix(T, h), RowMatrix(T, h), Eigen::VectorXd(T), Eigen::VectorXd(T)};
  for (Eigen::Index r = 0; r < T; ++r) {
    ln.mean[r] = x.row(r).mean();
    const double var = (x.row(r).array() - ln.mean[r]).square().mean();
    ln.rstd[r] = 1.0 / std::sqrt(var + double(kLayerNormEps));
    for (Eigen::Index c = 0; c < h; ++c) {
      ln.xhat(r, c) = (x(r, c) - ln.mean[r]) * ln.rstd[r];
      ln.u(r, c) = ln.xhat(r, c) * gamma(0, c) + beta(0, c);
    }
  }
  return ln;
}

RowMatrix layernorm_magnitudes(const LayerNormReference& ln, const RowMatrix& x,
                               const RowMatrix& gamma, const RowMatrix& beta) {
  RowMatrix m(x.rows(), x.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    for (Eigen::Index c = 0; c < x.cols(); ++c)
      m(r, c) = std::fabs(gamma(0, c)) * ln.rstd[r] *
                    (std::fabs(x(r, c) - ln.mean[r]) + std::fabs(ln.mean[r])) +
                std::fabs(beta(0, c));
  return m;
}

LayerNormGrads layernorm_backward_reference(const LayerNormReference& ln, const RowMatrix& gamma,
                                            const RowMatrix& du, bool magnitudes) {
  const Eigen::Index T = du.rows(), h = du.cols();
  const double sign = magnitudes ? 1.0 : -1.0;
  LayerNormGrads out{RowMatrix(T, h), RowMatrix::Zero(1, h), RowMatrix::Zero(1, h)};
  for (Eigen::Index r = 0; r < T; ++r) {
    double g_sum = 0, gx_sum = 0;
    const auto g_of = [&](Eigen::Index c) {
      return du(r, c) * (magnitudes ? std::fabs(gamma(0, c)) : gamma(0, c));
    };
    const auto xhat_of = [&](Eigen::Index c) {
      return magnitudes ? std::fabs(ln.xhat(r, c)) : ln.xhat(r, c);
    };
    for (Eigen::Index c = 0; c < h; ++c) {
      g_sum += g_of(c);
      gx_sum += g_of(c) * xhat_of(c);
      out.dgamma(0, c) += du(r, c) * xhat_of(c);
      out.dbeta(0, c) += du(r, c);
    }
    for (Eigen::Index c = 0; c < h; ++c)
      out.dx(r, c) = ln.rstd[r] *
                     (g_of(c) + sign * g_sum / double(h) + sign * xhat_of(c) * gx_sum / double(h));
  }
  return out;
}

SplitBlock sp_f_block() {
  SplitBlock f = f_block();
  f.forward = "all-gather";
  f.backward = "reduce-scatter";
  f.forward_phase = kFGatherPhase;
  f.backward_phase = kFScatterPhase;
  return f;
}

SplitBlock sp_g_block() {
  SplitBlock g = g_block();
  g.forward = "reduce-scatter";
  g.backward = "all-gather";
  g.forward_phase = kGScatterPhase;
  g.backward_phase = kGGatherPhase;
  return g;
}

SplitBlock token_rows_block(std::string name, std::size_t tokens, std::size_t hidden, int n) {
  SplitBlock b = split_block(std::move(name), "activation", {tokens, hidden},
                             {tokens / std::size_t(n), hidden}, "rows");
  b.ranges = rank_ranges(Partition{tokens, n});
  return b;
}

void report_sequence_parallel(RunResult& r, const RunResult& tp_run, const NormOutcome& o,
                              const NormOutcome& plain, std::size_t rows, std::size_t hidden,
                              const std::string& replicated_what, const std::string& formula,
                              std::size_t replicated_floats) {
  const int n = r.world.size;
  bool plain_ok = true;
  for (const RankLog& log : tp_run.logs)
    for (const CheckResult& c : log.checks) plain_ok = plain_ok && c.ok;
  const std::uint64_t elements = rows * hidden;
  const auto sent = [](const RunResult& run, const AllReduceSteps& st, int k) {
    return st.last >= st.first ? run.traffic(st.first, st.last)[std::size_t(k)].bytes_sent
                               : std::uint64_t{0};
  };
  fmt::print("\nbytes sent per rank, from the traces (tensor parallel: g and f all-reduce {}):\n",
             format_bytes(double(elements * sizeof(float))));
  fmt::print("  {:>4}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}\n", "rank", "f gather",
             "g scatter", "g gather", "f scatter", "tp forward", "tp backward");
  bool bytes_ok = true;
  for (int k = 0; k < n; ++k) {
    const std::uint64_t fg = sent(r, o.f_forward, k), gs = sent(r, o.g_forward, k),
                        gg = sent(r, o.g_backward, k), fs = sent(r, o.f_backward, k);
    const std::uint64_t tf = sent(tp_run, plain.g_forward, k),
                        tb = sent(tp_run, plain.f_backward, k);
    const std::uint64_t ring = coll::ring_chunked_traffic(k, n, elements).sent * sizeof(float);
    bytes_ok = bytes_ok && fg == sp_gather_bytes(k, n, elements) &&
               gs == sp_scatter_bytes(k, n, elements) && gg == sp_gather_bytes(k, n, elements) &&
               fs == sp_scatter_bytes(k, n, elements) && fg + gs == ring && gg + fs == ring &&
               tf == ring && tb == ring;
    fmt::print("  {:>4}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}\n", fmt::format("r{}", k),
               format_bytes(double(fg)), format_bytes(double(gs)), format_bytes(double(gg)),
               format_bytes(double(fs)), format_bytes(double(tf)), format_bytes(double(tb)));
  }
  fmt::print(
      "  formula: all-gather + reduce-scatter = (N-1)/N + (N-1)/N = 2(N-1)/N x {}, one ring "
      "all-reduce's, each way\n",
      format_bytes(double(elements * sizeof(float))));
  r.check(
      "each pass's all-gather and reduce-scatter send what tensor parallelism's all-reduce does, "
      "on every rank (from both traces)",
      bytes_ok);
  std::uint64_t replicated = 0;
  if (o.replicated.last >= o.replicated.first)
    for (const RankTraffic& t : r.traffic(o.replicated.first, o.replicated.last))
      replicated = std::max(replicated, t.bytes_sent);
  fmt::print(
      "  and {}, whole on every rank, all-reduce their gradients ({} = {} floats): {} per rank\n",
      replicated_what, formula, replicated_floats, format_bytes(double(replicated)));

  // The regions' activations: my rows of X, the LayerNorm's mean and 1/std, the mask and O, and
  // dX: rows x (4h + 2) floats.
  const auto region_bytes = [](const RunResult& run, int k) {
    for (const ValueEvent& v : run.logs[std::size_t(k)].values)
      if (v.name == kRegionBytes) return v.value;
    return -1.0;
  };
  fmt::print("\nLayerNorm and dropout regions' activations per rank (their ledger's peak):\n");
  fmt::print("  {:>4}  {:>14}  {:>14}  {:>14}\n", "rank", "sequence par.", "tensor par.",
             "formula");
  bool memory_ok = true;
  for (int k = 0; k < n; ++k) {
    const double sp_bytes = region_bytes(r, k), tp_bytes = region_bytes(tp_run, k);
    const double want = double(rows / std::size_t(n) * (4 * hidden + 2) * sizeof(float));
    memory_ok = memory_ok && sp_bytes == want && tp_bytes == want * n;
    fmt::print("  {:>4}  {:>14}  {:>14}  {:>14}\n", fmt::format("r{}", k), format_bytes(sp_bytes),
               format_bytes(tp_bytes), format_bytes(want));
  }
  fmt::print("  formula: T/N x (4h + 2) floats, against T x (4h + 2): N times less\n");
  r.check(
      "the LayerNorm and dropout regions hold T/N rows' activations, 1/N of tensor "
      "parallelism's (both ledgers)",
      memory_ok);
  r.check("the same block without sequence parallelism verifies too (in-process, for the tables)",
          plain_ok);
}

}  // namespace distlab::tp
