// reduce_scatter_ring.hpp — reduce-scatter around a ring, N-1 steps of one chunk each.
//
// The buffer is cut into N chunks (Partition). Rank r ends with chunk r summed over all ranks.
//   step s = 0 .. N-2:  send chunk (r - s - 1) mod N to the right,
//                       receive chunk (r - s - 2) mod N from the left and add it in
// The chunk a rank sends at step s already holds s + 1 ranks' data (r, r-1, .., r-s); at the
// last step each rank receives its own chunk with N-1 contributions and adds the last one.
// Every rank sends and receives (N-1)/N S: the same on every link, whatever N is.
// On in-process CPU ranks the add happens as the message is copied (sendrecv_reduce), so a step
// reads two chunks and writes one; elsewhere the message lands in `incoming` first.
#pragma once

#include "core/collectives/common.hpp"

namespace distlab::coll {

// data: this rank's whole input, used as workspace; afterwards chunk `rank` of it holds the sum.
template <class T>
void reduce_scatter_ring(Comm& comm, View<T> data, const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank();
  const int right = (me + 1) % n, left = (me - 1 + n) % n;
  const Partition part{data.size(), n};
  const int first_step = comm.next_steps(n - 1);
  comm.declare_buffer(buffer, data.size(), n);
  // chunk 0 is the largest; charged on every transport, so memory figures never depend on it
  Buffer<T> incoming = comm.scratch<T>(part.size(0));
  auto chunk = [&](int c) { return data.sub(part.begin(c), part.size(c)); };
  // quote: reduce-scatter-ring
  const int steps = broken("ring-one-step-short") ? n - 2 : n - 1;  // lesson 06's --break
  for (int s = 0; s < steps; ++s) {
    // step s: send chunk (me - s - 1), receive chunk (me - s - 2) and add it in
    const int step = first_step + s;
    const int out = ((me - s - 1) % n + n) % n, in = ((me - s - 2) % n + n) % n;
    comm.mark_step(step);
    sendrecv_reduce(comm, cview(chunk(out)), right, chunk(in), incoming.view(), left,
                    kTagReduceScatterRing,
                    meta(step, buffer, out, out + 1, Apply::reduce, ring_mask(me, s + 1, n)),
                    meta(step, buffer, in, in + 1, Apply::reduce, ring_mask(left, s + 1, n)));
  }
  // end quote: reduce-scatter-ring
}

}  // namespace distlab::coll
