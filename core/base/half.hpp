// half.hpp — 16-bit floats on the host: Half (IEEE binary16) and BFloat16 (bfloat16).
//
// Both hold the raw 16 bits, so a Buffer<Half> on the GPU is, byte for byte, an array of
// CUDA's __half (and BFloat16 of __nv_bfloat16): the CUDA ops reinterpret the pointers.
// On the host they only convert; arithmetic is done in float and rounded once, as the
// GPU kernels do, so both devices round the same way.
//
//   bits        sign  exponent  mantissa   largest   smallest normal   epsilon
//   Half        1     5         10         65504     2^-14             2^-10
//   BFloat16    1     8         7          ~3.4e38   2^-126            2^-7
//
// float -> 16 bit rounds to nearest, ties to even (CUDA's __float2half_rn / __float2bfloat16_rn);
// overflow gives Inf, NaN stays NaN (quiet, sign kept), Half has subnormals down to 2^-24.
// 16 bit -> float is exact.
#pragma once

#include <bit>
#include <cstdint>

namespace distlab {

namespace detail {

constexpr std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7FFFFFFFu;  // |f|
  if (ax > 0x7F800000u)                      // NaN: quiet, keep the top of the payload
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  if (ax >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 (halfway past 65504): Inf
  if (ax >= 0x38800000u) {                       // >= 2^-14: a normal half
    // Re-bias the exponent (127 -> 15) and drop 13 mantissa bits, rounding to nearest even:
    // adding 0xFFF plus the lowest kept bit carries into the kept bits exactly when the
    // dropped part is above half, or exactly half with an odd kept part.
    const std::uint32_t rebiased = ax - (112u << 23);
    return static_cast<std::uint16_t>(sign | ((rebiased + 0xFFFu + ((rebiased >> 13) & 1u)) >> 13));
  }
  // Below 2^-14: a half subnormal counts units of 2^-24. |f| = M * 2^(E - 150) with the
  // 24-bit significand M, so the count is M >> (126 - E), rounded to nearest even.
  const std::uint32_t exponent = ax >> 23;
  if (exponent < 102) return sign;  // < 2^-25: rounds to zero (float subnormals included)
  const std::uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126 - exponent;  // 14 .. 24
  std::uint32_t q = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // may carry into the smallest normal
  return static_cast<std::uint16_t>(sign | q);
}

constexpr float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F)  // Inf or NaN
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0)  // normal: re-bias 15 -> 127
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);  // +-0
  // Subnormal mantissa * 2^-24: shift until the leading 1 reaches the implicit bit.
  std::uint32_t e = 113;
  while (!(mantissa & 0x400u)) {
    mantissa <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mantissa & 0x3FFu) << 13));
}

constexpr std::uint16_t float_to_bfloat16_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u)  // NaN: quiet, sign kept
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  // bfloat16 is the top half of a float: round the low 16 bits away, to nearest even.
  // Overflow carries into the exponent and gives Inf, as it should.
  return static_cast<std::uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

constexpr float bfloat16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace detail

// IEEE binary16. Trivial like float: Half{} is +0, a plain `Half h;` is uninitialised.
struct Half {
  std::uint16_t bits;

  Half() = default;
  constexpr explicit Half(float f) : bits(detail::float_to_half_bits(f)) {}
  constexpr explicit operator float() const { return detail::half_bits_to_float(bits); }
  static constexpr Half from_bits(std::uint16_t b) {
    Half h{};
    h.bits = b;
    return h;
  }
};

// bfloat16: float's exponent range with 8 bits of precision.
struct BFloat16 {
  std::uint16_t bits;

  BFloat16() = default;
  constexpr explicit BFloat16(float f) : bits(detail::float_to_bfloat16_bits(f)) {}
  constexpr explicit operator float() const { return detail::bfloat16_bits_to_float(bits); }
  static constexpr BFloat16 from_bits(std::uint16_t b) {
    BFloat16 h{};
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && alignof(Half) == 2, "Half must match CUDA's __half");
static_assert(sizeof(BFloat16) == 2 && alignof(BFloat16) == 2, "BFloat16 must match __nv_bfloat16");

}  // namespace distlab
