// all_reduce_sequential.hpp — all-reduce in N rounds, one rank speaking per round.
//
//   round i = 0 .. N-1:  rank i sends its whole buffer to every other rank, one after another;
//                        every rank adds it into its running sum
// Time O(N) rounds; each rank sends (N-1) S in its own round and receives (N-1) S in all:
// bandwidth O(N) per rank. Every rank adds the inputs in rank order 0, 1, .., N-1, so every
// rank ends with the same bits.
#pragma once

#include "core/collectives/common.hpp"

namespace distlab::coll {

// data: this rank's input, replaced by the sum over all ranks.
template <class T>
void all_reduce_sequential(Comm& comm, View<T> data, const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank();
  const int first_step = comm.next_steps(n);
  comm.declare_buffer(buffer, data.size(), 1);
  Buffer<T> sum = comm.scratch<T>(data.size());  // data stays my input until the end
  Buffer<T> incoming = comm.scratch<T>(data.size());
  ops::fill(sum.view(), T{});
  // quote: sequential
  for (int i = 0; i < n; ++i) {
    // round i: rank i's input goes to everyone, and everyone adds it
    const int step = first_step + i;
    const MsgMeta m = meta(step, buffer, 0, 1, Apply::reduce, rank_bit(i));
    if (me == i) {
      if (n > 1) comm.mark_step(step);  // a world of one moves no message
      for (int k = 1; k < n; ++k) comm.send(cview(data), (i + k) % n, kTagSequential, m);
      auto add = comm.phase("add");
      ops::add(sum.view(), cview(data));
    } else {
      comm.recv(incoming.view(), i, kTagSequential, m);
      auto add = comm.phase("add");
      ops::add(sum.view(), cview(incoming.view()));
    }
  }
  // end quote: sequential
  ops::copy(data, cview(sum.view()));
}

}  // namespace distlab::coll
