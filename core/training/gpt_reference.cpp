#include "core/training/gpt_reference.hpp"

#include <algorithm>
#include <cmath>

#include "core/base/check.hpp"
#include "core/training/model_reference.hpp"

namespace distlab::gpt {

namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<const RowMatrix>;
using MutMap = Eigen::Map<RowMatrix>;

// LayerNorm of each row, keeping xhat and rstd for the backward.
struct Norm {
  RowMatrix xhat;
  Eigen::VectorXd rstd;
};
RowMatrix layernorm(const RowMatrix& x, const double* gain, const double* bias, double eps,
                    Norm& kept) {
  const auto n = x.rows(), d = x.cols();
  kept.xhat.resize(n, d);
  kept.rstd.resize(n);
  RowMatrix y(n, d);
  for (Eigen::Index r = 0; r < n; ++r) {
    const double mean = x.row(r).mean();
    const double var = (x.row(r).array() - mean).square().mean();
    kept.rstd[r] = 1 / std::sqrt(var + eps);
    for (Eigen::Index c = 0; c < d; ++c) {
      kept.xhat(r, c) = (x(r, c) - mean) * kept.rstd[r];
      y(r, c) = kept.xhat(r, c) * gain[c] + bias[c];
    }
  }
  return y;
}

// dL/dx from dy; adds dL/dgain and dL/dbias.
RowMatrix layernorm_backward(const RowMatrix& dy, const double* gain, const Norm& kept,
                             double* dgain, double* dbias) {
  const auto n = dy.rows(), d = dy.cols();
  RowMatrix dx(n, d);
  for (Eigen::Index r = 0; r < n; ++r) {
    double g_mean = 0, gx_mean = 0;
    for (Eigen::Index c = 0; c < d; ++c) {
      const double g = dy(r, c) * gain[c];
      g_mean += g;
      gx_mean += g * kept.xhat(r, c);
      dgain[c] += dy(r, c) * kept.xhat(r, c);
      dbias[c] += dy(r, c);
    }
    g_mean /= double(d);
    gx_mean /= double(d);
    for (Eigen::Index c = 0; c < d; ++c)
      dx(r, c) = kept.rstd[r] * (dy(r, c) * gain[c] - g_mean - kept.xhat(r, c) * gx_mean);
  }
  return dx;
}

// One block's tensors in the flat vector (params or grads).
struct BlockAt {
  std::size_t ln1g, ln1b, wq, wk, wv, wo, ln2g, ln2b, w1, w2;
};

struct BlockKept {
  RowMatrix x, a, q, k, v, ctx, x1, m, h;
  std::vector<RowMatrix> p;  // per (sequence, head): the attention weights
  Norm n1, n2;
};

}  // namespace

double reference_loss(const Config& c, const Eigen::VectorXd& params,
                      const std::vector<std::int32_t>& ids,
                      const std::vector<std::int32_t>& targets, Eigen::VectorXd* grad) {
  const auto all = tensors(c);
  DL_CHECK(static_cast<std::size_t>(params.size()) == parameter_count(c),
           "reference_loss: {} parameters, the model has {}", params.size(), parameter_count(c));
  DL_CHECK(ids.size() % c.seq == 0 && ids.size() == targets.size(),
           "reference_loss: {} ids and {} targets are no whole sequences of {}", ids.size(),
           targets.size(), c.seq);
  const auto d = Eigen::Index(c.d), S = Eigen::Index(c.seq), dh = Eigen::Index(c.head_dim()),
             H = Eigen::Index(c.heads), V = Eigen::Index(c.vocab), ml = Eigen::Index(c.mlp());
  const auto N = Eigen::Index(ids.size()), B = N / S;
  const double scale = 1 / std::sqrt(double(dh)), eps = c.ln_eps;
  auto at = [&](const std::string& name) {
    for (const auto& t : all)
      if (t.name == name) return t.offset;
    DL_FAIL("no tensor {}", name);
  };
  const double* w = params.data();
  auto mat = [&](std::size_t offset, Eigen::Index rows, Eigen::Index cols) {
    return Map(w + offset, rows, cols);
  };
  std::vector<BlockAt> blocks;
  for (std::size_t l = 0; l < c.layers; ++l) {
    auto b = [&](const char* what) { return at("block " + std::to_string(l) + " " + what); };
    blocks.push_back({b("ln1 gain"), b("ln1 bias"), b("wq"), b("wk"), b("wv"), b("wo"),
                      b("ln2 gain"), b("ln2 bias"), b("w1"), b("w2")});
  }
  const std::size_t wte = at("wte"), wpe = at("wpe"), lnfg = at("lnf gain"), lnfb = at("lnf bias"),
                    head = at("head");

  // Forward.
  RowMatrix x(N, d);
  for (Eigen::Index i = 0; i < N; ++i) {
    const auto id = ids[std::size_t(i)];
    DL_CHECK(id >= 0 && id < V, "reference_loss: token {} is not in the vocabulary of {}", id, V);
    x.row(i) = mat(wte, V, d).row(id) + mat(wpe, S, d).row(i % S);
  }
  std::vector<BlockKept> kept(c.layers);
  for (std::size_t l = 0; l < c.layers; ++l) {
    const BlockAt& b = blocks[l];
    BlockKept& k = kept[l];
    k.x = x;
    k.a = layernorm(x, w + b.ln1g, w + b.ln1b, eps, k.n1);
    k.q = k.a * mat(b.wq, d, d);
    k.k = k.a * mat(b.wk, d, d);
    k.v = k.a * mat(b.wv, d, d);
    k.ctx = RowMatrix::Zero(N, d);
    for (Eigen::Index s = 0; s < B; ++s)
      for (Eigen::Index j = 0; j < H; ++j) {
        RowMatrix p =
            k.q.block(s * S, j * dh, S, dh) * k.k.block(s * S, j * dh, S, dh).transpose() * scale;
        for (Eigen::Index r = 0; r < S; ++r) {
          for (Eigen::Index col = r + 1; col < S; ++col) p(r, col) = -INFINITY;
          const double top = p.row(r).maxCoeff();
          p.row(r) = (p.row(r).array() - top).exp().matrix();
          p.row(r) /= p.row(r).sum();
        }
        k.ctx.block(s * S, j * dh, S, dh) = p * k.v.block(s * S, j * dh, S, dh);
        k.p.push_back(std::move(p));
      }
    k.x1 = x + k.ctx * mat(b.wo, d, d);
    k.m = layernorm(k.x1, w + b.ln2g, w + b.ln2b, eps, k.n2);
    k.h = k.m * mat(b.w1, d, ml);
    x = k.x1 + RowMatrix(k.h.unaryExpr(&model::reference_gelu)) * mat(b.w2, ml, d);
  }
  Norm nf;
  const RowMatrix xf = layernorm(x, w + lnfg, w + lnfb, eps, nf);
  const RowMatrix logits = xf * mat(head, d, V);
  double loss = 0;
  RowMatrix dlogits(N, V);
  for (Eigen::Index i = 0; i < N; ++i) {
    const double top = logits.row(i).maxCoeff();
    const double lse = std::log((logits.row(i).array() - top).exp().sum()) + top;
    const auto t = targets[std::size_t(i)];
    DL_CHECK(t >= 0 && t < V, "reference_loss: target {} is not in the vocabulary of {}", t, V);
    loss += lse - logits(i, t);
    dlogits.row(i) = (logits.row(i).array() - lse).exp().matrix() / double(N);
    dlogits(i, t) -= 1 / double(N);
  }
  loss /= double(N);
  if (!grad) return loss;

  // Backward.
  grad->setZero(params.size());
  double* g = grad->data();
  auto gmat = [&](std::size_t offset, Eigen::Index rows, Eigen::Index cols) {
    return MutMap(g + offset, rows, cols);
  };
  gmat(head, d, V) += xf.transpose() * dlogits;
  RowMatrix dx =
      layernorm_backward(dlogits * mat(head, d, V).transpose(), w + lnfg, nf, g + lnfg, g + lnfb);
  for (std::size_t l = c.layers; l-- > 0;) {
    const BlockAt& b = blocks[l];
    const BlockKept& k = kept[l];
    // The MLP: x2 = x1 + gelu(m W1) W2.
    const RowMatrix gg = k.h.unaryExpr(&model::reference_gelu);
    gmat(b.w2, ml, d) += gg.transpose() * dx;
    const RowMatrix dh_ = (dx * mat(b.w2, ml, d).transpose())
                              .cwiseProduct(k.h.unaryExpr(&model::reference_gelu_grad));
    gmat(b.w1, d, ml) += k.m.transpose() * dh_;
    dx += layernorm_backward(dh_ * mat(b.w1, d, ml).transpose(), w + b.ln2g, k.n2, g + b.ln2g,
                             g + b.ln2b);
    // Attention: x1 = x + ctx Wo.
    gmat(b.wo, d, d) += k.ctx.transpose() * dx;
    const RowMatrix dctx = dx * mat(b.wo, d, d).transpose();
    RowMatrix dq = RowMatrix::Zero(N, d), dk = dq, dv = dq;
    std::size_t pi = 0;
    for (Eigen::Index s = 0; s < B; ++s)
      for (Eigen::Index j = 0; j < H; ++j, ++pi) {
        const RowMatrix& p = k.p[pi];
        const RowMatrix dc = dctx.block(s * S, j * dh, S, dh);
        const RowMatrix dp = dc * k.v.block(s * S, j * dh, S, dh).transpose();
        dv.block(s * S, j * dh, S, dh) = p.transpose() * dc;
        RowMatrix ds(S, S);
        for (Eigen::Index r = 0; r < S; ++r)
          ds.row(r) = p.row(r).cwiseProduct((dp.row(r).array() - p.row(r).dot(dp.row(r))).matrix());
        dq.block(s * S, j * dh, S, dh) = ds * k.k.block(s * S, j * dh, S, dh) * scale;
        dk.block(s * S, j * dh, S, dh) = ds.transpose() * k.q.block(s * S, j * dh, S, dh) * scale;
      }
    gmat(b.wq, d, d) += k.a.transpose() * dq;
    gmat(b.wk, d, d) += k.a.transpose() * dk;
    gmat(b.wv, d, d) += k.a.transpose() * dv;
    const RowMatrix da = dq * mat(b.wq, d, d).transpose() + dk * mat(b.wk, d, d).transpose() +
                         dv * mat(b.wv, d, d).transpose();
    dx += layernorm_backward(da, w + b.ln1g, k.n1, g + b.ln1g, g + b.ln1b);
  }
  for (Eigen::Index i = 0; i < N; ++i) {
    gmat(wte, V, d).row(ids[std::size_t(i)]) += dx.row(i);
    gmat(wpe, S, d).row(i % S) += dx.row(i);
  }
  return loss;
}

double float32_bound(const Config& c, std::size_t tokens, std::size_t extra_terms) {
  const double terms = double(tokens + c.mlp() + c.vocab + c.d + extra_terms);
  const double depth = double(4 * c.layers + 4);
  return terms * depth * 0x1p-24;
}

std::vector<double> tensor_bounds(const Layout& layout, const Eigen::VectorXd& want,
                                  double fraction) {
  std::vector<double> out;
  for (const auto& part : layout.parts()) {
    double largest = 0;
    for (std::size_t j = 0; j < part.tensor.size(); ++j)
      largest = std::max(largest, std::fabs(want[Eigen::Index(part.tensor.offset + j)]));
    out.push_back(fraction * largest);
  }
  return out;
}

WorstShare worst_share(const Layout& layout, const std::vector<float>& got, std::size_t begin,
                       std::size_t end, const Eigen::VectorXd& want,
                       const std::vector<double>& bounds) {
  WorstShare w;
  for (std::size_t t = 0; t < layout.parts().size(); ++t) {
    const auto& part = layout.parts()[t];
    for (std::size_t i = 0; i < part.size; ++i) {
      const std::size_t at = part.offset + i;
      if (at < begin || at >= end) continue;
      const double err =
          std::fabs(double(got[at - begin]) - want[Eigen::Index(layout.global_index(part, i))]);
      const double share = bounds[t] > 0 ? err / bounds[t] : (err > 0 ? INFINITY : 0);
      if (!(share <= w.share)) {
        w.share = std::isnan(share) ? INFINITY : share;
        w.bound = bounds[t];
        w.where = part.tensor.name;
      }
    }
  }
  return w;
}

void reference_batch(const Config& c, const Corpus& corpus, int step, std::size_t global,
                     std::vector<std::int32_t>& ids, std::vector<std::int32_t>& targets) {
  ids.clear();
  targets.clear();
  for (std::size_t i = 0; i < global; ++i)
    corpus.sequence(std::uint64_t(step) * global + i, c.seq, ids, targets);
}

ReferenceRun reference_train(const Config& c, const Corpus& corpus,
                             const std::vector<float>& initial, int steps, std::size_t global,
                             const model::OptimizerConfig& optimizer,
                             const model::GradientError& gradient_error) {
  ReferenceRun run;
  const Eigen::Index n = Eigen::Index(initial.size());
  run.params.resize(n);
  for (std::size_t i = 0; i < initial.size(); ++i) run.params[Eigen::Index(i)] = initial[i];
  model::ReferenceOptimizer opt(initial.size(), optimizer);
  if (gradient_error) {
    run.drift.rounding.setZero(n);
    run.drift.gradient.setZero(n);
  }
  Eigen::VectorXd grad;
  std::vector<std::int32_t> ids, targets;
  for (int k = 0; k < steps; ++k) {
    reference_batch(c, corpus, k, global, ids, targets);
    run.losses.push_back(reference_loss(c, run.params, ids, targets, &grad));
    if (k == 0) run.first_gradient = grad;
    if (gradient_error)  // each step's bound at this run's state, before the step moves it
      model::add_step_drift(run.drift, optimizer, run.params, opt, grad, gradient_error,
                            grad.cwiseAbs().maxCoeff(), 0, n, k + 1);
    opt.step(run.params, grad);
  }
  return run;
}

}  // namespace distlab::gpt
