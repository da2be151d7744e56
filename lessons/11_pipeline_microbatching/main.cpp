// Lesson 11 — pipeline parallelism: naive, GPipe micro-batches, 1F1B
//
// Concept: pipeline parallelism splits the model, not the data. The layers are cut into P
// stages, one per rank; a batch's activations flow forward from stage to stage and their
// gradients flow back. Run naively, one stage works at a time while the others wait (the
// "bubble"): utilisation 1/P, 25% at P = 4. Cut the batch into M micro-batches and the stages
// overlap, each working on a different micro-batch:
//   naive   the whole batch forward through every stage, then backward        1/P
//   gpipe   all M forwards, then all M backwards, then one update (a flush)  M / (M + P - 1)
//   1f1b    stage r runs P - r - 1 forwards (warm-up), then alternates one
//           forward and one backward, then the remaining backwards            M / (M + P - 1)
// 57% at P = 4, M = 4; 84% at M = 16. GPipe keeps the activations of all M micro-batches until
// their backward; 1F1B at most P - r at stage r, so it needs less memory for the same bubble.
// Smaller micro-batches shrink the bubble but each costs a fixed overhead (a kernel launch, a
// message), so past some M the time per sample rises again.
//
// Compute is the real MLP (core/training/model.hpp) plus a simulated cost per micro-batch and
// stage,
// --work-us + --sample-us x samples (backward twice that), slept so that ranks sharing a core
// do not slow each other: the bubble, not the machine, decides the utilisation.
//
// Verification: the gradients of the first step, accumulated over the micro-batches, and the
// weights after --steps steps equal the float64 single-device reference trained on the whole
// batches; each rank's order of forwards and backwards in the trace is its schedule's, and that
// order, replayed on an ideal machine (equal stages), keeps them busy exactly M/(M+P-1).
//
// Run:  ./distlab lesson 11                            4 stages, GPipe, 4 micro-batches
//       ./distlab lesson 11 --schedule 1f1b --microbatches 8
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
#include "core/base/units.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"
#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"
#include "core/training/pipeline.hpp"

using namespace distlab;
using namespace distlab::model;

namespace {

constexpr int kTagForward = 11000;   // + micro-batch: activations to the next stage
constexpr int kTagBackward = 12000;  // + micro-batch: their gradients to the stage before
constexpr int kTagLoss = 13000;
constexpr double kUpdateTolerance =
    0.02;  // the weights' error, as a fraction of the largest update

enum class Schedule { naive, gpipe, one_f_one_b };
const char* to_string(Schedule s) {
  return s == Schedule::naive ? "naive" : s == Schedule::gpipe ? "gpipe" : "1f1b";
}

// One entry of a stage's schedule: forward or backward of a micro-batch (pipeline.hpp: the ideal
// machine that replays the schedules, and M/(M+P-1)).
using pipeline::IdealReplay, pipeline::Op, pipeline::ideal_ends, pipeline::ideal_ticks,
    pipeline::kBackwardUnits, pipeline::kForwardUnits, pipeline::max_in_flight,
    pipeline::replay_ideal, pipeline::utilisation_formula;
std::string name_of(const Op& op) {
  return fmt::format("{} {}", op.forward ? "forward" : "backward", op.micro);
}

// STEP 2: stage r of P's order of work over M micro-batches: the schedule.
std::vector<Op> schedule_of(Schedule s, int r, int P, int M) {
  std::vector<Op> ops;
  if (s != Schedule::one_f_one_b) {  // naive (M = 1) and GPipe: every forward, then every backward
    for (int m = 0; m < M; ++m) ops.push_back({true, m});
    for (int m = M - 1; m >= 0; --m)
      ops.push_back({false, m});  // the last forward's backward first
    return ops;
  }
  // --break warmup-one-long: one forward more before the first backward, P - r of them
  const int warmup = std::min(P - r - 1 + (broken("warmup-one-long") ? 1 : 0), M);
  for (int m = 0; m < warmup; ++m) ops.push_back({true, m});
  for (int i = 0; i < M - warmup; ++i) {  // steady state: one forward, one backward
    ops.push_back({true, warmup + i});
    ops.push_back({false, i});
  }
  for (int m = M - warmup; m < M; ++m) ops.push_back({false, m});  // cool-down
  return ops;
}

// The lecture's claim, apart from any schedule's code: GPipe holds all M micro-batches' activations
// at once, 1F1B at most P - r on stage r (its warm-up's P - r - 1 and the one in its first step).
int in_flight_formula(Schedule s, int r, int P, int M) {
  return s == Schedule::one_f_one_b ? std::min(P - r, M) : M;
}

struct Setup {
  Schedule schedule = Schedule::gpipe;
  int microbatches = 4;
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
  std::vector<double> act_per_micro;   // per rank: activation bytes of one micro-batch
  std::vector<std::vector<Op>> order;  // per rank: the step's forwards and backwards, in time order
};

// The figures of one step (its spans are named "step k").
StepFigures figures_of(const RunResult& r, int step) {
  const std::string step_name = fmt::format("step {}", step);
  StepFigures f;
  double first = INFINITY, last = -INFINITY;
  for (const RankLog& log : r.logs) {
    // The rank's span of that step, and the forwards and backwards inside it.
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
      int micro = 0;
      char kind[16] = {};
      if (std::sscanf(e.name.c_str(), "%15s %d", kind, &micro) != 2) continue;
      const std::string k = kind;
      if (k != "forward" && k != "backward") continue;
      ops.push_back({e.t0, Op{k == "forward", micro}});
      busy += (e.t1 - e.t0) * 1e-6;
    }
    std::sort(ops.begin(), ops.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Op> order;
    for (const auto& [t, op] : ops) order.push_back(op);
    f.order.push_back(order);
    f.busy_s.push_back(busy);
    f.act_peak.push_back(log.peak[std::size_t(Category::activations)]);
    double per_micro = 0;
    for (const ValueEvent& v : log.values)
      if (v.name == "activation bytes per micro-batch") per_micro = v.value;
    f.act_per_micro.push_back(per_micro);
  }
  f.step_s = (last - first) * 1e-6;
  return f;
}

// --- one stage's training --------------------------------------------------------------------

// A micro-batch in flight on this stage: its input, the model's activations for it, its targets
// (last stage) and the gradient of its output (sent back by the next stage).
struct Slot {
  Buffer<float> input, dy, targets;
  std::optional<Mlp> mlp;
  Request sent;  // the forward's activations on their way to the next stage
};

// A pipeline message's metadata: its step (no logical buffer: activations are not shards).
MsgMeta message(int step) {
  MsgMeta m;
  m.step = step;
  return m;
}

// What a phase is, in the trace (docs/trace-format.md, "Phase args"): the viewer's Schedule panel
// draws each forward and backward as a block of its micro-batch on its stage's row, and starts a
// new iteration after each update.
PhaseArgs phase_args(const char* op, int micro, int stage) {
  PhaseArgs a;
  a.op = op;
  a.micro = micro;
  a.stage = stage;
  return a;
}

void sleep_us(double us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
}

void train(Comm& comm, const Setup& s) {
  const int P = comm.size(), r = comm.rank(), M = s.microbatches;
  // STEP 1: my stage: layers [l0, l1) of the model (a Partition of the layers over P), their
  // weights, their gradient summed over the micro-batches, and their optimizer.
  const Partition layers{s.shape.layers(), P};
  const std::size_t l0 = layers.begin(r), l1 = layers.end(r);
  const MlpShape stage = make_shape(std::vector<std::size_t>(
      s.shape.dims.begin() + std::ptrdiff_t(l0), s.shape.dims.begin() + std::ptrdiff_t(l1) + 1));
  const std::size_t first_param = s.shape.weight_offset(l0), count = stage.params();
  const std::size_t mb = s.batch / std::size_t(M), in = stage.in(), out = stage.out();
  const bool first = r == 0, last = r == P - 1;
  const Teacher teacher(s.shape, s.seed);
  const std::vector<float> initial = initial_params(s.shape, s.seed);
  const std::vector<Op> ops = schedule_of(s.schedule, r, P, M);

  // My layers' weights, their gradient (summed over the micro-batches) and the optimizer.
  Buffer<float> params =
      comm.alloc_from(std::vector<float>(initial.begin() + std::ptrdiff_t(first_param),
                                         initial.begin() + std::ptrdiff_t(first_param + count)),
                      Category::params);
  Buffer<float> grads = comm.alloc<float>(count, Category::grads);
  Buffer<float> micro_grads = comm.alloc<float>(count, Category::grads);
  Optimizer optimizer(comm.ledger(), comm.device(), count, s.optimizer);
  Buffer<float> loss = comm.alloc<float>(last ? std::size_t(M) : 0, Category::data);
  double per_micro_bytes = 0;
  std::vector<float> first_grads;

  // The references first, so that no stage computes them while the others are still training:
  // the whole first batch's gradient at the initial weights, and the weights after every step.
  Eigen::VectorXd first_grad_want;
  reference_loss(s.shape, widen(initial), widen(teacher.inputs(0, s.batch), s.batch, s.shape.in()),
                 widen(teacher.targets(0, s.batch), s.batch, s.shape.out()), &first_grad_want);
  const ReferenceRun ref =
      reference_train(s.shape, teacher, initial, s.batch, s.steps, s.optimizer);

  // Step ids: the ideal machine's op end times, ranked (ideal_ends); every rank computes the same.
  std::vector<std::vector<Op>> schedules;
  for (int q = 0; q < P; ++q) schedules.push_back(schedule_of(s.schedule, q, P, M));
  const std::vector<std::vector<int>> ends = ideal_ends(schedules, M);
  const std::vector<int> ticks = ideal_ticks(ends);
  // The step of stage q's op: when it ends on the ideal machine, ranked; a message is sent then.
  const auto tick_of = [&](int q, const Op& op) {
    const auto& list = schedules[std::size_t(q)];
    const std::size_t i = std::size_t(std::find(list.begin(), list.end(), op) - list.begin());
    return int(std::lower_bound(ticks.begin(), ticks.end(), ends[std::size_t(q)][i]) -
               ticks.begin());
  };

  PhaseArgs train_step;  // marks each step's span: the viewer's training steps
  train_step.op = kTrainStepOp;
  for (int k = 0; k < s.steps; ++k) {
    const int step0 = comm.next_steps(int(ticks.size()));
    // The step's data before the clock starts: inputs on the first stage, targets on the last.
    const std::vector<float> inputs =
        first ? teacher.inputs(std::size_t(k) * s.batch, s.batch) : std::vector<float>{};
    const std::vector<float> targets =
        last ? teacher.targets(std::size_t(k) * s.batch, s.batch) : std::vector<float>{};
    const auto samples_of = [&](const std::vector<float>& all, int micro, std::size_t width) {
      const auto from = all.begin() + std::ptrdiff_t(std::size_t(micro) * mb * width);
      return std::vector<float>(from, from + std::ptrdiff_t(mb * width));
    };
    comm.barrier();  // every stage starts the step together: the step's span measures the pipeline
    {
      auto step_phase = comm.phase(fmt::format("step {}", k + 1), train_step);
      std::vector<Slot> slots(static_cast<std::size_t>(M));
      std::vector<std::pair<Buffer<float>, Request>>
          sent_back;  // input gradients on their way back
      ops::fill(grads.view(), 0.0f);
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        Slot& slot = slots[std::size_t(op.micro)];
        const int step = step0 + tick_of(r, op);
        if (op.forward) {
          // STEP 3: a forward. The micro-batch's input: the data on the first stage, the stage
          // before's output on the others.
          const std::int64_t before = comm.ledger().current(Category::activations);
          slot.input = comm.alloc<float>(mb * in, Category::activations);
          slot.mlp.emplace(comm.ledger(), comm.device(), stage, mb, /*activate_output=*/!last);
          slot.dy = comm.alloc<float>(mb * out, Category::activations);
          if (per_micro_bytes == 0)
            per_micro_bytes = double(comm.ledger().current(Category::activations) - before);
          if (first)
            from_host(slot.input.view(), samples_of(inputs, op.micro, in));
          else
            comm.recv(slot.input.view(), r - 1, kTagForward + op.micro,
                      message(step0 + tick_of(r - 1, op)));
          auto phase = comm.phase(name_of(op), phase_args("forward", op.micro, r));
          sleep_us(s.work_us + s.sample_us * double(mb));
          const View<const float> y = slot.mlp->forward(params.view(), slot.input.view());
          if (last) {  // the loss of this micro-batch, normalised by the whole batch
            slot.targets = comm.alloc<float>(mb * out, Category::data);
            from_host(slot.targets.view(), samples_of(targets, op.micro, out));
            mse_loss(loss.view().sub(std::size_t(op.micro), 1), slot.dy.view(), y,
                     slot.targets.view(), s.batch, out);
          } else {
            comm.mark_step(step);
            slot.sent = comm.isend(y, r + 1, kTagForward + op.micro, message(step));
          }
        } else {
          // STEP 4: a backward: the gradient of my output from the next stage (the last stage
          // has it from the loss), my layers' gradient added to the step's, the input's gradient
          // sent back, and the micro-batch's activations freed.
          if (!last)
            comm.recv(slot.dy.view(), r + 1, kTagBackward + op.micro,
                      message(step0 + tick_of(r + 1, op)));
          auto phase = comm.phase(name_of(op), phase_args("backward", op.micro, r));
          sleep_us(2 * (s.work_us + s.sample_us * double(mb)));
          Buffer<float> dx = comm.alloc<float>(first ? 0 : mb * in, Category::comm);
          slot.mlp->backward(micro_grads.view(), params.view(), slot.input.view(), slot.dy.view(),
                             dx.view());
          if (broken("no-grad-accumulation"))  // each micro-batch's gradient replaces the last's
            ops::copy(grads.view(), View<const float>(micro_grads.view()));
          else
            ops::add(grads.view(), View<const float>(micro_grads.view()));
          if (!first) {
            comm.mark_step(step);
            Request req = comm.isend(View<const float>(dx.view()), r - 1, kTagBackward + op.micro,
                                     message(step));
            sent_back.emplace_back(std::move(dx), std::move(req));
          }
          if (slot.sent) comm.wait(slot.sent);
          slot = Slot{};  // its activations are freed: the memory 1F1B saves
        }
      }
      for (auto& [buffer, req] : sent_back) comm.wait(req);

      // STEP 5: one update per step, after every micro-batch's backward (the flush).
      if (k == 0)
        first_grads = to_host(View<const float>(grads.view()));  // checked below, off the clock
      auto phase = comm.phase("update", phase_args("update", -1, r));
      optimizer.step(params.view(), View<const float>(grads.view()));
    }
    if (last) {  // the step's loss: the micro-batches' sum, to rank 0 for the report
      double total = 0;
      for (float v : to_host(View<const float>(loss.view()))) total += v;
      comm.recorder().value("loss", total);
      if (!first)
        comm.send(View<const double>{&total, 1, Device::cpu}, 0, kTagLoss);
      else if (!s.quiet)
        comm.say("step {}: loss {:.6g}\n", k + 1, total);
    } else if (first) {
      double total = 0;
      comm.recv(View<double>{&total, 1, Device::cpu}, P - 1, kTagLoss);
      if (!s.quiet) comm.say("step {}: loss {:.6g}\n", k + 1, total);
    }
  }
  comm.recorder().value("activation bytes per micro-batch", per_micro_bytes);

  // The first step's gradient (summed over the micro-batches), and the weights after the last
  // step, against the reference trained on the whole batches.
  const Eigen::VectorXd mine =
      first_grad_want.segment(Eigen::Index(first_param), Eigen::Index(count));
  // Deep pipelines (64 stages) can shrink the first stages' gradients below float32's normal
  // range (1.2e-38). There each operation may also be off by half the smallest subnormal,
  // 2^-150, whatever its operands (the underflow term of the float32 model): a gradient takes
  // one such rounding per term of its sums (the batch, and the width of the layer after it);
  // a weight two per step (lr g, then the subtraction) and its gradient's, scaled by lr.
  std::size_t widest = 0;
  for (const std::size_t d : s.shape.dims) widest = std::max(widest, d);
  const double grad_underflow = double(s.batch + widest) * 0x1p-150;
  const Comparison g = compare(View<const float>{first_grads.data(), first_grads.size()}, mine,
                               1e-5 * mine.cwiseAbs().maxCoeff() + grad_underflow);
  comm.check(
      fmt::format(
          "stage {}: step 1's gradient (summed over {} micro-batch{}) equals the reference's", r, M,
          M == 1 ? "" : "es"),
      g.ok, g.detail());
  if (comm.inject_fault()) inject_fault_into(params.view());
  // Measured against the reference's own update: the weights move little in a few steps, so an
  // error of a fraction of the update is what tells a right pipeline from one that lost a
  // micro-batch. Float32 rounds each weight at about 1e-8 here; updates are far larger.
  const Eigen::VectorXd want = ref.params.segment(Eigen::Index(first_param), Eigen::Index(count));
  double update = 0;
  for (std::size_t i = 0; i < count; ++i)
    update = std::max(update, std::fabs(want[Eigen::Index(i)] - double(initial[first_param + i])));
  const std::vector<float> got = to_host(View<const float>(params.view()));
  const double underflow =
      double(s.steps) * (2 * 0x1p-150 + double(s.optimizer.lr) * grad_underflow);
  bool ok = true;
  double worst = 0;
  for (std::size_t i = 0; i < count;
       ++i) {  // plus 4 float32 units of the weight: all rounding can do
    const double w = want[Eigen::Index(i)], err = std::fabs(double(got[i]) - w);
    const double ulp = double(std::nextafter(float(std::fabs(w)), INFINITY)) -
                       std::fabs(double(float(std::fabs(w))));
    ok = ok && err <= kUpdateTolerance * update + 4 * ulp + underflow;
    worst = std::isnan(err) ? INFINITY : std::max(worst, err);
  }
  comm.check(fmt::format("stage {}: its layers' weights after {} step{} equal the reference's "
                         "(within {} of the largest "
                         "update, plus rounding)",
                         r, s.steps, s.steps == 1 ? "" : "s", kUpdateTolerance),
             ok, fmt::format("max |error| {:.3g}, largest update {:.3g}", worst, update));
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"11", "pipeline_microbatching",
                 "pipeline parallelism: naive, GPipe micro-batches and 1F1B", 4, 64});
  lesson.set_text(
      "Pipeline parallelism cuts the model's layers into P stages, one per rank. Naively only one "
      "stage works at a time (utilisation 1/P). With M micro-batches the stages overlap: "
      "M/(M+P-1). GPipe runs all forwards then all backwards and holds M micro-batches' "
      "activations; 1F1B alternates after a warm-up and holds at most P.",
      "Timeline: the forward and backward spans form the pipeline diagram; the gaps are the "
      "bubble. Memory: the activations bar of GPipe against 1F1B's.");
  std::string schedule_text = "gpipe";
  int microbatches = 0, stages = 0, layers = 0;
  bool expect_utilisation = false;
  Setup setup;
  lesson.describe_size("units per hidden layer of the model");
  auto& app = lesson.app();
  app.add_option("--schedule", schedule_text, "naive, gpipe or 1f1b")
      ->check(CLI::IsMember({"naive", "gpipe", "1f1b"}))
      ->capture_default_str();
  app.add_option("--microbatches", microbatches,
                 "M: the batch cut into M micro-batches (default 4; naive: 1)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--stages", stages,
                 "P: pipeline stages, one per rank (default: the number of ranks)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--layers", layers,
                 "hidden layers of --size units; the model has one more Linear layer (default 3, "
                 "or enough for a "
                 "layer per stage)")
      ->check(CLI::Range(1, 256));
  app.add_option("--batch", setup.batch, "samples per step")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--steps", setup.steps, "training steps")
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
               "fail unless the measured utilisation is within 10 points of M/(M+P-1) with stages "
               "of equal cost (the "
               "tests use it on a quiet machine; a busy one stretches the bubble)");
  app.add_option("--lr", setup.optimizer.lr, "SGD's learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  const auto& opt = lesson.options();

  lesson.add_break("no-grad-accumulation",
                   "each micro-batch's gradient replaces the one before instead of adding to it: "
                   "the step uses the last micro-batch's gradient alone (main.cpp, train)");
  lesson.add_break("warmup-one-long",
                   "1F1B's warm-up runs P - r forwards, one too many, before the first backward "
                   "(with --schedule 1f1b; main.cpp, schedule_of)");
  lesson.on_world([&](const World& w) {
    setup.schedule = schedule_text == "naive"   ? Schedule::naive
                     : schedule_text == "gpipe" ? Schedule::gpipe
                                                : Schedule::one_f_one_b;
    if (lesson.options().break_name == "warmup-one-long" && setup.schedule != Schedule::one_f_one_b)
      throw UsageError("--break warmup-one-long is a bug of 1F1B's warm-up: add --schedule 1f1b");
    if (setup.schedule == Schedule::naive && microbatches > 1)
      throw UsageError(
          "--schedule naive runs the whole batch at once: leave out --microbatches (or use gpipe "
          "or 1f1b)");
    setup.microbatches = setup.schedule == Schedule::naive ? 1
                         : microbatches > 0                ? microbatches
                                                           : 4;
    if (stages == 0) stages = w.size;
    if (stages != w.size)
      throw UsageError(fmt::format("--stages {} on {} ranks: a stage is a rank; run --ranks {}",
                                   stages, w.size, stages));
    if (layers == 0) layers = std::max(3, stages - 1);  // every stage gets at least one layer
    std::vector<std::size_t> dims{16};
    for (int l = 0; l < layers; ++l) dims.push_back(opt.size);
    dims.push_back(8);
    setup.shape = make_shape(dims);
    if (std::size_t(stages) > setup.shape.layers())
      throw UsageError(fmt::format(
          "{} stages (one per rank) is more than the model's {} layers (--layers {} hidden + "
          "1): every stage needs a layer",
          stages, setup.shape.layers(), layers));
    if (setup.batch % std::size_t(setup.microbatches) != 0)
      throw UsageError(fmt::format(
          "--batch {} does not split into {} equal micro-batches: use a --microbatches that "
          "divides it (or another --batch)",
          setup.batch, setup.microbatches));
    setup.seed = opt.seed;
    setup.optimizer.lr = setup.optimizer.lr > 0 ? setup.optimizer.lr : 1.0f;
    lesson.set_algorithm(fmt::format("{}, {} micro-batch{}", to_string(setup.schedule),
                                     setup.microbatches, setup.microbatches == 1 ? "" : "es"));
    // What the viewer's Schedule panel needs to draw the ideal schedule on its steps clock
    // (docs/trace-format.md, "pipeline"): the schedule, P, M, the ideal machine's costs, and how
    // the step ids map onto it: iteration k's ids are first_step + k x steps_per_iteration + i, i
    // ranking the ideal ops' end times (train). Comm numbers step ids from 1, and this lesson
    // takes none before its first iteration.
    std::vector<std::vector<Op>> orders;
    for (int q = 0; q < stages; ++q)
      orders.push_back(schedule_of(setup.schedule, q, stages, setup.microbatches));
    const std::size_t ticks = ideal_ticks(ideal_ends(orders, setup.microbatches)).size();
    lesson.set_metadata(
        "pipeline",
        fmt::format(R"({{"schedule":"{}","stages":{},"microbatches":{},"iterations":{},)"
                    R"("forward_units":{},"backward_units":{},"first_step":1,)"
                    R"("steps_per_iteration":{}}})",
                    to_string(setup.schedule), stages, setup.microbatches, setup.steps,
                    kForwardUnits, kBackwardUnits, ticks));
  });

  lesson.on_report([&](RunResult& r) {
    const int P = r.world.size, M = setup.microbatches;
    const int shown = setup.steps;  // the last step: the first one also pays for warming up
    const StepFigures f = figures_of(r, shown);
    fmt::print("\n{} on {} stages, {} micro-batch{} of {} samples; model {}\n",
               to_string(setup.schedule), P, M, M == 1 ? "" : "es", setup.batch / std::size_t(M),
               setup.shape.describe());
    fmt::print("step {}: {} from the first stage's start to the last stage's end\n", shown,
               format_seconds(f.step_s));
    fmt::print("\n  {:>5}  {:>6}  {:>10}  {:>11}  {:>8}  {:>9}  {:>13}  {:>10}\n", "stage",
               "layers", "busy", "utilisation", "formula", "in flight", "activations", "formula");
    std::vector<std::string> orders;  // each stage's order of work, printed under the table
    const Partition layer_split{setup.shape.layers(), P};
    double mean = 0;
    bool orders_ok = true, memory_ok = true, formula_ok = true;
    for (int k = 0; k < P; ++k) {
      const std::vector<Op> want = schedule_of(setup.schedule, k, P, M);
      const int flight = max_in_flight(want);
      const double util = f.step_s > 0 ? f.busy_s[std::size_t(k)] / f.step_s : 0;
      mean += util / P;
      std::vector<Op> step1(
          f.order[std::size_t(k)].begin(),
          f.order[std::size_t(k)].begin() +
              std::ptrdiff_t(std::min(want.size(), f.order[std::size_t(k)].size())));
      const bool order_ok = step1 == want;
      orders_ok = orders_ok && order_ok;
      const double act_want = flight * f.act_per_micro[std::size_t(k)];
      memory_ok = memory_ok && double(f.act_peak[std::size_t(k)]) == act_want;
      formula_ok = formula_ok &&
                   double(f.act_peak[std::size_t(k)]) ==
                       in_flight_formula(setup.schedule, k, P, M) * f.act_per_micro[std::size_t(k)];
      std::string order;
      for (std::size_t i = 0; i < std::min<std::size_t>(want.size(), 24); ++i)
        order += fmt::format("{}{}{}", i ? " " : "", want[i].forward ? "F" : "B", want[i].micro);
      if (want.size() > 24) order += " ...";
      orders.push_back(
          fmt::format("  {:>5}  {}{}", k, order, order_ok ? "" : "  (the trace differs!)"));
      fmt::print("  {:>5}  {:>6}  {:>10}  {:>10.1f}%  {:>7.1f}%  {:>9}  {:>13}  {:>10}\n", k,
                 fmt::format("{}-{}", layer_split.begin(k), layer_split.end(k) - 1),
                 format_seconds(f.busy_s[std::size_t(k)]), util * 100,
                 utilisation_formula(P, M) * 100, flight,
                 format_bytes(double(f.act_peak[std::size_t(k)])), format_bytes(act_want));
    }
    if (P <= 16) {
      fmt::print(
          "  order of work (F forward, B backward of micro-batch m), checked against the trace:\n");
      for (const std::string& line : orders) fmt::print("{}\n", line);
    }
    r.check("every stage ran its schedule's forwards and backwards in order (from the trace)",
            orders_ok);
    r.check(
        "every stage's activation peak = micro-batches in flight x one micro-batch's activations",
        memory_ok);
    r.check(setup.schedule == Schedule::one_f_one_b
                ? "1F1B: stage r's activation peak is min(P - r, M) micro-batches' (the lecture's)"
                : "every stage's activation peak is all M micro-batches' (the lecture's)",
            formula_ok);
    // The schedule's claim, free of the machine: the order the trace shows, replayed on stages of
    // equal cost, gives the formula exactly. The measured figure below is the machine's.
    const IdealReplay ideal = replay_ideal(f.order, M);
    const double ideal_util = ideal.step > 0 ? double(ideal.busy) / (double(P) * ideal.step) : 0;
    r.check(
        "the trace's order of work, replayed on equal stages (forward 1, backward 2, messages "
        "free), keeps them busy M/(M+P-1) of the step",
        ideal.complete &&
            std::int64_t(ideal.busy) * (M + P - 1) == std::int64_t(M) * P * ideal.step,
        ideal.complete
            ? fmt::format("busy {} of {} x {} stages = {:.1f}%, formula {:.1f}%", ideal.busy,
                          ideal.step, P, ideal_util * 100, utilisation_formula(P, M) * 100)
            : std::string("the order stalls: some op's input never comes"));
    fmt::print(
        "  ideal machine {:.1f}% (step {} units); mean utilisation measured {:.1f}%;\n"
        "  formula M/(M+P-1) = {}/{} = {:.1f}%\n",
        ideal_util * 100, ideal.step, mean * 100, M, M + P - 1, utilisation_formula(P, M) * 100);
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
    const bool close = std::fabs(mean - utilisation_formula(P, M)) <= 0.10;
    if (P > 1)
      fmt::print(
          "  {} 10 points of the formula: the stages took {} to {}, {} of it simulated\n{}",
          close ? "within" : "NOT within", format_seconds(idlest), format_seconds(busiest),
          format_seconds(simulated_s),
          equal ? ""
                : "  (unequal, or mostly the model's own compute: the formula need not hold)\n");
    if (expect_utilisation)
      r.check("the mean utilisation is within 10 points of M/(M+P-1), the stages of equal cost",
              equal && close,
              fmt::format("{:.1f}% against {:.1f}%, stages {} to {}", mean * 100,
                          utilisation_formula(P, M) * 100, format_seconds(idlest),
                          format_seconds(busiest)));

    // M = 1, 2, 4, 8, 16 for both schedules: in-process runs of one step, this setup otherwise.
    if (P > 1) {
      fmt::print(
          "\nmicro-batches on {} stages (in-process runs of one step; compute {:.0f} us + {:.0f} "
          "us/sample,\nbackward twice): utilisation and stage 0's activation peak, GPipe and "
          "1F1B\n",
          P, setup.work_us, setup.sample_us);
      fmt::print("  {:>3}  {:>7}  {:>8}  {:>8}  {:>8}  {:>11}  {:>11}  {:>11}\n", "M", "samples",
                 "formula", "gpipe", "1f1b", "time/sample", "act. gpipe", "act. 1f1b");
      for (int m : {1, 2, 4, 8, 16}) {
        if (setup.batch % std::size_t(m) != 0) continue;
        std::map<Schedule, StepFigures> got;
        for (Schedule sched : {Schedule::gpipe, Schedule::one_f_one_b}) {
          Setup one = setup;
          one.schedule = sched;
          one.microbatches = m;
          one.steps = 1;
          one.quiet = true;
          const RunResult run = run_in_process(P, [&](Comm& comm) { train(comm, one); });
          got[sched] = figures_of(run, 1);
        }
        const auto util = [&](const StepFigures& g) {
          double sum = 0;
          for (double b : g.busy_s) sum += b;
          return g.step_s > 0 ? sum / P / g.step_s : 0;
        };
        const StepFigures &g = got[Schedule::gpipe], &o = got[Schedule::one_f_one_b];
        fmt::print("  {:>3}  {:>7}  {:>7.1f}%  {:>7.1f}%  {:>7.1f}%  {:>11}  {:>11}  {:>11}\n", m,
                   setup.batch / std::size_t(m), utilisation_formula(P, m) * 100, util(g) * 100,
                   util(o) * 100, format_seconds(g.step_s / double(setup.batch)),
                   format_bytes(double(g.act_peak[0])), format_bytes(double(o.act_peak[0])));
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
