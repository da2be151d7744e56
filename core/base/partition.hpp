// partition.hpp — how a buffer of `length` elements is cut into `parts` chunks.
//
// Chunk i covers [begin(i), end(i)). The first (length % parts) chunks get one extra element,
// so chunks differ in size by at most one and a zero-length buffer gives empty chunks.
//   length 7, parts 3  ->  [0,3) [3,5) [5,7)
#pragma once

#include <cstddef>

namespace distlab {

struct Partition {
  std::size_t length = 0;
  int parts = 1;

  std::size_t begin(int i) const {
    const std::size_t base = length / parts, extra = length % parts;
    const std::size_t k = static_cast<std::size_t>(i);
    return k * base + (k < extra ? k : extra);
  }
  std::size_t end(int i) const { return begin(i + 1); }
  std::size_t size(int i) const { return end(i) - begin(i); }
};

}  // namespace distlab
