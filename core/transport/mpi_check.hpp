// mpi_check.hpp — DL_MPI_CHECK: an MPI call that fails throws Error naming the call and MPI's
// error string. Use it only where mpi.h is included (the MPI transport and what calls MPI).
#pragma once

#include <string>

#include "core/base/check.hpp"

namespace distlab {

// MPI's text for an error code (defined with the MPI transport, mpi.cpp).
std::string mpi_error_string(int code);

}  // namespace distlab

// Checks an MPI call: names the call and MPI's error string.
#define DL_MPI_CHECK(call)                                     \
  do {                                                         \
    const int dl_mpi_rc = (call);                              \
    DL_CHECK(dl_mpi_rc == MPI_SUCCESS, "{} failed: {}", #call, \
             ::distlab::mpi_error_string(dl_mpi_rc));          \
  } while (0)
