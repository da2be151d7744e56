// sequence_parallel.cpp — the dropout's mask, the LayerNorm in float64 and the sequence-parallel
// report (sequence_parallel.hpp).
#include "core/training/sequence_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/base/units.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/ops/ops.hpp"
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

NormRegions::NormRegions(Comm& comm, const std::vector<float>& x, const std::vector<float>& mask,
                         const std::vector<float>& gamma, const std::vector<float>& beta,
                         std::size_t r0, std::size_t rows, std::size_t hidden)
    : comm_(comm), r0_(r0), rows_(rows), h_(hidden), ledger_(nullptr, &comm.ledger()) {
  G_ = comm.alloc_from(gamma, Category::params);
  Be_ = comm.alloc_from(beta, Category::params);
  X_ = region(rows * hidden);
  mean_ = region(rows);
  rstd_ = region(rows);
  M_ = region(rows * hidden);
  O_ = region(rows * hidden);
  from_host(X_.view(), tp::rows(x, hidden, r0, rows));
  from_host(M_.view(), tp::rows(mask, hidden, r0, rows));
}

Buffer<float> NormRegions::region(std::size_t count) {
  return Buffer<float>(ledger_, Category::activations, count, comm_.device());
}

void NormRegions::layernorm(View<float> u_mine) {
  auto step = comm_.phase("LayerNorm (my rows)");
  ops::layernorm_forward(u_mine, mean_.view(), rstd_.view(), View<const float>(X_.view()),
                         View<const float>(G_.view()), View<const float>(Be_.view()), rows_, h_,
                         kLayerNormEps);
}

void NormRegions::dropout(View<const float> y_mine) {
  ops::copy(O_.view(), y_mine);
  ops::mul(O_.view(), View<const float>(M_.view()));
}

void NormRegions::dropout_backward(View<float> dy_mine, const std::vector<float>& d_o) {
  from_host(dy_mine, tp::rows(d_o, h_, r0_, rows_));
  ops::mul(dy_mine, View<const float>(M_.view()));
}

void NormRegions::layernorm_backward(View<const float> du_mine, View<float> d_gamma,
                                     View<float> d_beta) {
  dX_ = region(rows_ * h_);
  auto step = comm_.phase("LayerNorm' (my rows)");
  ops::fill(d_gamma, 0.0f);
  ops::fill(d_beta, 0.0f);
  ops::layernorm_backward(dX_.view(), d_gamma, d_beta, du_mine, View<const float>(X_.view()),
                          View<const float>(mean_.view()), View<const float>(rstd_.view()),
                          View<const float>(G_.view()), rows_, h_);
}

void NormRegions::record_peak() {
  comm_.recorder().value(kRegionBytes, double(ledger_.peak(Category::activations)));
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

namespace {
SplitBlock with_passes(SplitBlock b, const char* forward, const char* backward,
                       const char* forward_phase, const char* backward_phase) {
  b.forward = forward;
  b.backward = backward;
  b.forward_phase = forward_phase;
  b.backward_phase = backward_phase;
  return b;
}
}  // namespace

SplitBlock sp_f_block() {
  return with_passes(f_block(), "all-gather", "reduce-scatter", kFGatherPhase, kFScatterPhase);
}

SplitBlock sp_g_block() {
  return with_passes(g_block(), "reduce-scatter", "all-gather", kGScatterPhase, kGGatherPhase);
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
  // The replicated gradients' all-reduce: a ring's 2(N-1)/N of them on every rank.
  std::uint64_t replicated = 0;
  bool replicated_ok = true;
  for (int k = 0; k < n; ++k) {
    const std::uint64_t got = sent(r, o.replicated, k);
    replicated = std::max(replicated, got);
    replicated_ok = replicated_ok &&
                    got == coll::ring_chunked_traffic(k, n, replicated_floats).sent * sizeof(float);
  }
  fmt::print(
      "  and {}, whole on every rank, all-reduce their gradients ({} = {} floats): {} per rank\n",
      replicated_what, formula, replicated_floats, format_bytes(double(replicated)));
  r.check(fmt::format("the replicated gradients' all-reduce sends a ring's 2(N-1)/N x {} floats "
                      "on every rank (from the trace)",
                      replicated_floats),
          replicated_ok);

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
