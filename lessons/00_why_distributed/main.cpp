// Lesson 00 — why distribute: the arithmetic behind the motivation
//
// Concept: one GPU is too slow to train a large model and too small to hold it. Three formulas,
// with the lecture's figures for the default inputs (GPT-3, a V100, 1024 GPUs, an 80 GB GPU):
//   compute  C     = 6 x N params x D tokens           6 x 175e9 x 300e9 = 3.15e23 FLOP (published: 3.14e23)
//   time     T     = C / (one GPU's FLOP/s)             3.15e23 / 28e12 FLOP/s = 1.1e10 s = 357 years (lecture: 355)
//            T_P   = GPU-days / P GPUs                  10 GPU-days / 1024 GPUs = 14.06 minutes (lecture: 14)
//   memory   N_max = GPU memory / bytes per parameter   80 GB / 16 B = 5B parameters (lecture: 5B), 35x fewer than 175B
// The 16 B are mixed-precision Adam's: 2 (fp16 weights) + 2 (fp16 gradients) + 12 (fp32 weights,
// momentum, variance). Data parallelism (lessons 05-07) divides T by P; ZeRO (08-10), the pipeline
// (11) and tensor parallelism (12-13) divide the memory.
//
// Where the inputs are the lecture's, each figure must land within 1% (the 14 minutes: 5%) of
// the lecture's.
//
// Two of the formula's numbers are measured on the training code of lessons 08-10 rather than
// assumed. Every rank builds one replica of its mixed-precision Adam (zero::Replica) for a small
// MLP and runs one step on 64 samples of its own:
//   - the 6 FLOP per parameter per token: the ops layer counts every GEMM's 2 m n k FLOP
//     (ops::gemm_flops), and the forward pass must do exactly 2 per parameter per sample, the
//     backward pass 4 per weight less the first layer's input gradient, which nothing needs;
//   - the 16 bytes per parameter: read off the replica's memory ledger. With more than one rank,
//     rank 0 gathers every rank's figure (a gather, lesson 02) and checks each is 16.
// The step's time gives this machine's GEMM rate, printed, not checked. --size is ignored.
//
// Run:  ./distlab lesson 00                            the lecture's inputs
//       ./distlab lesson 00 --gpus 2048                twice the GPUs: half the minutes
//       ./distlab lesson 00 --bytes-per-param 4.2      ZeRO-1 over 64 GPUs (lesson 08): 19B parameters fit
//       ./distlab lesson 00 --gpu-tflops 989 --gpu-memory-gb 141    an H200 (dense BF16 peak, its memory)
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/collectives/gather.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"
#include "core/training/zero.hpp"

using namespace distlab;

namespace {

// What the user can change; the defaults are the lecture's inputs.
struct Inputs {
  double params = 175e9;   // GPT-3
  double tokens = 300e9;   // GPT-3's training tokens
  double flops = 0;        // --flops; 0: 6 x params x tokens
  double gpu_tflops = 28;  // one V100's sustained rate, behind the lecture's 355 years
  int gpus = 1024;
  double gpu_days = 10;         // the job the lecture spreads over 1024 GPUs
  double gpu_memory_gb = 80;    // A100 / H100; GB = 1e9 bytes, as the lecture counts
  double bytes_per_param = 16;  // mixed-precision Adam: 2 + 2 + 12
};

// The lecture's figures (the compute is GPT-3's published figure, from which the 355 years come).
constexpr double kLectureFlops = 3.14e23;
constexpr double kLectureYears = 355;
constexpr double kLectureMinutes = 14;
constexpr double kLectureMaxParams = 5e9;
constexpr double kLectureRatio = 35;                     // 175B / 5B
constexpr double kMixedPrecisionAdamBytes = 2 + 2 + 12;  // bf16 weights, gradients; f32 Adam

// The figures, in the order of the table.
struct Figures {
  double flops = 0;        // training compute, FLOP
  double years = 0;        // that compute on one GPU
  double job_minutes = 0;  // the --gpu-days job spread over --gpus GPUs
  double spread_days = 0;  // the training compute spread over --gpus GPUs
  double state_bytes = 0;  // model state: params x bytes per param
  double max_params = 0;   // the largest model whose state fits in one GPU
  double ratio = 0;        // how many GPUs' memory the model state fills
};
std::vector<double> as_vector(const Figures& f) {
  return {f.flops, f.years, f.job_minutes, f.spread_days, f.state_bytes, f.max_params, f.ratio};
}

// The formulas as the lecture writes them. Perfect scaling: P GPUs take 1/P of the time.
Figures by_formula(const Inputs& in) {
  constexpr double kSecondsPerYear = 365.0 * 24 * 3600;
  constexpr double kMinutesPerDay = 24.0 * 60;
  Figures f;
  f.flops = in.flops > 0 ? in.flops : 6 * in.params * in.tokens;
  f.years = f.flops / (in.gpu_tflops * 1e12) / kSecondsPerYear;
  f.job_minutes = in.gpu_days * kMinutesPerDay / in.gpus;
  f.spread_days = f.years * 365 / in.gpus;
  f.state_bytes = in.params * in.bytes_per_param;
  f.max_params = in.gpu_memory_gb * 1e9 / in.bytes_per_param;
  f.ratio = in.params / f.max_params;
  return f;
}

// --- how numbers are shown ------------------------------------------------------------------

// `significant` digits without an exponent: 356.7, 14.06, 5.00.
std::string digits(double x, int significant = 3) {
  const int before = x >= 1 ? int(std::floor(std::log10(x))) + 1 : 1;
  return fmt::format("{:.{}f}", x, std::max(0, significant - before));
}
std::string sci(double x) {  // 3.15e23
  int e = int(std::floor(std::log10(x)));
  double m = x / std::pow(10.0, e);
  if (std::stod(fmt::format("{:.2f}", m)) >= 10) m /= 10, ++e;
  return fmt::format("{:.2f}e{}", m, e);
}
std::string count(double n) {  // 175B, 5.00B, 1.20T
  if (n >= 1e12) return digits(n / 1e12) + "T";
  if (n >= 1e9) return digits(n / 1e9) + "B";
  if (n >= 1e6) return digits(n / 1e6) + "M";
  return digits(n);
}
std::string bytes(double b) {  // decimal units, as GPU memory is sold and the lecture counts
  if (b >= 1e12) return digits(b / 1e12) + " TB";
  if (b >= 1e9) return digits(b / 1e9) + " GB";
  if (b >= 1e6) return digits(b / 1e6) + " MB";
  return digits(b) + " B";
}
std::string duration(double seconds) {  // in the largest unit that keeps the number at least 1
  constexpr double kDay = 86400, kYear = 365 * kDay;
  if (seconds >= kYear) return digits(seconds / kYear, 4) + " years";
  if (seconds >= kDay) return digits(seconds / kDay, 4) + " days";
  if (seconds >= 3600) return digits(seconds / 3600, 4) + " hours";
  if (seconds >= 60) return digits(seconds / 60, 4) + " minutes";
  return digits(seconds, 4) + " seconds";
}
std::string plain(double x) {
  return fmt::format("{:g}", x);
}

// --- the table ------------------------------------------------------------------------------

// The lecture's figure for a row, where the row's inputs are the lecture's.
struct Lecture {
  double value, tolerance;  // must be within value * (1 +- tolerance)
  std::string shown;
};
std::optional<Lecture> lecture_if(bool inputs_are_the_lecture_s, Lecture lecture) {
  if (!inputs_are_the_lecture_s) return std::nullopt;
  return lecture;
}

// One figure: the table's text, its value and the lecture's.
struct Row {
  std::string problem, question, inputs, shown, unit;  // shown: the value in its units
  double formula = 0;
  std::optional<Lecture> lecture;
};

bool near(double x, double want, double relative) {
  return std::abs(x - want) <= relative * std::abs(want);
}

std::vector<Row> rows(const Inputs& in, bool flops_given, const Figures& a) {
  const Inputs lecture;  // the defaults
  const bool memory_is_lecture_s =
      in.gpu_memory_gb == lecture.gpu_memory_gb && in.bytes_per_param == lecture.bytes_per_param;
  const std::string gpus = fmt::format("{} GPUs", in.gpus), flop = sci(a.flops) + " FLOP";
  std::vector<Row> r;
  const std::string compute_inputs =
      flops_given ? "--flops"
                  : fmt::format("6 x {} params x {} tokens", count(in.params), count(in.tokens));
  r.push_back({.problem = "time",
               .question = "training compute",
               .inputs = compute_inputs,
               .shown = flop,
               .unit = "FLOP",
               .formula = a.flops,
               .lecture = lecture_if(
                   !flops_given && in.params == lecture.params && in.tokens == lecture.tokens,
                   {kLectureFlops, 0.01, sci(kLectureFlops)})});
  r.push_back({.problem = "time",
               .question = "training on one GPU",
               .inputs = fmt::format("{} / {} TFLOP/s", flop, plain(in.gpu_tflops)),
               .shown = duration(a.years * 365 * 86400),
               .unit = "years",
               .formula = a.years,
               .lecture = lecture_if(
                   near(a.flops, kLectureFlops, 0.01) && in.gpu_tflops == lecture.gpu_tflops,
                   {kLectureYears, 0.01, "355 years"})});
  r.push_back({.problem = "time",
               .question = fmt::format("a {}-GPU-day job on {}", plain(in.gpu_days), gpus),
               .inputs = fmt::format("{} GPU-days / {}", plain(in.gpu_days), gpus),
               .shown = duration(a.job_minutes * 60),
               .unit = "minutes",
               .formula = a.job_minutes,
               .lecture = lecture_if(in.gpu_days == lecture.gpu_days && in.gpus == lecture.gpus,
                                     {kLectureMinutes, 0.05, "14 minutes"})});
  r.push_back({.problem = "time",
               .question = fmt::format("training on {}", gpus),
               .inputs = fmt::format("{} / ({} x {} TFLOP/s)", flop, in.gpus, plain(in.gpu_tflops)),
               .shown = duration(a.spread_days * 86400),
               .unit = "days",
               .formula = a.spread_days,
               .lecture = std::nullopt});
  r.push_back(
      {.problem = "memory",
       .question = "model state",
       .inputs = fmt::format("{} params x {} B", count(in.params), plain(in.bytes_per_param)),
       .shown = bytes(a.state_bytes),
       .unit = "bytes",
       .formula = a.state_bytes,
       .lecture = std::nullopt});
  r.push_back({.problem = "memory",
               .question = "largest model on one GPU",
               .inputs = fmt::format("{} GB / {} B per param", plain(in.gpu_memory_gb),
                                     plain(in.bytes_per_param)),
               .shown = count(a.max_params) + " params",
               .unit = "params",
               .formula = a.max_params,
               .lecture = lecture_if(memory_is_lecture_s, {kLectureMaxParams, 0.01, "5B"})});
  r.push_back({.problem = "memory",
               .question = "model state / one GPU's memory",
               .inputs = fmt::format("{} / {} params", count(in.params), count(a.max_params)),
               .shown = digits(a.ratio) + "x",
               .unit = "x",
               .formula = a.ratio,
               .lecture = lecture_if(memory_is_lecture_s && in.params == lecture.params,
                                     {kLectureRatio, 0.01, "35x"})});
  return r;
}

// Columns padded to their widest cell.
void print_table(const std::vector<std::vector<std::string>>& cells) {
  std::vector<std::size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : cells) {
    std::string line = " ";
    for (std::size_t c = 0; c < row.size(); ++c) line += fmt::format(" {:<{}} ", row[c], width[c]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print("{}\n", line);
  }
}

// The figures under one heading per problem (time, memory); what fixes each follows the table.
void print_rows(const std::vector<Row>& table) {
  std::vector<std::vector<std::string>> cells{{"question", "inputs", "figure", "lecture"}};
  std::vector<std::string> problem{""};
  for (const auto& r : table) {
    cells.push_back({r.question, r.inputs, r.shown, r.lecture ? r.lecture->shown : "-"});
    problem.push_back(r.problem);
  }
  std::vector<std::size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (i > 0 && problem[i] != problem[i - 1]) fmt::print("  {}:\n", problem[i]);
    std::string line = "   ";
    for (std::size_t c = 0; c < cells[i].size(); ++c)
      line += fmt::format(" {:<{}} ", cells[i][c], width[c]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print("{}\n", line);
  }
}

void print_checks(const std::vector<Row>& table) {
  std::vector<std::vector<std::string>> cells{
      {"figure", "unit", "formula", "lecture", "off by", "allowed"}};
  for (const auto& r : table) {
    const auto& l = r.lecture;
    cells.push_back({r.question, r.unit, fmt::format("{:.6g}", r.formula),
                     l ? fmt::format("{:g}", l->value) : "-",
                     l ? fmt::format("{:+.2f}%", 100 * (r.formula / l->value - 1)) : "-",
                     l ? fmt::format("{:g}%", 100 * l->tolerance) : "-"});
  }
  print_table(cells);
}

// --- the measurement ------------------------------------------------------------------------

// The model measured: small enough for any machine, wide enough that GEMMs are its work.
constexpr std::size_t kSamplesPerRank = 64;
model::MlpShape measured_shape() {
  return model::make_shape({16, 512, 512, 16});
}

// The FLOP one step of the training code must do on `samples` samples, from the layer sizes
// alone. Forward, 2 per parameter: x W is a multiply and an add per weight, and the bias is added
// as the product ones b^T. Backward, 4 per weight: dW = x^T dy and dx = dy W^T, except layer 0's
// dx, which no one needs; a bias's gradient is a column sum, not a GEMM.
struct FlopCount {
  std::uint64_t forward = 0, backward = 0;
};
FlopCount expected_flops(const model::MlpShape& s, std::uint64_t samples) {
  std::uint64_t weights = 0;
  for (std::size_t l = 0; l < s.layers(); ++l) weights += std::uint64_t(s.dims[l]) * s.dims[l + 1];
  return {2 * samples * s.params(),
          4 * samples * weights - 2 * samples * std::uint64_t(s.dims[0]) * s.dims[1]};
}

// What one rank measured on its replica.
struct Measured {
  std::uint64_t forward_flops = 0, backward_flops = 0;  // ops::gemm_flops, around each pass
  double seconds = 0;                                   // the forward and backward, wall clock
  double bytes_per_param = 0;  // model state on the replica's ledger / parameters
};

// One replica of mixed-precision Adam on a ledger of its own; one step's forward (layer by
// layer), loss and backward (from the top, each gradient rounded into the bf16 gradients), twice:
// the first warms the caches (and a GPU's libraries), the second is counted and timed.
Measured measure_a_step(Comm& comm) {
  auto phase = comm.phase("measure a training step");
  zero::Config config;
  config.shape = measured_shape();
  config.batch = kSamplesPerRank * std::size_t(comm.size());
  Ledger own;
  zero::Replica replica(comm, config, own);
  Measured m;
  for (int pass = 0; pass < 2; ++pass) {
    replica.load_batch(0);
    const auto start = std::chrono::steady_clock::now();
    std::uint64_t before = ops::gemm_flops();
    for (std::size_t l = 0; l < replica.layers(); ++l) replica.forward(l, replica.weights(l));
    m.forward_flops = ops::gemm_flops() - before;
    replica.loss();
    before = ops::gemm_flops();
    for (std::size_t l = replica.layers(); l-- > 0;)
      replica.keep_gradient(l, replica.backward(l, replica.weights(l)));
    m.backward_flops = ops::gemm_flops() - before;
    (void)to_host(replica.loss_value());  // on a GPU: waits for the stream's work
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double state = double(own.current(Category::params) + own.current(Category::grads) +
                              own.current(Category::optimizer));
  m.bytes_per_param = state / double(config.shape.params());
  return m;
}

// Bad input ends the run before any rank starts, with one sentence.
void require_positive(double value, const std::string& option, const std::string& example) {
  if (!(value > 0) || !std::isfinite(value))
    throw UsageError(fmt::format("{} must be a positive finite number, not {}; for example {} {}",
                                 option, value, option, example));
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson(
      {"00", "why_distributed", "why distribute: the time and memory one GPU would need", 1, 1});
  lesson.set_text(
      "One GPU is too slow and too small. GPT-3 takes 6 x 175e9 params x 300e9 tokens = 3.15e23 "
      "FLOP: 357 years on one V100 at 28 TFLOP/s. Spread over 1024 GPUs, a 10-GPU-day job takes "
      "14 minutes. Mixed-precision Adam keeps 16 bytes per parameter, so one 80 GB GPU holds at "
      "most 5B parameters, 35x fewer than GPT-3's 175B.",
      "Almost nothing moves: each rank computes the figures and runs one training step of the "
      "training code's mixed-precision Adam, counting its GEMM FLOP and its bytes per parameter; "
      "with more than one rank, a gather of one float64 per rank to rank 0 checks every rank's "
      "bytes. The figures are in the terminal and in otherData.figures.");

  Inputs in;
  auto& app = lesson.app();
  const std::string group =
      "Lesson 00 inputs (defaults: the lecture's; --size is ignored, no data moves)";
  app.add_option("--params", in.params, "model parameters (GPT-3: 175e9)")
      ->default_str("175e9")
      ->group(group);
  app.add_option("--tokens", in.tokens,
                 "training tokens; compute = 6 x params x tokens (GPT-3: 300e9)")
      ->default_str("300e9")
      ->group(group);
  auto* flops_option =
      app.add_option("--flops", in.flops,
                     "training compute in FLOP instead of 6 x params x tokens (GPT-3: 3.14e23)")
          ->default_str("6*params*tokens")
          ->group(group);
  app.add_option("--gpu-tflops", in.gpu_tflops,
                 "one GPU's sustained TFLOP/s (a V100, as the lecture: 28)")
      ->default_str("28")
      ->group(group);
  app.add_option("--gpus", in.gpus, "GPUs to spread the work over (the lecture: 1024)")
      ->default_str("1024")
      ->group(group);
  app.add_option("--gpu-days", in.gpu_days,
                 "a job's size in GPU-days, spread over --gpus (the lecture: 10)")
      ->default_str("10")
      ->group(group);
  app.add_option("--gpu-memory-gb", in.gpu_memory_gb,
                 "one GPU's memory in GB of 1e9 bytes (A100/H100: 80)")
      ->default_str("80")
      ->group(group);
  app.add_option("--bytes-per-param", in.bytes_per_param,
                 "model-state bytes per parameter (mixed-precision Adam: 2 + 2 + 12 = 16; ZeRO, "
                 "lessons 08-10, "
                 "shrinks it)")
      ->default_str("16")
      ->group(group);
  lesson.set_algorithm("arithmetic (no communication)");

  // Memory per rank: the measured replica's 16 B per parameter, its f32 workspaces (a layer's
  // weights and gradient, 8 B per parameter at most) and its activations, their gradients and the
  // inputs (a few floats per unit per sample); 32 B per parameter and 32 B per unit per sample
  // leave room for the allocator.
  lesson.needs_memory([&](const World&) {
    std::size_t units = 0;
    for (std::size_t d : measured_shape().dims) units += d;
    return MemoryNeed{
        32.0 * double(measured_shape().params()) + 32.0 * double(kSamplesPerRank) * double(units),
        0, "a machine with more memory"};
  });

  bool flops_given = false;
  lesson.on_world([&](const World&) {
    flops_given = flops_option->count() > 0;
    require_positive(in.params, "--params", "175e9");
    require_positive(in.tokens, "--tokens", "300e9");
    if (flops_given) require_positive(in.flops, "--flops", "3.14e23");
    require_positive(in.gpu_tflops, "--gpu-tflops", "28");
    if (in.gpus < 1)
      throw UsageError(
          fmt::format("--gpus must be at least 1, not {}; for example --gpus 1024", in.gpus));
    require_positive(in.gpu_days, "--gpu-days", "10");
    require_positive(in.gpu_memory_gb, "--gpu-memory-gb", "80");
    require_positive(in.bytes_per_param, "--bytes-per-param", "16");
    const Figures f = by_formula(in);
    for (double x : as_vector(f))
      if (!std::isfinite(x) || !(x > 0))
        throw UsageError(
            "these inputs give a figure outside the range of a double (1e-308 .. 1e308); use "
            "milder ones");
    lesson.set_metadata(
        "figures",
        fmt::format(
            R"({{"flops":{:.6g},"years_on_one_gpu":{:.6g},"job_minutes":{:.6g},)"
            R"("training_days_on_gpus":{:.6g},"state_bytes":{:.6g},"max_params_one_gpu":{:.6g},)"
            R"("memory_ratio":{:.6g}}})",
            f.flops, f.years, f.job_minutes, f.spread_days, f.state_bytes, f.max_params, f.ratio));
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    const int n = comm.size(), me = comm.rank();

    // STEP 1: every rank computes every figure on its own.
    Figures a;
    {
      auto phase = comm.phase("compute figures");
      a = by_formula(in);
    }
    // A test's --inject-fault: the last rank gets one figure wrong, and the checks must say so.
    if (comm.inject_fault()) a.years *= 1.1;
    const std::vector<Row> table = rows(in, flops_given, a);

    // STEP 2: where a figure's inputs are the lecture's, the figure is the lecture's.
    for (const auto& r : table)
      if (const auto& l = r.lecture)
        comm.check(
            fmt::format("{}: within {:g}% of the lecture's {:g}", r.question, 100 * l->tolerance,
                        l->value),
            near(r.formula, l->value, l->tolerance),
            fmt::format("{:.6g} is {:+.2f}% off", r.formula, 100 * (r.formula / l->value - 1)));

    // STEP 3: the 6 FLOP and the 16 bytes per parameter, measured rather than assumed. Every rank
    // builds one replica of the mixed-precision Adam that lessons 08-10 shard (core/training/
    // zero.hpp, plain data parallel), on a ledger of its own, and runs one step's forward and
    // backward on its 64 samples while the ops layer counts every GEMM's FLOP.
    Measured m = measure_a_step(comm);
    if (comm.inject_fault()) m.bytes_per_param += 1;
    const FlopCount want = expected_flops(measured_shape(), kSamplesPerRank);
    const double params = double(measured_shape().params());
    comm.check("one step's forward pass does 2 FLOP per parameter per sample (GEMMs counted)",
               m.forward_flops == want.forward,
               fmt::format("counted {}, 2 x {} params x {} samples = {}", m.forward_flops, params,
                           kSamplesPerRank, want.forward));
    comm.check("its backward pass does 4 FLOP per weight per sample, less layer 0's input gradient",
               m.backward_flops == want.backward,
               fmt::format("counted {}, expected {}", m.backward_flops, want.backward));

    // STEP 4: with more than one rank, rank 0 gathers every rank's bytes per parameter (a gather,
    // lesson 02) and checks each is 16.
    std::vector<double> every{m.bytes_per_param};
    if (n > 1) {
      comm.declare_buffer("bytes per parameter", std::uint64_t(n), n);
      Buffer<double> mine = comm.alloc_from(std::vector<double>{m.bytes_per_param}, Category::data);
      Buffer<double> all = comm.alloc<double>(me == 0 ? std::size_t(n) : 0, Category::data);
      {
        auto phase = comm.phase("gather the measurements");
        coll::gather(comm, View<const double>(mine.view()), all.view(), 0, "bytes per parameter");
      }
      if (me == 0) every = to_host(View<const double>(all.view()));
    }
    if (me == 0) {
      std::string off;
      for (std::size_t k = 0; k < every.size() && off.empty(); ++k)
        if (every[k] != kMixedPrecisionAdamBytes)
          off = fmt::format("r{} holds {:.6g} bytes per parameter", k, every[k]);
      comm.check(
          "every rank's mixed-precision Adam holds 2 + 2 + 12 = 16 bytes per parameter "
          "(measured on its ledger)",
          off.empty(), off);
    }

    // STEP 5: rank 0 prints the table, what fixes each problem, and the checks.
    if (me != 0) return;
    fmt::print("\nwhy distribute: what one GPU would need, and what {} GPUs buy\n\n", in.gpus);
    print_rows(table);
    fmt::print(
        "\nfixed by:\n"
        "  time    data parallelism: each GPU trains a replica on its share of the batch and the\n"
        "          gradients are summed: lesson 05 (parameter server), 06-07 (all-reduce: ring,\n"
        "          recursive halving)\n"
        "  memory  shard the 16 B per parameter over N GPUs: lessons 08-10 (ZeRO-1/2/3: 4 + 12/N,\n"
        "          2 + 14/N, 16/N); split the model itself: lesson 11 (pipeline, by layers),\n"
        "          lessons 12-13 (tensor parallelism)\n");
    fmt::print("\nthe figures against the lecture's, where the inputs are the lecture's:\n");
    print_checks(table);
    const double per_sample = double(kSamplesPerRank) * params;
    const double rate = double(m.forward_flops + m.backward_flops) / m.seconds;
    fmt::print(
        "\nmeasured on one training step of the training code (core/training/zero.hpp):\n"
        "  model     {}, {} samples per rank\n"
        "  FLOP      forward {:.3g} + backward {:.3g} = {:.3g} per parameter per sample, counted; "
        "the\n"
        "            rule's 6 also counts the biases' gradients (sums, not GEMMs) and layer 0's\n"
        "            input gradient (nothing needs it)\n"
        "  memory    {:g} bytes per parameter of model state (2 + 2 + 12), the 16 the memory rows\n"
        "            assume by default\n"
        "  this CPU  {:.3g} GFLOP/s in those GEMMs (rank 0; measured, not checked): at that rate\n"
        "            the training compute above, {}, would take {}\n",
        measured_shape().describe(), kSamplesPerRank, double(m.forward_flops) / per_sample,
        double(m.backward_flops) / per_sample,
        double(m.forward_flops + m.backward_flops) / per_sample, m.bytes_per_param, rate / 1e9,
        sci(a.flops) + " FLOP", duration(a.flops / rate));
    fmt::print("\n");
  });
}
