// test_model.cpp — the model pieces (model.hpp) against finite differences and against the
// float64 Eigen reference (model_reference.hpp), and the reference against finite differences.
#include "catch.hpp"

#include <cmath>
#include <vector>

#include "core/ops/ops.hpp"
#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"
#include "ops_testing.hpp"

using namespace distlab;
using namespace distlab::model;
using distlab::testing::random_buffer;

namespace {

// max |a - b| / max(max |b|, tiny): an error relative to the reference's scale.
double relative_error(const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  return (a - b).cwiseAbs().maxCoeff() / std::max(b.cwiseAbs().maxCoeff(), 1e-30);
}

Eigen::VectorXd as_vector(View<const float> v) {
  Eigen::VectorXd out(Eigen::Index(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) out[Eigen::Index(i)] = v[i];
  return out;
}

std::vector<float> floats(const Buffer<float>& b) {
  return std::vector<float>(b.view().ptr, b.view().ptr + b.size());
}

}  // namespace

TEST_CASE("MlpShape lays W and b of every layer out in one flat vector", "[mlp]") {
  const MlpShape s = make_shape({3, 5, 2});
  CHECK(s.layers() == 2);
  CHECK(s.params() == 3 * 5 + 5 + 5 * 2 + 2);
  CHECK(s.weight_offset(0) == 0);
  CHECK(s.bias_offset(0) == 15);
  CHECK(s.weight_offset(1) == 20);
  CHECK(s.bias_offset(1) == 30);
  CHECK(s.describe() == "3 -> 5 -> 2 (32 parameters)");
  CHECK_THROWS_AS(make_shape({4}), UsageError);
  CHECK_THROWS_AS(make_shape({4, 0, 2}), UsageError);
}

TEST_CASE("the reference's gradient matches central finite differences in float64", "[mlp]") {
  const MlpShape s = make_shape({4, 6, 5, 3});
  const Teacher teacher(s, 7);
  const std::size_t batch = 5;
  const RowMatrix x = widen(teacher.inputs(0, batch), batch, s.in());
  const RowMatrix t =
      widen(teacher.targets(0, batch), batch, s.out()) * 0.5;  // not the teacher's own answer
  Eigen::VectorXd p = widen(initial_params(s, 3));
  for (Eigen::Index i = 0; i < p.size(); ++i)
    p[i] += 0.01 * std::sin(double(i));  // biases non-zero too
  Eigen::VectorXd grad;
  reference_loss(s, p, x, t, &grad);
  Eigen::VectorXd fd(p.size());
  const double h = 1e-6;
  for (Eigen::Index i = 0; i < p.size(); ++i) {
    Eigen::VectorXd up = p, down = p;
    up[i] += h;
    down[i] -= h;
    fd[i] = (reference_loss(s, up, x, t) - reference_loss(s, down, x, t)) / (2 * h);
  }
  CHECK(relative_error(grad, fd) < 1e-7);
}

TEST_CASE("linear forward and backward equal their closed forms and finite differences", "[mlp]") {
  Ledger ledger;
  const std::size_t B = 7, in = 5, out = 3;
  auto x = random_buffer<float>(ledger, B * in, 1);
  auto w = random_buffer<float>(ledger, in * out, 2);
  auto b = random_buffer<float>(ledger, out, 3);
  auto dy = random_buffer<float>(ledger, B * out, 4);
  Buffer<float> ones(ledger, Category::activations, B), y(ledger, Category::activations, B * out);
  ops::fill(ones.view(), 1.0f);
  linear_forward(y.view(), x.view(), w.view(), b.view(), ones.view(), B, in, out);

  const RowMatrix X = widen(floats(x), B, in), W = widen(floats(w), in, out),
                  DY = widen(floats(dy), B, out);
  const Eigen::RowVectorXd bias = widen(floats(b)).transpose();
  const RowMatrix Y = (X * W).rowwise() + bias;
  CHECK(relative_error(as_vector(y.view()), Eigen::Map<const Eigen::VectorXd>(Y.data(), Y.size())) <
        1e-6);

  Buffer<float> dx(ledger, Category::activations, B * in), dw(ledger, Category::grads, in * out),
      db(ledger, Category::grads, out);
  linear_backward(dx.view(), dw.view(), db.view(), dy.view(), x.view(), w.view(), B, in, out);
  const RowMatrix DW = X.transpose() * DY, DX = DY * W.transpose();
  const Eigen::RowVectorXd DB = DY.colwise().sum();
  CHECK(relative_error(as_vector(dw.view()),
                       Eigen::Map<const Eigen::VectorXd>(DW.data(), DW.size())) < 1e-6);
  CHECK(relative_error(as_vector(dx.view()),
                       Eigen::Map<const Eigen::VectorXd>(DX.data(), DX.size())) < 1e-6);
  CHECK(relative_error(as_vector(db.view()), DB.transpose()) < 1e-6);

  // f(W) = sum(dy * (x W + b)) is linear in W, so a float finite difference of it is dW up to
  // roundoff: one weight at a time.
  auto f = [&] {
    linear_forward(y.view(), x.view(), w.view(), b.view(), ones.view(), B, in, out);
    double total = 0;
    for (std::size_t i = 0; i < B * out; ++i) total += double(y[i]) * double(dy[i]);
    return total;
  };
  for (std::size_t i : {std::size_t{0}, std::size_t{7}, in * out - 1}) {
    const float keep = w[i];
    w[i] = keep + 0.25f;
    const double up = f();
    w[i] = keep - 0.25f;
    const double down = f();
    w[i] = keep;
    CHECK((up - down) / 0.5 == Approx(dw[i]).epsilon(1e-4).margin(1e-5));
  }
  // The first layer needs no dx: an empty view skips it.
  CHECK_NOTHROW(linear_backward(View<float>{}, dw.view(), db.view(), dy.view(), x.view(), w.view(),
                                B, in, out));
}

TEST_CASE("gelu's backward matches finite differences and the reference's derivative", "[mlp]") {
  for (double x : {-3.0, -1.0, -0.3, 0.0, 0.2, 1.0, 2.5}) {
    const double h = 1e-5;
    const double fd = (reference_gelu(x + h) - reference_gelu(x - h)) / (2 * h);
    CHECK(reference_gelu_grad(x) == Approx(fd).epsilon(1e-8).margin(1e-9));
    float in = float(x), out = 0, one = 1, grad = 0;
    ops::gelu_forward(View<float>{&out, 1}, View<const float>{&in, 1});
    ops::gelu_backward(View<float>{&grad, 1}, View<const float>{&one, 1},
                       View<const float>{&in, 1});
    CHECK(out == Approx(reference_gelu(x)).epsilon(1e-6).margin(1e-7));
    CHECK(grad == Approx(reference_gelu_grad(x)).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("mse_loss: its value, its gradient, and shards of a batch that add up", "[mlp]") {
  Ledger ledger;
  const std::size_t B = 6, out = 4;
  auto y = random_buffer<float>(ledger, B * out, 11);
  auto t = random_buffer<float>(ledger, B * out, 12);
  Buffer<float> loss(ledger, Category::data, 1), dy(ledger, Category::grads, B * out);
  mse_loss(loss.view(), dy.view(), y.view(), t.view(), B, out);
  const Eigen::VectorXd Y = as_vector(y.view()), T = as_vector(t.view());
  const double want = (Y - T).squaredNorm() / double(B * out);
  CHECK(loss[0] == Approx(want).epsilon(1e-6));
  CHECK(relative_error(as_vector(dy.view()), 2.0 * (Y - T) / double(B * out)) < 1e-6);

  // A finite difference in one output.
  Buffer<float> l2(ledger, Category::data, 1), scratch(ledger, Category::grads, B * out);
  const float keep = y[5];
  y[5] = keep + 1e-2f;
  mse_loss(l2.view(), scratch.view(), y.view(), t.view(), B, out);
  const double up = l2[0];
  y[5] = keep - 1e-2f;
  mse_loss(l2.view(), scratch.view(), y.view(), t.view(), B, out);
  const double down = l2[0];
  y[5] = keep;
  CHECK((up - down) / 2e-2 == Approx(dy[5]).epsilon(1e-3));

  // Two shards of the batch, each normalised by the whole batch, sum to the whole.
  const std::size_t first = 2;
  Buffer<float> la(ledger, Category::data, 1), lb(ledger, Category::data, 1);
  Buffer<float> da(ledger, Category::grads, first * out),
      dbuf(ledger, Category::grads, (B - first) * out);
  mse_loss(la.view(), da.view(), y.view().sub(0, first * out), t.view().sub(0, first * out), B,
           out);
  mse_loss(lb.view(), dbuf.view(), y.view().sub(first * out, (B - first) * out),
           t.view().sub(first * out, (B - first) * out), B, out);
  CHECK(la[0] + lb[0] == Approx(want).epsilon(1e-6));
  CHECK(da[0] == dy[0]);
  CHECK(dbuf[0] == dy[first * out]);
  CHECK_THROWS(mse_loss(loss.view(), y.view(), y.view(), t.view(), B, out));  // dy aliasing y
}

TEST_CASE("the MLP's backward equals the reference's gradient, and finite differences", "[mlp]") {
  Ledger ledger;
  const MlpShape s = make_shape({5, 8, 6, 3});
  const Teacher teacher(s, 21);
  const std::size_t B = 9;
  const std::vector<float> p0 = initial_params(s, 22), xs = teacher.inputs(0, B);
  std::vector<float> ts = teacher.targets(0, B);
  for (float& v : ts) v = 0.5f * v + 0.1f;  // a target the student does not already meet
  Buffer<float> params(ledger, Category::params, s.params()),
      grads(ledger, Category::grads, s.params());
  Buffer<float> x(ledger, Category::data, B * s.in()), t(ledger, Category::data, B * s.out());
  Buffer<float> dy(ledger, Category::activations, B * s.out()), loss(ledger, Category::data, 1);
  from_host(params.view(), p0);
  from_host(x.view(), xs);
  from_host(t.view(), ts);

  Mlp mlp(ledger, Device::cpu, s, B);
  CHECK(ledger.current(Category::activations) > 0);  // the activations are charged
  auto loss_of = [&] {
    const View<const float> y = mlp.forward(params.view(), x.view());
    mse_loss(loss.view(), dy.view(), y, t.view(), B, s.out());
    return double(loss[0]);
  };
  const double l = loss_of();
  mlp.backward(grads.view(), params.view(), x.view(), dy.view());

  Eigen::VectorXd want;
  const double want_loss =
      reference_loss(s, widen(p0), widen(xs, B, s.in()), widen(ts, B, s.out()), &want);
  CHECK(l == Approx(want_loss).epsilon(1e-5));
  CHECK(relative_error(as_vector(grads.view()), want) < 1e-5);

  // Central differences in float32 on a few parameters of each layer (h large enough that
  // float roundoff stays small against it; gelu's curvature gives an O(h^2) error).
  for (std::size_t l2 = 0; l2 < s.layers(); ++l2)
    for (std::size_t i : {s.weight_offset(l2), s.weight_offset(l2) + 3, s.bias_offset(l2)}) {
      const float keep = params[i];
      params[i] = keep + 1e-2f;
      const double up = loss_of();
      params[i] = keep - 1e-2f;
      const double down = loss_of();
      params[i] = keep;
      CHECK((up - down) / 2e-2 == Approx(want[Eigen::Index(i)]).epsilon(2e-2).margin(2e-4));
    }
}

TEST_CASE("SGD and Adam step like the reference optimizer", "[mlp]") {
  Ledger ledger;
  const std::size_t n = 50;
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam}) {
    const OptimizerConfig config{kind, kind == OptimizerKind::sgd ? 0.1f : 0.01f};
    auto p = random_buffer<float>(ledger, n, 31);
    Eigen::VectorXd ref = as_vector(p.view());
    Optimizer opt(ledger, Device::cpu, n, config);
    CHECK(ledger.current(Category::optimizer) ==
          std::int64_t(kind == OptimizerKind::adam ? 8 * n : 0));
    ReferenceOptimizer ref_opt(n, config);
    for (int step = 0; step < 4; ++step) {
      auto g = random_buffer<float>(ledger, n, 40 + std::uint32_t(step));
      opt.step(p.view(), g.view());
      ref_opt.step(ref, as_vector(g.view()));
    }
    CHECK(opt.steps() == 4);
    CHECK(relative_error(as_vector(p.view()), ref) < 1e-6);
  }
  CHECK(parse_optimizer("adam") == OptimizerKind::adam);
  CHECK_THROWS_AS(parse_optimizer("lamb"), UsageError);
}

TEST_CASE("the teacher's dataset is a pure function of the seed and the sample index", "[mlp]") {
  const MlpShape s = make_shape({4, 8, 2});
  const Teacher a(s, 5), b(s, 5), c(s, 6);
  CHECK(a.inputs(10, 3) == b.inputs(10, 3));
  CHECK(a.targets(10, 3) == b.targets(10, 3));
  CHECK(a.inputs(10, 3) != c.inputs(10, 3));
  // Sample 11 alone is the second row of samples [10, 13).
  const std::vector<float> three = a.inputs(10, 3), one = a.inputs(11, 1);
  CHECK(std::vector<float>(three.begin() + 4, three.begin() + 8) == one);
  const std::vector<float> t3 = a.targets(10, 3), t1 = a.targets(11, 1);
  CHECK(std::vector<float>(t3.begin() + 2, t3.begin() + 4) == t1);
  // The student starts away from the teacher, with zero biases.
  const std::vector<float> p = initial_params(s, 5);
  CHECK(p[s.bias_offset(0)] == 0.0f);
  CHECK(p[s.bias_offset(1) + 1] == 0.0f);
  CHECK(p[0] != 0.0f);
}

TEST_CASE("the reference learns the teacher: its loss falls", "[mlp]") {
  const MlpShape s = make_shape({8, 16, 4});
  const Teacher teacher(s, 1);
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam}) {
    const OptimizerConfig config{kind, kind == OptimizerKind::sgd ? 0.5f : 0.01f};
    const ReferenceRun run = reference_train(s, teacher, initial_params(s, 2), 32, 60, config);
    REQUIRE(run.losses.size() == 60);
    CHECK(run.losses.back() < 0.5 * run.losses.front());
  }
}

TEST_CASE("half_float_ulp: half a float32 unit of the value's binade", "[mlp]") {
  CHECK(half_float_ulp(1.0) == 0x1p-24);
  CHECK(half_float_ulp(-1.5) == 0x1p-24);
  CHECK(half_float_ulp(0.75) == 0x1p-25);
  CHECK(half_float_ulp(0x1p-130) == 0x1p-150);  // subnormal: the smallest unit, halved
  CHECK(half_float_ulp(0.0) == 0x1p-150);
}

// Float32Drift against a float32 SGD run written here from the model's float32 pieces: after 1,
// 30 and 300 steps every weight is within the drift's rounding plus its gradient term, with a
// gradient off by 1e-5 of its layer's largest (the lessons' bound, without their room for
// feedback).
TEST_CASE("Float32Drift bounds a float32 SGD run's distance from the reference", "[mlp]") {
  Ledger ledger;
  const MlpShape s = make_shape({6, 12, 12, 3});
  const Teacher teacher(s, 8);
  const std::size_t B = 16;
  const OptimizerConfig config{OptimizerKind::sgd, 0.5f};
  const std::vector<float> p0 = initial_params(s, 9);
  for (const int steps : {1, 30, 300}) {
    Buffer<float> params(ledger, Category::params, s.params()),
        grads(ledger, Category::grads, s.params());
    Buffer<float> x(ledger, Category::data, B * s.in()), t(ledger, Category::data, B * s.out());
    Buffer<float> dy(ledger, Category::activations, B * s.out()), loss(ledger, Category::data, 1);
    from_host(params.view(), p0);
    Mlp mlp(ledger, Device::cpu, s, B);
    Optimizer opt(ledger, Device::cpu, s.params(), config);
    for (int k = 0; k < steps; ++k) {
      from_host(x.view(), teacher.inputs(std::size_t(k) * B, B));
      from_host(t.view(), teacher.targets(std::size_t(k) * B, B));
      const View<const float> y = mlp.forward(params.view(), x.view());
      mse_loss(loss.view(), dy.view(), y, t.view(), B, s.out());
      mlp.backward(grads.view(), params.view(), x.view(), dy.view());
      opt.step(params.view(), View<const float>(grads.view()));
    }
    const ReferenceRun ref = reference_train(s, teacher, p0, B, steps, config,
                                             [](double, double largest) { return 1e-5 * largest; });
    REQUIRE(ref.drift.rounding.size() == Eigen::Index(s.params()));
    const std::vector<float> got = floats(params);
    for (Eigen::Index i = 0; i < ref.params.size(); ++i) {
      const double bound = ref.drift.rounding[i] + ref.drift.gradient[i];
      INFO("steps " << steps << ", weight " << i);
      CHECK(std::fabs(double(got[std::size_t(i)]) - ref.params[i]) <= bound);
    }
  }
  // Without a gradient's error no drift is summed.
  CHECK(reference_train(s, teacher, p0, B, 2, config).drift.rounding.size() == 0);
}

// adam_step_bound against ops::adam_step itself, one element at a time: from float32 states that
// Adam reached (w, m, v after a few steps of gradients of every scale), a float32 gradient
// anywhere in [g - dg, g + dg] must land the weight inside [lo, hi]; with dg = 0 the interval is
// a few float32 units wide, where dg reaches |g| it is about 2 lr wide (the sign's doubt), and at
// step 1 with a sure sign next to 0 wide.
TEST_CASE("adam_step_bound holds float32's Adam step for every gradient in the interval", "[mlp]") {
  const OptimizerConfig config{OptimizerKind::adam, 0.01f};
  const ops::AdamConfig adam{config.lr, config.beta1, config.beta2, config.eps, 0.0f};
  std::uint64_t state = 12345;
  const auto uniform = [&] {  // in [-1, 1), a fixed sequence
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return double(state >> 11) * 0x1p-52 - 1.0;
  };
  int tight = 0, sign_doubt = 0, sure_sign = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    // A state Adam reached: t - 1 steps of gradients of scale 10^[-12, 1].
    const int t = 1 + trial % 7;
    float w = float(uniform()), m = 0, v = 0;
    const double scale = std::pow(10.0, -12 + 13 * (uniform() + 1) / 2);
    for (int k = 1; k < t; ++k) {
      float g = float(scale * uniform());
      ops::adam_step(View<float>{&w, 1, Device::cpu}, View<const float>{&g, 1, Device::cpu},
                     View<float>{&m, 1, Device::cpu}, View<float>{&v, 1, Device::cpu}, adam, k);
    }
    const double g = scale * uniform();
    const double dg = trial % 3 == 0 ? 0.0 : std::fabs(g) * std::pow(10.0, 2 * uniform());
    const StepBound b = adam_step_bound(w, m, v, g, dg, config, t);
    for (int step = 0; step <= 20; ++step) {  // the quotient's extremes may lie inside
      const double at = -1.0 + step / 10.0;
      float w1 = w, m1 = m, v1 = v;
      float g32 = float(g + at * dg);
      if (dg == 0 && g32 != g) continue;  // g not a float: only the interval's own holds it
      if (std::fabs(double(g32) - g) > dg) g32 = std::nextafter(g32, float(g));
      ops::adam_step(View<float>{&w1, 1, Device::cpu}, View<const float>{&g32, 1, Device::cpu},
                     View<float>{&m1, 1, Device::cpu}, View<float>{&v1, 1, Device::cpu}, adam, t);
      INFO("trial " << trial << " t " << t << " w " << w << " m " << m << " v " << v << " g " << g
                    << " dg " << dg << " got " << w1 << " in [" << b.lo() << ", " << b.hi() << "]");
      CHECK(b.lo() <= double(w1));
      CHECK(double(w1) <= b.hi());
    }
    if (dg == 0 && b.hi() - b.lo() <= 8 * 2 * half_float_ulp(b.want) + 1e-6 * config.lr) ++tight;
    if (dg >= 2 * std::fabs(g) && t == 1 && b.hi() - b.lo() >= 1.9 * config.lr) ++sign_doubt;
    // At step 1 Adam's step is lr sign(g) (eps aside): a gradient whose sign is sure moves it by
    // next to nothing, however wide its interval. Taking m' and v' apart would allow 4 dg / |g|.
    if (t == 1 && dg > 0 && dg <= std::fabs(g) / 2 && std::fabs(g) > 1e-4) {
      ++sure_sign;
      CHECK(b.gradient <= 1e-3 * config.lr);
    }
    CHECK(b.lo() <= b.want);
    CHECK(b.want <= b.hi());
  }
  CHECK(tight > 500);      // without the gradient's doubt, a handful of units
  CHECK(sign_doubt > 20);  // at step 1 a doubtful sign spans both steps, w - lr and w + lr
  CHECK(sure_sign > 20);
}

TEST_CASE(
    "an MLP cut in two stages (gelu on the first's output) equals the whole, gradients included",
    "[mlp]") {
  Ledger ledger;
  const MlpShape s = make_shape({5, 8, 7, 6, 3});  // 4 layers: stage A has 2, stage B has 2
  const Teacher teacher(s, 41);
  const std::size_t B = 6;
  const std::vector<float> p0 = initial_params(s, 42), xs = teacher.inputs(0, B),
                           ts = teacher.targets(0, B);
  const MlpShape a = make_shape({5, 8, 7}), b = make_shape({7, 6, 3});
  const std::size_t split = s.weight_offset(2);
  REQUIRE(split == a.params());
  Buffer<float> pa(ledger, Category::params, a.params()), pb(ledger, Category::params, b.params());
  from_host(pa.view(), std::vector<float>(p0.begin(), p0.begin() + std::ptrdiff_t(split)));
  from_host(pb.view(), std::vector<float>(p0.begin() + std::ptrdiff_t(split), p0.end()));
  Buffer<float> x(ledger, Category::data, B * 5), t(ledger, Category::data, B * 3);
  from_host(x.view(), xs);
  from_host(t.view(), ts);
  Mlp first(ledger, Device::cpu, a, B, /*activate_output=*/true), second(ledger, Device::cpu, b, B);
  const View<const float> h = first.forward(pa.view(), x.view());
  const View<const float> y = second.forward(pb.view(), h);
  Buffer<float> loss(ledger, Category::data, 1), dy(ledger, Category::activations, B * 3);
  mse_loss(loss.view(), dy.view(), y, t.view(), B, 3);
  Buffer<float> ga(ledger, Category::grads, a.params()), gb(ledger, Category::grads, b.params());
  Buffer<float> dh(ledger, Category::activations, B * 7);
  second.backward(gb.view(), pb.view(), h, dy.view(),
                  dh.view());  // dL/dh: what a pipeline sends back
  first.backward(ga.view(), pa.view(), x.view(), dh.view());

  Eigen::VectorXd want;
  const double want_loss = reference_loss(s, widen(p0), widen(xs, B, 5), widen(ts, B, 3), &want);
  CHECK(loss[0] == Approx(want_loss).epsilon(1e-5));
  Eigen::VectorXd got(Eigen::Index(s.params()));
  got << as_vector(ga.view()), as_vector(gb.view());
  CHECK(relative_error(got, want) < 1e-5);
}

TEST_CASE("the MLP's backward in two halves (input, then weights) gives backward's bits", "[mlp]") {
  Ledger ledger;
  const std::size_t B = 7;
  const Teacher teacher(make_shape({5, 9, 4}), 3);
  for (const bool activate : {false, true}) {  // a last stage, and one in the middle
    const MlpShape s = make_shape({5, 9, 6, 4});
    const std::vector<float> p0 = initial_params(s, 4), xs = teacher.inputs(0, B);
    Buffer<float> params(ledger, Category::params, s.params()), x(ledger, Category::data, B * 5),
        dy(ledger, Category::activations, B * 4);
    from_host(params.view(), p0);
    from_host(x.view(), xs);
    std::vector<float> dys(B * 4);
    for (std::size_t i = 0; i < dys.size(); ++i) dys[i] = 0.01f * float(int(i % 13) - 6);
    from_host(dy.view(), dys);
    Buffer<float> fused(ledger, Category::grads, s.params()),
        split(ledger, Category::grads, s.params()), dx_fused(ledger, Category::comm, B * 5),
        dx_split(ledger, Category::comm, B * 5);
    Mlp one(ledger, Device::cpu, s, B, activate), two(ledger, Device::cpu, s, B, activate);
    one.forward(params.view(), x.view());
    two.forward(params.view(), x.view());
    one.backward(fused.view(), params.view(), x.view(), dy.view(), dx_fused.view());
    const std::int64_t before = ledger.current(Category::activations);
    two.backward_input(params.view(), dy.view(), dx_split.view());
    // The gradients of every layer's output are kept for the weights: B x (9 + 6 + 4) floats.
    CHECK(ledger.current(Category::activations) - before == std::int64_t(B * (9 + 6 + 4) * 4));
    two.backward_weights(split.view(), x.view());
    CHECK(to_host(View<const float>(split.view())) == to_host(View<const float>(fused.view())));
    CHECK(to_host(View<const float>(dx_split.view())) ==
          to_host(View<const float>(dx_fused.view())));
  }
  Mlp fresh(ledger, Device::cpu, make_shape({5, 4}), B);
  Buffer<float> g(ledger, Category::grads, make_shape({5, 4}).params()),
      x(ledger, Category::data, B * 5);
  CHECK_THROWS_WITH(fresh.backward_weights(g.view(), x.view()),
                    Catch::Contains("run backward_input first"));
}
