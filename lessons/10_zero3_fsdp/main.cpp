// Lesson 10 — ZeRO-3 / FSDP: shard the parameters too
//
// Concept: after ZeRO-2 (lesson 09) every rank still holds all the bf16 weights. ZeRO stage 3,
// which PyTorch calls Fully Sharded Data Parallel, keeps only 1/N of every layer's weights on
// each rank and fetches a layer's weights just before they are needed:
//   forward, layer by layer:   all-gather the layer's weights, compute, free them
//   backward, layer by layer:  all-gather them again, compute, reduce-scatter the gradient
//                              into my shard, free both
//   Adam on my 1/N; round it to my bf16 shard (the next forward gathers it)
// Memory: 16/N bytes per parameter, plus one layer's full weights (and gradient) at a time.
// Communication: two all-gathers and a reduce-scatter, 3 Psi per step: 1.5 x the others'.
//
// Run:  ./distlab lesson 10                     4 ranks, a 16 -> 64 -> 64 -> 8 MLP, 5 steps
//       ./distlab lesson 10 --ranks 64          the lecture's table: 0.25 bytes per parameter
//       ./distlab lesson 10 --deterministic     gradient sums in rank order: bit for bit as plain DP
//       ./distlab lesson 10 --mpi 4             one process per rank
// core/training/zero.hpp does the training (every stage), lessons/common/zero_lesson.cpp the checks
// and tables.
#include "lessons/common/zero_lesson.hpp"

int main(int argc, char** argv) {
  using namespace distlab::zero;
  return run_lesson(
      argc, argv, Stage::zero3, "10", "zero3_fsdp",
      {"ZeRO-3 / FSDP: parameters sharded too, 16/N bytes per parameter",
       "ZeRO-3 (FSDP) shards everything: weights, gradients and optimizer state, 16/N bytes per "
       "parameter. "
       "Before each layer's forward, and again before its backward, the layer's weights are "
       "all-gathered "
       "and freed after use; gradients are reduce-scattered layer by layer. The price: 3 Psi of "
       "communication per step instead of 2 Psi.",
       "Timeline: a gather before every layer in both passes, a reduce-scatter after each layer's "
       "backward. "
       "Memory: the params bar rises by one layer and falls back, layer after layer."});
}
