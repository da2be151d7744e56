// Lesson 16 — overlapping communication with computation: gradient buckets and ZeRO-3 prefetch
//
// Concept: data parallel's all-reduce does not have to wait for the whole backward pass. The
// backward computes the layers from the top down, so the top layers' gradients are final while
// the lower ones still compute. PyTorch's DDP groups the gradients into buckets of about
// --bucket-bytes (25 MB there) in that order and hands each finished bucket to a nonblocking
// all-reduce; the backward goes on meanwhile, and only the last bucket's all-reduce is left to
// wait for:
//   backward, layer by layer from the top: compute; when the gradients since the last bucket
//   reach --bucket-bytes (or at the bottom layer), start that bucket's all-reduce
//   wait for every bucket; Adam; round to bf16
// --bucket-bytes 0 is one all-reduce after the backward: nothing overlaps. Small buckets start
// early but pay a message's start-up (alpha) once per bucket and step; huge buckets start late.
// ZeRO-3 (lesson 10) gathers each layer's weights just before it computes; with prefetch it
// starts the next layer's gather before the current layer computes, which hides the gather at
// the price of one more layer's weights in memory.
//
// Compute here is simulated: each layer's forward takes --work-us (backward twice that) on top
// of the model's own tiny arithmetic, slept in slices of at most 20 us between which the rank
// moves its nonblocking collectives on (comm.progress(); core/comm/async.hpp): as a GPU computes
// while the host thread that drives communication goes on. Weights are bf16 with Adam's f32
// master copy (lessons 08-10); gradients are summed in rank order, so every configuration ends
// with the same weights bit for bit, checked against plain data parallel and a float64 reference.
//
// Run:  ./distlab lesson 16                          4 ranks, a 16 -> 128 x 6 -> 8 MLP, 3 steps
//       ./distlab lesson 16 --bucket-bytes 64K       one bucket size against no buckets
//       ./distlab lesson 16 --sweep 0,4K,64K,1M      the trade-off over bucket sizes
//       ./distlab lesson 16 --work-us 0              no compute to hide anything under
//       ./distlab lesson 16 --mpi 2                  one process per rank
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/breaks.hpp"
#include "core/base/clock.hpp"
#include "core/base/intervals.hpp"
#include "core/base/units.hpp"
#include "core/cost/cost_model.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/trace_counts.hpp"
#include "core/training/zero.hpp"
#include "lessons/common/mlp_options.hpp"
#include "lessons/common/zero_lesson.hpp"

using namespace distlab;
using namespace distlab::zero;
using model::MlpShape;

namespace {

// One configuration the lesson trains.
struct Variant {
  std::string name;          // "buckets of 64 KiB", "ZeRO-3 with prefetch"
  std::uint64_t bucket = 0;  // data parallel's bucket size in bytes (0: one all-reduce after)
  bool zero3 = false, prefetch = false;
};

// What rank 0 keeps of a variant's run.
struct Measured {
  std::vector<std::pair<int, int>> ops;  // step ids of each nonblocking operation (or the sync one)
  std::vector<double> step_seconds;      // rank 0's
  std::uint64_t params_peak = 0, shards = 0;  // ZeRO-3: the ledger's peak of the weights, my shards
};

// --- simulated compute ---------------------------------------------------------------------------

// `us` microseconds of computation: slept in slices of at most 20 us, the rank's started
// operations moved on between them.
void compute(Comm& comm, double us) {
  const double until = now_us() + us;
  for (double now = now_us(); now < until; now = now_us()) {
    comm.progress();
    const double slice = std::min(20.0, until - now);
    std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(slice));
  }
  comm.progress();
}

// Starts `op` and records its step ids for the report (rank 0).
AsyncHandle started(Comm& comm, Measured* m, const std::function<AsyncHandle()>& op) {
  const int first = comm.next_steps(0);
  AsyncHandle h = op();
  if (m) m->ops.push_back({first, comm.next_steps(0) - 1});
  return h;
}

// The layers' forward, each a phase "forward Ll" of --work-us.
void forward(Replica& rep, int k, double work_us) {
  Comm& comm = rep.comm();
  rep.load_batch(k);
  for (std::size_t l = 0; l < rep.layers(); ++l) {
    auto phase = comm.phase(fmt::format("forward L{}", l), {.op = "forward"});
    compute(comm, work_us);
    rep.forward(l, rep.weights(l));
  }
  rep.loss();
}

// STEP 2 (data parallel with gradient buckets), one step on this rank.
void bucketed_step(Replica& rep, int k, std::uint64_t bucket_bytes, double work_us, Measured* m) {
  Comm& comm = rep.comm();
  const MlpShape& s = rep.config().shape;
  forward(rep, k, work_us);
  View<BFloat16> grads = rep.grads(0);  // the flat vector [W0 b0 W1 b1 ...], bf16
  std::vector<AsyncHandle> buckets;
  std::size_t end = s.params();  // the bucket being filled is [weight_offset(l), end)
  for (std::size_t l = rep.layers(); l-- > 0;) {
    {
      auto phase = comm.phase(fmt::format("backward L{}", l), {.op = "backward"});
      compute(comm, 2 * work_us);
      rep.keep_gradient(l, rep.backward(l, rep.weights(l)));
    }
    // The gradients of layers l .. (the last bucket's) are final: a bucket once they are
    // --bucket-bytes, or at the bottom layer.
    // (--break bucket-misses-a-layer: each bucket starts one layer too high, so the bottom
    // layer's gradient is never all-reduced.)
    const std::size_t begin = broken("bucket-misses-a-layer") && l + 1 < s.layers()
                                  ? s.weight_offset(l + 1)
                                  : s.weight_offset(l);
    if (bucket_bytes > 0 && ((end - begin) * sizeof(BFloat16) >= bucket_bytes || l == 0)) {
      const std::string name = fmt::format("bucket {}", buckets.size());
      buckets.push_back(started(
          comm, m, [&] { return rep.all_reduce_async(grads.sub(begin, end - begin), name); }));
      end = begin;
    }
  }
  if (bucket_bytes == 0) {  // no buckets: one all-reduce of every gradient, after the backward
    auto phase = comm.phase("all-reduce gradients");
    started(comm, m, [&] { return rep.all_reduce_async(grads, "grads"); }).wait();
  }
  {
    auto phase = comm.phase("wait for the buckets");
    for (AsyncHandle& b : buckets) b.wait();
  }
  rep.adam(View<const BFloat16>(grads));
  ops::cast(rep.params(0), rep.master(0));
}

// STEP 3 (ZeRO-3, lesson 10's step, with or without prefetch), one step on this rank. With
// prefetch the gather of the layer after this one starts before this one computes.
void zero3_step(Replica& rep, int k, bool prefetch, double work_us, Measured* m) {
  Comm& comm = rep.comm();
  const std::size_t L = rep.layers();
  // Layer l's gather, started now: waited for at once (no prefetch) or one layer later.
  const auto fetch = [&](std::size_t l) {
    Replica::Fetch f;
    f.done = started(comm, m, [&] {
      Replica::Fetch g = rep.gather_async(l);
      f.layer = std::move(g.layer);
      return std::move(g.done);
    });
    return f;
  };
  rep.load_batch(k);
  Replica::Fetch next;
  if (prefetch) next = fetch(0);
  for (std::size_t l = 0; l < L; ++l) {
    if (!prefetch) next = fetch(l);  // just before it computes
    Replica::Fetch now = std::move(next);
    if (prefetch && l + 1 < L) next = fetch(l + 1);  // before this layer computes
    now.done.wait();
    auto phase = comm.phase(fmt::format("forward L{}", l), {.op = "forward"});
    compute(comm, work_us);
    rep.forward(l, rep.widen(l, View<const BFloat16>(now.layer.view())));
  }  // each layer's weights are freed once it has computed
  rep.loss();
  if (prefetch) next = fetch(L - 1);
  for (std::size_t l = L; l-- > 0;) {
    if (!prefetch) next = fetch(l);
    Replica::Fetch now = std::move(next);
    if (prefetch && l > 0) next = fetch(l - 1);
    now.done.wait();
    View<const float> g;
    {
      auto phase = comm.phase(fmt::format("backward L{}", l), {.op = "backward"});
      compute(comm, 2 * work_us);
      g = rep.backward(l, rep.widen(l, View<const BFloat16>(now.layer.view())));
    }
    now = {};  // the layer's weights go before its gradient is reduce-scattered (as lesson 10)
    Buffer<BFloat16> whole = rep.reduce_scatter_gradient(l, g);
  }
  rep.adam(rep.all_grads());
  ops::cast(rep.all_params(), rep.all_master());
}

// --- overlap, off the trace (unions of spans: core/base/intervals.hpp)
// ----------------------------

// One rank's communication and how much of it the computation hid (microseconds).
struct Overlap {
  double comm_us = 0, hidden_us = 0;
  double share() const { return comm_us > 0 ? hidden_us / comm_us : 0; }
};

// On `log`'s rank: the time its operations' messages were in flight (each from posted to done;
// the union over the messages of `ops`), against the layers' forward and backward phases. An
// operation that waits for the rank to move it on (progress) has no message in flight
// meanwhile, so it does not count as hidden: only data on the move does.
Overlap overlap_of(const RankLog& log, const std::vector<std::pair<int, int>>& ops) {
  Intervals comm, work;
  for (const auto& e : log.spans) {
    if (e.kind == SpanEvent::Kind::plain && e.lane == Lane::compute &&
        (e.name.rfind("forward L", 0) == 0 || e.name.rfind("backward L", 0) == 0))
      work.push_back({e.t0, e.t1});
    if (!is_message(e.kind)) continue;
    for (const auto& [first, last] : ops)
      if (e.meta.step >= first && e.meta.step <= last) {
        comm.push_back({e.t0, e.t1});
        break;
      }
  }
  const Intervals c = merged(comm), w = merged(work);
  return {length(c), length(intersection(c, w))};
}

// On `log`'s rank, in the last step of a run of `per_step` operations a step: did a layer's
// backward begin after the step's first operation posted its first message and before its last
// operation did? With buckets it must (STEP 2 posts a bucket, then computes the layers below);
// with the one all-reduce after the backward it cannot. Program order, read off the trace: no
// clock's noise can change it.
bool posted_under_backward(const RankLog& log, const std::vector<std::pair<int, int>>& ops,
                           std::size_t per_step) {
  if (per_step < 2 || ops.size() < per_step) return false;
  const auto first_message = [&](std::pair<int, int> op) {
    double t = std::numeric_limits<double>::infinity();
    for (const auto& e : log.spans)
      if (is_message(e.kind) && e.meta.step >= op.first && e.meta.step <= op.second)
        t = std::min(t, e.t0);
    return t;
  };
  const double first = first_message(ops[ops.size() - per_step]), last = first_message(ops.back());
  for (const auto& e : log.spans)
    if (e.kind == SpanEvent::Kind::plain && e.lane == Lane::compute &&
        e.name.rfind("backward L", 0) == 0 && e.t0 >= first && e.t0 <= last)
      return true;
  return false;
}

// The buckets a step starts: the layers from the top, grouped until they reach `bytes`.
int bucket_count(const MlpShape& s, std::uint64_t bytes) {
  if (bytes == 0) return 1;  // the one all-reduce after the backward
  int count = 0;
  std::size_t end = s.params();
  for (std::size_t l = s.layers(); l-- > 0;)
    if ((end - s.weight_offset(l)) * sizeof(BFloat16) >= bytes || l == 0)
      ++count, end = s.weight_offset(l);
  return count;
}

std::vector<std::uint64_t> parse_sweep(const std::string& text) {
  std::vector<std::uint64_t> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = text.find(',', at);
    const std::string item =
        text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty()) throw UsageError("--sweep: an empty bucket size in '" + text + "'");
    out.push_back(parse_size(item));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"16", "overlap_bucketing",
                 "overlap communication with computation: gradient buckets, ZeRO-3 prefetch", 4,
                 128});
  lesson.add_break("bucket-misses-a-layer",
                   "each bucket's range starts one layer too high, so the bottom layer's "
                   "gradient is never all-reduced (main.cpp, STEP 2)");
  lesson.set_text(
      "The backward pass finishes the top layers' gradients first: data parallel hands each "
      "finished bucket of gradients to a nonblocking all-reduce and goes on computing, so only "
      "the last bucket's all-reduce is left to wait for. Small buckets pay a message's start-up "
      "many times, huge ones start late. ZeRO-3 with prefetch gathers the next layer's weights "
      "while this one computes, for one more layer of memory.",
      "Timeline: the send and recv lanes busy under the compute lane's backward phases (buckets) "
      "against all of them after the backward (no buckets); messages coloured by the operation "
      "(async k) that carries them.");
  Config config;
  config.stage = Stage::dp;
  config.deterministic = true;  // sums in rank order: every configuration's weights are the same
  config.steps = 3;
  config.batch = 64;
  MlpOptions shape;
  shape.layers = 6;
  std::string bucket_text = "64K", sweep_text = "0,4K,16K,64K,256K";
  double work_us = 500;
  bool no_zero3 = false;
  auto& app = lesson.app();
  app.add_option("--bucket-bytes", bucket_text,
                 "gradient bytes per bucket (bf16), K M G suffixes; 0: one all-reduce after the "
                 "backward")
      ->capture_default_str();
  app.add_option("--sweep", sweep_text,
                 "comma list of bucket sizes to measure (--bucket-bytes and 0 are added)")
      ->capture_default_str();
  app.add_option("--work-us", work_us,
                 "simulated compute per layer's forward in microseconds (backward: twice)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--steps", config.steps, "training steps per configuration")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--batch", config.batch, "samples per step, over all ranks")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  add_mlp_options(app, shape);
  app.add_flag("--no-zero3", no_zero3, "leave out the ZeRO-3 prefetch part");
  lesson.describe_size("hidden units per layer");
  const auto& opt = lesson.options();

  std::vector<Variant> variants;
  std::uint64_t bucket_bytes = 0;
  lesson.on_world([&](const World& w) {
    if (opt.size > 4096)
      throw UsageError(
          fmt::format("--size {} hidden units is more than this lesson trains (4096)", opt.size));
    config.shape = model::make_shape(mlp_dims(shape, opt.size));
    config.seed = opt.seed;
    if (config.batch < std::size_t(w.size))
      throw UsageError(
          fmt::format("--batch {} gives some of the {} ranks no sample", config.batch, w.size));
    bucket_bytes = parse_size(bucket_text);
    std::vector<std::uint64_t> sizes = parse_sweep(sweep_text);
    sizes.push_back(0);
    sizes.push_back(bucket_bytes);
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    variants.clear();
    for (std::uint64_t b : sizes)
      variants.push_back(
          {b == 0 ? std::string("no buckets") : "buckets of " + format_bytes(double(b)), b});
    if (!no_zero3) {
      variants.push_back({"ZeRO-3", 0, true, false});
      variants.push_back({"ZeRO-3 with prefetch", 0, true, true});
    }
  });
  // Per rank about 40 B per parameter for a variant's training; rank 0 also about 120 B for the
  // step checks' float64 twin (zero_lesson.cpp's count).
  lesson.needs_memory([&](const World& w) {
    const double params = double(model::make_shape(mlp_dims(shape, opt.size)).params());
    return MemoryNeed{params * (40.0 * double(w.size) + 120.0), 0};
  });

  std::vector<Measured> measured;  // rank 0's, per variant

  // STEP 4 (rank 0, after the run): overlap per variant and rank from the trace, step times,
  // ZeRO-3's memory, and the checks.
  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    const MlpShape& s = config.shape;
    fmt::print(
        "\nmodel {}\n{} ranks, batch {}, {} steps per configuration;\ncompute {} per "
        "layer forward, {} backward (simulated)\n",
        s.describe(), n, config.batch, config.steps, format_seconds(work_us * 1e-6),
        format_seconds(2 * work_us * 1e-6));
    fmt::print(
        "\noverlap, from the trace: communication = the operations' messages in flight, each from\n"
        "posted to done; hidden = the part of it under a layer's forward or backward:\n");
    fmt::print("  {:<22} {:>7}  {:>10}  {:>12}  {:>7}  {:>10}\n", "configuration", "buckets",
               "step time", "comm / rank", "hidden", "exposed");
    std::vector<double> shares(variants.size());
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const Variant& var = variants[v];
      const Measured& m = measured[v];
      double comm = 0, hidden = 0, lowest = 1;
      for (const auto& log : r.logs) {
        const Overlap o = overlap_of(log, m.ops);
        comm += o.comm_us, hidden += o.hidden_us, lowest = std::min(lowest, o.share());
      }
      shares[v] = comm > 0 ? hidden / comm : 0;
      const double per_step = double(config.steps) * n;
      const std::string buckets =
          var.zero3 ? "-" : fmt::format("{}", m.ops.size() / std::size_t(config.steps));
      fmt::print("  {:<22} {:>7}  {:>10}  {:>12}  {:>6.0f}%  {:>10}\n", var.name, buckets,
                 format_seconds(median(m.step_seconds)), format_seconds(comm / per_step * 1e-6),
                 100 * shares[v], format_seconds((comm - hidden) / per_step * 1e-6));
      if (!var.zero3)
        r.check(fmt::format("{}: {} all-reduces a step, as the layer sizes say", var.name,
                            bucket_count(s, var.bucket)),
                m.ops.size() == std::size_t(config.steps * bucket_count(s, var.bucket)),
                fmt::format("{} in {} steps", m.ops.size(), config.steps));
    }
    fmt::print(
        "  (comm / rank and exposed: per rank and step; exposed = communication the computation "
        "did not hide)\n"
        "  small buckets start early but pay a message's start-up for each bucket and step; a "
        "bucket as\n  large as the model starts after the bottom layer, with nothing left to hide "
        "it under\n");
    if (const unsigned cores = std::thread::hardware_concurrency();
        r.world.mode == Mode::threads && cores > 0 && unsigned(n) > cores)
      fmt::print(
          "  {} ranks share {} cores here: the times measure how they share them; read the "
          "hidden shares\n",
          n, cores);
    // The overlap checks: none without buckets (the all-reduce starts after the backward), and
    // clearly more with them.
    const auto at = [&](std::uint64_t b) {
      for (std::size_t v = 0; v < variants.size(); ++v)
        if (!variants[v].zero3 && variants[v].bucket == b) return v;
      return std::size_t(0);
    };
    r.check("no buckets: no communication is hidden (it starts after the backward)",
            shares[at(0)] == 0, fmt::format("{:.1f}% hidden", 100 * shares[at(0)]));
    // With buckets, what the code guarantees is the order: every rank posts its first bucket and
    // computes the layers below before it posts the last. How much that hides is a measurement:
    // with a core per rank far above 20 points, but ranks that take turns on shared cores, or a
    // machine busy with other work, hide less (15-18% here with 5 ranks on 2 loaded cores, less
    // with more beside them), so the share is printed, not held.
    const int buckets = bucket_count(s, bucket_bytes);
    if (n > 1 && bucket_bytes > 0 && buckets > 1) {
      const Measured& m = measured[at(bucket_bytes)];
      std::string late;
      for (const auto& log : r.logs)
        if (!posted_under_backward(log, m.ops, std::size_t(buckets)))
          late += fmt::format(" r{}", log.rank);
      r.check(fmt::format("buckets of {}: every rank posts its first bucket before the backward "
                          "of the layers below it",
                          format_bytes(double(bucket_bytes))),
              late.empty(), "posted only after the backward on" + late);
      fmt::print("  buckets of {} hid {:.1f}% of the communication, none hid {:.1f}% (measured)\n",
                 format_bytes(double(bucket_bytes)), 100 * shares[at(bucket_bytes)],
                 100 * shares[at(0)]);
    }

    // ZeRO-3: the peak of the weights, exactly: my shards plus the layers alive at once.
    if (!no_zero3) {
      const std::vector<Unit> u = units(Stage::zero3, s, n);
      std::uint64_t one = 0, two = 0;
      for (std::size_t l = 0; l < u.size(); ++l) {
        one = std::max<std::uint64_t>(one, u[l].padded * sizeof(BFloat16));
        if (l + 1 < u.size())
          two = std::max<std::uint64_t>(two, (u[l].padded + u[l + 1].padded) * sizeof(BFloat16));
      }
      const Measured& plain = measured[variants.size() - 2];
      const Measured& pre = measured[variants.size() - 1];
      fmt::print(
          "\nZeRO-3, rank 0: step time {} without prefetch, {} with;\npeak of the weights {} = "
          "my shards {} + one layer {},\nand with prefetch {} = + two neighbouring layers {}\n",
          format_seconds(median(plain.step_seconds)), format_seconds(median(pre.step_seconds)),
          format_bytes(double(plain.params_peak)), format_bytes(double(plain.shards)),
          format_bytes(double(one)), format_bytes(double(pre.params_peak)),
          format_bytes(double(two)));
      r.check("ZeRO-3: the peak of the weights is my shards + the largest layer",
              plain.params_peak == plain.shards + one,
              fmt::format("{} B, formula {} B", plain.params_peak, plain.shards + one));
      r.check("ZeRO-3 with prefetch: my shards + the largest two neighbouring layers",
              pre.params_peak == pre.shards + two,
              fmt::format("{} B, formula {} B", pre.params_peak, pre.shards + two));
    }
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    const int me = comm.rank();
    std::vector<float> first_master;  // the first variant's weights: every other must equal them
    if (me == 0) measured.assign(variants.size(), {});
    // A warm-up step, off the trace, on a ledger of its own and measured by no one: a run's first
    // step pays for first touches (buffers, the ranks' first messages), which would otherwise fall
    // on whichever configuration runs first, no buckets, in its communication column.
    {
      const bool tracing = comm.recorder().enabled();
      comm.recorder().set_enabled(false);
      Config warm = config;
      warm.steps = 1;
      Ledger own;
      comm.charge_scratch_to(&own);
      (void)train(
          comm, warm, [&](Replica& rep, int k) { bucketed_step(rep, k, 0, work_us, nullptr); },
          &own);
      comm.charge_scratch_to(nullptr);
      comm.recorder().set_enabled(tracing);
    }
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const Variant& var = variants[v];
      Measured* m = me == 0 ? &measured[v] : nullptr;
      Config c = config;
      c.stage = var.zero3 ? Stage::zero3 : Stage::dp;
      // STEP 1: every step checked from my own state against the float64 recipe restarted there
      // (zero_lesson.hpp's StepChecks: its gradient, Adam's update and moments, the loss).
      StepChecks checks(comm, c);
      // STEP 2 and 3: train this variant from the same initial weights (its step above).
      // Each variant's memory on a ledger of its own (ZeRO-3's peak is its own), whose charges
      // also reach the rank's ledger: the trace's memory counters, the viewer's Memory panel.
      Ledger own(nullptr, &comm.ledger());
      comm.charge_scratch_to(&own);
      auto phase = comm.phase(var.name);
      Run run = train(
          comm, c,
          [&](Replica& rep, int k) {
            if (var.zero3)
              zero3_step(rep, k, var.prefetch, work_us, m);
            else
              bucketed_step(rep, k, var.bucket, work_us, m);
          },
          &own,
          [&](int k, const StepState& before, const StepState& after, double loss) {
            checks(k, before, after, loss);
          });
      comm.charge_scratch_to(nullptr);
      if (m) {
        m->step_seconds = run.step_seconds;
        m->params_peak = run.params_peak;
        m->shards = run.state.params;
      }
      checks.finish(var.name);
      const std::vector<std::int64_t> positions =
          master_positions(c.stage, c.shape, comm.size(), me);
      if (v == 0) {
        first_master = run.master;
      } else {
        bool same = true;
        for (std::size_t i = 0; i < run.master.size(); ++i)
          if (positions[i] >= 0 && run.master[i] != first_master[std::size_t(positions[i])])
            same = false;
        comm.check(
            fmt::format("{}: my master weights equal {}'s bit for bit", var.name, variants[0].name),
            same);
      }
    }
  });
}
