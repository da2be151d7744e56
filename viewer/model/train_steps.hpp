// train_steps.hpp — where each training step (iteration) of a training lesson begins.
//
// A training lesson runs the same exchange every iteration: the same buffer is reduce-scattered,
// pulled or pushed again and again. A lesson marks each iteration with a phase whose op is
// kTrainStepOp, "train step" (core/trace/format.hpp; docs/trace-format.md, "Captions and
// training steps"). From those spans and the messages sent inside them:
//   start[k]       the earliest start of training step k's span on any rank
//   first_step[k]  the smallest algorithm step id of a message sent inside it (on its sender)
// Step ids are global (every rank numbers them alike), so "the training step of step id s" is
// the same on every rank even where the ranks' iterations overlap in time.
// A trace without such spans has no training steps: every query answers -1.
#pragma once

#include <vector>

#include "core/trace/format.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

struct TrainSteps {
  std::vector<double> start;    // by training step, microseconds
  std::vector<int> first_step;  // by training step; kNoStep when no message was sent inside it
  static constexpr int kNoStep = 1 << 30;

  int count() const { return static_cast<int>(start.size()); }
  // The training step that step id `step` belongs to: the last one whose first step is at or
  // before it; -1 before the first, or when the trace has none.
  int at_step(int step) const;
  // The training step running at `t_us`: the last one started at or before it; -1 when none.
  int at_time(double t_us) const;
};

TrainSteps train_steps(const TraceModel& model);

}  // namespace distlab::viewer
