// all_reduce_ring_chunked.hpp — the bandwidth-optimal ring (NCCL's, Baidu's): reduce-scatter
// around the ring, then all-gather around the ring.
//
//   steps 1 .. N-1:     reduce-scatter: rank r ends with chunk r summed over all ranks
//   steps N .. 2(N-1):  all-gather: every rank ends with every summed chunk
// 2(N-1) steps of S/N each: every rank sends and receives 2(N-1)/N S, which tends to 2S
// however large N grows, the least any all-reduce can move (Patarasuk & Yuan 2009).
// Each chunk is summed in one order and then copied, so every rank ends with the same bits.
#pragma once

#include "all_gather_ring.hpp"
#include "reduce_scatter_ring.hpp"

namespace distlab::coll {

// data: this rank's input, replaced by the sum over all ranks.
template <class T>
void all_reduce_ring_chunked(Comm& comm, View<T> data, const std::string& buffer = "data") {
  reduce_scatter_ring(comm, data, buffer);
  all_gather_ring(comm, data, buffer, /*reduced=*/true);
}

}  // namespace distlab::coll
