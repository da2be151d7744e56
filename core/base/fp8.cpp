// fp8.cpp — rounding to E4M3 and E5M2 in plain arithmetic (fp8.hpp).
#include "core/base/fp8.hpp"

#include <cmath>
#include <limits>

namespace distlab::fp8 {

namespace {
int min_exponent(const Format& f) {
  return 1 - f.bias;
}  // the smallest normal's: 2^(1 - bias)
}  // namespace

double largest(const Format& f) {
  const int top = (1 << f.exponent_bits) - 1;  // the exponent field of all ones
  const double steps = 1 << f.mantissa_bits;   // mantissa values in a binade
  // E5M2 keeps the top exponent for Inf and NaN: its largest is all ones one binade lower.
  // E4M3 keeps only the top exponent's all-ones mantissa for NaN: one step below it.
  if (f.has_infinity) return (1 + (steps - 1) / steps) * std::ldexp(1.0, top - 1 - f.bias);
  return (1 + (steps - 2) / steps) * std::ldexp(1.0, top - f.bias);
}

double smallest_normal(const Format& f) {
  return std::ldexp(1.0, min_exponent(f));
}

double smallest_subnormal(const Format& f) {
  return std::ldexp(1.0, min_exponent(f) - f.mantissa_bits);
}

float round_to(const Format& f, float x, Overflow overflow) {
  if (std::isnan(x) || x == 0) return x;  // NaN stays NaN, +-0 keeps its sign
  const double a = std::fabs(double(x));
  // The binade of a: 2^e <= a < 2^(e+1). Below the smallest normal the subnormals continue
  // with the smallest normal's spacing, so e goes no lower than its exponent.
  int e = std::ilogb(a);
  if (e < min_exponent(f)) e = min_exponent(f);
  // In that binade the format holds the multiples of q = 2^(e - mantissa bits). Count how many
  // q's a is (exact: q is a power of two) and round the count to the nearest whole one, ties to
  // the even count, which is the even last mantissa bit: std::nearbyint in the default mode.
  // A count that rounds up to 2^(mantissa bits + 1) is the next binade's first value.
  const double q = std::ldexp(1.0, e - f.mantissa_bits);
  const double r = std::nearbyint(a / q) * q;
  if (r > largest(f)) {
    if (overflow == Overflow::saturate) return std::copysign(float(largest(f)), x);
    return std::copysign(f.has_infinity ? std::numeric_limits<float>::infinity()
                                        : std::numeric_limits<float>::quiet_NaN(),
                         x);
  }
  return std::copysign(float(r), x);
}

std::uint8_t encode(const Format& f, float x, Overflow overflow) {
  const float r = round_to(f, x, overflow);
  const auto sign = static_cast<std::uint8_t>(std::signbit(r) ? 0x80 : 0);
  const int top = (1 << f.exponent_bits) - 1, M = f.mantissa_bits;
  if (std::isnan(r))  // E4M3: S.1111.111; E5M2: S.11111.10, the quiet NaN
    return sign | static_cast<std::uint8_t>(f.has_infinity ? (top << M) | (1 << (M - 1))
                                                           : (top << M) | ((1 << M) - 1));
  if (std::isinf(r)) return sign | static_cast<std::uint8_t>(top << M);
  const double a = std::fabs(double(r));
  if (a == 0) return sign;
  const int e = std::ilogb(a);
  if (e < min_exponent(f))  // subnormal: exponent field 0, mantissa = a in units of the smallest
    return sign | static_cast<std::uint8_t>(a / smallest_subnormal(f));
  const int mantissa = int(a / std::ldexp(1.0, e - M)) - (1 << M);  // the bits after the 1.
  return sign | static_cast<std::uint8_t>(((e + f.bias) << M) | mantissa);
}

float decode(const Format& f, std::uint8_t bits) {
  const int M = f.mantissa_bits, top = (1 << f.exponent_bits) - 1;
  const int exponent = (bits & 0x7F) >> M, mantissa = bits & ((1 << M) - 1);
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  if (exponent == top && f.has_infinity)
    return float(mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                               : std::numeric_limits<double>::quiet_NaN());
  if (exponent == top && mantissa == (1 << M) - 1) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return float(sign * mantissa * smallest_subnormal(f));
  return float(sign * (1 + double(mantissa) / (1 << M)) * std::ldexp(1.0, exponent - f.bias));
}

}  // namespace distlab::fp8
