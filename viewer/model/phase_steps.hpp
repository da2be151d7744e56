// phase_steps.hpp — a lesson's numbered phases as the steps of its algorithm, and which of them
// the ranks are in at a moment (plain C++, no ImGui; the Topology panel draws them as a legend
// that lights up as playback passes them).
//
// A lesson that walks an algorithm in numbered steps names its compute phases after them, as
// lesson 05's parameter server does: "1 pull", "2 split data", "3 compute gradients",
// "4 push & sum", "5 update". Every compute span whose name is a number, a space and words is
// one; the steps are those names in the order of their numbers (then of first appearance).
#pragma once

#include <string>
#include <vector>

#include "viewer/model/playback.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

struct PhaseStep {
  int number = 0;
  std::string name;  // the whole span name: "4 push & sum"
  // Where it runs: [start, end) on a rank, every span of that name.
  struct Interval {
    double start = 0, end = 0;
    int rank = 0;
  };
  std::vector<Interval> intervals;  // by start
};

// The trace's numbered phases; empty when it has none.
std::vector<PhaseStep> phase_steps(const TraceModel& m);

// What the legend shows for each step at a moment.
struct PhaseState {
  std::vector<int> ranks;  // the ranks inside the step now (lit)
  bool passed = false;     // some rank has finished the step at least once by now
};
std::vector<PhaseState> phase_states(const std::vector<PhaseStep>& steps, const Moment& at);

}  // namespace distlab::viewer
