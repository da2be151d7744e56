// partition.hpp: chunk i of a buffer is [begin(i), end(i)); sizes differ by at most one.
#include "catch.hpp"

#include <algorithm>
#include <vector>

#include "core/base/partition.hpp"

using distlab::Partition;

namespace {

// Checks every promise of Partition for one (length, parts).
void check_partition(std::size_t length, int parts) {
  INFO("length " << length << ", parts " << parts);
  const Partition p{length, parts};
  REQUIRE(p.begin(0) == 0);
  REQUIRE(p.end(parts - 1) == length);
  std::size_t covered = 0, smallest = length, largest = 0;
  for (int i = 0; i < parts; ++i) {
    REQUIRE(p.begin(i) <= p.end(i));
    if (i > 0) REQUIRE(p.begin(i) == p.end(i - 1));  // no gap, no overlap
    REQUIRE(p.size(i) == p.end(i) - p.begin(i));
    covered += p.size(i);
    smallest = std::min(smallest, p.size(i));
    largest = std::max(largest, p.size(i));
    // The first length % parts chunks are the larger ones.
    const std::size_t want =
        length / parts + (static_cast<std::size_t>(i) < length % parts ? 1 : 0);
    REQUIRE(p.size(i) == want);
  }
  REQUIRE(covered == length);
  REQUIRE(largest - smallest <= 1);
}

}  // namespace

TEST_CASE("partition covers 0..length without gaps, chunks differ by at most one", "[partition]") {
  for (std::size_t length : {1ul, 2ul, 7ul, 8ul, 9ul, 100ul, 1000ul, 1ul << 20, (1ul << 20) + 3})
    for (int parts : {1, 2, 3, 4, 5, 7, 8, 64})
      if (static_cast<std::size_t>(parts) <= length) check_partition(length, parts);
}

TEST_CASE("partition of the header's example: 7 into 3 is 0-3, 3-5, 5-7", "[partition]") {
  const Partition p{7, 3};
  CHECK(std::vector<std::size_t>{p.begin(0), p.end(0), p.begin(1), p.end(1), p.begin(2),
                                 p.end(2)} == std::vector<std::size_t>{0, 3, 3, 5, 5, 7});
}

TEST_CASE("partition of a zero-length buffer gives empty chunks", "[partition]") {
  for (int parts : {1, 2, 3, 8}) {
    check_partition(0, parts);
    const Partition p{0, parts};
    for (int i = 0; i < parts; ++i) CHECK(p.size(i) == 0);
  }
}

TEST_CASE("partition with more parts than elements: ones, then empty chunks", "[partition]") {
  for (std::size_t length : {1ul, 2ul, 3ul, 5ul})
    for (int parts : {4, 8, 9}) {
      if (static_cast<std::size_t>(parts) <= length) continue;
      check_partition(length, parts);
      const Partition p{length, parts};
      for (int i = 0; i < parts; ++i)
        CHECK(p.size(i) == (static_cast<std::size_t>(i) < length ? 1u : 0u));
    }
}
