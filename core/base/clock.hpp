// clock.hpp — one monotonic clock for every rank, in microseconds.
//
// steady_clock is shared by all processes on one machine, so in-process ranks and MPI
// processes on one node read the same timeline. Ranks on other nodes get an offset
// estimated at start-up (mpi.cpp).
//
// A simulated run (SimGrid's SMPI, the smpi preset) replaces the clock of each rank's thread
// with the simulation's (MPI_Wtime): then every timestamp is the simulated cluster's time.
// Threads a rank starts keep the machine's clock.
#pragma once

#include <chrono>

namespace distlab {

// A build against SimGrid's SMPI (the smpi preset): its MPI ranks live on simulated time.
#ifdef DISTLAB_SMPI
inline constexpr bool kSimulatedBuild = true;
#else
inline constexpr bool kSimulatedBuild = false;
#endif

// This thread's clock when it is not the machine's: microseconds since the run's epoch.
inline thread_local double (*thread_clock_us)() = nullptr;

inline double now_us() {
  if (thread_clock_us) return thread_clock_us();
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace distlab
