// library.hpp — the MPI library's own collectives, for comparison only.
//
// Under mpirun, lessons run MPI_Scatter, MPI_Gather, MPI_Reduce, MPI_Bcast, MPI_Allgather,
// MPI_Reduce_scatter_block and MPI_Allreduce on the same data and check that distlab's
// step-by-step versions agree. Where N does not divide the length the v-variants
// (MPI_Scatterv, MPI_Gatherv, MPI_Allgatherv) and MPI_Reduce_scatter take their place.
// available() is false on in-process ranks; the calls then throw.
#pragma once

#include <string>

#include "comm.hpp"

namespace distlab::library {

bool available(const Comm& comm);

// Raw forms: counts in elements of dtype; `length` is the whole buffer's length.
// Each returns the name of the MPI call it made. all_reduce with send == recv works in place.
std::string scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype, int root);
std::string gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype, int root);
std::string broadcast(Comm& comm, void* data, std::size_t length, DType dtype, int root);
std::string reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype, int root);
std::string all_gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype);
std::string reduce_scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype);
std::string all_reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype);

}  // namespace distlab::library
