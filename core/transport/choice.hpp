// choice.hpp — which transport carries a run's messages.
//
//   in-process ranks            threads: memcpy on the CPU, cudaMemcpyPeerAsync on GPUs
//   mpirun, --device cpu        mpi: Open MPI point-to-point
//   mpirun, --device cuda       nccl: ncclSend / ncclRecv, when every rank has a GPU of its own
//                               staged: MPI through pinned host buffers, when ranks share a GPU
//
// NCCL refuses two ranks of one communicator on one GPU, so under mpirun the choice depends
// on how many ranks each node runs against how many distinct GPUs they are bound to (rank r of
// a node takes GPU r % count, unless CUDA_VISIBLE_DEVICES gives each its own). The decision is
// a pure function of those numbers, so every rank makes the same one without talking, and the
// tests check it on the CPU. --transport nccl asks for NCCL and fails with a sentence when it
// cannot be had; --transport mpi asks for the staged path.
#pragma once

#include <string>
#include <vector>

#include "core/base/world.hpp"

namespace distlab {

enum class GpuTransport { nccl, staged };

// One node of an mpirun: its ranks and the distinct GPUs they are bound to.
struct NodeGpus {
  int ranks = 0;
  int gpus = 0;
  std::string host;
};

struct GpuTransportChoice {
  GpuTransport transport = GpuTransport::staged;
  std::string note;  // one line rank 0 prints when the run falls back to staging ("" none)
};

// --transport against the run mode and device, before any rank starts: throws UsageError with
// a sentence for nccl on in-process ranks or on the CPU.
void check_transport_request(const std::string& requested, Mode mode, Device device);

// mpirun + cuda. requested: auto, mpi or nccl; nodes: one entry per node (or per rank: repeats
// change nothing). Throws UsageError when nccl is asked for and cannot be had.
GpuTransportChoice choose_mpi_gpu_transport(const std::string& requested,
                                            const std::vector<NodeGpus>& nodes, bool nccl_built);

const char* to_string(GpuTransport t);

}  // namespace distlab
