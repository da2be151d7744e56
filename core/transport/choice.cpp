// choice.cpp — nccl or staged under mpirun with GPUs (choice.hpp).
#include "core/transport/choice.hpp"

#include <fmt/format.h>

#include "core/base/check.hpp"

namespace distlab {

const char* to_string(GpuTransport t) {
  return t == GpuTransport::nccl ? "nccl" : "staged";
}

void check_transport_request(const std::string& requested, Mode mode, Device device) {
  if (requested != "nccl") return;
  if (mode == Mode::threads)
    throw UsageError(
        "--transport nccl needs one process per rank, started by mpirun (e.g. mpirun -np 4 ... "
        "--device cuda); "
        "in-process ranks copy GPU buffers directly with cudaMemcpyPeerAsync: leave --transport "
        "out");
  if (device != Device::cuda)
    throw UsageError(
        "--transport nccl moves GPU memory, but this run is on the CPU: add --device cuda");
}

GpuTransportChoice choose_mpi_gpu_transport(const std::string& requested,
                                            const std::vector<NodeGpus>& nodes, bool nccl_built) {
  // The most crowded node decides: NCCL needs every rank of every node on a GPU of its own.
  const NodeGpus* worst = nullptr;
  for (const auto& n : nodes)
    if (n.ranks > n.gpus && (!worst || n.ranks - n.gpus > worst->ranks - worst->gpus)) worst = &n;
  const std::string crowding = worst ? fmt::format("{} ranks share {} GPU{}{}", worst->ranks,
                                                   worst->gpus, worst->gpus == 1 ? "" : "s",
                                                   worst->host.empty() ? "" : " on " + worst->host)
                                     : "";

  GpuTransportChoice c;
  if (requested == "mpi") return c;  // staged, as asked: no note
  if (requested == "nccl") {
    if (!nccl_built)
      throw UsageError(
          "--transport nccl: this build has no NCCL (nccl.h and libnccl were not found next to "
          "CUDA at configure "
          "time); leave --transport out to send GPU buffers through host memory");
    if (worst)
      throw UsageError(
          fmt::format("--transport nccl needs a GPU for every rank, but {}: NCCL refuses two ranks "
                      "of one communicator on one "
                      "GPU. Start at most {} rank{} per node, or leave --transport out to send "
                      "through host memory (MPI)",
                      crowding, worst->gpus, worst->gpus == 1 ? "" : "s"));
    c.transport = GpuTransport::nccl;
    return c;
  }
  DL_CHECK(requested == "auto", "--transport {} under mpirun with --device cuda", requested);
  if (!nccl_built) {
    c.note =
        "note: this build has no NCCL, so GPU buffers travel through pinned host memory and MPI "
        "(staged)";
  } else if (worst) {
    c.note = fmt::format(
        "note: {}; NCCL needs a GPU per rank, so GPU buffers travel through pinned host memory and "
        "MPI (staged)",
        crowding);
  } else {
    c.transport = GpuTransport::nccl;
  }
  return c;
}

}  // namespace distlab
