// launcher.cpp — what the launcher (mpirun, or none) told this process: the environment.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifdef DISTLAB_SMPI
#include <simgrid/actor.h>
#endif

#include "core/base/clock.hpp"
#include "core/runtime/launch.hpp"
#include "core/runtime/runtime.hpp"

namespace distlab {

const char* env_text(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (const char* v = env_text(n)) return std::atoi(v);
  return fallback;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

std::string path_beside(const std::string& path, const std::string& name) {
  const std::filesystem::path p = std::filesystem::path(path).parent_path() / name;
  std::error_code ec;
  const std::filesystem::path whole = std::filesystem::absolute(p, ec).lexically_normal();
  return ec ? p.string() : whole.string();
}

// Under smpirun (the smpi build) every rank is a SimGrid actor named after its rank, in one
// process: there is no launcher environment, and the build runs nowhere else.
bool launched_by_mpi() {
  if constexpr (kSimulatedBuild) return true;
  return env_text("OMPI_COMM_WORLD_SIZE") || env_text("PMI_SIZE") || env_text("PMIX_RANK") ||
         env_text("MPI_LOCALNRANKS");
}
bool launched_by_distlab() {
  return !kSimulatedBuild && env_text("DISTLAB_WORLD_SIZE");
}
int launcher_size() {
  if constexpr (kSimulatedBuild) return env_int({"DISTLAB_SIM_RANKS"}, 1);  // the front sets it
  return env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "DISTLAB_WORLD_SIZE"}, 1);
}
int launcher_rank() {
#ifdef DISTLAB_SMPI
  return std::atoi(sg_actor_self_get_name());
#endif
  return env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "DISTLAB_RANK"}, 0);
}
int launcher_local_rank() {
  return env_int(
      {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "DISTLAB_LOCAL_RANK"},
      launcher_rank());
}

}  // namespace distlab
