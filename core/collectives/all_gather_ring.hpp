// all_gather_ring.hpp — all-gather around a ring, N-1 steps of one chunk each.
//
// The buffer is cut into N chunks (Partition); rank r starts with chunk r in place.
//   step s = 0 .. N-2:  send chunk (r - s) mod N to the right,
//                       receive chunk (r - s - 1) mod N from the left into its place
// Every rank sends and receives (N-1)/N S.
#pragma once

#include "core/collectives/common.hpp"

namespace distlab::coll {

// data: the whole buffer, with this rank's chunk filled in; afterwards every chunk is.
// `reduced`: the chunks are already sums over every rank (as in ring_chunked), for the trace.
template <class T>
void all_gather_ring(Comm& comm, View<T> data, const std::string& buffer = "data",
                     bool reduced = false) {
  const int n = comm.size(), me = comm.rank();
  const int right = (me + 1) % n, left = (me - 1 + n) % n;
  const Partition part{data.size(), n};
  const int first_step = comm.next_steps(n - 1);
  comm.declare_buffer(buffer, data.size(), n);
  auto chunk = [&](int c) { return data.sub(part.begin(c), part.size(c)); };
  auto whose = [&](int c) { return reduced ? all_ranks(n) : rank_bit(c); };
  // quote: all-gather-ring
  for (int s = 0; s < n - 1; ++s) {
    // step s: pass chunk (me - s) on to the right, take chunk (me - s - 1) from the left
    const int step = first_step + s;
    const int out = ((me - s) % n + n) % n, in = ((me - s - 1) % n + n) % n;
    comm.mark_step(step);
    comm.sendrecv(cview(chunk(out)), right, chunk(in), left, kTagAllGatherRing,
                  meta(step, buffer, out, out + 1, Apply::copy, whose(out)),
                  meta(step, buffer, in, in + 1, Apply::copy, whose(in)));
  }
  // end quote: all-gather-ring
}

}  // namespace distlab::coll
