// Lesson 19 — activation memory and recomputation
//
// Concept: the model state (16 bytes per parameter) is not all a training step holds. Every
// block's forward keeps, for its backward, the inputs each backward GEMM and normalisation needs:
// the activations. They grow with the micro-batch b and the sequence s (and the attention's
// probabilities with s^2), not with the parameters, and they dominate once sequences grow
// (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models").
// Lesson 14's block (core/training/gpt.hpp), N = b s tokens of width h over t tensor-parallel
// ranks, keeps per layer, in floats (float32 here, 4 bytes each):
//   x, a = LN1(x), x1, m = LN2(x1)        4 s b h         (whole on every tp rank)
//   LN1's and LN2's mean and 1/std        4 s b
//   q, k, v and the context of my heads   4 s b h / t
//   h = m W1 and gelu(h), my columns      8 s b h / t
//   P = softmax(q k^T / sqrt(h/a) + mask) a s^2 b / t      (a heads)
// Recomputation trades FLOP for that memory (gpt::Recompute):
//   none       keeps all of it
//   selective  drops P and recomputes it in backward from q and k: 2 s^2 b h / t FLOP per layer
//   full       keeps x alone and reruns the block's forward in backward: one forward more,
//              24 s b h^2 / t + 4 s^2 b h / t FLOP per layer, 8/6 of the blocks' training FLOP
// The recomputation runs the forward's operations in the forward's order on the same inputs, so
// the gradients do not change by a bit. --sequence-parallel (Megatron-SP, lessons 12 and 13) keeps
// the whole-width terms (x, a, x1, m and the statistics) on each tp rank's N/t tokens too: every
// term over t, (16 s b h + 4 s b + a s^2 b) / t floats.
//
// Verification: every kept tensor's floats against its formula, and the ledger's bytes of every
// layer against their sum; the recompute buffers and the recomputed FLOP against theirs; the
// forward's FLOP against its formula and the backward's against twice it plus the recomputed;
// the gradients of the three settings equal bit for bit, and against the same batch's gradient
// from one device in float64 (gpt_reference.hpp, each tensor within float32's bound); the peak
// against s and b, measured, against the formula.
//
// Run:  ./distlab lesson 19                          2 ranks: tensor parallel 2, recompute none
//       ./distlab lesson 19 --recompute selective    the probabilities recomputed
//       ./distlab lesson 19 --recompute full         each layer's input alone kept
//       ./distlab lesson 19 --ranks 4 --tp 2         two data-parallel replicas of tp 2
//       ./distlab lesson 19 --sequence-parallel      every term of a layer over t
//       ./distlab lesson 19 --break stale-input      recompute from an input overwritten
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/base/units.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/comm/mesh.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"
#include "core/training/corpus.hpp"
#include "core/training/gpt.hpp"
#include "core/training/gpt_reference.hpp"
#include "core/training/model.hpp"

using namespace distlab;
using gpt::Recompute;

namespace {

constexpr Recompute kSettings[] = {Recompute::none, Recompute::selective, Recompute::full};

struct Setup {
  gpt::Config model;
  std::size_t batch = 2;  // b: sequences per replica's micro-batch
  MeshShape mesh;
  Recompute recompute = Recompute::none;
  bool sp = false;               // sequence parallelism: the LayerNorm regions on my N/t rows
  std::size_t corpus = 1 << 14;  // characters of generated text
  std::size_t global() const { return batch * std::size_t(mesh.dp); }
};

// tp: 2 where the ranks and the heads allow, else 1; the ranks left are data-parallel replicas.
MeshShape resolve_mesh(int tp, int ranks, std::size_t heads) {
  if (tp == 0) tp = ranks % 2 == 0 && heads % 2 == 0 ? 2 : 1;
  if (ranks % tp != 0)
    throw UsageError(fmt::format(
        "--tp {} does not divide the {} ranks (the ranks are data-parallel replicas of tp ranks "
        "each)",
        tp, ranks));
  return MeshShape{ranks / tp, 1, tp};
}

// What one layer keeps, tensor by tensor, written out from the block's backward: which
// tensor each backward reads, its shape, and its floats on a tp rank (s b = N tokens, h = d).
// Sequence parallelism (sp) keeps the LayerNorm regions' tensors on my N/t rows as well.
struct KeptRow {
  const char* name;
  const char* shape;
  const char* read_by;
  const char* formula;
  std::uint64_t floats;
  bool selective, full;  // kept under selective, and under full, recompute
};
std::vector<KeptRow> kept_rows(const gpt::Config& c, std::size_t b, int tp, bool sp) {
  const std::uint64_t s = c.seq, h = c.d, a = c.heads, t = std::uint64_t(tp), N = s * b;
  const std::uint64_t r = sp ? t : 1;  // the LayerNorm regions: my rows under sp
  const char* rows = sp ? "N/t x h" : "N x h";
  const char* stat = sp ? "N/t" : "N";
  const char* sbh = sp ? "s b h / t" : "s b h";
  const char* sb = sp ? "s b / t" : "s b";
  return {
      {"x", rows, "LN1's backward; full's rerun", sbh, N * h / r, true, true},
      {"a", rows, "dWq, dWk, dWv", sbh, N * h / r, true, false},
      {"mean1", stat, "LN1's backward", sb, N / r, true, false},
      {"rstd1", stat, "LN1's backward", sb, N / r, true, false},
      {"q", "N x h/t", "dK = dS^T q", "s b h / t", N * h / t, true, false},
      {"k", "N x h/t", "dQ = dS k", "s b h / t", N * h / t, true, false},
      {"v", "N x h/t", "dP = dC v^T", "s b h / t", N * h / t, true, false},
      {"p", "a/t b s x s", "dV = P^T dC; softmax'", "a s^2 b / t", a / t * b * s * s, false, false},
      {"ctx", "N x h/t", "dWo", "s b h / t", N * h / t, true, false},
      {"x1", rows, "LN2's backward", sbh, N * h / r, true, false},
      {"m", rows, "dW1", sbh, N * h / r, true, false},
      {"mean2", stat, "LN2's backward", sb, N / r, true, false},
      {"rstd2", stat, "LN2's backward", sb, N / r, true, false},
      {"h", "N x 4h/t", "GeLU's backward", "4 s b h / t", 4 * N * h / t, true, false},
      {"gelu(h)", "N x 4h/t", "dW2", "4 s b h / t", 4 * N * h / t, true, false},
  };
}

// The floats one layer keeps under `r`, summed from the rows; and the recompute buffers: selective
// one head and sequence's probabilities (s^2), full one layer's tensors but its input.
std::uint64_t kept_floats(const std::vector<KeptRow>& rows, Recompute r) {
  std::uint64_t n = 0;
  for (const auto& row : rows)
    if (r == Recompute::none || (r == Recompute::selective ? row.selective : row.full))
      n += row.floats;
  return n;
}
std::uint64_t recompute_floats(const gpt::Config& c, const std::vector<KeptRow>& rows,
                               Recompute r) {
  if (r == Recompute::selective) return std::uint64_t(c.seq) * c.seq;
  if (r == Recompute::full) return kept_floats(rows, Recompute::none) - rows.front().floats;
  return 0;
}

// The GEMM FLOP of one step on a tp rank, by the formulas. A block's forward: q, k, v and the
// output projection 8 N h^2 / t, the MLP 16 N h^2 / t, the scores and the context 4 N s h / t;
// the head 2 N h V. Backward twice the forward (each GEMM's two gradients), plus the recomputed.
struct Flops {
  std::uint64_t forward = 0, recomputed = 0;
  std::uint64_t backward() const { return 2 * forward + recomputed; }
};
Flops flops_formula(const gpt::Config& c, std::size_t b, int tp, Recompute r) {
  const std::uint64_t s = c.seq, h = c.d, t = std::uint64_t(tp), N = s * b, L = c.layers;
  const std::uint64_t block = 24 * N * h * h / t + 4 * N * s * h / t;
  Flops f;
  f.forward = L * block + 2 * N * h * c.vocab;
  if (r == Recompute::selective) f.recomputed = L * 2 * N * s * h / t;
  if (r == Recompute::full) f.recomputed = L * block;
  return f;
}

// What one setting's step measured on this rank.
struct Measured {
  std::vector<gpt::Stage::KeptTensor> tensors;  // block 0's, between forward and backward
  std::int64_t kept = 0, recompute = 0;         // the ledgers' peaks, bytes
  std::int64_t kept_after = 0;                  // what the kept ledger holds after backward
  std::uint64_t forward_flops = 0, backward_flops = 0, recomputed_flops = 0;
  std::vector<float> grads;  // this replica's, before the sum over dp
  float loss = 0;
};

// A stage's options in this run: the setting, each layer's tensors charged when its forward makes
// them and released once its backward has read them, sequence parallel or not, and the breaks.
gpt::StageOptions stage_options(const Setup& s, Recompute r) {
  gpt::StageOptions o;
  o.recompute = r;
  o.charge_per_pass = true;
  o.sequence_parallel = s.sp;
  o.stale_input = broken("stale-input");
  o.gelu_in_place = broken("gelu-in-place");
  return o;
}

// One step's forward and backward of this replica's micro-batch under `options`, on a
// stage of its own whose ledgers measure it.
Measured run_step(Comm& tp, const gpt::Config& c, const gpt::Layout& layout, std::size_t batch,
                  const gpt::StageOptions& options, View<const float> params,
                  View<const std::int32_t> ids, View<const std::int32_t> targets,
                  float loss_scale) {
  Measured m;
  gpt::Stage stage(tp, c, layout, batch, 1, options);
  Buffer<float> grads = tp.alloc<float>(layout.size(), Category::grads);
  std::uint64_t before = ops::gemm_flops();
  {
    auto phase = tp.phase(fmt::format("forward, recompute {}", to_string(options.recompute)));
    m.loss = to_host(stage.forward(0, params, ids, targets, {}, loss_scale))[0];
  }
  m.forward_flops = ops::gemm_flops() - before;
  m.tensors = stage.kept_tensors(0, 0);
  before = ops::gemm_flops();
  {
    auto phase = tp.phase(fmt::format("backward, recompute {}", to_string(options.recompute)));
    stage.backward(0, params, grads.view(), {});
  }
  stage.sync_replicated(grads.view());  // sequence parallel: the LayerNorms and embeddings
  m.backward_flops = ops::gemm_flops() - before;
  m.recomputed_flops = stage.recompute_flops();
  m.kept = stage.kept_ledger().peak(Category::activations);
  m.recompute = stage.recompute_ledger().peak(Category::activations);
  m.kept_after = stage.kept_ledger().current(Category::activations);
  m.grads = to_host(View<const float>(grads.view()));
  return m;
}

// The peak activations (kept + recompute buffers, bytes) of one step of `c` under `r` for each
// (s, b) of `shapes`, measured on the ledgers of a fresh in-process world of t ranks (off the
// run's trace and ledgers): the tp group's rank 0's.
std::vector<double> measure_peaks(const gpt::Config& c, int t, const gpt::StageOptions& options,
                                  const gpt::Corpus& corpus,
                                  const std::vector<std::pair<std::size_t, std::size_t>>& shapes) {
  std::vector<double> peaks(shapes.size(), -1);
  run_in_process(t, [&](Comm& world) {
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      gpt::Config cs = c;
      cs.seq = shapes[k].first;
      const std::size_t b = shapes[k].second;
      const gpt::Layout layout(cs, 0, 1, world.rank(), t);
      Buffer<float> params =
          world.alloc_from(layout.gather(gpt::initial_weights(cs)), Category::params);
      std::vector<std::int32_t> ids, targets;
      for (std::size_t q = 0; q < b; ++q) corpus.sequence(q, cs.seq, ids, targets);
      Buffer<std::int32_t> bi = world.alloc_from(ids, Category::data);
      Buffer<std::int32_t> bt = world.alloc_from(targets, Category::data);
      if (options.sequence_parallel && b * cs.seq % std::size_t(t) != 0)
        continue;  // tokens that do not split over the group: "-"
      const Measured m = run_step(world, cs, layout, b, options, params.view(), bi.view(),
                                  bt.view(), 1.0f / float(b * cs.seq));
      if (world.rank() == 0) peaks[k] = double(m.kept + m.recompute);
    }
  });
  return peaks;
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"19", "activations_recompute",
                 "activation memory and recomputation: what a layer keeps for its backward", 2, 1});
  lesson.set_text(
      "Each layer's forward keeps the tensors its backward reads: the activations, tensor by "
      "tensor on the ledger, against s b h (4 + 12/t) + 4 s b + a s^2 b / t floats. --recompute "
      "selective drops the attention's probabilities and recomputes them in backward; full keeps "
      "each layer's input alone and reruns its forward. The gradients stay the same to the bit.",
      "Memory: the activations rise through each forward and fall through its backward, once per "
      "setting (none, selective, full; --recompute's first); full's one layer of buffers dips and "
      "refills in its backward.");
  lesson.describe_size("not used: --d, --heads, --layers, --context and --batch size the run");
  Setup s;
  int tp = 0;
  std::string recompute = "none";
  auto& app = lesson.app();
  app.add_option("--recompute", recompute,
                 "what each layer keeps: none (everything), selective (not the attention's "
                 "probabilities), full (its input alone)")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->capture_default_str();
  app.add_flag("--sequence-parallel", s.sp,
               "Megatron-SP: the LayerNorms, residuals and block inputs on each tp rank's N/t "
               "tokens (all-gather before the attention and the MLP, reduce-scatter after)");
  app.add_option("--tp", tp, "tensor-parallel ranks (0: 2 where the ranks and heads allow)")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--batch", s.batch, "b: sequences per replica's micro-batch")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}));
  app.add_option("--d", s.model.d, "h: the model's width")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--heads", s.model.heads, "a: attention heads (whole heads per tp rank)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  app.add_option("--layers", s.model.layers, "L: transformer blocks")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  app.add_option("--context", s.model.seq, "s: tokens per sequence")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{2}, std::size_t{1024}));
  lesson.add_break("stale-input",
                   "each block's output written over its input buffer (an in-place residual): "
                   "the input backward and full recompute read is stale (gpt.cpp, block_forward)");
  lesson.add_break("gelu-in-place",
                   "GeLU written over h, freed to save N 4h/t floats per layer: GeLU's backward "
                   "reads gelu(h) where it needs h (gpt.cpp, block_forward)");

  std::optional<gpt::Corpus> corpus;
  Eigen::VectorXd want_grad;
  double want_loss = 0;
  lesson.on_world([&](const World& w) {
    s.recompute = gpt::parse_recompute(recompute);
    s.model.vocab = gpt::kVocab;
    s.mesh = resolve_mesh(tp, w.size, s.model.heads);
    s.model.check(s.mesh.tp, 1);
    if (s.sp && s.batch * s.model.seq % std::size_t(s.mesh.tp) != 0)
      throw UsageError(fmt::format(
          "--sequence-parallel: the b s = {} x {} = {} tokens do not split into {} equal parts "
          "(one per tp rank)",
          s.batch, s.model.seq, s.batch * s.model.seq, s.mesh.tp));
    corpus.emplace(lesson.options().seed, s.corpus);
    lesson.set_algorithm(fmt::format("recompute {}, {}{}", to_string(s.recompute),
                                     s.mesh.to_string(), s.sp ? ", sequence parallel" : ""));
  });
  lesson.needs_memory([&](const World& w) {
    const MeshShape mesh = resolve_mesh(tp, w.size, s.model.heads);
    const auto rows = kept_rows(s.model, s.batch, mesh.tp, s.sp);
    const double weights = double(gpt::parameter_count(s.model));
    // Per rank: weights and gradients, the stage's kept activations (none's, the most) and its
    // scratch; once: the float64 reference on the step's whole batch (its activations, in
    // doubles, some twice what one device keeps for it), its weights and gradient.
    const double act = double(kept_floats(rows, Recompute::none) * s.model.layers);
    const double whole = double(
        kept_floats(kept_rows(s.model, s.batch * std::size_t(mesh.dp), 1, false), Recompute::none) *
        s.model.layers);
    // The report's peak sweep: t ranks of their own at up to 2s and 4 sequences, after the run's
    // ranks have freed theirs: what it needs beyond them.
    gpt::Config swept = s.model;
    swept.seq *= 2;
    const double per_rank = 4 * (3 * weights + 2 * act);
    const double sweep =
        double(mesh.tp) * 4 *
        (3 * weights + 2 * double(kept_floats(kept_rows(swept, 4, mesh.tp, s.sp), Recompute::none) *
                                  s.model.layers));
    return MemoryNeed{per_rank,
                      8 * (4 * weights + 2 * whole) + std::max(0.0, sweep - w.size * per_rank),
                      "a smaller --d, --layers, --context or --batch"};
  });

  lesson.on_report([&](RunResult& r) {
    const gpt::Config& c = s.model;
    const int t = s.mesh.tp;
    const auto rows = kept_rows(c, s.batch, t, s.sp);
    fmt::print(
        "\nwhat one layer keeps for its backward (a tp rank of {}{}: s {}, b {}, h {}, a {}, "
        "N = s b = {} tokens):\n",
        t, s.sp ? ", sequence parallel" : "", c.seq, s.batch, c.d, c.heads, c.seq * s.batch);
    fmt::print("  {:<8} {:<12} {:<30} {:<12} {:>9}  {:<10} {:<10}\n", "tensor", "shape", "read by",
               "formula", "floats", "selective", "full");
    for (const auto& row : rows)
      fmt::print("  {:<8} {:<12} {:<30} {:<12} {:>9}  {:<10} {:<10}\n", row.name, row.shape,
                 row.read_by, row.formula, row.floats, row.selective ? "kept" : "recomputed",
                 row.full ? "kept" : "recomputed");
    const std::uint64_t layer = kept_floats(rows, Recompute::none);
    fmt::print("  one layer: {} = {} floats = {}\n",
               s.sp ? "(16 s b h + 4 s b + a s^2 b) / t" : "s b h (4 + 12/t) + 4 s b + a s^2 b / t",
               layer, format_bytes(4.0 * double(layer)));
    // Megatron's layer at this shape (Korthikanti et al. 2022: 16-bit, dropout after attention's
    // softmax and both projections): s b h (10 + 24/t + 5 a s / (h t)) bytes under tp, s b h (34 +
    // 5 a s / h) / t under tp and sp.
    const double sbh = double(c.seq * s.batch * c.d), as_h = double(c.heads * c.seq) / double(c.d);
    const double megatron = s.sp ? sbh * (34 + 5 * as_h) / t : sbh * (10 + 24.0 / t + 5 * as_h / t);
    fmt::print("  Megatron's layer here (16-bit, with dropout): {} = {}\n",
               s.sp ? "s b h (34 + 5 a s / h) / t" : "s b h (10 + 24/t + 5 a s / (h t))",
               format_bytes(megatron));

    // Rank 0's measurements (every rank checked its own against the formulas).
    auto measured = [&](Recompute rc, const char* what) {
      const std::string name = fmt::format("{} {}", to_string(rc), what);
      for (const ValueEvent& v : r.logs[0].values)
        if (v.name == name) return v.value;
      return -1.0;
    };
    fmt::print(
        "\nthe three settings, measured on rank 0 ({} layers; peak = kept + recompute "
        "buffers):\n",
        c.layers);
    fmt::print("  {:<10} {:>10} {:>10} {:>10} {:>12} {:>12} {:>7}\n", "recompute", "kept",
               "recompute", "peak", "recomputed", "step FLOP", "/ none");
    const double none_flops = measured(Recompute::none, "step FLOP");
    for (Recompute rc : kSettings) {
      const double kept = measured(rc, "kept"), extra = measured(rc, "recompute"),
                   flops = measured(rc, "step FLOP");
      fmt::print("  {:<10} {:>10} {:>10} {:>10} {:>12} {:>12} {:>7.3f}{}\n", to_string(rc),
                 format_bytes(kept), format_bytes(extra), format_bytes(kept + extra),
                 measured(rc, "recomputed FLOP"), flops, flops / none_flops,
                 rc == s.recompute ? "  <- this" : "");
    }
    // The head (forward 2 N h V, backward twice that) is not rerun: without it, full's ratio is
    // the blocks' alone, one forward more on three passes' worth.
    const double head = 3.0 * 2 * double(c.seq * s.batch * c.d * c.vocab);
    fmt::print("  full on the blocks alone (less the head's 3 x 2 N h V): {:.4f}, 8/6 = 1.3333\n",
               (measured(Recompute::full, "step FLOP") - head) / (none_flops - head));

    // STEP 5: the peak of --recompute's setting against s and b, measured on a tp group of its
    // own in this process (off the run's trace), against the formula.
    fmt::print(
        "\npeak of the kept activations and recompute buffers per rank, recompute {} (measured "
        "= formula):\n",
        to_string(s.recompute));
    std::vector<std::size_t> seqs = {c.seq / 2, c.seq, 2 * c.seq}, batches = {1, 2, 4};
    std::vector<std::pair<std::size_t, std::size_t>> shapes;
    for (std::size_t sq : seqs)
      for (std::size_t b : batches) shapes.emplace_back(sq, b);
    const std::vector<double> peaks =
        measure_peaks(c, t, stage_options(s, s.recompute), *corpus, shapes);
    fmt::print("  {:>8}", "s \\ b");
    for (std::size_t b : batches) fmt::print(" {:>12}", b);
    fmt::print("\n");
    bool sweep_ok = true;
    std::size_t at = 0;
    for (std::size_t sq : seqs) {
      fmt::print("  {:>8}", sq);
      for (std::size_t b : batches) {
        gpt::Config cs = c;
        cs.seq = sq;
        const auto rs = kept_rows(cs, b, t, s.sp);
        const double want = 4.0 * double(c.layers * kept_floats(rs, s.recompute) +
                                         recompute_floats(cs, rs, s.recompute));
        const double got = peaks[at++];
        if (got < 0) {  // sequence parallel: the b s tokens do not split over t
          fmt::print(" {:>12}", "-");
          continue;
        }
        sweep_ok = sweep_ok && got == want;
        fmt::print(" {:>12}", got == want ? format_bytes(got) : fmt::format("{} != {}", got, want));
      }
      fmt::print("\n");
    }
    r.check(fmt::format("peak activations of recompute {} at s in {{s/2, s, 2s}}, b in {{1, 2, "
                        "4}}: L kept + recompute buffers, on the ledger",
                        to_string(s.recompute)),
            sweep_ok);
  });

  std::once_flag reference_once;
  return lesson.run(argc, argv, [&](Comm& world) {
    const gpt::Config& c = s.model;
    // The reference once per process, by the first rank here (after the memory plan has let the
    // run start): the step's whole batch on one device in float64.
    std::call_once(reference_once, [&] {
      std::vector<std::int32_t> all_ids, all_targets;
      gpt::reference_batch(c, *corpus, 0, s.global(), all_ids, all_targets);
      want_loss = gpt::reference_loss(c, model::widen(gpt::initial_weights(c)), all_ids,
                                      all_targets, &want_grad);
    });
    // STEP 1: my place (dp replica, tp rank), my heads and MLP columns of the weights, and my
    // replica's micro-batch of the step's sequences.
    Mesh mesh(world, s.mesh);
    const MeshCoord me = mesh.coord();
    const int T = s.mesh.tp;
    if (world.rank() == 0)
      world.say("{}\nthe model: {}\na micro-batch of {} sequences per replica\n", mesh.describe(),
                c.describe(), s.batch);
    const gpt::Layout layout(c, 0, 1, me.tp, T);
    const std::vector<float> initial = gpt::initial_weights(c);
    Buffer<float> params = world.alloc_from(layout.gather(initial), Category::params);
    const View<const float> P = params.view();
    // My replica's micro-batch: sequences [dp_i b, (dp_i + 1) b) of the step's.
    std::vector<std::int32_t> my_ids, my_targets;
    for (std::size_t b = 0; b < s.batch; ++b)
      corpus->sequence(gpt::sequence_index(0, me.dp, 0, b, s.mesh.dp, 1, s.batch), c.seq, my_ids,
                       my_targets);
    Buffer<std::int32_t> ids = world.alloc_from(my_ids, Category::data);
    Buffer<std::int32_t> targets = world.alloc_from(my_targets, Category::data);
    const float loss_scale = 1.0f / float(s.global() * c.seq);  // the mean over the step's tokens
    const auto rows = kept_rows(c, s.batch, T, s.sp);

    // STEP 2: one step under each setting, --recompute's first; each layer's tensors charged when
    // its forward makes them and released once its backward has read them.
    std::vector<Recompute> order{s.recompute};
    for (Recompute rc : kSettings)
      if (rc != s.recompute) order.push_back(rc);
    std::vector<Measured> runs;
    for (Recompute rc : order) {
      runs.push_back(run_step(mesh.tp(), c, layout, s.batch, stage_options(s, rc), P, ids.view(),
                              targets.view(), loss_scale));
    }

    // STEP 3: what each setting kept and recomputed, against the formulas.
    const std::string where = fmt::format("dp {} tp {}", me.dp, me.tp);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const Recompute rc = order[k];
      const Measured& m = runs[k];
      const char* name = to_string(rc);
      bool tensors_ok = true;
      std::string detail;
      for (const auto& row : rows) {
        const bool kept =
            rc == Recompute::none || (rc == Recompute::selective ? row.selective : row.full);
        std::uint64_t got = 0;
        for (const auto& t : m.tensors)
          if (t.name == row.name) got = t.floats;
        if (got != (kept ? row.floats : 0)) {
          tensors_ok = false;
          detail += fmt::format("{} {} floats, formula {}; ", row.name, got, kept ? row.floats : 0);
        }
      }
      world.check(fmt::format("{}: recompute {}: each tensor a layer keeps, its floats by the "
                              "formula",
                              where, name),
                  tensors_ok, detail);
      const std::uint64_t kept = 4 * c.layers * kept_floats(rows, rc),
                          extra = 4 * recompute_floats(c, rows, rc);
      world.check(fmt::format("{}: recompute {}: the ledger's kept activations, L layers' sum",
                              where, name),
                  std::uint64_t(m.kept) == kept, fmt::format("{} B, formula {} B", m.kept, kept));
      world.check(fmt::format("{}: recompute {}: the recompute buffers on the ledger", where, name),
                  std::uint64_t(m.recompute) == extra,
                  fmt::format("{} B, formula {} B", m.recompute, extra));
      const Flops f = flops_formula(c, s.batch, T, rc);
      world.check(
          fmt::format("{}: recompute {}: FLOP of forward, recomputation and backward", where, name),
          m.forward_flops == f.forward && m.recomputed_flops == f.recomputed &&
              m.backward_flops == f.backward(),
          fmt::format("forward {} (formula {}), recomputed {} ({}), backward {} ({})",
                      m.forward_flops, f.forward, m.recomputed_flops, f.recomputed,
                      m.backward_flops, f.backward()));
      // Each layer's tensors released once its backward has read them: the inputs x stay.
      const std::uint64_t inputs = 4 * c.layers * rows.front().floats;
      world.check(
          fmt::format("{}: recompute {}: after backward the ledger holds the layers' inputs "
                      "alone (the rest released once read)",
                      where, name),
          std::uint64_t(m.kept_after) == inputs,
          fmt::format("{} B, formula {} B", m.kept_after, inputs));
      if (world.rank() == 0) {  // the report's table, measured
        world.recorder().value(fmt::format("{} kept", name), double(m.kept));
        world.recorder().value(fmt::format("{} recompute", name), double(m.recompute));
        world.recorder().value(fmt::format("{} recomputed FLOP", name), double(m.recomputed_flops));
        world.recorder().value(fmt::format("{} step FLOP", name),
                               double(m.forward_flops + m.backward_flops));
      }
      if (k > 0)
        world.check(fmt::format("{}: recompute {}: the gradients equal recompute {}'s bit for bit",
                                where, name, to_string(order[0])),
                    m.grads.size() == runs[0].grads.size() &&
                        std::memcmp(m.grads.data(), runs[0].grads.data(),
                                    m.grads.size() * sizeof(float)) == 0);
    }

    // STEP 4: the replicas' gradients summed over dp; the step's gradient against one device's.
    Buffer<float> grads = world.alloc_from(runs[0].grads, Category::grads);
    coll::all_reduce(mesh.dp(), grads.view(), coll::AllReduceAlgo::ring_chunked, "grads (dp)");
    std::vector<float> got = to_host(View<const float>(grads.view()));
    if (world.inject_fault()) got[0] += 1.0f;
    const double fraction = gpt::float32_bound(c, s.global() * c.seq, std::size_t(s.mesh.dp));
    // The float32 error model (gpt_reference.hpp): each tensor's elements within `fraction` of
    // its own largest |g|.
    const gpt::WorstShare w = gpt::worst_share(layout, got, 0, got.size(), want_grad,
                                               gpt::tensor_bounds(layout, want_grad, fraction));
    world.check(fmt::format("{}: the step's gradient equals one device's in float64, each tensor "
                            "within its own bound",
                            where),
                w.share <= 1,
                fmt::format("worst {:.3g} of its bound in {} (terms x depth x u x the tensor's "
                            "max |g|)",
                            w.share, w.where));
    Buffer<float> loss = world.alloc_from(std::vector<float>{runs[0].loss}, Category::data);
    coll::all_reduce(mesh.dp(), loss.view(), coll::AllReduceAlgo::ring_chunked, "loss (dp)");
    const double loss_got = to_host(View<const float>(loss.view()))[0];
    world.check(fmt::format("{}: the step's loss equals one device's in float64", where),
                std::fabs(loss_got - want_loss) <=
                    gpt::float32_bound(c, s.global() * c.seq, std::size_t(s.mesh.dp)) * want_loss,
                fmt::format("{:.7f} against {:.7f}", loss_got, want_loss));
  });
}
