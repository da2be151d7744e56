// memory_plan.cpp — what a run may allocate, checked before it starts (Lesson::needs_memory): the
// memory this machine (and its cgroup, and the GPU) has free, the process's resident sizes, and
// the sentence a refused run ends with.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/base/check.hpp"
#include "core/base/units.hpp"
#include "core/device/cuda_context.hpp"
#include "core/runtime/launch.hpp"
#include "core/runtime/runtime.hpp"

namespace distlab {

namespace {

double read_number_file(const char* path) {
  std::FILE* f = std::fopen(path, "r");
  if (!f) return -1;
  char buf[64] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok || std::strncmp(buf, "max", 3) == 0) return -1;
  return std::strtod(buf, nullptr);
}

// A "Key:   1234 kB" line of a /proc file (meminfo, self/status), in bytes; -1 when absent.
double read_kib_field(const char* path, const char* key) {
  double bytes = -1;
  const std::size_t n = std::strlen(key);
  if (std::FILE* f = std::fopen(path, "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, key, n) == 0 && line[n] == ':')
        bytes = std::strtod(line + n + 1, nullptr) * 1024;
    std::fclose(f);
  }
  return bytes;
}

}  // namespace

double memory_available() {
  double available = read_kib_field("/proc/meminfo", "MemAvailable");
  const double limit = read_number_file("/sys/fs/cgroup/memory.max");
  const double used = read_number_file("/sys/fs/cgroup/memory.current");
  if (limit > 0 && used >= 0) {
    const double left = std::max(0.0, limit - used);
    available = available < 0 ? left : std::min(available, left);
  }
  return available;
}

double process_memory(const char* key) {
  return read_kib_field("/proc/self/status", key);
}

std::string memory_refusal(const MemoryNeed& need, int ranks_here, double available,
                           const std::string& where) {
  if (available < 0) return {};  // nothing to compare with: the run goes ahead
  const double total = need.per_rank * ranks_here + need.once;
  // The other programs on the machine move: keep a tenth of what is free for them.
  if (total <= 0.9 * available) return {};
  return fmt::format(
      "this run needs about {} of {} ({} rank{} x {} each{}), but {} is available; use {} or fewer "
      "ranks",
      format_bytes(total), where, ranks_here, ranks_here == 1 ? "" : "s",
      format_bytes(need.per_rank),
      need.once > 0 ? fmt::format(" + {} once", format_bytes(need.once)) : "",
      format_bytes(available), need.shrink);
}

void Lesson::check_memory(const World& world) {
  MemoryNeed need = needs_memory_ ? needs_memory_(world) : MemoryNeed{};
  // Under distlab's launcher every process is on this machine (namespaces share its memory).
  const int here =
      world.mode == Mode::threads
          ? world.size
          : std::max(
                1, env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "DISTLAB_WORLD_SIZE"},
                           1));
  if (world.device == Device::cuda) {
    // The buffers live on the GPUs, shared round-robin by the ranks; the host keeps the rest.
    const int devices = std::max(1, cuda_device_count());
    const int per_device = (here + devices - 1) / devices;
    const std::string gpu = memory_refusal({need.per_rank, 0, need.shrink}, per_device,
                                           cuda_free_bytes(0), "GPU memory on device 0");
    if (!gpu.empty()) throw UsageError(gpu);
    need.per_rank = 0;
  }
  need.per_rank += world.mode == Mode::threads ? kRankOverheadBytes : 0;
  const std::string host = memory_refusal(need, here, memory_available(), "memory");
  if (!host.empty()) throw UsageError(host);
  planned_bytes_ = need.per_rank * here + need.once;
  resident_start_ = process_memory("VmRSS");
}

// What a rank that ran out of memory says (std::bad_alloc, or a container asked for more than
// it can hold): the check before the run let it through, so the estimate was short.
std::string out_of_memory(int rank) {
  return fmt::format(
      "rank {} ran out of memory: this run needs more than the {} available; use a smaller --size "
      "or "
      "fewer ranks",
      rank, format_bytes(memory_available()));
}

}  // namespace distlab
