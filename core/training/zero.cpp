// zero.cpp — plain data parallel and ZeRO-1/2/3 with mixed-precision Adam (zero.hpp).
#include "core/training/zero.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/base/check.hpp"
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

// --- training --------------------------------------------------------------------------------

namespace {

// One rank's training state and its step, as the stage says.
class Trainer {
 public:
  Trainer(Comm& comm, const Config& c, Ledger& ledger)
      : comm_(comm),
        ledger_(ledger),
        c_(c),
        n_(comm.size()),
        me_(comm.rank()),
        units_(units(c.stage, c.shape, n_)),
        samples_(c.batch, n_),
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
    loss_ = alloc<float>(1, Category::data);
    loss_sum_ = alloc<float>(me_ == 0 ? 1 : 0, Category::data);

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

  // One step: forward, backward (with the stage's gradient exchange), Adam, the new weights.
  void step(int k, Run& run) {
    const model::MlpShape& s = c_.shape;
    const std::size_t my_samples = samples_.size(me_), L = s.layers();
    const int first = comm_.next_steps(0);
    {
      auto phase = comm_.phase("load batch");
      const std::size_t from = std::size_t(k) * c_.batch + samples_.begin(me_);
      from_host(x_.view(), teacher_.inputs(from, my_samples));
      from_host(t_.view(), teacher_.targets(from, my_samples));
    }
    {
      auto phase = comm_.phase("forward");
      for (std::size_t l = 0; l < L; ++l) {
        const View<const float> w = layer_weights(l, "forward");
        mlp_->forward_layer(l, w.sub(0, s.dims[l] * s.dims[l + 1]),
                            w.sub(s.dims[l] * s.dims[l + 1], s.dims[l + 1]), x_.view());
        gathered_.reset();  // ZeRO-3: the layer's gathered weights are freed as soon as it is done
      }
      model::mse_loss(loss_.view(), dy_.view(), mlp_->output(), t_.view(), c_.batch, s.out());
    }
    {
      auto phase = comm_.phase("backward");
      View<const float> dz = dy_.view();
      for (std::size_t l = L; l-- > 0;) {
        const std::size_t wn = s.dims[l] * s.dims[l + 1], bn = s.dims[l + 1];
        const View<const float> w = layer_weights(l, "backward");
        View<float> g = ws_g_.view().sub(0, wn + bn);
        dz = mlp_->backward_layer(l, g.sub(0, wn), g.sub(wn, bn), w.sub(0, wn), x_.view(), dz);
        gathered_.reset();
        layer_gradient(l, View<const float>(g));
      }
    }
    exchange_gradients();
    {
      auto phase = comm_.phase("Adam");
      adam_->step(master_.view(), my_gradients());
    }
    new_weights();
    const int last = comm_.next_steps(0) - 1;

    // The step's loss on rank 0 (its own steps, left out of the byte counts).
    coll::reduce(comm_, View<const float>(loss_.view()), me_ == 0 ? loss_sum_.view() : loss_.view(),
                 0, "loss");
    if (me_ == 0) {
      const double total = to_host(View<const float>(loss_sum_.view()))[0];
      comm_.recorder().value("loss", total);
      run.losses.push_back(total);
    }
    run.exchange.push_back({first, last});
  }

  View<float> master() { return master_.view(); }

 private:
  template <class T>
  Buffer<T> alloc(std::size_t n, Category category) {
    return Buffer<T>(ledger_, category, n, comm_.device());
  }
  bool sharded_params() const { return c_.stage == Stage::zero3; }
  bool sharded_grads() const { return c_.stage == Stage::zero2 || c_.stage == Stage::zero3; }
  bool per_layer() const { return sharded_grads(); }  // zero2, zero3: a unit per layer
  std::size_t layer_count(std::size_t l) const {
    return c_.shape.dims[l] * c_.shape.dims[l + 1] + c_.shape.dims[l + 1];
  }
  std::size_t unit_of(std::size_t l) const { return per_layer() ? l : 0; }
  std::size_t offset_in_unit(std::size_t l) const {
    return per_layer() ? 0 : c_.shape.weight_offset(l);
  }
  std::string name(const char* what, std::size_t u) const {
    return units_.size() == 1 ? std::string(what) : fmt::format("{} L{}", what, u);
  }
  View<BFloat16> w16(std::size_t u) {
    return w16_.view().sub(w_offset_[u], sharded_params() ? units_[u].shard : units_[u].padded);
  }
  View<BFloat16> g16(std::size_t u) {
    return g16_.view().sub(g_offset_[u], sharded_grads() ? units_[u].shard : units_[u].padded);
  }
  View<BFloat16> my_chunk(View<BFloat16> full, std::size_t u) {
    return full.sub(std::size_t(me_) * units_[u].shard, units_[u].shard);
  }

  // Layer l's weights in f32, in ws_w_. ZeRO-3 first all-gathers the layer (held in gathered_
  // until the caller is done with it).
  View<const float> layer_weights(std::size_t l, const char* pass) {
    const std::size_t u = unit_of(l), count = layer_count(l);
    View<const BFloat16> layer;
    if (sharded_params()) {
      auto phase = comm_.phase(fmt::format("gather L{} ({})", l, pass));
      gathered_.emplace(alloc<BFloat16>(units_[u].padded, Category::params));
      ops::copy(my_chunk(gathered_->view(), u), View<const BFloat16>(w16(u)));
      coll::all_gather_ring(comm_, gathered_->view(), name("params", u));
      layer = gathered_->view().sub(0, count);
    } else {
      layer = w16(u).sub(offset_in_unit(l), count);
    }
    View<float> w = ws_w_.view().sub(0, count);
    ops::cast(w, layer);
    return w;
  }

  // Layer l's f32 gradient, rounded to bf16 into the gradient buffer; ZeRO-2 and 3 reduce-scatter
  // it at once into my shard and free the rest.
  void layer_gradient(std::size_t l, View<const float> g) {
    const std::size_t u = unit_of(l);
    if (!sharded_grads()) {
      ops::cast(g16(u).sub(offset_in_unit(l), g.size()), g);
      return;
    }
    Buffer<BFloat16> full = alloc<BFloat16>(units_[u].padded, Category::grads);  // zero padding
    ops::cast(full.view().sub(0, g.size()), g);
    {
      auto phase = comm_.phase(fmt::format("reduce-scatter L{}", l));
      reduce_scatter(full.view(), name("grads", u));
    }
    ops::copy(g16(u), View<const BFloat16>(my_chunk(full.view(), u)));
  }

  void reduce_scatter(View<BFloat16> data, const std::string& buffer) {
    if (c_.deterministic)
      coll::reduce_scatter_ordered(comm_, data, buffer);
    else
      coll::reduce_scatter_ring(comm_, data, buffer);
  }

  // After the backward: dp all-reduces the gradients, ZeRO-1 reduce-scatters them (ZeRO-2 and 3
  // did it layer by layer already).
  void exchange_gradients() {
    if (c_.stage == Stage::dp) {
      auto phase = comm_.phase("all-reduce gradients");
      if (c_.deterministic) {
        coll::reduce_scatter_ordered(comm_, g16(0), "grads");
        coll::all_gather_ring(comm_, g16(0), "grads", /*reduced=*/true);
      } else {
        coll::all_reduce_ring_chunked(comm_, g16(0), "grads");
      }
    } else if (c_.stage == Stage::zero1) {
      auto phase = comm_.phase("reduce-scatter gradients");
      reduce_scatter(g16(0), "grads");
    }
  }

  // The bf16 gradients of my part of the master weights, contiguous.
  View<const BFloat16> my_gradients() {
    if (c_.stage == Stage::zero1) return my_chunk(g16(0), 0);
    return g16_.view();  // dp: all of them; zero2, zero3: my shards, one after the other
  }

  // My updated master weights rounded to bf16; ZeRO-1 and 2 all-gather them (ZeRO-3 gathers
  // each layer when it next needs it).
  void new_weights() {
    if (c_.stage == Stage::dp || c_.stage == Stage::zero3) {
      ops::cast(w16_.view(), View<const float>(master_.view()));  // the same layout as master
      return;
    }
    auto phase = comm_.phase("all-gather weights");
    for (std::size_t u = 0; u < units_.size(); ++u) {
      ops::cast(my_chunk(w16(u), u),
                View<const float>(master_.view().sub(m_offset_[u], units_[u].shard)));
      coll::all_gather_ring(comm_, w16(u), name("params", u));
    }
  }

  Comm& comm_;
  Ledger& ledger_;
  const Config& c_;
  int n_, me_;
  std::vector<Unit> units_;
  Partition samples_;
  model::Teacher teacher_;
  std::vector<std::size_t> w_offset_, g_offset_,
      m_offset_;  // each unit's place in w16_, g16_, master_
  Buffer<BFloat16> w16_, g16_;
  Buffer<float> master_;
  std::optional<model::Optimizer> adam_;
  std::optional<model::Mlp> mlp_;
  Buffer<float> ws_w_, ws_g_, x_, t_, dy_, loss_, loss_sum_;
  std::optional<Buffer<BFloat16>> gathered_;
};

}  // namespace

Run train(Comm& comm, const Config& config, Ledger* ledger) {
  DL_CHECK(config.batch >= std::size_t(comm.size()),
           "zero::train: a batch of {} leaves some of {} ranks no sample", config.batch,
           comm.size());
  DL_CHECK(config.adam.kind == model::OptimizerKind::adam,
           "zero::train: mixed precision here is Adam's");
  Run run;
  Ledger& charged = ledger ? *ledger : comm.ledger();
  Trainer trainer(comm, config, charged);
  for (int k = 0; k < config.steps; ++k) trainer.step(k, run);
  run.state = {std::uint64_t(charged.current(Category::params)),
               std::uint64_t(charged.current(Category::grads)),
               std::uint64_t(charged.current(Category::optimizer))};
  run.params_peak = std::uint64_t(charged.peak(Category::params));
  run.master = to_host(View<const float>(trainer.master()));
  return run;
}

// --- the float64 reference -------------------------------------------------------------------

namespace {
double to_bf16(double x) {
  return double(float(BFloat16(float(x))));
}
}  // namespace

Reference reference(const Config& c, int n) {
  const MlpShape& s = c.shape;
  const model::Teacher teacher(s, c.seed);
  const std::vector<float> initial = model::initial_params(s, c.seed);
  Eigen::VectorXd master = model::widen(initial);
  model::ReferenceOptimizer adam(s.params(), c.adam);
  const Partition share{c.batch, n};
  Reference out;
  for (int k = 0; k < c.steps; ++k) {
    const Eigen::VectorXd w = master.unaryExpr([](double x) { return to_bf16(x); });
    Eigen::VectorXd sum = Eigen::VectorXd::Zero(master.size()), g;
    double loss = 0;
    for (int r = 0; r < n; ++r) {
      const std::size_t first = std::size_t(k) * c.batch + share.begin(r), count = share.size(r);
      const model::RowMatrix x = model::widen(teacher.inputs(first, count), count, s.in());
      const model::RowMatrix t = model::widen(teacher.targets(first, count), count, s.out());
      const double weight = double(count) / double(c.batch);  // normalised by the whole batch
      loss += weight * model::reference_loss(s, w, x, t, &g);
      for (Eigen::Index i = 0; i < g.size(); ++i) {
        const double g16 = to_bf16(weight * g[i]);
        sum[i] =
            r == 0 ? g16 : double(float(BFloat16(float(sum[i]) + float(g16))));  // one bf16 add
      }
    }
    out.losses.push_back(loss);
    adam.step(master, sum);
  }
  out.master.assign(master.data(), master.data() + master.size());
  return out;
}

}  // namespace distlab::zero
