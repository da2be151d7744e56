// test_zero.cpp — ZeRO's layout and formulas (zero.hpp), the rank-order reduce-scatter, and short
// in-process runs of plain data parallel's step against its formula and the float64 reference.
// The ZeRO stages' steps live in lessons 08-10; their ctest runs check each against plain data
// parallel (bit for bit with --deterministic), the reference and the ledger.
#include "catch.hpp"

#include <map>
#include <mutex>
#include <numeric>
#include <vector>

#include "core/base/half.hpp"
#include "core/collectives/reduce_scatter_ordered.hpp"
#include "core/collectives/reduce_scatter_ring.hpp"
#include "core/runtime/runtime.hpp"
#include "core/training/teacher.hpp"
#include "core/training/zero.hpp"

using namespace distlab;
using namespace distlab::zero;

namespace {

// 16 -> 64 -> 64 -> 8: layers of 1088, 4160 and 520 parameters, 5768 in all.
model::MlpShape test_shape() {
  return model::make_shape({16, 64, 64, 8});
}

Config test_config(Stage stage, bool deterministic) {
  Config c;
  c.stage = stage;
  c.shape = test_shape();
  c.batch = 24;
  c.steps = 3;
  c.deterministic = deterministic;
  return c;
}

// Every rank's Run of one stage on n in-process ranks.
std::vector<Run> train_all(const Config& c, int n) {
  std::vector<Run> runs(static_cast<std::size_t>(n));
  run_in_process(n, [&](Comm& comm) { runs[std::size_t(comm.rank())] = train(comm, c, dp_step); });
  return runs;
}

// The flat master weights put back together from every rank's part (padding dropped).
std::vector<float> assembled(const std::vector<Run>& runs, Stage stage, const model::MlpShape& s) {
  const int n = int(runs.size());
  std::vector<float> out(s.params(), NAN);
  for (int r = 0; r < n; ++r) {
    const auto pos = master_positions(stage, s, n, r);
    for (std::size_t i = 0; i < pos.size(); ++i)
      if (pos[i] >= 0) out[std::size_t(pos[i])] = runs[std::size_t(r)].master[i];
    if (stage == Stage::dp) break;  // every dp rank holds everything
  }
  return out;
}

}  // namespace

TEST_CASE("zero: units pad each sharded unit to a multiple of N", "[zero]") {
  const auto s = test_shape();
  const auto dp = units(Stage::dp, s, 3);
  REQUIRE(dp.size() == 1);
  CHECK(dp[0].padded == 5768);  // nothing sharded, nothing padded
  const auto z1 = units(Stage::zero1, s, 3);
  REQUIRE(z1.size() == 1);
  CHECK(z1[0].padded == 5769);
  CHECK(z1[0].shard == 1923);
  const auto z3 = units(Stage::zero3, s, 64);
  REQUIRE(z3.size() == 3);
  CHECK(z3[0].begin == 0);
  CHECK(z3[1].begin == 1088);
  CHECK(z3[2].count == 520);
  CHECK(z3[2].padded == 576);
  CHECK(z3[2].shard == 9);
}

TEST_CASE("zero: model state bytes are 16, 4 + 12/N, 2 + 14/N, 16/N per parameter without padding",
          "[zero]") {
  // 4 divides every layer of the test shape and the whole: the formulas hold exactly.
  const auto s = test_shape();
  const double P = double(s.params());
  for (Stage stage : {Stage::dp, Stage::zero1, Stage::zero2, Stage::zero3})
    CHECK(double(state_bytes(stage, s, 4).total()) / P ==
          Approx(bytes_per_param(stage, 4)).epsilon(1e-12));
  CHECK(bytes_per_param(Stage::zero1, 64) == Approx(4.1875));
  CHECK(bytes_per_param(Stage::zero2, 64) == Approx(2.21875));
  CHECK(bytes_per_param(Stage::zero3, 64) == Approx(0.25));
  const StateBytes z2 = state_bytes(Stage::zero2, s, 4);
  CHECK(z2.params == 2 * 5768);
  CHECK(z2.grads == 2 * 5768 / 4);
  CHECK(z2.optimizer == 12 * 5768 / 4);
  // With padding: ZeRO-3 on 64 ranks keeps 2 + 2 + 12 bytes of (17 + 65 + 9) parameters.
  CHECK(state_bytes(Stage::zero3, s, 64).total() == 16 * (17 + 65 + 9));
}

TEST_CASE("zero: communication per step is 2 Psi, or 3 Psi for ZeRO-3, times (N-1)/N", "[zero]") {
  const auto s = test_shape();
  CHECK(step_bytes_sent(Stage::zero1, s, 4, 0) == 2 * 3 * (5768 / 4) * 2);
  CHECK(step_bytes_sent(Stage::zero2, s, 4, 2) == step_bytes_sent(Stage::zero1, s, 4, 2));
  CHECK(step_bytes_sent(Stage::zero3, s, 4, 1) * 2 == step_bytes_sent(Stage::zero1, s, 4, 1) * 3);
  CHECK(step_bytes_sent(Stage::dp, s, 4, 3) ==
        step_bytes_sent(Stage::zero1, s, 4, 3));  // an all-reduce = RS + AG
  CHECK(step_bytes_sent(Stage::zero3, s, 1, 0) == 0);
}

TEST_CASE("zero: master positions cover every parameter once, padding marked", "[zero]") {
  const auto s = test_shape();
  for (Stage stage : {Stage::zero1, Stage::zero2, Stage::zero3}) {
    std::vector<int> seen(s.params(), 0);
    int padding = 0;
    for (int r = 0; r < 7; ++r)
      for (std::int64_t p : master_positions(stage, s, 7, r)) {
        if (p < 0)
          ++padding;
        else
          ++seen[std::size_t(p)];
      }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
    std::uint64_t padded = 0;
    for (const Unit& u : units(stage, s, 7)) padded += u.padded - u.count;
    CHECK(std::uint64_t(padding) == padded);
  }
}

TEST_CASE("reduce_scatter_ordered sums in rank order, one step, the ring's bytes",
          "[zero][collectives]") {
  const int n = 5;
  const std::size_t length = 23;  // chunks of 5, 5, 5, 4, 4
  // bf16 inputs whose sum depends on the order: 1, then tiny values that vanish one by one.
  auto input = [](int r, std::size_t i) { return r == 0 ? 1.0f : 0.002f * float(1 + i % 3); };
  std::vector<std::vector<BFloat16>> ordered(n), ring(n);
  const RunResult result = run_in_process(n, [&](Comm& comm) {
    const int me = comm.rank();
    std::vector<BFloat16> a(length), b(length);
    for (std::size_t i = 0; i < length; ++i) a[i] = b[i] = BFloat16(input(me, i));
    coll::reduce_scatter_ordered(comm, View<BFloat16>{a.data(), length}, "x");
    coll::reduce_scatter_ring(comm, View<BFloat16>{b.data(), length}, "y");
    ordered[std::size_t(me)] = a;
    ring[std::size_t(me)] = b;
  });
  const Partition part{length, n};
  for (int r = 0; r < n; ++r)
    for (std::size_t i = part.begin(r); i < part.end(r); ++i) {
      BFloat16 want = BFloat16(input(0, i));  // rank order, one bf16 rounding per add
      for (int k = 1; k < n; ++k) want = BFloat16(float(want) + float(BFloat16(input(k, i))));
      CHECK(float(ordered[std::size_t(r)][i]) == float(want));
    }
  // The ring adds chunk c from rank c+1 on: the small terms first, so they survive; rank order
  // adds them to 1 one at a time, and each vanishes. The order shows in the bits.
  bool differs = false;
  for (int r = 0; r < n; ++r)
    for (std::size_t i = part.begin(r); i < part.end(r); ++i)
      differs = differs || float(ring[std::size_t(r)][i]) != float(ordered[std::size_t(r)][i]);
  CHECK(differs);
  // One step per call for the ordered one, N-1 for the ring; the same bytes each.
  const auto t = result.traffic();
  std::uint64_t sent = 0;
  for (const auto& rank : t) sent += rank.bytes_sent;
  CHECK(sent == 2 * std::uint64_t(n - 1) * length * sizeof(BFloat16));
  CHECK(result.steps() == 1 + (n - 1));
}

TEST_CASE("zero: plain data parallel holds 16 bytes per parameter and trains", "[zero]") {
  const auto s = test_shape();
  for (int n : {2, 3}) {
    INFO("N = " << n);
    const auto runs = train_all(test_config(Stage::dp, true), n);
    for (const Run& r : runs) {  // the ledger holds the formula's model state after a step
      CHECK(r.state.total() == state_bytes(Stage::dp, s, n).total());
      CHECK(r.state.params == state_bytes(Stage::dp, s, n).params);
      CHECK(r.master == runs[0].master);  // every rank updated all of it, with the same sums
    }
    // And the weights moved: training happened.
    CHECK(assembled(runs, Stage::dp, s) !=
          model::initial_params(s, test_config(Stage::dp, true).seed));
  }
}

// Plain data parallel on every rank holds the whole model, so each step's state before its update
// is the whole master vector: the recipe restarted there (reference_gradient) must give the
// step's summed gradient within gradient_error, and another step's batch must not.
TEST_CASE("zero: every step's summed gradient is the float64 recipe's at the weights before it",
          "[zero]") {
  for (const bool deterministic : {true, false}) {
    INFO("deterministic " << deterministic);
    const Config c = test_config(Stage::dp, deterministic);
    const int n = 3;
    std::size_t over = 0, elements = 0, other_over = 0, losses_over = 0;
    std::vector<Run> runs(static_cast<std::size_t>(n));
    std::mutex m;
    run_in_process(n, [&](Comm& comm) {
      runs[std::size_t(comm.rank())] = train(
          comm, c, dp_step, nullptr,
          [&](int k, const StepState& before, const StepState&, double loss) {
            if (comm.rank() != 0) return;
            const std::vector<double> w(before.master.begin(), before.master.end());
            const StepGradient want = reference_gradient(c, n, w, k);
            const StepGradient other = reference_gradient(c, n, w, k + 1);
            const std::lock_guard<std::mutex> lock(m);
            for (std::size_t i = 0; i < w.size(); ++i, ++elements) {
              const ErrorBound::Terms e = gradient_error(n, want.magnitude[i], want.float32[i]);
              const double got = before.gradient[i];
              if (!(std::fabs(got - want.sum[i]) <= e.first + e.second)) ++over;
              const ErrorBound::Terms o = gradient_error(n, other.magnitude[i], other.float32[i]);
              if (!(std::fabs(got - other.sum[i]) <= o.first + o.second)) ++other_over;
            }
            if (!(std::fabs(loss - want.loss) <= 1e-3 * want.loss)) ++losses_over;
          });
    });
    CHECK(elements == std::size_t(c.steps) * c.shape.params());
    CHECK(over == 0);
    CHECK(losses_over == 0);
    CHECK(other_over > elements / 2);  // the bound tells one batch's gradient from another's
  }
}

TEST_CASE("zero: gradient_error is 2N 2^-8 of the shares' magnitude, and their float32 terms",
          "[zero]") {
  const ErrorBound::Terms e = gradient_error(4, 1.0, 0.5);
  CHECK(e.first == 8.0 / 256);
  CHECK(e.second == (1 + 4.0 / 128) * 0.5 + 4 * std::ldexp(1.0, -133));
  CHECK(gradient_error(1, 0.0, 0.0).first == 0.0);
}
