// all_to_all_bruck.hpp — Bruck's all-to-all: ceil(log2 N) messages per rank for any N, where the
// pairwise exchange sends N - 1 (Bruck et al. 1997; MPI libraries use it for small blocks).
//
// A block's journey is its distance i = (destination - source) mod N, written in binary: in
// step k it hops 2^k ranks forward when bit k of i is set. Each rank keeps its blocks in a
// scratch array indexed by that distance:
//   rotate:   slot i := my block for rank me + i
//   step k, d = 2^k:  send every slot i with bit k set to rank me + d (packed into one message),
//                     receive the same slots from rank me - d
//   unrotate: recv block j := slot (me - j) mod N
// After the steps, slot i holds the block that rank me - i sent to me. Each step moves about
// half the blocks, so a rank sends ceil(lg N) messages of about N/2 blocks: fewer, larger
// messages than pairwise at the price of more bytes (each block travels popcount(i) hops).
//   cost: ceil(lg N) alpha + sum_k |{i < N : bit k of i}| B beta   (about lg N N/2 B beta)
// The two local rotations and the packing copy memory; no sums, the data only moves.
//
// The trace: a step's message carries slots scattered over the scratch array (every other run
// of 2^k), which a chunk range cannot name, so its messages carry the step and whose blocks are
// in them but no chunks of a buffer: the Shards panel replays the pairwise exchange, not this.
#pragma once

#include "core/collectives/common.hpp"
#include "core/collectives/tree.hpp"

namespace distlab::coll {

// The distances i < n with bit k set: the slots step k of Bruck's all-to-all moves.
inline std::vector<int> bruck_slots(int n, int k) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i)
    if (i >> k & 1) out.push_back(i);
  return out;
}

// send: N blocks of `count` elements, block j for rank j; recv: N blocks, block j from rank j
// (send and recv must not overlap).
template <class T>
void all_to_all_bruck(Comm& comm, View<const T> send, View<T> recv) {
  const int n = comm.size(), me = comm.rank();
  DL_CHECK(send.size() == recv.size() && send.size() % std::size_t(n) == 0,
           "all-to-all: send ({}) and recv ({}) must hold N = {} equal blocks", send.size(),
           recv.size(), n);
  const std::size_t count = send.size() / std::size_t(n);
  const int steps = binomial_rounds(n), first_step = comm.next_steps(steps);
  const auto block = [&](auto v, int j) { return v.sub(std::size_t(j) * count, count); };
  auto slots = comm.scratch<T>(send.size());
  // Half the slots at most move in a step (rounded up): the packed messages' room.
  const std::size_t most = (std::size_t(n) + 1) / 2 * count;
  auto out = comm.scratch<T>(most), in = comm.scratch<T>(most);
  // quote: all-to-all-bruck
  // rotate: slot i holds my block for rank me + i
  for (int i = 0; i < n; ++i) ops::copy(block(slots.view(), i), block(send, (me + i) % n));
  for (int k = 0, d = 1; k < steps; ++k, d *= 2) {
    // step k: the slots with bit k set hop d ranks forward, packed into one message
    const int step = first_step + k, to = (me + d) % n, from = (me - d + n) % n;
    const std::vector<int> moving = bruck_slots(n, k);
    // Slot i came to me from rank me - (i mod d) (its lower bits' hops are done).
    const auto whose = [&](int at) {
      std::uint64_t m = 0;
      for (int i : moving) m |= rank_bit(((at - (i & (d - 1))) % n + n) % n);
      return m;
    };
    const std::size_t length = moving.size() * count;
    for (std::size_t j = 0; j < moving.size(); ++j)
      ops::copy(block(out.view(), int(j)), cview(block(slots.view(), moving[j])));
    MsgMeta sent, got;
    sent.step = got.step = step;
    sent.contrib_mask = whose(me), got.contrib_mask = whose(from);
    sent.contributions = std::popcount(sent.contrib_mask);
    got.contributions = std::popcount(got.contrib_mask);
    comm.mark_step(step);
    comm.sendrecv(cview(out.view().sub(0, length)), to, in.view().sub(0, length), from,
                  kTagAllToAllBruck, sent, got);
    for (std::size_t j = 0; j < moving.size(); ++j)
      ops::copy(block(slots.view(), moving[j]), cview(block(in.view(), int(j))));
  }
  // unrotate: slot i holds rank me - i's block for me (lesson 15's --break leaves it out)
  const bool unrotate = !broken("bruck-skip-unrotate");
  for (int j = 0; j < n; ++j)
    ops::copy(block(recv, j), cview(block(slots.view(), unrotate ? (me - j + n) % n : j)));
  // end quote: all-to-all-bruck
}

}  // namespace distlab::coll
