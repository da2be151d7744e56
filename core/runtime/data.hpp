// data.hpp — the lessons' input data, the same on every transport and computable anywhere.
//
// value(seed, rank, i) is a pure function, so every rank (and every reference) can compute
// any rank's input without being sent it. Values are floats in [-1, 1) stored exactly in
// every supported element type's reach (integers get small whole numbers instead).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/base/mix.hpp"
#include "core/device/buffer.hpp"

namespace distlab {

// The i-th input element of `rank`, as a T.
template <class T>
T input_value(std::uint64_t seed, int rank, std::uint64_t i) {
  const std::uint64_t h =
      splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(rank) * 0x100000001b3ull + i));
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(
        static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0));
  else
    return static_cast<T>(static_cast<std::int64_t>(h >> 58) - 32);  // whole numbers in [-32, 32)
}

// Fills `out` with elements [offset, offset + n) of rank's input (a GPU view through a host copy).
template <class T>
void fill_input(View<T> out, std::uint64_t seed, int rank, std::uint64_t offset = 0) {
  if (out.device != Device::cpu) {
    std::vector<T> host(out.n);
    fill_input(View<T>{host.data(), host.size(), Device::cpu}, seed, rank, offset);
    from_host(out, host);
    return;
  }
  for (std::size_t i = 0; i < out.n; ++i) out.ptr[i] = input_value<T>(seed, rank, offset + i);
}

}  // namespace distlab
