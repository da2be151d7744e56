// precision.cpp — fp16's dynamic loss scale and fp8's delayed scaling (precision.hpp).
#include "core/training/precision.hpp"

#include <algorithm>
#include <cmath>

#include "core/base/breaks.hpp"
#include "core/base/check.hpp"

namespace distlab::precision {

DynamicLossScale::DynamicLossScale(LossScaleSettings settings)
    : settings_(settings),
      scale_(std::ldexp(1.0, settings.initial_scale_power)),
      lives_(settings.hysteresis) {
  DL_CHECK(settings.window >= 1, "loss scale: the window must be at least 1 step, not {}",
           settings.window);
  DL_CHECK(settings.hysteresis >= 1, "loss scale: hysteresis must be at least 1, not {}",
           settings.hysteresis);
  DL_CHECK(settings.min_scale > 0, "loss scale: the smallest scale must be positive");
  scale_ = std::max(scale_, settings.min_scale);
}

LossScaleStep DynamicLossScale::update(bool overflow) {
  LossScaleStep step;
  step.scale_before = scale_;
  if (overflow) {
    // The step is skipped whatever the scale does; a life is lost, and with the last one the
    // scale halves.
    step.skipped = true;
    ++skipped_;
    clean_ = 0;
    // --break scale-never-lowered (lesson 20): the scale stays where it overflowed.
    if (--lives_ <= 0 && !broken("scale-never-lowered")) {
      scale_ = std::max(scale_ / 2, settings_.min_scale);
      lives_ = settings_.hysteresis;
    }
  } else if (++clean_ == settings_.window) {
    scale_ *= 2;
    clean_ = 0;
    lives_ = settings_.hysteresis;
  }
  step.scale_after = scale_;
  return step;
}

void AmaxHistory::record(double amax) {
  history_.push_back(std::fabs(amax));
  if (history_.size() > length_) history_.pop_front();
}

double AmaxHistory::max() const {
  double m = 0;
  for (double a : history_) m = std::max(m, a);
  return m;
}

double AmaxHistory::scale(const fp8::Format& format, int margin) const {
  const double m = max();
  if (!(m > 0) || !std::isfinite(m)) return 1;  // nothing seen yet, or a bad step: keep 1
  return fp8::largest(format) / m / std::ldexp(1.0, margin);
}

double AmaxHistory::power_of_two_scale(const fp8::Format& format) const {
  const double s = scale(format);
  int exponent = 0;
  std::frexp(s, &exponent);  // s = f 2^exponent, f in [1/2, 1)
  return std::ldexp(1.0, exponent - 1);
}

}  // namespace distlab::precision
