// test_model_cuda.cpp — the model pieces (model.hpp) on the GPU against the float64 Eigen
// reference, as tests/test_model.cpp checks them on the CPU: the MLP's loss and gradient, and
// SGD and Adam steps, with every buffer in device memory.
#include "catch.hpp"

#include <cmath>
#include <vector>

#include "core/device/cuda_context.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"
#include "core/training/gpt.hpp"
#include "core/training/gpt_reference.hpp"
#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"

using namespace distlab;
using namespace distlab::model;

namespace {

struct BoundRank {  // the calling thread as rank 0 on GPU 0, as the runtime binds a rank
  BoundRank() { cuda_bind_rank(0); }
  ~BoundRank() { cuda_unbind_rank(); }
  BoundRank(const BoundRank&) = delete;
  BoundRank& operator=(const BoundRank&) = delete;
};

template <class T>
Buffer<T> on_gpu(Ledger& ledger, Category c, const std::vector<T>& values) {
  Buffer<T> b(ledger, c, values.size(), Device::cuda, /*zero=*/false);
  from_host(b.view(), values);
  return b;
}

double relative_error(const std::vector<float>& got, const Eigen::VectorXd& want) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[Eigen::Index(i)]));
  return worst / std::max(want.cwiseAbs().maxCoeff(), 1e-30);
}

}  // namespace

TEST_CASE("gpu: the MLP's loss and gradient equal the reference's", "[gpu][model]") {
  BoundRank bound;
  Ledger ledger;
  const MlpShape s = make_shape({16, 64, 32, 8});
  const Teacher teacher(s, 3);
  const std::size_t B = 37;  // odd: no GEMM dimension a multiple of anything
  const std::vector<float> p0 = initial_params(s, 4), xs = teacher.inputs(0, B);
  std::vector<float> ts = teacher.targets(0, B);
  for (float& v : ts) v = 0.5f * v + 0.1f;
  auto params = on_gpu(ledger, Category::params, p0);
  auto x = on_gpu(ledger, Category::data, xs);
  auto t = on_gpu(ledger, Category::data, ts);
  Buffer<float> grads(ledger, Category::grads, s.params(), Device::cuda);
  Buffer<float> dy(ledger, Category::activations, B * s.out(), Device::cuda);
  Buffer<float> loss(ledger, Category::data, 1, Device::cuda);

  Mlp mlp(ledger, Device::cuda, s, B);
  const View<const float> y = mlp.forward(params.view(), x.view());
  mse_loss(loss.view(), dy.view(), y, t.view(), B, s.out());
  mlp.backward(grads.view(), params.view(), x.view(), dy.view());

  Eigen::VectorXd want;
  const double want_loss =
      reference_loss(s, widen(p0), widen(xs, B, s.in()), widen(ts, B, s.out()), &want);
  CHECK(to_host(View<const float>(loss.view()))[0] == Approx(want_loss).epsilon(1e-5));
  CHECK(relative_error(to_host(View<const float>(grads.view())), want) < 1e-5);
}

TEST_CASE("gpu: SGD and Adam step like the reference optimizer", "[gpu][model]") {
  BoundRank bound;
  Ledger ledger;
  const std::size_t n = 1000;
  std::vector<float> p(n), g(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = std::sin(0.1f * float(i));
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam}) {
    const OptimizerConfig config{kind, kind == OptimizerKind::sgd ? 0.1f : 0.01f};
    auto params = on_gpu(ledger, Category::params, p);
    Eigen::VectorXd ref = widen(p);
    Optimizer opt(ledger, Device::cuda, n, config);
    ReferenceOptimizer ref_opt(n, config);
    for (int step = 1; step <= 3; ++step) {
      for (std::size_t i = 0; i < n; ++i) g[i] = std::cos(0.37f * float(i * std::size_t(step)));
      auto grads = on_gpu(ledger, Category::grads, g);
      opt.step(params.view(), View<const float>(grads.view()));
      ref_opt.step(ref, widen(g));
    }
    CHECK(relative_error(to_host(View<const float>(params.view())), ref) < 1e-6);
  }
}

TEST_CASE("gpu: Adam with bf16 gradients equals its CPU twin", "[gpu][model]") {
  BoundRank bound;
  Ledger ledger;
  const std::size_t n = 1001;
  std::vector<float> p(n), g(n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = std::sin(0.3f * float(i));
    g[i] = std::cos(0.11f * float(i)) * 1e-3f;
  }
  std::vector<BFloat16> gb(n);
  for (std::size_t i = 0; i < n; ++i) gb[i] = BFloat16(g[i]);
  const model::OptimizerConfig config{model::OptimizerKind::adam, 0.01f};
  // The GPU: bf16 gradients in device memory.
  auto params = on_gpu(ledger, Category::params, p);
  auto grads = on_gpu(ledger, Category::grads, gb);
  model::Optimizer gpu(ledger, Device::cuda, n, config);
  // The CPU twin.
  Buffer<float> host_p(ledger, Category::params, n);
  Buffer<BFloat16> host_g(ledger, Category::grads, n);
  for (std::size_t i = 0; i < n; ++i) {
    host_p[i] = p[i];
    host_g[i] = gb[i];
  }
  model::Optimizer cpu(ledger, Device::cpu, n, config);
  for (int t = 1; t <= 3; ++t) {
    gpu.step(params.view(), View<const BFloat16>(grads.view()));
    cpu.step(host_p.view(), View<const BFloat16>(host_g.view()));
  }
  const std::vector<float> got = to_host(View<const float>(params.view()));
  int wrong = 0;
  for (std::size_t i = 0; i < n; ++i)
    wrong += std::fabs(got[i] - host_p[i]) > 1e-6f * (1.0f + std::fabs(host_p[i]));
  CHECK(wrong == 0);
}

TEST_CASE("gpu: softmax_backward_rows equals its CPU twin", "[gpu][ops]") {
  BoundRank bound;
  Ledger ledger;
  const std::size_t rows = 37, cols = 1025;  // a row longer than a block
  std::vector<float> y(rows * cols), dy(rows * cols);
  for (std::size_t r = 0; r < rows; ++r) {
    double total = 0;
    for (std::size_t c = 0; c < cols; ++c)
      total += y[r * cols + c] = std::exp(std::sin(0.01f * float(r * cols + c)));
    for (std::size_t c = 0; c < cols; ++c) y[r * cols + c] = float(y[r * cols + c] / total);
  }
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = std::cos(0.3f * float(i));
  Buffer<float> host_dx(ledger, Category::activations, rows * cols);
  ops::softmax_backward_rows(host_dx.view(), View<const float>{y.data(), y.size()},
                             View<const float>{dy.data(), dy.size()}, rows, cols);
  auto gy = on_gpu(ledger, Category::activations, y),
       gdy = on_gpu(ledger, Category::activations, dy);
  Buffer<float> gdx(ledger, Category::activations, rows * cols, Device::cuda);
  ops::softmax_backward_rows(gdx.view(), View<const float>(gy.view()),
                             View<const float>(gdy.view()), rows, cols);
  const std::vector<float> got = to_host(View<const float>(gdx.view()));
  int wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    wrong += std::fabs(got[i] - host_dx[i]) > 1e-6f * (1e-3f + std::fabs(host_dx[i]));
  CHECK(wrong == 0);
}

TEST_CASE("gpu: lesson 14's GPT stage on 1 and 2 tensor-parallel ranks equals the reference",
          "[gpu][model]") {
  // The tests/test_gpt.cpp check with every buffer on the GPU (run_in_process binds rank r to
  // GPU r % count): the loss and each rank's gradients against the float64 model, within the
  // float32 bound used there (terms x depth x u_f32 of the largest gradient).
  gpt::Config c;
  c.vocab = 16;
  c.d = 16;
  c.heads = 4;
  c.layers = 2;
  c.seq = 8;
  const std::size_t batch = 2, N = batch * c.seq;
  std::vector<std::int32_t> ids(N), targets(N);
  for (std::size_t i = 0; i < N; ++i) {
    ids[i] = static_cast<std::int32_t>((i * 5 + 3) % c.vocab);
    targets[i] = static_cast<std::int32_t>((i * 11 + 1) % c.vocab);
  }
  const std::vector<float> w0 = gpt::initial_weights(c);
  Eigen::VectorXd grad;
  const double loss_want = gpt::reference_loss(c, widen(w0), ids, targets, &grad);
  const double bound = gpt::float32_bound(c, N);
  for (int T : {1, 2}) {
    INFO("tp " << T);
    std::vector<double> errors(static_cast<std::size_t>(T), INFINITY), losses = errors;
    run_in_process(
        T,
        [&](Comm& comm) {
          const gpt::Layout layout(c, 0, 1, comm.rank(), T);
          gpt::Stage stage(comm, c, layout, batch, 1);
          auto params = comm.alloc_from(layout.gather(w0), Category::params);
          auto grads = comm.alloc<float>(layout.size(), Category::grads);
          auto in_ids = comm.alloc_from(ids, Category::data);
          auto in_targets = comm.alloc_from(targets, Category::data);
          const auto loss = stage.forward(0, View<const float>(params.view()), in_ids.view(),
                                          in_targets.view(), {}, 1.0f / float(N));
          losses[static_cast<std::size_t>(comm.rank())] = to_host(loss)[0];
          stage.backward(0, View<const float>(params.view()), grads.view(), {});
          const auto got = to_host(View<const float>(grads.view()));
          const auto want = layout.gather(grad);
          double worst = 0;
          for (std::size_t i = 0; i < got.size(); ++i)
            worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
          errors[static_cast<std::size_t>(comm.rank())] = worst / grad.cwiseAbs().maxCoeff();
        },
        30, Device::cuda);
    for (double e : errors) CHECK(e <= bound);
    for (double l : losses) CHECK(l == Approx(loss_want).epsilon(bound));
  }
}
