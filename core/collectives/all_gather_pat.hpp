// all_gather_pat.hpp — PAT all-gather (NCCL 2.23's "parallel aggregated trees", for one rank per
// node): Bruck's schedule with its distances reversed, each chunk straight into its place through
// a staging buffer of B chunks.
//
// The buffer is cut into N chunks (Partition), rank r's chunk r filled in. A rank holds chunks by
// their offset from itself: offset s is chunk (r + s) mod N; it starts with offset 0. With
// L = ceil(log2 N) steps, distance D = 2^(L-1-k) at step k = 0 .. L-1 (N/2 first, 1 last):
//   step k:  every held offset s with s + D < N goes to rank r - D (where it is offset s + D);
//            from rank r + D come the same offsets, which are s + D here.
// After step k a rank holds the offsets that are multiples of D below N, so after the last
// (D = 1) it holds all N. Step k moves c_k = ceil((N - D) / 2D) chunks each way, N - 1 in all.
//
// Bruck (all_gather_bruck.hpp) runs the distances upwards: what arrives is a contiguous run of
// offsets, which Bruck keeps in a rotated scratch of N chunks and rotates at the end. Reversed,
// the offsets that travel in one step are 2D apart, so they go through a staging buffer: packed
// into it, sent, received into the peer's, unpacked into their places. PAT bounds that buffer to
// B chunks: a step of c_k chunks goes as ceil(c_k / B) sub-steps, so the memory a rank needs
// besides the result is B chunks each way, whatever N, at the price of more steps:
//   steps = sum over k of ceil(c_k / B)    (log2 N when B >= N/2, N - 1 when B = 1)
// Each chunk is its own message (the trace keeps a message's chunks contiguous), all of a
// sub-step's in flight at once.
#pragma once

#include <algorithm>
#include <vector>

#include "core/collectives/common.hpp"
#include "core/collectives/tree.hpp"

namespace distlab::coll {

// What one call did, for the lesson's checks: its sub-steps and the most chunks (and bytes) its
// staging buffer held at once, each way.
struct PatStats {
  int steps = 0;
  int staged_chunks = 0;
  std::uint64_t staged_bytes = 0;
};

// data: the whole buffer, with this rank's chunk filled in; afterwards every chunk is.
// `staging`: B, the chunks the staging buffer holds (1 or more).
template <class T>
PatStats all_gather_pat(Comm& comm, View<T> data, int staging, const std::string& buffer = "data") {
  DL_CHECK(staging >= 1, "PAT's staging buffer must hold a chunk at least, not {}", staging);
  const int n = comm.size(), me = comm.rank(), rounds = binomial_rounds(n);
  const Partition part{data.size(), n};
  comm.declare_buffer(buffer, data.size(), n);

  // The schedule, the same on every rank: for each step, the offsets that travel.
  std::vector<std::vector<int>> travel;
  std::vector<int> held = {0};
  int steps = 0;
  for (int k = 0; k < rounds; ++k) {
    const int d = 1 << (rounds - 1 - k);
    std::vector<int> go;
    for (int s : held)
      if (s + d < n) go.push_back(s);
    for (int s : go) held.push_back(s + d);
    steps += int((go.size() + std::size_t(staging) - 1) / std::size_t(staging));
    travel.push_back(std::move(go));
  }

  PatStats stats;
  stats.steps = steps;
  const std::size_t most = part.size(0);  // the largest chunk (Partition puts the extras first)
  std::vector<T> out(std::size_t(staging) * most), in(std::size_t(staging) * most);
  int step = comm.next_steps(steps);
  // quote: all-gather-pat
  for (int k = 0; k < rounds; ++k) {
    const int d = 1 << (rounds - 1 - k), to = (me - d + n) % n, from = (me + d) % n;
    const std::vector<int>& go = travel[std::size_t(k)];
    for (std::size_t first = 0; first < go.size(); first += std::size_t(staging), ++step) {
      // sub-step: up to B offsets, packed into the staging buffer and sent to rank me - d; the
      // same offsets of rank me + d received into the other, then unpacked into their places
      const std::size_t last = std::min(go.size(), first + std::size_t(staging));
      comm.mark_step(step);
      std::vector<Request> requests;
      std::size_t at_out = 0, at_in = 0;
      for (std::size_t j = first; j < last; ++j) {
        const int mine = (me + go[j]) % n, theirs = (from + go[j]) % n;
        std::copy_n(data.data() + part.begin(mine), part.size(mine), out.data() + at_out);
        requests.push_back(
            comm.irecv(View<T>{in.data() + at_in, part.size(theirs), Device::cpu}, from, kTagPat,
                       meta(step, buffer, theirs, theirs + 1, Apply::copy, rank_bit(theirs))));
        requests.push_back(
            comm.isend(View<const T>{out.data() + at_out, part.size(mine), Device::cpu}, to,
                       kTagPat, meta(step, buffer, mine, mine + 1, Apply::copy, rank_bit(mine))));
        at_out += part.size(mine);
        at_in += part.size(theirs);
      }
      stats.staged_chunks = std::max(stats.staged_chunks, int(last - first));
      stats.staged_bytes = std::max<std::uint64_t>(stats.staged_bytes, at_in * sizeof(T));
      comm.wait_all(requests);
      at_in = 0;
      for (std::size_t j = first; j < last; ++j) {
        const int theirs = (from + go[j]) % n;
        std::copy_n(in.data() + at_in, part.size(theirs), data.data() + part.begin(theirs));
        at_in += part.size(theirs);
      }
    }
  }
  // end quote: all-gather-pat
  return stats;
}

}  // namespace distlab::coll
