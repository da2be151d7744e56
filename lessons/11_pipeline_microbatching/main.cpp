// Lesson 11 — pipeline parallelism: naive, GPipe, 1F1B, interleaved and zero bubble
//
// Concept: pipeline parallelism splits the model, not the data. The layers are cut into P
// stages, one per rank; a batch's activations flow forward from stage to stage and their
// gradients flow back. Run naively, one stage works at a time while the others wait (the
// "bubble"): utilisation 1/P, 25% at P = 4. Cut the batch into M micro-batches and the stages
// overlap, each working on a different micro-batch:
//   naive        the whole batch forward through every stage, then backward          1/P
//   gpipe        all M forwards, then all M backwards, then one update (a flush)     M/(M+P-1)
//   1f1b         stage r runs P - r - 1 forwards (warm-up), then alternates one
//                forward and one backward, then the remaining backwards              M/(M+P-1)
//   interleaved  each rank holds v model chunks (virtual stages c P + r), 1F1B over
//                them: a micro-batch crosses the ranks v times, the bubble v times
//                smaller                                                             vM/(vM+P-1)
//   zb-h1        each backward split into I (the input's gradient, which the stage
//                before waits for) and W (the weights', which nobody waits for); the
//                W's fill the bubble                                                 3M/(3M+P-1)
// 57% at P = 4, M = 4 under GPipe and 1F1B; 73% interleaved with v = 2; 80% zero bubble.
// GPipe as run here keeps the activations of all M micro-batches until their backward (the GPipe
// paper re-materialises by default: each stage keeps only its input per micro-batch and reruns
// its forward in the backward, trading a forward's compute for the memory); 1F1B at most P - r at
// stage r, so it needs less memory for the same bubble; zero bubble P on every stage (1F1B's
// peak) and the gradients each I keeps for its W; interleaving more, for its v-times bubble.
// Smaller micro-batches shrink the bubble but each costs a fixed overhead (a kernel launch, a
// message), so past some M the time per sample rises again.
//
// Compute is the real MLP (core/training/model.hpp) plus a simulated cost per micro-batch and
// stage, --work-us + --sample-us x samples (backward twice that; I and W once each; a chunk 1/v
// of it), slept so that ranks sharing a core do not slow each other: the bubble, not the
// machine, decides the utilisation.
//
// Verification: the gradients of the first step, accumulated over the micro-batches, and the
// weights after --steps steps equal the float64 single-device reference trained on the whole
// batches; each rank's order of passes in the trace is its schedule's, its activation peak the
// schedule's, and that order, replayed on an ideal machine (equal stages), keeps them busy
// exactly the schedule's formula.
//
// Run:  ./distlab lesson 11                            4 stages, GPipe, 4 micro-batches
//       ./distlab lesson 11 --schedule 1f1b --microbatches 8
//       ./distlab lesson 11 --schedule interleaved --virtual-stages 2 --microbatches 8
//       ./distlab lesson 11 --schedule zb-h1 --microbatches 8
//       ./distlab lesson 11 --schedule naive           the whole batch at once: 1/P
//       ./distlab lesson 11 --mpi 4                    one process per stage
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/base/partition.hpp"
#include "core/base/pipeline.hpp"
#include "core/base/units.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"
#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"

using namespace distlab;
using namespace distlab::model;

namespace {

constexpr int kTagLoss = 1;
constexpr int kTagPipe = 2;   // + 2 (chunk M + micro), + 1 for a gradient: by the receiving chunk
constexpr int kTagCheck = 0;  // the weights before the last step, gathered for its check
// Float32's gradient against float64's from the same weights, as a fraction of the chunk's
// largest element: sums of up to a few thousand float32 terms (the batch, the layers' widths)
// round at about 2^-24 each, and their errors add like a random walk, far under 1e-5.
constexpr double kGradientError = 1e-5;

// The schedules' orders of work and the ideal machine that replays them live in
// core/base/pipeline.hpp (the viewer draws the same ones). An op is a pass over micro-batch m of
// my model chunk c: F forward, B backward, and zero bubble's two halves of B: I (the input's
// gradient, which the stage before waits for) and W (the weights', which nobody waits for).
using pipeline::IdealReplay, pipeline::Op, pipeline::Pass, pipeline::Schedule, pipeline::Shape,
    pipeline::ideal_ends, pipeline::ideal_ticks, pipeline::in_flight_formula,
    pipeline::kBackwardUnits, pipeline::kForwardUnits, pipeline::max_in_flight, pipeline::order_of,
    pipeline::orders_of, pipeline::replay_ideal, pipeline::utilisation_formula;

// "forward 3", "backward-input 3", and " chunk 1" after it when a rank holds several chunks.
std::string name_of(const Op& op, int chunks) {
  return chunks > 1 ? fmt::format("{} {} chunk {}", to_string(op.pass), op.micro, op.chunk)
                    : fmt::format("{} {}", to_string(op.pass), op.micro);
}

// The op a span's name names (name_of's inverse); nothing for any other span.
std::optional<Op> op_named(const std::string& name) {
  char kind[32] = {};
  int micro = 0, chunk = 0;
  const int read = std::sscanf(name.c_str(), "%31s %d chunk %d", kind, &micro, &chunk);
  const std::optional<Pass> pass = pipeline::pass_named(kind);
  if (read < 2 || !pass) return std::nullopt;
  return Op{*pass, micro, read == 3 ? chunk : 0};
}

// The order of work as letters: "F0 F1 B0 ...", with ".c" for the chunk when there are several.
std::string letters(const std::vector<Op>& ops, int chunks, std::size_t most) {
  std::string out;
  for (std::size_t i = 0; i < std::min(ops.size(), most); ++i) {
    out += fmt::format("{}{}{}", i ? " " : "", pipeline::letter(ops[i].pass), ops[i].micro);
    if (chunks > 1) out += fmt::format(".{}", ops[i].chunk);
  }
  if (ops.size() > most) out += " ...";
  return out;
}

// Where a stage's order in the trace differs from the schedule's: the trace's order, each pass
// the schedule does not hold marked "+", then the schedule's passes the trace never ran, or, where
// both hold the same passes, the first place the orders part.
std::string trace_difference(const std::vector<Op>& want, const std::vector<Op>& seen, int chunks) {
  const auto has = [](const std::vector<Op>& ops, const Op& op) {
    return std::find(ops.begin(), ops.end(), op) != ops.end();
  };
  std::string out, missing;
  const std::size_t most = 24;  // as the schedule's line: the rest is " ..."
  for (std::size_t i = 0; i < std::min(seen.size(), most); ++i)
    out += fmt::format("{}{}{}", i ? " " : "", has(want, seen[i]) ? "" : "+",
                       letters({seen[i]}, chunks, 1));
  if (seen.size() > most) out += " ...";
  int never = 0;
  for (const Op& op : want)
    if (!has(seen, op) && ++never <= 8) missing += " " + letters({op}, chunks, 1);
  if (never > 8) missing += fmt::format(" and {} more", never - 8);
  if (!missing.empty()) return out + "  (never ran:" + missing + ")";
  std::size_t at = 0;
  while (at < want.size() && at < seen.size() && want[at] == seen[at]) ++at;
  return out + fmt::format("  (the same passes, in another order from pass {} on)", at + 1);
}

// The papers' orders at P = 4 stages and M = 8 micro-batches (interleaved: v = 2 chunks; naive:
// M = 1), written out by hand from each paper's rule, not from pipeline.cpp's generator (which
// drives the run):
//   GPipe (Huang et al. 2019, fig. 2c): every forward, then the backwards last micro-batch first.
//   1F1B (PipeDream-Flush, Narayanan et al. 2021, fig. 4): stage r runs P - r - 1 forwards, then
//     a forward and a backward in turn, then the backwards left.
//   interleaved (ibid., fig. 4; Megatron's schedule): forwards in groups of P micro-batches per
//     chunk, chunk 0 then chunk 1; backwards the same groups, the last chunk first; stage r warms
//     up with 2(P - r - 1) + (v - 1)P forwards, then 1F1B.
//   ZB-H1 (Qi et al. 2023, fig. 3): stage r runs P - r forwards, then I (the input's gradient),
//     the W held back r places, and a forward in turn; the W's left at the end.
struct PaperOrders {
  Schedule schedule;
  int P, M, v;
  std::vector<const char*> stages;  // stage r's order in letters()'s notation
};
const std::vector<PaperOrders>& paper_orders() {
  static const std::vector<PaperOrders> all = {
      {Schedule::naive, 4, 1, 1, {"F0 B0", "F0 B0", "F0 B0", "F0 B0"}},
      {Schedule::gpipe,
       4,
       8,
       1,
       {"F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0",
        "F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0",
        "F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0",
        "F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0"}},
      {Schedule::one_f_one_b,
       4,
       8,
       1,
       {"F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
        "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
        "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
        "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"}},
      {Schedule::interleaved,
       4,
       8,
       2,
       {"F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 "
        "F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0",
        "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 B0.1 F5.0 B1.1 F6.0 B2.1 F7.0 B3.1 "
        "F4.1 B0.0 F5.1 B1.0 F6.1 B2.0 F7.1 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0",
        "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 B0.1 F3.1 B1.1 F4.0 B2.1 F5.0 B3.1 F6.0 B0.0 "
        "F7.0 B1.0 F4.1 B2.0 F5.1 B3.0 F6.1 B4.1 F7.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0",
        "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 "
        "F6.0 B2.0 F7.0 B3.0 F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 B4.0 B5.0 B6.0 B7.0"}},
      {Schedule::zb_h1,
       4,
       8,
       1,
       {"F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7",
        "F0 F1 F2 I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 F6 I4 W3 F7 I5 W4 I6 W5 I7 W6 W7",
        "F0 F1 I0 F2 I1 F3 I2 W0 F4 I3 W1 F5 I4 W2 F6 I5 W3 F7 I6 W4 I7 W5 W6 W7",
        "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7"}},
  };
  return all;
}
// The hand-listed orders for this run's schedule, P, M and v; nullptr where none is listed.
const PaperOrders* paper_orders_for(const Shape& pipe, int P) {
  for (const PaperOrders& o : paper_orders())
    if (o.schedule == pipe.schedule && o.P == P && o.M == pipe.micro && o.v == pipe.chunks)
      return &o;
  return nullptr;
}

struct Setup {
  Shape pipe{Schedule::gpipe, 1, 4, 1};  // the schedule, P (set from the ranks), M and v
  std::size_t batch = 64;
  int steps = 2;
  MlpShape shape;
  OptimizerConfig optimizer;
  std::uint64_t seed = 42;
  double work_us = 300,
         sample_us = 10;  // simulated compute per micro-batch forward (backward: twice)
  bool quiet = false;     // the report's table runs print nothing
};

// What rank 0 reports, gathered from every rank's log after the run.
struct StepFigures {
  double step_s = 0;                   // the step, from the earliest start to the latest end
  std::vector<double> busy_s;          // per rank: forward and backward time in that step
  std::vector<std::int64_t> act_peak;  // per rank: the ledger's activation peak
  // per rank and chunk: a micro-batch's activation bytes (from its forward to its backward or W),
  // and the gradients an I keeps for its W
  std::vector<std::vector<double>> act_per_micro, kept_per_micro;
  std::vector<std::vector<Op>> order;  // per rank: the step's passes, in time order
};

// A per-chunk figure a rank records ("activation bytes per micro-batch, chunk 1").
std::string chunk_value(const char* what, int chunk) {
  return fmt::format("{}, chunk {}", what, chunk);
}

// The figures of one step (its spans are named "step k").
StepFigures figures_of(const RunResult& r, int step, int chunks) {
  const std::string step_name = fmt::format("step {}", step);
  StepFigures f;
  double first = INFINITY, last = -INFINITY;
  for (const RankLog& log : r.logs) {
    // The rank's span of that step, and the passes inside it.
    double s0 = INFINITY, s1 = -INFINITY;
    for (const SpanEvent& e : log.spans)
      if (e.kind == SpanEvent::Kind::plain && e.name == step_name) {
        s0 = e.t0;
        s1 = e.t1;
      }
    first = std::min(first, s0 + log.clock_offset_us);
    last = std::max(last, s1 + log.clock_offset_us);
    double busy = 0;
    std::vector<std::pair<double, Op>> ops;
    for (const SpanEvent& e : log.spans) {
      if (e.kind != SpanEvent::Kind::plain || e.t0 < s0 || e.t1 > s1) continue;
      if (const std::optional<Op> op = op_named(e.name)) {
        ops.push_back({e.t0, *op});
        busy += (e.t1 - e.t0) * 1e-6;
      }
    }
    std::sort(ops.begin(), ops.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Op> order;
    for (const auto& [t, op] : ops) order.push_back(op);
    f.order.push_back(order);
    f.busy_s.push_back(busy);
    f.act_peak.push_back(log.peak[std::size_t(Category::activations)]);
    std::vector<double> act(std::size_t(chunks), 0.0), kept(std::size_t(chunks), 0.0);
    for (const ValueEvent& v : log.values)
      for (int c = 0; c < chunks; ++c) {
        if (v.name == chunk_value("activation bytes per micro-batch", c))
          act[std::size_t(c)] = v.value;
        if (v.name == chunk_value("gradient bytes kept per micro-batch", c))
          kept[std::size_t(c)] = v.value;
      }
    f.act_per_micro.push_back(act);
    f.kept_per_micro.push_back(kept);
  }
  f.step_s = (last - first) * 1e-6;
  return f;
}

// The activation bytes a stage holds at its peak, following an order: a forward takes its
// chunk's activations, an I adds the gradients it keeps for its W, and a B or W lets both go.
double peak_bytes(const std::vector<Op>& order, const std::vector<double>& act,
                  const std::vector<double>& kept) {
  double now = 0, most = 0;
  for (const Op& op : order) {
    const std::size_t c = std::size_t(op.chunk);
    if (c >= act.size()) continue;
    if (op.pass == Pass::forward) now += act[c];
    if (op.pass == Pass::input) now += kept[c];
    if (op.pass == Pass::backward) now -= act[c];
    if (op.pass == Pass::weight) now -= act[c] + kept[c];
    most = std::max(most, now);
  }
  return most;
}

// --- one stage's training --------------------------------------------------------------------

// A micro-batch in flight on this stage: its input, the model's activations for it, its targets
// (last stage) and the gradient of its output (sent back by the next stage).
struct Slot {
  Buffer<float> input, dy, targets;
  std::optional<Mlp> mlp;
  Request sent;  // the forward's activations on their way to the next stage
};

// One model chunk this rank holds: virtual stage c P + r of the P v, its layers [l0, l1), their
// weights, their gradient summed over the micro-batches, and their optimizer. Without
// interleaving a rank holds one chunk, its stage.
struct Chunk {
  int vs = 0;
  std::size_t l0 = 0, l1 = 0, first_param = 0, count = 0;
  MlpShape shape;
  Buffer<float> params, grads, micro_grads;
  std::optional<Optimizer> optimizer;
  std::vector<Slot> slots;  // per micro-batch
  double act_per_micro = 0, kept_per_micro = 0;
};

// A pipeline message's metadata: its step (no logical buffer: activations are not shards).
MsgMeta message(int step) {
  MsgMeta m;
  m.step = step;
  return m;
}

// What a phase is, in the trace (docs/trace-format.md, "Phase args"): the viewer's Schedule panel
// draws each pass as a block of its micro-batch on its stage's row, and starts a new iteration
// after each update.
PhaseArgs phase_args(const char* op, int micro, int stage, int chunk = -1) {
  PhaseArgs a;
  a.op = op;
  a.micro = micro;
  a.stage = stage;
  a.chunk = chunk;
  return a;
}

void sleep_us(double us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
}

// The whole model's weights from every rank's chunks (chunk c of rank q is virtual stage c P + q:
// layers `layers`' part vs), on every rank: gathered to rank 0 and sent back, off the trace (a
// check's, not the training's).
std::vector<float> gather_model(Comm& comm, const MlpShape& shape, const Partition& layers,
                                const std::vector<std::vector<float>>& mine, int tag) {
  const int P = comm.size(), v = int(mine.size());
  const bool tracing = comm.recorder().enabled();
  comm.recorder().set_enabled(false);
  std::vector<float> model(shape.params());
  const auto place = [&](int q, const std::vector<float>& flat) {
    std::size_t from = 0;
    for (int c = 0; c < v; ++c) {
      const std::size_t vs = std::size_t(c * P + q);
      const std::size_t begin = shape.weight_offset(layers.begin(vs));
      const std::size_t end = shape.weight_offset(layers.end(vs));
      std::copy(flat.begin() + std::ptrdiff_t(from),
                flat.begin() + std::ptrdiff_t(from + end - begin),
                model.begin() + std::ptrdiff_t(begin));
      from += end - begin;
    }
  };
  std::vector<float> flat;
  for (const std::vector<float>& chunk : mine) flat.insert(flat.end(), chunk.begin(), chunk.end());
  if (comm.rank() == 0) {
    place(0, flat);
    for (int q = 1; q < P; ++q) {
      std::size_t n = 0;
      for (int c = 0; c < v; ++c) {
        const std::size_t vs = std::size_t(c * P + q);
        n += shape.weight_offset(layers.end(vs)) - shape.weight_offset(layers.begin(vs));
      }
      std::vector<float> theirs(n);
      comm.recv(View<float>{theirs.data(), n, Device::cpu}, q, tag);
      place(q, theirs);
    }
    for (int q = 1; q < P; ++q)
      comm.send(View<const float>{model.data(), model.size(), Device::cpu}, q, tag);
  } else {
    comm.send(View<const float>{flat.data(), flat.size(), Device::cpu}, 0, tag);
    comm.recv(View<float>{model.data(), model.size(), Device::cpu}, 0, tag);
  }
  comm.recorder().set_enabled(tracing);
  return model;
}

void train(Comm& comm, const Setup& s) {
  const int P = comm.size(), r = comm.rank(), M = s.pipe.micro, v = s.pipe.chunks, V = P * v;
  const Shape pipe{s.pipe.schedule, P, M, v};
  const std::size_t mb = s.batch / std::size_t(M);
  const Teacher teacher(s.shape, s.seed);
  const std::vector<float> initial = initial_params(s.shape, s.seed);
  // STEP 1: my chunks: chunk c is virtual stage c P + r, layers [l0, l1) of the model (a
  // Partition of the layers over the P v virtual stages), with their weights, their gradient
  // summed over the micro-batches, and their optimizer. One chunk (my stage) but interleaved.
  const Partition layers{s.shape.layers(), V};
  std::vector<Chunk> chunks(static_cast<std::size_t>(v));
  for (int c = 0; c < v; ++c) {
    Chunk& k = chunks[std::size_t(c)];
    k.vs = c * P + r;
    k.l0 = layers.begin(k.vs);
    k.l1 = layers.end(k.vs);
    k.shape = make_shape(std::vector<std::size_t>(s.shape.dims.begin() + std::ptrdiff_t(k.l0),
                                                  s.shape.dims.begin() + std::ptrdiff_t(k.l1) + 1));
    k.first_param = s.shape.weight_offset(k.l0);
    k.count = k.shape.params();
    k.params = comm.alloc_from(
        std::vector<float>(initial.begin() + std::ptrdiff_t(k.first_param),
                           initial.begin() + std::ptrdiff_t(k.first_param + k.count)),
        Category::params);
    k.grads = comm.alloc<float>(k.count, Category::grads);
    k.micro_grads = comm.alloc<float>(k.count, Category::grads);
    k.optimizer.emplace(comm.ledger(), comm.device(), k.count, s.optimizer);
  }
  const auto first = [&](const Chunk& k) { return k.vs == 0; };
  const auto last = [&](const Chunk& k) { return k.vs == V - 1; };
  // The neighbours of virtual stage vs: the rank before it and the one after (round the ring
  // when interleaved: the last rank's chunk c feeds the first rank's chunk c + 1).
  const int before = (r + P - 1) % P, after = (r + 1) % P;
  // A message's tag: the receiving chunk's micro-batch, activations or their gradient.
  const auto tag = [&](int vs, int micro, bool gradient) {
    return kTagPipe + 2 * (vs / P * M + micro) + (gradient ? 1 : 0);
  };
  Buffer<float> loss = comm.alloc<float>(r == P - 1 ? std::size_t(M) : 0, Category::data);
  // Step 1's gradient, the last step's with the weights it was taken at, and the weights after
  // step min(S, kDriftSteps) (the whole-run check's): checked at the end.
  std::vector<std::vector<float>> first_grads(static_cast<std::size_t>(v)),
      last_grads = first_grads, before_last = first_grads, at_drift_steps = first_grads;
  const int drift_steps = std::min(s.steps, kDriftSteps);

  // The references first, so that no stage computes them while the others are still training:
  // the whole first batch's gradient at the initial weights, and the weights after drift_steps.
  Eigen::VectorXd first_grad_want;
  reference_loss(s.shape, widen(initial), widen(teacher.inputs(0, s.batch), s.batch, s.shape.in()),
                 widen(teacher.targets(0, s.batch), s.batch, s.shape.out()), &first_grad_want);
  // Float32's gradient is the float64 one's within kGradientError of its largest element, plus
  // the underflow term (derived with the checks, below).
  std::size_t widest = 0;
  for (const std::size_t d : s.shape.dims) widest = std::max(widest, d);
  const double grad_underflow = double(s.batch + widest) * 0x1p-150;
  const auto gradient_error = [&](double, double largest) {
    return kGradientError * largest + grad_underflow;
  };
  const ReferenceRun ref =
      reference_train(s.shape, teacher, initial, s.batch, drift_steps, s.optimizer, gradient_error);

  // STEP 2: my order of work, the schedule's (core/base/pipeline.cpp, order_of): GPipe every
  // forward then every backward; 1F1B P - r - 1 forwards, then one forward and one backward in
  // turn; interleaved the same over my v chunks, P micro-batches through a chunk before the
  // next; zb-h1 1F1B with each backward split in two: I, the input's gradient the stage before
  // waits for, at once; W, my weights' gradient, which nobody waits for, put off by r to the
  // cool-down, where it fills the bubble.
  const std::vector<std::vector<Op>> schedules = orders_of(pipe);
  const std::vector<Op>& ops = schedules[std::size_t(r)];
  // Step ids: the ideal machine's op end times, ranked (ideal_ends); every rank computes the same.
  const std::vector<std::vector<int>> ends = ideal_ends(schedules, M, v);
  const std::vector<int> ticks = ideal_ticks(ends);
  // The step of stage q's op: when it ends on the ideal machine, ranked; a message is sent then.
  const auto tick_of = [&](int q, const Op& op) {
    const auto& list = schedules[std::size_t(q)];
    const std::size_t i = std::size_t(std::find(list.begin(), list.end(), op) - list.begin());
    return int(std::lower_bound(ticks.begin(), ticks.end(), ends[std::size_t(q)][i]) -
               ticks.begin());
  };
  // The op of the virtual stage before (or after) mine that sends me this op's input.
  const auto sender = [&](const Op& op, int towards) {
    const int vs = op.chunk * P + r + towards;
    return std::pair{(vs + V) % V % P, Op{op.pass, op.micro, vs / P}};
  };
  const double unit_us = (s.work_us + s.sample_us * double(mb)) / v;  // one chunk's forward

  PhaseArgs train_step;  // marks each step's span: the viewer's training steps
  train_step.op = kTrainStepOp;
  for (int step_k = 0; step_k < s.steps; ++step_k) {
    const int step0 = comm.next_steps(int(ticks.size()));
    // The step's data before the clock starts: inputs on the first stage, targets on the last.
    const bool feeds = r == 0, scores = r == P - 1;
    const std::vector<float> inputs =
        feeds ? teacher.inputs(std::size_t(step_k) * s.batch, s.batch) : std::vector<float>{};
    const std::vector<float> targets =
        scores ? teacher.targets(std::size_t(step_k) * s.batch, s.batch) : std::vector<float>{};
    const auto samples_of = [&](const std::vector<float>& all, int micro, std::size_t width) {
      const auto from = all.begin() + std::ptrdiff_t(std::size_t(micro) * mb * width);
      return std::vector<float>(from, from + std::ptrdiff_t(mb * width));
    };
    comm.barrier();  // every stage starts the step together: the step's span measures the pipeline
    {
      auto step_phase = comm.phase(fmt::format("step {}", step_k + 1), train_step);
      std::vector<std::pair<Buffer<float>, Request>>
          sent_back;  // input gradients on their way back
      for (Chunk& k : chunks) {
        ops::fill(k.grads.view(), 0.0f);
        k.slots.clear();
        k.slots.resize(std::size_t(M));
      }
      // --break skip-put-off-weights: the update comes once the last I is done, and the W's
      // after it (those put off to the cool-down) never run
      std::size_t stop_at = ops.size();
      if (broken("skip-put-off-weights"))
        while (stop_at > 0 && ops[stop_at - 1].pass == Pass::weight) --stop_at;
      for (std::size_t i = 0; i < stop_at; ++i) {
        const Op& op = ops[i];
        Chunk& k = chunks[std::size_t(op.chunk)];
        Slot& slot = k.slots[std::size_t(op.micro)];
        const int step = step0 + tick_of(r, op);
        const std::string name = name_of(op, v);
        const PhaseArgs args = phase_args(to_string(op.pass), op.micro, r, v > 1 ? op.chunk : -1);
        const std::size_t in = k.shape.in(), out = k.shape.out();
        if (op.pass == Pass::forward) {
          // STEP 3: a forward. The micro-batch's input: the data on the first stage, the stage
          // before's output on the others.
          const std::int64_t held = comm.ledger().current(Category::activations);
          slot.input = comm.alloc<float>(mb * in, Category::activations);
          slot.mlp.emplace(comm.ledger(), comm.device(), k.shape, mb, /*activate_output=*/!last(k));
          slot.dy = comm.alloc<float>(mb * out, Category::activations);
          if (k.act_per_micro == 0)
            k.act_per_micro = double(comm.ledger().current(Category::activations) - held);
          if (first(k)) {
            from_host(slot.input.view(), samples_of(inputs, op.micro, in));
          } else {
            const auto [from, their] = sender(op, -1);
            comm.recv(slot.input.view(), from, tag(k.vs, op.micro, false),
                      message(step0 + tick_of(from, their)));
          }
          auto phase = comm.phase(name, args);
          sleep_us(unit_us);
          const View<const float> y = slot.mlp->forward(k.params.view(), slot.input.view());
          if (last(k)) {  // the loss of this micro-batch, normalised by the whole batch
            slot.targets = comm.alloc<float>(mb * out, Category::data);
            from_host(slot.targets.view(), samples_of(targets, op.micro, out));
            mse_loss(loss.view().sub(std::size_t(op.micro), 1), slot.dy.view(), y,
                     slot.targets.view(), s.batch, out);
          } else {
            comm.mark_step(step);
            slot.sent = comm.isend(y, after, tag(k.vs + 1, op.micro, false), message(step));
          }
          continue;
        }
        if (op.pass != Pass::weight) {
          // STEP 4: a backward (B), or its first half (I): the gradient of my output from the
          // next stage (the last stage has it from the loss), the input's gradient sent back.
          // B adds my layers' gradient to the step's and frees the micro-batch's activations;
          // I keeps them, and every layer's gradient, for its W.
          if (!last(k)) {
            const auto [from, their] = sender(op, +1);
            comm.recv(slot.dy.view(), from, tag(k.vs, op.micro, true),
                      message(step0 + tick_of(from, their)));
          }
          auto phase = comm.phase(name, args);
          sleep_us(pipeline::units(op.pass) * unit_us);
          Buffer<float> dx = comm.alloc<float>(first(k) ? 0 : mb * in, Category::comm);
          if (op.pass == Pass::backward) {
            slot.mlp->backward(k.micro_grads.view(), k.params.view(), slot.input.view(),
                               slot.dy.view(), dx.view());
          } else {
            const std::int64_t held = comm.ledger().current(Category::activations);
            slot.mlp->backward_input(k.params.view(), slot.dy.view(), dx.view());
            if (k.kept_per_micro == 0)
              k.kept_per_micro = double(comm.ledger().current(Category::activations) - held);
          }
          if (!first(k)) {
            comm.mark_step(step);
            Request req = comm.isend(View<const float>(dx.view()), before,
                                     tag(k.vs - 1, op.micro, true), message(step));
            sent_back.emplace_back(std::move(dx), std::move(req));
          }
          if (op.pass == Pass::input) continue;
        } else {
          // STEP 5: a W: my layers' gradient from what the micro-batch's I kept. Nothing waits
          // for it: zero bubble runs it wherever the stage would otherwise sit idle.
          auto phase = comm.phase(name, args);
          sleep_us(pipeline::units(op.pass) * unit_us);
          slot.mlp->backward_weights(k.micro_grads.view(), slot.input.view());
        }
        if (broken("no-grad-accumulation"))  // each micro-batch's gradient replaces the last's
          ops::copy(k.grads.view(), View<const float>(k.micro_grads.view()));
        else
          ops::add(k.grads.view(), View<const float>(k.micro_grads.view()));
        if (slot.sent) comm.wait(slot.sent);
        slot = Slot{};  // its activations are freed: the memory 1F1B saves
      }
      for (auto& [buffer, req] : sent_back) comm.wait(req);
      for (Chunk& k : chunks)
        for (Slot& slot : k.slots)
          if (slot.sent) comm.wait(slot.sent);

      // STEP 6: one update per step, after every micro-batch's backward (the flush).
      for (int c = 0; c < v && (step_k == 0 || step_k + 1 == s.steps); ++c) {
        const Chunk& k = chunks[std::size_t(c)];  // checked below, off the clock
        if (step_k == 0) first_grads[std::size_t(c)] = to_host(View<const float>(k.grads.view()));
        if (step_k + 1 == s.steps) {
          last_grads[std::size_t(c)] = to_host(View<const float>(k.grads.view()));
          before_last[std::size_t(c)] = to_host(View<const float>(k.params.view()));
        }
      }
      auto phase = comm.phase("update", phase_args("update", -1, r));
      for (Chunk& k : chunks) k.optimizer->step(k.params.view(), View<const float>(k.grads.view()));
      if (step_k + 1 == drift_steps && drift_steps < s.steps)  // else the last weights are these
        for (int c = 0; c < v; ++c)
          at_drift_steps[std::size_t(c)] =
              to_host(View<const float>(chunks[std::size_t(c)].params.view()));
    }
    if (r == P - 1) {  // the step's loss: the micro-batches' sum, to rank 0 for the report
      double total = 0;
      for (float x : to_host(View<const float>(loss.view()))) total += x;
      comm.recorder().value("loss", total);
      if (P > 1)
        comm.send(View<const double>{&total, 1, Device::cpu}, 0, kTagLoss);
      else if (!s.quiet)
        comm.say("step {}: loss {:.6g}\n", step_k + 1, total);
    } else if (r == 0) {
      double total = 0;
      comm.recv(View<double>{&total, 1, Device::cpu}, P - 1, kTagLoss);
      if (!s.quiet) comm.say("step {}: loss {:.6g}\n", step_k + 1, total);
    }
  }
  for (int c = 0; c < v; ++c) {
    const Chunk& k = chunks[std::size_t(c)];
    comm.recorder().value(chunk_value("activation bytes per micro-batch", c), k.act_per_micro);
    comm.recorder().value(chunk_value("gradient bytes kept per micro-batch", c), k.kept_per_micro);
  }

  // STEP 7: the checks, off the clock, each against float64 code that shares nothing with the
  // stages' (core/training/model_reference.cpp):
  //  - step 1's gradient (summed over the micro-batches) against the whole first batch's;
  //  - the last step, from my own weights before it: its gradient and its update against
  //    float64's from the same weights. Its error is one step's rounding at any step count;
  //  - the weights after step min(S, kDriftSteps) against float64's run, within float32's drift.
  // Deep pipelines (64 stages) can shrink the first stages' gradients below float32's normal
  // range (1.2e-38). There each operation may also be off by half the smallest subnormal,
  // 2^-150, whatever its operands (the underflow term of the float32 model): a gradient takes
  // one such rounding per term of its sums (the batch, and the width of the layer after it);
  // a weight two per step (lr g, then the subtraction) and its gradient's, scaled by lr.
  const std::vector<float> model_before_last =
      gather_model(comm, s.shape, layers, before_last, kTagCheck);
  Eigen::VectorXd last_grad_want;
  const ReferenceBatch last_batch = reference_batch(s.shape, teacher, s.batch, s.steps - 1);
  reference_loss(s.shape, widen(model_before_last), last_batch.x, last_batch.t, &last_grad_want);
  if (comm.inject_fault()) inject_fault_into(chunks[0].params.view());
  for (int c = 0; c < v; ++c) {
    const Chunk& k = chunks[std::size_t(c)];
    const std::string what = v > 1 ? fmt::format("stage {} chunk {} (virtual stage {})", r, c, k.vs)
                                   : fmt::format("stage {}", r);
    const Eigen::Index first_param = Eigen::Index(k.first_param), count = Eigen::Index(k.count);
    const auto check_gradient = [&](const std::string& which, const std::vector<float>& got,
                                    const Eigen::VectorXd& want) {
      const Comparison g = compare(View<const float>{got.data(), got.size()}, want,
                                   kGradientError * want.cwiseAbs().maxCoeff() + grad_underflow);
      comm.check(fmt::format("{}: {} (summed over {} micro-batch{}) equals the reference's", what,
                             which, M, M == 1 ? "" : "es"),
                 g.ok, g.detail());
    };
    check_gradient("step 1's gradient", first_grads[std::size_t(c)],
                   first_grad_want.segment(first_param, count));
    const Eigen::VectorXd last_want = last_grad_want.segment(first_param, count);
    if (s.steps > 1)
      check_gradient(fmt::format("step {}'s gradient at my weights before it", s.steps),
                     last_grads[std::size_t(c)], last_want);

    // The last update, w - lr g from my own weights w before it, with float64's g (StepBound:
    // float32's g is off by lr x its gradient's error, the product rounds by u of it, the new
    // weight by half a float32 unit, or by 2^-149 where it is subnormal).
    const std::vector<float> got = to_host(View<const float>(k.params.view()));
    const double dg = gradient_error(0, last_want.cwiseAbs().maxCoeff());
    ErrorBound one_step;
    for (Eigen::Index i = 0; i < count; ++i) {
      const StepBound b = sgd_step_bound(before_last[std::size_t(c)][std::size_t(i)], last_want[i],
                                         dg, s.optimizer.lr);
      one_step.add(double(got[std::size_t(i)]) - b.want, {b.rounding, b.gradient});
    }
    comm.check(fmt::format("{}: step {}'s update from my weights before it equals float64's", what,
                           s.steps),
               one_step.ok(), one_step.detail("rounding", "gradient error"));

    // The run's first drift_steps steps against float64's: float32's drift from the reference's
    // trajectory (Float32Drift: each step's rounding, and lr x each step's gradient error),
    // times kDriftRoom for the drift's own feedback through the later gradients.
    const std::vector<float>& drifted =
        drift_steps == s.steps ? got : at_drift_steps[std::size_t(c)];
    const ErrorBound run = drift_bound(ref, drifted, k.first_param);
    comm.check(fmt::format("{}: its layers' weights after {} step{} equal the reference's "
                           "(within float32's drift)",
                           what, drift_steps, drift_steps == 1 ? "" : "s"),
               run.ok(), run.detail("rounding", "gradient error"));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"11", "pipeline_microbatching",
                 "pipeline parallelism: naive, GPipe, 1F1B, interleaved and zero bubble", 4, 64});
  lesson.set_text(
      "Pipeline parallelism cuts the model's layers into P stages, one per rank. Naively only one "
      "stage works at a time (utilisation 1/P). With M micro-batches the stages overlap: "
      "M/(M+P-1). GPipe runs all forwards then all backwards and, without recomputation, holds M "
      "micro-batches' activations; 1F1B alternates after a warm-up and holds at most P. "
      "Interleaving v model "
      "chunks per rank shrinks the bubble v times; zero bubble splits each backward into the "
      "input's gradient and the weights', and fills the bubble with the weights'.",
      "Timeline: the forward and backward spans form the pipeline diagram; the gaps are the "
      "bubble. Memory: the activations bar of GPipe against 1F1B's.");
  std::string schedule_text = "gpipe";
  int microbatches = 0, stages = 0, layers = 0, virtual_stages = 0;
  bool expect_utilisation = false, no_sweep = false;
  Setup setup;
  lesson.describe_size("units per hidden layer of the model");
  auto& app = lesson.app();
  app.add_option("--schedule", schedule_text, pipeline::kScheduleNames)
      ->check(CLI::IsMember({"naive", "gpipe", "1f1b", "interleaved", "zb-h1"}))
      ->capture_default_str();
  app.add_option("--microbatches", microbatches,
                 "M: the batch cut into M micro-batches (default 4; naive: 1)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--virtual-stages", virtual_stages,
                 "v: model chunks per rank, with --schedule interleaved (default 2)")
      ->check(CLI::Range(1, 64));
  app.add_option("--stages", stages,
                 "P: pipeline stages, one per rank (default: the number of ranks)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--layers", layers,
                 "hidden layers of --size units; the model has one more Linear layer (default 3, "
                 "or enough for a layer per stage or chunk)")
      ->check(CLI::Range(1, 512));
  app.add_option("--batch", setup.batch, "samples per step")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--steps", setup.steps,
                 "training steps; the weights are checked against the float64 model's after "
                 "min(steps, 100) (float32's drift from it compounds past that), and the last "
                 "step from each stage's own weights before it, at any step count")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--work-us", setup.work_us,
                 "simulated compute per micro-batch and stage, forward (backward: twice)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--sample-us", setup.sample_us,
                 "simulated compute per sample of a micro-batch, forward")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_flag("--expect-utilisation", expect_utilisation,
               "fail unless the measured utilisation is within 10 points of the schedule's "
               "formula with stages of equal cost (the tests use it on a quiet machine; a busy "
               "one stretches the bubble)");
  app.add_flag("--no-sweep", no_sweep,
               "leave out the table of M = 1 to 16 (ten more in-process runs after the report)");
  app.add_option("--lr", setup.optimizer.lr, "SGD's learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  const auto& opt = lesson.options();

  lesson.add_break("no-grad-accumulation",
                   "each micro-batch's gradient replaces the one before instead of adding to it: "
                   "the step uses the last micro-batch's gradient alone (main.cpp, train)");
  lesson.add_break("warmup-one-long",
                   "1F1B's warm-up runs P - r forwards, one too many, before the first backward "
                   "(with --schedule 1f1b; core/base/pipeline.cpp, one_f_one_b)");
  lesson.add_break("skip-put-off-weights",
                   "zero bubble's update comes as soon as the last I is done: the W's after it, "
                   "put off to fill the bubble, never run (with --schedule zb-h1; main.cpp, "
                   "train)");
  lesson.on_world([&](const World& w) {
    const Schedule schedule = *pipeline::schedule_named(schedule_text);
    const std::string& bug = lesson.options().break_name;
    if (bug == "warmup-one-long" && schedule != Schedule::one_f_one_b)
      throw UsageError("--break warmup-one-long is a bug of 1F1B's warm-up: add --schedule 1f1b");
    if (bug == "skip-put-off-weights" && schedule != Schedule::zb_h1)
      throw UsageError(
          "--break skip-put-off-weights is a bug of zero bubble's flush: add --schedule zb-h1");
    if (schedule == Schedule::naive && microbatches > 1)
      throw UsageError(
          "--schedule naive runs the whole batch at once: leave out --microbatches (or use gpipe "
          "or 1f1b)");
    if (virtual_stages > 0 && schedule != Schedule::interleaved)
      throw UsageError(fmt::format(
          "--virtual-stages is for --schedule interleaved ({} gives each rank one chunk)",
          schedule_text));
    if (stages == 0) stages = w.size;
    if (stages != w.size)
      throw UsageError(fmt::format("--stages {} on {} ranks: a stage is a rank; run --ranks {}",
                                   stages, w.size, stages));
    setup.pipe.schedule = schedule;
    setup.pipe.stages = stages;
    setup.pipe.micro = schedule == Schedule::naive ? 1 : microbatches > 0 ? microbatches : 4;
    setup.pipe.chunks =
        schedule == Schedule::interleaved ? (virtual_stages > 0 ? virtual_stages : 2) : 1;
    if (const std::string why = pipeline::refusal(setup.pipe); !why.empty())
      throw UsageError(fmt::format("--schedule {} on {} stages with {} micro-batches: {}",
                                   schedule_text, stages, setup.pipe.micro, why));
    const int V = setup.pipe.virtual_stages();
    if (2 * setup.pipe.chunks * setup.pipe.micro + kTagPipe > kMaxTag)
      throw UsageError(fmt::format(
          "{} chunks x {} micro-batches is more messages than the tags tell apart (at most {}): "
          "use fewer micro-batches or --virtual-stages",
          setup.pipe.chunks, setup.pipe.micro, (kMaxTag - kTagPipe) / 2));
    // Every stage (every chunk, interleaved) gets at least one layer.
    if (layers == 0) layers = std::max(3, V - 1);
    std::vector<std::size_t> dims{16};
    for (int l = 0; l < layers; ++l) dims.push_back(opt.size);
    dims.push_back(8);
    setup.shape = make_shape(dims);
    if (std::size_t(V) > setup.shape.layers())
      throw UsageError(fmt::format(
          "{} {} is more than the model's {} layers (--layers {} hidden + 1): every {} needs a "
          "layer",
          V, setup.pipe.chunks > 1 ? "chunks (stages x --virtual-stages)" : "stages (one per rank)",
          setup.shape.layers(), layers, setup.pipe.chunks > 1 ? "chunk" : "stage"));
    if (setup.batch % std::size_t(setup.pipe.micro) != 0)
      throw UsageError(fmt::format(
          "--batch {} does not split into {} equal micro-batches: use a --microbatches that "
          "divides it (or another --batch)",
          setup.batch, setup.pipe.micro));
    setup.seed = opt.seed;
    setup.optimizer.lr = setup.optimizer.lr > 0 ? setup.optimizer.lr : 1.0f;
    const int M = setup.pipe.micro;
    lesson.set_algorithm(fmt::format(
        "{}, {} micro-batch{}{}", schedule_text, M, M == 1 ? "" : "es",
        setup.pipe.chunks > 1 ? fmt::format(", {} chunks per rank", setup.pipe.chunks) : ""));
    // What the viewer's Schedule panel needs to draw the ideal schedule on its steps clock
    // (docs/trace-format.md, "pipeline"): the schedule, P, M, v, the ideal machine's costs, and
    // how the step ids map onto it: iteration k's ids are first_step + k x steps_per_iteration +
    // i, i ranking the ideal ops' end times (train). Comm numbers step ids from 1, and this
    // lesson takes none before its first iteration.
    const std::size_t ticks =
        ideal_ticks(ideal_ends(orders_of(setup.pipe), M, setup.pipe.chunks)).size();
    lesson.set_metadata(
        "pipeline",
        fmt::format(R"({{"schedule":"{}","stages":{},"microbatches":{},"chunks":{},)"
                    R"("iterations":{},"forward_units":{},"backward_units":{},"first_step":1,)"
                    R"("steps_per_iteration":{}}})",
                    schedule_text, stages, M, setup.pipe.chunks, setup.steps, kForwardUnits,
                    kBackwardUnits, ticks));
  });

  lesson.on_report([&](RunResult& r) {
    const Shape& pipe = setup.pipe;
    const int P = r.world.size, M = pipe.micro, v = pipe.chunks;
    const int shown = setup.steps;  // the last step: the first one also pays for warming up
    const StepFigures f = figures_of(r, shown, v);
    fmt::print("\n{} on {} stages{}, {} micro-batch{} of {} samples; model {}\n",
               to_string(pipe.schedule), P, v > 1 ? fmt::format(" x {} chunks", v) : "", M,
               M == 1 ? "" : "es", setup.batch / std::size_t(M), setup.shape.describe());
    fmt::print("step {}: {} from the first stage's start to the last stage's end\n", shown,
               format_seconds(f.step_s));
    fmt::print("\n  {:>5}  {:>6}  {:>10}  {:>11}  {:>8}  {:>9}  {:>13}  {:>10}\n", "stage",
               "layers", "busy", "utilisation", "formula", "in flight", "activations", "expected");
    std::vector<std::string> orders;  // each stage's order of work, printed under the table
    const Partition layer_split{setup.shape.layers(), pipe.virtual_stages()};
    double mean = 0;
    bool orders_ok = true, memory_ok = true, formula_ok = true;
    for (int k = 0; k < P; ++k) {
      const std::vector<Op> want = order_of(pipe, k);
      const std::vector<Op>& seen = f.order[std::size_t(k)];
      const int flight = max_in_flight(seen);
      const double util = f.step_s > 0 ? f.busy_s[std::size_t(k)] / f.step_s : 0;
      mean += util / P;
      const bool order_ok = seen == want;
      orders_ok = orders_ok && order_ok;
      // The ledger's peak against the trace's order walked with each chunk's bytes; and the
      // micro-batches in flight against the schedule's formula.
      const double act_want =
          peak_bytes(seen, f.act_per_micro[std::size_t(k)], f.kept_per_micro[std::size_t(k)]);
      memory_ok = memory_ok && double(f.act_peak[std::size_t(k)]) == act_want;
      formula_ok = formula_ok && flight == in_flight_formula(pipe, k);
      orders.push_back(fmt::format("  {:>5}  {}", k, letters(want, v, 24)));
      if (!order_ok) orders.push_back(fmt::format("  trace  {}", trace_difference(want, seen, v)));
      std::string held;
      for (int c = 0; c < v; ++c)
        held += fmt::format("{}{}-{}", c ? "," : "", layer_split.begin(c * P + k),
                            layer_split.end(c * P + k) - 1);
      fmt::print("  {:>5}  {:>6}  {:>10}  {:>10.1f}%  {:>7.1f}%  {:>9}  {:>13}  {:>10}\n", k, held,
                 format_seconds(f.busy_s[std::size_t(k)]), util * 100,
                 utilisation_formula(pipe) * 100, flight,
                 format_bytes(double(f.act_peak[std::size_t(k)])), format_bytes(act_want));
    }
    if (P <= 16) {
      fmt::print(
          "  order of work (F forward, B backward, I and W its input's and weights' halves; F3: "
          "micro-batch 3{}),\n  checked against the trace{}:\n",
          v > 1 ? ", F3.1: through chunk 1" : "",
          orders_ok ? ""
                    : "; where a stage's trace differs, its order is printed under the\n"
                      "  schedule's (+: a pass the schedule does not hold)");
      for (const std::string& line : orders) fmt::print("{}\n", line);
    }
    // The trace's orders against the generator's (pipeline::order_of, which drove the run: a wrong
    // schedule there passes this), and where the papers' orders are listed by hand (P = 4, M = 8;
    // paper_orders), against those.
    r.check(
        "every stage ran the passes order_of gives, in order (from the trace; the run's own "
        "generator)",
        orders_ok);
    if (const PaperOrders* paper = paper_orders_for(pipe, P)) {
      std::string differs;
      for (int k = 0; k < P && differs.empty(); ++k) {
        const std::string seen = letters(f.order[std::size_t(k)], v, std::size_t(-1));
        if (seen != paper->stages[std::size_t(k)])
          differs = fmt::format("stage {}: the trace ran {}, the paper's is {}", k, seen,
                                paper->stages[std::size_t(k)]);
      }
      r.check(fmt::format("every stage ran {}'s order from its paper, listed by hand for P = {}, "
                          "M = {} (from the trace)",
                          to_string(pipe.schedule), P, M),
              differs.empty(), differs);
    }
    r.check(
        "every stage's activation peak = its order walked with each micro-batch's activations "
        "(and the gradients an I keeps for its W)",
        memory_ok);
    const char* flight_claim =
        pipe.schedule == Schedule::one_f_one_b ? "1F1B: stage r holds at most min(P - r, M)"
        : pipe.schedule == Schedule::zb_h1
            ? "zb-h1: every stage holds at most min(P, M), 1F1B's peak"
        : pipe.schedule == Schedule::interleaved
            ? "interleaved: stage r holds at most min(2(P - r - 1) + (v - 1)P + 1, vM) chunks'"
            : "every stage holds all M";
    r.check(fmt::format("{} micro-batches' activations (the schedule's formula)", flight_claim),
            formula_ok);
    // The schedule's claim, free of the machine: the order the trace shows, replayed on stages of
    // equal cost, gives the formula exactly. The measured figure below is the machine's.
    const IdealReplay ideal = replay_ideal(f.order, M, v);
    const double ideal_util = ideal.utilisation(P);
    r.check(
        fmt::format("the trace's order of work, replayed on equal stages (F 1, B 2, I 1, W 1 per "
                    "chunk, messages free), keeps them busy {} of the step",
                    pipeline::utilisation_text(pipe)),
        ideal.matches(pipe),
        ideal.complete
            ? fmt::format("busy {} of {} x {} stages = {:.1f}%, formula {:.1f}%", ideal.busy,
                          ideal.step, P, ideal_util * 100, utilisation_formula(pipe) * 100)
            : std::string("the order stalls: some op's input never comes"));
    fmt::print(
        "  ideal machine {:.1f}% (step {} units{}); mean utilisation measured {:.1f}%;\n"
        "  formula {} = {:.1f}%\n",
        ideal_util * 100, ideal.step, v > 1 ? ", a unit a chunk's forward" : "", mean * 100,
        pipeline::utilisation_text(pipe), utilisation_formula(pipe) * 100);
    double busiest = 0, idlest = INFINITY;
    for (double b : f.busy_s) {
      busiest = std::max(busiest, b);
      idlest = std::min(idlest, b);
    }
    // The formula assumes stages of equal cost: the simulated compute is the same on every stage;
    // a large model's own compute is not (the first and last layers differ), nor is a busy machine.
    const double simulated_s =
        3 * M * (setup.work_us + setup.sample_us * double(setup.batch) / M) * 1e-6;
    const bool equal = P > 1 && busiest <= 1.2 * idlest && busiest <= 1.5 * simulated_s;
    const bool close = std::fabs(mean - utilisation_formula(pipe)) <= 0.10;
    if (P > 1)
      fmt::print(
          "  {} 10 points of the formula: the stages took {} to {}, {} of it simulated\n{}",
          close ? "within" : "NOT within", format_seconds(idlest), format_seconds(busiest),
          format_seconds(simulated_s),
          equal ? ""
                : "  (unequal, or mostly the model's own compute: the formula need not hold)\n");
    if (expect_utilisation)
      r.check("the mean utilisation is within 10 points of the formula, the stages of equal cost",
              equal && close,
              fmt::format("{:.1f}% against {:.1f}%, stages {} to {}", mean * 100,
                          utilisation_formula(pipe) * 100, format_seconds(idlest),
                          format_seconds(busiest)));

    // M = 1, 2, 4, 8, 16 under GPipe and 1F1B (and this run's schedule where it differs):
    // in-process runs of one step, this setup otherwise.
    if (P > 1 && !no_sweep) {
      std::vector<Shape> columns{{Schedule::gpipe, P, 1, 1}, {Schedule::one_f_one_b, P, 1, 1}};
      if (pipe.schedule == Schedule::interleaved || pipe.schedule == Schedule::zb_h1)
        columns.push_back({pipe.schedule, P, 1, v});
      fmt::print(
          "\nmicro-batches on {} stages (in-process runs of one step; compute {:.0f} us + {:.0f} "
          "us/sample,\nbackward twice): utilisation measured (formula), and stage 0's activation "
          "peak\n",
          P, setup.work_us, setup.sample_us);
      fmt::print("  {:>3}  {:>7}", "M", "samples");
      for (const Shape& c : columns) fmt::print("  {:>19}", to_string(c.schedule));
      fmt::print("  {:>11}\n", "time/sample");
      for (int m : {1, 2, 4, 8, 16}) {
        if (setup.batch % std::size_t(m) != 0) continue;
        fmt::print("  {:>3}  {:>7}", m, setup.batch / std::size_t(m));
        double per_sample = 0;
        for (Shape c : columns) {
          c.micro = m;
          if (!pipeline::refusal(c).empty()) {
            fmt::print("  {:>19}", "-");
            continue;
          }
          Setup one = setup;
          one.pipe = c;
          one.steps = 1;
          one.quiet = true;
          const RunResult run = run_in_process(P, [&](Comm& comm) { train(comm, one); });
          const StepFigures g = figures_of(run, 1, c.chunks);
          double sum = 0;
          for (double b : g.busy_s) sum += b;
          const double util = g.step_s > 0 ? sum / P / g.step_s : 0;
          fmt::print("  {:>5.1f}% ({:>4.1f}%) {:>6}", util * 100, utilisation_formula(c) * 100,
                     format_bytes(double(g.act_peak[0])));
          if (c.schedule == pipe.schedule || per_sample == 0)
            per_sample = g.step_s / double(setup.batch);
        }
        fmt::print("  {:>11}\n", format_seconds(per_sample));
      }
      if (setup.work_us > 0)
        fmt::print(
            "  the bubble shrinks as M grows, but every micro-batch pays the fixed {:.0f} us:\n"
            "  past some M the time per sample rises again\n",
            setup.work_us);
    }
  });

  // Memory: every stage computes the float64 reference on the whole model, so per rank about
  // 64 B per parameter: the initial weights and the teacher's (2 x 4 B), their float64 copies,
  // the reference's weights, gradient and two Adam moments (6 x 8 B), and its own stage's
  // float32 weights, gradients and moments (small beside them).
  lesson.needs_memory([&](const World&) {
    return MemoryNeed{64.0 * double(setup.shape.params()), 0};
  });

  return lesson.run(argc, argv, [&](Comm& comm) { train(comm, setup); });
}
