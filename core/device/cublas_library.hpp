// cublas_library.hpp — cuBLAS, opened the first time a rank asks for it.
//
// Linking libcublas makes every process pay for libcublasLt's static constructors when it
// starts: about half a second of CPU on a CI machine, in every lesson, probe and unit test run,
// most of which never touch a GPU. So no binary links it (distlab_gpu_tests does, to print its
// version and to fail at load when it is missing); the few calls distlab makes are looked up
// here with dlopen and dlsym, once per process.
//
// The library is looked for by its soname (libcublas.so.N, N the major version this build was
// compiled against): first as the loader finds it (LD_LIBRARY_PATH, the program's RUNPATH, the
// system's cache), then beside the libcudart this process runs on. Not found, or missing one of
// the calls, is an Error saying which file and what dlopen said.
//
// Include only where cuBLAS's headers are (CUDA code): the pointers have cuBLAS's own types.
#pragma once

#include <cublas_v2.h>

namespace distlab {

// cublasGemmEx as the library exports it (the header also has an inline C++ overload taking the
// compute type as a cudaDataType, so decltype cannot name it).
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                        int, int, const void* alpha, const void* a, cudaDataType,
                                        int lda, const void* b, cudaDataType, int ldb,
                                        const void* beta, void* c, cudaDataType, int ldc,
                                        cublasComputeType_t, cublasGemmAlgo_t);

struct CublasLibrary {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  CublasGemmEx gemm_ex = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
};

// The process's cuBLAS, opened on the first call (thread-safe); throws Error when it cannot be.
const CublasLibrary& cublas();

}  // namespace distlab
