// precision_reference.cpp — the float64 gradient and its error bound (precision_reference.hpp).
#include "core/training/precision_reference.hpp"

#include <algorithm>
#include <cmath>

#include "core/base/check.hpp"

namespace distlab::precision {

namespace {

// The formats' constants, written out from their definitions (not read from half.hpp or fp8.hpp,
// the code under test): 1 + m mantissa bits give u = 2^-(m+1); the smallest subnormal is
// 2^(1 - bias - m); the largest finite value and the overflow threshold (the midpoint past it).
Rounding ieee(const char* name, int mantissa, int bias, int max_exponent) {
  const double ulp_at_one = std::ldexp(1.0, -mantissa);
  const double largest = (2 - ulp_at_one) * std::ldexp(1.0, max_exponent);
  return {name, std::ldexp(1.0, -mantissa - 1), std::ldexp(1.0, 1 - bias - mantissa - 1),
          largest + std::ldexp(ulp_at_one / 2, max_exponent), largest};
}

// The running analysis of one shard's step: the rules of the header, and the overflow seen.
struct Analysis {
  const Model& model;
  double scale;
  Overflow overflow;

  // round to the storage format; `watch`: a tensor that can overflow it (scaled or not)
  Bounded rounded(Bounded b, const Rounding& r) {
    b.e = b.e + r.u * (b.v.cwiseAbs() + b.e);
    b.e.array() += r.a;
    if (r.overflow > 0) {
      if (((b.v.cwiseAbs() + b.e).array() >= r.overflow).any()) overflow.possible = true;
      if (((b.v.cwiseAbs() - b.e).array() >= r.overflow).any()) overflow.sure = true;
    }
    return b;
  }
  Bounded stored(Bounded b) { return rounded(std::move(b), model.store); }

  // fp8's cast of a GEMM operand, its amax recorded in `history` first (the run's scale includes
  // this cast's amax, so nothing saturates).
  Bounded cast8(Bounded b, const Rounding& f8, std::deque<double>& history) {
    const double amax = (b.v.cwiseAbs() + b.e).maxCoeff();
    history.push_back(amax);
    while (history.size() > model.amax_history) history.pop_front();
    const double s_lo = fp8_scale(f8.largest, *std::max_element(history.begin(), history.end()));
    b.e = b.e + f8.u * (b.v.cwiseAbs() + b.e);
    b.e.array() += f8.a / s_lo;
    return b;
  }
};

// C = A B, float32 accumulation over k terms.
Bounded product(double u, const RowMatrix& av, const RowMatrix& ae, const RowMatrix& bv,
                const RowMatrix& be) {
  const double k = double(av.cols());
  const RowMatrix aa = av.cwiseAbs(), ba = bv.cwiseAbs();
  Bounded c;
  c.v = av * bv;
  c.e = aa * be + ae * ba + ae * be + k * u * ((aa + ae) * (ba + be));
  return c;
}

RowMatrix map_gelu(const RowMatrix& z, double (*f)(double)) {
  return z.unaryExpr(f);
}

Bounded whole_vector(std::size_t n) {
  Bounded b;
  b.v.setZero(Eigen::Index(n), 1);
  b.e.setZero(Eigen::Index(n), 1);
  return b;
}

// Writes a (rows, cols) matrix into the flat vector at `at`, row-major.
void put(Bounded& flat, std::size_t at, const Bounded& m) {
  const Eigen::Index n = m.v.size();
  for (Eigen::Index i = 0; i < n; ++i) {
    flat.v(Eigen::Index(at) + i) = m.v.data()[i];
    flat.e(Eigen::Index(at) + i) = m.e.data()[i];
  }
}

// Adds b into the running sum acc, in the storage format: one rounding per element.
void add_stored(Analysis& an, Bounded& acc, const Bounded& b) {
  acc.v += b.v;
  acc.e += b.e;
  acc = an.stored(std::move(acc));
}

// One shard's forward and backward: its gradient in the storage format, scaled.
Bounded shard_gradient(Analysis& an, const model::MlpShape& s, const Eigen::VectorXd& w,
                       const Shard& shard, std::size_t whole, Fp8History* h, double& loss) {
  const std::size_t L = s.layers();
  const Rounding e4m3 = rounding_e4m3(), e5m2 = rounding_e5m2();
  const double u = an.model.accumulate;
  std::vector<Bounded> in(L), weight(L), z(L);  // the GEMMs' operands as cast, and each z
  Bounded a{shard.x, RowMatrix::Zero(shard.x.rows(), shard.x.cols())};
  a = an.stored(std::move(a));  // the data, cast to the storage format
  for (std::size_t l = 0; l < L; ++l) {
    const auto rows = Eigen::Index(s.dims[l]), cols = Eigen::Index(s.dims[l + 1]);
    Bounded wl{Eigen::Map<const RowMatrix>(w.data() + s.weight_offset(l), rows, cols),
               RowMatrix::Zero(rows, cols)};
    wl = an.stored(std::move(wl));  // the master weights cast to the compute copy
    Bounded bl{Eigen::Map<const RowMatrix>(w.data() + s.bias_offset(l), 1, cols),
               RowMatrix::Zero(1, cols)};
    bl = an.stored(std::move(bl));
    if (an.model.fp8) {
      a = an.cast8(std::move(a), e4m3, h->input[l]);
      wl = an.cast8(std::move(wl), e4m3, h->weight[l]);
    }
    Bounded zl = an.stored(product(u, a.v, a.e, wl.v, wl.e));
    // + the bias, one float32 addition, then stored
    const RowMatrix ones = RowMatrix::Ones(zl.v.rows(), 1);
    const RowMatrix bias_v = ones * bl.v, bias_e = ones * bl.e;
    zl.e = zl.e + bias_e + 2 * u * (zl.v.cwiseAbs() + zl.e + bias_v.cwiseAbs() + bias_e);
    zl.v += bias_v;
    zl = an.stored(std::move(zl));
    in[l] = std::move(a);
    weight[l] = std::move(wl);
    if (l + 1 < L) {
      Bounded hl;
      hl.v = map_gelu(zl.v, &model::reference_gelu);
      hl.e = kGeluSlope * zl.e + 32 * u * (zl.v.cwiseAbs() + zl.e);
      a = an.stored(std::move(hl));
    }
    z[l] = std::move(zl);
  }
  // The loss's gradient: dy = 2 (y - t) / (whole out), three float32 roundings, then scaled
  // (exactly) and stored.
  const Bounded& y = z[L - 1];
  const double c = 2.0 / double(whole * s.out());
  const RowMatrix diff = y.v - shard.t;
  loss = diff.squaredNorm() / double(whole * s.out());
  Bounded dz;
  dz.v = an.scale * c * diff;
  dz.e = an.scale * (c * y.e + 4 * u * c * (diff.cwiseAbs() + y.e));
  dz = an.stored(std::move(dz));

  Bounded grad = whole_vector(s.params());
  for (std::size_t l = L; l-- > 0;) {
    if (l + 1 < L) {  // dz = dh gelu'(z)
      const RowMatrix slope = map_gelu(z[l].v, &model::reference_gelu_grad);
      Bounded next;
      next.v = dz.v.cwiseProduct(slope);
      next.e = dz.e.cwiseProduct(slope.cwiseAbs() + kGeluCurvature * z[l].e) +
               dz.v.cwiseAbs().cwiseProduct(kGeluCurvature * z[l].e) +
               32 * u * kGeluSlope * (dz.v.cwiseAbs() + dz.e);
      dz = an.stored(std::move(next));
    }
    const Bounded dz_cast = an.model.fp8 ? an.cast8(dz, e5m2, h->grad[l]) : dz;
    // dW = in^T dz: the GEMM over the shard's rows
    const Bounded dw =
        an.stored(product(u, in[l].v.transpose(), in[l].e.transpose(), dz_cast.v, dz_cast.e));
    put(grad, s.weight_offset(l), dw);
    // db = the column sums of dz (float32 or better), stored
    Bounded db;
    db.v = dz.v.colwise().sum();
    db.e =
        dz.e.colwise().sum() + double(dz.v.rows()) * u * (dz.v.cwiseAbs() + dz.e).colwise().sum();
    put(grad, s.bias_offset(l), an.stored(std::move(db)));
    if (l > 0)  // dh = dz W^T
      dz = an.stored(
          product(u, dz_cast.v, dz_cast.e, weight[l].v.transpose(), weight[l].e.transpose()));
  }
  return grad;
}

}  // namespace

Rounding rounding_f32() {
  return ieee("float32", 23, 127, 127);
}
Rounding rounding_f64() {
  return ieee("float64", 52, 1023, 1023);
}
Rounding rounding_bf16() {
  return ieee("bfloat16", 7, 127, 127);
}
Rounding rounding_f16() {
  return ieee("float16", 10, 15, 15);
}
// E4M3 has no infinity: its top binade holds 256 .. 448 and saturating casts never overflow.
Rounding rounding_e4m3() {
  return {"e4m3", 0x1p-4, 0x1p-10, 0, 448};
}
Rounding rounding_e5m2() {
  Rounding r = ieee("e5m2", 2, 15, 15);
  r.overflow = 0;  // the lesson's casts saturate (scaled: nothing reaches it)
  return r;
}

double round_to(const Rounding& r, double x) {
  if (!std::isfinite(x) || x == 0) return x;
  int e = 0;
  (void)std::frexp(x, &e);                        // |x| = f 2^e, 1/2 <= f < 1
  const int bits = -std::ilogb(r.u);              // significant bits: u = 2^-bits
  const int smallest = std::ilogb(2 * r.a);       // the subnormals' spacing
  const int unit = std::max(e - bits, smallest);  // the last kept bit's weight
  const double y = std::ldexp(std::nearbyint(std::ldexp(x, -unit)), unit);  // ties to even
  if (std::fabs(y) > r.largest)
    return std::copysign(r.overflow > 0 ? double(INFINITY) : r.largest, x);
  return y;
}

bool rounds_from(const Rounding& r, double got, double lo, double hi) {
  return got >= round_to(r, lo) && got <= round_to(r, hi);
}

double fp8_scale(double largest, double amax) {
  if (!(amax > 0) || !std::isfinite(amax)) return 1;
  return std::ldexp(1.0, int(std::floor(std::log2(largest / amax))));
}

BoundedGradient bounded_gradient(const model::MlpShape& shape, const Eigen::VectorXd& w,
                                 const std::vector<std::vector<Shard>>& shards, std::size_t whole,
                                 const Model& model, double scale,
                                 std::vector<Fp8History>* history) {
  DL_CHECK(!model.fp8 || (history && history->size() == shards.size()),
           "bounded_gradient: fp8 needs one history per rank");
  Analysis an{model, scale, {}};
  std::vector<Bounded> per_rank;
  BoundedGradient out;
  for (std::size_t r = 0; r < shards.size(); ++r) {
    Fp8History* h = nullptr;
    if (model.fp8) {
      h = &(*history)[r];
      if (h->input.empty()) {
        h->input.resize(shape.layers());
        h->weight.resize(shape.layers());
        h->grad.resize(shape.layers());
      }
    }
    Bounded acc;
    for (std::size_t j = 0; j < shards[r].size(); ++j) {
      double loss = 0;
      Bounded g = shard_gradient(an, shape, w, shards[r][j], whole, h, loss);
      out.loss += loss;
      if (j == 0)
        acc = std::move(g);
      else
        add_stored(an, acc, g);  // the micro-batches added in the storage format
    }
    per_rank.push_back(std::move(acc));
  }
  // The ranks' sums added in a ring: N - 1 additions per element, each rounded to the format,
  // none of a partial sum larger than the sum of |V| + E.
  Bounded sum = whole_vector(shape.params());
  RowMatrix magnitude = RowMatrix::Zero(sum.v.rows(), 1);
  for (const Bounded& g : per_rank) {
    sum.v += g.v;
    sum.e += g.e;
    magnitude += g.v.cwiseAbs() + g.e;
  }
  const Rounding& f = model.store;
  const double additions = double(per_rank.size() - 1);
  sum.e.array() += additions * (f.u * magnitude.array() + f.a);
  if (f.overflow > 0 && per_rank.size() > 1) {
    if ((magnitude.array() + sum.e.array() >= f.overflow).any()) an.overflow.possible = true;
    if ((sum.v.cwiseAbs() - sum.e).maxCoeff() >= f.overflow) an.overflow.sure = true;
  }
  // Unscaled: exact for a power-of-two scale, but for the format's own subnormals (float32's
  // where the run divides, in float32).
  out.g = sum.v / scale;
  out.e = (sum.e / scale).array() + model.store.a;
  out.overflow = an.overflow;
  return out;
}

}  // namespace distlab::precision
