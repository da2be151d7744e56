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
//       ./distlab lesson 08 --break list        the classic bug it can carry
// The step is below (zero1_step); core/training/zero.hpp holds the replica it is built from (the
// model, the sharded buffers, Adam) and lessons/common/zero_lesson.cpp the checks and tables.
#include "core/collectives/all_gather_ring.hpp"
#include "core/ops/ops.hpp"
#include "lessons/common/zero_lesson.hpp"

namespace {

using namespace distlab;
using namespace distlab::zero;

// One ZeRO-1 step on this rank. The flat parameter vector is one unit (u = 0), padded to a
// multiple of N; rank r owns elements [r Psi/N, (r+1) Psi/N) of it.
void zero1_step(Replica& rep, int k) {
  Comm& comm = rep.comm();

  // STEP 1: forward and backward on my share of batch k, as plain data parallel: every layer's
  // bf16 weights are here whole, and so is the bf16 gradient they produce (one layer at a
  // time widened to f32, computed, and its gradient rounded back to bf16).
  rep.forward_pass(k);
  rep.backward_pass();

  // STEP 2: reduce-scatter the gradients: rank r receives the sum over all ranks of its 1/N
  // only. (N-1)/N Psi sent; the other chunks of my gradient buffer are now stale.
  View<BFloat16> grads = rep.grads(0);
  {
    auto phase = comm.phase("reduce-scatter gradients");
    if (!broken("skip-gradient-reduce-scatter")) rep.reduce_scatter(grads, 0);
  }

  // STEP 3: Adam on my 1/N: the f32 master weights, momentum and variance exist for my shard
  // alone, 12 Psi/N bytes instead of 12 Psi.
  rep.adam(rep.mine(grads, 0));

  // STEP 4: round my 1/N of the master weights to bf16 into my chunk of the weights, and
  // all-gather the chunks: every rank holds all the new weights for the next forward.
  {
    auto phase = comm.phase("all-gather weights");
    View<BFloat16> params = rep.params(0);
    ops::cast(rep.mine(params, 0), rep.master(0));
    rep.all_gather(params, 0);
  }
}

}  // namespace

int main(int argc, char** argv) {
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
       "Timeline: each step ends with a reduce-scatter, Adam on a shard, and an all-gather.",
       {{"skip-gradient-reduce-scatter",
         "Adam steps my shard with my own share's gradient: the reduce-scatter is left out "
         "(main.cpp, STEP 2)"}}},
      zero1_step);
}
