// Lesson 08 — ZeRO-1: shard the optimizer state
//
// Concept: data parallelism keeps a full copy of everything on every rank. With
// mixed-precision Adam that is 16 bytes per parameter: 2 for the bf16 weights, 2 for the bf16
// gradients, and 12 for Adam's f32 master weights, momentum and variance. ZeRO stage 1
// (Rajbhandari et al., 2020) keeps the 12 bytes of optimizer state on one rank only: rank r
// owns parameters [r Psi/N, (r+1) Psi/N) of the flat vector. Each step:
//   forward and backward as before              every rank, its share of the batch
//   reduce-scatter the gradients                rank r gets the sum of its 1/N only
//   Adam on my 1/N of the master weights        12 Psi/N bytes of state, not 12 Psi
//   round my 1/N to bf16, all-gather them       every rank has all the new bf16 weights
// Memory: 2 + 2 + 12/N = 4 + 12/N bytes per parameter. Communication: a reduce-scatter and an
// all-gather are exactly an all-reduce's halves, so 2 Psi per step, as plain data parallel.
//
// Run:  ./distlab lesson 08                     4 ranks, a 16 -> 64 -> 64 -> 8 MLP, 5 steps
//       ./distlab lesson 08 --ranks 64          the lecture's table: 4.2 bytes per parameter
//       ./distlab lesson 08 --deterministic     gradient sums in rank order: bit for bit as plain DP
//       ./distlab lesson 08 --mpi 4             one process per rank
// core/training/zero.hpp does the training (every stage), lessons/common/zero_lesson.cpp the checks
// and tables.
#include "lessons/common/zero_lesson.hpp"

int main(int argc, char** argv) {
  using namespace distlab::zero;
  return run_lesson(
      argc, argv, Stage::zero1, "08", "zero1",
      {"ZeRO-1: the optimizer state sharded, 4 + 12/N bytes per parameter",
       "Mixed-precision Adam needs 16 bytes per parameter on every data-parallel rank; 12 of them "
       "are the "
       "optimizer's f32 master weights, momentum and variance. ZeRO-1 keeps those on one rank each "
       "(1/N of "
       "them per rank): the gradients are reduce-scattered, each rank updates its shard, and the "
       "bf16 "
       "weights are all-gathered. 4 + 12/N bytes per parameter, and the same 2 Psi of "
       "communication.",
       "Memory: the optimizer bar is 1/N of plain data parallel's while params and grads stay "
       "whole. "
       "Timeline: each step ends with a reduce-scatter, Adam on a shard, and an all-gather."});
}
