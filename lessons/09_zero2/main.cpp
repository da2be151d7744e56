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
//       ./distlab lesson 09 --break list        the classic bug it can carry
// The step is below (zero2_step); core/training/zero.hpp holds the replica it is built from (the
// model, the sharded buffers, Adam) and lessons/common/zero_lesson.cpp the checks and tables.
#include "core/ops/ops.hpp"
#include "lessons/common/zero_lesson.hpp"

namespace {

using namespace distlab;
using namespace distlab::zero;

// One ZeRO-2 step on this rank. Each layer is a unit of its own (u = l), padded to a multiple of
// N; rank r owns chunk r of every layer: of its gradient and of its master weights.
void zero2_step(Replica& rep, int k) {
  Comm& comm = rep.comm();
  const std::size_t L = rep.layers();

  // STEP 1: forward on my share of batch k; every layer's bf16 weights are here whole.
  rep.forward_pass(k);

  // STEP 2: backward, from the top layer down. As soon as a layer's gradient exists, round it
  // into a whole bf16 buffer, reduce-scatter it (my chunk of the sum lands in grads(l)), and
  // free the whole buffer: only 2 Psi/N bytes of gradients outlive their layer.
  {
    auto phase = comm.phase("backward");
    for (std::size_t l = L; l-- > 0;) {
      const View<const float> g = rep.backward(l, rep.weights(l));
      Buffer<BFloat16> whole = rep.reduce_scatter_gradient(l, g);
      if (broken("keep-full-gradients")) rep.hold(std::move(whole));
    }  // `whole` is freed here, layer by layer
  }

  // STEP 3: Adam on my 1/N: my chunk of every layer, one after the other, as the master is laid.
  rep.adam(rep.all_grads());

  // STEP 4: round my chunks to bf16 and all-gather each layer's weights.
  {
    auto phase = comm.phase("all-gather weights");
    for (std::size_t u = 0; u < L; ++u) {
      ops::cast(rep.mine(rep.params(u), u), rep.master(u));
      rep.all_gather(rep.params(u), u);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return run_lesson(
      argc, argv, Stage::zero2, "09", "zero2",
      {"ZeRO-2: gradients sharded too, 2 + 14/N bytes per parameter",
       "ZeRO-2 adds the gradients to what is sharded: during backward each layer's gradient is "
       "reduce-scattered as soon as it exists, each rank keeps only its 1/N, and the rest is "
       "freed. "
       "2 + 14/N bytes per parameter; communication stays 2 Psi per step.",
       "Timeline: a reduce-scatter after each layer's backward, from the top layer down. Memory: "
       "the "
       "grads bar is 1/N, with a short peak of one layer's full gradient.",
       {{"keep-full-gradients",
         "each layer's full gradient is kept after its reduce-scatter and never freed: 2 Psi "
         "bytes more of gradients every step, on top of the 2 Psi/N shards (main.cpp, STEP 2)"}}},
      zero2_step);
}
