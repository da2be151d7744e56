// all_reduce_recursive_doubling.hpp — log2 N steps of whole-buffer exchanges.
//
//   step k = 0 .. log2 N - 1:  exchange the whole buffer with partner rank ^ 2^k, add
// After step k every rank holds the sum over its group of 2^(k+1) ranks; N = 8 finishes in
// 3 steps. Each rank sends log2 N * S: few steps (latency-bound sizes love it), but more
// bytes than the ring for large buffers. a + b == b + a exactly, so partners, and in the end
// all ranks, hold the same bits. N not a power of two: fold.hpp adds one step before and after.
#pragma once

#include "core/collectives/fold.hpp"

namespace distlab::coll {

// data: this rank's input, replaced by the sum over all ranks.
template <class T>
void all_reduce_recursive_doubling(Comm& comm, View<T> data, const std::string& buffer = "data") {
  const int me = comm.rank();
  const Fold f(comm.size());
  int step = comm.next_steps(f.log2_p2() + f.extra_steps());
  comm.declare_buffer(buffer, data.size(), 1);
  if (f.rem) fold_in(comm, data, f, step++, buffer, 1);
  if (f.takes_part(me)) {
    Buffer<T> incoming = comm.scratch<T>(data.size());
    int exchanged = 0;  // the distances crossed so far: my group is me with these bits free
    // quote: recursive-doubling
    const int end = broken("doubling-one-step-short") ? f.p2 / 2 : f.p2;  // lesson 07's --break
    for (int mask = 1; mask < end; mask <<= 1, ++step) {
      // step: swap whole buffers with rank me ^ mask, then both hold their two groups' sum
      const int partner = me ^ mask;
      comm.mark_step(step);
      comm.sendrecv(cview(data), partner, incoming.view(), partner, kTagRecursive,
                    meta(step, buffer, 0, 1, Apply::reduce, f.contributors(me, exchanged)),
                    meta(step, buffer, 0, 1, Apply::reduce, f.contributors(partner, exchanged)));
      auto add = comm.phase("add");
      ops::add(data, cview(incoming.view()));
      exchanged |= mask;
    }
    // end quote: recursive-doubling
  } else {
    step += f.log2_p2();
  }
  if (f.rem) fold_out(comm, data, f, step, buffer, 1);
}

}  // namespace distlab::coll
