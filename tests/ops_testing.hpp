// ops_testing.hpp — what the CPU and the GPU op tests share: the roundoff of each element type,
// a float64 view of an element, and a host buffer of seeded random values.
#pragma once

#include <cstdint>
#include <random>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/base/half.hpp"
#include "core/device/buffer.hpp"

namespace distlab::testing {

// Unit roundoff of each element type: the relative error of one rounding.
template <class T>
constexpr double kRoundoff = std::is_same_v<T, float>  ? 0x1p-24
                             : std::is_same_v<T, Half> ? 0x1p-11
                                                       : 0x1p-8;

template <class T>
double d(T x) {
  return static_cast<double>(static_cast<float>(x));
}

// A host buffer of n values uniform in [lo, hi), rounded to T.
template <class T>
Buffer<T> random_buffer(Ledger& ledger, std::size_t n, std::uint32_t seed, float lo = -2.0f,
                        float hi = 2.0f) {
  Buffer<T> b(ledger, Category::data, n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (std::size_t i = 0; i < n; ++i) b[i] = T(dist(rng));
  return b;
}

// Every GEMM case the op tests run: each (m, n, k) shape in all four transpose combinations,
// with (alpha, beta) = (1, 0) (C overwritten) and (-0.5, 2) (C read and scaled).
// f(m, n, k, trans_a, trans_b, alpha, beta).
template <class F>
void for_each_gemm_case(
    const std::vector<std::tuple<std::size_t, std::size_t, std::size_t>>& shapes, F f) {
  for (const auto& [m, n, k] : shapes)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{-0.5f, 2.0f}})
          f(m, n, k, ta, tb, alpha, beta);
}

}  // namespace distlab::testing
