// fold.hpp — running a power-of-two algorithm on any number of ranks.
//
// p2 is the largest power of two <= N and rem = N - p2. Before the algorithm each extra rank
// r >= p2 hands its buffer to partner r - p2, which adds it in (one step); the p2 ranks run
// the algorithm as if they were the whole world; afterwards each partner hands the result
// back (one step). Partner v < rem then speaks for two ranks: v and v + p2.
//   N = 6: p2 = 4, rem = 2;  r4 -> r0, r5 -> r1;  r0..r3 run the algorithm;  r0 -> r4, r1 -> r5
#pragma once

#include <bit>

#include "core/collectives/common.hpp"

namespace distlab::coll {

struct Fold {
  int n = 1, p2 = 1, rem = 0;
  explicit Fold(int size)
      : n(size),
        p2(size > 0 ? static_cast<int>(std::bit_floor(static_cast<unsigned>(size))) : 1),
        rem(size - p2) {}

  int log2_p2() const { return std::countr_zero(static_cast<unsigned>(p2)); }
  bool takes_part(int rank) const { return rank < p2; }
  int extra_steps() const { return rem > 0 ? 2 : 0; }
  // Real ranks whose data a group of virtual ranks holds: {v} plus v + p2 for folded-in partners.
  // `group_bits`: virtual ranks u with (u & ~bits) == (v & ~bits), i.e. v's group after
  // exchanging across every distance in `bits`.
  std::uint64_t contributors(int v, int group_bits) const {
    std::uint64_t m = 0;
    for (int u = 0; u < p2; ++u)
      if ((u & ~group_bits) == (v & ~group_bits))
        m |= rank_bit(u) | (u < rem ? rank_bit(u + p2) : 0);
    return m;
  }
};

// Step `step`: extra ranks send their whole buffer to their partner, which adds it in.
// `chunks`: how many chunks the buffer was declared with (the message carries all of them).
template <class T>
void fold_in(Comm& comm, View<T> data, const Fold& f, int step, const std::string& buffer,
             int chunks) {
  if (f.rem == 0) return;
  const int me = comm.rank();
  if (me >= f.p2) {
    comm.mark_step(step);
    comm.send(cview(data), me - f.p2, kTagFold,
              meta(step, buffer, 0, chunks, Apply::reduce, rank_bit(me)));
  } else if (me < f.rem) {
    Buffer<T> incoming = comm.scratch<T>(data.size());
    comm.recv(incoming.view(), me + f.p2, kTagFold,
              meta(step, buffer, 0, chunks, Apply::reduce, rank_bit(me + f.p2)));
    auto add = comm.phase("add");
    ops::add(data, cview(incoming.view()));
  }
}

// Step `step`: partners hand the finished result back to their extra rank.
template <class T>
void fold_out(Comm& comm, View<T> data, const Fold& f, int step, const std::string& buffer,
              int chunks) {
  if (f.rem == 0) return;
  const int me = comm.rank();
  const MsgMeta m = meta(step, buffer, 0, chunks, Apply::copy, all_ranks(f.n));
  if (me < f.rem) {
    comm.mark_step(step);
    comm.send(cview(data), me + f.p2, kTagFold, m);
  } else if (me >= f.p2) {
    comm.recv(data, me - f.p2, kTagFold, m);
  }
}

}  // namespace distlab::coll
