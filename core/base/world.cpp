#include "core/base/world.hpp"

namespace distlab {

const char* run_kind(const World& world) {
  return world.transport == "shm" ? "shm" : to_string(world.mode);
}

const char* to_string(Mode m) {
  return m == Mode::threads ? "threads" : m == Mode::mpi ? "mpi" : "gloo";
}
const char* to_string(Device d) {
  return d == Device::cpu ? "cpu" : "cuda";
}

}  // namespace distlab
