// baseline_detail.hpp — the two halves of baseline.hpp: MPI's calls on host memory (baseline.cpp)
// and the GPU forms (baseline_gpu.cpp). Internal to core.
#pragma once

#include <string>

#include "core/comm/comm.hpp"

namespace distlab::baseline::detail {

// MPI on host memory (throw without MPI).
std::string mpi_scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                        int root);
std::string mpi_gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                       int root);
std::string mpi_broadcast(Comm& comm, void* data, std::size_t length, DType dtype, int root);
std::string mpi_reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                       int root);
std::string mpi_all_gather(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype);
std::string mpi_reduce_scatter(Comm& comm, const void* send, void* recv, std::size_t length,
                               DType dtype);
std::string mpi_all_reduce(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype);
std::string mpi_all_to_all(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype);

// For tests: the NCCL calls' unequal-chunk forms (groups of ncclBroadcast, ncclReduce,
// ncclSend/ncclRecv) also where the chunks are equal, on the calling thread, so that one GPU
// (one rank, every chunk equal) runs them too. Off by default.
// Gloo's (baseline_gloo.cpp): on host memory under distlab's launcher.
bool gloo_run(const Comm& comm);
std::string gloo_scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                         int root);
std::string gloo_gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                        int root);
std::string gloo_broadcast(Comm& comm, void* data, std::size_t length, DType dtype, int root);
std::string gloo_reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                        int root);
std::string gloo_all_gather(Comm& comm, const void* send, void* recv, std::size_t length,
                            DType dtype);
std::string gloo_reduce_scatter(Comm& comm, const void* send, void* recv, std::size_t length,
                                DType dtype);
std::string gloo_all_reduce(Comm& comm, const void* send, void* recv, std::size_t length,
                            DType dtype);
std::string gloo_all_to_all(Comm& comm, const void* send, void* recv, std::size_t length,
                            DType dtype);

void set_nccl_chunked_forms(bool on);

// GPU memory: NCCL, or MPI on host copies under the staged transport (throw without CUDA).
bool gpu_available(const Comm& comm, std::string* why);
std::string gpu_scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                        int root);
std::string gpu_gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                       int root);
std::string gpu_broadcast(Comm& comm, void* data, std::size_t length, DType dtype, int root);
std::string gpu_reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                       int root);
std::string gpu_all_gather(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype);
std::string gpu_reduce_scatter(Comm& comm, const void* send, void* recv, std::size_t length,
                               DType dtype);
std::string gpu_all_reduce(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype);
std::string gpu_all_to_all(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype);

}  // namespace distlab::baseline::detail
