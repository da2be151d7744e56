// clock.hpp — one monotonic clock for every rank, in microseconds.
//
// steady_clock is shared by all processes on one machine, so in-process ranks and MPI
// processes on one node read the same timeline. Ranks on other nodes get an offset
// estimated at start-up (mpi.cpp).
#pragma once

#include <chrono>

namespace distlab {

inline double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace distlab
