// baseline.cpp — MPI's collectives on host memory, and the dispatch to the GPU forms
// (baseline_gpu.cpp) when the run is on CUDA.
#include "core/collectives/baseline.hpp"

#include "core/base/check.hpp"
#include "core/base/partition.hpp"
#include "core/collectives/baseline_detail.hpp"

#ifdef DISTLAB_HAVE_MPI
#include <mpi.h>

#include <cstring>
#include <vector>

#include "core/transport/mpi.hpp"
#include "core/transport/mpi_check.hpp"
#endif

namespace distlab::baseline {

using namespace detail;

namespace {
bool on_gpu(const Comm& comm) {
  return comm.device() == Device::cuda;
}
}  // namespace

bool available(const Comm& comm) {
  return unavailable_reason(comm).empty();
}

std::string unavailable_reason(const Comm& comm) {
  std::string why;
  if (on_gpu(comm)) {
    gpu_available(comm, &why);
    return why;
  }
  if (comm.world().mode == Mode::gloo) return {};  // Gloo's, under distlab's launcher
#ifdef DISTLAB_HAVE_MPI
  if (comm.world().mode == Mode::mpi) return {};
  return "the library collectives on the CPU are MPI's under mpirun and Gloo's under "
         "distlab's launcher (--procs): in-process ranks have neither";
#else
  return "the library collectives on the CPU are MPI's (this build has no MPI) or Gloo's under "
         "distlab's launcher (--procs)";
#endif
}

std::string scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                    int root) {
  if (on_gpu(comm)) return gpu_scatter(comm, send, recv, length, dtype, root);
  return gloo_run(comm) ? gloo_scatter(comm, send, recv, length, dtype, root)
                        : mpi_scatter(comm, send, recv, length, dtype, root);
}
std::string gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                   int root) {
  if (on_gpu(comm)) return gpu_gather(comm, send, recv, length, dtype, root);
  return gloo_run(comm) ? gloo_gather(comm, send, recv, length, dtype, root)
                        : mpi_gather(comm, send, recv, length, dtype, root);
}
std::string broadcast(Comm& comm, void* data, std::size_t length, DType dtype, int root) {
  if (on_gpu(comm)) return gpu_broadcast(comm, data, length, dtype, root);
  return gloo_run(comm) ? gloo_broadcast(comm, data, length, dtype, root)
                        : mpi_broadcast(comm, data, length, dtype, root);
}
std::string reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                   int root) {
  if (on_gpu(comm)) return gpu_reduce(comm, send, recv, length, dtype, root);
  return gloo_run(comm) ? gloo_reduce(comm, send, recv, length, dtype, root)
                        : mpi_reduce(comm, send, recv, length, dtype, root);
}
std::string all_gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype) {
  if (on_gpu(comm)) return gpu_all_gather(comm, send, recv, length, dtype);
  return gloo_run(comm) ? gloo_all_gather(comm, send, recv, length, dtype)
                        : mpi_all_gather(comm, send, recv, length, dtype);
}
std::string reduce_scatter(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype) {
  if (on_gpu(comm)) return gpu_reduce_scatter(comm, send, recv, length, dtype);
  return gloo_run(comm) ? gloo_reduce_scatter(comm, send, recv, length, dtype)
                        : mpi_reduce_scatter(comm, send, recv, length, dtype);
}
std::string all_reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype) {
  if (on_gpu(comm)) return gpu_all_reduce(comm, send, recv, length, dtype);
  return gloo_run(comm) ? gloo_all_reduce(comm, send, recv, length, dtype)
                        : mpi_all_reduce(comm, send, recv, length, dtype);
}
std::string all_to_all(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype) {
  DL_CHECK(length % std::size_t(comm.size()) == 0,
           "all-to-all: {} elements are not {} equal blocks", length, comm.size());
  if (on_gpu(comm)) return gpu_all_to_all(comm, send, recv, length, dtype);
  return gloo_run(comm) ? gloo_all_to_all(comm, send, recv, length, dtype)
                        : mpi_all_to_all(comm, send, recv, length, dtype);
}

}  // namespace distlab::baseline

namespace distlab::baseline::detail {

#ifndef DISTLAB_HAVE_MPI

#define DL_NO_MPI DL_FAIL("the MPI library is not in this build")
std::string mpi_scatter(Comm&, const void*, void*, std::size_t, DType, int) {
  DL_NO_MPI;
}
std::string mpi_gather(Comm&, const void*, void*, std::size_t, DType, int) {
  DL_NO_MPI;
}
std::string mpi_broadcast(Comm&, void*, std::size_t, DType, int) {
  DL_NO_MPI;
}
std::string mpi_reduce(Comm&, const void*, void*, std::size_t, DType, int) {
  DL_NO_MPI;
}
std::string mpi_all_gather(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_MPI;
}
std::string mpi_reduce_scatter(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_MPI;
}
std::string mpi_all_reduce(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_MPI;
}
std::string mpi_all_to_all(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_MPI;
}

#else

namespace {

// The MPI communicator under the data transport (MPI itself, or the GPU transports over it).
MPI_Comm mpi_comm(Comm& comm) {
  DL_CHECK(comm.world().mode == Mode::mpi,
           "the MPI library collectives need the lesson to run under mpirun");
  MpiTransport* t = comm.transport().mpi_transport();
  DL_CHECK(t != nullptr, "the MPI library collectives need an MPI transport under this one");
  return t->comm(comm.context());
}

// MPI's type for moving elements; a reduction needs arithmetic MPI has for it.
MPI_Datatype mpi_type(DType t, bool reduce = false) {
  switch (t) {
    case DType::u8:
      return MPI_UNSIGNED_CHAR;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16:
      DL_CHECK(!reduce, "MPI cannot sum {} elements; compare in f32", to_string(t));
      return MPI_UINT16_T;  // moved, not summed: any 2-byte type carries them
  }
  return MPI_BYTE;
}

int as_count(std::size_t n) {
  DL_CHECK(n <= static_cast<std::size_t>(INT32_MAX),
           "{} elements is more than one MPI call can count", n);
  return static_cast<int>(n);
}

// Counts and displacements of the chunks of Partition{length, size}.
struct Layout {
  std::vector<int> counts, displs;
  bool equal = true;
  Layout(std::size_t length, int size) {
    const Partition part{length, size};
    for (int r = 0; r < size; ++r) {
      counts.push_back(as_count(part.size(r)));
      displs.push_back(as_count(part.begin(r)));
    }
    equal = length % static_cast<std::size_t>(size) == 0;
  }
};

// In place, as MPI spells it (baseline.hpp): the rank's own chunk already where the call puts it.
const char* chunk_at(const void* base, std::size_t elements, DType t) {
  return static_cast<const char*>(base) + elements * dtype_size(t);
}

}  // namespace

std::string mpi_scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                        int root) {
  const Layout l(length, comm.size());
  const MPI_Datatype t = mpi_type(dtype);
  const int me = comm.rank(), mine = l.counts[static_cast<std::size_t>(me)];
  // The root's chunk left where it is in `send`: MPI_IN_PLACE, never one buffer passed twice.
  if (me == root && recv == chunk_at(send, l.displs[static_cast<std::size_t>(me)], dtype))
    recv = MPI_IN_PLACE;
  if (l.equal) {
    DL_MPI_CHECK(MPI_Scatter(send, mine, t, recv, mine, t, root, mpi_comm(comm)));
    return "MPI_Scatter";
  }
  DL_MPI_CHECK(
      MPI_Scatterv(send, l.counts.data(), l.displs.data(), t, recv, mine, t, root, mpi_comm(comm)));
  return "MPI_Scatterv";
}

std::string mpi_gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                       int root) {
  const Layout l(length, comm.size());
  const MPI_Datatype t = mpi_type(dtype);
  const int me = comm.rank(), mine = l.counts[static_cast<std::size_t>(me)];
  // The root's own chunk already in its place in `recv`.
  if (me == root && send == chunk_at(recv, l.displs[static_cast<std::size_t>(me)], dtype))
    send = MPI_IN_PLACE;
  if (l.equal) {
    DL_MPI_CHECK(MPI_Gather(send, mine, t, recv, mine, t, root, mpi_comm(comm)));
    return "MPI_Gather";
  }
  DL_MPI_CHECK(
      MPI_Gatherv(send, mine, t, recv, l.counts.data(), l.displs.data(), t, root, mpi_comm(comm)));
  return "MPI_Gatherv";
}

std::string mpi_broadcast(Comm& comm, void* data, std::size_t length, DType dtype, int root) {
  DL_MPI_CHECK(MPI_Bcast(data, as_count(length), mpi_type(dtype), root, mpi_comm(comm)));
  return "MPI_Bcast";
}

std::string mpi_reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                       int root) {
  if (comm.rank() == root && send == recv) send = MPI_IN_PLACE;  // the root's input is its output
  DL_MPI_CHECK(MPI_Reduce(send, recv, as_count(length), mpi_type(dtype, true), MPI_SUM, root,
                          mpi_comm(comm)));
  return "MPI_Reduce";
}

std::string mpi_all_gather(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype) {
  const Layout l(length, comm.size());
  const MPI_Datatype t = mpi_type(dtype);
  const int me = comm.rank(), mine = l.counts[static_cast<std::size_t>(me)];
  if (send == chunk_at(recv, l.displs[static_cast<std::size_t>(me)], dtype)) send = MPI_IN_PLACE;
  if (l.equal) {
    DL_MPI_CHECK(MPI_Allgather(send, mine, t, recv, mine, t, mpi_comm(comm)));
    return "MPI_Allgather";
  }
  DL_MPI_CHECK(
      MPI_Allgatherv(send, mine, t, recv, l.counts.data(), l.displs.data(), t, mpi_comm(comm)));
  return "MPI_Allgatherv";
}

std::string mpi_reduce_scatter(Comm& comm, const void* send, void* recv, std::size_t length,
                               DType dtype) {
  const Layout l(length, comm.size());
  const MPI_Datatype t = mpi_type(dtype, true);
  const std::size_t me = static_cast<std::size_t>(comm.rank());
  // In place (NCCL's form: the result lands on the rank's own chunk of `send`) has no MPI
  // spelling (MPI_IN_PLACE takes the result from the front of the buffer), so the result goes
  // through a buffer of its own instead of aliasing the input.
  std::vector<char> apart;
  void* into = recv;
  if (recv == chunk_at(send, l.displs[me], dtype) && l.counts[me] > 0) {
    apart.resize(static_cast<std::size_t>(l.counts[me]) * dtype_size(dtype));
    into = apart.data();
  }
  std::string name = "MPI_Reduce_scatter_block";
  if (l.equal)
    DL_MPI_CHECK(MPI_Reduce_scatter_block(send, into, l.counts[0], t, MPI_SUM, mpi_comm(comm)));
  else {
    DL_MPI_CHECK(MPI_Reduce_scatter(send, into, l.counts.data(), t, MPI_SUM, mpi_comm(comm)));
    name = "MPI_Reduce_scatter";
  }
  if (!apart.empty()) std::memcpy(recv, apart.data(), apart.size());
  return name;
}

std::string mpi_all_reduce(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype) {
  // send == recv: in place, as MPI spells it.
  DL_MPI_CHECK(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, as_count(length),
                             mpi_type(dtype, true), MPI_SUM, mpi_comm(comm)));
  return "MPI_Allreduce";
}

std::string mpi_all_to_all(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype) {
  const int block = as_count(length / std::size_t(comm.size()));
  DL_MPI_CHECK(
      MPI_Alltoall(send, block, mpi_type(dtype), recv, block, mpi_type(dtype), mpi_comm(comm)));
  return "MPI_Alltoall";
}

#endif

}  // namespace distlab::baseline::detail
