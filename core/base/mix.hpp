// mix.hpp — splitmix64's finalizer: every input bit moves every output bit. The seeded data
// (runtime/data.hpp) and the transports' group keys (gloo.cpp, shm.cpp) draw on it.
#pragma once

#include <cstdint>

namespace distlab {

inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// splitmix64's step: the i-th value of the sequence that starts at x.
inline std::uint64_t splitmix64(std::uint64_t x) {
  return mix64(x + 0x9e3779b97f4a7c15ull);
}

}  // namespace distlab
