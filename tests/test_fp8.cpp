// fp8.hpp: E4M3 and E5M2 against the OCP 8-bit float specification's tables, and rounding
// against a search of every value the format holds (nearest, ties to the even code).
#include "catch.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/base/fp8.hpp"

using namespace distlab;
using fp8::Overflow;

namespace {

// The specification's figures, written out (OFP8 2023, table 1).
struct Table {
  const fp8::Format& format;
  double largest, smallest_normal, smallest_subnormal;
  // Codes listed in the specification and what they hold.
  std::vector<std::pair<std::uint8_t, double>> codes;
  std::uint8_t nan_code;  // a NaN's code
};

const Table kE4M3Table{fp8::kE4M3,
                       448.0,
                       0.015625,     // 2^-6
                       0.001953125,  // 2^-9
                       {{0x00, 0.0},
                        {0x01, 0.001953125},
                        {0x07, 0.013671875},  // 7 x 2^-9, the largest subnormal
                        {0x08, 0.015625},
                        {0x38, 1.0},
                        {0x39, 1.125},
                        {0x3F, 1.875},
                        {0x40, 2.0},
                        {0x78, 256.0},
                        {0x7E, 448.0},
                        {0xB8, -1.0},
                        {0xFE, -448.0}},
                       0x7F};
const Table kE5M2Table{fp8::kE5M2,
                       57344.0,
                       6.103515625e-05,    // 2^-14
                       1.52587890625e-05,  // 2^-16
                       {{0x00, 0.0},
                        {0x01, 1.52587890625e-05},
                        {0x03, 4.57763671875e-05},  // 3 x 2^-16, the largest subnormal
                        {0x04, 6.103515625e-05},
                        {0x3C, 1.0},
                        {0x3D, 1.25},
                        {0x3F, 1.75},
                        {0x7B, 57344.0},
                        {0xBC, -1.0},
                        {0xFB, -57344.0}},
                       0x7E};

// Every finite non-negative value of the format, with its code, from decode (itself held to
// the listed codes above).
std::vector<std::pair<double, std::uint8_t>> values_of(const fp8::Format& f) {
  std::vector<std::pair<double, std::uint8_t>> out;
  for (int b = 0; b < 0x80; ++b) {
    const float v = fp8::decode(f, std::uint8_t(b));
    if (std::isfinite(v)) out.emplace_back(double(v), std::uint8_t(b));
  }
  return out;
}

// The nearest of the values to |x|, by search; a tie goes to the code with an even last bit.
// Past the largest, no value: returns -1.
double nearest(const std::vector<std::pair<double, std::uint8_t>>& values, double a) {
  double best = -1, gap = std::numeric_limits<double>::infinity();
  std::uint8_t code = 0;
  for (const auto& [v, c] : values) {
    const double d = std::fabs(v - a);
    if (d < gap || (d == gap && (c & 1) == 0 && (code & 1) == 1)) {
      best = v;
      gap = d;
      code = c;
    }
  }
  return best;
}

}  // namespace

TEST_CASE("fp8: the formats' figures are the specification's", "[fp8]") {
  for (const Table* t : {&kE4M3Table, &kE5M2Table}) {
    INFO(t->format.name);
    CHECK(fp8::largest(t->format) == t->largest);
    CHECK(fp8::smallest_normal(t->format) == t->smallest_normal);
    CHECK(fp8::smallest_subnormal(t->format) == t->smallest_subnormal);
    for (const auto& [code, value] : t->codes) {
      INFO("code " << int(code));
      CHECK(double(fp8::decode(t->format, code)) == value);
      CHECK(fp8::encode(t->format, float(value)) == code);
    }
    CHECK(std::isnan(fp8::decode(t->format, t->nan_code)));
    CHECK(std::isnan(fp8::decode(t->format, std::uint8_t(t->nan_code | 0x80))));
  }
  // E4M3 has no infinity: S.1111.000 .. S.1111.110 are normals; E5M2's S.11111.00 is Inf.
  CHECK(fp8::decode(fp8::kE4M3, 0x78) == 256.0f);
  CHECK(std::isinf(fp8::decode(fp8::kE5M2, 0x7C)));
  CHECK(fp8::decode(fp8::kE5M2, 0xFC) < 0);
  CHECK(std::isnan(fp8::decode(fp8::kE5M2, 0x7D)));
}

TEST_CASE("fp8: every value survives a trip through float, in order", "[fp8]") {
  for (const fp8::Format* f : {&fp8::kE4M3, &fp8::kE5M2}) {
    INFO(f->name);
    int finite = 0;
    double before = -1;
    for (int b = 0; b < 0x80; ++b) {
      const float v = fp8::decode(*f, std::uint8_t(b));
      if (!std::isfinite(v)) continue;
      ++finite;
      CHECK(double(v) > before);  // codes 0x00 .. 0x7F count upwards
      before = v;
      CHECK(fp8::round_to(*f, v) == v);
      CHECK(fp8::encode(*f, v) == b);
      CHECK(fp8::encode(*f, -v) == (b | 0x80));
    }
    // E4M3: 127 finite non-negative codes (one NaN); E5M2: 124 (Inf and three NaNs).
    CHECK(finite == (f->has_infinity ? 124 : 127));
  }
}

TEST_CASE("fp8: rounding is to the nearest value, ties to the even code", "[fp8]") {
  std::mt19937 rng(20261207);
  for (const fp8::Format* f : {&fp8::kE4M3, &fp8::kE5M2}) {
    INFO(f->name);
    const auto values = values_of(*f);
    std::vector<float> xs;
    // Every midpoint between neighbours (the ties), and a hair either side of it.
    for (std::size_t i = 0; i + 1 < values.size(); ++i) {
      const float mid = float((values[i].first + values[i + 1].first) / 2);
      xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)});
    }
    // And values spread over the whole range, subnormals included.
    std::uniform_real_distribution<double> log2_of(std::log2(fp8::smallest_subnormal(*f)) - 2,
                                                   std::log2(fp8::largest(*f)));
    for (int k = 0; k < 20000; ++k) xs.push_back(float(std::exp2(log2_of(rng))));
    int bad = 0;
    for (const float x : xs) {
      const double want = nearest(values, double(x));
      const float got = fp8::round_to(*f, x), got_negative = fp8::round_to(*f, -x);
      if (double(got) != want || double(got_negative) != -want) {
        if (++bad <= 5) UNSCOPED_INFO("x " << x << ": got " << got << ", want " << want);
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("fp8: past the largest value, saturate or the format's Inf or NaN", "[fp8]") {
  const float inf = std::numeric_limits<float>::infinity();
  // E4M3: 448 is 1.110 x 2^8; the next step, 480, would be the NaN code. 464, halfway, ties to
  // 448's even code; anything above rounds past the largest.
  CHECK(fp8::round_to(fp8::kE4M3, 464.0f, Overflow::to_special) == 448.0f);
  CHECK(std::isnan(fp8::round_to(fp8::kE4M3, 464.5f, Overflow::to_special)));
  CHECK(std::isnan(fp8::round_to(fp8::kE4M3, inf, Overflow::to_special)));
  CHECK(fp8::round_to(fp8::kE4M3, 464.5f) == 448.0f);
  CHECK(fp8::round_to(fp8::kE4M3, -1e6f) == -448.0f);
  CHECK(fp8::encode(fp8::kE4M3, 1e6f, Overflow::to_special) == 0x7F);
  // E5M2: 57344 is 1.11 x 2^15; halfway to 2^16 (61440) ties to 2^16's even code, Inf.
  CHECK(fp8::round_to(fp8::kE5M2, 61439.996f, Overflow::to_special) == 57344.0f);
  CHECK(fp8::round_to(fp8::kE5M2, 61440.0f, Overflow::to_special) == inf);
  CHECK(fp8::round_to(fp8::kE5M2, -61440.0f, Overflow::to_special) == -inf);
  CHECK(fp8::round_to(fp8::kE5M2, 61440.0f) == 57344.0f);
  CHECK(fp8::encode(fp8::kE5M2, 1e6f, Overflow::to_special) == 0x7C);
  CHECK(fp8::encode(fp8::kE5M2, -1e6f, Overflow::to_special) == 0xFC);
  // NaN stays NaN; zero keeps its sign; below half the smallest subnormal is zero.
  for (const fp8::Format* f : {&fp8::kE4M3, &fp8::kE5M2}) {
    INFO(f->name);
    CHECK(std::isnan(fp8::round_to(*f, std::numeric_limits<float>::quiet_NaN())));
    CHECK(std::signbit(fp8::round_to(*f, -0.0f)));
    CHECK(fp8::encode(*f, -0.0f) == 0x80);
    const float tiny = float(fp8::smallest_subnormal(*f));
    CHECK(fp8::round_to(*f, tiny / 2) == 0.0f);  // a tie: to zero's even code
    CHECK(fp8::round_to(*f, std::nextafter(tiny / 2, 1.0f)) == tiny);
    CHECK(fp8::round_to(*f, tiny * 1.5f) == tiny * 2);  // 1.5 ties to 2, the even code
  }
}
