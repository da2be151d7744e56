// all_reduce_ring.hpp — the lecture's ring: whole buffers travel around, N-1 steps.
//
//   step s = 1 .. N-1:  send the buffer received last (at step 1, my own) to the right,
//                       receive rank (me - s)'s buffer from the left, add it
// Time O(N) steps; each rank sends and receives one whole buffer per step: peak per-rank
// bandwidth O(1) (one link each way), (N-1) S per rank and N(N-1) S on all links in all.
// Each rank adds in its own order, so ranks may differ in the last bit.
// ring_chunked (all_reduce_ring_chunked.hpp) cuts the buffer in N chunks and moves S/N per step.
#pragma once

#include <utility>

#include "core/collectives/common.hpp"

namespace distlab::coll {

// data: this rank's input, replaced by the sum over all ranks.
template <class T>
void all_reduce_ring(Comm& comm, View<T> data, const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank();
  const int right = (me + 1) % n, left = (me - 1 + n) % n;
  const int first_step = comm.next_steps(n - 1);
  comm.declare_buffer(buffer, data.size(), 1);
  Buffer<T> passing = comm.scratch<T>(data.size());  // the buffer I pass on next
  Buffer<T> incoming = comm.scratch<T>(data.size());
  ops::copy(passing.view(), cview(data));
  // quote: ring
  for (int s = 1; s < n; ++s) {
    // step s: pass rank (me - s + 1)'s buffer right, receive rank (me - s)'s from the left
    const int step = first_step + s - 1;
    comm.mark_step(step);
    comm.sendrecv(cview(passing.view()), right, incoming.view(), left, kTagRing,
                  meta(step, buffer, 0, 1, Apply::reduce, rank_bit((me - s + 1 + n) % n)),
                  meta(step, buffer, 0, 1, Apply::reduce, rank_bit((me - s + n) % n)));
    auto add = comm.phase("add");
    ops::add(data, cview(incoming.view()));
    if (broken("ring-resend-own")) continue;  // lesson 06's --break: my own buffer goes out again
    std::swap(passing, incoming);
  }
  // end quote: ring
}

}  // namespace distlab::coll
