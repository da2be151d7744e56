// zero_lesson.cpp — the program of lessons 08-10 (zero_lesson.hpp).
#include "lessons/common/zero_lesson.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "core/base/json.hpp"
#include "core/base/units.hpp"
#include "core/cost/cost_model.hpp"
#include "core/runtime/trace_counts.hpp"
#include "core/training/model_reference.hpp"
#include "core/training/teacher.hpp"
#include "lessons/common/mlp_options.hpp"

namespace distlab::zero {

using model::MlpShape;

namespace {

// The lecture's table: bytes per parameter at N = 64 and the largest model on an 80 GB GPU.
// The lecture prints its figures rounded: `half_digit` is half a unit of the last digit it
// prints (4.2: 0.05), so its formula's exact value lies within that of the printed one.
struct LectureRow {
  Stage stage;
  double bytes_per_param;
  double half_digit;
  const char* largest;
};
constexpr LectureRow kLecture[] = {{Stage::dp, 16, 0.5, "5B"},
                                   {Stage::zero1, 4.2, 0.05, "19B"},
                                   {Stage::zero2, 2.2, 0.05, "36B"},
                                   {Stage::zero3, 0.25, 0.005, "320B"}};
constexpr int kLectureRanks = 64;
constexpr int kTagWeights = 990;  // off the trace: a step's weights, for its checks

// Names of the values each rank records for the report: its model state after the last step.
constexpr const char* kStateNames[] = {"state params bytes", "state grads bytes",
                                       "state optimizer bytes"};

std::string params_text(double params) {
  if (params >= 1e12) return fmt::format("{:.1f}T", params / 1e12);
  if (params >= 1e9) return fmt::format("{:.1f}B", params / 1e9);
  if (params >= 1e6) return fmt::format("{:.1f}M", params / 1e6);
  return fmt::format("{:.0f}", params);
}

}  // namespace

namespace {

// The lesson's options beside the common ones, and the training they configure.
struct Setup {
  Config config;
  MlpOptions shape;  // --layers, --inputs, --outputs
  double gpu_memory_gb = 80;
};

// What rank 0 keeps from its run for the report.
struct Outcome {
  Run run;
  StepReport steps;    // how close r0's step checks came to their bounds
  double from_dp = 0;  // r0's max |error| against plain data parallel's weights
  // The plain data-parallel run beside it (untraced), as its own ledger measured it: the
  // viewer's baseline (otherData.zero.baseline).
  StateBytes dp_state;
  std::uint64_t dp_activations_peak = 0;
  std::vector<double> dp_step_seconds;  // its steps' time on rank 0's clock
};

void add_options(Lesson& lesson, Setup& setup) {
  Config& config = setup.config;
  double& gpu_memory_gb = setup.gpu_memory_gb;
  lesson.describe_size("units per hidden layer of the model");
  auto& app = lesson.app();
  app.add_option("--steps", config.steps, "training steps")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--batch", config.batch, "samples per step, split over the ranks")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  add_mlp_options(app, setup.shape);
  app.add_option("--lr", config.adam.lr, "Adam's learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--deterministic", config.deterministic,
               "sum every gradient in rank order (one step, straight to the owner) instead of "
               "around the ring: every "
               "stage then equals plain data parallel bit for bit");
  app.add_option("--gpu-memory", gpu_memory_gb, "GB per GPU for the largest-model column")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

// Once the world is known: the model's shape from the options, the batch against the ranks, and
// the memory formula the viewer draws.
void configure(Lesson& lesson, Setup& setup, const World& w) {
  const auto& opt = lesson.options();
  Config& config = setup.config;
  const Stage stage = config.stage;
  if (opt.size > (1u << 16))
    throw UsageError(
        fmt::format("--size {} hidden units is more than this lesson trains (65536)", opt.size));
  config.shape = model::make_shape(mlp_dims(setup.shape, opt.size));
  config.seed = opt.seed;
  if (config.batch < std::size_t(w.size))
    throw UsageError(
        fmt::format("--batch {} gives some of the {} ranks no sample: use --batch {} or more",
                    config.batch, w.size, w.size));
  const std::vector<double> want(std::size_t(w.size),
                                 double(state_bytes(stage, config.shape, w.size).total()));
  lesson.set_memory_formula(
      fmt::format("model state, {} bytes per parameter", bytes_per_param_formula(stage)), want);
}

// The report, part 1: the losses and how close rank 0's weights came to their bounds.
void print_training(const RunResult& r, const Config& config, const Outcome& outcome) {
  const Stage stage = config.stage;
  const int n = r.world.size;
  const MlpShape& s = config.shape;
  fmt::print("\n{}: model {}\n{} ranks, batch {}, {} steps of Adam (lr {}){}\n", title(stage),
             s.describe(), n, config.batch, config.steps, config.adam.lr,
             config.deterministic ? ", --deterministic" : "");
  fmt::print("\n  {:>4}  {:>10}\n", "step", "loss");
  for (std::size_t k = 0; k < outcome.run.losses.size(); ++k)
    fmt::print("  {:>4}  {:>10.6f}\n", k + 1, outcome.run.losses[k]);
  const StepReport& w = outcome.steps;
  fmt::print(
      "\nevery step from r0's own state against float64's, the worst share of its bound: "
      "gradient {:.2g},\nAdam's update {:.2g}, moments {:.2g}, loss {:.2g}; max |difference| "
      "from plain data parallel's\nweights after the last step {:.3g}\n",
      w.gradient, w.update, w.moments, w.loss, outcome.from_dp);
}

// Part 2: the model state per rank against the formula; returns the bytes per parameter rank 0
// measured.
double print_state(const RunResult& r, const Setup& setup) {
  const Stage stage = setup.config.stage;
  const MlpShape& s = setup.config.shape;
  const int n = r.world.size;
  const double P = double(s.params());
  const StateBytes want = state_bytes(stage, s, n);
  const double gpu_memory_gb = setup.gpu_memory_gb;
  // Memory: the model state after the last step (each rank's ledger), and the peaks.
  fmt::print(
      "\nmodel state per rank after the last step (bytes; the ledger) against {} bytes per "
      "parameter:\n",
      bytes_per_param_formula(stage));
  fmt::print("  {:>4}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8}  {:>8}  {:>8}\n", "rank", "params",
             "grads", "optimizer", "total", "B/param", "formula", "padded");
  std::string peaks = fmt::format("  {:>4}  {:>9}  {:>9}  {:>11}  {:>9}\n", "rank", "params",
                                  "grads", "activations", "comm");
  for (const RankLog& log : r.logs) {
    double got[3] = {0, 0, 0};
    for (const ValueEvent& v : log.values)
      for (int c = 0; c < 3; ++c)
        if (v.name == kStateNames[c]) got[c] = v.value;
    const double total = got[0] + got[1] + got[2];
    const auto peak = [&](Category c) { return format_bytes(double(log.peak[std::size_t(c)])); };
    fmt::print("  {:>4}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8.4f}  {:>8.4f}  {:>8.4f}\n",
               fmt::format("r{}", log.rank), format_count(std::uint64_t(got[0])),
               format_count(std::uint64_t(got[1])), format_count(std::uint64_t(got[2])),
               format_count(std::uint64_t(total)), total / P, bytes_per_param(stage, n),
               double(want.total()) / P);
    peaks += fmt::format("  {:>4}  {:>9}  {:>9}  {:>11}  {:>9}\n", fmt::format("r{}", log.rank),
                         peak(Category::params), peak(Category::grads), peak(Category::activations),
                         peak(Category::comm));
  }
  const double measured = [&] {
    for (const ValueEvent& v : r.logs[0].values)
      if (v.name == std::string("state total bytes")) return v.value / P;
    return 0.0;
  }();
  fmt::print(
      "  formula {} = {:.4f} at N = {}; {:.4f} with the padding to a multiple of N\n"
      "  ({} parameters padded to {})\n",
      bytes_per_param_formula(stage), bytes_per_param(stage, n), n, double(want.total()) / P,
      format_count(s.params()), [&] {
        std::uint64_t padded = 0;
        for (const Unit& u : units(stage, s, n)) padded += u.padded;
        return format_count(padded);
      }());
  fmt::print(
      "  largest model on one {:.0f} GB GPU at {:.4f} bytes per parameter: {} parameters\n"
      "  (plain data parallel, 16 bytes: {})\n",
      gpu_memory_gb, measured, params_text(gpu_memory_gb * 1e9 / measured),
      params_text(gpu_memory_gb * 1e9 / 16));
  // What ZeRO leaves whole: the activations of my share of the batch (checked on every rank to
  // equal plain data parallel's). At this size they outgrow the sharded model state.
  fmt::print("\npeaks per rank (the ledger's highest, by category):\n{}", peaks);
  const RankLog& r0 = r.logs[0];
  const double acts = double(r0.peak[std::size_t(Category::activations)]);
  fmt::print(
      "  not sharded: activations. r0's peak of them, {}, is {:.1f}x its model state: ZeRO "
      "shards\n  the 16 bytes per parameter, not what the batch's forward keeps for the "
      "backward\n",
      format_bytes(acts), measured > 0 ? acts / (measured * P) : 0.0);
  return measured;
}

// Part 3: the bytes every rank sent per step, counted from the trace, against the formula.
void check_communication(RunResult& r, const Config& config, const Outcome& outcome) {
  const Stage stage = config.stage;
  const MlpShape& s = config.shape;
  const int n = r.world.size;
  const double P = double(s.params());
  // Communication per step, counted from the trace, against the formula.
  bool exact = true;
  std::uint64_t sent_total = 0, recv_total = 0;
  for (const auto& [first, last] : outcome.run.exchange) {
    const auto t = r.traffic(first, last);
    for (int k = 0; k < n; ++k) {
      exact = exact && t[std::size_t(k)].bytes_sent == step_bytes_sent(stage, s, n, k);
      sent_total += t[std::size_t(k)].bytes_sent;
      recv_total += t[std::size_t(k)].bytes_recv;
    }
  }
  r.check(fmt::format("every rank sends {} x (N-1)/N of bf16 per step, as counted from the trace",
                      step_bytes_formula(stage)),
          exact);
  r.check("every byte sent was received", sent_total == recv_total);
  if (!outcome.run.exchange.empty()) {
    const auto t = r.traffic(outcome.run.exchange[0].first, outcome.run.exchange[0].second);
    const double psi_bytes = P * sizeof(BFloat16);
    fmt::print(
        "\ncommunication per step (sent by each rank; received: the same), counted from the "
        "trace:\n");
    fmt::print(
        "  r0 sent {} = {:.3f} x Psi x 2 bytes; formula {} x (N-1)/N = {:.3f}\n"
        "  (ZeRO's paper, section 7, counts {} per step, in parameters: Psi per reduce-scatter "
        "and\n"
        "  per all-gather, what each rank sends, (N-1)/N rounded to 1)\n",
        format_bytes(double(t[0].bytes_sent)), double(t[0].bytes_sent) / psi_bytes,
        step_bytes_formula(stage), (stage == Stage::zero3 ? 3.0 : 2.0) * (n - 1) / n,
        step_bytes_formula(stage));
  }
}

// Part 3b, on a simulated cluster (--sim): a step's simulated time, which is its communication
// (computation takes none), for the stage and for plain data parallel, against the ring model
// with the platform's alpha and beta, plus the loss's reduce onto rank 0 (N-1 four-byte messages
// it receives one after another: (N-1) alpha). ZeRO-3's three passes against data parallel's
// two: 1.5x in the bandwidth terms, more where the per-layer collectives' start-ups weigh.
void report_simulated_time(RunResult& r, const Config& config, const Outcome& outcome) {
  std::optional<CostParams> cp = simulated_cost_params(r.hosts());
  const int n = r.world.size;
  if (!cp || n == 1 || outcome.run.step_seconds.empty() || outcome.dp_step_seconds.empty()) return;
  struct Row {
    Stage stage;
    double simulated, predicted;
    Cost cost;
  };
  std::vector<Row> rows;
  // The loss's reduce onto rank 0: N-1 four-byte messages it receives one after another.
  const Cost loss = predict_collective(Collective::reduce, false, n, sizeof(float));
  for (Stage st : {config.stage, Stage::dp}) {
    const Cost c = step_cost(st, config.shape, n);
    rows.push_back({st,
                    median(st == Stage::dp ? outcome.dp_step_seconds : outcome.run.step_seconds),
                    c.seconds(*cp) + loss.seconds(*cp), c});
  }
  fmt::print(
      "\nsimulated time of one step on {} (computation takes none: this is the step's\n"
      "communication; the median over {} steps):\n",
      cp->network->platform, config.steps);
  fmt::print("  {:<20}  {:>10}  {:>10}  {:>6}  {}\n", "", "simulated", "predicted", "ratio",
             "the ring model (+ the loss's reduce)");
  double smallest = 1e300;  // the smallest buffer a collective of the step moves
  for (const Row& row : rows)
    for (const Unit& u : units(row.stage, config.shape, n))
      smallest = std::min(smallest, double(u.padded) * sizeof(BFloat16));
  const bool checked =
      cp->network->uniform && !config.deterministic && smallest >= kSimulatedCheckBytes;
  for (const Row& row : rows) {
    const double ratio = row.simulated / row.predicted;
    const std::string verdict = !checked ? "" : "  " + simulated_verdict(ratio);
    fmt::print("  {:<20}  {:>10}  {:>10}  {:>6.2f}  {}{}\n", title(row.stage),
               format_seconds(row.simulated), format_seconds(row.predicted), ratio,
               step_cost_formula(row.stage), verdict);
    if (checked)
      r.check(fmt::format("{}: a step's simulated time within {:.0f}% of {}", title(row.stage),
                          kSimulatedTolerance * 100, step_cost_formula(row.stage)),
              std::abs(ratio - 1) <= kSimulatedTolerance,
              fmt::format("simulated {}, predicted {}", format_seconds(row.simulated),
                          format_seconds(row.predicted)));
  }
  const Row& mine = rows[0];
  const Row& dp = rows[1];
  fmt::print(
      "  {} / plain data parallel: simulated {:.2f}x, the model {:.2f}x;\n"
      "  in bytes alone {:.2f}x ({} against 2 Psi); in start-ups alone {:.2f}x ({:.0f} messages\n"
      "  on the path against {:.0f})\n",
      title(mine.stage), mine.simulated / dp.simulated, mine.predicted / dp.predicted,
      mine.cost.bytes_moved / dp.cost.bytes_moved, step_bytes_formula(mine.stage),
      mine.cost.messages / dp.cost.messages, mine.cost.messages, dp.cost.messages);
  std::string all;  // every stage's step on this platform, by the model
  for (Stage st : {Stage::dp, Stage::zero1, Stage::zero2, Stage::zero3})
    all += fmt::format(
        "{}{} {}", all.empty() ? "" : ", ", title(st),
        format_seconds(step_cost(st, config.shape, n).seconds(*cp) + loss.seconds(*cp)));
  fmt::print("  the model's step for each stage here:\n    {}\n", all);
  if (!checked)
    fmt::print("  a report, not a check: {}\n",
               config.deterministic ? "--deterministic sums in rank order, not on the ring"
               : !cp->network->uniform
                   ? fmt::format("{}'s routes differ between pairs of hosts", cp->network->platform)
                   : fmt::format("the smallest collective moves {}, under {}",
                                 format_bytes(smallest), format_bytes(kSimulatedCheckBytes)));
}

// Part 4: the lecture's table from the formulas, and this run's row beside it.
void print_lecture_table(RunResult& r, Stage stage, double measured) {
  const int n = r.world.size;
  // The lecture's table, from the formulas, and this run's row.
  fmt::print("\nthe lecture's table at N = {} (80 GB per GPU):\n", kLectureRanks);
  fmt::print("  {:<22} {:>12} {:>10} {:>14} {:>10}\n", "", "B/param", "lecture", "largest model",
             "lecture");
  for (const LectureRow& row : kLecture) {
    const double b = bytes_per_param(row.stage, kLectureRanks);
    fmt::print("  {:<22} {:>12.4f} {:>10} {:>14} {:>10}{}\n", title(row.stage), b,
               row.bytes_per_param, params_text(80e9 / b), row.largest,
               row.stage == stage ? "   <- this lesson" : "");
    if (row.stage == stage && n == kLectureRanks) {
      // The lecture's figure is its formula without padding, rounded; this run's measured
      // figure also counts the zero padding of the shards to a multiple of N, and is checked
      // exactly against the padded formula above. So the lecture is compared formula to
      // formula, within its rounding; the measured figure is shown beside it, not held to it
      // (at small sizes the padding is a visible share: 30 parameters on 64 ranks).
      const double off = std::fabs(b - row.bytes_per_param);
      fmt::print(
          "  this run, N = {}: {:.4f} bytes per parameter measured (padding included, checked "
          "exactly); "
          "the formula's {:.4f} rounds to the lecture's {}\n",
          n, measured, b, row.bytes_per_param);
      r.check(
          fmt::format(
              "N = 64: {} = {:.4f} bytes per parameter is the lecture's {} to its printed digits",
              bytes_per_param_formula(stage), b, row.bytes_per_param),
          off <= row.half_digit, fmt::format("{:.4f} off, more than {}", off, row.half_digit));
    }
  }
  if (n != kLectureRanks)
    fmt::print("  (run with --ranks {} to measure this lesson's row beside the lecture's)\n",
               kLectureRanks);
}

// The model state's bytes per rank written out from the sharding rule (not zero::units, the
// layout under test): a unit of Psi_u parameters (the whole vector for dp and ZeRO-1, each
// layer's W and b for ZeRO-2 and -3) leaves each rank ceil(Psi_u / N) of them, N times that in
// all once padded; bf16 weights and gradients take 2 bytes each, whole or sharded as the stage
// says, the master weights and Adam's m and v 12 bytes of each sharded one.
StateBytes expected_state(Stage stage, const MlpShape& s, int n) {
  std::vector<std::uint64_t> counts;
  if (stage == Stage::dp || stage == Stage::zero1)
    counts.push_back(s.params());
  else
    for (std::size_t l = 0; l < s.layers(); ++l)
      counts.push_back(s.dims[l] * s.dims[l + 1] + s.dims[l + 1]);
  const auto N = std::uint64_t(n);
  std::uint64_t whole = 0, share = 0;
  for (const std::uint64_t c : counts) {
    const std::uint64_t ceil = (c + N - 1) / N;
    whole += stage == Stage::dp ? c : N * ceil;
    share += stage == Stage::dp ? c : ceil;
  }
  const bool grads_sharded = stage == Stage::zero2 || stage == Stage::zero3;
  return {2 * (stage == Stage::zero3 ? share : whole), 2 * (grads_sharded ? share : whole),
          12 * share};
}

// On every rank, after training: the model state on the ledger against the formula.
void check_state(Comm& comm, const Config& config, const Run& run) {
  const int n = comm.size();
  const MlpShape& s = config.shape;
  // Each unit's padding: to a multiple of N, by less than N.
  std::string padding;
  for (const Unit& u : units(config.stage, s, n))
    if (config.stage != Stage::dp && (u.padded < u.count || u.padded - u.count >= std::size_t(n) ||
                                      u.shard * std::size_t(n) != u.padded))
      padding = fmt::format("{} parameters padded to {}, shards of {}", u.count, u.padded, u.shard);
  comm.check("each unit is padded to N equal shards by fewer than N elements", padding.empty(),
             padding);
  // The model state on the ledger equals the formula, category by category.
  const StateBytes want = expected_state(config.stage, s, n);
  comm.check(
      fmt::format(
          "model state after the last step = {} bytes per parameter (with padding), by category",
          bytes_per_param_formula(config.stage)),
      run.state.params == want.params && run.state.grads == want.grads &&
          run.state.optimizer == want.optimizer,
      fmt::format("params {} grads {} optimizer {}, formula {} {} {}", run.state.params,
                  run.state.grads, run.state.optimizer, want.params, want.grads, want.optimizer));
  if (config.stage == Stage::zero3) {
    std::uint64_t widest = 0;
    for (const Unit& u : units(config.stage, s, n))
      widest = std::max<std::uint64_t>(widest, u.padded);
    const std::uint64_t peak_want = want.params + widest * sizeof(BFloat16);
    comm.check("peak of the parameters = my shards + one layer's gathered weights",
               run.params_peak == peak_want,
               fmt::format("{} B, formula {} B", run.params_peak, peak_want));
  }
}

// Off the trace (checking, not training): the recipe's step k restarted from the master weights
// every rank holds (`mine`, my part). Every rank sends rank 0 its part; rank 0 puts the model
// together, computes the step's summed gradient there with its bound's inputs
// (reference_gradient), and sends each rank its part of them: [sum, magnitude, float32] in my
// part's layout, then my share of the loss, then the loss.
std::vector<double> step_reference(Comm& comm, const Config& config, int k,
                                   const std::vector<float>& mine) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t len = mine.size();
  std::vector<double> out(3 * len + 2, 0.0);
  if (me != 0) {
    comm.send(View<const float>{mine.data(), len, Device::cpu}, 0, kTagWeights);
    comm.recv(View<double>{out.data(), out.size(), Device::cpu}, 0, kTagWeights);
    return out;
  }
  std::vector<std::vector<std::int64_t>> at(static_cast<std::size_t>(n));
  std::vector<double> whole(config.shape.params(), 0.0);
  std::vector<float> part;
  for (int r = 0; r < n; ++r) {
    at[std::size_t(r)] = master_positions(config.stage, config.shape, n, r);
    part.assign(at[std::size_t(r)].size(), 0.0f);
    if (r == 0)
      part = mine;
    else
      comm.recv(View<float>{part.data(), part.size(), Device::cpu}, r, kTagWeights);
    for (std::size_t i = 0; i < part.size() && i < at[std::size_t(r)].size(); ++i)
      if (at[std::size_t(r)][i] >= 0) whole[std::size_t(at[std::size_t(r)][i])] = part[i];
  }
  const StepGradient g = reference_gradient(config, n, whole, k);
  for (int r = n - 1; r >= 0; --r) {  // rank 0's last: it is `out`
    const std::vector<std::int64_t>& pos = at[std::size_t(r)];
    std::vector<double> theirs(3 * pos.size() + 2, 0.0);
    for (std::size_t i = 0; i < pos.size(); ++i)
      if (pos[i] >= 0) {
        theirs[i] = g.sum[std::size_t(pos[i])];
        theirs[pos.size() + i] = g.magnitude[std::size_t(pos[i])];
        theirs[2 * pos.size() + i] = g.float32[std::size_t(pos[i])];
      }
    theirs[3 * pos.size()] = g.shares[std::size_t(r)];
    theirs.back() = g.loss;
    if (r == 0)
      out = std::move(theirs);
    else
      comm.send(View<const double>{theirs.data(), theirs.size(), Device::cpu}, r, kTagWeights);
  }
  return out;
}

}  // namespace

StepChecks::StepChecks(Comm& comm, const Config& config)
    : comm_(comm),
      config_(config),
      positions_(master_positions(config.stage, config.shape, comm.size(), comm.rank())) {}

void StepChecks::operator()(int k, const StepState& before, const StepState& given, double loss) {
  const int n = comm_.size();
  StepState after = given;  // --inject-fault: the last step's first weight off by 1
  if (comm_.inject_fault() && k + 1 == config_.steps && !after.master.empty())
    after.master[0] += 1.0f;
  const std::vector<double> want = step_reference(comm_, config_, k, before.master);
  const std::size_t len = positions_.size();
  if (k == 0) {  // the weights before step 1 are the initial ones, from the seed alone
    first_gradient_ = before.gradient;
    const std::vector<float> initial = model::initial_params(config_.shape, config_.seed);
    for (std::size_t i = 0; i < len && i < before.master.size(); ++i)
      starts_ok_ =
          starts_ok_ &&
          before.master[i] == (positions_[i] < 0 ? 0.0f : initial[std::size_t(positions_[i])]);
  }
  for (std::size_t i = 0; i < len; ++i) {
    if (positions_[i] < 0) continue;  // padding: checked to stay 0
    if (i >= before.master.size() || i >= after.master.size() || i >= before.gradient.size()) {
      complete_ = false;
      break;
    }
    const ErrorBound::Terms dg = gradient_error(n, want[len + i], want[2 * len + i]);
    const double g = want[i], dg_sum = dg.first + dg.second;
    gradient_.add(double(before.gradient[i]) - g, dg);
    const model::StepBound w = model::adam_step_bound(before.master[i], before.m[i], before.v[i], g,
                                                      dg_sum, config_.adam, k + 1);
    update_.add(double(after.master[i]) - w.want, {w.rounding, w.gradient});
    const model::MomentBounds mv =
        model::adam_moment_bounds(before.m[i], before.v[i], g, dg_sum, config_.adam);
    moments_.add(double(after.m[i]) - mv.m.want, {mv.m.rounding, mv.m.gradient});
    moments_.add(double(after.v[i]) - mv.v.want, {mv.v.rounding, mv.v.gradient});
  }
  // Rank 0, the loss, on the same bf16 weights as float64's: only the float32 forward differs, by
  // rounding errors of about sqrt(D K) u32, some 2e-5 of the loss at the largest shape allowed
  // (D = 18 layers of K = 65536 inputs, u32 = 6e-8; they add up like a random walk);
  // kLossFloat32 = 1e-3 leaves a factor of 50 over that.
  if (comm_.rank() == 0)
    losses_.add(loss - want.back(), {kLossFloat32 * std::fabs(want.back()), 0});
  // Every rank, its own share of the loss, with the same model: a wrong count in its mean (its own
  // samples', say, where the whole batch's belongs) shows here even where the shares' errors
  // cancel in the sum.
  shares_.add(given.loss - want[3 * len], {kLossFloat32 * std::fabs(want[3 * len]), 0});
  ++steps_;
}

StepReport StepChecks::finish(const std::string& what) {
  const int n = comm_.size();
  const std::string prefix = what.empty() ? "" : what + ": ";
  comm_.check(prefix + "my master weights start at the initial weights", starts_ok_);
  // Step 1's gradient against the recipe's from the initial weights (not the gathered ones).
  const std::vector<float> initial = model::initial_params(config_.shape, config_.seed);
  const StepGradient first = reference_gradient(config_, n, {initial.begin(), initial.end()}, 0);
  ErrorBound step1;
  for (std::size_t i = 0; i < positions_.size(); ++i) {
    if (positions_[i] < 0) continue;
    const std::size_t p = std::size_t(positions_[i]);
    step1.add(i < first_gradient_.size() ? double(first_gradient_[i]) - first.sum[p] : NAN,
              gradient_error(n, first.magnitude[p], first.float32[p]));
  }
  comm_.check(prefix +
                  "step 1: my part of the summed gradient is the reference's sum of every "
                  "rank's share",
              step1.ok(), step1.detail("bf16 roundings", "float32"));
  const bool all = complete_ && steps_ == config_.steps;
  const std::string every = fmt::format("{}every step of {}", prefix, steps_);
  comm_.check(every +
                  ": my part of its summed gradient, at the weights every rank held before "
                  "it, is the reference's sum of every rank's share",
              all && gradient_.ok(), gradient_.detail("bf16 roundings", "float32"));
  comm_.check(every +
                  ": Adam's update from my master weights and moments before it equals "
                  "float64's",
              all && update_.ok(), update_.detail("rounding", "gradient error"));
  comm_.check(every + ": Adam's moments after it equal float64's from mine before it",
              all && moments_.ok(), moments_.detail("rounding", "gradient error"));
  if (comm_.rank() == 0)
    comm_.check(fmt::format("{}: its loss equals float64's at the weights before it (relative "
                            "error <= {})",
                            every, kLossFloat32),
                losses_.ok() && steps_ == config_.steps, losses_.detail("float32 forward", "-"));
  comm_.check(fmt::format("{}: my share of its loss (my samples' squared errors over the whole "
                          "batch's count) equals float64's (relative error <= {})",
                          every, kLossFloat32),
              shares_.ok() && steps_ == config_.steps, shares_.detail("float32 forward", "-"));
  return {gradient_.worst_share(), update_.worst_share(), moments_.worst_share(),
          losses_.worst_share()};
}

namespace {

// Every rank: train the stage (traced), every step checked from my own state (StepChecks), record
// its model state for the report, check it, then my master weights against plain data parallel's
// bit for bit with --deterministic.
void train_and_check(Comm& comm, const Config& config, const Step& step, Outcome& outcome) {
  const int n = comm.size(), me = comm.rank();
  const MlpShape& s = config.shape;
  StepChecks checks(comm, config);
  Run run = train(comm, config, step, nullptr,
                  [&](int k, const StepState& before, const StepState& after, double loss) {
                    checks(k, before, after, loss);
                  });
  const std::uint64_t state[3] = {run.state.params, run.state.grads, run.state.optimizer};
  for (int c = 0; c < 3; ++c) comm.recorder().value(kStateNames[c], double(state[c]));
  comm.recorder().value("state total bytes", double(run.state.total()));
  check_state(comm, config, run);

  // The same training as plain data parallel, on a ledger of its own and off the trace.
  const bool tracing = comm.recorder().enabled();
  comm.recorder().set_enabled(false);
  Config plain = config;
  plain.stage = Stage::dp;
  Ledger own;
  comm.charge_scratch_to(&own);
  const Run dp = train(comm, plain, dp_step, &own);
  comm.charge_scratch_to(nullptr);
  comm.recorder().set_enabled(tracing);
  const std::vector<std::int64_t> positions = master_positions(config.stage, s, n, me);
  bool padding_zero = true;
  double from_dp = 0;  // max |mine - plain data parallel's|, for the report
  for (std::size_t i = 0; i < positions.size() && i < run.master.size(); ++i) {
    if (positions[i] < 0) {
      padding_zero = padding_zero && run.master[i] == 0.0f;
      continue;
    }
    const double d =
        std::fabs(double(run.master[i]) - double(dp.master[std::size_t(positions[i])]));
    from_dp = std::isnan(d) ? INFINITY : std::max(from_dp, d);
  }
  comm.check("my master weights' padding stays 0", padding_zero);
  // My bf16 weights after the last step: my master weights rounded, by the reference's own
  // rounding (model::round_to_bf16, not BFloat16's).
  std::string unrounded = run.weights16.size() == run.master.size()
                              ? ""
                              : fmt::format("{} bf16 weights for {} master weights",
                                            run.weights16.size(), run.master.size());
  for (std::size_t i = 0; i < run.master.size() && unrounded.empty(); ++i)
    if (double(run.weights16[i]) != model::round_to_bf16(run.master[i]))
      unrounded = fmt::format("element {}: master {:.9g}, bf16 {:.9g}, rounded {:.9g}", i,
                              run.master[i], run.weights16[i], model::round_to_bf16(run.master[i]));
  comm.check(
      "my bf16 weights are my master weights rounded to nearest (ties to even), bit for "
      "bit",
      unrounded.empty(), unrounded);
  comm.check("activations are not sharded: my activation peak equals plain data parallel's",
             run.activations_peak == dp.activations_peak,
             fmt::format("{} B against {} B", run.activations_peak, dp.activations_peak));
  // Plain data parallel here is dp_step on the same Replica: this compares the sharding with
  // no sharding, not the recipe (the step checks above hold that to float64's).
  if (config.deterministic)
    comm.check(
        "my master weights equal plain data parallel's bit for bit (the same replica "
        "unsharded: the sharding alone)",
        from_dp == 0.0, fmt::format("max |error| {:.3g}", from_dp));
  const StepReport w = checks.finish("");
  if (me != 0) return;
  outcome.steps = w;
  outcome.from_dp = from_dp;
  outcome.dp_state = dp.state;
  outcome.dp_activations_peak = dp.activations_peak;
  outcome.dp_step_seconds = dp.step_seconds;
  outcome.run = std::move(run);
}

// otherData.zero, for the viewer's memory-compare panel (docs/trace-format.md): the stage, Psi,
// N, the steps, every rank's model state as its ledger measured it after the last step, and
// rank 0's plain data-parallel run (trained beside the stage, untraced) as the baseline.
std::string zero_metadata(const RunResult& r, const Config& config, const Outcome& outcome) {
  std::string state;
  for (const RankLog& log : r.logs) {
    double got[3] = {0, 0, 0};
    for (const ValueEvent& v : log.values)
      for (int c = 0; c < 3; ++c)
        if (v.name == kStateNames[c]) got[c] = v.value;
    state += fmt::format(R"({}{{"rank":{},"params":{},"grads":{},"optimizer":{}}})",
                         state.empty() ? "" : ",", log.rank, json_number(got[0]),
                         json_number(got[1]), json_number(got[2]));
  }
  const StateBytes& dp = outcome.dp_state;
  return fmt::format(
      R"({{"stage":{},"psi":{},"ranks":{},"steps":{},"bytes_per_param":{},"state":[{}],)"
      R"("baseline":{{"stage":"dp","rank":0,"params":{},"grads":{},"optimizer":{},"activations":{}}}}})",
      json_string(to_string(config.stage)), config.shape.params(), r.world.size, config.steps,
      json_string(bytes_per_param_formula(config.stage)), state, dp.params, dp.grads, dp.optimizer,
      outcome.dp_activations_peak);
}

}  // namespace

int run_lesson(int argc, char** argv, Stage stage, const std::string& number,
               const std::string& name, const LessonText& text, const Step& step) {
  Lesson lesson({number, name, text.title, 4, 64});
  lesson.set_text(text.concept_text, text.look_at);
  for (const auto& [break_name, what] : text.breaks) lesson.add_break(break_name, what);
  lesson.set_algorithm(
      fmt::format("{}, mixed-precision Adam (bf16 weights and gradients)", title(stage)));
  Setup setup;
  setup.config.stage = stage;
  add_options(lesson, setup);
  lesson.on_world([&](const World& w) { configure(lesson, setup, w); });

  Outcome outcome;  // rank 0's
  lesson.on_report([&](RunResult& r) {
    print_training(r, setup.config, outcome);
    const double measured = print_state(r, setup);
    check_communication(r, setup.config, outcome);
    report_simulated_time(r, setup.config, outcome);
    print_lecture_table(r, stage, measured);
    lesson.set_metadata("zero", zero_metadata(r, setup.config, outcome));
  });

  // Memory: rank 0's is the most, about 160 B per parameter: its training replica and optimizer
  // state (float32 weights and gradients, bf16 copies, Adam's moments: ~24 B), the comparison run
  // (~24 B), the step check's state before and after a step (~28 B), and the float64 twin's step:
  // the whole weights twice (16 B), its gradient (8 B), the sum, magnitudes and float32 terms it
  // returns (24 B) and each rank's part of them (24 B), and step 1's gradient twice (12 B); 176 B
  // with allocator slack.
  lesson.needs_memory([&](const World&) {
    return MemoryNeed{176.0 * double(setup.config.shape.params()), 0};
  });

  return lesson.run(argc, argv,
                    [&](Comm& comm) { train_and_check(comm, setup.config, step, outcome); });
}

}  // namespace distlab::zero
