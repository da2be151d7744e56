// all_reduce_ring_chunked.hpp — the bandwidth-optimal ring (NCCL's, Baidu's): reduce-scatter
// around the ring, then all-gather around the ring.
//
//   steps 1 .. N-1:     reduce-scatter: rank r ends with chunk r summed over all ranks
//   steps N .. 2(N-1):  all-gather: every rank ends with every summed chunk
// 2(N-1) steps of S/N each: every rank sends and receives 2(N-1)/N S, which tends to 2S
// however large N grows, the least any all-reduce can move (Patarasuk & Yuan 2009).
// Each chunk is summed in one order and then copied, so every rank ends with the same bits.
#pragma once

#include "core/collectives/all_gather_ring.hpp"
#include "core/collectives/reduce_scatter_ring.hpp"

namespace distlab::coll {

// Elements rank k of n sends and receives in one all-reduce of L elements (chunks by Partition):
// the reduce-scatter sends every chunk but k and receives every chunk but k-1; the all-gather
// sends every chunk but k+1 and receives every chunk but k. About 2(N-1)/N L each way.
struct RingChunkedTraffic {
  std::uint64_t sent = 0, recv = 0;
};
inline RingChunkedTraffic ring_chunked_traffic(int k, int n, std::uint64_t L) {
  if (n <= 1) return {};
  const Partition part{L, n};
  const auto chunk = [&](int c) { return std::uint64_t(part.size(((c % n) + n) % n)); };
  return {2 * L - chunk(k) - chunk(k + 1), 2 * L - chunk(k - 1) - chunk(k)};
}

// data: this rank's input, replaced by the sum over all ranks.
template <class T>
void all_reduce_ring_chunked(Comm& comm, View<T> data, const std::string& buffer = "data") {
  reduce_scatter_ring(comm, data, buffer);
  all_gather_ring(comm, data, buffer, /*reduced=*/true);
}

}  // namespace distlab::coll
