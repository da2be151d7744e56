// train_steps.cpp — training steps from the "train step" phases (train_steps.hpp).
#include "viewer/model/train_steps.hpp"

#include <algorithm>

namespace distlab::viewer {

int TrainSteps::at_step(int step) const {
  int k = -1;
  for (int i = 0; i < count(); ++i)
    if (first_step[i] != kNoStep && first_step[i] <= step) k = i;
  return k;
}

int TrainSteps::at_time(double t_us) const {
  const auto it = std::upper_bound(start.begin(), start.end(), t_us);
  return static_cast<int>(it - start.begin()) - 1;
}

TrainSteps train_steps(const TraceModel& m) {
  TrainSteps out;
  std::uint32_t op = 0;  // the string id of "train step"; 0 when the trace never names it
  for (std::uint32_t s = 1; s < m.strings.size() && !op; ++s)
    if (m.strings[s] == distlab::kTrainStepOp) op = s;
  if (!op) return out;

  // Per rank, its training-step spans in order (spans are sorted by start on each lane).
  struct Interval {
    double begin, end;
  };
  std::vector<std::vector<Interval>> of_rank(m.ranks.size());
  for (const Lane& lane : m.lanes)
    for (std::uint32_t i = lane.span_begin; i < lane.span_end; ++i) {
      const Span& s = m.spans[i];
      const SpanArgs* a = m.args(s);
      if (s.kind == SpanKind::compute && a && a->op == op && lane.rank >= 0 &&
          lane.rank < static_cast<int>(of_rank.size()))
        of_rank[lane.rank].push_back({s.start, s.end()});
    }
  std::size_t steps = 0;
  for (auto& list : of_rank) {
    std::sort(list.begin(), list.end(),
              [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
    steps = std::max(steps, list.size());
  }
  out.start.assign(steps, 1e300);
  out.first_step.assign(steps, TrainSteps::kNoStep);
  for (const auto& list : of_rank)
    for (std::size_t k = 0; k < list.size(); ++k)
      out.start[k] = std::min(out.start[k], list[k].begin);
  // The starts stay ordered even when a rank recorded fewer iterations than another.
  for (std::size_t k = 1; k < steps; ++k) out.start[k] = std::max(out.start[k], out.start[k - 1]);

  for (const Message& msg : m.messages) {
    if (msg.step < 0 || msg.src < 0 || msg.src >= static_cast<int>(of_rank.size())) continue;
    const auto& list = of_rank[msg.src];
    auto it = std::upper_bound(list.begin(), list.end(), msg.send_time,
                               [](double t, const Interval& s) { return t < s.begin; });
    if (it == list.begin()) continue;
    --it;
    if (msg.send_time > it->end) continue;  // sent between two training steps
    int& first = out.first_step[static_cast<std::size_t>(it - list.begin())];
    first = std::min(first, static_cast<int>(msg.step));
  }
  return out;
}

}  // namespace distlab::viewer
