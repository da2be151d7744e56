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
//       ./distlab lesson 10 --break list        the classic bugs it can carry
// The step is below (zero3_step); core/training/zero.hpp holds the replica it is built from (the
// model, the sharded buffers, Adam) and lessons/common/zero_lesson.cpp the checks and tables.
#include "core/ops/ops.hpp"
#include "lessons/common/zero_lesson.hpp"

namespace {

using namespace distlab;
using namespace distlab::zero;

// --break skip-backward-gather: layer l as a rank that forgot to gather it holds it: my chunk of
// the weights, and zeros where the other ranks' chunks belong.
Buffer<BFloat16> mine_only(Replica& rep, std::size_t l) {
  Buffer<BFloat16> layer = rep.whole(l, Category::params);
  ops::copy(rep.mine(layer.view(), l), View<const BFloat16>(rep.params(l)));
  return layer;
}

// One ZeRO-3 step on this rank. Each layer is a unit of its own (u = l), padded to a multiple of
// N; rank r holds chunk r of every layer's bf16 weights, gradient and master weights, nothing
// more: a layer exists whole only while it computes.
void zero3_step(Replica& rep, int k) {
  Comm& comm = rep.comm();
  const std::size_t L = rep.layers();

  // STEP 1: forward. Just before layer l, all-gather its weights from every rank's chunk;
  // compute; free them as soon as the layer is done.
  rep.load_batch(k);
  {
    auto phase = comm.phase("forward");
    for (std::size_t l = 0; l < L; ++l) {
      Buffer<BFloat16> layer = rep.gather(l, "forward");
      rep.forward(l, rep.widen(l, View<const BFloat16>(layer.view())));
      if (broken("keep-gathered-weights")) rep.hold(std::move(layer));
    }  // `layer` is freed here
    rep.loss();
  }

  // STEP 2: backward, from the top layer down. The forward freed every layer, so gather it
  // again; compute its gradient; free the weights; reduce-scatter the gradient into my chunk
  // and free the whole gradient (as ZeRO-2).
  {
    auto phase = comm.phase("backward");
    for (std::size_t l = L; l-- > 0;) {
      View<const float> g;
      {
        Buffer<BFloat16> layer = broken("skip-backward-gather")  // only my chunk, zeros elsewhere
                                     ? mine_only(rep, l)
                                     : rep.gather(l, "backward");
        g = rep.backward(l, rep.widen(l, View<const BFloat16>(layer.view())));
        if (broken("keep-gathered-weights")) rep.hold(std::move(layer));
      }  // the layer's weights are freed here
      Buffer<BFloat16> whole = rep.reduce_scatter_gradient(l, g);
    }  // and its whole gradient here
  }

  // STEP 3: Adam on my 1/N: my chunk of every layer, one after the other.
  rep.adam(rep.all_grads());

  // STEP 4: round my master chunks into my bf16 chunks of the weights. Nothing to gather: the
  // next forward gathers each layer when it needs it.
  ops::cast(rep.all_params(), rep.all_master());
}

}  // namespace

int main(int argc, char** argv) {
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
       "Memory: the params bar rises by one layer and falls back, layer after layer.",
       {{"skip-backward-gather",
         "the backward computes with my shard alone: the layer's weights are not gathered "
         "again after the forward freed them (main.cpp, STEP 2)"},
        {"keep-gathered-weights",
         "a layer's gathered weights are never freed, so every layer's full weights pile up "
         "(main.cpp, STEP 1)"}}},
      zero3_step);
}
