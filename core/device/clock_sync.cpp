#include "core/device/clock_sync.hpp"

#include "core/base/check.hpp"

namespace distlab {

std::size_t tightest_round(const std::vector<ClockRound>& rounds) {
  DL_CHECK(!rounds.empty(), "a clock calibration needs at least one round");
  std::size_t best = 0;
  for (std::size_t i = 1; i < rounds.size(); ++i)
    if (rounds[i].after_us - rounds[i].before_us < rounds[best].after_us - rounds[best].before_us)
      best = i;
  return best;
}

}  // namespace distlab
