// pipeline.hpp — a pipeline's orders of work replayed on an ideal machine (lessons 11 and 14).
//
// A stage's order is a list of ops: the forward or the backward of micro-batch m. On the ideal
// machine a forward takes 1 unit and a backward 2 (it computes two gradients), messages take
// nothing, and an op starts when its stage is free and its input is there: the forward of the
// stage before, the backward of the stage after (the last stage's backward: its own forward).
// Every stage is then busy M (f + b) of the step's (M + P - 1)(f + b) under GPipe and 1F1B:
// utilisation M / (M + P - 1), the bubble (P - 1) / (M + P - 1).
#pragma once

#include <vector>

namespace distlab::pipeline {

struct Op {
  bool forward = true;
  int micro = 0;
  bool operator==(const Op&) const = default;
};

inline constexpr int kForwardUnits = 1, kBackwardUnits = 2;

// The lecture's claim, apart from any schedule's code.
inline double utilisation_formula(int P, int M) {
  return double(M) / double(M + P - 1);
}

// The most micro-batches a stage holds activations for at once, following its order.
int max_in_flight(const std::vector<Op>& ops);

// ends[r][i]: when stage r's i-th op ends on the ideal machine. An op whose input never comes (an
// order that would deadlock) is left out: its stage's list is then shorter than its order.
std::vector<std::vector<int>> ideal_ends(const std::vector<std::vector<Op>>& orders, int M);

// The distinct end times of the ideal machine's ops, in order (ranked: lesson 11's step ids).
std::vector<int> ideal_ticks(const std::vector<std::vector<int>>& ends);

// Every stage's order replayed: B/T = M/(M+P-1) holds exactly when B (M+P-1) = M T (B: busy
// units summed over the stages; per stage 3M), in integers.
struct IdealReplay {
  bool complete = false;  // every op of every order ran
  int step = 0;           // T: the last op's end
  int busy = 0;           // B summed over the stages
  // Each stage's utilisation, B / (P T); 0 for an empty replay.
  double utilisation(int stages) const {
    return step > 0 && stages > 0 ? double(busy) / (double(stages) * double(step)) : 0.0;
  }
};
IdealReplay replay_ideal(const std::vector<std::vector<Op>>& orders, int M);

}  // namespace distlab::pipeline
