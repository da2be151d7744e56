// baseline.hpp — the libraries' own collectives, for comparison only.
//
// Under distlab's launcher (--procs N --transport gloo) they are Gloo's (baseline_gloo.cpp).
//
// Under mpirun, lessons run MPI_Scatter, MPI_Gather, MPI_Reduce, MPI_Bcast, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Allreduce and MPI_Alltoall on the same data and check that
// distlab's step-by-step versions agree. Where N does not divide the length the v-variants
// (MPI_Scatterv, MPI_Gatherv, MPI_Allgatherv) and MPI_Reduce_scatter take their place.
//
// With --device cuda the buffers are GPU memory and the calls are NCCL's: ncclAllReduce,
// ncclAllGather, ncclReduceScatter, ncclBroadcast, ncclReduce, ncclScatter and ncclGather (N
// not dividing the length: a group of ncclBroadcast, ncclReduce or ncclSend / ncclRecv). Under
// mpirun they use the NCCL transport's communicator; when ranks share a GPU (the staged
// transport) the MPI calls run on host copies instead. On in-process ranks each rank thread
// makes its own communicator from one shared id (ncclCommInitRankConfig, as NCCL's
// one-device-per-thread example does), which needs every rank on its own GPU: NCCL refuses
// two ranks of one communicator on one GPU. Each call returns when its result is in place.
//
// available() says whether the calls can run here; unavailable_reason() says why not. They
// throw otherwise.
#pragma once

#include <string>
#include <vector>

#include "core/comm/comm.hpp"

namespace distlab::baseline {

bool available(const Comm& comm);
// A sentence: why available() is false ("" when it is true).
std::string unavailable_reason(const Comm& comm);

// Raw forms: counts in elements of dtype; `length` is the whole buffer's length; the pointers
// are memory of comm.device(). Each returns the name of the call it made. In place, as MPI and
// NCCL spell it: all_reduce with send == recv; reduce with send == recv on the root; scatter
// with recv at the root's own chunk of send, gather with send at the root's chunk of recv,
// all_gather with send at the rank's chunk of recv, reduce_scatter with recv at the rank's
// chunk of send (MPI_IN_PLACE where MPI has it; one buffer is never passed as two).
std::string scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                    int root);
std::string gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                   int root);
std::string broadcast(Comm& comm, void* data, std::size_t length, DType dtype, int root);
std::string reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                   int root);
std::string all_gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype);
std::string reduce_scatter(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype);
std::string all_reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype);
// length: the whole buffer, N equal blocks (block j of send to rank j, block i of recv from
// rank i); send and recv do not overlap. MPI_Alltoall; on GPUs a group of ncclSend / ncclRecv.
std::string all_to_all(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype);

// Under distlab's launcher (--transport gloo), Gloo's other all-reduces, by name: "bcube" (its
// options API's second algorithm) and "halving_doubling" (its algorithm class, which sums in
// place: recv gets send's values first). all_reduce above is Gloo's ring.
const std::vector<std::string>& gloo_all_reduce_algorithms();
std::string gloo_all_reduce_as(Comm& comm, const std::string& algorithm, const void* send,
                               void* recv, std::size_t length, DType dtype);

}  // namespace distlab::baseline
