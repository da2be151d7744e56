// check.hpp — one place for error checks.
//
// DL_CHECK(cond, fmt, args...) throws distlab::Error with file:line and a formatted message.
// DL_MPI_CHECK (core/transport/mpi_check.hpp) and DL_CUDA_CHECK / DL_CUBLAS_CHECK / DL_NCCL_CHECK
// (core/device/cuda_check.hpp) have the same shape, for MPI and CUDA code.
// The runtime catches Error on any rank and ends every rank with that rank's message.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace distlab {

// A failure the user or the program can act on; the message is one sentence.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input: reported as one sentence, exit status 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void fail_at(const char* file, int line, const std::string& message);

}  // namespace distlab

#define DL_CHECK(cond, ...)                                                          \
  do {                                                                               \
    if (!(cond)) ::distlab::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define DL_FAIL(...) ::distlab::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
