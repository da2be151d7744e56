// overlap.hpp — how much of each rank's communication ran under its computation (lesson 16).
//
// Per rank, with lesson 16's definition (its main.cpp, overlap_of; README "How overlap is
// measured"):
//   communication  the union of the rank's nonblocking operations' message spans: every send
//                  and recv span in an operation's context ("async k": core/comm/async.hpp), each
//                  from the message being posted to being done (what the timeline's send and
//                  recv lanes draw). A blocking call's messages are left out: the rank waits in
//                  them, so nothing computes meanwhile, whatever phase they sit in (lesson 16's
//                  loss sum, ZeRO-3's reduce-scatter after each backward, lesson 14's tp
//                  all-reduces inside a forward).
//   computation    the union of its compute-lane phases whose `op` arg is "forward" or
//                  "backward" (a layer's forward or backward; docs/trace-format.md "Phase args")
//   hidden         communication that lies under computation; exposed = communication - hidden
// Up to a moment: each union clipped to before t, so playback counts the time as it passes.
// The lesson prints the same per configuration, summed over the ranks; over a whole trace the
// viewer's sum is its configurations' sum (tests/lesson16_overlap.sh checks the two agree).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/base/intervals.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

struct RankOverlap {
  double comm_us = 0, hidden_us = 0;
  double exposed_us() const { return comm_us - hidden_us; }
  double share() const { return comm_us > 0 ? hidden_us / comm_us : 0; }  // 0 .. 1
};

// Each rank's intervals, built once per trace.
struct OverlapIndex {
  std::vector<Intervals> comm, work, hidden;  // per rank, merged; hidden = comm within work
  // Some rank has both: a forward or backward phase and a nonblocking operation's message.
  // Otherwise there is nothing to show (a trace without nonblocking operations hides nothing).
  bool shown = false;
};
OverlapIndex index_overlap(const TraceModel& model);

// Per rank: communication and its hidden part up to `t_us` (everything for t at the end).
std::vector<RankOverlap> overlap_until(const OverlapIndex& index, double t_us);

// "1.20 ms of 2.40 ms (50%)": a rank's counter as the viewer prints it.
std::string overlap_text(const RankOverlap& o);

// `distlab-viewer --describe`'s lines: each rank's counter up to `t_us`, and all ranks together
// (the lesson's table sums over the ranks); or one line saying there is nothing to hide under.
std::string describe_overlap(const TraceModel& model, double t_us);

}  // namespace distlab::viewer
