// all_to_all.hpp — every rank sends a different block to every other rank: expert parallelism's
// collective (tokens routed to the ranks that hold their experts), and the transpose of a matrix
// spread by rows.
//
// Pairwise exchange, N - 1 steps (MPI's classic algorithm for large blocks):
//   step s = 1 .. N-1:  send block (r + s) mod N to rank r + s, receive block (r - s) mod N
//                       from rank r - s
// Every rank sends and receives (N-1) blocks of B bytes, one per step, and each step pairs every
// rank with a different partner, so no link carries two messages at once on a full network.
//   cost: (N-1) (alpha + B beta)
// A rank's own block is copied locally. No sums: the data only moves.
#pragma once

#include "core/collectives/common.hpp"

namespace distlab::coll {

// send: N blocks of `count` elements, block j for rank j; recv: N blocks, block j from rank j
// (send and recv must not overlap).
template <class T>
void all_to_all_pairwise(Comm& comm, View<const T> send, View<T> recv,
                         const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank();
  DL_CHECK(send.size() == recv.size() && send.size() % std::size_t(n) == 0,
           "all-to-all: send ({}) and recv ({}) must hold N = {} equal blocks", send.size(),
           recv.size(), n);
  const std::size_t count = send.size() / std::size_t(n);
  const int first_step = comm.next_steps(n - 1);
  // The trace's buffer: recv, chunk j the block from rank j.
  comm.declare_buffer(buffer, recv.size(), n);
  const auto block = [&](auto v, int j) { return v.sub(std::size_t(j) * count, count); };
  ops::copy(block(recv, me), block(send, me));
  // quote: all-to-all-pairwise
  for (int s = 1; s < n; ++s) {
    // step s: my block for rank me + s goes to it; rank me - s's block for me comes in
    const int step = first_step + s - 1, to = (me + s) % n, from = (me - s + n) % n;
    comm.mark_step(step);
    comm.sendrecv(block(send, to), to, block(recv, from), from, kTagAllToAll,
                  meta(step, buffer, me, me + 1, Apply::copy, rank_bit(me)),
                  meta(step, buffer, from, from + 1, Apply::copy, rank_bit(from)));
  }
  // end quote: all-to-all-pairwise
}

}  // namespace distlab::coll
