// clock_sync.hpp — the arithmetic that puts a GPU's timing events on the host clock (pure,
// tested on the CPU). cuda_context.cpp measures the rounds when a rank binds its GPU;
// device_timing.cpp places every later event with them (device_timing.hpp says how).
#pragma once

#include <cstddef>
#include <vector>

namespace distlab {

// One calibration round: host clock before recording the epoch event and after seeing it done.
struct ClockRound {
  double before_us = 0;
  double after_us = 0;
};

// The round with the smallest gap: the one the fewest other things interrupted.
std::size_t tightest_round(const std::vector<ClockRound>& rounds);
// The host time of that round's event: the midpoint, wrong by at most half the gap.
inline double round_midpoint(const ClockRound& r) {
  return (r.before_us + r.after_us) / 2;
}

// Host time of an event `ms_since_epoch` milliseconds after the epoch event.
inline double event_host_us(double epoch_host_us, double ms_since_epoch) {
  return epoch_host_us + ms_since_epoch * 1e3;
}

}  // namespace distlab
