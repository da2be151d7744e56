// reduce_scatter_ordered.hpp — reduce-scatter in one step, each chunk summed in rank order.
//
// The buffer is cut into N chunks (Partition). In one step every rank sends chunk r to rank r
// (for every r but itself) and receives the N-1 copies of its own chunk; then it adds them up
// in rank order, x_0 + x_1 + ... + x_{N-1}, whatever the rank or the chunking. The ring
// (reduce_scatter_ring.hpp) adds chunk c in the order c+1, c+2, ..., c, which depends on which
// chunk an element falls in, so two programs that cut one buffer differently (ZeRO-1's whole
// buffer, ZeRO-2's layer by layer) round their float sums differently. Summed in rank order,
// every element is the same float sum in both, to the last bit: what --deterministic asks for.
// Traffic is the ring's, (N-1)/N S sent and received per rank; the receiver holds N-1 chunks
// at once.
#pragma once

#include <vector>

#include "core/collectives/common.hpp"

namespace distlab::coll {

// data: this rank's whole input; afterwards chunk `rank` of it holds the sum in rank order.
template <class T>
void reduce_scatter_ordered(Comm& comm, View<T> data, const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank();
  const Partition part{data.size(), n};
  const int step = comm.next_steps(1);
  comm.declare_buffer(buffer, data.size(), n);
  if (n == 1) return;
  auto chunk = [&](int c) { return data.sub(part.begin(c), part.size(c)); };
  const std::size_t mine = part.size(me);
  Buffer<T> incoming = comm.scratch<T>(mine * std::size_t(n));  // slot r: rank r's copy of my chunk
  auto slot = [&](int r) { return incoming.view().sub(std::size_t(r) * mine, mine); };
  comm.mark_step(step);
  std::vector<Request> requests;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    requests.push_back(comm.irecv(slot(r), r, kTagReduceScatterOrdered,
                                  meta(step, buffer, me, me + 1, Apply::reduce, rank_bit(r))));
    requests.push_back(comm.isend(cview(chunk(r)), r, kTagReduceScatterOrdered,
                                  meta(step, buffer, r, r + 1, Apply::reduce, rank_bit(me))));
  }
  comm.wait_all(requests);
  auto add = comm.phase("add");
  ops::copy(slot(me), cview(chunk(me)));  // my own copy joins the others in its slot
  ops::copy(chunk(me), cview(slot(0)));
  for (int r = 1; r < n; ++r) ops::add(chunk(me), cview(slot(r)));
}

}  // namespace distlab::coll
