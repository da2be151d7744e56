// gpt.hpp and gpt_reference.hpp: the float64 reference against finite differences, and the
// float32 stages on the ops, split over tensor- and pipeline-parallel ranks, against it.
#include "catch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/mesh.hpp"
#include "core/runtime/data.hpp"
#include "core/training/gpt.hpp"
#include "core/training/gpt_reference.hpp"
#include "core/training/model_reference.hpp"
#include "thread_world.hpp"

using namespace distlab;
using distlab::test::run_ranks;

namespace {

gpt::Config small() {
  gpt::Config c;
  c.vocab = 16;
  c.d = 16;
  c.heads = 4;
  c.layers = 2;
  c.seq = 8;
  return c;
}

// Tokens in [0, vocab) from the seed; the targets are the next tokens.
std::vector<std::int32_t> tokens(const gpt::Config& c, std::size_t n, std::uint64_t seed) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = static_cast<std::int32_t>(splitmix64(seed * 7919 + i) % c.vocab);
  return t;
}

struct Outcome {
  std::mutex m;
  std::vector<std::string> wrong;
  double worst = 0;
  int compared = 0;
};

// A rank's gradients (its layout) against the reference's, within bound x the largest.
void compare_grads(const gpt::Layout& layout, const std::vector<float>& got,
                   const Eigen::VectorXd& want, double bound, Outcome& out,
                   const std::string& who) {
  const double top = want.cwiseAbs().maxCoeff();
  const auto mine = layout.gather(want);
  std::lock_guard lk(out.m);
  for (const auto& p : layout.parts())
    for (std::size_t i = 0; i < p.size; ++i) {
      const double err = std::abs(double(got[p.offset + i]) - mine[p.offset + i]);
      out.worst = std::max(out.worst, err / top);
      ++out.compared;
      if (err > bound * top && out.wrong.size() < 5)
        out.wrong.push_back(fmt::format("{}: {} [{}] got {} want {}", who, p.tensor.name, i,
                                        got[p.offset + i], mine[p.offset + i]));
    }
}

}  // namespace

TEST_CASE("gpt: the float64 reference's gradient equals central differences of its loss", "[gpt]") {
  gpt::Config c;
  c.vocab = 8;
  c.d = 8;
  c.heads = 2;
  c.layers = 2;
  c.seq = 4;
  const auto ids = tokens(c, 2 * c.seq, 3), targets = tokens(c, 2 * c.seq, 4);
  // Larger weights than the initial ones, so that every path carries a gradient of weight.
  std::vector<float> w = gpt::initial_weights(c);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] += 0.3f * input_value<float>(9, 0, i);
  Eigen::VectorXd params = model::widen(w), grad;
  gpt::reference_loss(c, params, ids, targets, &grad);
  // Central differences with step 1e-5: truncation ~1e-10 of the third derivative, cancellation
  // ~1e-11 of a loss of order 1 over 2e-5: agreement to 1e-6 absolute.
  int checked = 0, bad = 0;
  for (Eigen::Index i = 0; i < params.size(); i += 7) {
    Eigen::VectorXd up = params, down = params;
    up[i] += 1e-5;
    down[i] -= 1e-5;
    const double fd =
        (gpt::reference_loss(c, up, ids, targets) - gpt::reference_loss(c, down, ids, targets)) /
        2e-5;
    ++checked;
    if (std::abs(fd - grad[i]) > 1e-6) {
      ++bad;
      UNSCOPED_INFO("parameter " << i << ": backprop " << grad[i] << ", differences " << fd);
    }
  }
  CHECK(checked > 100);
  CHECK(bad == 0);
}

TEST_CASE("gpt: the layout of a split rank maps every element to one place of the whole", "[gpt]") {
  const gpt::Config c = small();
  const std::size_t total = gpt::parameter_count(c);
  std::vector<int> seen(total, 0);
  for (int p = 0; p < 2; ++p)
    for (int t = 0; t < 4; ++t) {
      const gpt::Layout layout(c, p, 2, t, 4);
      for (const auto& part : layout.parts())
        for (std::size_t i = 0; i < part.size; ++i) ++seen[layout.global_index(part, i)];
    }
  // Split tensors once per tp rank, whole ones on every tp rank (4 times).
  for (const auto& t : gpt::tensors(c))
    for (std::size_t i = 0; i < t.size(); ++i)
      CHECK(seen[t.offset + i] == (t.split == gpt::Split::whole ? 4 : 1));
  CHECK_THROWS_WITH(gpt::Layout(c, 0, 1, 0, 3),
                    "the 4 heads must divide over --tp 3 (whole heads per rank)");
  CHECK_THROWS_WITH(gpt::Layout(c, 0, 4, 0, 1),
                    "the 2 layers must divide over --pp 4 (as many per stage)");
}

TEST_CASE(
    "gpt: a stage's loss and gradients on 1, 2 and 4 tensor-parallel ranks equal the "
    "reference's",
    "[gpt]") {
  const gpt::Config c = small();
  const std::size_t batch = 2, N = batch * c.seq;
  const auto ids = tokens(c, N, 5), targets = tokens(c, N, 6);
  const std::vector<float> w0 = gpt::initial_weights(c);
  Eigen::VectorXd grad;
  const double loss_want = gpt::reference_loss(c, model::widen(w0), ids, targets, &grad);
  for (int T : {1, 2, 4}) {
    INFO("tp " << T);
    Outcome out;
    std::vector<float> losses(static_cast<std::size_t>(T));
    auto run = run_ranks(T, [&](Comm& world) {
      Comm tp = world.split(0, world.rank(), "tp");
      const gpt::Layout layout(c, 0, 1, tp.rank(), T);
      gpt::Stage stage(tp, c, layout, batch, 1);
      auto params = tp.alloc_from(layout.gather(w0), Category::params);
      auto grads = tp.alloc<float>(layout.size(), Category::grads);
      auto in_ids = tp.alloc_from(ids, Category::data);
      auto in_targets = tp.alloc_from(targets, Category::data);
      const auto loss = stage.forward(0, View<const float>(params.view()), in_ids.view(),
                                      in_targets.view(), {}, 1.0f / float(N));
      losses[static_cast<std::size_t>(world.rank())] = to_host(loss)[0];
      stage.backward(0, View<const float>(params.view()), grads.view(), {});
      compare_grads(layout, to_host(View<const float>(grads.view())), grad,
                    gpt::float32_bound(c, N), out, fmt::format("tp rank {}", tp.rank()));
    });
    REQUIRE_FALSE(run.failed);
    for (float l : losses) CHECK(l == Approx(loss_want).epsilon(gpt::float32_bound(c, N)));
    CHECK(out.wrong == std::vector<std::string>{});
    CHECK(out.compared >= int(gpt::parameter_count(c)));
  }
}

TEST_CASE("gpt: two pipeline stages of two tensor-parallel ranks each equal the reference",
          "[gpt]") {
  const gpt::Config c = small();
  const std::size_t batch = 2, N = batch * c.seq;
  const auto ids = tokens(c, N, 7), targets = tokens(c, N, 8);
  const std::vector<float> w0 = gpt::initial_weights(c);
  Eigen::VectorXd grad;
  const double loss_want = gpt::reference_loss(c, model::widen(w0), ids, targets, &grad);
  Outcome out;
  std::vector<float> losses(4, -1.0f);
  auto run = run_ranks(4, [&](Comm& world) {
    Mesh mesh(world, {1, 2, 2});
    const gpt::Layout layout(c, mesh.coord().pp, 2, mesh.coord().tp, 2);
    gpt::Stage stage(mesh.tp(), c, layout, batch, 1);
    auto params = world.alloc_from(layout.gather(w0), Category::params);
    auto grads = world.alloc<float>(layout.size(), Category::grads);
    auto in_ids = world.alloc_from(ids, Category::data);
    auto in_targets = world.alloc_from(targets, Category::data);
    auto x = world.alloc<float>(N * c.d, Category::activations);
    Comm& pp = mesh.pp();
    const View<const float> P = params.view();
    if (pp.rank() == 0) {
      const auto y = stage.forward(0, P, in_ids.view(), {}, {}, 0);
      pp.send(y, 1, 1);
      pp.recv(x.view(), 1, 2);
      stage.backward(0, P, grads.view(), View<const float>(x.view()));
    } else {
      pp.recv(x.view(), 0, 1);
      const auto loss =
          stage.forward(0, P, {}, in_targets.view(), View<const float>(x.view()), 1.0f / float(N));
      losses[static_cast<std::size_t>(world.rank())] = to_host(loss)[0];
      const auto dx = stage.backward(0, P, grads.view(), {});
      pp.send(dx, 0, 2);
    }
    compare_grads(layout, to_host(View<const float>(grads.view())), grad, gpt::float32_bound(c, N),
                  out, mesh.describe());
  });
  REQUIRE_FALSE(run.failed);
  CHECK(losses[2] == Approx(loss_want).epsilon(gpt::float32_bound(c, N)));
  CHECK(losses[3] == Approx(loss_want).epsilon(gpt::float32_bound(c, N)));
  CHECK(out.wrong == std::vector<std::string>{});
}

TEST_CASE("gpt: the generated corpus is the alphabet's, the same for a seed, and cut as stated",
          "[gpt]") {
  const gpt::Corpus a(1, 4096), b(1, 4096), other(2, 4096);
  CHECK(a.text() == b.text());
  CHECK(a.text() != other.text());
  CHECK(a.text().size() == 4096);
  CHECK(std::string(gpt::kAlphabet).size() == gpt::kVocab);
  for (char ch : a.text()) CHECK(gpt::Corpus::character(gpt::Corpus::token(ch)) == ch);
  std::vector<std::int32_t> ids, targets;
  a.sequence(5, 32, ids, targets);
  REQUIRE(ids.size() == 32);
  for (std::size_t t = 0; t + 1 < 32; ++t) CHECK(targets[t] == ids[t + 1]);  // the next character
  CHECK_THROWS_WITH(gpt::Corpus::token('#'), Catch::Contains("outside the alphabet"));
  // Step 1 of dp 2 x 3 micro-batches of 4: replica 1's micro-batch 2's sequence 3 is the last.
  CHECK(gpt::sequence_index(1, 1, 2, 3, 2, 3, 4) == 2 * 2 * 3 * 4 - 1);
}

TEST_CASE("gpt: the float64 reference learns the corpus: the loss falls from ln 64", "[gpt]") {
  gpt::Config c;  // the lesson's defaults: vocab 64, d 64, 4 heads, 4 layers, context 32
  const gpt::Corpus corpus(1, 1 << 14);
  model::OptimizerConfig adam;
  adam.kind = model::OptimizerKind::adam;
  adam.lr = 3e-3f;
  const auto run = gpt::reference_train(c, corpus, gpt::initial_weights(c), 30, 8, adam);
  INFO("first " << run.losses.front() << ", last " << run.losses.back());
  // Small initial weights: the first logits are near 0, every class near 1/64.
  CHECK(run.losses.front() == Approx(std::log(64.0)).epsilon(0.02));
  CHECK(run.losses.back() < 0.75 * run.losses.front());
}

namespace {

// One step's forward and backward of `small()` on T tensor-parallel ranks with `options`: every
// rank's gradient, and rank 0's kept and recompute ledgers' peaks (bytes) and recompute FLOP.
struct RecomputeRun {
  std::vector<std::vector<float>> grads;
  std::int64_t kept = 0, kept_after = 0, recompute = 0, recompute_after = 0;
  std::uint64_t flops = 0;
  bool failed = false;
};
RecomputeRun run_recompute(const gpt::Config& c, int T, std::size_t batch,
                           gpt::StageOptions options) {
  const std::size_t N = batch * c.seq;
  const auto ids = tokens(c, N, 5), targets = tokens(c, N, 6);
  const std::vector<float> w0 = gpt::initial_weights(c);
  RecomputeRun out;
  out.grads.resize(static_cast<std::size_t>(T));
  std::mutex m;
  auto run = run_ranks(T, [&](Comm& world) {
    Comm tp = world.split(0, world.rank(), "tp");
    const gpt::Layout layout(c, 0, 1, tp.rank(), T);
    gpt::Stage stage(tp, c, layout, batch, 1, options);
    auto params = tp.alloc_from(layout.gather(w0), Category::params);
    auto grads = tp.alloc<float>(layout.size(), Category::grads);
    auto in_ids = tp.alloc_from(ids, Category::data);
    auto in_targets = tp.alloc_from(targets, Category::data);
    stage.forward(0, View<const float>(params.view()), in_ids.view(), in_targets.view(), {},
                  1.0f / float(N));
    stage.backward(0, View<const float>(params.view()), grads.view(), {});
    stage.sync_replicated(grads.view());
    std::lock_guard lk(m);
    out.grads[static_cast<std::size_t>(world.rank())] = to_host(View<const float>(grads.view()));
    if (world.rank() != 0) return;
    out.kept = stage.kept_ledger().peak(Category::activations);
    out.kept_after = stage.kept_ledger().current(Category::activations);
    out.recompute = stage.recompute_ledger().peak(Category::activations);
    out.recompute_after = stage.recompute_ledger().current(Category::activations);
    out.flops = stage.recompute_flops();
  });
  out.failed = run.failed;
  return out;
}

// run_recompute under none, selective and full, in that order, each charged per pass or not.
std::vector<RecomputeRun> run_settings(const gpt::Config& c, int T, std::size_t batch,
                                       bool per_pass, bool sequence_parallel) {
  std::vector<RecomputeRun> runs;
  for (auto r : {gpt::Recompute::none, gpt::Recompute::selective, gpt::Recompute::full}) {
    gpt::StageOptions o;
    o.recompute = r;
    o.charge_per_pass = per_pass;
    o.sequence_parallel = sequence_parallel;
    runs.push_back(run_recompute(c, T, batch, o));
  }
  return runs;
}

}  // namespace

TEST_CASE(
    "gpt: recompute none, selective and full give the same gradients bit for bit, keeping and "
    "recomputing what their formulas say",
    "[gpt]") {
  const gpt::Config c = small();
  const std::size_t B = 2, N = B * c.seq, d = c.d, S = c.seq, L = c.layers, H = c.heads;
  for (int T : {1, 2}) {
    for (bool per_pass : {false, true}) {
      INFO("tp " << T << (per_pass ? ", charged per pass" : ", charged up front"));
      const std::size_t t = std::size_t(T);
      // Floats a layer keeps, written out: its input, LN1's output, x1 and LN2's output (4 N d);
      // LN1's and LN2's means and 1/std (4 N); my heads' q, k, v and context (4 N d / T); my
      // MLP columns before and after GeLU (2 N 4d / T); my heads' probabilities (H/T B S^2).
      const std::size_t probabilities = H / t * B * S * S;
      const std::size_t all = 4 * N * d + 4 * N + 4 * N * d / t + 8 * N * d / t + probabilities;
      // The recomputed FLOP, per layer: selective the scores q k^T of my heads, 2 S^2 dh each
      // head and sequence; full the block's forward, 24 N d^2 / T + 4 N S d / T.
      const std::uint64_t selective_flops = L * 2 * N * S * d / t;
      const std::uint64_t full_flops = L * (24 * N * d * d / t + 4 * N * S * d / t);
      const std::vector<RecomputeRun> runs = run_settings(c, T, B, per_pass, false);
      for (const auto& run : runs) REQUIRE_FALSE(run.failed);
      CHECK(runs[0].kept == std::int64_t(4 * L * all));
      CHECK(runs[1].kept == std::int64_t(4 * L * (all - probabilities)));
      CHECK(runs[2].kept == std::int64_t(4 * L * N * d));
      CHECK(runs[0].recompute == 0);
      CHECK(runs[1].recompute == std::int64_t(4 * S * S));
      CHECK(runs[2].recompute == std::int64_t(4 * (all - N * d)));  // one block, its input kept
      CHECK(runs[0].flops == 0);
      CHECK(runs[1].flops == selective_flops);
      CHECK(runs[2].flops == full_flops);
      if (per_pass) {  // every block's tensors released by its backward: the inputs stay
        CHECK(runs[0].kept_after == std::int64_t(4 * L * N * d));
        CHECK(runs[1].kept_after == std::int64_t(4 * L * N * d));
        CHECK(runs[2].recompute_after == 0);
      }
      for (std::size_t k = 1; k < runs.size(); ++k)
        for (std::size_t r = 0; r < t; ++r) {
          INFO("recompute " << k << ", rank " << r);
          REQUIRE(runs[k].grads[r].size() == runs[0].grads[r].size());
          CHECK(std::memcmp(runs[k].grads[r].data(), runs[0].grads[r].data(),
                            runs[0].grads[r].size() * sizeof(float)) == 0);
        }
    }
  }
}

TEST_CASE("gpt: lesson 19's breaks, a stale input and GeLU over its input, give wrong gradients",
          "[gpt]") {
  const gpt::Config c = small();
  const std::size_t B = 2, N = B * c.seq;
  const auto ids = tokens(c, N, 5), targets = tokens(c, N, 6);
  Eigen::VectorXd grad;
  gpt::reference_loss(c, model::widen(gpt::initial_weights(c)), ids, targets, &grad);
  const gpt::Layout layout(c, 0, 1, 0, 1);
  for (int which : {0, 1, 2}) {
    gpt::StageOptions o;
    o.recompute = gpt::Recompute::full;
    o.stale_input = which == 1;
    o.gelu_in_place = which == 2;
    INFO((which == 0 ? "no break" : which == 1 ? "stale input" : "GeLU in place"));
    const RecomputeRun run = run_recompute(c, 1, B, o);
    REQUIRE_FALSE(run.failed);
    Outcome out;
    compare_grads(layout, run.grads[0], grad, gpt::float32_bound(c, N), out, "rank 0");
    CHECK(out.wrong.empty() == (which == 0));
  }
}

TEST_CASE(
    "gpt: sequence parallelism keeps each layer's tensors on N/T rows, its gradients equal the "
    "reference's and bit for bit across recompute none, selective and full",
    "[gpt]") {
  const gpt::Config c = small();
  const std::size_t B = 2, N = B * c.seq, d = c.d, S = c.seq, L = c.layers, H = c.heads;
  const auto ids = tokens(c, N, 5), targets = tokens(c, N, 6);
  Eigen::VectorXd grad;
  gpt::reference_loss(c, model::widen(gpt::initial_weights(c)), ids, targets, &grad);
  for (int T : {2, 4}) {
    INFO("tp " << T << ", sequence parallel");
    const std::size_t t = std::size_t(T);
    // Every term of a layer's floats over T: my rows of x, a, x1 and m and of the LayerNorms'
    // statistics; my heads' q, k, v, context and probabilities; my MLP columns.
    const std::size_t probabilities = H / t * B * S * S;
    const std::size_t all = (4 * N * d + 4 * N) / t + 12 * N * d / t + probabilities;
    const std::vector<RecomputeRun> runs = run_settings(c, T, B, true, true);
    for (const auto& run : runs) REQUIRE_FALSE(run.failed);
    CHECK(runs[0].kept == std::int64_t(4 * L * all));
    CHECK(runs[1].kept == std::int64_t(4 * L * (all - probabilities)));
    CHECK(runs[2].kept == std::int64_t(4 * L * N * d / t));
    CHECK(runs[1].recompute == std::int64_t(4 * S * S));
    CHECK(runs[2].recompute == std::int64_t(4 * (all - N * d / t)));
    CHECK(runs[2].flops == L * (24 * N * d * d / t + 4 * N * S * d / t));
    for (std::size_t r = 0; r < t; ++r) {
      INFO("rank " << r);
      for (std::size_t k = 1; k < runs.size(); ++k)
        CHECK(std::memcmp(runs[k].grads[r].data(), runs[0].grads[r].data(),
                          runs[0].grads[r].size() * sizeof(float)) == 0);
      Outcome out;
      compare_grads(gpt::Layout(c, 0, 1, int(r), T), runs[0].grads[r], grad,
                    gpt::float32_bound(c, N), out, fmt::format("tp rank {}", r));
      CHECK(out.wrong == std::vector<std::string>{});
    }
  }
}
