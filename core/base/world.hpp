// world.hpp — who am I, how many are we, how do we run.
//
// A World is the same object in every run mode: in-process ranks (one thread each, the
// default) or one process per rank (under mpirun, or distlab's launcher over Gloo). Lessons
// read it; they never branch on it.
#pragma once

#include <cstdint>
#include <string>

namespace distlab {

// threads: in-process ranks; mpi: one process per rank under mpirun; gloo: one process per rank
// started by distlab's launcher (./distlab lesson NN --procs N), messages over Gloo.
enum class Mode : std::uint8_t { threads, mpi, gloo };
enum class Device : std::uint8_t { cpu, cuda };

struct World {
  int rank = 0;
  int size = 1;
  Mode mode = Mode::threads;
  Device device = Device::cpu;
  std::string transport = "threads";  // the transport in use: threads, mpi, gloo, shm, nccl, staged
  // Ranks per node, consecutive (node k = ranks k G .. k G + G - 1), for the hierarchical
  // algorithms: --ranks-per-node, or the simulated platform's nodes under --sim; 0 when neither
  // says (the algorithm then picks default_ranks_per_node). Groups made by split have 0.
  int ranks_per_node = 0;
};

const char* to_string(Mode m);
// How the run's processes talk, as its header says: the mode, or "shm" where processes that
// mpirun or the launcher started send through shared memory.
const char* run_kind(const World& world);
const char* to_string(Device d);

}  // namespace distlab
