// zero.cpp — plain data parallel and ZeRO-1/2/3 with mixed-precision Adam (zero.hpp).
#include "core/training/zero.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

#include "core/base/breaks.hpp"
#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/base/half.hpp"
#include "core/base/partition.hpp"
#include "core/collectives/all_gather_ring.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/collectives/reduce.hpp"
#include "core/collectives/reduce_scatter_ordered.hpp"
#include "core/collectives/reduce_scatter_ring.hpp"
#include "core/training/model_reference.hpp"

namespace distlab::zero {

using model::MlpShape;

const char* to_string(Stage s) {
  switch (s) {
    case Stage::dp:
      return "dp";
    case Stage::zero1:
      return "zero1";
    case Stage::zero2:
      return "zero2";
    case Stage::zero3:
      return "zero3";
  }
  return "?";
}

const char* title(Stage s) {
  switch (s) {
    case Stage::dp:
      return "plain data parallel";
    case Stage::zero1:
      return "ZeRO-1";
    case Stage::zero2:
      return "ZeRO-2";
    case Stage::zero3:
      return "ZeRO-3 (FSDP)";
  }
  return "?";
}

// --- layout and formulas ---------------------------------------------------------------------

std::vector<Unit> units(Stage stage, const MlpShape& shape, int n) {
  const auto rounded = [&](std::size_t c) {
    return (c + std::size_t(n) - 1) / std::size_t(n) * std::size_t(n);
  };
  const std::size_t P = shape.params();
  if (stage == Stage::dp) return {{0, P, P, P}};
  if (stage == Stage::zero1) return {{0, P, rounded(P), rounded(P) / std::size_t(n)}};
  std::vector<Unit> out;  // zero2, zero3: one unit per layer, its W and b
  for (std::size_t l = 0; l < shape.layers(); ++l) {
    const std::size_t count = shape.dims[l] * shape.dims[l + 1] + shape.dims[l + 1];
    out.push_back({shape.weight_offset(l), count, rounded(count), rounded(count) / std::size_t(n)});
  }
  return out;
}

StateBytes state_bytes(Stage stage, const MlpShape& shape, int n) {
  std::uint64_t full = 0, mine = 0;
  for (const Unit& u : units(stage, shape, n)) {
    full += u.padded;
    mine += u.shard;
  }
  constexpr std::uint64_t half = sizeof(BFloat16), state = 3 * sizeof(float);  // master, m, v
  switch (stage) {
    case Stage::dp:
      return {half * full, half * full, state * full};
    case Stage::zero1:
      return {half * full, half * full, state * mine};
    case Stage::zero2:
      return {half * full, half * mine, state * mine};
    case Stage::zero3:
      return {half * mine, half * mine, state * mine};
  }
  return {};
}

double bytes_per_param(Stage stage, int n) {
  switch (stage) {
    case Stage::dp:
      return 16;
    case Stage::zero1:
      return 4 + 12.0 / n;
    case Stage::zero2:
      return 2 + 14.0 / n;
    case Stage::zero3:
      return 16.0 / n;
  }
  return 0;
}

std::string bytes_per_param_formula(Stage stage) {
  switch (stage) {
    case Stage::dp:
      return "2 + 2 + 12 = 16";
    case Stage::zero1:
      return "4 + 12/N";
    case Stage::zero2:
      return "2 + 14/N";
    case Stage::zero3:
      return "16/N";
  }
  return "?";
}

std::uint64_t step_bytes_sent(Stage stage, const MlpShape& shape, int n, int k) {
  if (n == 1) return 0;
  std::uint64_t elements = 0;
  for (const Unit& u : units(stage, shape, n)) {
    switch (stage) {
      case Stage::dp:
        elements += coll::ring_chunked_traffic(k, n, u.count).sent;
        break;  // an all-reduce
      case Stage::zero1:
      case Stage::zero2:
        elements += 2 * std::uint64_t(n - 1) * u.shard;
        break;  // reduce-scatter + all-gather
      case Stage::zero3:
        elements += 3 * std::uint64_t(n - 1) * u.shard;
        break;  // + the backward's all-gather
    }
  }
  return elements * sizeof(BFloat16);
}

Cost step_cost(Stage stage, const MlpShape& shape, int n) {
  Cost c;
  const auto add = [&c](const Cost& more, double times) {
    c.messages += times * more.messages;
    c.bytes_moved += times * more.bytes_moved;
    c.bytes_reduced += times * more.bytes_reduced;
  };
  for (const Unit& u : units(stage, shape, n)) {
    const double bytes = double(u.padded) * sizeof(BFloat16);
    const Cost scatter = predict_collective(Collective::reduce_scatter, true, n, bytes);
    const Cost gather = predict_collective(Collective::all_gather, true, n, bytes);
    switch (stage) {
      case Stage::dp:
        add(predict_all_reduce(coll::AllReduceAlgo::ring_chunked, n,
                               double(u.count) * sizeof(BFloat16)),
            1);
        break;
      case Stage::zero1:
      case Stage::zero2:
        add(scatter, 1), add(gather, 1);
        break;
      case Stage::zero3:
        add(scatter, 1), add(gather, 2);
        break;
    }
  }
  return c;
}

std::string step_cost_formula(Stage stage) {
  switch (stage) {
    case Stage::dp:
      return "a ring all-reduce";
    case Stage::zero1:
      return "reduce-scatter + all-gather";
    case Stage::zero2:
      return "L reduce-scatters + all-gathers";
    case Stage::zero3:
      return "L x (2 all-gathers + reduce-scatter)";
  }
  return {};
}

std::string step_bytes_formula(Stage stage) {
  return stage == Stage::zero3 ? "3 Psi" : "2 Psi";
}

std::vector<std::int64_t> master_positions(Stage stage, const MlpShape& shape, int n, int rank) {
  std::vector<std::int64_t> out;
  for (const Unit& u : units(stage, shape, n)) {
    const std::size_t first = stage == Stage::dp ? 0 : std::size_t(rank) * u.shard;
    for (std::size_t j = 0; j < u.shard; ++j)
      out.push_back(first + j < u.count ? std::int64_t(u.begin + first + j) : -1);
  }
  return out;
}

// --- the replica: one rank's buffers and the pieces of a step ---------------------------------

Replica::Replica(Comm& comm, const Config& c, Ledger& ledger)
    : comm_(comm),
      ledger_(ledger),
      c_(c),
      n_(comm.size()),
      me_(comm.rank()),
      units_(zero::units(c.stage, c.shape, n_)),
      samples_{c.batch, n_},
      teacher_(c.shape, c.seed) {
  std::size_t w_len = 0, g_len = 0, mine = 0, widest = 0;
  for (const Unit& u : units_) {
    w_offset_.push_back(w_len);
    g_offset_.push_back(g_len);
    m_offset_.push_back(mine);
    w_len += sharded_params() ? u.shard : u.padded;
    g_len += sharded_grads() ? u.shard : u.padded;
    mine += u.shard;
  }
  for (std::size_t l = 0; l < c.shape.layers(); ++l) widest = std::max(widest, layer_count(l));
  // The model state (params, grads, optimizer: the 16 bytes per parameter) ...
  w16_ = alloc<BFloat16>(w_len, Category::params);
  g16_ = alloc<BFloat16>(g_len, Category::grads);
  master_ = alloc<float>(mine, Category::optimizer);
  adam_.emplace(ledger_, comm.device(), mine, c.adam);
  // ... and the rest: the model's activations, f32 workspaces for one layer, my data.
  mlp_.emplace(ledger_, comm.device(), c.shape, samples_.size(me_));
  ws_w_ = alloc<float>(widest, Category::activations);
  ws_g_ = alloc<float>(widest, Category::activations);
  x_ = alloc<float>(samples_.size(me_) * c.shape.in(), Category::data);
  t_ = alloc<float>(samples_.size(me_) * c.shape.out(), Category::data);
  dy_ = alloc<float>(samples_.size(me_) * c.shape.out(), Category::activations);

  // The starting weights: my part of the master copy, and the bf16 weights I hold.
  const std::vector<float> initial = model::initial_params(c.shape, c.seed);
  std::vector<float> part;
  for (std::int64_t p : master_positions(c.stage, c.shape, n_, me_))
    part.push_back(p < 0 ? 0.0f : initial[std::size_t(p)]);
  from_host(master_.view(), part);
  if (sharded_params()) {
    ops::cast(w16_.view(), View<const float>(master_.view()));
  } else {
    std::vector<float> full(w_len, 0.0f);
    for (std::size_t u = 0; u < units_.size(); ++u)
      std::copy_n(initial.begin() + std::ptrdiff_t(units_[u].begin), units_[u].count,
                  full.begin() + std::ptrdiff_t(w_offset_[u]));
    Buffer<float> staged = alloc<float>(w_len, Category::data);
    from_host(staged.view(), full);
    ops::cast(w16_.view(), View<const float>(staged.view()));
  }
}

std::size_t Replica::layer_count(std::size_t l) const {
  return c_.shape.dims[l] * c_.shape.dims[l + 1] + c_.shape.dims[l + 1];
}

std::size_t Replica::unit_of(std::size_t l) const {
  return units_.size() == 1 ? 0 : l;
}

std::string Replica::name(const char* what, std::size_t u) const {
  return units_.size() == 1 ? std::string(what) : fmt::format("{} L{}", what, u);
}

void Replica::load_batch(int k) {
  auto phase = comm_.phase("load batch");
  const std::size_t my_samples = samples_.size(me_);
  const std::size_t from = std::size_t(k) * c_.batch + samples_.begin(me_);
  from_host(x_.view(), teacher_.inputs(from, my_samples));
  from_host(t_.view(), teacher_.targets(from, my_samples));
}

View<BFloat16> Replica::params(std::size_t u) {
  return w16_.view().sub(w_offset_[u], sharded_params() ? units_[u].shard : units_[u].padded);
}

View<BFloat16> Replica::grads(std::size_t u) {
  return g16_.view().sub(g_offset_[u], sharded_grads() ? units_[u].shard : units_[u].padded);
}

View<BFloat16> Replica::mine(View<BFloat16> whole, std::size_t u) const {
  return whole.sub(std::size_t(me_) * units_[u].shard, units_[u].shard);
}

View<const float> Replica::master(std::size_t u) {
  return View<const float>(master_.view().sub(m_offset_[u], units_[u].shard));
}

View<const float> Replica::weights(std::size_t l) {
  DL_CHECK(!sharded_params(), "zero::Replica::weights: ZeRO-3 holds a shard; gather the layer");
  const std::size_t u = unit_of(l), at = units_.size() == 1 ? c_.shape.weight_offset(l) : 0;
  return widen(l, View<const BFloat16>(params(u).sub(at, layer_count(l))));
}

View<const float> Replica::widen(std::size_t l, View<const BFloat16> layer) {
  View<float> w = ws_w_.view().sub(0, layer_count(l));
  ops::cast(w, layer.sub(0, layer_count(l)));
  return w;
}

void Replica::forward(std::size_t l, View<const float> w) {
  const model::MlpShape& s = c_.shape;
  const std::size_t wn = s.dims[l] * s.dims[l + 1];
  mlp_->forward_layer(l, w.sub(0, wn), w.sub(wn, s.dims[l + 1]), x_.view());
}

void Replica::loss() {
  model::mse_loss(loss_.view(), dy_.view(), mlp_->output(), t_.view(), c_.batch, c_.shape.out());
}

View<const float> Replica::backward(std::size_t l, View<const float> w) {
  const model::MlpShape& s = c_.shape;
  const std::size_t wn = s.dims[l] * s.dims[l + 1], bn = s.dims[l + 1];
  if (l + 1 == s.layers()) dz_ = dy_.view();  // the backward starts from dL/dy
  View<float> g = ws_g_.view().sub(0, wn + bn);
  dz_ = mlp_->backward_layer(l, g.sub(0, wn), g.sub(wn, bn), w.sub(0, wn), x_.view(), dz_);
  return View<const float>(g);
}

void Replica::forward_pass(int k) {
  load_batch(k);
  auto phase = comm_.phase("forward");
  for (std::size_t l = 0; l < layers(); ++l) forward(l, weights(l));
  loss();
}

void Replica::backward_pass() {
  auto phase = comm_.phase("backward");
  for (std::size_t l = layers(); l-- > 0;) keep_gradient(l, backward(l, weights(l)));
}

void Replica::keep_gradient(std::size_t l, View<const float> g) {
  DL_CHECK(!sharded_grads(), "zero::Replica::keep_gradient: this stage shards the gradients");
  ops::cast(grads(0).sub(c_.shape.weight_offset(l), g.size()), g);
}

Buffer<BFloat16> Replica::whole(std::size_t u, Category category) {
  return alloc<BFloat16>(units_[u].padded, category);  // a new buffer is zeros
}

void Replica::reduce_scatter(View<BFloat16> whole, std::size_t u) {
  if (c_.deterministic)
    coll::reduce_scatter_ordered(comm_, whole, name("grads", u));
  else
    coll::reduce_scatter_ring(comm_, whole, name("grads", u));
}

void Replica::all_gather(View<BFloat16> whole, std::size_t u) {
  coll::all_gather_ring(comm_, whole, name("params", u));
}

Buffer<BFloat16> Replica::reduce_scatter_gradient(std::size_t l, View<const float> g) {
  const std::size_t u = unit_of(l);
  Buffer<BFloat16> full = whole(u, Category::grads);  // zeros: the padding stays 0
  ops::cast(full.view().sub(0, g.size()), g);
  {
    auto phase = comm_.phase(fmt::format("reduce-scatter L{}", l));
    reduce_scatter(full.view(), u);
  }
  ops::copy(grads(u), View<const BFloat16>(mine(full.view(), u)));
  return full;
}

Buffer<BFloat16> Replica::gather(std::size_t l, const char* pass) {
  DL_CHECK(sharded_params(), "zero::Replica::gather: only ZeRO-3 holds a shard of the weights");
  const std::size_t u = unit_of(l);
  auto phase = comm_.phase(fmt::format("gather L{} ({})", l, pass));
  Buffer<BFloat16> full = alloc<BFloat16>(units_[u].padded, Category::params);
  ops::copy(mine(full.view(), u), View<const BFloat16>(params(u)));
  all_gather(full.view(), u);
  return full;
}

AsyncHandle Replica::all_reduce_async(View<BFloat16> part, const std::string& buffer) {
  const bool ordered = c_.deterministic;
  return comm_.start([part, buffer, ordered](Comm& c) {
    if (ordered) {  // the same sums as the reference's: in rank order
      coll::reduce_scatter_ordered(c, part, buffer);
      coll::all_gather_ring(c, part, buffer, /*reduced=*/true);
    } else {
      coll::all_reduce_ring_chunked(c, part, buffer);
    }
  });
}

Replica::Fetch Replica::gather_async(std::size_t l) {
  DL_CHECK(sharded_params(),
           "zero::Replica::gather_async: only ZeRO-3 holds a shard of the weights");
  const std::size_t u = unit_of(l);
  Fetch f{alloc<BFloat16>(units_[u].padded, Category::params), {}};
  ops::copy(mine(f.layer.view(), u), View<const BFloat16>(params(u)));
  const View<BFloat16> whole = f.layer.view();
  const std::string buffer = name("params", u);
  f.done = comm_.start([whole, buffer](Comm& c) { coll::all_gather_ring(c, whole, buffer); });
  return f;
}

void Replica::adam(View<const BFloat16> my_grads) {
  if (recording_ && before_.gradient.empty())  // for the step's check
    for (const BFloat16 x : to_host(my_grads)) before_.gradient.push_back(float(x));
  auto phase = comm_.phase("Adam");
  adam_->step(master_.view(), my_grads);
}

std::vector<float> Replica::my_weights16() {
  std::vector<float> out;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    View<BFloat16> w = params(u);
    if (c_.stage != Stage::dp && !sharded_params()) w = mine(w, u);
    for (const BFloat16 x : to_host(View<const BFloat16>(w))) out.push_back(float(x));
  }
  return out;
}

void Replica::record_before() {
  before_ = state();
  recording_ = true;
}

StepState Replica::state() {
  return {to_host(View<const float>(master_.view())), to_host(adam_->m()), to_host(adam_->v()), {}};
}

void Replica::hold(Buffer<BFloat16> buffer) {
  held_.push_back(std::move(buffer));
}

// --- plain data parallel's step, and the loop around any step ---------------------------------

void dp_step(Replica& rep, int k) {
  Comm& comm = rep.comm();
  rep.forward_pass(k);
  rep.backward_pass();
  {
    auto phase = comm.phase("all-reduce gradients");
    if (rep.config().deterministic) {  // the same sums as the sharded stages: in rank order
      coll::reduce_scatter_ordered(comm, rep.grads(0), "grads");
      coll::all_gather_ring(comm, rep.grads(0), "grads", /*reduced=*/true);
    } else {
      coll::all_reduce_ring_chunked(comm, rep.grads(0), "grads");
    }
  }
  rep.adam(View<const BFloat16>(rep.grads(0)));
  ops::cast(rep.params(0), rep.master(0));  // every rank holds all of it: no gather
}

Run train(Comm& comm, const Config& config, const Step& step, Ledger* ledger,
          const StepCheck& check) {
  DL_CHECK(config.batch >= std::size_t(comm.size()),
           "zero::train: a batch of {} leaves some of {} ranks no sample", config.batch,
           comm.size());
  DL_CHECK(config.adam.kind == model::OptimizerKind::adam,
           "zero::train: mixed precision here is Adam's");
  Run run;
  Ledger& charged = ledger ? *ledger : comm.ledger();
  const int me = comm.rank();
  Replica rep(comm, config, charged);
  Buffer<float> loss_sum(charged, Category::data, me == 0 ? 1 : 0, comm.device());
  PhaseArgs train_step;  // marks each iteration: the viewer starts its shards over at each
  train_step.op = kTrainStepOp;
  for (int k = 0; k < config.steps; ++k) {
    auto iteration = comm.phase(fmt::format("step {}", k + 1), train_step);
    if (check) rep.record_before();  // the state the step starts from, for its check
    const double t0 = now_us();
    const int first = comm.next_steps(0);
    step(rep, k);
    const int last = comm.next_steps(0) - 1;
    const double share = check ? double(to_host(rep.loss_value())[0]) : NAN;
    // The step's loss on rank 0 (its own steps, left out of the byte counts).
    coll::reduce(comm, rep.loss_value(), me == 0 ? loss_sum.view() : rep.loss_buffer(), 0, "loss");
    if (me == 0) {
      const double total = to_host(View<const float>(loss_sum.view()))[0];
      comm.recorder().value("loss", total);
      run.losses.push_back(total);
    }
    run.exchange.push_back({first, last});
    run.step_seconds.push_back((now_us() - t0) * 1e-6);
    if (check) {
      const bool tracing = comm.recorder().enabled();
      comm.recorder().set_enabled(false);
      StepState after = rep.state();
      after.loss = share;
      check(k, rep.before(), after, me == 0 ? run.losses.back() : NAN);
      comm.recorder().set_enabled(tracing);
    }
  }
  run.state = {std::uint64_t(charged.current(Category::params)),
               std::uint64_t(charged.current(Category::grads)),
               std::uint64_t(charged.current(Category::optimizer))};
  run.params_peak = std::uint64_t(charged.peak(Category::params));
  run.activations_peak = std::uint64_t(charged.peak(Category::activations));
  run.master = to_host(View<const float>(rep.all_master()));
  run.weights16 = rep.my_weights16();
  return run;
}

// --- the float64 reference -------------------------------------------------------------------

ErrorBound::Terms gradient_error(int n, double magnitude, double float32) {
  return {2.0 * n * 0x1p-8 * magnitude, (1 + n * 0x1p-7) * float32 + n * 0x1p-133};
}

StepGradient reference_gradient(const Config& c, int n, const std::vector<double>& master,
                                int step) {
  const MlpShape& s = c.shape;
  const model::Teacher teacher(s, c.seed);
  Eigen::VectorXd w(Eigen::Index(master.size()));
  // bf16 rounding by the reference's own code (model::round_to_bf16), not BFloat16's.
  for (std::size_t i = 0; i < master.size(); ++i)
    w[Eigen::Index(i)] = model::round_to_bf16(master[i]);
  const Partition share{c.batch, n};
  const std::size_t widest = *std::max_element(s.dims.begin(), s.dims.end());
  StepGradient out;
  out.sum.assign(master.size(), 0.0);
  out.magnitude.assign(master.size(), 0.0);
  out.float32.assign(master.size(), 0.0);
  Eigen::VectorXd g;
  for (int r = 0; r < n; ++r) {
    const std::size_t first = std::size_t(step) * c.batch + share.begin(r), count = share.size(r);
    const model::RowMatrix x = model::widen(teacher.inputs(first, count), count, s.in());
    const model::RowMatrix t = model::widen(teacher.targets(first, count), count, s.out());
    const double weight = double(count) / double(c.batch);  // normalised by the whole batch
    out.shares.push_back(weight * model::reference_loss(s, w, x, t, &g));
    out.loss += out.shares.back();
    g *= weight;
    for (std::size_t i = 0; i < master.size(); ++i) {
      const double g16 = model::round_to_bf16(double(float(g[Eigen::Index(i)])));
      out.sum[i] = r == 0 ? g16 : model::round_to_bf16(out.sum[i] + g16);
      out.magnitude[i] += std::fabs(g16);
    }
    const double gamma = 4 * 0x1p-24 * double(count + widest);  // float32's, per layer
    for (std::size_t l = 0; l < s.layers(); ++l) {
      const Eigen::Index begin = Eigen::Index(s.weight_offset(l));
      const Eigen::Index end = Eigen::Index(s.bias_offset(l) + s.dims[l + 1]);
      const double term = gamma * g.segment(begin, end - begin).cwiseAbs().maxCoeff();
      for (Eigen::Index i = begin; i < end; ++i) out.float32[std::size_t(i)] += term;
    }
  }
  return out;
}

}  // namespace distlab::zero
