// all_reduce_parallel.hpp — every rank sends its whole buffer to every other rank at once.
//
//   one step: post N-1 receives and N-1 sends, wait for all, add the N-1 buffers
// Time O(1) steps, but each rank sends and receives (N-1) S at once: per-rank bandwidth
// O(N), N(N-1) S on all links together: O(N^2). It also holds N-1 incoming buffers at once.
// Every rank adds in rank order, so every rank ends with the same bits.
#pragma once

#include <vector>

#include "core/collectives/common.hpp"

namespace distlab::coll {

// data: this rank's input, replaced by the sum over all ranks.
template <class T>
void all_reduce_parallel(Comm& comm, View<T> data, const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank();
  const int step = comm.next_steps(1);
  comm.declare_buffer(buffer, data.size(), 1);
  if (n > 1) comm.mark_step(step);  // a world of one moves no message
  // incoming[k]: rank k's input (my own slot stays empty)
  std::vector<Buffer<T>> incoming;
  std::vector<Request> requests;
  for (int k = 0; k < n; ++k) {
    incoming.push_back(comm.scratch<T>(k == me ? 0 : data.size()));
    if (k != me)
      requests.push_back(comm.irecv(incoming[k].view(), k, kTagParallel,
                                    meta(step, buffer, 0, 1, Apply::reduce, rank_bit(k))));
  }
  for (int k = 0; k < n; ++k)
    if (k != me) {
      requests.push_back(comm.isend(cview(data), k, kTagParallel,
                                    meta(step, buffer, 0, 1, Apply::reduce, rank_bit(me))));
      // lesson 06's --break: a blocking send, so one is in flight at a time, not N-1
      if (broken("parallel-one-send-at-a-time")) comm.wait(requests.back());
    }
  comm.wait_all(requests);
  auto add = comm.phase("add");
  Buffer<T> sum = comm.scratch<T>(data.size());
  ops::fill(sum.view(), T{});
  for (int k = 0; k < n; ++k)
    ops::add(sum.view(), k == me ? cview(data) : cview(incoming[k].view()));
  ops::copy(data, cview(sum.view()));
}

}  // namespace distlab::coll
