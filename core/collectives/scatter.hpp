// scatter.hpp — the root hands chunk i of its buffer to rank i.
//
// Linear algorithm, N - 1 steps:
//   step s = 1 .. N-1:  root -> rank (root + s) mod N, that rank's chunk
// The root sends (N-1)/N of the buffer, every other rank receives 1/N of it: the root's
// traffic grows as O(N), the others' stays O(1). Chunks follow Partition (sizes differ by at
// most one element when N does not divide the length).
#pragma once

#include "core/collectives/common.hpp"

namespace distlab::coll {

// send: the root's whole buffer (ignored elsewhere); recv: this rank's chunk.
// `contributors` says whose data the chunks hold (default: the root's), for the trace.
template <class T>
void scatter(Comm& comm, View<const T> send, View<T> recv, int root,
             const std::string& buffer = "data", std::uint64_t contributors = 0) {
  const int n = comm.size(), me = comm.rank();
  const int first_step = comm.next_steps(n - 1);
  if (contributors == 0) contributors = rank_bit(root);
  if (me == root) {
    const Partition part{send.size(), n};
    ops::copy(recv, send.sub(part.begin(me), part.size(me)));  // the root keeps its own chunk
    for (int s = 1; s < n; ++s) {
      // step s: send rank (root + s)'s chunk to it
      const int dst = (root + s) % n;
      comm.mark_step(first_step + s - 1);
      comm.send(send.sub(part.begin(dst), part.size(dst)), dst, kTagScatter,
                meta(first_step + s - 1, buffer, dst, dst + 1, Apply::copy, contributors));
    }
  } else {
    const int s = (me - root + n) % n;  // this rank's chunk goes out at step s
    comm.recv(recv, root, kTagScatter,
              meta(first_step + s - 1, buffer, me, me + 1, Apply::copy, contributors));
  }
}

}  // namespace distlab::coll
