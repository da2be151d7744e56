// test_ops_cuda.cpp — every CUDA op against its CPU twin (ops.hpp): the same inputs, once in
// host buffers and once in device buffers, compared with a tolerance per op and type.
//
// Exact where both devices do the same single rounding (add, scale, fill, copy, casts);
// a few units of the last place where the GPU's FMA contraction or tanhf/expf differ from the
// host's; for sums and GEMMs, the f32 accumulation bound (terms x u x the terms' magnitude),
// since the two devices add in different orders. Each test binds the thread to GPU 0 as the
// runtime binds a rank, so every op runs on a rank's stream.
#include <cuda_runtime_api.h>
#include "catch.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "core/base/half.hpp"
#include "core/device/cuda_context.hpp"
#include "core/ops/ops.hpp"
#include "ops_testing.hpp"

using namespace distlab;
using namespace distlab::testing;

namespace {

// The calling thread as rank 0 on GPU 0, for one test.
struct BoundRank {
  BoundRank() { cuda_bind_rank(0); }
  ~BoundRank() { cuda_unbind_rank(); }
  BoundRank(const BoundRank&) = delete;
  BoundRank& operator=(const BoundRank&) = delete;
};

// Sizes: tiny, odd, not a multiple of a 16-byte pack, and large enough that the grid-stride
// loops go round more than once (one wave is 132 SMs x 2048 threads x 4 floats ~ 1.1 M).
const std::vector<std::size_t> kSizes = {1, 3, 7, 8, 33, 1027, (std::size_t{1} << 22) + 3};

// A device copy of a host buffer.
template <class T>
Buffer<T> up(Ledger& ledger, const Buffer<T>& host) {
  Buffer<T> dev(ledger, Category::data, host.size(), Device::cuda, /*zero=*/false);
  ops::copy(dev.view(), host.view());
  return dev;
}

// A host copy of a device buffer; returns once the rank's stream has produced it.
template <class T>
Buffer<T> down(Ledger& ledger, const Buffer<T>& dev) {
  Buffer<T> host(ledger, Category::data, dev.size(), Device::cpu, /*zero=*/false);
  ops::copy(host.view(), dev.view());
  return host;
}

// Elements where the GPU result is off the CPU's by more than rel (of the value, or of 1 near
// zero); NaN matches NaN. rel = 0: bit for bit.
template <class T>
int differ(const Buffer<T>& gpu, const Buffer<T>& cpu, double rel) {
  REQUIRE(gpu.size() == cpu.size());
  int bad = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    const double g = d(gpu[i]), c = d(cpu[i]);
    if (std::isnan(g) || std::isnan(c)) {
      bad += std::isnan(g) != std::isnan(c);
    } else if (rel == 0) {
      bad += std::bit_cast<std::uint32_t>(static_cast<float>(gpu[i])) !=
             std::bit_cast<std::uint32_t>(static_cast<float>(cpu[i]));
    } else {
      bad += std::abs(g - c) > rel * std::max(1.0, std::abs(c));
    }
  }
  return bad;
}

// Elements where the GPU result is off the CPU's by more than rel of the value itself plus
// `absolute` (for results far below 1, where differ()'s max(1, |value|) would hide any error).
template <class T>
int differ_relative(const Buffer<T>& gpu, const Buffer<T>& cpu, double rel, double absolute) {
  REQUIRE(gpu.size() == cpu.size());
  int bad = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    const double g = d(gpu[i]), c = d(cpu[i]);
    if (std::isnan(g) || std::isnan(c))
      bad += std::isnan(g) != std::isnan(c);
    else
      bad += std::abs(g - c) > rel * std::abs(c) + absolute;
  }
  return bad;
}

// Offsets of the output views and of the input views, in elements, into buffers one longer
// than the views. {0, 0}: every pointer 16-byte aligned (packs only); {1, 1}: all one element
// in (a head element by element up to the 16-byte boundary, then packs); {1, 0}: misaligned
// against each other (element by element throughout).
struct Offsets {
  std::size_t out, in;
};
const std::vector<Offsets> kOffsets = {{0, 0}, {1, 1}, {1, 0}};

}  // namespace

TEST_CASE("cuda ops: device buffers are cudaMalloc memory charged to the ledger", "[ops][cuda]") {
  BoundRank bound;
  Ledger ledger;
  {
    Buffer<float> b(ledger, Category::activations, 1000, Device::cuda);
    CHECK(ledger.current(Category::activations) == 4000);
    cudaPointerAttributes attributes{};
    REQUIRE(cudaPointerGetAttributes(&attributes, b.data()) == cudaSuccess);
    CHECK(attributes.type == cudaMemoryTypeDevice);  // not managed, not host
    CHECK(attributes.device == cuda_rank().device);
  }
  CHECK(ledger.current(Category::activations) == 0);
}

TEMPLATE_TEST_CASE("cuda ops: add, axpy, mul and scale match the CPU", "[ops][cuda]", float, Half,
                   BFloat16) {
  using T = TestType;
  BoundRank bound;
  Ledger ledger;
  for (std::size_t n : kSizes)
    for (const auto [out, in] : kOffsets) {
      CAPTURE(n, out, in);
      auto x = random_buffer<T>(ledger, n + 1, 1), y = random_buffer<T>(ledger, n + 1, 2);
      auto gx = up(ledger, x), gy = up(ledger, y), gz = up(ledger, y);
      auto z = random_buffer<T>(ledger, n + 1, 2);
      // add: one f32 addition rounded once to T on both devices: bit for bit.
      ops::add(y.sub(out, n), x.sub(in, n));
      ops::add(gy.sub(out, n), gx.sub(in, n));
      CHECK(differ(down(ledger, gy), y, 0) == 0);
      // axpy: the GPU fuses a x + y into one FMA (one rounding, the CPU has two): an f32 ulp,
      // which can tip a 16-bit rounding by one unit.
      ops::axpy(z.sub(out, n), 0.75f, x.sub(in, n));
      ops::axpy(gz.sub(out, n), 0.75f, gx.sub(in, n));
      CHECK(differ(down(ledger, gz), z,
                   std::is_same_v<T, float> ? 4 * kRoundoff<T> : 2 * kRoundoff<T>) == 0);
      // mul: one f32 multiplication rounded once to T on both devices: bit for bit.
      auto w = random_buffer<T>(ledger, n + 1, 3);
      auto gw = up(ledger, w);
      ops::mul(w.sub(out, n), x.sub(in, n));
      ops::mul(gw.sub(out, n), gx.sub(in, n));
      CHECK(differ(down(ledger, gw), w, 0) == 0);
      // scale: one multiplication: bit for bit.
      ops::scale(x.sub(out, n), -1.5f);
      ops::scale(gx.sub(out, n), -1.5f);
      CHECK(differ(down(ledger, gx), x, 0) == 0);
    }
}

TEST_CASE("cuda ops: add on doubles and integers, fill and copy are exact", "[ops][cuda]") {
  BoundRank bound;
  Ledger ledger;
  const std::size_t n = 1027;
  Buffer<double> a(ledger, Category::data, n), b(ledger, Category::data, n);
  Buffer<std::int64_t> i(ledger, Category::data, n), j(ledger, Category::data, n);
  Buffer<std::int32_t> k(ledger, Category::data, n);
  Buffer<std::uint8_t> u(ledger, Category::data, n);
  for (std::size_t e = 0; e < n; ++e) {
    a[e] = 0.1 * double(e);
    b[e] = 1e-17 * double(e);
    i[e] = static_cast<std::int64_t>(e) << 33;
    j[e] = -static_cast<std::int64_t>(e);
  }
  auto ga = up(ledger, a), gb = up(ledger, b);
  auto gi = up(ledger, i), gj = up(ledger, j);
  ops::add(a.view(), b.view());
  ops::add(ga.view(), gb.view());
  ops::add(i.view(), j.view());
  ops::add(gi.view(), gj.view());
  const auto ha = down(ledger, ga);
  const auto hi = down(ledger, gi);
  int bad = 0;
  for (std::size_t e = 0; e < n; ++e) bad += ha[e] != a[e] || hi[e] != i[e];
  CHECK(bad == 0);

  auto gk = up(ledger, k);
  auto gu = up(ledger, u);
  auto gh = up(ledger, Buffer<Half>(ledger, Category::data, n));
  ops::fill(gk.sub(1, n - 1), -7);
  ops::fill(gu.view(), std::uint8_t{200});
  ops::fill(gh.view(), Half(0.333f));
  const auto hk = down(ledger, gk);
  const auto hu = down(ledger, gu);
  const auto hh = down(ledger, gh);
  CHECK(hk[0] == 0);
  bad = 0;
  for (std::size_t e = 1; e < n; ++e)
    bad += hk[e] != -7 || hu[e] != 200 || hh[e].bits != Half(0.333f).bits;
  CHECK(bad == 0);

  // Device to device, into a misaligned view; host to device and back were used above.
  Buffer<std::int64_t> gc(ledger, Category::data, n + 1, Device::cuda);
  ops::copy(gc.sub(1, n), View<const std::int64_t>(gi.view()));
  const auto hc = down(ledger, gc);
  bad = 0;
  for (std::size_t e = 0; e < n; ++e) bad += hc[e + 1] != i[e];
  CHECK(bad == 0);
}

TEMPLATE_TEST_CASE("cuda ops: gelu forward and backward match the CPU", "[ops][cuda]", float, Half,
                   BFloat16) {
  using T = TestType;
  BoundRank bound;
  Ledger ledger;
  for (std::size_t n : kSizes)
    for (const auto [out, in] : kOffsets) {
      CAPTURE(n, out, in);
      auto x = random_buffer<T>(ledger, n + 1, 3, -6.0f, 6.0f),
           dy = random_buffer<T>(ledger, n + 1, 4);
      Buffer<T> y(ledger, Category::data, n + 1), dx(ledger, Category::data, n + 1);
      auto gx = up(ledger, x), gdy = up(ledger, dy), gy = up(ledger, y), gdx = up(ledger, dx);
      ops::gelu_forward(y.sub(out, n), x.sub(in, n));
      ops::gelu_backward(dx.sub(out, n), dy.sub(in, n), x.sub(in, n));
      ops::gelu_forward(gy.sub(out, n), gx.sub(in, n));
      ops::gelu_backward(gdx.sub(out, n), gdy.sub(in, n), gx.sub(in, n));
      // tanhf on the GPU and std::tanh on the host differ by an ulp or two; the backward's
      // 1 - tanh^2 magnifies that near |tanh| = 1 (test_ops.cpp has the numbers).
      const bool f32 = std::is_same_v<T, float>;
      CHECK(differ(down(ledger, gy), y, f32 ? 1e-6 : 2 * kRoundoff<T>) == 0);
      CHECK(differ(down(ledger, gdx), dx, f32 ? 1e-5 : 2 * kRoundoff<T>) == 0);
    }
}

TEST_CASE("cuda ops: casts between f32, f16 and bf16 match the CPU bit for bit", "[ops][cuda]") {
  BoundRank bound;
  Ledger ledger;
  for (std::size_t n : kSizes)
    for (const auto [out, in] : kOffsets) {
      CAPTURE(n, out, in);
      // f32 at `in`, its 16-bit casts at `out`, and the casts back (and f16 -> bf16) at `in`.
      auto f = random_buffer<float>(ledger, n + 1, 5, -70000.0f, 70000.0f);  // past f16's range
      if (n > 8) {  // the specials, an f16 subnormal, f16's rounding to Inf, a bf16 tie
        f[in + 0] = std::numeric_limits<float>::infinity();
        f[in + 1] = -std::numeric_limits<float>::infinity();
        f[in + 2] = std::nanf("");
        f[in + 3] = std::ldexp(1.5f, -25);
        f[in + 4] = -0.0f;
        f[in + 5] = 65519.99f;
        f[in + 6] = 65520.0f;
        f[in + 7] = std::bit_cast<float>(0x3F818000u);  // halfway between two bf16: to even
      }
      Buffer<Half> h(ledger, Category::data, n + 1);
      Buffer<BFloat16> b(ledger, Category::data, n + 1), hb(ledger, Category::data, n + 1);
      Buffer<float> fh(ledger, Category::data, n + 1), fb(ledger, Category::data, n + 1);
      auto gf = up(ledger, f), gfh = up(ledger, fh), gfb = up(ledger, fb);
      auto gh = up(ledger, h);
      auto gb = up(ledger, b), ghb = up(ledger, hb);
      ops::cast(h.sub(out, n), f.sub(in, n));
      ops::cast(b.sub(out, n), f.sub(in, n));
      ops::cast(fh.sub(in, n), h.sub(out, n));
      ops::cast(fb.sub(in, n), b.sub(out, n));
      ops::cast(hb.sub(in, n), h.sub(out, n));
      ops::cast(gh.sub(out, n), gf.sub(in, n));
      ops::cast(gb.sub(out, n), gf.sub(in, n));
      ops::cast(gfh.sub(in, n), gh.sub(out, n));
      ops::cast(gfb.sub(in, n), gb.sub(out, n));
      ops::cast(ghb.sub(in, n), gh.sub(out, n));
      // NaN payloads may differ (the GPU writes its canonical NaN); differ() matches NaN to NaN.
      CHECK(differ(down(ledger, gh), h, 0) == 0);
      CHECK(differ(down(ledger, gb), b, 0) == 0);
      CHECK(differ(down(ledger, gfh), fh, 0) == 0);
      CHECK(differ(down(ledger, gfb), fb, 0) == 0);
      CHECK(differ(down(ledger, ghb), hb, 0) == 0);
    }
}

TEST_CASE("cuda ops: adam_step matches the CPU over three steps", "[ops][cuda]") {
  BoundRank bound;
  Ledger ledger;
  const std::size_t n = (std::size_t{1} << 20) + 7;
  // eps large enough that where it sits (outside the square root) shows in p.
  const ops::AdamConfig config{.lr = 1e-2f, .eps = 1e-3f, .weight_decay = 0.1f};
  auto p = random_buffer<float>(ledger, n, 6);
  Buffer<float> m(ledger, Category::optimizer, n), v(ledger, Category::optimizer, n);
  auto gp = up(ledger, p), gm = up(ledger, m), gv = up(ledger, v);
  for (int t = 1; t <= 3; ++t) {
    auto g = random_buffer<float>(ledger, n, 100 + t);
    auto gg = up(ledger, g);
    ops::adam_step(p.view(), g.view(), m.view(), v.view(), config, t);
    ops::adam_step(gp.view(), gg.view(), gm.view(), gv.view(), config, t);
  }
  CHECK(differ(down(ledger, gp), p, 1e-6) == 0);
  CHECK(differ(down(ledger, gm), m, 1e-6) == 0);
  CHECK(differ(down(ledger, gv), v, 1e-6) == 0);
}

TEMPLATE_TEST_CASE("cuda ops: sum, row_sums and col_sums match the CPU", "[ops][cuda]", float, Half,
                   BFloat16) {
  using T = TestType;
  BoundRank bound;
  Ledger ledger;
  const std::vector<std::pair<std::size_t, std::size_t>> shapes = {
      {0, 5}, {5, 0}, {1, 1}, {3, 7}, {64, 1027}, {1027, 64}, {5000, 3}, {2, 300000}, {1024, 4096}};
  for (const auto& [rows, cols] : shapes) {
    CAPTURE(rows, cols);
    auto x = random_buffer<T>(ledger, rows * cols, 7);
    Buffer<float> total(ledger, Category::data, 1), by_row(ledger, Category::data, rows),
        by_col(ledger, Category::data, cols);
    total[0] = 42.0f;  // overwritten, also for an empty x
    // Buffer<T>, then the sums' Buffer<float>: one auto declaration deduces one type.
    auto gx = up(ledger, x);
    auto gtotal = up(ledger, total), grow = up(ledger, by_row), gcol = up(ledger, by_col);
    ops::sum(total.view(), x.view());
    ops::row_sums(by_row.view(), x.view(), rows, cols);
    ops::col_sums(by_col.view(), x.view(), rows, cols);
    ops::sum(gtotal.view(), gx.view());
    ops::row_sums(grow.view(), gx.view(), rows, cols);
    ops::col_sums(gcol.view(), gx.view(), rows, cols);
    // f32 sums of m terms are within m u sum |x| of the exact sum; the CPU's f64 sum is exact to
    // that precision. Bounds from the magnitudes of each sum's terms.
    double all_abs = 0;
    std::vector<double> row_abs(rows, 0.0), col_abs(cols, 0.0);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) {
        const double a = std::abs(d(x[r * cols + c]));
        all_abs += a;
        row_abs[r] += a;
        col_abs[c] += a;
      }
    const auto h_total = down(ledger, gtotal);
    const auto h_row = down(ledger, grow);
    const auto h_col = down(ledger, gcol);
    // sum: each thread adds ~n / (threads in a wave) terms, then trees of depth log2(256) and
    // the atomics of the blocks.
    const double per_thread = double(rows * cols) / (132.0 * 2048.0) + 1;
    CHECK(std::abs(h_total[0] - total[0]) <= (per_thread + 8 + 1100) * 0x1p-24 * all_abs + 1e-30);
    int bad = 0;
    for (std::size_t r = 0; r < rows; ++r)
      bad +=
          std::abs(h_row[r] - by_row[r]) > (double(cols) / 256 + 16) * 0x1p-24 * row_abs[r] + 1e-30;
    for (std::size_t c = 0; c < cols; ++c)
      bad += std::abs(h_col[c] - by_col[c]) > (double(rows) + 2) * 0x1p-24 * col_abs[c] + 1e-30;
    CHECK(bad == 0);
  }
}

TEMPLATE_TEST_CASE("cuda ops: softmax_rows matches the CPU and its rows sum to 1", "[ops][cuda]",
                   float, Half, BFloat16) {
  using T = TestType;
  BoundRank bound;
  Ledger ledger;
  for (const auto& [rows, cols, shift] :
       std::vector<std::tuple<std::size_t, std::size_t, float>>{{1, 1, 0.0f},
                                                                {3, 7, 0.0f},
                                                                {64, 1027, 0.0f},
                                                                {5000, 16, 0.0f},
                                                                {8, 50257, 0.0f},
                                                                {4, 999, 1000.0f}}) {
    CAPTURE(rows, cols, shift);
    auto x = random_buffer<T>(ledger, rows * cols, 8, shift - 8.0f, shift + 8.0f);
    Buffer<T> y(ledger, Category::data, rows * cols);
    auto gx = up(ledger, x), gy = up(ledger, y);
    ops::softmax_rows(y.view(), x.view(), rows, cols);
    ops::softmax_rows(gy.view(), gx.view(), rows, cols);
    ops::softmax_rows(gx.view(), gx.view(), rows, cols);  // in place
    const auto hy = down(ledger, gy);
    // expf on the GPU against std::exp on the host, and f32 sums in other orders.
    const double rel = std::is_same_v<T, float> ? 1e-6 : 2 * kRoundoff<T>;
    CHECK(differ(hy, y, rel) == 0);
    // And relative to each probability, however small (a wide row's are ~1e-5): the f32 sum of a
    // row's cols terms is within ~(cols / 256 + 8) u of the CPU's; 16-bit results one unit apart,
    // f16 subnormals one unit of 2^-24.
    const double sum_rel = 4 * (double(cols) / 256 + 8) * 0x1p-24 + 4e-7;
    CHECK(differ_relative(hy, y, sum_rel + (std::is_same_v<T, float> ? 0.0 : 2 * kRoundoff<T>),
                          std::is_same_v<T, Half> ? 0x1p-24 : 1e-30) == 0);
    CHECK(differ(down(ledger, gx), hy, 0) == 0);
    int bad_rows = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      double total = 0;
      for (std::size_t c = 0; c < cols; ++c) total += d(hy[r * cols + c]);
      // Each output is rounded once (relative error <= u, so the row's total is off by <= u),
      // except that f16 flushes the smallest probabilities to subnormals (absolute <= 2^-25).
      const double subnormals = std::is_same_v<T, Half> ? double(cols) * 0x1p-25 : 0.0;
      bad_rows += std::abs(total - 1.0) > 1e-5 + 2 * kRoundoff<T> + subnormals;
    }
    CHECK(bad_rows == 0);
  }
}

TEMPLATE_TEST_CASE("cuda ops: layernorm forward and backward match the CPU", "[ops][cuda]", float,
                   Half, BFloat16) {
  using T = TestType;
  BoundRank bound;
  Ledger ledger;
  for (const auto& [rows, cols] :
       std::vector<std::pair<std::size_t, std::size_t>>{{1, 1}, {3, 7}, {128, 64}, {9, 1027}}) {
    CAPTURE(rows, cols);
    auto x = random_buffer<T>(ledger, rows * cols, 71, -3.0f, 5.0f);
    auto gamma = random_buffer<T>(ledger, cols, 72, 0.5f, 1.5f);
    auto beta = random_buffer<T>(ledger, cols, 73);
    auto dy = random_buffer<T>(ledger, rows * cols, 74);
    Buffer<T> y(ledger, Category::data, rows * cols), dx(ledger, Category::data, rows * cols);
    Buffer<T> dgamma(ledger, Category::data, cols), dbeta(ledger, Category::data, cols);
    Buffer<float> mean(ledger, Category::data, rows), rstd(ledger, Category::data, rows);
    auto gx = up(ledger, x), ggamma = up(ledger, gamma), gbeta = up(ledger, beta),
         gdy = up(ledger, dy);
    auto gy = up(ledger, y), gdx = up(ledger, dx), gdgamma = up(ledger, dgamma),
         gdbeta = up(ledger, dbeta);
    auto gmean = up(ledger, mean), grstd = up(ledger, rstd);
    ops::layernorm_forward(y.view(), mean.view(), rstd.view(), x.view(), gamma.view(), beta.view(),
                           rows, cols, 1e-5f);
    ops::layernorm_forward(gy.view(), gmean.view(), grstd.view(), gx.view(), ggamma.view(),
                           gbeta.view(), rows, cols, 1e-5f);
    ops::layernorm_backward(dx.view(), dgamma.view(), dbeta.view(), dy.view(), x.view(),
                            mean.view(), rstd.view(), gamma.view(), rows, cols);
    ops::layernorm_backward(gdx.view(), gdgamma.view(), gdbeta.view(), gdy.view(), gx.view(),
                            gmean.view(), grstd.view(), ggamma.view(), rows, cols);
    // The row's sums in f32 trees against f64: ~(cols / 256 + 8) u_f32 of the row's magnitude
    // (|x| <= 5, |xhat| <= sqrt(cols)); the results then rounded to T once each.
    const double row_rel = 8 * (double(cols) / 256 + 8) * 0x1p-24 * std::sqrt(double(cols));
    const double rel = row_rel + 2 * kRoundoff<T>;
    CHECK(differ(down(ledger, gmean), mean, row_rel) == 0);
    CHECK(differ(down(ledger, grstd), rstd, row_rel) == 0);
    CHECK(differ(down(ledger, gy), y, rel) == 0);
    CHECK(differ(down(ledger, gdx), dx, 4 * rel) == 0);
    // dgamma, dbeta: sums over the rows, in another order: rows x u of |dy xhat| per term.
    const double col_rel = 4 * double(rows) * 0x1p-24 * std::sqrt(double(cols)) + 2 * kRoundoff<T>;
    CHECK(differ(down(ledger, gdgamma), dgamma, col_rel * std::max<double>(1, rows)) == 0);
    CHECK(differ(down(ledger, gdbeta), dbeta, col_rel * std::max<double>(1, rows)) == 0);
  }
}

TEMPLATE_TEST_CASE("cuda ops: gather_rows and scatter_add_rows match the CPU", "[ops][cuda]", float,
                   Half, BFloat16) {
  using T = TestType;
  BoundRank bound;
  Ledger ledger;
  const std::size_t vocab = 64, cols = 64, rows = 4 * 32 + 3;
  auto table = random_buffer<T>(ledger, vocab * cols, 81);
  auto dout = random_buffer<T>(ledger, rows * cols, 82);
  Buffer<std::int32_t> ids(ledger, Category::data, rows);
  for (std::size_t r = 0; r < rows; ++r)
    ids[r] = static_cast<std::int32_t>((r * 7) % 61);  // repeats
  Buffer<T> out(ledger, Category::data, rows * cols);
  auto dtable = random_buffer<T>(ledger, vocab * cols, 83);
  auto gtable = up(ledger, table), gdout = up(ledger, dout), gout = up(ledger, out),
       gdtable = up(ledger, dtable);
  auto gids = up(ledger, ids);
  ops::gather_rows(out.view(), table.view(), ids.view(), cols);
  ops::gather_rows(gout.view(), gtable.view(), gids.view(), cols);
  CHECK(differ(down(ledger, gout), out, 0) == 0);  // a copy: bit for bit
  ops::scatter_add_rows(dtable.view(), dout.view(), ids.view(), cols);
  ops::scatter_add_rows(gdtable.view(), gdout.view(), gids.view(), cols);
  // Each element sums its (at most 3) rows in order: f32 sums against f64 sums rounded to f32,
  // then added and rounded to T.
  CHECK(differ(down(ledger, gdtable), dtable, 4 * 0x1p-24 + 2 * kRoundoff<T>) == 0);
}

TEMPLATE_TEST_CASE("cuda ops: cross_entropy matches the CPU", "[ops][cuda]", float, Half,
                   BFloat16) {
  using T = TestType;
  BoundRank bound;
  Ledger ledger;
  for (const auto& [rows, cols] :
       std::vector<std::pair<std::size_t, std::size_t>>{{1, 2}, {128, 64}, {7, 50257}}) {
    CAPTURE(rows, cols);
    auto z = random_buffer<T>(ledger, rows * cols, 91, -6.0f, 6.0f);
    Buffer<std::int32_t> targets(ledger, Category::data, rows);
    for (std::size_t r = 0; r < rows; ++r)
      targets[r] = static_cast<std::int32_t>((r * 31 + 5) % cols);
    Buffer<float> loss(ledger, Category::data, rows);
    Buffer<T> dz(ledger, Category::data, rows * cols);
    auto gz = up(ledger, z), gdz = up(ledger, dz);
    auto gtargets = up(ledger, targets);
    auto gloss = up(ledger, loss);
    const float scale = 1.0f / static_cast<float>(rows);
    ops::cross_entropy(loss.view(), dz.view(), z.view(), targets.view(), rows, cols, scale);
    ops::cross_entropy(gloss.view(), gdz.view(), gz.view(), gtargets.view(), rows, cols, scale);
    // The log of an f32 tree sum against an f64 one: ~(cols / 256 + 8) u; expf against exp.
    const double sum_rel = 4 * (double(cols) / 256 + 8) * 0x1p-24 + 1e-6;
    CHECK(differ(down(ledger, gloss), loss, 16 * sum_rel) == 0);
    // dz = scale (p - onehot): relative to p, plus p - 1's cancellation at the target (an
    // absolute error of a few u of 1, times scale).
    CHECK(differ_relative(down(ledger, gdz), dz, sum_rel + 2 * kRoundoff<T>,
                          scale * 8 * sum_rel + (std::is_same_v<T, Half> ? 0x1p-24 : 0.0)) == 0);
  }
}

TEMPLATE_TEST_CASE("cuda ops: gemm matches the CPU in all four transpose combinations",
                   "[ops][cuda]", float, Half, BFloat16) {
  using T = TestType;
  BoundRank bound;
  Ledger ledger;
  const std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> shapes = {
      {1, 1, 1}, {5, 7, 3}, {64, 48, 96}, {257, 129, 515}, {3, 4, 0}};
  for_each_gemm_case(shapes, [&](std::size_t m, std::size_t n, std::size_t k, bool ta, bool tb,
                                 float alpha, float beta) {
    CAPTURE(m, n, k, ta, tb, alpha, beta);
    auto a = random_buffer<T>(ledger, m * k, 10), b = random_buffer<T>(ledger, k * n, 11);
    auto c = random_buffer<T>(ledger, m * n, 12);
    // The magnitude of each element's terms, alpha sum |a b| + |beta c|: both devices are
    // within (k + 2) u of it from the exact result, so within twice that of each other.
    std::vector<double> magnitude(m * n);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double mag = 0;
        for (std::size_t p = 0; p < k; ++p)
          mag += std::abs((ta ? d(a[p * m + i]) : d(a[i * k + p])) *
                          (tb ? d(b[j * k + p]) : d(b[p * n + j])));
        magnitude[i * n + j] = std::abs(alpha) * mag + std::abs(beta * d(c[i * n + j]));
      }
    auto ga = up(ledger, a), gb = up(ledger, b), gc = up(ledger, c);
    ops::gemm(c.view(), a.view(), b.view(), m, n, k, ta, tb, alpha, beta);
    ops::gemm(gc.view(), ga.view(), gb.view(), m, n, k, ta, tb, alpha, beta);
    const auto hc = down(ledger, gc);
    int bad = 0;
    for (std::size_t i = 0; i < m * n; ++i) {
      // Each side's one rounding to T is half a unit: a unit between them. Tensor cores
      // may truncate rather than round while accumulating: twice the f32 bound for 16 bits.
      const double accumulate = (std::is_same_v<T, float> ? 2 : 4) * double(k + 2) * 0x1p-24;
      const double bound = 2 * kRoundoff<T> * std::abs(d(c[i])) + accumulate * magnitude[i];
      bad += std::abs(d(hc[i]) - d(c[i])) > bound;
    }
    CHECK(bad == 0);
  });
}

// Past 2^31 elements an int index wraps: u8 buffers of 2^31 + 37 elements (2 GiB each) filled
// and added on the packed path with a head, and element by element; only their ends come back.
TEST_CASE("cuda ops: fill and add index past 2^31 elements", "[ops][cuda]") {
  BoundRank bound;
  Ledger ledger;
  const std::size_t n = (std::size_t{1} << 31) + 37, ends = 64;
  Buffer<std::uint8_t> a(ledger, Category::data, n, Device::cuda, /*zero=*/false),
      b(ledger, Category::data, n, Device::cuda, /*zero=*/false);
  ops::fill(a.view(), std::uint8_t{1});
  ops::fill(b.sub(1, n - 1), std::uint8_t{2});  // a head of 15, then packs of 16
  ops::fill(b.sub(0, 1), std::uint8_t{5});
  ops::add(a.sub(1, n - 1), b.sub(1, n - 1));  // both one in: packed, a = 3 from 1 on
  ops::add(a.sub(1, n - 1), b.sub(0, n - 1));  // misaligned against each other: one by one
  // a[0] = 1; a[1] = 3 + 5 = 8; a[i] = 3 + 2 = 5 from 2 to the end.
  for (const std::size_t from : {std::size_t{0}, n - ends}) {
    CAPTURE(from);
    const auto got = to_host(a.sub(from, ends));
    int bad = 0;
    for (std::size_t i = 0; i < ends; ++i) {
      const std::size_t e = from + i;
      bad += got[i] != (e == 0 ? 1 : e == 1 ? 8 : 5);
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("cuda ops: empty device views are no-ops", "[ops][cuda]") {
  BoundRank bound;
  View<float> e{nullptr, 0, Device::cuda};
  CHECK_NOTHROW(ops::add(e, e));
  CHECK_NOTHROW(ops::axpy(e, 2.0f, e));
  CHECK_NOTHROW(ops::fill(e, 1.0f));
  CHECK_NOTHROW(ops::copy(e, e));
  CHECK_NOTHROW(ops::softmax_rows(e, e, 0, 3));
  CHECK_NOTHROW(ops::gemm(e, e, e, 0, 4, 0));
  CHECK_NOTHROW(cuda_sync());
}
