// reduce.hpp — the element-wise sum of every rank's buffer, on the root.
//
// Linear algorithm, N - 1 steps:
//   step s = 1 .. N-1:  rank (root + s) mod N -> root, whole buffer; the root adds it
// The root receives (N-1) whole buffers and does (N-1) additions: O(N) at the root.
//   [1] [2] [3] [4]  --reduce-->  [10] on the root   (gather would give [1, 2, 3, 4])
#pragma once

#include "core/collectives/common.hpp"

namespace distlab::coll {

// send: this rank's input; recv: the sum on the root (may be the same memory as send there).
template <class T>
void reduce(Comm& comm, View<const T> send, View<T> recv, int root,
            const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank();
  const int first_step = comm.next_steps(n - 1);
  if (me == root) {
    ops::copy(recv, send);
    if (broken("reduce-forget-root")) ops::fill(recv, T(0));  // lesson 03's --break
    Buffer<T> incoming = comm.scratch<T>(recv.size());        // one peer's buffer at a time
    for (int s = 1; s < n; ++s) {
      // step s: receive rank (root + s)'s buffer and add it in
      const int src = (root + s) % n;
      comm.mark_step(first_step + s - 1);
      comm.recv(incoming.view(), src, kTagReduce,
                meta(first_step + s - 1, buffer, 0, n, Apply::reduce, rank_bit(src)));
      auto add = comm.phase("add");
      ops::add(recv, View<const T>(incoming.view()));
    }
  } else {
    const int s = (me - root + n) % n;
    comm.send(send, root, kTagReduce,
              meta(first_step + s - 1, buffer, 0, n, Apply::reduce, rank_bit(me)));
  }
}

}  // namespace distlab::coll
