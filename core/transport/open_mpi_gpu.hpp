// open_mpi_gpu.hpp — the transport of an mpirun with --device cuda: nccl or staged.
//
// Every rank counts the ranks of its node (MPI_Comm_split_type, shared memory) and the distinct
// GPUs they are bound to (device UUIDs: right also when CUDA_VISIBLE_DEVICES gives each rank its
// own), every rank learns every node's counts, and each makes the same choice
// (choose_mpi_gpu_transport). When staging instead of NCCL, rank 0 prints one line saying why.
#pragma once

#include <memory>
#include <string>

#include "core/transport/choice.hpp"
#include "core/transport/mpi.hpp"

namespace distlab {

// Collective, after every rank bound its GPU. Throws UsageError on every rank alike when
// `requested` (--transport) cannot be had, Error when NCCL fails to start.
std::unique_ptr<Transport> open_mpi_gpu_transport(MpiTransport& mpi, const std::string& requested);

// This node's ranks and the distinct GPUs they use (collective over the node's ranks).
NodeGpus count_node_gpus(MpiTransport& mpi);

}  // namespace distlab
