// call_align.hpp — two ranks' calls of one process group aligned as diff aligns two files, so
// that a call missing on one side costs that call and nothing after it.
//
//   tokens   a call is its collective, its size S (-1 unknown) and PyTorch's sequence number
//            (-1 unknown); two calls can pair only when their collectives agree and their sizes
//            and sequence numbers agree wherever both are known
//   order    pairs keep both sides' order (no crossing): PyTorch runs a group's collectives in
//            the order every rank issued them
//   cost     first the fewest unpaired calls (gaps); among alignments with as few, the one
//            whose pairs' ends agree best in time: sum over pairs of min(1/2, |ta - (tb +
//            offset)| / spacing), spacing the median gap between a's calls. The offset is
//            first `prior` (the files' base times: the hosts' clocks, which NTP keeps within
//            milliseconds), then the median of the first alignment's pairs (ta - tb), and the
//            alignment is made again with it. Identical calls at a regular pace (a training
//            loop's all-reduces) cannot be told apart by content: time decides where a gap
//            goes, and when every alignment has the same gaps the one nearest the offset wins
//   search   dynamic programming in a band of diagonals (an alignment with G gaps never
//            strays more than G from the diagonal), widened until the best alignment's gaps
//            fit in the band: O((n + m) G) time
//   seq      when every call on both sides has a sequence number, pairs are simply equal
//            numbers (and equal collectives): no search
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace distlab::viewer {

struct AlignCall {
  std::uint32_t name = 0;   // the collective (any id: equal ids are the same collective)
  std::int64_t bytes = -1;  // S; -1 unknown
  std::int64_t seq = -1;    // PyTorch's sequence number in the group; -1 unknown
  double time = 0;          // the call's end on its side's clock, microseconds
};

bool compatible(const AlignCall& a, const AlignCall& b);

struct Alignment {
  // The path: (i, j) a pair, (i, -1) a's call alone, (-1, j) b's call alone; in order.
  std::vector<std::pair<int, int>> path;
  int gaps = 0;       // calls alone, both sides
  double offset = 0;  // ta - tb: the median over pairs (prior when there are none)
};

Alignment align_calls(const std::vector<AlignCall>& a, const std::vector<AlignCall>& b,
                      double prior = 0);

}  // namespace distlab::viewer
