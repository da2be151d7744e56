// cublas_library.cpp — finding and opening cuBLAS at run time (cublas_library.hpp).
#include "core/device/cublas_library.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>
#include <type_traits>
#include <vector>

#include "core/base/check.hpp"

namespace distlab {

namespace {

// The directory of the libcudart this process runs on, with a trailing slash; "" if unknown.
std::string cudart_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaRuntimeGetVersion), &info) == 0 || !info.dli_fname)
    return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

CublasLibrary open_cublas() {
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::vector<std::string> candidates{soname};  // as the loader finds it, then beside libcudart
  if (const std::string dir = cudart_directory(); !dir.empty()) candidates.push_back(dir + soname);
  void* handle = nullptr;
  std::string why;
  for (const std::string& file : candidates) {
    if ((handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    why += (why.empty() ? "" : "; ") + std::string(dlerror());
  }
  DL_CHECK(handle != nullptr,
           "cuBLAS could not be opened ({}); put the CUDA toolkit's library directory on "
           "LD_LIBRARY_PATH",
           why);
  CublasLibrary lib;
  auto find = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    DL_CHECK(fn != nullptr, "{} has no {}: is it cuBLAS {}?", soname, name, CUBLAS_VER_MAJOR);
  };
  find(lib.create, "cublasCreate_v2");
  find(lib.destroy, "cublasDestroy_v2");
  find(lib.set_stream, "cublasSetStream_v2");
  find(lib.set_math_mode, "cublasSetMathMode");
  find(lib.gemm_ex, "cublasGemmEx");
  find(lib.status_string, "cublasGetStatusString");
  return lib;  // the handle stays open for the life of the process
}

}  // namespace

const CublasLibrary& cublas() {
  static const CublasLibrary lib = open_cublas();  // a throw leaves it to the next call
  return lib;
}

}  // namespace distlab
