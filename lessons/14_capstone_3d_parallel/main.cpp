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
// the micro-batches), the last step from each rank's own state (its gradient, loss, and Adam's
// update and moments), and every weight after min(S, 10) steps within float32's drift; dp
// replicas must hold the same weights, bit for bit. The checks name the group and the tensor.
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
#include "core/base/pipeline.hpp"
#include "core/base/units.hpp"
#include "core/collectives/all_gather_ring.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/reduce_scatter_ring.hpp"
#include "core/comm/mesh.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"
#include "core/trace/format.hpp"
#include "core/training/corpus.hpp"
#include "core/training/gpt.hpp"
#include "core/training/gpt_reference.hpp"
#include "core/training/model.hpp"

using namespace distlab;

namespace {

constexpr int kTagForward = 14000;   // + micro-batch: activations to the next stage
constexpr int kTagBackward = 15000;  // + micro-batch: their gradients to the stage before
constexpr int kTagReplica = 16000;   // a replica's weights to its dp group's first rank
constexpr int kTagCheck = 17000;     // off the trace: the weights before the last step, and back
                                     // the float64 gradient there
// The whole-run comparison with one device's float64 run covers the first min(S, kWholeRunSteps)
// steps. Adam's float32 and float64 runs of this model part fast: the drift's own feedback through
// attention, which its bound leaves to kDriftRoom, took at most 0.05 of the bound at 10 steps
// (seeds 1, 2, 5, 11, 17 on 2-8 ranks: scripts/steps-sweep.sh), 0.26 at 15 and 0.84 at 100 steps
// with seed 11. Past kWholeRunSteps the last step's check from each rank's state carries a run.
constexpr int kWholeRunSteps = 10;

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

// One entry of a stage's order of work: forward or backward of a micro-batch (pipeline.hpp).
using pipeline::Op;

// STEP 2: every stage's 1F1B order over M micro-batches (lesson 11's; core/base/pipeline.hpp):
// stage r runs P - r - 1 forwards to fill the pipeline, then one forward and one backward in
// turn, then the backwards left. The ideal machine replays these orders.
std::vector<std::vector<Op>> one_f_one_b_orders(int P, int M) {
  return pipeline::orders_of({pipeline::Schedule::one_f_one_b, P, M});
}

// The weights a rank holds, from the mesh alone: stage p of P has L/P blocks of 4d (LayerNorms,
// whole) + 12 d^2 / T (wq, wk, wv, wo: d^2 each; w1, w2: 4 d^2 each; split over T), the first
// stage the embeddings (V + S) d, the last the final LayerNorm 2d and the head d V. Summed over a
// replica's P T ranks: the model, with the whole tensors T times over.
std::uint64_t stage_weights(const gpt::Config& c, int p, int P, int T) {
  const std::uint64_t d = c.d, blocks = c.layers / std::size_t(P);
  std::uint64_t n = blocks * (4 * d + 12 * d * d / std::uint64_t(T));
  if (p == 0) n += (c.vocab + c.seq) * d;
  if (p + 1 == P) n += 2 * d + d * c.vocab;
  return n;
}

// One rank's memory by the formula, bytes per ledger category (float32 everywhere):
//   params, grads   4 W each (W = stage_weights: the weights / (pp x tp), roughly)
//   optimizer       Adam's two moments, 8 W; ZeRO-1: 8 W / dp (my dp rank's chunk)
//   activations     by the schedule: 1F1B keeps at most min(M, P - p) micro-batches of stage p
//                   in flight, each micro-batch's N = batch x S tokens keeping, per block, what
//                   its backward reads: the block's input and output, LN's input, attention's
//                   output and the MLP's (3 N d), LN's means and 1/std (4 N), my heads' q, k, v and
//                   context (4 N d / T), their S x S probabilities (H/T x batch x S^2) and my MLP
//                   columns before and after GeLU (2 N 4d / T); the last stage also the final LN
//                   (N d + 2 N), the logits and their gradient (2 N V) and the losses (N + 1).
//                   Beside the slots: the causal mask (S^2), one backward's scratch (2 N d, 4 N d/H,
//                   S^2, N 4d/T, N V on the last stage) and the messages' buffers (2 N d + a slot's
//                   N d for each outgoing gradient).
struct MemoryFormula {
  std::uint64_t params = 0, grads = 0, optimizer = 0, activations = 0;
  std::uint64_t total() const { return params + grads + optimizer + activations; }
};
MemoryFormula memory_formula(const Setup& s, const MeshShape& mesh, const MeshCoord& at) {
  const gpt::Config& c = s.model;
  const int P = mesh.pp, T = mesh.tp;
  const std::uint64_t W = stage_weights(c, at.pp, P, T), f = 4;
  const std::uint64_t N = s.batch * c.seq, d = c.d, S = c.seq, V = c.vocab, t = std::uint64_t(T);
  const std::uint64_t blocks = c.layers / std::size_t(P), ml = 4 * d / t;
  const bool last = at.pp + 1 == P;
  const std::uint64_t slots = std::uint64_t(std::min(s.microbatches, P - at.pp));
  const std::uint64_t per_block =
      3 * N * d + 4 * N + 4 * N * d / t + c.heads / t * s.batch * S * S + 2 * N * ml;
  const std::uint64_t per_micro =
      (blocks + 1) * N * d + blocks * per_block + (last ? N * d + 2 * N + 2 * N * V + N + 1 : 0);
  const std::uint64_t scratch =
      2 * N * d + 4 * N * (d / c.heads) + S * S + N * ml + (last ? N * V : 1);
  MemoryFormula m;
  m.params = m.grads = f * W;
  m.optimizer = 2 * f * Partition{W, s.zero ? mesh.dp : 1}.size(s.zero ? at.dp : 0);
  m.activations = f * (slots * per_micro + S * S + scratch + 2 * N * d + slots * N * d);
  return m;
}

// The bytes one rank sends per step in each group, by the formulas:
//   tp   M micro-batches x L/P blocks x 4 ring all-reduces (2 g forward, 2 f backward) of a
//        micro-batch's activations, tokens x d floats: 2(T-1)/T of them each
//   pp   M activations forward (all but the last stage) and M gradients back (all but the first)
//   dp   one ring all-reduce of my stage's weights, or ZeRO-1's reduce-scatter and all-gather:
//        the same 2(D-1)/D of them (the loss's all-reduce and the replicas' check not counted)
struct GroupBytes {
  std::uint64_t tp = 0, pp = 0, dp = 0;
};
GroupBytes group_formula(const Setup& s, const MeshShape& mesh, const MeshCoord& at) {
  const gpt::Config& c = s.model;
  const int P = mesh.pp, T = mesh.tp;
  const std::uint64_t act = s.batch * c.seq * c.d, M = std::uint64_t(s.microbatches), f = 4;
  const std::uint64_t blocks = c.layers / std::size_t(P);
  return {M * blocks * 4 * coll::ring_chunked_traffic(at.tp, T, act).sent * f,
          M * act * f * std::uint64_t((at.pp + 1 < P) + (at.pp > 0)),
          coll::ring_chunked_traffic(at.dp, mesh.dp, stage_weights(c, at.pp, P, T)).sent * f};
}

// The bytes each rank sent in each group over the run, counted from the trace (the groups' names
// on its messages), against group_formula.
void print_group_traffic(RunResult& r, const Setup& s) {
  const std::uint64_t steps = std::uint64_t(s.steps);
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
    const GroupBytes formula = group_formula(s, s.mesh, at);
    const std::uint64_t want[3] = {formula.tp, formula.pp, formula.dp};
    for (int g = 0; g < 3; ++g) ok = ok && sent[g] == want[g] * steps;
    fmt::print("  {:>5}  {:>11}  {:>10} {:>10}  {:>10} {:>10}  {:>10} {:>10}\n",
               fmt::format("r{}", k), fmt::format("({},{},{})", at.dp, at.pp, at.tp),
               format_bytes(double(sent[0] / steps)), format_bytes(double(want[0])),
               format_bytes(double(sent[1] / steps)), format_bytes(double(want[1])),
               format_bytes(double(sent[2] / steps)), format_bytes(double(want[2])));
  }
  r.check("every rank's bytes in each group (tp, pp, dp) equal the formulas, from the trace", ok);
}

// Each rank's ledger (its peak per category, which the setup reaches and keeps) against
// memory_formula: the mesh divides the weights, ZeRO-1 the optimizer, the schedule the activations.
void print_memory(RunResult& r, const Setup& s) {
  fmt::print("\nmemory per rank (the ledger's peak) against the formula:\n");
  fmt::print("  {:>5}  {:>11}  {:>9} {:>9} {:>9} {:>10} {:>10}  {:>9}\n", "rank", "(dp,pp,tp)",
             "params", "grads", "optimizer", "activation", "formula", "in flight");
  bool all = true;
  for (int k = 0; k < s.mesh.size() && std::size_t(k) < r.logs.size(); ++k) {
    const MeshCoord at = s.mesh.coord(k);
    const auto& peak = r.logs[std::size_t(k)].peak;
    const MemoryFormula want = memory_formula(s, s.mesh, at);
    const auto got = [&](Category c) { return std::uint64_t(peak[std::size_t(c)]); };
    const bool ok = got(Category::params) == want.params && got(Category::grads) == want.grads &&
                    got(Category::optimizer) == want.optimizer &&
                    got(Category::activations) == want.activations;
    all = all && ok;
    const std::uint64_t sum = got(Category::params) + got(Category::grads) +
                              got(Category::optimizer) + got(Category::activations);
    fmt::print(
        "  {:>5}  {:>11}  {:>9} {:>9} {:>9} {:>10} {:>10}  {:>9}{}\n", fmt::format("r{}", k),
        fmt::format("({},{},{})", at.dp, at.pp, at.tp), format_bytes(double(got(Category::params))),
        format_bytes(double(got(Category::grads))), format_bytes(double(got(Category::optimizer))),
        format_bytes(double(got(Category::activations))), format_bytes(double(want.total())),
        std::min(s.microbatches, s.mesh.pp - at.pp), ok ? "" : "  <- differs");
    if (!ok || sum != want.total())
      fmt::print("         formula: params {} grads {} optimizer {} activations {} (bytes)\n",
                 want.params, want.grads, want.optimizer, want.activations);
  }
  r.check(
      "every rank's ledger equals the mesh's formula (weights / (pp x tp), optimizer / dp "
      "with ZeRO-1, activations of min(M, P - p) micro-batches)",
      all);
}

// The pipeline's bubble: the orders every stage ran, read from the trace (each stage's first rank,
// the first step: its forwards and backwards by start), replayed on the ideal machine (a forward
// 1 unit, a backward 2, messages free), keep each stage busy exactly M / (M + P - 1); and what
// this machine measured, from the trace: per training step, each rank's forwards and backwards
// against the step's pipeline (the first forward's start to the last backward's end, any rank).
// Tokens per second: the steps' tokens over the steps' time.
void print_pipeline(RunResult& r, const Setup& s) {
  const int P = s.mesh.pp, M = s.microbatches;
  const pipeline::Shape shape{pipeline::Schedule::one_f_one_b, P, M};
  const std::vector<std::vector<Op>> orders = one_f_one_b_orders(P, M);
  std::vector<std::vector<Op>> traced(static_cast<std::size_t>(P));
  for (const RankLog& log : r.logs) {
    const MeshCoord at = s.mesh.coord(log.rank);
    if (at.dp != 0 || at.tp != 0) continue;
    int step = -1;
    for (const SpanEvent& e : log.spans) {  // by start: a step's span, then its passes
      if (e.kind != SpanEvent::Kind::plain) continue;
      if (e.phase.op == kTrainStepOp) ++step;
      if (step == 0 && e.phase.micro >= 0 && (e.phase.op == "forward" || e.phase.op == "backward"))
        traced[std::size_t(at.pp)].push_back(
            {e.phase.op == "forward" ? pipeline::Pass::forward : pipeline::Pass::backward,
             e.phase.micro});
    }
  }
  const pipeline::IdealReplay ideal = pipeline::replay_ideal(traced, M);
  const double formula = pipeline::utilisation_formula(shape);
  r.check(fmt::format("the orders the trace shows, on the ideal machine, keep every stage busy {} "
                      "of the step",
                      pipeline::utilisation_text(shape)),
          ideal.complete && ideal.matches(shape),
          ideal.complete ? "" : "the trace's orders do not run to their end");
  std::vector<double> step_t0(std::size_t(s.steps), INFINITY), step_t1(std::size_t(s.steps), 0);
  std::vector<std::vector<double>> busy(r.logs.size(), std::vector<double>(std::size_t(s.steps)));
  double first = INFINITY, last = 0;
  for (std::size_t k = 0; k < r.logs.size(); ++k) {
    const RankLog& log = r.logs[k];
    int step = -1;
    for (const SpanEvent& e : log.spans) {  // by start: a step's span, then its blocks
      if (e.kind != SpanEvent::Kind::plain) continue;
      const double t0 = e.t0 + log.clock_offset_us, t1 = e.t1 + log.clock_offset_us;
      if (e.phase.op == kTrainStepOp) {
        ++step;
        first = std::min(first, t0), last = std::max(last, t1);
      } else if (step >= 0 && step < s.steps && e.phase.micro >= 0 &&
                 (e.phase.op == "forward" || e.phase.op == "backward")) {  // not the blocks'

        step_t0[std::size_t(step)] = std::min(step_t0[std::size_t(step)], t0);
        step_t1[std::size_t(step)] = std::max(step_t1[std::size_t(step)], t1);
        busy[k][std::size_t(step)] += t1 - t0;
      }
    }
  }
  fmt::print(
      "\nthe pipeline: 1F1B over {} micro-batches on {} stage{}; the ideal machine keeps a "
      "stage busy\n{}/{} = {:.0f}% of a step (bubble {:.0f}%). Measured here, per stage "
      "(mean over its ranks and the steps;\nthis machine's cores are shared by every rank, "
      "so the bubble is not the ideal's):\n",
      M, P, P == 1 ? "" : "s", M, M + P - 1, formula * 100, (1 - formula) * 100);
  for (int p = 0; p < P; ++p) {
    double sum = 0;
    int n = 0;
    for (int k = 0; k < s.mesh.size() && std::size_t(k) < busy.size(); ++k) {
      if (s.mesh.coord(k).pp != p) continue;
      for (int t = 0; t < s.steps; ++t)
        if (step_t1[std::size_t(t)] > step_t0[std::size_t(t)])
          sum += busy[std::size_t(k)][std::size_t(t)] /
                 (step_t1[std::size_t(t)] - step_t0[std::size_t(t)]),
              ++n;
    }
    fmt::print("  stage {}: busy {:5.1f}%   in flight at most {} micro-batch{}\n", p,
               n ? sum / n * 100 : 0.0, pipeline::max_in_flight(orders[std::size_t(p)]),
               pipeline::max_in_flight(orders[std::size_t(p)]) == 1 ? "" : "es");
  }
  const double tokens = double(s.global() * s.model.seq) * s.steps;
  if (last > first)
    fmt::print(
        "\n{} steps of {} tokens in {}: {:.0f} tokens per second on this machine ({} "
        "ranks, {})\n",
        s.steps, s.global() * s.model.seq, format_seconds((last - first) * 1e-6),
        tokens / ((last - first) * 1e-6), r.world.size, to_string(r.world.device));
}

// Which mesh shape moves how many bytes over which group: every shape of these ranks the model
// fits, by the formulas (per step, summed over the ranks), with the largest rank's memory.
void print_mesh_table(const Setup& s) {
  const int n = s.mesh.size();
  fmt::print(
      "\nevery mesh of {} ranks this model fits, per step summed over the ranks (formulas; "
      "this run's\nrow measured above):\n",
      n);
  fmt::print("  {:>20}  {:>10} {:>10} {:>10}  {:>12}\n", "mesh", "tp", "pp", "dp", "memory/rank");
  for (int tp = 1; tp <= n; ++tp)
    for (int pp = 1; pp * tp <= n; ++pp) {
      if (n % (tp * pp)) continue;
      const MeshShape mesh{n / (tp * pp), pp, tp};
      try {
        s.model.check(tp, pp);
      } catch (const UsageError&) {
        continue;  // heads or layers do not split that way
      }
      GroupBytes sum;
      std::uint64_t most = 0;
      for (int k = 0; k < n; ++k) {
        const GroupBytes g = group_formula(s, mesh, mesh.coord(k));
        sum.tp += g.tp, sum.pp += g.pp, sum.dp += g.dp;
        most = std::max(most, memory_formula(s, mesh, mesh.coord(k)).total());
      }
      const bool here = mesh.dp == s.mesh.dp && mesh.pp == s.mesh.pp && mesh.tp == s.mesh.tp;
      fmt::print("  {:>20}  {:>10} {:>10} {:>10}  {:>12}{}\n", mesh.to_string(),
                 format_bytes(double(sum.tp)), format_bytes(double(sum.pp)),
                 format_bytes(double(sum.dp)), format_bytes(double(most)),
                 here ? "  <- this run" : "");
    }
}

// The float32 error model of a step's summed gradient (gpt_reference.hpp): every element within
// this fraction of the model's largest |g|, at the same weights: sums over the step's tokens and
// the dp replicas, through the model's depth.
double gradient_bound(const Setup& s) {
  return gpt::float32_bound(s.model, s.global() * s.model.seq, std::size_t(s.mesh.dp));
}

// A message's step id (the viewer's beat) and what it carries: the whole buffer, copied.
MsgMeta message(int step, const char* buffer) {
  return coll::meta(step, buffer, -1, -1, Apply::copy, 0);
}

// What a phase is, for the viewer: its op, micro-batch and stage (the Schedule panel's blocks)
// and the caption shown while it runs.
PhaseArgs phase_args(const char* op, int micro, int stage, std::string text) {
  PhaseArgs a;
  a.op = op;
  a.micro = micro;
  a.stage = stage;
  a.text = std::move(text);
  return a;
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
  app.add_option("--steps", s.steps,
                 "training steps (the weights are compared with one device's float64 run after "
                 "the first 10; the last step is checked from each rank's own state at any count)")
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
    // The reference once per process, before the ranks start: every rank checks against it. It
    // runs min(S, kWholeRunSteps) steps (the whole-run check's), with float32's drift from it: each
    // gradient element off by gradient_bound() of the model's largest |g| (step 1's check).
    corpus.emplace(lesson.options().seed, s.corpus);
    const double bound = gradient_bound(s);
    ref = gpt::reference_train(s.model, *corpus, gpt::initial_weights(s.model),
                               std::min(s.steps, kWholeRunSteps), s.global(), s.adam,
                               [bound](double, double largest) { return bound * largest; });
    // For the viewer: the mesh (the Topology panel's layout), the pipeline (the Schedule panel's
    // ideal 1F1B) and each rank's memory by the formula (the Memory panel's dashed line).
    lesson.set_metadata("mesh", fmt::format(R"({{"dp": {}, "pp": {}, "tp": {}}})", s.mesh.dp,
                                            s.mesh.pp, s.mesh.tp));
    lesson.set_metadata(
        "pipeline",
        fmt::format(R"({{"schedule": "1f1b", "stages": {}, "microbatches": {}, "iterations": {}, )"
                    R"("forward_units": {}, "backward_units": {}}})",
                    s.mesh.pp, s.microbatches, s.steps, pipeline::kForwardUnits,
                    pipeline::kBackwardUnits));
    std::vector<double> memory;
    for (int k = 0; k < s.mesh.size(); ++k)
      memory.push_back(double(memory_formula(s, s.mesh, s.mesh.coord(k)).total()));
    lesson.set_memory_formula(
        fmt::format("16 B x weights / (pp x tp){} + activations of min(M, P - p) micro-batches",
                    s.zero ? " (optimizer / dp)" : ""),
        memory);
  });
  lesson.set_text(
      "Data, pipeline and tensor parallelism composed on a dp x pp x tp mesh: each rank holds one "
      "pipeline stage's blocks, split over its tensor-parallel group (heads and MLP columns, f "
      "and g), for one replica; micro-batches flow through the stages in 1F1B order, and the "
      "replicas' gradients are summed over dp (ZeRO-1: reduce-scattered, Adam on 1/dp, "
      "all-gathered).",
      "Topology: the mesh, replicas side by side, a row per stage; tp traffic (red) inside a "
      "row, pp (violet) down a column, dp (cyan) across replicas at the step's end. Schedule: "
      "1F1B's bubble. Memory: each rank's ledger against the mesh's formula.");
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
    print_memory(r, s);
    print_pipeline(r, s);
    print_mesh_table(s);
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

    PhaseArgs train_step;  // marks each step's span: the viewer's training steps
    train_step.op = kTrainStepOp;
    const std::string blocks =
        fmt::format("blocks {}-{}", layout.first_block(), layout.end_block() - 1);
    const std::string tp_fwd =
        s.mesh.tp > 1 ? fmt::format(
                            "; tp all-reduces (g) each block's attention and MLP outputs "
                            "over {} ranks",
                            s.mesh.tp)
                      : "";
    const std::string tp_bwd =
        s.mesh.tp > 1
            ? fmt::format("; tp all-reduces (f) their input gradients over {} ranks", s.mesh.tp)
            : "";
    // My stage's 1F1B order, and when each op ends on the ideal machine (pipeline.hpp).
    const std::vector<std::vector<Op>> orders = one_f_one_b_orders(P, M);
    const auto ends = pipeline::ideal_ends(orders, M);
    const std::vector<Op>& order = orders[std::size_t(me.pp)];
    const std::vector<int>& ideal_end = ends[std::size_t(me.pp)];
    const int ideal_step = pipeline::replay_ideal(orders, M).step;
    // A forward's step ids: 2 all-reduces (g) per block, 2(T - 1) ring steps each; and its send.
    const int unit = int(c.layers) / P * 2 * 2 * (s.mesh.tp - 1) + 1;
    // A step's summed gradient, my 1/dp of my stage's (`got`), against one device's at the same
    // weights (`want`, the whole flat vector), each tensor within gradient_bound() of its own
    // largest |g| (`bounds`, tensor_bounds): a small tensor's error is not hidden under the
    // model's largest.
    const auto check_gradient = [&](int step, const std::vector<float>& got,
                                    const Eigen::VectorXd& want,
                                    const std::vector<double>& bounds) {
      const gpt::WorstShare w =
          gpt::worst_share(layout, got, shard.begin(mine), shard.end(mine), want, bounds);
      world.check(
          fmt::format("dp {} pp {} tp {}: step {}'s gradient{} equals one device's, each "
                      "tensor within its own bound",
                      me.dp, me.pp, me.tp, step, step == 1 ? "" : " at the weights before it"),
          w.share <= 1,
          fmt::format("worst {:.3g} of its bound {:.3g} in {} (terms x depth x u x the "
                      "tensor's max |g|)",
                      w.share, w.bound, w.where));
    };
    // Kept for the checks after the run: the last step's weights, my 1/dp of its summed gradient
    // and Adam's moments before its update, its loss (the last stage), and the weights after
    // kWholeRunSteps steps of a longer run.
    const int drift_steps = std::min(s.steps, kWholeRunSteps);
    std::vector<float> before_last, last_grads, m_before, v_before, at_drift;
    double last_loss = NAN;
    for (int k = 0; k < s.steps; ++k) {
      auto step_phase = world.phase(fmt::format("step {}", k + 1), train_step);
      ops::fill(grads.view(), 0.0f);
      if (k + 1 == s.steps) before_last = to_host(P_view);
      double step_loss = 0;
      // STEP 3: the pipeline: my stage's forwards and backwards in 1F1B order, activations to
      // the next stage and their gradients back, each micro-batch in its slot.
      // Step ids (the viewer's steps clock): each op takes its place on the ideal machine, `unit`
      // ids per unit of time, its tensor-parallel steps from its start and its message to the
      // next stage at its end, so the beats replay the ideal pipeline.
      const int step0 = world.next_steps(0);
      for (std::size_t i = 0; i < order.size(); ++i) {
        const Op& op = order[i];
        const int end = ideal_end[i],
                  start = end - (op.forward() ? pipeline::kForwardUnits : pipeline::kBackwardUnits);
        world.seek_steps(step0 + start * unit);
        const int send_step = step0 + end * unit - 1;
        const int slot = op.micro % slots;
        Request& pending = sends[std::size_t(slot)];
        pipe.wait(pending);  // the slot's last message out has left
        auto phase =
            world.phase(fmt::format("{}{}", op.forward() ? "F" : "B", op.micro),
                        phase_args(op.forward() ? "forward" : "backward", op.micro, me.pp,
                                   fmt::format("stage {}, {} of micro-batch {} through {}{}", me.pp,
                                               op.forward() ? "forward" : "backward", op.micro,
                                               blocks, op.forward() ? tp_fwd : tp_bwd)));
        if (op.forward()) {
          std::vector<std::int32_t> in, out;
          for (std::size_t b = 0; b < s.batch; ++b)
            corpus->sequence(gpt::sequence_index(k, me.dp, op.micro, b, D, M, s.batch), c.seq, in,
                             out);
          from_host(ids.view(), in);
          from_host(targets.view(), out);
          if (me.pp > 0) pipe.recv(x_in.view(), me.pp - 1, kTagForward + op.micro);
          auto y = stage.forward(slot, P_view, ids.view(), targets.view(), x_in.view(), loss_scale);
          DL_CHECK(world.next_steps(0) <= send_step, "a forward took more step ids than {}", unit);
          if (me.pp + 1 < P)
            pending = pipe.isend(y, me.pp + 1, kTagForward + op.micro,
                                 message(send_step, "activations (pp)"));
          else
            step_loss += double(to_host(y)[0]);
        } else {
          if (me.pp + 1 < P) pipe.recv(dy_in.view(), me.pp + 1, kTagBackward + op.micro);
          auto dx = stage.backward(slot, P_view, grads.view(), dy_in.view());
          if (me.pp > 0) {
            ops::copy(dx_out[std::size_t(slot)].view(), dx);
            pending = pipe.isend(View<const float>(dx_out[std::size_t(slot)].view()), me.pp - 1,
                                 kTagBackward + op.micro, message(send_step, "gradients (pp)"));
          }
        }
      }
      for (auto& r : sends) pipe.wait(r);
      world.seek_steps(step0 + ideal_step * unit);  // every rank: past the pipeline's ids

      // STEP 4: data parallelism: the replicas' gradients summed over the dp group, then Adam;
      // ZeRO-1 sums only my 1/dp of them (reduce-scatter), updates it, and all-gathers weights.
      Comm& sync = broken("dp-over-tp") ? mesh.tp() : mesh.dp();
      const bool skip = broken("stage-skips-sync") && layout.last_stage();
      if (!s.zero) {
        auto phase =
            world.phase("dp: all-reduce gradients",
                        phase_args("", -1, -1,
                                   fmt::format("dp: the {} replicas' gradients summed, a ring "
                                               "all-reduce over dp",
                                               D)));
        if (!skip)
          coll::all_reduce(sync, grads.view(), coll::AllReduceAlgo::ring_chunked, "grads (dp)");
      } else if (!skip) {
        auto phase =
            world.phase("dp: reduce-scatter gradients",
                        phase_args("", -1, -1,
                                   fmt::format("ZeRO-1: each of the {} replicas sums its 1/{} of "
                                               "the gradients (reduce-scatter over dp)",
                                               D, D)));
        coll::reduce_scatter_ring(sync, grads.view(), "grads (dp)");
      }
      View<float> my_params = params.view().sub(shard.begin(mine), shard.size(mine));
      View<float> my_grads = grads.view().sub(shard.begin(mine), shard.size(mine));
      // Step 1's gradient, summed over dp and the micro-batches, against one device's.
      if (k == 0)
        check_gradient(1, to_host(View<const float>(my_grads)), ref->first_gradient,
                       gpt::tensor_bounds(layout, ref->first_gradient, gradient_bound(s)));
      if (k + 1 == s.steps) {
        last_grads = to_host(View<const float>(my_grads));
        m_before = to_host(adam.m());
        v_before = to_host(adam.v());
      }
      {
        auto phase = world.phase(
            "Adam", phase_args("update", -1, me.pp,
                               s.zero ? fmt::format("Adam on my 1/{} of the stage's weights", D)
                                      : std::string("Adam on my stage's weights")));
        adam.step(my_params, View<const float>(my_grads));
      }
      if (s.zero) {
        auto phase =
            world.phase("dp: all-gather weights",
                        phase_args("", -1, -1, "ZeRO-1: the updated weights all-gathered over dp"));
        coll::all_gather_ring(sync, params.view(), "weights (dp)");
      }
      // The step's loss: each replica's last stage holds its share; their sum is the mean. Its
      // all-reduce's step ids are kept from every rank, so all count on from the same id.
      const int loss_steps = world.next_steps(0) + 2 * D;
      if (layout.last_stage()) {
        std::vector<float> one{float(step_loss)};
        from_host(loss.view(), one);
        coll::all_reduce(mesh.dp(), loss.view(), coll::AllReduceAlgo::ring, "loss (dp)");
        step_loss = double(to_host(View<const float>(loss.view()))[0]);
        world.recorder().value("loss", step_loss);
        if (me.dp == 0 && me.tp == 0)
          world.say_on(world.rank(), "step {:3}  loss {:.4f}{}\n", k + 1, step_loss,
                       std::size_t(k) < ref->losses.size()
                           ? fmt::format("  (one device {:.4f})", ref->losses[std::size_t(k)])
                           : std::string());
        if (k + 1 == s.steps) last_loss = step_loss;
        if (k == 0) {
          const double want = ref->losses[0];
          const double bound = gpt::float32_bound(c, s.global() * c.seq) * want;
          world.check(fmt::format("dp {} pp {} tp {}: step 1's loss equals one device's", me.dp,
                                  me.pp, me.tp),
                      std::fabs(step_loss - want) <= bound,
                      fmt::format("{:.6f} against {:.6f}", step_loss, want));
        }
      }
      world.seek_steps(loss_steps);
      if (k + 1 == drift_steps && drift_steps < s.steps) at_drift = to_host(P_view);
    }

    // STEP 5: against one device: every dp replica holds the same weights (bit for bit); the
    // last step from my own state before it (its gradient at those weights, and Adam's update from
    // them and my moments: one step's error, at any step count); and every weight after
    // min(S, kWholeRunSteps) steps within float32's drift from one device's run.
    std::vector<float> got = to_host(View<const float>(params.view()));
    if (world.inject_fault()) got[0] += 1.0f;
    Comm& dpg = mesh.dp();
    const int check_step = world.next_steps(1);  // every rank: one beat for the replicas' check
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
      dpg.send(View<const float>(params.view()), 0, kTagReplica,
               message(check_step, "weights (check)"));
    }

    // Off the trace (checking, not training): replica 0's ranks send rank 0 their weights before
    // the last step; rank 0 puts the model together, computes one device's loss and gradient
    // there on the last step's batch, and sends them to every rank.
    const bool tracing = world.recorder().enabled();
    world.recorder().set_enabled(false);
    const std::size_t total = initial.size();
    std::vector<double> last_g(total + 1);  // the gradient, then the loss
    if (world.rank() == 0) {
      std::vector<double> whole(total);
      std::vector<float> theirs;
      for (int r = 0; r < s.mesh.size(); ++r) {
        const MeshCoord at = s.mesh.coord(r);
        if (at.dp != 0) continue;
        const gpt::Layout their(c, at.pp, P, at.tp, s.mesh.tp);
        theirs.assign(their.size(), 0.0f);
        if (r == 0)
          theirs = before_last;
        else
          world.recv(View<float>{theirs.data(), theirs.size(), Device::cpu}, r, kTagCheck);
        for (const auto& part : their.parts())
          for (std::size_t i = 0; i < part.size; ++i)
            whole[their.global_index(part, i)] = theirs[part.offset + i];
      }
      std::vector<std::int32_t> ids, targets;
      gpt::reference_batch(c, *corpus, s.steps - 1, s.global(), ids, targets);
      Eigen::VectorXd g;
      last_g[total] = gpt::reference_loss(
          c, Eigen::Map<const Eigen::VectorXd>(whole.data(), Eigen::Index(total)), ids, targets,
          &g);
      std::copy(g.data(), g.data() + g.size(), last_g.begin());
      for (int r = 1; r < s.mesh.size(); ++r)
        world.send(View<const double>{last_g.data(), last_g.size(), Device::cpu}, r, kTagCheck);
    } else {
      if (me.dp == 0)
        world.send(View<const float>{before_last.data(), before_last.size(), Device::cpu}, 0,
                   kTagCheck);
      world.recv(View<double>{last_g.data(), last_g.size(), Device::cpu}, 0, kTagCheck);
    }
    world.recorder().set_enabled(tracing);
    const Eigen::Map<const Eigen::VectorXd> want_g(last_g.data(), Eigen::Index(total));
    // Each tensor's bound on the last step's gradient error: the gradient check's and Adam's.
    const std::vector<double> dgs = gpt::tensor_bounds(layout, want_g, gradient_bound(s));
    if (s.steps > 1) check_gradient(s.steps, last_grads, want_g, dgs);
    if (layout.last_stage()) {  // the loss there: one float32 forward at the same weights
      const double want = last_g[total];
      world.check(fmt::format("dp {} pp {} tp {}: step {}'s loss equals one device's at the "
                              "weights before it",
                              me.dp, me.pp, me.tp, s.steps),
                  std::fabs(last_loss - want) <= gpt::float32_bound(c, s.global() * c.seq) * want,
                  fmt::format("{:.6f} against {:.6f}", last_loss, want));
    }
    // Adam's update of my 1/dp, from my weights and moments before it with one device's gradient
    // there (model::adam_step_bound: the gradient's interval through the step, and float32's
    // roundings).
    const std::vector<float> m_after = to_host(adam.m()), v_after = to_host(adam.v());
    ErrorBound update, moments;
    for (std::size_t t = 0; t < layout.parts().size(); ++t) {
      const auto& part = layout.parts()[t];
      const double dg = dgs[t];
      for (std::size_t i = 0; i < part.size; ++i) {
        const std::size_t at = part.offset + i;
        if (at < shard.begin(mine) || at >= shard.end(mine)) continue;
        const std::size_t j = at - shard.begin(mine);
        const model::StepBound b = model::adam_step_bound(
            before_last[at], m_before[j], v_before[j],
            want_g[Eigen::Index(layout.global_index(part, i))], dg, s.adam, s.steps);
        update.add(double(got[at]) - b.want, {b.rounding, b.gradient});
        const model::MomentBounds mv = model::adam_moment_bounds(
            m_before[j], v_before[j], want_g[Eigen::Index(layout.global_index(part, i))], dg,
            s.adam);
        moments.add(double(m_after[j]) - mv.m.want, {mv.m.rounding, mv.m.gradient});
        moments.add(double(v_after[j]) - mv.v.want, {mv.v.rounding, mv.v.gradient});
      }
    }
    world.check(
        fmt::format("dp {} pp {} tp {}: step {}'s update from my weights and moments before "
                    "it equals float64's",
                    me.dp, me.pp, me.tp, s.steps),
        update.ok(), update.detail("rounding", "gradient error"));
    world.check(fmt::format("dp {} pp {} tp {}: Adam's moments after step {} equal float64's from "
                            "mine before it",
                            me.dp, me.pp, me.tp, s.steps),
                moments.ok(), moments.detail("rounding", "gradient error"));

    // Every tensor after min(S, kWholeRunSteps) steps against one device's, within kDriftRoom x
    // float32's drift (the sum of each step's StepBound terms along the reference's run).
    const std::vector<float>& drifted = drift_steps == s.steps ? got : at_drift;
    for (const auto& part : layout.parts()) {
      ErrorBound drift;
      for (std::size_t i = 0; i < part.size; ++i) {
        const Eigen::Index j = Eigen::Index(layout.global_index(part, i));
        drift.add(double(drifted[part.offset + i]) - ref->params[j],
                  {model::kDriftRoom * ref->drift.rounding[j],
                   model::kDriftRoom * ref->drift.gradient[j]});
      }
      world.check(fmt::format("dp {} pp {} tp {}: {} after {} steps equals one device's (within "
                              "float32's drift)",
                              me.dp, me.pp, me.tp, part.tensor.name, drift_steps),
                  drift.ok(), drift.detail("rounding", "gradient error"));
    }
  });
}
