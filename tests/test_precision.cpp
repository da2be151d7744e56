// precision.hpp: the dynamic loss scale against a schedule worked out by hand from DeepSpeed's
// rules, and fp8's delayed scaling against its formula.
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/base/check.hpp"
#include "core/training/model_reference.hpp"
#include "core/training/precision.hpp"
#include "core/training/precision_reference.hpp"

using namespace distlab;
using namespace distlab::precision;

TEST_CASE("loss scale: overflows halve it after the hysteresis, clean windows double it",
          "[precision]") {
  // S starts at 2^3 = 8; 3 clean steps double it; 2 overflows halve it; never below 2.
  DynamicLossScale s({.initial_scale_power = 3, .window = 3, .hysteresis = 2, .min_scale = 2});
  struct Row {
    bool overflow;
    bool skipped;
    double after;
  };
  // By hand: clean, clean, clean (3 in a row: 16); an overflow (one life lost, 16); clean; an
  // overflow (no life left: 8, lives back to 2); then overflows halve every second one down to
  // the floor of 2, where they stay; 3 clean steps double it again.
  const std::vector<Row> rows = {
      {false, false, 8},  {false, false, 8}, {false, false, 16}, {true, true, 16},
      {false, false, 16}, {true, true, 8},   {true, true, 8},    {true, true, 4},
      {true, true, 4},    {true, true, 2},   {true, true, 2},    {true, true, 2},
      {false, false, 2},  {false, false, 2}, {false, false, 4},
  };
  double before = 8;
  int step = 0, skipped = 0;
  for (const Row& r : rows) {
    ++step;
    INFO("step " << step);
    const LossScaleStep got = s.update(r.overflow);
    CHECK(got.skipped == r.skipped);
    CHECK(got.scale_before == before);
    CHECK(got.scale_after == r.after);
    CHECK(got.changed() == (r.after != before));
    CHECK(s.scale() == r.after);
    before = r.after;
    skipped += r.skipped;
  }
  CHECK(s.skipped_steps() == skipped);
}

TEST_CASE("loss scale: a doubling restores the lives an overflow took", "[precision]") {
  DynamicLossScale s({.initial_scale_power = 3, .window = 2, .hysteresis = 2, .min_scale = 1});
  CHECK(s.update(true).scale_after == 8);    // one life of 2 lost
  CHECK(s.update(false).scale_after == 8);   //
  CHECK(s.update(false).scale_after == 16);  // 2 clean steps: doubled, both lives back
  CHECK(s.update(true).scale_after == 16);   // one lost: no halving yet
  CHECK(s.update(true).scale_after == 8);    // the second: halved
}

TEST_CASE("loss scale: the lessons' settings start at 2^16 and halve at the first overflow",
          "[precision]") {
  DynamicLossScale s;
  CHECK(s.scale() == 65536);
  CHECK(s.update(true).scale_after == 32768);
  CHECK(s.update(true).scale_after == 16384);
  for (int k = 0; k < 999; ++k) CHECK(!s.update(false).changed());
  CHECK(s.update(false).scale_after == 32768);  // the 1000th clean step in a row
  CHECK_THROWS_AS(DynamicLossScale({.window = 0}), Error);
  CHECK_THROWS_AS(DynamicLossScale({.hysteresis = 0}), Error);
}

TEST_CASE("fp8 delayed scaling: the history's largest lands on the format's largest",
          "[precision]") {
  AmaxHistory h(3);
  CHECK(h.scale(fp8::kE4M3) == 1);  // nothing recorded
  h.record(1);
  h.record(-4);  // magnitudes
  h.record(2);
  CHECK(h.max() == 4);
  CHECK(h.scale(fp8::kE4M3) == 448.0 / 4);
  CHECK(h.scale(fp8::kE5M2) == 57344.0 / 4);
  CHECK(h.scale(fp8::kE4M3, 1) == 448.0 / 8);  // a margin of one power of two
  h.record(0.5);                               // 1 leaves the history; 4 is still in it
  CHECK(h.max() == 4);
  h.record(0.25);  // 4 leaves
  CHECK(h.max() == 2);
  CHECK(h.scale(fp8::kE4M3) == 224);
  // Scaled by it, the largest magnitude rounds to the largest fp8 value, not past it.
  const double s = h.scale(fp8::kE4M3);
  CHECK(fp8::round_to(fp8::kE4M3, float(2 * s), fp8::Overflow::to_special) == 448.0f);
}

TEST_CASE("fp8 scales: the run's power of two and the reference's agree", "[precision]") {
  // AmaxHistory::power_of_two_scale (frexp) against precision::fp8_scale (log2 and floor), two
  // writings of 2^floor(log2(largest / amax)), over amaxes across many binades and at powers of 2.
  for (double amax = 1e-9; amax < 1e6; amax *= 1.37) {
    for (const fp8::Format& f : {fp8::kE4M3, fp8::kE5M2}) {
      AmaxHistory h(1);
      h.record(amax);
      const double s = h.power_of_two_scale(f);
      CHECK(s == precision::fp8_scale(fp8::largest(f), amax));
      CHECK(amax * s <= fp8::largest(f));     // the largest |x| fits: nothing saturates
      CHECK(2 * amax * s > fp8::largest(f));  // and the next power of two would not
    }
  }
  CHECK(precision::fp8_scale(448, 1) == 256);
  CHECK(precision::fp8_scale(448, 0) == 1);
}

TEST_CASE("the error model's formats and GeLU constants", "[precision]") {
  using namespace precision;
  const Rounding f16 = rounding_f16(), bf16 = rounding_bf16(), f32 = rounding_f32();
  CHECK(f16.u == 0x1p-11);
  CHECK(f16.a == 0x1p-25);  // half of 2^-24
  CHECK(f16.largest == 65504);
  CHECK(f16.overflow == 65520);  // from here round-to-nearest gives infinity
  CHECK(bf16.u == 0x1p-8);
  CHECK(bf16.a == 0x1p-134);
  CHECK(bf16.largest == 0x1.fep127);
  CHECK(f32.u == 0x1p-24);
  CHECK(f32.largest == 0x1.fffffep127);
  CHECK(rounding_e4m3().largest == fp8::largest(fp8::kE4M3));
  CHECK(rounding_e5m2().largest == fp8::largest(fp8::kE5M2));
  CHECK(rounding_e4m3().a == fp8::smallest_subnormal(fp8::kE4M3) / 2);
  CHECK(rounding_e5m2().a == fp8::smallest_subnormal(fp8::kE5M2) / 2);
  // sup |gelu'| and sup |gelu''| over a fine grid (the derivative's central differences): the
  // constants the mean value theorem uses must bound them.
  double slope = 0, curvature = 0;
  for (double x = -12; x <= 12; x += 1e-3) {
    slope = std::max(slope, std::fabs(model::reference_gelu_grad(x)));
    const double h = 1e-5;
    curvature = std::max(
        curvature,
        std::fabs(model::reference_gelu_grad(x + h) - model::reference_gelu_grad(x - h)) / (2 * h));
  }
  CHECK(slope <= kGeluSlope);
  CHECK(slope > kGeluSlope - 0.01);  // and are close to them
  CHECK(curvature <= kGeluCurvature);
  CHECK(curvature > kGeluCurvature - 0.01);
}
