// pipeline.cpp — the ideal machine's replay of a pipeline's orders (pipeline.hpp).
#include "core/training/pipeline.hpp"

#include <algorithm>
#include <cstddef>

namespace distlab::pipeline {

int max_in_flight(const std::vector<Op>& ops) {
  int now = 0, most = 0;
  for (const Op& op : ops) most = std::max(most, now += op.forward ? 1 : -1);
  return most;
}

std::vector<std::vector<int>> ideal_ends(const std::vector<std::vector<Op>>& ops, int M) {
  const int P = int(ops.size());
  std::vector<std::vector<int>> end(static_cast<std::size_t>(P));
  std::vector<std::vector<int>> f_end(std::size_t(P), std::vector<int>(std::size_t(M), -1)),
      b_end = f_end;
  std::vector<std::size_t> next(std::size_t(P), 0);
  std::vector<int> free_at(std::size_t(P), 0);
  for (bool progress = true; progress;) {  // each round starts every op whose input is ready
    progress = false;
    for (int r = 0; r < P; ++r) {
      auto& i = next[std::size_t(r)];
      if (i == ops[std::size_t(r)].size()) continue;
      const Op op = ops[std::size_t(r)][i];
      if (op.micro < 0 || op.micro >= M) continue;  // not a micro-batch of this step: never ready
      int ready = 0;
      if (op.forward && r > 0) ready = f_end[std::size_t(r - 1)][std::size_t(op.micro)];
      if (!op.forward)
        ready = r + 1 < P ? b_end[std::size_t(r + 1)][std::size_t(op.micro)]
                          : f_end[std::size_t(r)][std::size_t(op.micro)];
      if (ready < 0) continue;
      const int start = std::max(ready, free_at[std::size_t(r)]),
                stop = start + (op.forward ? kForwardUnits : kBackwardUnits);
      (op.forward ? f_end : b_end)[std::size_t(r)][std::size_t(op.micro)] = stop;
      free_at[std::size_t(r)] = stop;
      end[std::size_t(r)].push_back(stop);
      ++i;
      progress = true;
    }
  }
  return end;
}

std::vector<int> ideal_ticks(const std::vector<std::vector<int>>& ends) {
  std::vector<int> ticks;
  for (const auto& stage_ends : ends)
    ticks.insert(ticks.end(), stage_ends.begin(), stage_ends.end());
  std::sort(ticks.begin(), ticks.end());
  ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
  return ticks;
}

IdealReplay replay_ideal(const std::vector<std::vector<Op>>& orders, int M) {
  const std::vector<std::vector<int>> ends = ideal_ends(orders, M);
  IdealReplay r{true, 0, 0};
  for (std::size_t k = 0; k < orders.size(); ++k) {
    r.complete = r.complete && ends[k].size() == orders[k].size();
    for (const Op& op : orders[k]) r.busy += op.forward ? kForwardUnits : kBackwardUnits;
    for (int e : ends[k]) r.step = std::max(r.step, e);
  }
  return r;
}

}  // namespace distlab::pipeline
