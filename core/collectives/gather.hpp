// gather.hpp — every rank's chunk ends up, in rank order, in the root's buffer.
//
// Linear algorithm, N - 1 steps (the mirror of scatter):
//   step s = 1 .. N-1:  rank (root + s) mod N -> root, its chunk
// The root receives (N-1)/N of the result: O(N) at the root, O(1) elsewhere.
//   [1] [2] [3] [4]  --gather-->  [1, 2, 3, 4] on the root
#pragma once

#include "core/collectives/common.hpp"

namespace distlab::coll {

// send: this rank's chunk; recv: the whole result on the root (ignored elsewhere).
template <class T>
void gather(Comm& comm, View<const T> send, View<T> recv, int root,
            const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank();
  const int first_step = comm.next_steps(n - 1);
  if (me == root) {
    const Partition part{recv.size(), n};
    ops::copy(recv.sub(part.begin(me), part.size(me)), send);
    for (int s = 1; s < n; ++s) {
      // step s: receive rank (root + s)'s chunk into its place
      const int src = (root + s) % n;
      comm.mark_step(first_step + s - 1);
      comm.recv(recv.sub(part.begin(src), part.size(src)), src, kTagGather,
                meta(first_step + s - 1, buffer, src, src + 1, Apply::copy, rank_bit(src)));
    }
  } else {
    const int s = (me - root + n) % n;
    comm.send(send, root, kTagGather,
              meta(first_step + s - 1, buffer, me, me + 1, Apply::copy, rank_bit(me)));
  }
}

}  // namespace distlab::coll
