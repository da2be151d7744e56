// open_mpi_gpu.cpp — choosing and opening the GPU transport under mpirun (open_mpi_gpu.hpp).
#include "core/transport/open_mpi_gpu.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/base/check.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/cuda_context.hpp"
#include "core/transport/mpi_check.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/transport/staged.hpp"
#endif
#ifdef DISTLAB_HAVE_NCCL
#include "core/transport/nccl.hpp"
#endif

namespace distlab {

#ifdef DISTLAB_HAVE_CUDA

NodeGpus count_node_gpus(MpiTransport& mpi) {
  MPI_Comm node = MPI_COMM_NULL;
  DL_MPI_CHECK(
      MPI_Comm_split_type(mpi.comm(), MPI_COMM_TYPE_SHARED, mpi.rank(), MPI_INFO_NULL, &node));
  int local = 0;
  MPI_Comm_size(node, &local);
  cudaDeviceProp prop{};
  DL_CUDA_CHECK(cudaGetDeviceProperties(&prop, cuda_rank().device));
  constexpr int kUuid = sizeof prop.uuid.bytes;
  std::vector<char> uuids(static_cast<std::size_t>(local) * kUuid);
  DL_MPI_CHECK(
      MPI_Allgather(prop.uuid.bytes, kUuid, MPI_BYTE, uuids.data(), kUuid, MPI_BYTE, node));
  MPI_Comm_free(&node);
  std::set<std::string> gpus;
  for (int r = 0; r < local; ++r)
    gpus.emplace(uuids.data() + static_cast<std::size_t>(r) * kUuid, kUuid);
  return {local, static_cast<int>(gpus.size()), mpi.host()};
}

std::unique_ptr<Transport> open_mpi_gpu_transport(MpiTransport& mpi, const std::string& requested) {
  // Every rank learns every node's counts, so every rank makes the same choice.
  struct Wire {
    int ranks, gpus;
    char host[64];
  };
  const NodeGpus mine = count_node_gpus(mpi);
  Wire w{mine.ranks, mine.gpus, {}};
  std::strncpy(w.host, mine.host.c_str(), sizeof w.host - 1);
  std::vector<Wire> all(static_cast<std::size_t>(mpi.size()));
  DL_MPI_CHECK(MPI_Allgather(&w, sizeof w, MPI_BYTE, all.data(), sizeof w, MPI_BYTE, mpi.comm()));
  std::vector<NodeGpus> nodes;
  for (const auto& a : all) nodes.push_back({a.ranks, a.gpus, std::string(a.host)});
#ifdef DISTLAB_HAVE_NCCL
  constexpr bool kNccl = true;
#else
  constexpr bool kNccl = false;
#endif
  const GpuTransportChoice choice = choose_mpi_gpu_transport(requested, nodes, kNccl);
  if (!choice.note.empty() && mpi.rank() == 0) {
    std::printf("%s\n", choice.note.c_str());
    std::fflush(stdout);
  }
#ifdef DISTLAB_HAVE_NCCL
  if (choice.transport == GpuTransport::nccl) return std::make_unique<NcclTransport>(mpi);
#endif
  return std::make_unique<StagedTransport>(mpi);
}

#else

NodeGpus count_node_gpus(MpiTransport&) {
  DL_FAIL("GPU count asked for in a build without CUDA");
}
std::unique_ptr<Transport> open_mpi_gpu_transport(MpiTransport&, const std::string&) {
  DL_FAIL("a GPU transport asked for in a build without CUDA");
}

#endif

}  // namespace distlab
