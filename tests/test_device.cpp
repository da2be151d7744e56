// allocator.hpp and world.hpp: allocation, copies, --device resolution, element types.
#include "catch.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/dtype.hpp"
#include "core/base/world.hpp"
#include "core/device/allocator.hpp"

using namespace distlab;

TEST_CASE("device_alloc on the CPU gives 64-byte aligned memory, zero bytes give null",
          "[device]") {
  CHECK(device_alloc(Device::cpu, 0) == nullptr);
  for (std::size_t bytes : {1ul, 63ul, 64ul, 65ul, 4096ul, 1ul << 20}) {
    void* p = device_alloc(Device::cpu, bytes);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
    std::memset(p, 0xab, bytes);  // the whole request is writable (ASan would see otherwise)
    device_free(Device::cpu, p, bytes);
  }
  device_free(Device::cpu, nullptr, 0);  // a no-op
}

TEST_CASE("device_copy copies host to host, zero bytes touch nothing", "[device]") {
  std::vector<std::uint8_t> src(1000), dst(1000, 0);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 7);
  device_copy(dst.data(), Device::cpu, src.data(), Device::cpu, src.size());
  CHECK(dst == src);
  device_copy(nullptr, Device::cpu, nullptr, Device::cpu, 0);
}

TEST_CASE(
    "resolve_device: cpu is the CPU, auto the GPU when one answers, anything else a usage error",
    "[device]") {
  const bool gpu = built_with_cuda() && cuda_device_count() > 0;
  CHECK(resolve_device("cpu") == Device::cpu);
  CHECK(resolve_device("auto") == (gpu ? Device::cuda : Device::cpu));
  CHECK_THROWS_AS(resolve_device("gpu"), UsageError);
  CHECK_THROWS_WITH(resolve_device("gpu"),
                    Catch::Contains("auto, cpu or cuda") && Catch::Contains("'gpu'"));
}

TEST_CASE("resolve_device: cuda says why it cannot be used on this build and machine", "[device]") {
  const int devices = cuda_device_count();
  CHECK(devices >= 0);
  if (!built_with_cuda()) CHECK(devices == 0);
  if (built_with_cuda() && devices > 0) {
    CHECK(resolve_device("cuda") == Device::cuda);
    return;
  }
  // The sentence names the actual reason, and the way out.
  const char* why =
      !built_with_cuda() ? "this build has no CUDA support" : "no CUDA device answers";
  CHECK_THROWS_AS(resolve_device("cuda"), UsageError);
  CHECK_THROWS_WITH(resolve_device("cuda"),
                    Catch::Contains(why) && Catch::Contains("--device cpu"));
}

TEST_CASE("element types: dtype_of, dtype_size and names agree", "[world]") {
  STATIC_REQUIRE(dtype_of<float>() == DType::f32);
  STATIC_REQUIRE(dtype_of<const double>() == DType::f64);
  STATIC_REQUIRE(dtype_of<std::int32_t>() == DType::i32);
  STATIC_REQUIRE(dtype_of<std::int64_t>() == DType::i64);
  STATIC_REQUIRE(dtype_of<std::uint8_t>() == DType::u8);
  CHECK(dtype_size(DType::u8) == 1);
  CHECK(dtype_size(DType::i32) == 4);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(std::string(to_string(DType::f32)) == "f32");
  CHECK(std::string(to_string(DType::i64)) == "i64");
  CHECK(std::string(to_string(Mode::threads)) == "threads");
  CHECK(std::string(to_string(Mode::mpi)) == "mpi");
  CHECK(std::string(to_string(Device::cpu)) == "cpu");
  CHECK(std::string(to_string(Device::cuda)) == "cuda");
}
