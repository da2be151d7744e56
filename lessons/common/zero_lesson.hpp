// zero_lesson.hpp — the program lessons 08 (ZeRO-1), 09 (ZeRO-2) and 10 (ZeRO-3 / FSDP)
// share: their options, the training run and its checks, and the report. Each lesson's main.cpp
// holds its stage's step and says what it teaches; this runs it (core/training/zero.hpp has the
// replica the step is built from).
//
// On every rank: train the stage (traced), then train plain data parallel on the same data on a
// ledger of its own (not traced), and check
//   - the model state on the ledger after the last step equals the stage's formula, exactly
//     (with the padding of zero.hpp), category by category;
//   - ZeRO-3: the peak of the parameters is my shards plus one layer's full weights;
//   - every step from my own state against the float64 recipe (StepChecks below), and my master
//     weights against plain data parallel's bit for bit with --deterministic.
// On rank 0, the report: memory per rank and category next to the formula, bytes per
// parameter, the largest model that fits in --gpu-memory, communication per step against
// 2 Psi or 3 Psi (counted from the trace, exactly), and the lecture's table at N = 64.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime/runtime.hpp"
#include "core/training/zero.hpp"

namespace distlab::zero {

struct LessonText {
  std::string title;         // for --help and the trace
  std::string concept_text;  // Lesson::set_text
  std::string look_at;
  // The stage's --break variants: name, the mistake (core/training/zero.cpp carries them).
  std::vector<std::pair<std::string, std::string>> breaks;
};

// Every step of a run checked from the rank's own state, against the float64 recipe restarted
// there (zero::reference_gradient): train()'s StepCheck. After step k it puts together the master
// weights every rank held before it (off the trace), and adds to its element-by-element bounds
//   - my part of the step's summed gradient, within gradient_error (zero.hpp);
//   - Adam's update of my master weights, from them and my moments before it with any gradient
//     within that bound (model::adam_step_bound), and the moments after it
//     (model::adam_moment_bounds);
//   - rank 0: the step's loss within kLossFloat32 of float64's at the same bf16 weights.
// One step's error, which does not accumulate: by induction from the initial weights (checked
// too) the checks cover a run of any length, where a float64 run beside it would part from it
// (Adam on bf16 gradients amplifies one bf16 unit; lesson 08's README measures it).
// finish() makes the checks, named after `what` (a variant's name, or ""), with step 1's gradient
// against the recipe's from the initial weights, and returns the worst share of its bound each
// kind of check took (rank 0's, for the report).
inline constexpr double kLossFloat32 = 1e-3;
struct StepReport {
  double gradient = 0, update = 0, moments = 0, loss = 0;
};
class StepChecks {
 public:
  StepChecks(Comm& comm, const Config& config);
  void operator()(int k, const StepState& before, const StepState& after, double loss);
  StepReport finish(const std::string& what);

 private:
  Comm& comm_;
  const Config& config_;
  std::vector<std::int64_t> positions_;  // my part's place in the flat vector (-1: padding)
  ErrorBound gradient_, update_, moments_, losses_, shares_;
  int steps_ = 0;
  std::vector<float> first_gradient_;  // step 1's summed gradient, my part
  bool starts_ok_ = true, complete_ = true;
};

// `step` is the stage's step, from the lesson's main.cpp.
int run_lesson(int argc, char** argv, Stage stage, const std::string& number,
               const std::string& name, const LessonText& text, const Step& step);

}  // namespace distlab::zero
