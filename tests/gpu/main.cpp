// main.cpp — the GPU tests' entry: with no CUDA device they report "skipped" to CTest (exit 77,
// the tests' SKIP_RETURN_CODE), never a silent pass; with one, Catch2 runs them all.
// `distlab_gpu_tests --probe` only answers: 0 when a device answers, 77 when not (run_gpu.sh).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string_view>

#include "core/device.hpp"

int main(int argc, char** argv) {
  const bool probe = argc == 2 && std::string_view(argv[1]) == "--probe";
  if (!distlab::built_with_cuda() || distlab::cuda_device_count() == 0) {
    fmt::print("SKIPPED: {}; the GPU tests need one\n",
               distlab::built_with_cuda() ? "no CUDA device answers on this machine" : "this build has no CUDA");
    return 77;
  }
  if (probe) return 0;
  return Catch::Session().run(argc, argv);
}
