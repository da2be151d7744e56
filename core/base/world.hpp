// world.hpp — who am I, how many are we, how do we run.
//
// A World is the same object in every run mode: in-process ranks (one thread each, the
// default) or one process per rank under mpirun. Lessons read it; they never branch on it.
#pragma once

#include <cstdint>
#include <string>

namespace distlab {

enum class Mode : std::uint8_t { threads, mpi };
enum class Device : std::uint8_t { cpu, cuda };

struct World {
  int rank = 0;
  int size = 1;
  Mode mode = Mode::threads;
  Device device = Device::cpu;
  std::string transport = "threads";  // the transport in use: "threads" or "mpi"
};

const char* to_string(Mode m);
const char* to_string(Device d);

}  // namespace distlab
