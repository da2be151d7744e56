// model_reference.cpp — the float64 Eigen twin of the MLP (model_reference.hpp).
#include "core/training/model_reference.hpp"

#include <cmath>

#include "core/base/check.hpp"

namespace distlab::model {

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

using Map = Eigen::Map<const RowMatrix>;

// W_l as a (dims[l], dims[l+1]) matrix and b_l as a row, views into the flat vector.
Map weight(const MlpShape& s, const Eigen::VectorXd& p, std::size_t l) {
  return Map(p.data() + s.weight_offset(l), Eigen::Index(s.dims[l]), Eigen::Index(s.dims[l + 1]));
}
Eigen::Map<const Eigen::RowVectorXd> bias(const MlpShape& s, const Eigen::VectorXd& p,
                                          std::size_t l) {
  return Eigen::Map<const Eigen::RowVectorXd>(p.data() + s.bias_offset(l),
                                              Eigen::Index(s.dims[l + 1]));
}

// The forward pass, keeping every layer's pre-activation z_l and output h_l (h_{L-1} = y).
void forward_all(const MlpShape& s, const Eigen::VectorXd& p, const RowMatrix& x,
                 std::vector<RowMatrix>& z, std::vector<RowMatrix>& h) {
  DL_CHECK(x.cols() == Eigen::Index(s.in()), "reference: input has {} columns, the model takes {}",
           x.cols(), s.in());
  DL_CHECK(p.size() == Eigen::Index(s.params()), "reference: {} parameters, the model has {}",
           p.size(), s.params());
  const std::size_t L = s.layers();
  z.assign(L, {});
  h.assign(L, {});
  for (std::size_t l = 0; l < L; ++l) {
    const RowMatrix& in = l == 0 ? x : h[l - 1];
    z[l] = (in * weight(s, p, l)).rowwise() + bias(s, p, l);
    h[l] = l + 1 < L ? RowMatrix(z[l].unaryExpr(&reference_gelu)) : z[l];
  }
}

}  // namespace

double reference_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x)));
}

double reference_gelu_grad(double x) {
  const double t = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kCubic * x * x);
}

RowMatrix reference_forward(const MlpShape& shape, const Eigen::VectorXd& params,
                            const RowMatrix& x) {
  std::vector<RowMatrix> z, h;
  forward_all(shape, params, x, z, h);
  return h.back();
}

double reference_loss(const MlpShape& shape, const Eigen::VectorXd& params, const RowMatrix& x,
                      const RowMatrix& t, Eigen::VectorXd* grad) {
  std::vector<RowMatrix> z, h;
  forward_all(shape, params, x, z, h);
  DL_CHECK(t.rows() == x.rows() && t.cols() == Eigen::Index(shape.out()),
           "reference: targets are {}x{}, want {}x{}", t.rows(), t.cols(), x.rows(), shape.out());
  const double count = double(t.size());
  const RowMatrix diff = h.back() - t;
  const double loss = diff.squaredNorm() / count;
  if (!grad) return loss;

  grad->setZero(Eigen::Index(shape.params()));
  RowMatrix dz = 2.0 * diff / count;  // dL/dz of the last layer (no activation there)
  for (std::size_t l = shape.layers(); l-- > 0;) {
    const RowMatrix& in = l == 0 ? x : h[l - 1];
    Eigen::Map<RowMatrix>(grad->data() + shape.weight_offset(l), Eigen::Index(shape.dims[l]),
                          Eigen::Index(shape.dims[l + 1])) = in.transpose() * dz;
    Eigen::Map<Eigen::RowVectorXd>(grad->data() + shape.bias_offset(l),
                                   Eigen::Index(shape.dims[l + 1])) = dz.colwise().sum();
    if (l == 0) break;
    const RowMatrix dh = dz * weight(shape, params, l).transpose();
    dz = dh.cwiseProduct(RowMatrix(z[l - 1].unaryExpr(&reference_gelu_grad)));
  }
  return loss;
}

ReferenceOptimizer::ReferenceOptimizer(std::size_t n, OptimizerConfig config)
    : config_(config),
      m_(Eigen::VectorXd::Zero(Eigen::Index(n))),
      v_(Eigen::VectorXd::Zero(Eigen::Index(n))) {}

void ReferenceOptimizer::step(Eigen::VectorXd& params, const Eigen::VectorXd& grad) {
  ++t_;
  const double lr = config_.lr;
  if (config_.kind == OptimizerKind::sgd) {
    params -= lr * grad;
    return;
  }
  const double b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  m_ = b1 * m_ + (1.0 - b1) * grad;
  v_ = b2 * v_ + (1.0 - b2) * grad.cwiseProduct(grad);
  const double c1 = 1.0 / (1.0 - std::pow(b1, t_)), c2 = 1.0 / (1.0 - std::pow(b2, t_));
  for (Eigen::Index i = 0; i < params.size(); ++i)
    params[i] -= lr * (m_[i] * c1) / (std::sqrt(v_[i] * c2) + eps);
}

ReferenceBatch reference_batch(const MlpShape& shape, const Teacher& teacher, std::size_t batch,
                               int step) {
  const std::size_t first = std::size_t(step) * batch;
  return {widen(teacher.inputs(first, batch), batch, shape.in()),
          widen(teacher.targets(first, batch), batch, shape.out())};
}

double round_to_bf16(double x) {
  if (!std::isfinite(x) || x == 0) return x;
  int e = 0;
  (void)std::frexp(x, &e);                 // |x| = f 2^e, 1/2 <= f < 1: 8 bits are 2^(e-8) apart
  const int unit = std::max(e - 8, -133);  // the last kept bit's weight, subnormals' at most
  const double kept = std::nearbyint(std::ldexp(x, -unit));  // ties to even: the default mode
  const double y = std::ldexp(kept, unit);
  return std::fabs(y) > 0x1.FEp127 ? std::copysign(INFINITY, x) : y;
}

double half_float_ulp(double x) {
  const float f = float(std::fabs(x));
  return 0.5 * (double(std::nextafter(f, INFINITY)) - double(f));
}

namespace {

// The range of Adam's quotient q(x) = c1 (b1 m + (1 - b1) x) / (sqrt(c2 (b2 v + (1 - b2) x^2)) +
// eps) over the gradients x in [lo, hi], exactly: m' and v' move together with x, so their
// intervals taken apart (m' at one end, v' at the other) would overstate it, without limit where
// v' can reach 0 (q up to dg / eps). With N(x) = a + b x and D(x) = sqrt(C + E x^2), q' has the
// sign of h(x) = b C - a E x + b eps D(x) (q' (D + eps)^2 D = h), which is convex (D is, and
// b eps > 0): q is monotone wherever h keeps its sign, and h changes sign at most twice, found by
// bisection on either side of h's least value. The extremes are at the ends or those zeros.
struct Quotient {
  double a, b, C, E, eps;
  double q(double x) const { return (a + b * x) / (std::sqrt(C + E * x * x) + eps); }
  double h(double x) const { return b * C - a * E * x + b * eps * std::sqrt(C + E * x * x); }
  void range(double lo, double hi, double& q_lo, double& q_hi) const {
    q_lo = std::min(q(lo), q(hi));
    q_hi = std::max(q(lo), q(hi));
    // h's least value on [lo, hi]: where h' = -a E + b eps E x / D(x) = 0, x / D(x) = a / (b eps)
    // (x / D rises from -1/sqrt(E) to 1/sqrt(E)); else at an end.
    double x_min = h(lo) <= h(hi) ? lo : hi;
    const double k = a / (b * eps);
    if (E > 0 && k * k * E < 1) {
      const double x = (k < 0 ? -1 : 1) * std::sqrt(k * k * C / (1 - k * k * E));
      if (x > lo && x < hi && h(x) < h(x_min)) x_min = x;
    }
    if (h(x_min) >= 0) return;  // h >= 0 throughout: q rises, its range is the ends'
    const auto zero = [&](double from, double to) {  // h changes sign once on [from, to]
      const bool rising = h(to) > h(from);
      for (int i = 0; i < 200 && from < to; ++i) {
        const double mid = from + (to - from) / 2;
        if (mid <= from || mid >= to) break;
        ((h(mid) < 0) == rising ? from : to) = mid;
      }
      for (const double x : {from, to}) q_lo = std::min(q_lo, q(x)), q_hi = std::max(q_hi, q(x));
    };
    if (h(lo) > 0) zero(lo, x_min);
    if (h(hi) > 0) zero(x_min, hi);
  }
};

}  // namespace

StepBound adam_step_bound(double w, double m, double v, double g, double dg,
                          const OptimizerConfig& config, int t) {
  constexpr double u = 0x1p-24;
  const double b1 = config.beta1, b2 = config.beta2, eps = config.eps, lr = config.lr;
  const double c1 = 1.0 / (1.0 - std::pow(b1, t)), c2 = 1.0 / (1.0 - std::pow(b2, t));
  dg = std::fabs(dg);
  const Quotient quotient{c1 * b1 * m, c1 * (1 - b1), c2 * b2 * v, c2 * (1 - b2), eps};
  const double g_lo = g - dg, g_hi = g + dg;
  const double want_q = quotient.q(g);
  double q_lo = want_q, q_hi = want_q;
  quotient.range(g_lo, g_hi, q_lo, q_hi);  // the gradient's interval alone
  // float32's roundings, at any gradient of the interval: m' takes three (two products, a sum),
  // off by up to extra_m, which moves q by c1 extra_m over q's least denominator; v' four, all of
  // terms >= 0, so 4 u of itself, and its square root 2 u; c1 and c2 (rounded to float), the
  // products by them, + eps and the quotient: 16 u of q in all.
  const double g_abs = std::max(std::fabs(g_lo), std::fabs(g_hi));
  const double extra_m = 3 * u * (std::fabs(b1 * m) + (1 - b1) * g_abs);
  const double sq_lo = (g_lo <= 0 && g_hi >= 0) ? 0.0 : std::min(g_lo * g_lo, g_hi * g_hi);
  const double least_denominator = std::sqrt(c2 * (b2 * v + (1 - b2) * sq_lo)) + eps;
  const double q_abs = std::max(std::fabs(q_lo), std::fabs(q_hi));
  const double dq = c1 * extra_m / least_denominator + 16 * u * q_abs;
  StepBound b;
  b.want = w - lr * want_q;
  b.gradient = lr * std::max(want_q - q_lo, q_hi - want_q);
  const double widest = b.gradient + lr * dq;
  b.rounding = lr * dq + u * lr * (q_abs + dq) + half_float_ulp(std::fabs(b.want) + widest) +
               0x1p-53 * std::fabs(b.want) + 0x1p-149;
  return b;
}

MomentBounds adam_moment_bounds(double m, double v, double g, double dg,
                                const OptimizerConfig& config) {
  constexpr double u = 0x1p-24;
  const double b1 = config.beta1, b2 = config.beta2;
  dg = std::fabs(dg);
  const double g_abs = std::fabs(g) + dg;
  const double sq_hi = g_abs * g_abs;
  const double sq_lo = dg >= std::fabs(g) ? 0.0 : (std::fabs(g) - dg) * (std::fabs(g) - dg);
  MomentBounds out;
  out.m.want = b1 * m + (1 - b1) * g;
  out.m.gradient = (1 - b1) * dg;
  out.m.rounding =
      3 * u * (std::fabs(b1 * m) + (1 - b1) * g_abs) + 0x1p-53 * std::fabs(out.m.want) + 0x1p-149;
  out.v.want = b2 * v + (1 - b2) * g * g;
  out.v.gradient = (1 - b2) * std::max(sq_hi - g * g, g * g - sq_lo);
  out.v.rounding = 4 * u * (b2 * v + (1 - b2) * sq_hi) + 0x1p-53 * out.v.want + 0x1p-147;
  return out;
}

StepBound sgd_step_bound(double w, double g, double dg, double lr) {
  StepBound b;
  b.want = w - lr * g;
  const double update = std::fabs(lr * g);
  b.gradient = lr * std::fabs(dg);
  b.rounding =
      0x1p-24 * update +
      std::min(half_float_ulp(std::fabs(b.want) + b.gradient + update), update + b.gradient) +
      0x1p-53 * std::fabs(b.want) + 0x1p-149;
  return b;
}

StepBound step_bound(const OptimizerConfig& config, double w, double m, double v, double g,
                     double dg, int t) {
  return config.kind == OptimizerKind::sgd ? sgd_step_bound(w, g, dg, config.lr)
                                           : adam_step_bound(w, m, v, g, dg, config, t);
}

void add_step_drift(Float32Drift& drift, const OptimizerConfig& config,
                    const Eigen::VectorXd& params, const ReferenceOptimizer& opt,
                    const Eigen::VectorXd& grad, const GradientError& gradient_error,
                    double largest, Eigen::Index begin, Eigen::Index end, int t) {
  for (Eigen::Index i = begin; i < end; ++i) {
    const StepBound sb = step_bound(config, params[i], opt.m()[i], opt.v()[i], grad[i],
                                    gradient_error(grad[i], largest), t);
    drift.rounding[i] += sb.rounding;
    drift.gradient[i] += sb.gradient;
  }
}

ReferenceRun reference_train(const MlpShape& shape, const Teacher& teacher,
                             const std::vector<float>& initial, std::size_t batch, int steps,
                             const OptimizerConfig& config, const GradientError& gradient_error) {
  ReferenceRun run;
  run.params = widen(initial);
  ReferenceOptimizer opt(shape.params(), config);
  const Eigen::Index n = Eigen::Index(shape.params());
  if (gradient_error) {
    run.drift.rounding.setZero(n);
    run.drift.gradient.setZero(n);
  }
  Eigen::VectorXd grad;
  for (int k = 0; k < steps; ++k) {
    const ReferenceBatch b = reference_batch(shape, teacher, batch, k);
    run.losses.push_back(reference_loss(shape, run.params, b.x, b.t, &grad));
    if (gradient_error)  // each step's bound at this run's state, before the step moves it
      for (std::size_t l = 0; l < shape.layers(); ++l) {
        const Eigen::Index begin = Eigen::Index(shape.weight_offset(l));
        const Eigen::Index end = Eigen::Index(shape.bias_offset(l) + shape.dims[l + 1]);
        const double largest = grad.segment(begin, end - begin).cwiseAbs().maxCoeff();
        add_step_drift(run.drift, config, run.params, opt, grad, gradient_error, largest, begin,
                       end, k + 1);
      }
    opt.step(run.params, grad);
  }
  return run;
}

ErrorBound drift_bound(const ReferenceRun& ref, const std::vector<float>& got, std::size_t first) {
  ErrorBound bound;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const Eigen::Index j = Eigen::Index(first + i);
    bound.add(double(got[i]) - ref.params[j],
              {kDriftRoom * ref.drift.rounding[j], kDriftRoom * ref.drift.gradient[j]});
  }
  return bound;
}

Eigen::VectorXd widen(const std::vector<float>& v) {
  Eigen::VectorXd out(Eigen::Index(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) out[Eigen::Index(i)] = v[i];
  return out;
}

RowMatrix widen(const std::vector<float>& v, std::size_t rows, std::size_t cols) {
  DL_CHECK(v.size() == rows * cols, "widen: {} values for a {}x{} matrix", v.size(), rows, cols);
  RowMatrix out(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  for (std::size_t i = 0; i < v.size(); ++i) out.data()[i] = v[i];
  return out;
}

}  // namespace distlab::model
