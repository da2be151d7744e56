// fp8.hpp — the two 8-bit floats of FP8 training, emulated on the host in plain arithmetic.
//
// From the OCP 8-bit Floating Point Specification (OFP8, 2023) and Micikevicius et al. 2022,
// "FP8 Formats for Deep Learning"; Transformer Engine and torchao use them so: E4M3 for the
// forward's weights and activations (more precision), E5M2 for the gradients (more range).
//
//   format  sign  exponent  mantissa  bias  largest  smallest normal  smallest subnormal  Inf
//   E4M3    1     4         3         7     448      2^-6             2^-9                none
//   E5M2    1     5         2         15    57344    2^-14            2^-16               yes
//
// E4M3 gives up infinity to reach 448: only S.1111.111 is NaN, so S.1111.000 .. S.1111.110 are
// the normals 256 .. 448. E5M2 is IEEE-like: S.11111.00 is Inf, S.11111.xx (xx > 0) NaN.
//
// float -> fp8 rounds to nearest, ties to even (round_to below, a few lines to read), with
// subnormals. Past the largest finite value a cast saturates to it (Overflow::saturate: what a
// scaled recipe's cast does, Transformer Engine's and torchao's clamp before they convert), or
// gives what the format has, Inf for E5M2 and NaN for E4M3 (Overflow::to_special, what a plain
// cast does). NaN stays NaN. fp8 -> float is exact.
#pragma once

#include <cstdint>

namespace distlab::fp8 {

struct Format {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_infinity;  // E5M2: S.11111.00 is Inf; E4M3: the top exponent holds normals
};

inline constexpr Format kE4M3{"e4m3", 4, 3, 7, false};
inline constexpr Format kE5M2{"e5m2", 5, 2, 15, true};

enum class Overflow { saturate, to_special };

// The largest finite value, the smallest normal and the smallest subnormal of the format, from
// its fields (the table above lists them; tests/test_fp8.cpp holds these to it).
double largest(const Format& f);
double smallest_normal(const Format& f);
double smallest_subnormal(const Format& f);

// x rounded to the format: the nearest of its values, ties to the one with an even last
// mantissa bit; past the largest finite value as `overflow` says. The result is a float that
// the format holds exactly.
float round_to(const Format& f, float x, Overflow overflow = Overflow::saturate);

// The 8 bits of round_to(f, x, overflow), and back (exact).
std::uint8_t encode(const Format& f, float x, Overflow overflow = Overflow::saturate);
float decode(const Format& f, std::uint8_t bits);

}  // namespace distlab::fp8
