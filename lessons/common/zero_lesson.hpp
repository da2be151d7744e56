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
//   - my part of the master weights equals plain data parallel's (bit for bit with
//     --deterministic) and the float64 reference's (zero::reference).
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

// How far my part of the master weights is from another run's whole flat vector (`want`):
// element i of `mine` is parameter positions[i] (zero::master_positions; -1: padding).
struct Distance {
  double err2 = 0, moved2 = 0;  // sum of (mine - want)^2 and of (want - initial)^2 over my part
  double max_abs = 0;           // max |mine - want|, for the record
  bool padding_zero = true;
  double relative() const;  // sqrt(err2 / moved2): the error over the size of the update
};
Distance distance(const std::vector<float>& mine, const std::vector<std::int64_t>& positions,
                  const std::vector<double>& want, const std::vector<float>& initial);

// Tolerances against the float64 reference, as a fraction of its update (2-norms; the ZeRO
// lessons' READMEs derive them): the bf16 gradient sums in the reference's order
// (--deterministic), or in the ring's.
inline constexpr double kTolReference = 0.1, kTolReferenceDeterministic = 2e-3, kTolDp = 0.1;

// `step` is the stage's step, from the lesson's main.cpp.
int run_lesson(int argc, char** argv, Stage stage, const std::string& number,
               const std::string& name, const LessonText& text, const Step& step);

}  // namespace distlab::zero
