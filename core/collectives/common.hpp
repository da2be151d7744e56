// collectives/common.hpp — what every collective shares: tags, contribution masks, metadata.
#pragma once

#include <bit>
#include <cstdint>
#include <string>

#include "core/base/breaks.hpp"
#include "core/base/partition.hpp"
#include "core/comm/comm.hpp"
#include "core/ops/ops.hpp"

namespace distlab::coll {

// One tag per collective, so a message of one can never match a receive of another.
inline constexpr int kTagScatter = 100;
inline constexpr int kTagGather = 200;
inline constexpr int kTagBroadcast = 300;
inline constexpr int kTagReduce = 400;
inline constexpr int kTagSequential = 500;
inline constexpr int kTagParallel = 600;
inline constexpr int kTagRing = 700;
inline constexpr int kTagReduceScatterRing = 800;
inline constexpr int kTagAllGatherRing = 810;
inline constexpr int kTagReduceScatterOrdered = 820;
inline constexpr int kTagRecursive = 900;
inline constexpr int kTagFold = 910;
inline constexpr int kTagTree = 1000;
inline constexpr int kTagDoubleTree = 1010;  // + the tree, 0 or 1: two edges may join one pair
inline constexpr int kTagBruck = 1020;
inline constexpr int kTagPat = 1025;
inline constexpr int kTagAllToAll = 1030;
inline constexpr int kTagAllToAllBruck = 1035;
inline constexpr int kTagHierarchical = 1040;

// Bit r when rank r's data is in a payload (the trace carries masks while the world <= 64).
inline std::uint64_t rank_bit(int r) {
  return r < 64 ? std::uint64_t{1} << r : 0;
}
inline std::uint64_t all_ranks(int n) {
  return n >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1;
}

// Ranks r, r-1, ..., r-count+1 (mod n): whose data a ring has summed after count hops.
inline std::uint64_t ring_mask(int r, int count, int n) {
  std::uint64_t m = 0;
  for (int k = 0; k < count; ++k) m |= rank_bit(((r - k) % n + n) % n);
  return m;
}

template <class T>
View<const T> cview(View<T> v) {
  return View<const T>(v);
}

// Metadata of one message: step, the chunks of `buffer` it carries, and whose data is in it.
inline MsgMeta meta(int step, const std::string& buffer, int chunk_begin, int chunk_end,
                    Apply apply, std::uint64_t contributors) {
  MsgMeta m;
  m.step = step;
  m.buffer = buffer;
  m.chunk_begin = chunk_begin;
  m.chunk_end = chunk_end;
  m.apply = apply;
  m.contrib_mask = contributors;
  m.contributions = std::popcount(contributors);
  return m;
}

// Sends `out` to dst while receiving from src and adding the message into `acc`. In-process CPU
// ranks add as they copy (Transport::reduces_on_receive): one pass over memory, where landing
// the message in `scratch` and adding it after, in an "add" phase, takes two. The sum has the
// same bits either way. `scratch` holds at least acc.size() elements.
template <class T>
void sendrecv_reduce(Comm& comm, View<const T> out, int dst, View<T> acc, View<T> scratch, int src,
                     int tag, MsgMeta send_meta, MsgMeta recv_meta) {
  if (comm.reduces_on_receive(acc)) {
    Request r[2] = {comm.irecv_reduce(acc, src, tag, std::move(recv_meta)),
                    comm.isend(out, dst, tag, std::move(send_meta))};
    comm.wait_all(r);
    return;
  }
  View<T> got = scratch.sub(0, acc.size());
  comm.sendrecv(out, dst, got, src, tag, std::move(send_meta), std::move(recv_meta));
  auto add = comm.phase("add");
  ops::add(acc, cview(got));
}

}  // namespace distlab::coll
