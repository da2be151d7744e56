// ops.hpp: the compute on Views, and the checks that guard it.
#include <catch2/catch.hpp>

#include <cstdint>

#include "core/check.hpp"
#include "core/ops.hpp"

using namespace distlab;

TEST_CASE("ops: add, copy and fill compute element by element", "[ops]") {
  Ledger ledger;
  Buffer<std::int64_t> a(ledger, Category::data, 5), b(ledger, Category::data, 5);
  for (std::size_t i = 0; i < 5; ++i) {
    a[i] = static_cast<std::int64_t>(i);
    b[i] = 10 * static_cast<std::int64_t>(i);
  }
  ops::add(a.view(), View<const std::int64_t>(b.view()));
  for (std::size_t i = 0; i < 5; ++i) CHECK(a[i] == 11 * static_cast<std::int64_t>(i));
  ops::fill(b.view(), std::int64_t{-3});
  for (std::size_t i = 0; i < 5; ++i) CHECK(b[i] == -3);
  ops::copy(a.sub(1, 2), View<const std::int64_t>(b.sub(0, 2)));
  CHECK(a[0] == 0);
  CHECK(a[1] == -3);
  CHECK(a[2] == -3);
  CHECK(a[3] == 33);
  ops::copy(a.view(), View<const std::int64_t>(a.view()));  // the same memory: a no-op
  CHECK(a[3] == 33);
}

TEST_CASE("ops: size and device mismatches are errors naming the op and sizes", "[ops]") {
  Ledger ledger;
  Buffer<float> a(ledger, Category::data, 4), b(ledger, Category::data, 3);
  CHECK_THROWS_AS(ops::add(a.view(), View<const float>(b.view())), Error);
  CHECK_THROWS_WITH(ops::add(a.view(), View<const float>(b.view())),
                    Catch::Contains("add") && Catch::Contains("4 vs 3"));
  CHECK_THROWS_WITH(ops::copy(b.view(), View<const float>(a.view())), Catch::Contains("copy"));
  View<const float> on_gpu{nullptr, 4, Device::cuda};
  CHECK_THROWS_WITH(ops::add(a.view(), on_gpu), Catch::Contains("different devices"));
  View<float> gpu_dst{nullptr, 4, Device::cuda};
  CHECK_THROWS_AS(ops::fill(gpu_dst, 1.0f), Error);
}

TEST_CASE("ops: empty views are fine", "[ops]") {
  View<float> e1{nullptr, 0, Device::cpu};
  View<const float> e2{nullptr, 0, Device::cpu};
  CHECK_NOTHROW(ops::add(e1, e2));
  CHECK_NOTHROW(ops::copy(e1, e2));
  CHECK_NOTHROW(ops::fill(e1, 2.0f));
}
