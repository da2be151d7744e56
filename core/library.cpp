#include "library.hpp"

#include "check.hpp"
#include "partition.hpp"

#ifdef DISTLAB_HAVE_MPI
#include <mpi.h>

#include <vector>

#include "transport_mpi.hpp"
#endif

namespace distlab::library {

bool available(const Comm& comm) {
#ifdef DISTLAB_HAVE_MPI
  return comm.world().mode == Mode::mpi;
#else
  (void)comm;
  return false;
#endif
}

#ifndef DISTLAB_HAVE_MPI

#define DL_NO_MPI DL_FAIL("the MPI library is not in this build")
std::string scatter(Comm&, const void*, void*, std::size_t, DType, int) { DL_NO_MPI; }
std::string gather(Comm&, const void*, void*, std::size_t, DType, int) { DL_NO_MPI; }
std::string broadcast(Comm&, void*, std::size_t, DType, int) { DL_NO_MPI; }
std::string reduce(Comm&, const void*, void*, std::size_t, DType, int) { DL_NO_MPI; }
std::string all_gather(Comm&, const void*, void*, std::size_t, DType) { DL_NO_MPI; }
std::string reduce_scatter(Comm&, const void*, void*, std::size_t, DType) { DL_NO_MPI; }
std::string all_reduce(Comm&, const void*, void*, std::size_t, DType) { DL_NO_MPI; }

#else

namespace {

MPI_Comm mpi_comm(Comm& comm) {
  auto* t = dynamic_cast<MpiTransport*>(&comm.transport());
  DL_CHECK(t != nullptr, "the MPI library collectives need the lesson to run under mpirun");
  return t->comm();
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::u8: return MPI_UNSIGNED_CHAR;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

int as_count(std::size_t n) {
  DL_CHECK(n <= static_cast<std::size_t>(INT32_MAX), "{} elements is more than one MPI call can count", n);
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

}  // namespace

std::string scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype, int root) {
  const Layout l(length, comm.size());
  const MPI_Datatype t = mpi_type(dtype);
  const int mine = l.counts[static_cast<std::size_t>(comm.rank())];
  if (l.equal) {
    DL_MPI_CHECK(MPI_Scatter(send, mine, t, recv, mine, t, root, mpi_comm(comm)));
    return "MPI_Scatter";
  }
  DL_MPI_CHECK(MPI_Scatterv(send, l.counts.data(), l.displs.data(), t, recv, mine, t, root, mpi_comm(comm)));
  return "MPI_Scatterv";
}

std::string gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype, int root) {
  const Layout l(length, comm.size());
  const MPI_Datatype t = mpi_type(dtype);
  const int mine = l.counts[static_cast<std::size_t>(comm.rank())];
  if (l.equal) {
    DL_MPI_CHECK(MPI_Gather(send, mine, t, recv, mine, t, root, mpi_comm(comm)));
    return "MPI_Gather";
  }
  DL_MPI_CHECK(MPI_Gatherv(send, mine, t, recv, l.counts.data(), l.displs.data(), t, root, mpi_comm(comm)));
  return "MPI_Gatherv";
}

std::string broadcast(Comm& comm, void* data, std::size_t length, DType dtype, int root) {
  DL_MPI_CHECK(MPI_Bcast(data, as_count(length), mpi_type(dtype), root, mpi_comm(comm)));
  return "MPI_Bcast";
}

std::string reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype, int root) {
  DL_MPI_CHECK(MPI_Reduce(send, recv, as_count(length), mpi_type(dtype), MPI_SUM, root, mpi_comm(comm)));
  return "MPI_Reduce";
}

std::string all_gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype) {
  const Layout l(length, comm.size());
  const MPI_Datatype t = mpi_type(dtype);
  const int mine = l.counts[static_cast<std::size_t>(comm.rank())];
  if (l.equal) {
    DL_MPI_CHECK(MPI_Allgather(send, mine, t, recv, mine, t, mpi_comm(comm)));
    return "MPI_Allgather";
  }
  DL_MPI_CHECK(MPI_Allgatherv(send, mine, t, recv, l.counts.data(), l.displs.data(), t, mpi_comm(comm)));
  return "MPI_Allgatherv";
}

std::string reduce_scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype) {
  const Layout l(length, comm.size());
  const MPI_Datatype t = mpi_type(dtype);
  if (l.equal) {
    DL_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, l.counts[0], t, MPI_SUM, mpi_comm(comm)));
    return "MPI_Reduce_scatter_block";
  }
  DL_MPI_CHECK(MPI_Reduce_scatter(send, recv, l.counts.data(), t, MPI_SUM, mpi_comm(comm)));
  return "MPI_Reduce_scatter";
}

std::string all_reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype) {
  // send == recv: in place, as MPI spells it.
  DL_MPI_CHECK(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, as_count(length), mpi_type(dtype), MPI_SUM, mpi_comm(comm)));
  return "MPI_Allreduce";
}

#endif

}  // namespace distlab::library
