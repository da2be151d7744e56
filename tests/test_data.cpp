// data.hpp: lesson inputs are a pure function of (seed, rank, index).
#include "catch.hpp"

#include <cmath>
#include <cstdint>
#include <set>

#include "core/device/memory_ledger.hpp"
#include "core/runtime/data.hpp"

using namespace distlab;

TEST_CASE("input_value is deterministic and depends on seed, rank and index", "[data]") {
  CHECK(input_value<float>(42, 0, 0) == input_value<float>(42, 0, 0));
  std::set<float> values;
  for (std::uint64_t seed : {1ull, 2ull})
    for (int rank : {0, 1, 2})
      for (std::uint64_t i : {0ull, 1ull, 1000ull})
        values.insert(input_value<float>(seed, rank, i));
  CHECK(values.size() >= 17);  // 18 draws; a collision or two is possible, a constant is not
}

TEST_CASE("input_value ranges: floats in -1..1 exact in float32, integers whole in -32..31",
          "[data]") {
  bool float_ok = true, double_ok = true, int_ok = true;
  std::set<std::int64_t> ints;
  for (int rank = 0; rank < 4; ++rank)
    for (std::uint64_t i = 0; i < 5000; ++i) {
      const float f = input_value<float>(7, rank, i);
      const double d = input_value<double>(7, rank, i);
      const auto k = input_value<std::int64_t>(7, rank, i);
      if (!(f >= -1.0f && f < 1.0f)) float_ok = false;
      if (d != static_cast<double>(f)) double_ok = false;  // the same value, exact in both
      if (k < -32 || k >= 32 || input_value<std::int32_t>(7, rank, i) != k) int_ok = false;
      ints.insert(k);
    }
  CHECK(float_ok);
  CHECK(double_ok);
  CHECK(int_ok);
  CHECK(ints.size() == 64);  // every whole number in [-32, 32) shows up
}

TEST_CASE("fill_input writes elements offset .. offset + n - 1 of a rank's input", "[data]") {
  Ledger ledger;
  Buffer<double> whole(ledger, Category::data, 100), part(ledger, Category::data, 10);
  fill_input(whole.view(), 9, 3);
  fill_input(part.view(), 9, 3, 40);
  for (std::size_t i = 0; i < 10; ++i) CHECK(part[i] == whole[40 + i]);
  CHECK(whole[99] == input_value<double>(9, 3, 99));
}
