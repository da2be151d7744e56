// broadcast.hpp — the root's buffer is copied to every rank.
//
// Linear algorithm, N - 1 steps:
//   step s = 1 .. N-1:  root -> rank (root + s) mod N, the whole buffer
// The root sends (N-1) whole buffers: O(N) at the root, O(1) at every other rank.
#pragma once

#include "core/collectives/common.hpp"

namespace distlab::coll {

// data: the root's input; the output everywhere. `contributors`: whose data it holds.
template <class T>
void broadcast(Comm& comm, View<T> data, int root, const std::string& buffer = "data",
               std::uint64_t contributors = 0) {
  const int n = comm.size(), me = comm.rank();
  const int first_step = comm.next_steps(n - 1);
  if (contributors == 0) contributors = rank_bit(root);
  if (me == root) {
    for (int s = 1; s < n; ++s) {
      // step s: the whole buffer to rank (root + s)
      const int dst = (root + s) % n;
      comm.mark_step(first_step + s - 1);
      comm.send(View<const T>(data), dst, kTagBroadcast,
                meta(first_step + s - 1, buffer, 0, n, Apply::copy, contributors));
    }
  } else {
    const int s = (me - root + n) % n;
    comm.recv(data, root, kTagBroadcast,
              meta(first_step + s - 1, buffer, 0, n, Apply::copy, contributors));
  }
}

}  // namespace distlab::coll
