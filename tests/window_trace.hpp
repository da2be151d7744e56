// window_trace.hpp — a run with window accesses (schema 4), its rank logs built by hand: the
// loads and stores of a symmetric-memory lesson and one message, for the tests of the writer,
// the reader, the counts and the viewer's model.
#pragma once

#include <cstdint>
#include <vector>

#include "core/trace/recorder.hpp"

namespace distlab::test {

// A window access of `owner`'s window over [t0, t1] us, on the lane its kind goes on.
inline SpanEvent window_access(SpanEvent::Kind kind, int owner, double t0, double t1,
                               std::uint64_t bytes, int step) {
  SpanEvent e;
  e.kind = kind;
  e.lane = kind == SpanEvent::Kind::load ? Lane::recv : Lane::send;
  e.name = kind == SpanEvent::Kind::load ? "load" : "store";
  e.t0 = t0;
  e.t1 = t1;
  e.peer = owner;
  e.bytes = bytes;
  e.meta.step = step;
  return e;
}

// Three ranks, every clock at 0 (times are the trace's):
//   step 1  every rank loads 4 KiB from each other rank's window: from r + 1 over [10, 20], from
//           r + 2 over [12, 22] (the two overlap: a second recv sub-lane)
//   step 2  every rank stores 1 KiB into its own window over [30, 35], chunk r of "data"
//   step 3  one message: r0 sends 64 B to r1, [40, 45] -> [41, 46]; beside it r2 stores 512 B
//           into r0's window over [42, 44]
//   step 4  r1 loads 4 KiB from r0's window over [50, 55], chunk 1 of "data"; recorded on the
//           compute lane, which the writer must not keep (a load goes on the recv lane)
inline std::vector<RankLog> window_logs() {
  constexpr int n = 3;
  using K = SpanEvent::Kind;
  std::vector<RankLog> logs(n);
  for (int r = 0; r < n; ++r) {
    RankLog& log = logs[static_cast<std::size_t>(r)];
    log.rank = r;
    log.host = "h";
    log.buffers = {{"data", 3072, 3}};
    log.spans.push_back(window_access(K::load, (r + 1) % n, 10, 20, 4096, 1));
    log.spans.push_back(window_access(K::load, (r + 2) % n, 12, 22, 4096, 1));
    SpanEvent own = window_access(K::store, r, 30, 35, 1024, 2);
    own.meta.buffer = "data";
    own.meta.chunk_begin = r;
    own.meta.chunk_end = r + 1;
    log.spans.push_back(own);
  }
  SpanEvent send;
  send.kind = K::send;
  send.lane = Lane::send;
  send.name = "send";
  send.t0 = 40;
  send.t1 = 45;
  send.peer = 1;
  send.tag = 0;
  send.bytes = 64;
  send.meta.step = 3;
  logs[0].spans.push_back(send);
  SpanEvent recv = send;
  recv.kind = K::recv;
  recv.lane = Lane::recv;
  recv.name = "recv";
  recv.t0 = 41;
  recv.t1 = 46;
  recv.peer = 0;
  logs[1].spans.push_back(recv);
  logs[2].spans.push_back(window_access(K::store, 0, 42, 44, 512, 3));
  SpanEvent late = window_access(K::load, 0, 50, 55, 4096, 4);
  late.lane = Lane::compute;
  late.meta.buffer = "data";
  late.meta.chunk_begin = 1;
  late.meta.chunk_end = 2;
  logs[1].spans.push_back(late);
  return logs;
}

}  // namespace distlab::test
