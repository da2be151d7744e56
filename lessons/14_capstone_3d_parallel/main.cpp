// Lesson 14 — the capstone: a tiny GPT trained with data, pipeline and tensor parallelism on a
// 3-D mesh, verified against one device
//
// Concept: real training composes the parallelisms of lessons 08-13. The ranks form a mesh of
// dp x pp x tp (rank = (dp_i * pp + pp_i) * tp + tp_i: tensor parallelism varies fastest, so its
// ranks, which talk most, are neighbours). Each rank holds one pipeline stage's blocks (pp), split
// the Megatron way over its tensor-parallel group (tp: heads and MLP columns, with f and g), for
// one data-parallel replica (dp). A training step runs M micro-batches through the pipeline in
// 1F1B order; then each replica's gradients are summed over the dp group (or, with --zero 1,
// reduce-scattered, each dp rank updating its 1/dp of the weights with Adam and all-gathering
// them), and every replica holds the same weights again.
//
// Verification: against the unsplit model trained on one device in float64 on the same batches
// (gpt_reference.hpp): step 1's loss, step 1's gradient on every rank's part (summed over dp and
// the micro-batches), and every weight after the last step; dp replicas must hold the same
// weights, bit for bit. The checks name the group and the tensor.
//
// Run:  ./distlab lesson 14                                   8 ranks: dp 2 x pp 2 x tp 2
//       ./distlab lesson 14 --ranks 8 --dp 2 --pp 2 --tp 2 --zero 1
//       ./distlab lesson 14 --ranks 4 --dp 1 --pp 2 --tp 2 --microbatches 8
//       ./distlab lesson 14 --mpi 4 --dp 2 --tp 2
//       ./distlab lesson 14 --break dp-over-tp                gradients summed over the wrong group
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/base/breaks.hpp"
#include "core/base/partition.hpp"
#include "core/base/units.hpp"
#include "core/collectives/all_gather_ring.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/reduce_scatter_ring.hpp"
#include "core/comm/mesh.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"
#include "core/training/corpus.hpp"
#include "core/training/gpt.hpp"
#include "core/training/gpt_reference.hpp"
#include "core/training/model.hpp"

using namespace distlab;

namespace {

constexpr int kTagForward = 14000;   // + micro-batch: activations to the next stage
constexpr int kTagBackward = 15000;  // + micro-batch: their gradients to the stage before
constexpr int kTagReplica = 16000;   // a replica's weights to its dp group's first rank
// The weights' error after the last step, as a fraction of the largest update (lesson 11's): Adam
// moves a weight by about lr a step whatever its gradient's size, so a gradient float32 cannot
// tell from zero may step the other way; a lost micro-batch or replica moves every weight.
constexpr double kUpdateTolerance = 0.05;

struct Setup {
  MeshShape mesh;
  gpt::Config model;
  int microbatches = 4;
  std::size_t batch = 2;  // sequences per micro-batch
  int steps = 10;
  int zero = 0;
  model::OptimizerConfig adam;
  std::size_t corpus = 1 << 15;  // characters
  std::size_t global() const {   // sequences per step
    return std::size_t(mesh.dp) * std::size_t(microbatches) * batch;
  }
};

// The mesh from the options; 0 picks: tp 2 and pp 2 where the ranks allow, dp the rest.
MeshShape resolve_mesh(int dp, int pp, int tp, int ranks) {
  if (tp == 0) tp = ranks % 2 == 0 && (dp == 0 || (ranks / dp) % 2 == 0) ? 2 : 1;
  if (pp == 0) pp = (ranks / tp) % 2 == 0 && (dp == 0 || (ranks / tp / dp) % 2 == 0) ? 2 : 1;
  if (dp == 0) dp = std::max(1, ranks / (tp * pp));
  MeshShape shape{dp, pp, tp};
  shape.check(ranks);
  return shape;
}

// One entry of a stage's order of work: forward or backward of a micro-batch.
struct Op {
  bool forward = true;
  int micro = 0;
};

// STEP 2: stage r of P's 1F1B order over M micro-batches (lesson 11): P - r - 1 forwards to fill
// the pipeline, then one forward and one backward in turn, then the backwards left.
std::vector<Op> one_f_one_b(int r, int P, int M) {
  std::vector<Op> ops;
  const int warmup = std::min(P - r - 1, M);
  for (int m = 0; m < warmup; ++m) ops.push_back({true, m});
  for (int i = 0; i < M - warmup; ++i) {
    ops.push_back({true, warmup + i});
    ops.push_back({false, i});
  }
  for (int m = M - warmup; m < M; ++m) ops.push_back({false, m});
  return ops;
}

// A float's unit in the last place at |w|.
double ulp(double w) {
  const float f = std::fabs(static_cast<float>(w));
  return double(std::nextafter(f, INFINITY)) - double(f);
}

// The bytes each rank sent in each group over the run, counted from the trace (the groups' names
// on its messages), against the formulas per step:
//   tp   M micro-batches x L/P blocks x 4 ring all-reduces (2 g forward, 2 f backward) of a
//        micro-batch's activations, tokens x d floats: 2(T-1)/T of them each
//   pp   M activations forward (all but the last stage) and M gradients back (all but the first)
//   dp   one ring all-reduce of my stage's weights, or ZeRO-1's reduce-scatter and all-gather:
//        the same 2(D-1)/D of them (the loss's all-reduce and the replicas' check not counted)
void print_group_traffic(RunResult& r, const Setup& s) {
  const gpt::Config& c = s.model;
  const int D = s.mesh.dp, P = s.mesh.pp, T = s.mesh.tp, M = s.microbatches;
  const std::uint64_t act = s.batch * c.seq * c.d, steps = std::uint64_t(s.steps), f = 4;
  fmt::print("\nbytes sent per rank and step, by group (from the trace), against the formulas:\n");
  fmt::print("  {:>5}  {:>11}  {:>10} {:>10}  {:>10} {:>10}  {:>10} {:>10}\n", "rank", "(dp,pp,tp)",
             "tp", "formula", "pp", "formula", "dp", "formula");
  bool ok = true;
  for (int k = 0; k < s.mesh.size() && std::size_t(k) < r.logs.size(); ++k) {
    const MeshCoord at = s.mesh.coord(k);
    std::uint64_t sent[3] = {0, 0, 0};  // tp, pp, dp
    for (const SpanEvent& e : r.logs[std::size_t(k)].spans) {
      if (e.kind != SpanEvent::Kind::send) continue;
      const std::string& g = e.meta.group;
      if (g == "tp") sent[0] += e.bytes;
      if (g == "pp" && e.tag >= kTagForward && e.tag < kTagReplica) sent[1] += e.bytes;
      if (g == "dp" && (e.meta.buffer == "grads (dp)" || e.meta.buffer == "weights (dp)"))
        sent[2] += e.bytes;
    }
    const std::uint64_t blocks = c.layers / std::size_t(P);
    const std::uint64_t want[3] = {
        std::uint64_t(M) * blocks * 4 * coll::ring_chunked_traffic(at.tp, T, act).sent * f,
        std::uint64_t(M) * act * f * std::uint64_t((at.pp + 1 < P) + (at.pp > 0)),
        coll::ring_chunked_traffic(at.dp, D, gpt::Layout(c, at.pp, P, at.tp, T).size()).sent * f};
    for (int g = 0; g < 3; ++g) ok = ok && sent[g] == want[g] * steps;
    fmt::print("  {:>5}  {:>11}  {:>10} {:>10}  {:>10} {:>10}  {:>10} {:>10}\n",
               fmt::format("r{}", k), fmt::format("({},{},{})", at.dp, at.pp, at.tp),
               format_bytes(double(sent[0] / steps)), format_bytes(double(want[0])),
               format_bytes(double(sent[1] / steps)), format_bytes(double(want[1])),
               format_bytes(double(sent[2] / steps)), format_bytes(double(want[2])));
  }
  r.check("every rank's bytes in each group (tp, pp, dp) equal the formulas, from the trace", ok);
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"14", "capstone_3d_parallel",
                 "a tiny GPT trained on a dp x pp x tp mesh, ZeRO-1 over dp", 8, 1});
  Setup s;
  s.adam.kind = model::OptimizerKind::adam;
  s.adam.lr = 3e-3f;
  int dp = 0, pp = 0, tp = 0;
  auto& app = lesson.app();
  app.add_option("--dp", dp, "data-parallel replicas (0: the ranks left by pp and tp)")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--pp", pp, "pipeline stages (0: 2 where the ranks allow)")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--tp", tp, "tensor-parallel ranks per stage (0: 2 where the ranks allow)")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--microbatches", s.microbatches, "micro-batches per step (1F1B)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--batch", s.batch, "sequences per micro-batch")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--steps", s.steps, "training steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--zero", s.zero, "1: shard Adam's state over the dp group (ZeRO-1)")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 1}));
  app.add_option("--lr", s.adam.lr, "Adam's learning rate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--d", s.model.d, "the model's width")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--heads", s.model.heads, "attention heads (whole heads per tp rank)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  app.add_option("--layers", s.model.layers, "transformer blocks (as many per stage)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  app.add_option("--context", s.model.seq, "tokens per sequence")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{2}, std::size_t{1024}));
  lesson.describe_size("not used: --d, --heads, --layers, --context and --batch size the run");
  lesson.add_break("dp-over-tp", "sum the gradients over the tensor-parallel group instead of dp");
  lesson.add_break("stage-skips-sync", "the last pipeline stage skips its gradient sync over dp");

  std::optional<gpt::ReferenceRun> ref;
  std::optional<gpt::Corpus> corpus;
  lesson.on_world([&](const World& w) {
    s.mesh = resolve_mesh(dp, pp, tp, w.size);
    s.model.vocab = gpt::kVocab;
    s.model.check(s.mesh.tp, s.mesh.pp);
    // The reference once per process, before the ranks start: every rank checks against it.
    corpus.emplace(lesson.options().seed, s.corpus);
    ref = gpt::reference_train(s.model, *corpus, gpt::initial_weights(s.model), s.steps, s.global(),
                               s.adam);
  });
  lesson.on_report([&](RunResult& r) {
    // The mesh: every rank's coordinates, tp fastest.
    fmt::print("\nthe mesh {}: rank = (dp x {} + pp) x {} + tp, as (dp, pp, tp):\n",
               s.mesh.to_string(), s.mesh.pp, s.mesh.tp);
    for (int k = 0; k < s.mesh.size(); ++k) {
      const MeshCoord at = s.mesh.coord(k);
      fmt::print("  rank {:3} = ({}, {}, {}){}", k, at.dp, at.pp, at.tp,
                 k % 4 == 3 || k + 1 == s.mesh.size() ? "\n" : "   ");
    }
    print_group_traffic(r, s);
  });
  return lesson.run(argc, argv, [&](Comm& world) {
    const gpt::Config& c = s.model;
    const int M = s.microbatches;
    // STEP 1: my place in the mesh, and my three groups.
    Mesh mesh(world, s.mesh);
    const MeshCoord me = mesh.coord();
    const int P = s.mesh.pp, D = s.mesh.dp;
    if (world.rank() == 0) {
      world.say("{}\nthe model: {}\n", mesh.describe(), c.describe());
      world.say("{} micro-batches of {} sequences per replica, {} per step; ZeRO-{}\n", M, s.batch,
                s.global(), s.zero);
    }
    const gpt::Layout layout(c, me.pp, P, me.tp, s.mesh.tp);
    const int slots = std::min(M, P - me.pp);  // 1F1B holds at most P - r micro-batches
    gpt::Stage stage(mesh.tp(), c, layout, s.batch, slots);
    const std::vector<float> initial = gpt::initial_weights(c);
    Buffer<float> params = world.alloc_from(layout.gather(initial), Category::params);
    Buffer<float> grads = world.alloc<float>(layout.size(), Category::grads);
    // ZeRO-1: Adam's moments for my 1/dp of my stage's weights only.
    const Partition shard{layout.size(), s.zero ? D : 1};
    const int mine = s.zero ? me.dp : 0;
    model::Optimizer adam(world.ledger(), world.device(), shard.size(mine), s.adam);

    const std::size_t N = stage.tokens();
    Buffer<float> x_in = world.alloc<float>(N * c.d, Category::activations);
    Buffer<float> dy_in = world.alloc<float>(N * c.d, Category::activations);
    std::vector<Buffer<float>> dx_out;
    for (int k = 0; k < slots; ++k)
      dx_out.push_back(world.alloc<float>(N * c.d, Category::activations));
    std::vector<Request> sends(static_cast<std::size_t>(slots));
    Buffer<std::int32_t> ids = world.alloc<std::int32_t>(N, Category::data);
    Buffer<std::int32_t> targets = world.alloc<std::int32_t>(N, Category::data);
    Buffer<float> loss = world.alloc<float>(1, Category::data);
    const float loss_scale = 1.0f / float(s.global() * c.seq);  // the mean over the step's tokens
    const View<const float> P_view = params.view();
    Comm& pipe = mesh.pp();

    for (int k = 0; k < s.steps; ++k) {
      ops::fill(grads.view(), 0.0f);
      double step_loss = 0;
      // STEP 3: the pipeline: my stage's forwards and backwards in 1F1B order, activations to
      // the next stage and their gradients back, each micro-batch in its slot.
      for (const Op& op : one_f_one_b(me.pp, P, M)) {
        const int slot = op.micro % slots;
        Request& pending = sends[std::size_t(slot)];
        pipe.wait(pending);  // the slot's last message out has left
        if (op.forward) {
          std::vector<std::int32_t> in, out;
          for (std::size_t b = 0; b < s.batch; ++b)
            corpus->sequence(gpt::sequence_index(k, me.dp, op.micro, b, D, M, s.batch), c.seq, in,
                             out);
          from_host(ids.view(), in);
          from_host(targets.view(), out);
          if (me.pp > 0) pipe.recv(x_in.view(), me.pp - 1, kTagForward + op.micro);
          auto y = stage.forward(slot, P_view, ids.view(), targets.view(), x_in.view(), loss_scale);
          if (me.pp + 1 < P)
            pending = pipe.isend(y, me.pp + 1, kTagForward + op.micro);
          else
            step_loss += double(to_host(y)[0]);
        } else {
          if (me.pp + 1 < P) pipe.recv(dy_in.view(), me.pp + 1, kTagBackward + op.micro);
          auto dx = stage.backward(slot, P_view, grads.view(), dy_in.view());
          if (me.pp > 0) {
            ops::copy(dx_out[std::size_t(slot)].view(), dx);
            pending = pipe.isend(View<const float>(dx_out[std::size_t(slot)].view()), me.pp - 1,
                                 kTagBackward + op.micro);
          }
        }
      }
      for (auto& r : sends) pipe.wait(r);

      // STEP 4: data parallelism: the replicas' gradients summed over the dp group, then Adam;
      // ZeRO-1 sums only my 1/dp of them (reduce-scatter), updates it, and all-gathers weights.
      Comm& sync = broken("dp-over-tp") ? mesh.tp() : mesh.dp();
      const bool skip = broken("stage-skips-sync") && layout.last_stage();
      if (!s.zero) {
        auto phase = world.phase("dp: all-reduce gradients");
        if (!skip)
          coll::all_reduce(sync, grads.view(), coll::AllReduceAlgo::ring_chunked, "grads (dp)");
      } else if (!skip) {
        auto phase = world.phase("dp: reduce-scatter gradients");
        coll::reduce_scatter_ring(sync, grads.view(), "grads (dp)");
      }
      View<float> my_params = params.view().sub(shard.begin(mine), shard.size(mine));
      View<float> my_grads = grads.view().sub(shard.begin(mine), shard.size(mine));
      if (k == 0) {
        // Step 1's gradient, summed over dp and the micro-batches, against one device's.
        const std::vector<float> got = to_host(View<const float>(my_grads));
        const auto want = layout.gather(ref->first_gradient);
        const double top = ref->first_gradient.cwiseAbs().maxCoeff();
        const double bound = gpt::float32_bound(c, s.global() * c.seq, std::size_t(D)) * top;
        double worst = 0;
        std::string where = "-";
        for (const auto& part : layout.parts())
          for (std::size_t i = 0; i < part.size; ++i) {
            const std::size_t at = part.offset + i;
            if (at < shard.begin(mine) || at >= shard.end(mine)) continue;
            const double err = std::fabs(double(got[at - shard.begin(mine)]) - double(want[at]));
            if (!(err <= worst)) {
              worst = std::isnan(err) ? INFINITY : err;
              where = part.tensor.name;
            }
          }
        world.check(
            fmt::format("dp {} pp {} tp {}: step 1's gradient equals one device's", me.dp, me.pp,
                        me.tp),
            worst <= bound,
            fmt::format("worst |error| {:.3g} in {}, bound {:.3g} (terms x depth x u x max |g|)",
                        worst, where, bound));
      }
      {
        auto phase = world.phase("Adam");
        adam.step(my_params, View<const float>(my_grads));
      }
      if (s.zero) {
        auto phase = world.phase("dp: all-gather weights");
        coll::all_gather_ring(sync, params.view(), "weights (dp)");
      }
      // The step's loss: each replica's last stage holds its share; their sum is the mean.
      if (layout.last_stage()) {
        std::vector<float> one{float(step_loss)};
        from_host(loss.view(), one);
        coll::all_reduce(mesh.dp(), loss.view(), coll::AllReduceAlgo::ring);
        step_loss = double(to_host(View<const float>(loss.view()))[0]);
        world.recorder().value("loss", step_loss);
        if (me.dp == 0 && me.tp == 0)
          world.say_on(world.rank(), "step {:3}  loss {:.4f}  (one device {:.4f})\n", k + 1,
                       step_loss, ref->losses[std::size_t(k)]);
        if (k == 0) {
          const double want = ref->losses[0];
          const double bound = gpt::float32_bound(c, s.global() * c.seq) * want;
          world.check(fmt::format("dp {} pp {} tp {}: step 1's loss equals one device's", me.dp,
                                  me.pp, me.tp),
                      std::fabs(step_loss - want) <= bound,
                      fmt::format("{:.6f} against {:.6f}", step_loss, want));
        }
      }
    }

    // STEP 5: against one device: every dp replica holds the same weights (bit for bit), and
    // every weight is the reference's within a fraction of the largest update.
    std::vector<float> got = to_host(View<const float>(params.view()));
    if (world.inject_fault()) got[0] += 1.0f;
    Comm& dpg = mesh.dp();
    if (dpg.rank() == 0) {
      Buffer<float> other = world.alloc<float>(layout.size(), Category::data);
      for (int r = 1; r < dpg.size(); ++r) {
        dpg.recv(other.view(), r, kTagReplica);
        const std::vector<float> theirs = to_host(View<const float>(other.view()));
        world.check(
            fmt::format("pp {} tp {}: replica dp {} holds replica dp 0's weights", me.pp, me.tp, r),
            theirs == got);
      }
    } else {
      dpg.send(View<const float>(params.view()), 0, kTagReplica);
    }
    const auto want = layout.gather(ref->params);
    const auto start = layout.gather(initial);
    for (const auto& part : layout.parts()) {
      double update = 0, worst = 0;
      for (std::size_t i = 0; i < part.size; ++i)
        update = std::max(
            update, std::fabs(double(want[part.offset + i]) - double(start[part.offset + i])));
      bool ok = true;
      for (std::size_t i = 0; i < part.size; ++i) {
        const double w = want[part.offset + i], err = std::fabs(double(got[part.offset + i]) - w);
        ok = ok && err <= kUpdateTolerance * update + 4 * ulp(w);
        worst = std::isnan(err) ? INFINITY : std::max(worst, err);
      }
      world.check(fmt::format("dp {} pp {} tp {}: {} after {} steps equals one device's", me.dp,
                              me.pp, me.tp, part.tensor.name, s.steps),
                  ok, fmt::format("max |error| {:.3g}, largest update {:.3g}", worst, update));
    }
  });
}
