// precision.hpp — the bookkeeping of mixed-precision training: fp16's dynamic loss scale and
// fp8's per-tensor scales from an amax history.
//
// Dynamic loss scaling (Micikevicius et al. 2018, "Mixed Precision Training"; DeepSpeed's
// DynamicLossScaler, whose settings these are): fp16 gradients below 2^-24 underflow to zero,
// so the loss is multiplied by a scale S before backward and the gradients divided by S before
// the optimizer. Too large an S overflows instead. Each step:
//   any inf or NaN in the gradients -> skip the step; lose one of `hysteresis` lives, and when
//                                      none is left halve S (never below min_scale)
//   `window` steps in a row clean   -> double S (the lives are restored)
// DeepSpeed's names: initial_scale_power (S starts at 2^16), loss_scale_window (1000),
// hysteresis (2), min_loss_scale (1). The lessons use hysteresis 1: halve at the first overflow.
//
// Delayed scaling for fp8 (Transformer Engine's recipe; Micikevicius et al. 2022): a tensor is
// multiplied by s before it is rounded to fp8 and divided by s after, with s chosen so that the
// largest magnitude seen over the last `length` steps (its amax history) lands 2^margin below
// the format's largest value: s = largest / max(history) / 2^margin.
#pragma once

#include <cstddef>
#include <deque>

#include "core/base/fp8.hpp"

namespace distlab::precision {

struct LossScaleSettings {
  int initial_scale_power = 16;  // S starts at 2^16
  int window = 1000;             // clean steps in a row before S doubles
  int hysteresis = 1;            // overflows taken before S halves
  double min_scale = 1;
};

// What one step's check of the gradients decided.
struct LossScaleStep {
  bool skipped = false;     // an inf or NaN: the optimizer must not step
  double scale_before = 0;  // S this step's loss was multiplied by
  double scale_after = 0;   // S for the next step
  bool changed() const { return scale_after != scale_before; }
};

class DynamicLossScale {
 public:
  explicit DynamicLossScale(LossScaleSettings settings = {});
  double scale() const { return scale_; }
  // After backward: `overflow` says whether any gradient element is inf or NaN.
  LossScaleStep update(bool overflow);
  int skipped_steps() const { return skipped_; }

 private:
  LossScaleSettings settings_;
  double scale_;
  int lives_;      // overflows left before S halves
  int clean_ = 0;  // clean steps since the last overflow or doubling
  int skipped_ = 0;
};

class AmaxHistory {
 public:
  explicit AmaxHistory(std::size_t length = 16) : length_(length) {}
  // This step's largest magnitude of the tensor.
  void record(double amax);
  // The scale for the next cast: largest(format) / max(history) / 2^margin; 1 before any
  // amax above zero was recorded.
  double scale(const fp8::Format& format, int margin = 0) const;
  // The same scale rounded down to a power of two (1 before any amax): multiplying by it and
  // dividing by it again round nothing, so the cast's only error is fp8's own rounding.
  double power_of_two_scale(const fp8::Format& format) const;
  double max() const;

 private:
  std::size_t length_;
  std::deque<double> history_;
};

}  // namespace distlab::precision
