// Lesson 09 — ZeRO-2: shard the gradients too
//
// Concept: after ZeRO-1 (lesson 08) every rank still holds the whole bf16 gradient, 2 bytes
// per parameter, although it only ever uses the 1/N its optimizer shard needs. ZeRO stage 2
// reduces each layer's gradient as soon as backward has produced it: a reduce-scatter sends
// every part to its owner, and the rest of the layer's gradient is freed at once. Each step:
//   forward                                      every rank, its share of the batch
//   backward, layer by layer from the top:
//     compute the layer's gradient                one layer's full gradient, briefly
//     reduce-scatter it into my shard, free it    2 Psi/N bytes of gradients stay
//   Adam on my 1/N; round to bf16; all-gather the weights layer by layer
// Memory: 2 + 14/N bytes per parameter (plus one layer's gradient while it is reduced).
// Communication: still 2 Psi per step, the reduce-scatter now spread through the backward.
// Each layer is its own unit of sharding, padded to a multiple of N (core/training/zero.hpp).
//
// Run:  ./distlab lesson 09                     4 ranks, a 16 -> 64 -> 64 -> 8 MLP, 5 steps
//       ./distlab lesson 09 --ranks 64          the lecture's table: 2.2 bytes per parameter
//       ./distlab lesson 09 --deterministic     gradient sums in rank order: bit for bit as plain DP
//       ./distlab lesson 09 --mpi 4             one process per rank
// core/training/zero.hpp does the training (every stage), lessons/common/zero_lesson.cpp the checks
// and tables.
#include "lessons/common/zero_lesson.hpp"

int main(int argc, char** argv) {
  using namespace distlab::zero;
  return run_lesson(
      argc, argv, Stage::zero2, "09", "zero2",
      {"ZeRO-2: gradients sharded too, 2 + 14/N bytes per parameter",
       "ZeRO-2 adds the gradients to what is sharded: during backward each layer's gradient is "
       "reduce-scattered as soon as it exists, each rank keeps only its 1/N, and the rest is "
       "freed. "
       "2 + 14/N bytes per parameter; communication stays 2 Psi per step.",
       "Timeline: a reduce-scatter after each layer's backward, from the top layer down. Memory: "
       "the "
       "grads bar is 1/N, with a short peak of one layer's full gradient."});
}
