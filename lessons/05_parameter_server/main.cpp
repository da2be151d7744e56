// Lesson 05 — the parameter server, and data-parallel training without one
//
// Concept: data parallelism. Every worker holds the whole model, takes its own share of each
// batch, and computes gradients on it; the shares' gradients add up to the whole batch's.
// Mu Li et al. (OSDI 2014) give the work two roles, servers that hold the weights and the
// optimizer and workers that compute, and each iteration takes five steps:
//   1 replicate / pull   the server sends the current weights to every worker
//   2 split dataset      worker w takes its share of the global batch
//   3 compute gradients  forward and backward on that share
//   4 push & sum         every worker sends its gradient; the server adds them up
//   5 update             the server applies the optimizer to the weights
// The model is a small MLP (Linear, GeLU, Linear: core/training/model.hpp) learning a regression
// from a fixed random teacher MLP; its S = 4P bytes of weights move every iteration.
//
// Cost, per iteration, N ranks of which K are servers (N - K workers), P parameters:
//   a worker            receives S, sends S                        O(1) in N
//   server s (K = 1)    sends (N-1) S, receives (N-1) S            2(N-1) S: O(N), the hotspot
//   server s (K > 1)    the same for its 1/K of the weights        2(N-K) S/K
// Splitting the weights over K servers (--servers K) spreads the hotspot. --mode allreduce
// removes the server: every rank keeps the weights and the optimizer, the gradients are summed
// by the ring all-reduce of lesson 06 (2(N-1)/N S each way per rank), and every rank updates.
//
// Verification: both modes, after --steps iterations, hold the weights that a single-device
// float64 Eigen model (core/training/model_reference.hpp) reaches training on the whole batches,
// and rank 0's loss of every iteration is the reference's. Bytes per iteration are counted from the
// trace and must equal the formulas exactly, for this run and for N = 2, 4, 8.
//
// Run:  ./distlab lesson 05                         4 ranks: 1 server, 3 workers, 20 iterations
//       ./distlab lesson 05 --ranks 8 --servers 2   the weights split over 2 servers
//       ./distlab lesson 05 --mode allreduce        no server: ring all-reduce of the gradients
//       ./distlab lesson 05 --optimizer adam --steps 20
//       ./distlab lesson 05 --mpi 4                 one process per rank
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/base/units.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/broadcast.hpp"
#include "core/collectives/reduce.hpp"
#include "core/cost/cost_model.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/trace_counts.hpp"
#include "core/runtime/verify.hpp"
#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"
#include "lessons/common/mlp_options.hpp"

using namespace distlab;
using namespace distlab::model;

namespace {

constexpr int kTagPull = 1500;
constexpr int kTagPush = 1510;
constexpr int kTagLoss = 1520;
constexpr int kTagCheck = 1530;  // the weights before the last iteration, to the servers' checks

enum class TrainMode { ps, allreduce };

// Everything a run of the training needs, the same on every rank.
struct Setup {
  TrainMode mode = TrainMode::ps;
  int servers = 1;  // ps: ranks 0 .. servers-1 serve, the rest work
  MlpShape shape;
  std::size_t batch = 64;  // the global batch, split over the workers
  int steps = 10;
  OptimizerConfig optimizer;
  std::uint64_t seed = 42;

  int workers(int n) const { return mode == TrainMode::ps ? n - servers : n; }
  bool is_server(int rank) const { return mode == TrainMode::ps && rank < servers; }
  int worker_index(int rank) const { return mode == TrainMode::ps ? rank - servers : rank; }
  // Server s holds parameters [shards.begin(s), shards.end(s)).
  Partition shards() const { return Partition{shape.params(), servers}; }
};

// What rank 0 saw: each iteration's exchange steps (for the byte counts) and losses.
struct Outcome {
  std::vector<std::pair<int, int>>
      exchange;  // [first, last] step ids of pull + push, or of the all-reduce
  std::vector<double> losses, reference_losses;
  double max_error = 0;       // rank 0's weights against the reference, max |error|
  double drift_share = 0;     // and its largest share of the drift's bound
  double gradient_error = 0;  // rank 0's summed gradient of iteration 1 against the reference's
};

// One float32 forward and backward against float64: each gradient element is a sum over the
// batch of products through the layers, rounded at about 2^-24 relative per term; 4 x 2^-24 x
// (batch + the widest layer) bounds it for gradients of magnitude up to 1. A gradient summed
// where it should be averaged is W times too large: off by (W - 1) |g|, far above this.
double gradient_tolerance(const Setup& s) {
  const std::size_t widest = *std::max_element(s.shape.dims.begin(), s.shape.dims.end());
  return 4.0 * 0x1p-24 * double(s.batch + widest);
}
// A loss is one float32 sum over the batch: relative error about 2^-24 x the terms, far below this.
constexpr double kLossTolerance = 1e-5;

// The bytes one role moves in one iteration, by formula (elements x 4).
struct RoleBytes {
  std::uint64_t sent = 0, recv = 0;
};
RoleBytes formula_bytes(const Setup& s, int rank, int n) {
  const std::uint64_t e = sizeof(float), P = s.shape.params();
  if (s.mode == TrainMode::allreduce) {
    const coll::RingChunkedTraffic t = coll::ring_chunked_traffic(rank, n, P);
    return {t.sent * e, t.recv * e};
  }
  if (s.is_server(rank)) {  // pull: my shard to every worker; push: every worker's gradient of it
    const std::uint64_t shard = s.shards().size(rank) * e, w = std::uint64_t(s.workers(n));
    return {w * shard, w * shard};
  }
  return {P * e, P * e};  // a worker: the whole weights in, the whole gradient out
}

// The formula in symbols, for the tables.
std::string formula_text(const Setup& s, int rank) {
  if (s.mode == TrainMode::allreduce) return "2(N-1)/N S each way";
  if (!s.is_server(rank)) return "S each way";
  return s.servers == 1 ? "(N-1) S each way" : "(N-K) S/K each way";
}

// --- the training, on one rank --------------------------------------------------------------

// A phase's caption: what its step means, which the messages alone cannot say (the viewer shows
// it under the step's own sentence; docs/trace-format.md).
PhaseArgs caption(std::string text) {
  PhaseArgs args;
  args.text = std::move(text);
  return args;
}

void train(Comm& comm, const Setup& s, Outcome* outcome) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t P = s.shape.params();
  const int W = s.workers(n);
  const bool server = s.is_server(me), worker = !server;
  const Partition shards = s.shards();
  const Partition samples{s.batch, W};  // worker w's share of every batch
  const Teacher teacher(s.shape, s.seed);
  const std::vector<float> initial = initial_params(s.shape, s.seed);
  comm.declare_buffer("params", P, s.mode == TrainMode::ps ? s.servers : 1);
  comm.declare_buffer("grads", P, s.mode == TrainMode::ps ? s.servers : n);
  comm.declare_buffer("loss", 1, 1);

  // What this rank holds. A server: its shard of the weights, their optimizer state, the sum of
  // the gradients and one receive buffer per worker. A worker: the whole weights, its gradient,
  // the model's activations and its share of the batch.
  const std::size_t mine = server ? shards.size(me) : P;  // the weights this rank keeps
  Buffer<float> params = comm.alloc<float>(mine, Category::params);
  Buffer<float> grads = comm.alloc<float>(mine, Category::grads);
  std::optional<Optimizer> optimizer;
  if (server || s.mode == TrainMode::allreduce)
    optimizer.emplace(comm.ledger(), comm.device(), mine, s.optimizer);
  std::vector<Buffer<float>> incoming;  // a server's receive buffers, one per worker
  if (server)
    for (int w = 0; w < W; ++w) incoming.push_back(comm.scratch<float>(mine));
  const std::size_t my_samples = worker ? samples.size(s.worker_index(me)) : 0;
  std::optional<Mlp> mlp;
  if (worker) mlp.emplace(comm.ledger(), comm.device(), s.shape, my_samples);
  Buffer<float> x = comm.alloc<float>(my_samples * s.shape.in(), Category::data);
  Buffer<float> t = comm.alloc<float>(my_samples * s.shape.out(), Category::data);
  Buffer<float> dy = comm.alloc<float>(my_samples * s.shape.out(), Category::activations);
  Buffer<float> loss = comm.alloc<float>(1, Category::data);

  // The starting weights: each server sets its shard; with no server, rank 0 sets them and
  // replicates them once (a broadcast) — the only time all-reduce training sends weights.
  const auto shard_of = [&](int srv) {
    return View<const float>{initial.data() + shards.begin(srv), shards.size(srv)};
  };
  if (server)
    from_host(params.view(), std::vector<float>(shard_of(me).ptr, shard_of(me).ptr + mine));
  if (s.mode == TrainMode::allreduce) {
    auto phase = comm.phase("1 replicate (once)",
                            caption("1 replicate (once): rank 0 broadcasts the initial weights; "
                                    "from now on only gradients move"));
    if (me == 0) from_host(params.view(), initial);
    coll::broadcast(comm, params.view(), 0, "params");
  }

  // STEP 1, replicate / pull: every server sends its shard to every worker, all at once (a
  // broadcast from each server). Used before every iteration, and once more at the end.
  const auto pull = [&](int step) {
    auto phase = comm.phase(
        "1 pull", caption("1 pull: each server sends its current weights to every worker (S each "
                          "way; the server sends (N-1) S)"));
    comm.mark_step(step);
    std::vector<Request> requests;
    if (server)
      for (int w = s.servers; w < n; ++w)
        requests.push_back(
            comm.isend(View<const float>(params.view()), w, kTagPull,
                       coll::meta(step, "params", me, me + 1, Apply::copy, coll::all_ranks(n))));
    else
      for (int srv = 0; srv < s.servers; ++srv)
        requests.push_back(
            comm.irecv(params.view().sub(shards.begin(srv), shards.size(srv)), srv, kTagPull,
                       coll::meta(step, "params", srv, srv + 1, Apply::copy, coll::all_ranks(n))));
    comm.wait_all(requests);
  };

  Buffer<float> loss_sum =
      comm.alloc<float>(me == 0 ? 1 : 0, Category::data);  // rank 0: the iteration's loss
  std::vector<float> first_grads;  // the summed gradient of iteration 1, where it is summed
  // Checked at the end: the weights I hold before the last iteration's update and after
  // iteration min(S, kDriftSteps); where the optimizer runs, the last iteration's summed gradient
  // and Adam's moments before it.
  const int drift_steps = std::min(s.steps, kDriftSteps);
  std::vector<float> before_last, at_drift_steps, last_grads, m_before_last, v_before_last;
  PhaseArgs train_step;  // marks each iteration: the viewer starts its shards over at each
  train_step.op = kTrainStepOp;
  for (int k = 0; k < s.steps; ++k) {
    auto iteration = comm.phase(fmt::format("iteration {}", k + 1), train_step);
    int first = 0, last = 0;  // this iteration's exchange steps
    if (s.mode == TrainMode::ps) {
      first = comm.next_steps(1);
      pull(first);
    }
    if (k == drift_steps && drift_steps < s.steps)  // after drift_steps updates (and the pull)
      at_drift_steps = to_host(View<const float>(params.view()));

    if (worker) {
      // STEP 2, split dataset: batch k is samples [k B, (k+1) B); worker w takes its share.
      {
        auto phase = comm.phase(
            "2 split data", caption("2 split data: worker w takes its share of the global batch, "
                                    "B / W samples; no message"));
        const std::size_t first = std::size_t(k) * s.batch + samples.begin(s.worker_index(me));
        from_host(x.view(), teacher.inputs(first, my_samples));
        from_host(t.view(), teacher.targets(first, my_samples));
      }
      // STEP 3, compute gradients: forward, the loss of my share (normalised by the whole
      // batch, so the shares' gradients add up to the batch's), backward.
      auto phase = comm.phase(
          "3 compute gradients",
          caption("3 compute gradients: each worker runs forward and backward on its share; the "
                  "shares' gradients add up to the batch's"));
      const View<const float> y = mlp->forward(params.view(), x.view());
      // --break sum-not-mean: each worker averages over its own share, and the server's sum of
      // the W averages is W times the batch's gradient.
      const std::size_t whole = broken("sum-not-mean") ? my_samples : s.batch;
      mse_loss(loss.view(), dy.view(), y, t.view(), whole, s.shape.out());
      mlp->backward(grads.view(), params.view(), x.view(), dy.view());
    }

    // STEP 4, push & sum: every worker sends each server its part of the gradient; the server
    // adds the N - K parts up (a reduce onto each server). Without a server: the ring
    // all-reduce leaves the sum on every rank.
    if (s.mode == TrainMode::ps) {
      auto phase = comm.phase(
          "4 push & sum", caption("4 push & sum: every worker sends its gradient to the server, "
                                  "which adds the W of them up: (N-1) S into one rank"));
      const int push_step = comm.next_steps(1);
      comm.mark_step(push_step);
      last = push_step;
      std::vector<Request> requests;
      if (server) {
        for (int w = 0; w < W; ++w)
          requests.push_back(comm.irecv(incoming[std::size_t(w)].view(), s.servers + w, kTagPush,
                                        coll::meta(push_step, "grads", me, me + 1, Apply::reduce,
                                                   coll::rank_bit(s.servers + w))));
        ops::fill(grads.view(), 0.0f);
        for (int w = 0; w < W; ++w) {  // add each worker's part as it is waited for
          comm.wait(requests[std::size_t(w)]);
          ops::add(grads.view(), View<const float>(incoming[std::size_t(w)].view()));
        }
      } else {
        for (int srv = 0; srv < s.servers; ++srv)
          requests.push_back(comm.isend(
              View<const float>(grads.view().sub(shards.begin(srv), shards.size(srv))), srv,
              kTagPush,
              coll::meta(push_step, "grads", srv, srv + 1, Apply::reduce, coll::rank_bit(me))));
        comm.wait_all(requests);
      }
    } else {
      auto phase = comm.phase(
          "4 all-reduce gradients",
          caption("4 all-reduce: the ring sums the gradients on every rank, 2(N-1)/N S each way; "
                  "no server"));
      first = comm.next_steps(0);
      coll::all_reduce(comm, grads.view(), coll::AllReduceAlgo::ring_chunked, "grads");
      last = comm.next_steps(0) - 1;
    }

    // The sum of the first iteration, kept to be checked against the batch's gradient.
    if (k == 0 && optimizer) first_grads = to_host(View<const float>(grads.view()));

    // STEP 5, update: the server steps the optimizer on its shard; without a server every rank
    // steps it on the whole weights, with the same sum, so all stay equal.
    if (k + 1 == s.steps) {  // off the clock: the state the last update starts from
      before_last = to_host(View<const float>(params.view()));
      if (optimizer) {
        last_grads = to_host(View<const float>(grads.view()));
        m_before_last = to_host(optimizer->m());
        v_before_last = to_host(optimizer->v());
      }
    }
    if (optimizer) {
      auto phase = comm.phase(
          "5 update", caption(server ? "5 update: the server steps the optimizer on its weights; "
                                       "the workers wait for the next pull"
                                     : "5 update: every rank steps the optimizer on the same "
                                       "summed gradient, so all weights stay equal"));
      optimizer->step(params.view(), View<const float>(grads.view()));
    }

    // The iteration's loss on rank 0: the workers' shares, summed (its own steps and tag, so
    // the byte counts above leave these 4-byte messages out).
    double total = 0;
    if (s.mode == TrainMode::ps) {
      const int loss_step = comm.next_steps(1);
      comm.mark_step(loss_step);
      if (me == 0)
        for (int w = s.servers; w < n; ++w) {
          comm.recv(loss.view(), w, kTagLoss,
                    coll::meta(loss_step, "loss", 0, 1, Apply::reduce, coll::rank_bit(w)));
          total += double(to_host(View<const float>(loss.view()))[0]);
        }
      else if (worker)
        comm.send(View<const float>(loss.view()), 0, kTagLoss,
                  coll::meta(loss_step, "loss", 0, 1, Apply::reduce, coll::rank_bit(me)));
    } else {
      coll::reduce(comm, View<const float>(loss.view()), me == 0 ? loss_sum.view() : loss.view(), 0,
                   "loss");
      if (me == 0) total = double(to_host(View<const float>(loss_sum.view()))[0]);
    }
    if (me == 0) {
      comm.recorder().value("loss", total);
      if (outcome) {
        outcome->exchange.push_back({first, last});
        outcome->losses.push_back(total);
      }
    }
  }

  // The final weights: a last pull gives every worker the servers' result (no server: every
  // rank has it already). Each rank checks what it holds against the reference.
  if (s.mode == TrainMode::ps) pull(comm.next_steps(1));

  // STEP 6, check, against float64 code that shares nothing with the ranks' (model_reference):
  // iteration 1's summed gradient and loss; the last iteration from my own state before it (its
  // gradient, loss and update: one step's rounding at any step count); and the weights after
  // min(S, kDriftSteps) iterations against the reference's run within float32's drift from it.
  // Off the trace: the servers get the whole weights before the last iteration from the first
  // worker (they hold only their shard), for the float64 gradient there.
  const double tol = gradient_tolerance(s);
  // In the weights' bounds a gradient element's error is tol of its layer's largest |g| (the
  // gradient checks' model, whose tol bounds gradients up to 1, scaled to the layer's: these
  // gradients are 1e-3 to 1e-1, and 1 would leave every bound 100 times loose).
  const GradientError gradient_error = [tol](double, double largest) { return tol * largest; };
  const ReferenceRun ref =
      reference_train(s.shape, teacher, initial, s.batch, drift_steps, s.optimizer, gradient_error);
  std::vector<float> model_before_last = before_last;
  if (s.mode == TrainMode::ps) {
    const bool tracing = comm.recorder().enabled();
    comm.recorder().set_enabled(false);
    if (server) {
      model_before_last.assign(P, 0.0f);
      comm.recv(View<float>{model_before_last.data(), P, Device::cpu}, s.servers, kTagCheck);
    } else if (me == s.servers) {
      for (int srv = 0; srv < s.servers; ++srv)
        comm.send(View<const float>{before_last.data(), P, Device::cpu}, srv, kTagCheck);
    }
    comm.recorder().set_enabled(tracing);
  }
  const ReferenceBatch last_batch = reference_batch(s.shape, teacher, s.batch, s.steps - 1);
  Eigen::VectorXd last_g;
  const double last_loss =
      reference_loss(s.shape, widen(model_before_last), last_batch.x, last_batch.t, &last_g);

  const std::size_t begin = server ? shards.begin(me) : 0;
  if (comm.inject_fault()) inject_fault_into(params.view());
  const std::vector<float> got = to_host(View<const float>(params.view()));
  // The weights after drift_steps iterations against the reference's, within kDriftRoom x the
  // drift (Float32Drift: each iteration's rounding, and what its gradient's error moves).
  const std::vector<float>& drifted = drift_steps == s.steps ? got : at_drift_steps;
  const ErrorBound run = drift_bound(ref, drifted, begin);
  comm.check(fmt::format("{} after {} iteration{} equal{} the reference's (within float32's drift)",
                         server ? "as a server: my shard of the weights" : "the weights I hold",
                         drift_steps, drift_steps == 1 ? "" : "s", server ? "s" : ""),
             run.ok(), run.detail("rounding", "gradient error"));
  // The gradient that the update of iteration 1 used: the whole first batch's, at the initial
  // weights, in float64 (the mean over the batch's samples, however the workers split it).
  if (!first_grads.empty()) {
    const RowMatrix xb = widen(teacher.inputs(0, s.batch), s.batch, s.shape.in());
    const RowMatrix tb = widen(teacher.targets(0, s.batch), s.batch, s.shape.out());
    Eigen::VectorXd g;
    reference_loss(s.shape, widen(initial), xb, tb, &g);
    const Comparison gc = compare(View<const float>{first_grads.data(), first_grads.size()},
                                  g.segment(Eigen::Index(begin), Eigen::Index(mine)), tol);
    comm.check("iteration 1: the summed gradient is the batch's mean gradient (the reference's)",
               gc.ok, gc.detail());
    if (me == 0 && outcome) outcome->gradient_error = gc.max_error;
  }
  // The last iteration from my own state before it: its summed gradient at my weights, then
  // the optimizer's step from my weights (and Adam's moments) with float64's gradient there
  // (StepBound: the gradient's error through the step, and float32's roundings).
  if (!last_grads.empty()) {
    const Eigen::VectorXd want_g = last_g.segment(Eigen::Index(begin), Eigen::Index(mine));
    if (s.steps > 1) {
      const Comparison gc =
          compare(View<const float>{last_grads.data(), last_grads.size()}, want_g, tol);
      comm.check(fmt::format("iteration {}: the summed gradient at my weights before it is the "
                             "batch's mean gradient (the reference's)",
                             s.steps),
                 gc.ok, gc.detail());
    }
    ErrorBound step;
    const bool adam = s.optimizer.kind == OptimizerKind::adam;
    const double largest_g = last_g.cwiseAbs().maxCoeff();  // the model's largest |g|
    for (std::size_t i = 0; i < mine; ++i) {
      const double g = want_g[Eigen::Index(i)];
      const StepBound b =
          step_bound(s.optimizer, before_last[i], adam ? m_before_last[i] : 0.0,
                     adam ? v_before_last[i] : 0.0, g, gradient_error(g, largest_g), s.steps);
      step.add(double(got[i]) - b.want, {b.rounding, b.gradient});
    }
    comm.check(fmt::format("iteration {}'s update from my {} before it equals float64's", s.steps,
                           adam ? "weights and moments" : "weights"),
               step.ok(), step.detail("rounding", "gradient error"));
  }
  if (me == 0 && outcome) {
    outcome->max_error = run.max_error();
    outcome->drift_share = run.worst_share();
    outcome->reference_losses = ref.losses;
    // Iteration 1's loss, from the same weights as the reference's, and the last iteration's
    // from my weights before it: one float32 sum over the batch each.
    const auto within = [](double got_loss, double want) {
      return std::fabs(got_loss - want) <= kLossTolerance * std::fabs(want);
    };
    comm.check(fmt::format("iteration 1's loss equals the reference's (relative error <= {:.0e})",
                           kLossTolerance),
               within(outcome->losses.front(), ref.losses.front()),
               fmt::format("{:.9g} against {:.9g}", outcome->losses.front(), ref.losses.front()));
    comm.check(fmt::format("iteration {}'s loss equals float64's at my weights before it "
                           "(relative error <= {:.0e})",
                           s.steps, kLossTolerance),
               within(outcome->losses.back(), last_loss),
               fmt::format("{:.9g} against {:.9g}", outcome->losses.back(), last_loss));
  }
}

// Bytes rank `rank` moved in iteration `k`'s exchange steps, from the trace.
RankTraffic measured(const RunResult& r, const Outcome& o, std::size_t k, int rank) {
  return r.traffic(o.exchange[k].first, o.exchange[k].second)[std::size_t(rank)];
}

// --- on a simulated cluster (./distlab lesson 05 --sim PLATFORM --ranks N) --------------------

// One exchange's simulated time on rank 0 against its formula. With servers, every server sends
// its shard to every worker at once (and takes their gradients at once): the N-K messages share
// the server's port and a worker's K pieces share its own, so a pull takes alpha plus the
// busiest port's bytes times beta, alpha + max(N-K, K) S/K beta: the contended formula, not one
// message's alpha + S/K beta. The push is the same the other way. Without a server, the ring's.
void report_simulated_time(RunResult& r, const Setup& s, const CostParams& cp) {
  const int n = r.world.size;
  const double S = double(s.shape.params() * sizeof(float)), beta = cp.beta_s_per_byte;
  const RankLog* log0 = nullptr;
  for (const RankLog& log : r.logs)
    if (log.rank == 0) log0 = &log;
  if (!log0 || n == 1) return;
  const bool ps = s.mode == TrainMode::ps;
  const int K = s.servers, W = s.workers(n);
  double piece = S;    // the smallest message of the exchange
  double busiest = 0;  // the bytes through the busiest port in one direction
  if (ps) {
    for (int srv = 0; srv < K; ++srv) {
      const double shard = double(s.shards().size(srv) * sizeof(float));
      piece = std::min(piece, shard);
      busiest = std::max(busiest, W * shard);
    }
    busiest = std::max(busiest, S);  // a worker's port takes the K pieces of S
  }
  struct Row {
    std::string phase, formula;
    double predicted;
  };
  std::vector<Row> rows;
  if (ps) {
    const std::string f = K == 1 ? "alpha + (N-1) S beta" : "alpha + max(N-K, K) S/K beta";
    rows.push_back({"1 pull", f, cp.alpha_s + busiest * beta});
    rows.push_back({"4 push & sum", f, cp.alpha_s + busiest * beta});
  } else {
    piece = S / n;
    rows.push_back({"4 all-reduce gradients", "2(N-1) alpha + 2(N-1)/N S beta",
                    predict_all_reduce(coll::AllReduceAlgo::ring_chunked, n, S).seconds(cp)});
  }
  fmt::print(
      "\nsimulated time of one iteration's exchange on r0 ({}; the median over {} "
      "iterations):\n",
      cp.network->platform, s.steps);
  fmt::print("  {:<24}  {:>10}  {:>10}  {:>6}  {}\n", "phase", "simulated", "predicted", "ratio",
             "formula");
  // With several servers, r0 (which also gathers the losses) falls behind the others, and the
  // workers' pushes to them start while r0 still pulls: the phases overlap, so they are reported.
  const bool checked = cp.network->uniform && piece >= kSimulatedCheckBytes && (!ps || K == 1);
  for (const Row& row : rows) {
    const std::vector<double> t = phase_seconds(*log0, row.phase);
    if (t.empty()) continue;
    const double middle = median(t), ratio = middle / row.predicted;
    const std::string verdict = !checked ? "" : "  " + simulated_verdict(ratio);
    fmt::print("  {:<24}  {:>10}  {:>10}  {:>6.2f}  {}{}\n", row.phase, format_seconds(middle),
               format_seconds(row.predicted), ratio, row.formula, verdict);
    if (checked)
      r.check(fmt::format("{}: simulated time within {:.0f}% of {}{}", row.phase,
                          kSimulatedTolerance * 100, row.formula,
                          ps ? " (the contended formula: the busiest port's bytes)" : ""),
              std::abs(ratio - 1) <= kSimulatedTolerance,
              fmt::format("simulated {}, predicted {}", format_seconds(middle),
                          format_seconds(row.predicted)));
  }
  if (!checked)
    fmt::print("  a report, not a check: {}\n",
               !cp.network->uniform
                   ? fmt::format("{}'s routes differ between pairs of hosts", cp.network->platform)
               : piece < kSimulatedCheckBytes
                   ? fmt::format("the messages ({}) are under {}", format_bytes(piece),
                                 format_bytes(kSimulatedCheckBytes))
                   : std::string("with several servers one server's push overlaps another's pull"));
  if (!ps) return;
  // What each port carries per iteration, in time on this platform: the server's grows with N,
  // a worker's stays flat. The iteration waits for the busiest port: the server's.
  fmt::print("  each port's busy time per iteration (its bytes x beta), as N grows with K = {}:\n",
             K);
  fmt::print("  {:>5}  {:>12}  {:>12}\n", "N", "a server", "a worker");
  std::vector<int> sizes{K + 1, 4 * K, 16 * K, 64 * K, n};
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (int N : sizes) {
    const double server = 2.0 * (N - K) * (S / K) * beta, worker = 2.0 * S * beta;
    fmt::print("  {:>5}  {:>12}  {:>12}{}\n", N, format_seconds(server), format_seconds(worker),
               N == n ? "   (this run)" : "");
  }
  fmt::print("  the server's 2(N-K) S/K beta grows with N, a worker's 2 S beta stays flat\n");
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"05", "parameter_server",
                 "data-parallel training with a parameter server, and with all-reduce", 4, 64});
  lesson.set_text(
      "Data parallelism: every worker holds the model and computes gradients on its share of "
      "each batch. With a parameter server the server pulls the weights out to every worker "
      "and sums their pushed gradients: its traffic grows as O(N), a worker's stays O(1). "
      "All-reduce removes the server: every rank moves 2(N-1)/N S.",
      "Timeline: the five phases of every iteration (pull, split, compute, push & sum, update). "
      "Topology: every packet touches the server. Stats: the server's bytes against a worker's; "
      "run again with --mode allreduce and compare.");
  std::string mode_text = "ps", optimizer_text = "sgd";
  int servers = 1, steps = 20;
  std::size_t batch = 64;
  MlpOptions shape_options;  // --layers, --inputs, --outputs
  shape_options.layers = 1;
  float lr = 0;
  lesson.describe_size("units per hidden layer of the model");
  auto& app = lesson.app();
  app.add_option("--mode", mode_text,
                 "ps: servers and workers; allreduce: no server, ring all-reduce of the gradients")
      ->check(CLI::IsMember({"ps", "allreduce"}))
      ->capture_default_str();
  app.add_option("--servers", servers, "ps: ranks 0..K-1 serve, each holding 1/K of the weights")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--steps", steps,
                 "training iterations; the weights are checked against the float64 model's "
                 "after min(steps, 100) (float32's drift from it compounds past that), and the "
                 "last iteration from each rank's own state before it, at any count")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--batch", batch, "samples per iteration, split over the workers")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  add_mlp_options(app, shape_options);
  app.add_option("--optimizer", optimizer_text, "sgd or adam")
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->capture_default_str();
  app.add_option("--lr", lr, "learning rate (default: 1 for sgd, 0.01 for adam)")
      ->check(CLI::PositiveNumber);

  lesson.add_break("sum-not-mean",
                   "each worker averages its own share and the server adds the W averages: "
                   "the gradient is W times the batch's (main.cpp, STEP 3)");
  Setup setup;
  Outcome outcome;
  const auto& opt = lesson.options();
  lesson.on_world([&](const World& w) {
    setup.mode = mode_text == "ps" ? TrainMode::ps : TrainMode::allreduce;
    setup.servers = servers;
    const std::vector<std::size_t> dims = mlp_dims(shape_options, opt.size);
    setup.shape = make_shape(dims);
    setup.batch = batch;
    setup.steps = steps;
    setup.seed = opt.seed;
    setup.optimizer.kind = parse_optimizer(optimizer_text);
    setup.optimizer.lr = lr > 0 ? lr : setup.optimizer.kind == OptimizerKind::sgd ? 1.0f : 0.01f;
    if (opt.size > (1u << 16))
      throw UsageError(
          fmt::format("--size {} hidden units is more than this lesson trains (65536)", opt.size));
    if (setup.mode == TrainMode::ps && w.size < servers + 1)
      throw UsageError(fmt::format(
          "--mode ps needs at least one worker besides the {} server{}: run {} ranks or more",
          servers, servers == 1 ? "" : "s", servers + 1));
    if (setup.mode == TrainMode::allreduce && servers != 1)
      throw UsageError("--servers is for --mode ps; --mode allreduce has no server");
    if (setup.mode == TrainMode::ps && std::size_t(servers) > setup.shape.params())
      throw UsageError(fmt::format("--servers {}: more servers than the model's {} parameters",
                                   servers, setup.shape.params()));
    if (batch < std::size_t(setup.workers(w.size)))
      throw UsageError(
          fmt::format("--batch {} gives some of the {} workers no sample: use --batch {} or more",
                      batch, setup.workers(w.size), setup.workers(w.size)));
    lesson.set_algorithm(setup.mode == TrainMode::ps ? fmt::format("parameter server ({} server{})",
                                                                   servers, servers == 1 ? "" : "s")
                                                     : "all-reduce (ring_chunked)");
    // otherData.roles: the viewer's Topology panel puts the servers in the middle.
    std::string roles;
    for (int r = 0; r < w.size; ++r)
      roles += fmt::format("{}\"{}\"", r ? "," : "", setup.is_server(r) ? "server" : "worker");
    lesson.set_metadata("roles", "[" + roles + "]");
  });

  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    const std::uint64_t S = setup.shape.params() * sizeof(float);
    fmt::print("\nmodel {}, S = {} of weights;\nglobal batch {} over {} worker{}; {} x {}\n",
               setup.shape.describe(), format_bytes(double(S)), setup.batch, setup.workers(n),
               setup.workers(n) == 1 ? "" : "s", setup.steps, to_string(setup.optimizer.kind));
    fmt::print("\n  {:>4}  {:>14}  {:>14}\n", "iter", "loss", "reference");
    for (std::size_t k = 0; k < outcome.losses.size(); ++k)
      if (k < outcome.reference_losses.size())
        fmt::print("  {:>4}  {:>14.8f}  {:>14.8f}\n", k + 1, outcome.losses[k],
                   outcome.reference_losses[k]);
      else
        fmt::print("  {:>4}  {:>14.8f}\n", k + 1, outcome.losses[k]);
    fmt::print(
        "  weights after {} iterations: max |error| {:.3g} against float64, {:.2g} of float32's "
        "drift bound\n",
        std::min(setup.steps, kDriftSteps), outcome.max_error, outcome.drift_share);
    fmt::print(
        "  iteration 1's summed gradient: max |error| {:.3g} (tolerance {:.1e} x (1 + |g|))\n",
        outcome.gradient_error, gradient_tolerance(setup));

    // This run's bytes, every iteration, every rank, against the formulas.
    bool exact = true;
    for (std::size_t k = 0; k < outcome.exchange.size(); ++k)
      for (int rank = 0; rank < n; ++rank) {
        const RankTraffic got = measured(r, outcome, k, rank);
        const RoleBytes want = formula_bytes(setup, rank, n);
        exact = exact && got.bytes_sent == want.sent && got.bytes_recv == want.recv;
      }
    r.check("every rank's bytes of every iteration equal the formula", exact);
    fmt::print(
        "\nbytes per iteration on {} ranks (the weights' pull and the gradients' push, or the "
        "all-reduce):\n",
        n);
    fmt::print("  {:>4}  {:<8}  {:>12}  {:>12}  {:>12}  {}\n", "rank", "role", "sent", "received",
               "formula", "");
    for (int rank = 0; rank < n && !outcome.exchange.empty(); ++rank) {
      const RankTraffic got = measured(r, outcome, 0, rank);
      const RoleBytes want = formula_bytes(setup, rank, n);
      fmt::print("  {:>4}  {:<8}  {:>12}  {:>12}  {:>12}  {}\n", fmt::format("r{}", rank),
                 setup.is_server(rank) ? "server" : "worker", format_bytes(double(got.bytes_sent)),
                 format_bytes(double(got.bytes_recv)), format_bytes(double(want.sent)),
                 formula_text(setup, rank));
    }

    // The same counts for N = 2, 4, 8: short in-process runs of this setup on the CPU, each
    // verified like this one. Columns: received / sent, measured then by formula.
    const bool ps = setup.mode == TrainMode::ps;
    fmt::print(
        "\nbytes per iteration as N grows (in-process runs of 1 iteration, counted from their\n"
        "traces; in / out):\n");
    fmt::print("  {:>3}  {:>21}  {:>21}  {:>21}  {:>21}\n", "N", ps ? "server r0" : "r0", "formula",
               ps ? "a worker" : "busiest rank", "formula");
    const auto in_out = [](std::uint64_t in, std::uint64_t out) {
      return fmt::format("{} / {}", format_bytes(double(in)), format_bytes(double(out)));
    };
    for (int N : {2, 4, 8}) {
      if (ps && N <= setup.servers) continue;
      if (setup.batch < std::size_t(setup.workers(N))) continue;
      Setup one = setup;
      one.steps = 1;
      Outcome o;
      const RunResult run = run_in_process(N, [&](Comm& comm) { train(comm, one, &o); });
      bool run_ok = true;
      for (const auto& log : run.logs)
        for (const auto& c : log.checks) run_ok = run_ok && c.ok;
      r.check(fmt::format("N = {}: the one-iteration run verifies", N), run_ok);
      // Rank 0, and a worker (ps) or the rank that moves the most (all-reduce: chunks differ by
      // one).
      int other = N - 1;
      if (!ps)
        for (int k = 0; k < N; ++k)
          if (formula_bytes(one, k, N).sent > formula_bytes(one, other, N).sent) other = k;
      std::string line = fmt::format("  {:>3}", N);
      bool ok = true;
      for (int rank : {0, other}) {
        const RankTraffic got = measured(run, o, 0, rank);
        const RoleBytes want = formula_bytes(one, rank, N);
        ok = ok && got.bytes_recv == want.recv && got.bytes_sent == want.sent;
        line += fmt::format("  {:>21}  {:>21}", in_out(got.bytes_recv, got.bytes_sent),
                            in_out(want.recv, want.sent));
      }
      r.check(fmt::format("N = {}: r0's and r{}'s bytes equal the formulas", N, other), ok);
      fmt::print("{}\n", line);
    }
    if (setup.mode == TrainMode::ps)
      fmt::print(
          "  the server's traffic grows with N (2(N-K)S/K), a worker's stays 2S: the server is the "
          "bottleneck\n");
    else
      fmt::print(
          "  every rank moves 2(N-1)/N S each way, under 2S however large N grows: no hotspot\n");

    if (auto cp = simulated_cost_params(r.hosts())) report_simulated_time(r, setup, *cp);
  });

  // Memory: per rank at most about 100 B per parameter: the float32 weights and gradient (8 B),
  // Adam's moments (8 B), a server's receive buffer per worker for its shard (4 B each), the
  // float64 reference run with its inputs (~56 B: weights, gradient, two moments, the initial
  // copy) and iteration 1's float64 gradient for its check (8 B); 112 B with allocator slack.
  // The float64 reference also holds, per sample and unit, the pre-activation, the activation and
  // their gradients (4 x 8 B). The report then repeats the run in-process on up to 8 ranks, once
  // this run's ranks have freed theirs: the peak is the larger of the two. tests/memory_plan.sh
  // holds the plan to what the process takes.
  lesson.needs_memory([&](const World& w) {
    std::size_t units = 0;
    for (std::size_t d : setup.shape.dims) units += d;
    const double per_rank =
        112.0 * double(setup.shape.params()) + 32.0 * double(setup.batch) * double(units);
    // In-process, the report's ranks follow the run's; under mpirun, rank 0's process adds 8 to its
    // own.
    const int more = w.mode == Mode::threads ? std::max(0, 8 - w.size) : 7;
    return MemoryNeed{per_rank, per_rank * more};
  });

  return lesson.run(argc, argv,
                    [&](Comm& comm) { train(comm, setup, comm.rank() == 0 ? &outcome : nullptr); });
}
