// ops.hpp and half.hpp: every op on the CPU against an independent float64 reference (plain
// loops in double), edge sizes, and the checks that guard the ops. The CUDA twins are checked
// against these CPU ops in gpu/test_ops_cuda.cpp.
#include "catch.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/dtype.hpp"
#include "core/base/half.hpp"
#include "core/ops/ops.hpp"
#include "ops_testing.hpp"

using namespace distlab;
using namespace distlab::testing;

namespace {

// Sizes that catch off-by-ones: empty, one, odd, not a multiple of 4 or 8, and larger.
const std::vector<std::size_t> kSizes = {0, 1, 3, 7, 8, 33, 1000, 1027};

// |got - want| within rel of |want|, or of 1 near zero.
bool close(double got, double want, double rel) {
  return std::abs(got - want) <= rel * std::max(1.0, std::abs(want));
}

// The number of elements of `got` off the reference by more than rel (0 when all agree).
template <class T>
int wrong(const Buffer<T>& got, const std::vector<double>& want, double rel) {
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) bad += close(d(got[i]), want[i], rel) ? 0 : 1;
  return bad;
}

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

}  // namespace

// --- half.hpp ---------------------------------------------------------------------------------

TEST_CASE("half: every f16 and bf16 value survives a trip through f32, NaN stays NaN", "[half]") {
  int bad = 0;
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const float h = static_cast<float>(Half::from_bits(b));
    const float bf = static_cast<float>(BFloat16::from_bits(b));
    if ((b & 0x7C00) == 0x7C00 && (b & 0x3FF))
      bad += !std::isnan(h) || !std::isnan(static_cast<float>(Half(h)));
    else
      bad += Half(h).bits != b;
    if ((b & 0x7F80) == 0x7F80 && (b & 0x7F))
      bad += !std::isnan(bf) || !std::isnan(static_cast<float>(BFloat16(bf)));
    else
      bad += BFloat16(bf).bits != b;
  }
  CHECK(bad == 0);
}

TEST_CASE("half: f32 -> f16 and bf16 round to nearest, ties to even, at every pair of neighbours",
          "[half]") {
  // Between two neighbouring finite values a < b: the midpoint goes to the even one, just
  // below it to a, just above to b. Midpoints are exact in f32 (11 and 8 bits of precision).
  int bad = 0;
  const auto check_pairs = [&](auto type) {
    using T = decltype(type);
    for (std::uint32_t bits = 0; bits < 0x7FFF; ++bits) {
      const T a = T::from_bits(static_cast<std::uint16_t>(bits));
      const T b = T::from_bits(static_cast<std::uint16_t>(bits + 1));
      const float fa = static_cast<float>(a), fb = static_cast<float>(b);
      if (!std::isfinite(fa) || !std::isfinite(fb)) continue;
      const float mid = fa + (fb - fa) / 2;
      const std::uint16_t even = (a.bits & 1) ? b.bits : a.bits;
      bad += T(mid).bits != even;
      bad += T(std::nextafter(mid, 0.0f)).bits != a.bits;
      bad += T(std::nextafter(mid, INFINITY)).bits != b.bits;
      bad += T(-mid).bits != (even | 0x8000);  // the sign is separate
    }
  };
  check_pairs(Half{});
  check_pairs(BFloat16{});
  CHECK(bad == 0);
}

TEST_CASE("half: overflow gives Inf, underflow keeps f16 subnormals, signs and zeros survive",
          "[half]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(Half(65504.0f).bits == 0x7BFF);   // the largest f16
  CHECK(Half(65519.99f).bits == 0x7BFF);  // below the midpoint to 65536
  CHECK(Half(65520.0f).bits == 0x7C00);   // the midpoint: ties to even, which is Inf
  CHECK(Half(1e6f).bits == 0x7C00);
  CHECK(Half(-inf).bits == 0xFC00);
  CHECK(Half(std::ldexp(1.0f, -14)).bits == 0x0400);  // smallest normal
  CHECK(Half(std::ldexp(1.0f, -24)).bits == 0x0001);  // smallest subnormal
  CHECK(Half(std::ldexp(1.0f, -25)).bits == 0x0000);  // half of it: a tie, to even 0
  CHECK(Half(std::ldexp(1.5f, -25)).bits == 0x0001);
  CHECK(Half(std::ldexp(3.0f, -25)).bits == 0x0002);  // 1.5 units: a tie, to even 2
  CHECK(Half(1e-40f).bits == 0x0000);                 // an f32 subnormal
  CHECK(Half(-0.0f).bits == 0x8000);
  CHECK(static_cast<float>(Half::from_bits(0x0001)) == std::ldexp(1.0f, -24));
  CHECK(static_cast<float>(Half::from_bits(0x03FF)) == std::ldexp(1023.0f, -24));
  CHECK(Half(std::nanf("")).bits == 0x7E00);
  CHECK((Half(-std::nanf("")).bits & 0x8000) != 0);

  CHECK(BFloat16(std::numeric_limits<float>::max()).bits == 0x7F80);  // past the largest bf16
  CHECK(BFloat16(-inf).bits == 0xFF80);
  CHECK(BFloat16(1.0f).bits == 0x3F80);
  CHECK(BFloat16(1e-40f).bits == 0x0001);  // bf16 has f32's subnormals (to its precision)
  CHECK(BFloat16(std::nanf("")).bits == 0x7FC0);
  CHECK(static_cast<float>(BFloat16::from_bits(0x7F7F)) == 0x1.FEp127f);
}

TEST_CASE("half: the f16 and bf16 element types", "[half]") {
  STATIC_REQUIRE(dtype_of<Half>() == DType::f16);
  STATIC_REQUIRE(dtype_of<const BFloat16>() == DType::bf16);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(std::string(to_string(DType::f16)) == "f16");
  CHECK(std::string(to_string(DType::bf16)) == "bf16");
  Ledger ledger;
  Buffer<Half> h(ledger, Category::data, 3);
  CHECK(h[2].bits == 0);  // zero-filled: Half{} is +0
  CHECK(ledger.current(Category::data) == 6);
}

// --- copy, fill, add --------------------------------------------------------------------------

TEST_CASE("ops: add, copy and fill compute element by element", "[ops]") {
  Ledger ledger;
  Buffer<std::int64_t> a(ledger, Category::data, 5), b(ledger, Category::data, 5);
  for (std::size_t i = 0; i < 5; ++i) {
    a[i] = static_cast<std::int64_t>(i);
    b[i] = 10 * static_cast<std::int64_t>(i);
  }
  ops::add(a.view(), View<const std::int64_t>(b.view()));
  for (std::size_t i = 0; i < 5; ++i) CHECK(a[i] == 11 * static_cast<std::int64_t>(i));
  ops::fill(b.view(), std::int64_t{-3});
  for (std::size_t i = 0; i < 5; ++i) CHECK(b[i] == -3);
  ops::copy(a.sub(1, 2), View<const std::int64_t>(b.sub(0, 2)));
  CHECK(a[0] == 0);
  CHECK(a[1] == -3);
  CHECK(a[2] == -3);
  CHECK(a[3] == 33);
  ops::copy(a.view(), View<const std::int64_t>(a.view()));  // the same memory: a no-op
  CHECK(a[3] == 33);
  ops::add(b.view(), a.view());  // a View<T> passes where a View<const T> is taken
  CHECK(b[4] == 41);
}

TEST_CASE("ops: size and device mismatches are errors naming the op and sizes", "[ops]") {
  Ledger ledger;
  Buffer<float> a(ledger, Category::data, 4), b(ledger, Category::data, 3);
  CHECK_THROWS_AS(ops::add(a.view(), View<const float>(b.view())), Error);
  CHECK_THROWS_WITH(ops::add(a.view(), View<const float>(b.view())),
                    Catch::Contains("add") && Catch::Contains("4 vs 3"));
  CHECK_THROWS_WITH(ops::copy(b.view(), View<const float>(a.view())), Catch::Contains("copy"));
  View<const float> on_gpu{nullptr, 4, Device::cuda};
  CHECK_THROWS_WITH(ops::add(a.view(), on_gpu), Catch::Contains("different devices"));
  CHECK_THROWS_WITH(ops::gemm(a.view(), b.view(), b.view(), 2, 2, 2),
                    Catch::Contains("gemm") && Catch::Contains("A"));
  CHECK_THROWS_WITH(ops::softmax_rows(a.view(), a.view(), 3, 2), Catch::Contains("softmax_rows"));
  CHECK_THROWS_WITH(ops::sum(a.view(), b.view()), Catch::Contains("sum") && Catch::Contains("out"));
  // A GPU view on a thread with no GPU bound (or in a build without CUDA): an error, not a crash.
  View<float> gpu_dst{nullptr, 4, Device::cuda};
  CHECK_THROWS_AS(ops::fill(gpu_dst, 1.0f), Error);
  CHECK_THROWS_AS(ops::scale(gpu_dst, 2.0f), Error);
}

TEST_CASE("ops: empty views are fine", "[ops]") {
  View<float> e1{nullptr, 0, Device::cpu};
  View<const float> e2{nullptr, 0, Device::cpu};
  CHECK_NOTHROW(ops::add(e1, e2));
  CHECK_NOTHROW(ops::copy(e1, e2));
  CHECK_NOTHROW(ops::fill(e1, 2.0f));
  CHECK_NOTHROW(ops::axpy(e1, 2.0f, e2));
  CHECK_NOTHROW(ops::gelu_forward(e1, e2));
  CHECK_NOTHROW(ops::softmax_rows(e1, e2, 0, 5));
  CHECK_NOTHROW(ops::gemm(e1, e2, e2, 0, 0, 0));
}

// --- elementwise ------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("ops: add, axpy, mul and scale against float64 at edge sizes", "[ops]", float,
                   Half, BFloat16) {
  using T = TestType;
  Ledger ledger;
  for (std::size_t n : kSizes) {
    CAPTURE(n);
    auto x = random_buffer<T>(ledger, n, 1), y = random_buffer<T>(ledger, n, 2);
    std::vector<double> sum(n), axpy(n), product(n), scaled(n);
    for (std::size_t i = 0; i < n; ++i) {
      sum[i] = d(y[i]) + d(x[i]);
      axpy[i] = d(y[i]) + 0.75 * d(x[i]);
      product[i] = d(y[i]) * d(x[i]);
      scaled[i] = -1.5 * d(y[i]);
    }
    // One rounding to T (a few f32 roundings inside it for float).
    const double rel = 4 * kRoundoff<T>;
    auto s = random_buffer<T>(ledger, n, 2);
    ops::add(s.view(), x.view());
    CHECK(wrong(s, sum, rel) == 0);
    auto a = random_buffer<T>(ledger, n, 2);
    ops::axpy(a.view(), 0.75f, x.view());
    CHECK(wrong(a, axpy, rel) == 0);
    auto m = random_buffer<T>(ledger, n, 2);
    ops::mul(m.view(), x.view());
    CHECK(wrong(m, product, rel) == 0);
    ops::scale(y.view(), -1.5f);
    CHECK(wrong(y, scaled, rel) == 0);
  }
}

TEST_CASE("ops: add on doubles and integers is exact", "[ops]") {
  Ledger ledger;
  Buffer<double> a(ledger, Category::data, 3), b(ledger, Category::data, 3);
  Buffer<std::int32_t> i(ledger, Category::data, 3), j(ledger, Category::data, 3);
  for (std::size_t k = 0; k < 3; ++k) {
    a[k] = 0.1 * double(k);
    b[k] = 1e-17;
    i[k] = static_cast<std::int32_t>(k) - 1;
    j[k] = 1 << 30;
  }
  ops::add(a.view(), b.view());
  ops::add(i.view(), j.view());
  CHECK(a[0] == 1e-17);
  CHECK(a[2] == 0.2 + 1e-17);
  CHECK(i[0] == (1 << 30) - 1);
  CHECK(i[2] == (1 << 30) + 1);
}

TEMPLATE_TEST_CASE("ops: gelu forward and backward against float64 and a finite difference",
                   "[ops]", float, Half, BFloat16) {
  using T = TestType;
  Ledger ledger;
  for (std::size_t n : kSizes) {
    CAPTURE(n);
    auto x = random_buffer<T>(ledger, n, 3, -6.0f, 6.0f), dy = random_buffer<T>(ledger, n, 4);
    Buffer<T> y(ledger, Category::data, n), dx(ledger, Category::data, n);
    ops::gelu_forward(y.view(), x.view());
    ops::gelu_backward(dx.view(), dy.view(), x.view());
    std::vector<double> y_ref(n), dx_ref(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double xi = d(x[i]), h = 1e-5;
      y_ref[i] = gelu_ref(xi);
      // The derivative from the forward, not from the formula the op uses.
      dx_ref[i] = d(dy[i]) * (gelu_ref(xi + h) - gelu_ref(xi - h)) / (2 * h);
    }
    const double rel = std::is_same_v<T, float> ? 1e-6 : 2 * kRoundoff<T>;
    CHECK(wrong(y, y_ref, rel) == 0);
    // The derivative in f32 loses digits in 1 - tanh(u)^2 where tanh(u) is near +-1, and that
    // term is multiplied by up to 0.5 |x| du/dx ~ 14 at |x| = 6: a few 1e-6 at most.
    CHECK(wrong(dx, dx_ref, std::max(rel, 1e-5)) == 0);
  }
}

TEST_CASE("ops: the tanh GeLU is within 5e-4 of the exact x Phi(x)", "[ops]") {
  Ledger ledger;
  Buffer<float> x(ledger, Category::data, 2001), y(ledger, Category::data, 2001);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -10.0f + 0.01f * float(i);
  ops::gelu_forward(y.view(), x.view());
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double exact = 0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0)));
    worst = std::max(worst, std::abs(y[i] - exact));
  }
  CHECK(worst < 5e-4);
  CHECK(worst > 1e-4);  // and it is an approximation: the tanh form, not erf
}

TEST_CASE("ops: cast f32 <-> f16 / bf16 rounds like the scalar conversion and round-trips",
          "[ops]") {
  Ledger ledger;
  for (std::size_t n : kSizes) {
    CAPTURE(n);
    auto f = random_buffer<float>(ledger, n, 5, -70000.0f, 70000.0f);  // past f16's range too
    if (n > 4) {
      f[0] = std::numeric_limits<float>::infinity();
      f[1] = std::nanf("");
      f[2] = std::ldexp(1.5f, -25);  // an f16 subnormal
      f[3] = -0.0f;
    }
    Buffer<Half> h(ledger, Category::data, n);
    Buffer<BFloat16> b(ledger, Category::data, n);
    Buffer<float> back_h(ledger, Category::data, n), back_b(ledger, Category::data, n);
    ops::cast(h.view(), f.view());
    ops::cast(b.view(), f.view());
    ops::cast(back_h.view(), h.view());
    ops::cast(back_b.view(), b.view());
    int bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      bad += h[i].bits != Half(f[i]).bits;
      bad += b[i].bits != BFloat16(f[i]).bits;
      bad += std::bit_cast<std::uint32_t>(back_h[i]) !=
             std::bit_cast<std::uint32_t>(static_cast<float>(h[i]));
      bad += std::bit_cast<std::uint32_t>(back_b[i]) !=
             std::bit_cast<std::uint32_t>(static_cast<float>(b[i]));
      // f32 -> f16 -> f32 is within half an f16 unit (or Inf past 65520).
      if (std::abs(f[i]) < 65504.0f) bad += !close(back_h[i], f[i], kRoundoff<Half>);
    }
    CHECK(bad == 0);
    Buffer<Half> same(ledger, Category::data, n);
    ops::cast(same.view(), h.view());  // same type: a copy
    for (std::size_t i = 0; i < n; ++i) CHECK(same[i].bits == h[i].bits);
  }
}

// --- Adam -------------------------------------------------------------------------------------

TEST_CASE("ops: adam_step matches a double implementation over five steps", "[ops]") {
  for (const float weight_decay : {0.0f, 0.1f}) {
    CAPTURE(weight_decay);
    const ops::AdamConfig config{
        .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = weight_decay};
    Ledger ledger;
    const std::size_t n = 37;
    auto p = random_buffer<float>(ledger, n, 6);
    Buffer<float> m(ledger, Category::optimizer, n), v(ledger, Category::optimizer, n);
    std::vector<double> p_ref(p.host().begin(), p.host().end()), m_ref(n, 0.0), v_ref(n, 0.0);
    for (int t = 1; t <= 5; ++t) {
      auto g = random_buffer<float>(ledger, n, 100 + t);
      ops::adam_step(p.view(), g.view(), m.view(), v.view(), config, t);
      for (std::size_t i = 0; i < n; ++i) {
        const double b1 = config.beta1, b2 = config.beta2;
        m_ref[i] = b1 * m_ref[i] + (1 - b1) * g[i];
        v_ref[i] = b2 * v_ref[i] + (1 - b2) * g[i] * g[i];
        const double m_hat = m_ref[i] / (1 - std::pow(b1, t)),
                     v_hat = v_ref[i] / (1 - std::pow(b2, t));
        p_ref[i] -= config.lr * (m_hat / (std::sqrt(v_hat) + config.eps) + weight_decay * p_ref[i]);
      }
    }
    CHECK(wrong(p, p_ref, 1e-5) == 0);
    CHECK(wrong(m, m_ref, 1e-5) == 0);
    CHECK(wrong(v, v_ref, 1e-5) == 0);
  }
  Ledger ledger;
  Buffer<float> x(ledger, Category::data, 2);
  CHECK_THROWS_WITH(ops::adam_step(x.view(), x.view(), x.view(), x.view(), {}, 0),
                    Catch::Contains("step"));
}

TEST_CASE("ops: adam_step takes bf16 and f16 gradients as their f32 values (mixed precision)",
          "[ops]") {
  Ledger ledger;
  const std::size_t n = 41;
  const ops::AdamConfig config{.lr = 1e-2f};
  auto g32 = random_buffer<float>(ledger, n, 7);
  Buffer<BFloat16> gb(ledger, Category::grads, n);
  Buffer<Half> gh(ledger, Category::grads, n);
  for (std::size_t i = 0; i < n; ++i) {
    gb[i] = BFloat16(g32[i]);
    gh[i] = Half(g32[i]);
  }
  Buffer<float> wide_b(ledger, Category::grads, n), wide_h(ledger, Category::grads, n);
  ops::cast(wide_b.view(), gb.view());  // the 16-bit values, widened: what Adam must see
  ops::cast(wide_h.view(), gh.view());
  auto p = random_buffer<float>(ledger, n, 8);
  Buffer<float> pb(ledger, Category::params, n), pw(ledger, Category::params, n),
      ph(ledger, Category::params, n), pwh(ledger, Category::params, n);
  for (std::size_t i = 0; i < n; ++i) pb[i] = pw[i] = ph[i] = pwh[i] = p[i];
  std::vector<Buffer<float>> state;
  for (int k = 0; k < 8; ++k) state.emplace_back(ledger, Category::optimizer, n);
  for (int t = 1; t <= 3; ++t) {
    ops::adam_step(pb.view(), gb.view(), state[0].view(), state[1].view(), config, t);
    ops::adam_step(pw.view(), wide_b.view(), state[2].view(), state[3].view(), config, t);
    ops::adam_step(ph.view(), gh.view(), state[4].view(), state[5].view(), config, t);
    ops::adam_step(pwh.view(), wide_h.view(), state[6].view(), state[7].view(), config, t);
  }
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(pb[i] == pw[i]);
    CHECK(ph[i] == pwh[i]);
  }
  CHECK(std::abs(pb[0] - p[0]) > 0.5f * config.lr);
}

TEST_CASE(
    "ops: the first Adam step moves every parameter by about lr, whatever the gradient's scale",
    "[ops]") {
  // m_hat / sqrt(v_hat) = g / |g| at t = 1: the bias correction at work.
  Ledger ledger;
  Buffer<float> p(ledger, Category::params, 3), g(ledger, Category::grads, 3),
      m(ledger, Category::optimizer, 3), v(ledger, Category::optimizer, 3);
  g[0] = 1e-4f;
  g[1] = -3.0f;
  g[2] = 1e4f;
  ops::adam_step(p.view(), g.view(), m.view(), v.view(), {.lr = 0.01f}, 1);
  CHECK(p[0] == Approx(-0.01f).epsilon(1e-3));
  CHECK(p[1] == Approx(0.01f).epsilon(1e-5));
  CHECK(p[2] == Approx(-0.01f).epsilon(1e-5));
}

TEST_CASE("ops: softmax_backward_rows matches finite differences of softmax, in place too",
          "[ops]") {
  Ledger ledger;
  const std::size_t rows = 3, cols = 7;
  auto x = random_buffer<float>(ledger, rows * cols, 21);
  auto dy = random_buffer<float>(ledger, rows * cols, 22);
  Buffer<float> y(ledger, Category::activations, rows * cols),
      dx(ledger, Category::activations, rows * cols);
  ops::softmax_rows(y.view(), x.view(), rows, cols);
  ops::softmax_backward_rows(dx.view(), y.view(), dy.view(), rows, cols);
  // L = sum(dy * softmax(x)): dL/dx by central differences in double.
  auto loss = [&](const std::vector<double>& xs) {
    double total = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      double top = -INFINITY, sum = 0;
      for (std::size_t c = 0; c < cols; ++c) top = std::max(top, xs[r * cols + c]);
      for (std::size_t c = 0; c < cols; ++c) sum += std::exp(xs[r * cols + c] - top);
      for (std::size_t c = 0; c < cols; ++c)
        total += dy[r * cols + c] * std::exp(xs[r * cols + c] - top) / sum;
    }
    return total;
  };
  std::vector<double> xs(x.host().begin(), x.host().end());
  for (std::size_t i = 0; i < rows * cols; ++i) {
    std::vector<double> up = xs, down = xs;
    up[i] += 1e-6;
    down[i] -= 1e-6;
    CHECK(dx[i] == Approx((loss(up) - loss(down)) / 2e-6).margin(1e-5));
  }
  // dx may be dy.
  Buffer<float> in_place(ledger, Category::activations, rows * cols);
  for (std::size_t i = 0; i < rows * cols; ++i) in_place[i] = dy[i];
  ops::softmax_backward_rows(in_place.view(), y.view(), in_place.view(), rows, cols);
  for (std::size_t i = 0; i < rows * cols; ++i) CHECK(in_place[i] == dx[i]);
}

// --- the transformer (lesson 14) -------------------------------------------------------------

namespace {

// LayerNorm of one row in float64, from the elements as stored.
struct LayerNormRow {
  std::vector<double> y, xhat;
  double rstd = 0;
};
template <class T>
LayerNormRow layernorm_ref(const Buffer<T>& x, const Buffer<T>& gamma, const Buffer<T>& beta,
                           std::size_t r, std::size_t cols, double eps) {
  LayerNormRow out;
  double mean = 0, var = 0;
  for (std::size_t c = 0; c < cols; ++c) mean += d(x[r * cols + c]);
  mean /= double(cols);
  for (std::size_t c = 0; c < cols; ++c)
    var += (d(x[r * cols + c]) - mean) * (d(x[r * cols + c]) - mean);
  out.rstd = 1 / std::sqrt(var / double(cols) + eps);
  for (std::size_t c = 0; c < cols; ++c) {
    out.xhat.push_back((d(x[r * cols + c]) - mean) * out.rstd);
    out.y.push_back(out.xhat.back() * d(gamma[c]) + d(beta[c]));
  }
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("ops: layernorm_forward against float64, in place too", "[ops]", float, Half,
                   BFloat16) {
  using T = TestType;
  Ledger ledger;
  for (const auto& [rows, cols] :
       std::vector<std::pair<std::size_t, std::size_t>>{{1, 1}, {3, 7}, {5, 64}, {2, 1027}}) {
    CAPTURE(rows, cols);
    auto x = random_buffer<T>(ledger, rows * cols, 31, -3.0f, 5.0f);
    auto gamma = random_buffer<T>(ledger, cols, 32, 0.5f, 1.5f);
    auto beta = random_buffer<T>(ledger, cols, 33);
    Buffer<T> y(ledger, Category::activations, rows * cols);
    Buffer<float> mean(ledger, Category::activations, rows),
        rstd(ledger, Category::activations, rows);
    ops::layernorm_forward(y.view(), mean.view(), rstd.view(), x.view(), gamma.view(), beta.view(),
                           rows, cols, 1e-5f);
    // Error model: the row's sums in f64, then a handful of f32 operations per element (about
    // 8 u_f32 of |xhat gamma| + |beta|), and one rounding to T.
    int bad = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      const auto ref = layernorm_ref(x, gamma, beta, r, cols, 1e-5);
      CHECK(rstd[r] == Approx(ref.rstd).epsilon(4 * 0x1p-24));
      for (std::size_t c = 0; c < cols; ++c) {
        const double scale = std::abs(ref.xhat[c] * d(gamma[c])) + std::abs(d(beta[c]));
        bad += std::abs(d(y[r * cols + c]) - ref.y[c]) >
               8 * 0x1p-24 * scale + kRoundoff<T> * std::abs(ref.y[c]);
      }
    }
    CHECK(bad == 0);
    ops::layernorm_forward(x.view(), mean.view(), rstd.view(), x.view(), gamma.view(), beta.view(),
                           rows, cols, 1e-5f);
    for (std::size_t i = 0; i < rows * cols; ++i) CHECK(d(x[i]) == d(y[i]));
  }
}

TEST_CASE("ops: layernorm_backward matches finite differences, adds to dgamma and dbeta", "[ops]") {
  Ledger ledger;
  const std::size_t rows = 3, cols = 9;
  const double eps = 1e-5;
  auto x = random_buffer<float>(ledger, rows * cols, 41, -2.0f, 3.0f);
  auto gamma = random_buffer<float>(ledger, cols, 42, 0.5f, 1.5f);
  auto beta = random_buffer<float>(ledger, cols, 43);
  auto dy = random_buffer<float>(ledger, rows * cols, 44);
  Buffer<float> y(ledger, Category::activations, rows * cols),
      dx(ledger, Category::activations, rows * cols);
  Buffer<float> mean(ledger, Category::activations, rows),
      rstd(ledger, Category::activations, rows);
  Buffer<float> dgamma(ledger, Category::grads, cols), dbeta(ledger, Category::grads, cols);
  ops::layernorm_forward(y.view(), mean.view(), rstd.view(), x.view(), gamma.view(), beta.view(),
                         rows, cols, static_cast<float>(eps));
  ops::layernorm_backward(dx.view(), dgamma.view(), dbeta.view(), dy.view(), x.view(), mean.view(),
                          rstd.view(), gamma.view(), rows, cols);
  // L = sum(dy * layernorm(x; gamma, beta)) in double: dL/dx, dL/dgamma and dL/dbeta by central
  // differences (step 1e-6: truncation ~1e-12, cancellation ~1e-10 of L's few units).
  auto loss = [&](std::vector<double> xs, std::vector<double> g, std::vector<double> b) {
    double total = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      double mu = 0, var = 0;
      for (std::size_t c = 0; c < cols; ++c) mu += xs[r * cols + c];
      mu /= double(cols);
      for (std::size_t c = 0; c < cols; ++c)
        var += (xs[r * cols + c] - mu) * (xs[r * cols + c] - mu);
      const double rs = 1 / std::sqrt(var / double(cols) + eps);
      for (std::size_t c = 0; c < cols; ++c)
        total += dy[r * cols + c] * ((xs[r * cols + c] - mu) * rs * g[c] + b[c]);
    }
    return total;
  };
  const std::vector<double> xs(x.host().begin(), x.host().end()),
      gs(gamma.host().begin(), gamma.host().end()), bs(beta.host().begin(), beta.host().end());
  const double h = 1e-6;
  for (std::size_t i = 0; i < rows * cols; ++i) {
    auto up = xs, down = xs;
    up[i] += h;
    down[i] -= h;
    CHECK(dx[i] == Approx((loss(up, gs, bs) - loss(down, gs, bs)) / (2 * h)).margin(2e-5));
  }
  for (std::size_t c = 0; c < cols; ++c) {
    auto gu = gs, gd = gs, bu = bs, bd = bs;
    gu[c] += h;
    gd[c] -= h;
    bu[c] += h;
    bd[c] -= h;
    CHECK(dgamma[c] == Approx((loss(xs, gu, bs) - loss(xs, gd, bs)) / (2 * h)).margin(2e-5));
    CHECK(dbeta[c] == Approx((loss(xs, gs, bu) - loss(xs, gs, bd)) / (2 * h)).margin(2e-5));
  }
  // A second call adds to dgamma and dbeta (micro-batches accumulate); dx may be dy.
  const std::vector<float> g1(dgamma.host().begin(), dgamma.host().end()),
      b1(dbeta.host().begin(), dbeta.host().end());
  ops::layernorm_backward(dy.view(), dgamma.view(), dbeta.view(), dy.view(), x.view(), mean.view(),
                          rstd.view(), gamma.view(), rows, cols);
  for (std::size_t c = 0; c < cols; ++c) {
    CHECK(dgamma[c] == Approx(2 * g1[c]).epsilon(1e-6));
    CHECK(dbeta[c] == Approx(2 * b1[c]).epsilon(1e-6));
  }
  for (std::size_t i = 0; i < rows * cols; ++i) CHECK(dy[i] == dx[i]);
}

TEST_CASE("ops: gather_rows looks rows up, scatter_add_rows adds them back, ids are checked",
          "[ops]") {
  Ledger ledger;
  const std::size_t cols = 3;
  auto table = random_buffer<float>(ledger, 5 * cols, 51);
  Buffer<std::int32_t> ids(ledger, Category::data, 4);
  const std::int32_t rows_wanted[] = {4, 0, 4, 2};
  for (std::size_t r = 0; r < 4; ++r) ids[r] = rows_wanted[r];
  Buffer<float> out(ledger, Category::activations, 4 * cols);
  ops::gather_rows(out.view(), table.view(), ids.view(), cols);
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      CHECK(out[r * cols + c] == table[static_cast<std::size_t>(ids[r]) * cols + c]);
  // Row 4 appears twice: both add; rows 1 and 3 appear never: unchanged.
  auto dtable = random_buffer<float>(ledger, 5 * cols, 52);
  const std::vector<float> before(dtable.host().begin(), dtable.host().end());
  auto dout = random_buffer<float>(ledger, 4 * cols, 53);
  ops::scatter_add_rows(dtable.view(), dout.view(), ids.view(), cols);
  for (std::size_t c = 0; c < cols; ++c) {
    CHECK(dtable[4 * cols + c] ==
          Approx(double(before[4 * cols + c]) + dout[c] + dout[2 * cols + c]).epsilon(2 * 0x1p-24));
    CHECK(dtable[0 * cols + c] == Approx(double(before[c]) + dout[1 * cols + c]).epsilon(0x1p-24));
    CHECK(dtable[2 * cols + c] ==
          Approx(double(before[2 * cols + c]) + dout[3 * cols + c]).epsilon(0x1p-24));
    CHECK(dtable[1 * cols + c] == before[1 * cols + c]);
    CHECK(dtable[3 * cols + c] == before[3 * cols + c]);
  }
  ids[1] = 5;
  CHECK_THROWS_WITH(ops::gather_rows(out.view(), table.view(), ids.view(), cols),
                    Catch::Contains("id 5 at 1 is not a row of the table's 5"));
  CHECK_THROWS_WITH(ops::scatter_add_rows(dtable.view(), dout.view(), ids.view(), cols),
                    Catch::Contains("id 5 at 1"));
}

TEMPLATE_TEST_CASE("ops: cross_entropy's loss and gradient against float64", "[ops]", float, Half,
                   BFloat16) {
  using T = TestType;
  Ledger ledger;
  const std::size_t rows = 4, cols = 65;
  auto z = random_buffer<T>(ledger, rows * cols, 61, -4.0f, 4.0f);
  Buffer<std::int32_t> targets(ledger, Category::data, rows);
  for (std::size_t r = 0; r < rows; ++r)
    targets[r] = static_cast<std::int32_t>((r * 17 + 3) % cols);
  Buffer<float> loss(ledger, Category::activations, rows);
  Buffer<T> dz(ledger, Category::activations, rows * cols);
  const float scale = 1.0f / rows;
  ops::cross_entropy(loss.view(), dz.view(), z.view(), targets.view(), rows, cols, scale);
  int bad = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    double top = -INFINITY, total = 0;
    for (std::size_t c = 0; c < cols; ++c) top = std::max(top, d(z[r * cols + c]));
    for (std::size_t c = 0; c < cols; ++c) total += std::exp(d(z[r * cols + c]) - top);
    const double lse = std::log(total) + top;
    const auto t = static_cast<std::size_t>(targets[r]);
    // The loss: a few f32 roundings of numbers up to |lse| + |z|.
    CHECK(loss[r] == Approx(lse - d(z[r * cols + t])).margin(8 * 0x1p-24 * (std::abs(lse) + 4)));
    for (std::size_t c = 0; c < cols; ++c) {
      const double p = std::exp(d(z[r * cols + c]) - lse);
      const double want = scale * (p - (c == t ? 1.0 : 0.0));
      // exp of an argument off by a few u (|argument| <= 8 + log cols): 16 u relative to p, and
      // one rounding to T (f16 below 2^-14 is subnormal: half a unit of 2^-24 at most).
      const double subnormal = std::is_same_v<T, Half> ? 0x1p-25 : 1e-30;
      bad += std::abs(d(dz[r * cols + c]) - want) >
             scale * 16 * 8 * 0x1p-24 * p + kRoundoff<T> * std::abs(want) + subnormal;
    }
  }
  CHECK(bad == 0);
  // In place, and a target out of range is an error naming it.
  ops::cross_entropy(loss.view(), z.view(), z.view(), targets.view(), rows, cols, scale);
  for (std::size_t i = 0; i < rows * cols; ++i) CHECK(d(z[i]) == d(dz[i]));
  targets[2] = static_cast<std::int32_t>(cols);
  CHECK_THROWS_WITH(
      ops::cross_entropy(loss.view(), dz.view(), dz.view(), targets.view(), rows, cols, scale),
      Catch::Contains("target 65 of row 2 is not one of the 65 classes"));
}

// --- reductions -------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("ops: sum, row_sums and col_sums against float64", "[ops]", float, Half,
                   BFloat16) {
  using T = TestType;
  Ledger ledger;
  const std::vector<std::pair<std::size_t, std::size_t>> shapes = {{0, 4}, {4, 0},   {1, 1},
                                                                   {3, 7}, {17, 33}, {64, 1027}};
  for (const auto& [rows, cols] : shapes) {
    CAPTURE(rows, cols);
    auto x = random_buffer<T>(ledger, rows * cols, 7);
    Buffer<float> total(ledger, Category::data, 1), by_row(ledger, Category::data, rows),
        by_col(ledger, Category::data, cols);
    total[0] = 42.0f;  // overwritten, even for an empty x
    ops::sum(total.view(), x.view());
    ops::row_sums(by_row.view(), x.view(), rows, cols);
    ops::col_sums(by_col.view(), x.view(), rows, cols);
    std::vector<double> row_ref(rows, 0.0), col_ref(cols, 0.0);
    double all = 0;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) {
        const double xi = d(x[r * cols + c]);
        row_ref[r] += xi;
        col_ref[c] += xi;
        all += xi;
      }
    // Summed in double, rounded once to f32.
    CHECK(close(total[0], all, 1e-6));
    CHECK(wrong(by_row, row_ref, 1e-6) == 0);
    CHECK(wrong(by_col, col_ref, 1e-6) == 0);
  }
}

TEMPLATE_TEST_CASE("ops: softmax rows sum to 1, match float64, and stay finite for large inputs",
                   "[ops]", float, Half, BFloat16) {
  using T = TestType;
  Ledger ledger;
  for (const auto& [rows, cols, offset] : std::vector<std::tuple<std::size_t, std::size_t, float>>{
           {1, 1, 0.0f}, {3, 7, 0.0f}, {5, 1027, 0.0f}, {4, 50, 1e4f}, {2, 9, -1e4f}}) {
    CAPTURE(rows, cols, offset);
    // exp(1e4) overflows f32 (and even f64): only the max-subtracted form survives it.
    // f16 tops out at 65504, so its large inputs are scaled down to stay finite.
    const float shift = std::is_same_v<T, Half> ? offset / 4 : offset;
    auto x = random_buffer<T>(ledger, rows * cols, 8, shift - 5.0f, shift + 5.0f);
    Buffer<T> y(ledger, Category::data, rows * cols);
    ops::softmax_rows(y.view(), x.view(), rows, cols);
    std::vector<double> ref(rows * cols);
    int bad_sum = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      double row_max = -INFINITY, total = 0, got = 0;
      for (std::size_t c = 0; c < cols; ++c) row_max = std::max(row_max, d(x[r * cols + c]));
      for (std::size_t c = 0; c < cols; ++c) total += std::exp(d(x[r * cols + c]) - row_max);
      for (std::size_t c = 0; c < cols; ++c) {
        ref[r * cols + c] = std::exp(d(x[r * cols + c]) - row_max) / total;
        got += d(y[r * cols + c]);
      }
      // Each output is rounded once (relative error <= u, so the row's total is off by <= u),
      // except that f16 flushes the smallest probabilities to subnormals (absolute <= 2^-25).
      const double subnormals = std::is_same_v<T, Half> ? double(cols) * 0x1p-25 : 0.0;
      bad_sum += std::abs(got - 1.0) > 1e-5 + 2 * kRoundoff<T> + subnormals;
    }
    CHECK(bad_sum == 0);
    CHECK(wrong(y, ref, std::is_same_v<T, float> ? 1e-6 : 2 * kRoundoff<T>) == 0);
  }
  // In place: out may be in.
  auto x = random_buffer<T>(ledger, 12, 9);
  Buffer<T> y(ledger, Category::data, 12);
  ops::softmax_rows(y.view(), x.view(), 3, 4);
  ops::softmax_rows(x.view(), x.view(), 3, 4);
  for (std::size_t i = 0; i < 12; ++i) CHECK(d(x[i]) == d(y[i]));
}

// --- gemm -------------------------------------------------------------------------------------

namespace {

// C = alpha op(A) op(B) + beta C in double, row-major, straight from the definition; and the
// magnitude of each element's terms, alpha sum |a b| + |beta c|, which bounds f32's error.
struct GemmRef {
  std::vector<double> c, magnitude;
};

template <class T>
GemmRef gemm_ref(const Buffer<T>& a, const Buffer<T>& b, const Buffer<T>& c, std::size_t m,
                 std::size_t n, std::size_t k, bool ta, bool tb, double alpha, double beta) {
  GemmRef ref{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double acc = 0, mag = 0;
      for (std::size_t p = 0; p < k; ++p) {
        const double aip = ta ? d(a[p * m + i]) : d(a[i * k + p]);
        const double bpj = tb ? d(b[j * k + p]) : d(b[p * n + j]);
        acc += aip * bpj;
        mag += std::abs(aip * bpj);
      }
      const double old = beta == 0 ? 0.0 : beta * d(c[i * n + j]);
      ref.c[i * n + j] = alpha * acc + old;
      ref.magnitude[i * n + j] = std::abs(alpha) * mag + std::abs(old);
    }
  return ref;
}

// Elements of got off ref by more than f32 accumulation over k terms allows (k u magnitude,
// the textbook bound), plus one rounding to T.
template <class T>
int gemm_wrong(const Buffer<T>& got, const GemmRef& ref, std::size_t k) {
  int bad = 0;
  for (std::size_t i = 0; i < ref.c.size(); ++i) {
    const double bound =
        2 * kRoundoff<T> * std::abs(ref.c[i]) + double(k + 2) * 0x1p-24 * ref.magnitude[i];
    bad += std::abs(d(got[i]) - ref.c[i]) > bound;
  }
  return bad;
}

}  // namespace

TEMPLATE_TEST_CASE("ops: gemm in all four transpose combinations against float64", "[ops]", float,
                   Half, BFloat16) {
  using T = TestType;
  Ledger ledger;
  const std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> shapes = {
      {1, 1, 1}, {5, 7, 3}, {17, 13, 33}, {64, 48, 96}, {3, 4, 0}};
  for_each_gemm_case(shapes, [&](std::size_t m, std::size_t n, std::size_t k, bool ta, bool tb,
                                 float alpha, float beta) {
    CAPTURE(m, n, k, ta, tb, alpha, beta);
    auto a = random_buffer<T>(ledger, m * k, 10), b = random_buffer<T>(ledger, k * n, 11);
    auto c = random_buffer<T>(ledger, m * n, 12);
    const GemmRef ref = gemm_ref(a, b, c, m, n, k, ta, tb, alpha, beta);
    ops::gemm(c.view(), a.view(), b.view(), m, n, k, ta, tb, alpha, beta);
    CHECK(gemm_wrong(c, ref, k) == 0);
  });
}

TEST_CASE("ops: gemm with beta = 0 never reads C", "[ops]") {
  Ledger ledger;
  Buffer<float> a(ledger, Category::data, 6), b(ledger, Category::data, 6),
      c(ledger, Category::data, 4);
  ops::fill(a.view(), 1.0f);
  ops::fill(b.view(), 2.0f);
  ops::fill(c.view(), std::nanf(""));
  ops::gemm(c.view(), a.view(), b.view(), 2, 2, 3);  // (2,3) x (3,2)
  for (std::size_t i = 0; i < 4; ++i) CHECK(c[i] == 6.0f);
  // (3,2)^T x (2,3)^T reads the same arrays as (2,3) x (3,2) with other strides.
  Buffer<float> r(ledger, Category::data, 6), s(ledger, Category::data, 6),
      t(ledger, Category::data, 4);
  for (std::size_t i = 0; i < 6; ++i) {
    r[i] = float(i);
    s[i] = float(i * i);
  }
  ops::gemm(t.view(), r.view(), s.view(), 2, 2, 3, /*trans_a=*/true, /*trans_b=*/true);
  // A stored (3,2) = (0,1), (2,3), (4,5): op(A) = A^T has rows (0,2,4), (1,3,5).
  // B stored (2,3) = (0,1,4), (9,16,25): op(B) = B^T has rows (0,9), (1,16), (4,25).
  CHECK(t[0] == 0 * 0 + 2 * 1 + 4 * 4);
  CHECK(t[1] == 0 * 9 + 2 * 16 + 4 * 25);
  CHECK(t[2] == 1 * 0 + 3 * 1 + 5 * 4);
  CHECK(t[3] == 1 * 9 + 3 * 16 + 5 * 25);
}
