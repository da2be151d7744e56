// all_reduce_recursive_halving.hpp — Rabenseifner's all-reduce: reduce-scatter by recursive
// halving, then all-gather by recursive doubling.
//
// The buffer is cut into N chunks (N a power of two). Each rank owns a range of chunks,
// at first all of them.
//   reduce-scatter, distance d = N/2, N/4, .., 1:  split my range in halves; the rank with
//       bit d clear keeps the lower half, its partner rank ^ d the upper; each sends the half
//       it gives up and adds the half it keeps. After log2 N steps rank r owns chunk r, summed.
//   all-gather, distance d = 1, 2, .., N/2:  swap ranges with rank ^ d; ranges double.
// 2 log2 N steps; every rank sends (N-1)/N S in each half: 2(N-1)/N S in all, as little as the
// chunked ring, in log2 N instead of N-1 steps per half. Each chunk is summed in one order
// and then copied, so every rank ends with the same bits. N not a power of two: fold.hpp.
#pragma once

#include "core/collectives/fold.hpp"

namespace distlab::coll {

// data: this rank's input, replaced by the sum over all ranks.
template <class T>
void all_reduce_recursive_halving(Comm& comm, View<T> data, const std::string& buffer = "data") {
  const int me = comm.rank();
  const Fold f(comm.size());
  const int p2 = f.p2;
  const Partition part{data.size(), p2};
  int step = comm.next_steps(2 * f.log2_p2() + f.extra_steps());
  comm.declare_buffer(buffer, data.size(), p2);
  // Chunks [c0, c1) as elements of data.
  auto chunks = [&](int c0, int c1) {
    return data.sub(part.begin(c0), part.begin(c1) - part.begin(c0));
  };

  if (f.rem) fold_in(comm, data, f, step++, buffer, p2);
  if (f.takes_part(me)) {
    Buffer<T> incoming = comm.scratch<T>(part.begin(p2 / 2));  // the larger half
    int lo = 0, hi = p2;                                       // the chunks I own
    int exchanged = 0;
    // Reduce-scatter by recursive halving.
    // quote: halving-reduce-scatter
    for (int d = p2 / 2; d >= 1; d /= 2, ++step) {
      // step: keep one half of my range, send the other to rank me ^ d, add what it sends
      const int partner = me ^ d, mid = (lo + hi) / 2;
      const bool upper = (me & d) != 0;
      const int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
      const int give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
      View<T> keep = chunks(keep_lo, keep_hi);
      View<T> got = incoming.sub(0, keep.size());
      comm.mark_step(step);
      comm.sendrecv(
          cview(chunks(give_lo, give_hi)), partner, got, partner, kTagRecursive,
          meta(step, buffer, give_lo, give_hi, Apply::reduce, f.contributors(me, exchanged)),
          meta(step, buffer, keep_lo, keep_hi, Apply::reduce, f.contributors(partner, exchanged)));
      auto add = comm.phase("add");
      ops::add(keep, cview(got));
      lo = keep_lo, hi = keep_hi;
      exchanged |= d;
    }
    // end quote: halving-reduce-scatter
    // Now [lo, hi) == [me, me + 1): I own chunk me, summed over every rank.
    // All-gather by recursive doubling.
    // quote: doubling-all-gather
    for (int d = 1; d < p2; d *= 2, ++step) {
      // step: swap my range with rank me ^ d's range of the same size next to it
      const int partner = me ^ d, width = hi - lo;
      const int their_lo = (me & d) ? lo - width : hi, their_hi = their_lo + width;
      comm.mark_step(step);
      comm.sendrecv(cview(chunks(lo, hi)), partner, chunks(their_lo, their_hi), partner,
                    kTagRecursive, meta(step, buffer, lo, hi, Apply::copy, all_ranks(f.n)),
                    meta(step, buffer, their_lo, their_hi, Apply::copy, all_ranks(f.n)));
      lo = std::min(lo, their_lo), hi = std::max(hi, their_hi);
    }
    // end quote: doubling-all-gather
  } else {
    step += 2 * f.log2_p2();
  }
  if (f.rem) fold_out(comm, data, f, step, buffer, p2);
}

}  // namespace distlab::coll
