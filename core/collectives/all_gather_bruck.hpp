// all_gather_bruck.hpp — Bruck's all-gather: ceil(log2 N) steps for any N (Bruck et al. 1997).
//
// The buffer is cut into N chunks (Partition), rank r's chunk r filled in. After step k a rank
// holds the chunks of ranks r, r+1, .., r + 2^(k+1) - 1 (mod N):
//   step k, d = 2^k:  send the chunks of ranks r .. r + c - 1 to rank r - d, receive those of
//                     ranks r + d .. r + d + c - 1 from rank r + d, c = min(d, N - d)
// The held chunks double each step, so ceil(log2 N) steps suffice for any N, where the ring takes
// N - 1 and recursive doubling needs a power of two. Bruck's algorithm keeps the chunks in a
// rotated scratch array (one message a step, one rotation at the end); here they land straight
// in their places, so a range that wraps past rank N - 1 goes as two messages (each contiguous,
// as the trace's chunk ranges are): at most 2 ceil(log2 N) messages, (N-1)/N S bytes each way.
//   cost: ceil(lg N) alpha (up to twice that with the wrap) + (N-1)/N S beta
#pragma once

#include "core/collectives/common.hpp"
#include "core/collectives/tree.hpp"

namespace distlab::coll {

// data: the whole buffer, with this rank's chunk filled in; afterwards every chunk is.
// `reduced`: the chunks are already sums over every rank, for the trace.
template <class T>
void all_gather_bruck(Comm& comm, View<T> data, const std::string& buffer = "data",
                      bool reduced = false) {
  const int n = comm.size(), me = comm.rank();
  const Partition part{data.size(), n};
  const int steps = binomial_rounds(n), first_step = comm.next_steps(steps);
  comm.declare_buffer(buffer, data.size(), n);
  // Chunks [c0, c1) of the buffer, contiguous (c1 <= n).
  const auto chunks = [&](int c0, int c1) {
    return data.sub(part.begin(c0), part.begin(c1) - part.begin(c0));
  };
  const auto whose = [&](int c0, int c1) {
    std::uint64_t m = 0;
    for (int c = c0; c < c1; ++c) m |= rank_bit(c);
    return reduced ? all_ranks(n) : m;
  };
  // The chunks of ranks first .. first + count - 1 (mod n), as at most two contiguous ranges.
  const auto ranges = [&](int first, int count) {
    std::vector<std::pair<int, int>> out;
    first %= n;
    if (first + count <= n) {
      out.push_back({first, first + count});
    } else {
      out.push_back({first, n});
      out.push_back({0, first + count - n});
    }
    return out;
  };
  // quote: all-gather-bruck
  for (int k = 0, d = 1; k < steps; ++k, d *= 2) {
    // step k: my first c chunks to rank me - d, the next c from rank me + d
    const int step = first_step + k, c = std::min(d, n - d);
    const int to = (me - d + n) % n, from = (me + d) % n;
    comm.mark_step(step);
    std::vector<Request> requests;
    for (const auto& [c0, c1] : ranges(from, c))
      requests.push_back(comm.irecv(chunks(c0, c1), from, kTagBruck,
                                    meta(step, buffer, c0, c1, Apply::copy, whose(c0, c1))));
    for (const auto& [c0, c1] : ranges(me, c))
      requests.push_back(comm.isend(cview(chunks(c0, c1)), to, kTagBruck,
                                    meta(step, buffer, c0, c1, Apply::copy, whose(c0, c1))));
    comm.wait_all(requests);
  }
  // end quote: all-gather-bruck
}

}  // namespace distlab::coll
