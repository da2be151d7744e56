#include "core/training/gpt.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/base/check.hpp"
#include "core/base/units.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/runtime/data.hpp"
#include "core/training/tensor_parallel.hpp"

namespace distlab::gpt {

namespace {

constexpr std::uint64_t kInitStream = 14;  // data.hpp's "rank" argument for the weights

template <class T>
View<const T> cv(View<T> v) {
  return v;
}

// A compute phase's args for the trace: forward or backward.
PhaseArgs op(const char* what) {
  PhaseArgs a;
  a.op = what;
  return a;
}

}  // namespace

// --- the model's tensors -----------------------------------------------------------------------

void Config::check(int tp, int pp) const {
  if (vocab < 2 || d < 1 || heads < 1 || layers < 1 || seq < 1)
    throw UsageError(
        fmt::format("the model needs vocab >= 2 and d, heads, layers, context >= 1 "
                    "(got {})",
                    describe()));
  if (d % heads != 0)
    throw UsageError(fmt::format("--d {} must divide into the {} heads", d, heads));
  if (heads % static_cast<std::size_t>(tp) != 0)
    throw UsageError(
        fmt::format("the {} heads must divide over --tp {} (whole heads per rank)", heads, tp));
  if (layers % static_cast<std::size_t>(pp) != 0)
    throw UsageError(
        fmt::format("the {} layers must divide over --pp {} (as many per stage)", layers, pp));
}

std::string Config::describe() const {
  return fmt::format("vocab {}, d {}, {} heads, {} layers, context {} ({} parameters)", vocab, d,
                     heads, layers, seq, parameter_count(*this));
}

std::vector<Tensor> tensors(const Config& c) {
  std::vector<Tensor> out;
  std::size_t offset = 0;
  auto add = [&](std::string name, std::size_t rows, std::size_t cols, Split split, int block) {
    out.push_back({std::move(name), rows, cols, split, block, offset});
    offset += rows * cols;
  };
  add("wte", c.vocab, c.d, Split::whole, -1);
  add("wpe", c.seq, c.d, Split::whole, -1);
  for (std::size_t l = 0; l < c.layers; ++l) {
    const int b = static_cast<int>(l);
    auto name = [&](const char* what) { return fmt::format("block {} {}", l, what); };
    add(name("ln1 gain"), 1, c.d, Split::whole, b);
    add(name("ln1 bias"), 1, c.d, Split::whole, b);
    add(name("wq"), c.d, c.d, Split::head_columns, b);
    add(name("wk"), c.d, c.d, Split::head_columns, b);
    add(name("wv"), c.d, c.d, Split::head_columns, b);
    add(name("wo"), c.d, c.d, Split::head_rows, b);
    add(name("ln2 gain"), 1, c.d, Split::whole, b);
    add(name("ln2 bias"), 1, c.d, Split::whole, b);
    add(name("w1"), c.d, c.mlp(), Split::columns, b);
    add(name("w2"), c.mlp(), c.d, Split::rows, b);
  }
  add("lnf gain", 1, c.d, Split::whole, -1);
  add("lnf bias", 1, c.d, Split::whole, -1);
  add("head", c.d, c.vocab, Split::whole, -1);
  return out;
}

std::size_t parameter_count(const Config& c) {
  const auto all = tensors(c);
  return all.back().offset + all.back().size();
}

float initial_value(const Config& c, const Tensor& t, std::size_t element) {
  const bool gain = t.name.ends_with("gain"), bias = t.name.ends_with("bias");
  if (gain) return 1.0f;
  if (bias) return 0.0f;
  double scale = 0.02 * std::sqrt(3.0);  // uniform with GPT-2's standard deviation 0.02
  if (t.name.ends_with("wo") || t.name.ends_with("w2"))
    scale /= std::sqrt(2.0 * static_cast<double>(c.layers));
  return static_cast<float>(scale * input_value<double>(c.seed, kInitStream, t.offset + element));
}

std::vector<float> initial_weights(const Config& c) {
  std::vector<float> w(parameter_count(c));
  for (const auto& t : tensors(c))
    for (std::size_t i = 0; i < t.size(); ++i) w[t.offset + i] = initial_value(c, t, i);
  return w;
}

// --- a rank's part -------------------------------------------------------------------------------

Layout::Layout(const Config& c, int pp_rank, int pp_size, int tp_rank, int tp_size)
    : c_(c), tp_rank_(tp_rank), tp_size_(tp_size) {
  c.check(tp_size, pp_size);
  const int per_stage = static_cast<int>(c.layers) / pp_size;
  first_block_ = pp_rank * per_stage;
  end_block_ = first_block_ + per_stage;
  first_stage_ = pp_rank == 0;
  last_stage_ = pp_rank == pp_size - 1;
  const auto T = static_cast<std::size_t>(tp_size);
  for (const Tensor& t : tensors(c)) {
    const bool mine = t.block >= 0 ? t.block >= first_block_ && t.block < end_block_
                      : t.name.starts_with("w")  // wte, wpe
                          ? first_stage_
                          : last_stage_;
    if (!mine) continue;
    const std::size_t size = t.split == Split::whole ? t.size() : t.size() / T;
    parts_.push_back({t, size_, size});
    size_ += size;
  }
}

std::size_t Layout::global_index(const Part& p, std::size_t i) const {
  const Tensor& t = p.tensor;
  const auto t_rank = static_cast<std::size_t>(tp_rank_);
  const std::size_t dh = c_.head_dim(), hl = local_heads(), ml = local_mlp();
  switch (t.split) {
    case Split::whole:
      return t.offset + i;
    case Split::head_columns: {  // stored head by head: [local head][row][column of the head]
      const std::size_t head = i / (t.rows * dh), row = i / dh % t.rows, e = i % dh;
      return t.offset + row * t.cols + (t_rank * hl + head) * dh + e;
    }
    case Split::head_rows:  // the heads' rows, contiguous
      return t.offset + t_rank * hl * dh * t.cols + i;
    case Split::columns:  // (rows, ml): columns [t ml, (t + 1) ml)
      return t.offset + i / ml * t.cols + t_rank * ml + i % ml;
    case Split::rows:
      return t.offset + t_rank * ml * t.cols + i;
  }
  return t.offset + i;
}

const Layout::Part& Layout::part(const std::string& name) const {
  for (const auto& p : parts_)
    if (p.tensor.name == name) return p;
  DL_FAIL("this rank holds no tensor '{}'", name);
}

// --- a stage: forward and backward --------------------------------------------------------------

// Where a block's tensors sit in the rank's flat vector.
struct Stage::Block {
  std::size_t ln1g, ln1b, wq, wk, wv, wo, ln2g, ln2b, w1, w2;
};

// What a block's forward keeps for its backward, beside its input (Recompute, gpt.hpp).
struct Stage::Kept {
  Buffer<float> a, mean1, rstd1, q, k, v, p, ctx, x1, m, mean2, rstd2, h, gg;
};

// What forward keeps of one micro-batch for its backward.
struct Stage::Slot {
  std::vector<Buffer<float>> xs;  // the stage's input, then each block's output
  std::vector<Kept> blocks;       // empty under full recompute
  Buffer<std::int32_t> ids, targets;
  Buffer<float> xlast;  // sequence parallel: the last block's output, all-gathered for the head
  Buffer<float> xf, meanf, rstdf, logits, dlogits, losses, loss;
  std::vector<Block> where;
};

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    if (name == to_string(r)) return r;
  throw UsageError(
      fmt::format("--recompute {}: expected none, selective or full", name.empty() ? "''" : name));
}

Stage::Stage(Comm& tp, const Config& c, const Layout& layout, std::size_t batch, int slots,
             StageOptions options)
    : tp_(tp),
      c_(c),
      layout_(layout),
      batch_(batch),
      dims_{batch * c.seq,
            c.d,
            c.seq,
            batch,
            c.head_dim(),
            layout.local_heads(),
            layout.local_mlp(),
            1.0f / std::sqrt(static_cast<float>(c.head_dim()))},
      options_(options),
      kept_ledger_(nullptr, &tp.ledger()),
      recompute_ledger_(nullptr, &tp.ledger()) {
  DL_CHECK(slots >= 1 && batch >= 1, "a stage needs a slot and a batch (got {} and {})", slots,
           batch);
  const std::size_t N = tokens(), d = c.d, S = c.seq, dh = c.head_dim(), ml = layout.local_mlp();
  auto act = [&](std::size_t n) { return tp.alloc<float>(n, Category::activations); };
  const bool sp = options.sequence_parallel;
  DL_CHECK(!sp || (layout.first_stage() && layout.last_stage()),
           "sequence parallelism here runs the whole model as one pipeline stage");
  DL_CHECK(!sp || N % static_cast<std::size_t>(tp.size()) == 0,
           "sequence parallelism: the {} tokens do not divide over the {} tp ranks", N, tp.size());
  rows_ = sp ? N / static_cast<std::size_t>(tp.size()) : N;
  row0_ = sp ? rows_ * static_cast<std::size_t>(tp.rank()) : 0;
  std::vector<Block> where;
  for (int l = layout.first_block(); l < layout.end_block(); ++l) {
    auto at = [&](const char* what) {
      return layout.part(fmt::format("block {} {}", l, what)).offset;
    };
    where.push_back({at("ln1 gain"), at("ln1 bias"), at("wq"), at("wk"), at("wv"), at("wo"),
                     at("ln2 gain"), at("ln2 bias"), at("w1"), at("w2")});
  }
  for (int k = 0; k < slots; ++k) {
    Slot& s = slots_.emplace_back();
    s.where = where;
    // Each block's input is kept (on the kept ledger); the stage's output is the next one's.
    for (std::size_t l = 0; l < where.size(); ++l)
      s.xs.emplace_back(kept_ledger_, Category::activations, rows_ * d, tp.device());
    s.xs.push_back(act(rows_ * d));
    if (options.recompute != Recompute::full) {
      s.blocks.resize(where.size());
      if (!options.charge_per_pass)
        for (std::size_t l = 0; l < where.size(); ++l) keep(s, l);
    }
    if (layout.first_stage()) s.ids = tp.alloc<std::int32_t>(N, Category::data);
    if (layout.last_stage()) {
      s.targets = tp.alloc<std::int32_t>(N, Category::data);
      if (sp) s.xlast = act(N * d);
      s.xf = act(N * d);
      s.meanf = act(N);
      s.rstdf = act(N);
      s.logits = act(N * c.vocab);
      s.dlogits = act(N * c.vocab);
      s.losses = act(N);
      s.loss = act(1);
    }
  }
  if (options.recompute == Recompute::full) {
    recomputed_ = std::make_unique<Kept>();
    if (!options.charge_per_pass) keep(slots_.front(), 0);
  }
  if (options.recompute == Recompute::selective)
    scores_ = Buffer<float>(recompute_ledger_, Category::activations, S * S, tp.device());
  std::vector<float> mask(S * S, 0.0f);
  for (std::size_t r = 0; r < S; ++r)
    for (std::size_t col = r + 1; col < S; ++col) mask[r * S + col] = -INFINITY;
  mask_ = tp.alloc_from(mask, Category::activations);
  std::vector<std::int32_t> positions(N);
  for (std::size_t i = 0; i < N; ++i) positions[i] = static_cast<std::int32_t>(i % S);
  positions_ = tp.alloc_from(positions, Category::data);
  auto scratch = [&](std::size_t n) { return tp.alloc<float>(n, Category::activations); };
  dx_ = scratch(N * d);
  da_ = scratch(N * d);
  dq_ = scratch(N * dh);
  dk_ = scratch(N * dh);
  dv_ = scratch(N * dh);
  dc_ = scratch(N * dh);
  dp_ = scratch(S * S);
  dh_ = scratch(N * ml);
  dlogits_ = scratch(layout.last_stage() ? N * c.vocab : 1);
  if (sp) {
    gathered_ = scratch(N * d);
    regathered_ = scratch(N * d);
  }
}

Stage::~Stage() = default;

Stage::Kept& Stage::kept(Slot& s, std::size_t l) {
  return recomputed_ ? *recomputed_ : s.blocks[l];
}

void Stage::keep(Slot& s, std::size_t l) {
  Kept& k = kept(s, l);
  if (!k.a.empty()) return;
  Ledger& ledger = recomputed_ ? recompute_ledger_ : kept_ledger_;
  auto act = [&](std::size_t n) {
    return Buffer<float>(ledger, Category::activations, n, tp_.device());
  };
  const auto [N, d, S, B, dh, hl, ml, scale] = dims_;
  const std::size_t R = rows_;  // my rows: all N without sequence parallelism
  k.a = act(R * d);
  k.mean1 = act(R);
  k.rstd1 = act(R);
  k.q = act(hl * N * dh);
  k.k = act(hl * N * dh);
  k.v = act(hl * N * dh);
  if (options_.recompute != Recompute::selective) k.p = act(hl * B * S * S);
  k.ctx = act(hl * N * dh);
  k.x1 = act(R * d);
  k.m = act(R * d);
  k.mean2 = act(R);
  k.rstd2 = act(R);
  k.h = act(N * ml);
  if (!options_.gelu_in_place) k.gg = act(N * ml);
}

std::vector<Stage::KeptTensor> Stage::kept_tensors(int slot, int l) const {
  const Slot& s = slots_.at(static_cast<std::size_t>(slot));
  const auto li = static_cast<std::size_t>(l);
  std::vector<KeptTensor> out{{"x", s.xs.at(li).size()}};
  if (s.blocks.empty()) return out;
  const Kept& k = s.blocks.at(li);
  const std::pair<const char*, const Buffer<float>*> all[] = {
      {"a", &k.a},         {"mean1", &k.mean1}, {"rstd1", &k.rstd1}, {"q", &k.q},       {"k", &k.k},
      {"v", &k.v},         {"p", &k.p},         {"ctx", &k.ctx},     {"x1", &k.x1},     {"m", &k.m},
      {"mean2", &k.mean2}, {"rstd2", &k.rstd2}, {"h", &k.h},         {"gelu(h)", &k.gg}};
  for (const auto& [name, buffer] : all)
    if (!buffer->empty()) out.push_back({name, buffer->size()});
  return out;
}

void Stage::scores(View<float> p, View<const float> q, View<const float> k) {
  const auto [N, d, S, B, dh, hl, ml, scale] = dims_;
  ops::gemm(p, q, k, S, S, dh, false, true, scale);
  ops::add(p, cv(mask_.view()));
  ops::softmax_rows(p, cv(p), S, S);
}

View<float> Stage::head(Buffer<float>& m, std::size_t j) const {
  return m.view().sub(j * dims_.N * dims_.dh, dims_.N * dims_.dh);
}

View<float> Stage::mine(View<float> whole) const {
  if (!options_.sequence_parallel) return whole;
  return whole.sub(row0_ * c_.d, rows_ * c_.d);
}

View<const float> Stage::gather(View<const float> my, Buffer<float>& into, const char* phase_name,
                                const char* buffer) {
  if (!options_.sequence_parallel) return my;
  ops::copy(mine(into.view()), my);
  tp::sp_all_gather(tp_, into.view(), phase_name, buffer);
  return into.view();
}

void Stage::sync_replicated(View<float> grads) {
  if (!options_.sequence_parallel) return;
  // Each block's LayerNorms and the embeddings: computed on my rows. The final LayerNorm and the
  // head run on every row on every rank (after the all-gather): whole already.
  std::vector<const Layout::Part*> parts;
  std::size_t n = 0;
  for (const auto& p : layout_.parts())
    if (p.tensor.split == Split::whole &&
        (p.tensor.block >= 0 || p.tensor.name == "wte" || p.tensor.name == "wpe")) {
      parts.push_back(&p);
      n += p.size;
    }
  Buffer<float> packed = tp_.alloc<float>(n, Category::grads);
  std::size_t at = 0;
  for (const auto* p : parts) {
    ops::copy(packed.view().sub(at, p->size), cv(grads.sub(p->offset, p->size)));
    at += p->size;
  }
  {
    auto phase = tp_.phase("replicated gradients: all-reduce");
    coll::all_reduce(tp_, packed.view(), coll::AllReduceAlgo::ring_chunked,
                     "replicated grads (tp)");
  }
  at = 0;
  for (const auto* p : parts) {
    ops::copy(grads.sub(p->offset, p->size), cv(packed.view().sub(at, p->size)));
    at += p->size;
  }
}

View<float> Stage::sequence(View<float> v, std::size_t b, std::size_t width) const {
  return v.sub(b * dims_.S * width, dims_.S * width);
}

View<const float> Stage::forward(int slot, View<const float> params, View<const std::int32_t> ids,
                                 View<const std::int32_t> targets, View<const float> x,
                                 float loss_scale) {
  Slot& s = slots_.at(static_cast<std::size_t>(slot));
  const std::size_t N = tokens(), d = c_.d;
  if (layout_.first_stage()) {
    // x = wte[token] + wpe[position]
    auto phase = tp_.phase("embed", op("forward"));
    ops::copy(s.ids.view(), ids);
    const auto& wte = layout_.part("wte");
    const auto& wpe = layout_.part("wpe");
    ops::gather_rows(s.xs[0].view(), params.sub(wte.offset, wte.size),
                     cv(s.ids.view()).sub(row0_, rows_), d);
    ops::gather_rows(mine(da_.view()), params.sub(wpe.offset, wpe.size),
                     cv(positions_.view()).sub(row0_, rows_), d);
    ops::add(s.xs[0].view(), cv(mine(da_.view())));
  } else {
    ops::copy(s.xs[0].view(), x);
  }
  for (std::size_t l = 0; l < s.where.size(); ++l)
    block_forward(s, static_cast<int>(l), params, s.xs[l + 1].view());
  if (!layout_.last_stage()) return s.xs.back().view();
  // The head: LayerNorm, logits = xf head, and each token's cross-entropy.
  auto phase = tp_.phase("head and loss", op("forward"));
  const auto& g = layout_.part("lnf gain");
  const auto& b = layout_.part("lnf bias");
  const auto& head = layout_.part("head");
  const View<const float> xlast =
      gather(cv(s.xs.back().view()), s.xlast, tp::kFGatherPhase, "x (the head's)");
  ops::layernorm_forward(s.xf.view(), s.meanf.view(), s.rstdf.view(), xlast,
                         params.sub(g.offset, g.size), params.sub(b.offset, b.size), N, d,
                         c_.ln_eps);
  ops::gemm(s.logits.view(), cv(s.xf.view()), params.sub(head.offset, head.size), N, c_.vocab, d);
  ops::copy(s.targets.view(), targets);
  ops::cross_entropy(s.losses.view(), s.dlogits.view(), cv(s.logits.view()), targets, N, c_.vocab,
                     loss_scale);
  ops::sum(s.loss.view(), cv(s.losses.view()));
  ops::scale(s.loss.view(), loss_scale);
  return s.loss.view();
}

void Stage::block_forward(Slot& s, int l, View<const float> params, View<float> out,
                          const char* pass) {
  const auto li = static_cast<std::size_t>(l);
  keep(s, li);
  Kept& k = kept(s, li);
  const Block& w = s.where[li];
  const auto [N, d, S, B, dh, hl, ml, scale] = dims_;
  View<const float> x = s.xs[li].view();
  auto P = [&](std::size_t offset, std::size_t n) { return params.sub(offset, n); };
  const int block = layout_.first_block() + l;
  {
    // Attention on my heads: a = LN1(x); per head Q, K, V = a Wq_j, a Wk_j, a Wv_j;
    // P = softmax(Q K^T / sqrt(dh) + causal mask) per sequence; C = P V; partial = C_i Wo_i.
    auto phase = tp_.phase(fmt::format("block {} attention", block), op(pass));
    ops::layernorm_forward(k.a.view(), k.mean1.view(), k.rstd1.view(), x, P(w.ln1g, d),
                           P(w.ln1b, d), rows_, d, c_.ln_eps);
    const View<const float> a = gather(cv(k.a.view()), gathered_, tp::kFGatherPhase, "a (f)");
    for (std::size_t j = 0; j < hl; ++j) {
      ops::gemm(head(k.q, j), a, P(w.wq + j * d * dh, d * dh), N, dh, d);
      ops::gemm(head(k.k, j), a, P(w.wk + j * d * dh, d * dh), N, dh, d);
      ops::gemm(head(k.v, j), a, P(w.wv + j * d * dh, d * dh), N, dh, d);
      for (std::size_t b = 0; b < B; ++b) {
        View<float> p = k.p.empty() ? scores_.view() : k.p.view().sub((j * B + b) * S * S, S * S);
        scores(p, cv(sequence(head(k.q, j), b, dh)), cv(sequence(head(k.k, j), b, dh)));
        ops::gemm(sequence(head(k.ctx, j), b, dh), cv(p), cv(sequence(head(k.v, j), b, dh)), S, dh,
                  S);
      }
      ops::gemm(da_.view(), cv(head(k.ctx, j)), P(w.wo + j * dh * d, dh * d), N, d, dh, false,
                false, 1.0f, j == 0 ? 0.0f : 1.0f);
    }
  }
  // The heads of every tensor-parallel rank, summed (sequence parallel: my rows of the sum).
  tp::g_forward(tp_, da_.view(), options_.sequence_parallel);
  ops::copy(k.x1.view(), x);
  ops::add(k.x1.view(), cv(mine(da_.view())));
  {
    // The MLP on my columns of W1 and rows of W2: m = LN2(x1); partial = gelu(m W1_i) W2_i.
    auto phase = tp_.phase(fmt::format("block {} MLP", block), op(pass));
    ops::layernorm_forward(k.m.view(), k.mean2.view(), k.rstd2.view(), cv(k.x1.view()),
                           P(w.ln2g, d), P(w.ln2b, d), rows_, d, c_.ln_eps);
    const View<const float> m = gather(cv(k.m.view()), gathered_, tp::kFGatherPhase, "m (f)");
    ops::gemm(k.h.view(), m, P(w.w1, d * ml), N, ml, d);
    View<float> gg = options_.gelu_in_place ? k.h.view() : k.gg.view();  // --break
    ops::gelu_forward(gg, cv(k.h.view()));
    ops::gemm(da_.view(), cv(gg), P(w.w2, ml * d), N, d, ml);
  }
  tp::g_forward(tp_, da_.view(), options_.sequence_parallel);
  ops::copy(out, cv(k.x1.view()));
  ops::add(out, cv(mine(da_.view())));
  if (options_.stale_input) ops::copy(s.xs[li].view(), cv(out));  // --break: over the input
}

// Full recompute: the block's forward once more from its kept input, into the one block's
// buffers (its output lands where forward put it: the same values).
void Stage::recompute_block(Slot& s, int l, View<const float> params) {
  const std::uint64_t before = ops::gemm_flops();
  block_forward(s, l, params, s.xs[static_cast<std::size_t>(l) + 1].view(), "recompute");
  recompute_flops_ += ops::gemm_flops() - before;
}

View<const float> Stage::backward(int slot, View<const float> params, View<float> grads,
                                  View<const float> dy) {
  Slot& s = slots_.at(static_cast<std::size_t>(slot));
  const std::size_t N = tokens(), d = c_.d;
  if (layout_.last_stage()) {
    // From the loss: dlogits (kept by forward), dhead = xf^T dlogits, dxf = dlogits head^T.
    auto phase = tp_.phase("head and loss", op("backward"));
    const auto& g = layout_.part("lnf gain");
    const auto& b = layout_.part("lnf bias");
    const auto& head = layout_.part("head");
    ops::gemm(grads.sub(head.offset, head.size), cv(s.xf.view()), cv(s.dlogits.view()), d, c_.vocab,
              N, true, false, 1.0f, 1.0f);
    ops::gemm(dx_.view(), cv(s.dlogits.view()), params.sub(head.offset, head.size), N, d, c_.vocab,
              false, true);
    const View<const float> xlast =
        options_.sequence_parallel ? cv(s.xlast.view()) : cv(s.xs.back().view());
    ops::layernorm_backward(dx_.view(), grads.sub(g.offset, g.size), grads.sub(b.offset, b.size),
                            cv(dx_.view()), xlast, cv(s.meanf.view()), cv(s.rstdf.view()),
                            params.sub(g.offset, g.size), N, d);
  } else {
    ops::copy(dx_.view(), dy);
  }
  for (std::size_t l = s.where.size(); l-- > 0;) {
    if (recomputed_) recompute_block(s, static_cast<int>(l), params);
    block_backward(s, static_cast<int>(l), params, grads, mine(dx_.view()));
  }
  if (!layout_.first_stage()) return dx_.view();
  auto phase = tp_.phase("embed", op("backward"));
  const auto& wte = layout_.part("wte");
  const auto& wpe = layout_.part("wpe");
  const View<const float> dx = mine(dx_.view());
  ops::scatter_add_rows(grads.sub(wte.offset, wte.size), dx, cv(s.ids.view()).sub(row0_, rows_), d);
  ops::scatter_add_rows(grads.sub(wpe.offset, wpe.size), dx,
                        cv(positions_.view()).sub(row0_, rows_), d);
  return {};
}

void Stage::block_backward(Slot& s, int l, View<const float> params, View<float> grads,
                           View<float> dx) {
  const auto li = static_cast<std::size_t>(l);
  Kept& k = kept(s, li);
  const Block& w = s.where[li];
  const auto [N, d, S, B, dh, hl, ml, scale] = dims_;
  auto P = [&](std::size_t offset, std::size_t n) { return params.sub(offset, n); };
  auto G = [&](std::size_t offset, std::size_t n) { return grads.sub(offset, n); };
  const int block = layout_.first_block() + l;
  {
    // The MLP, from dx = dL/dx2 (g's backward is the identity: everyone has it; sequence
    // parallel: my rows, all-gathered).
    const View<const float> dy = gather(cv(dx), gathered_, tp::kGGatherPhase, "dY (g)");
    auto phase = tp_.phase(fmt::format("block {} MLP", block), op("backward"));
    ops::gemm(dh_.view(), dy, P(w.w2, ml * d), N, ml, d, false, true);  // d gelu
    View<const float> gg = options_.gelu_in_place ? k.h.view() : k.gg.view();
    ops::gemm(G(w.w2, ml * d), gg, dy, ml, d, N, true, false, 1.0f, 1.0f);
    ops::gelu_backward(dh_.view(), cv(dh_.view()), cv(k.h.view()));
    const View<const float> m = gather(cv(k.m.view()), regathered_, tp::kFGatherPhase, "m (f)");
    ops::gemm(G(w.w1, d * ml), m, cv(dh_.view()), d, ml, N, true, false, 1.0f, 1.0f);
    ops::gemm(da_.view(), cv(dh_.view()), P(w.w1, d * ml), N, d, ml, false, true);  // partial dm
  }
  tp::f_backward(tp_, da_.view(), options_.sequence_parallel);
  ops::layernorm_backward(mine(da_.view()), G(w.ln2g, d), G(w.ln2b, d), cv(mine(da_.view())),
                          cv(k.x1.view()), cv(k.mean2.view()), cv(k.rstd2.view()), P(w.ln2g, d),
                          rows_, d);
  ops::add(dx, cv(mine(da_.view())));  // dx is dL/dx1 now
  {
    const View<const float> dy = gather(cv(dx), gathered_, tp::kGGatherPhase, "dY (g)");
    auto phase = tp_.phase(fmt::format("block {} attention", block), op("backward"));
    const View<const float> a = gather(cv(k.a.view()), regathered_, tp::kFGatherPhase, "a (f)");
    for (std::size_t j = 0; j < hl; ++j) {
      ops::gemm(dc_.view(), dy, P(w.wo + j * dh * d, dh * d), N, dh, d, false, true);
      ops::gemm(G(w.wo + j * dh * d, dh * d), cv(head(k.ctx, j)), dy, dh, d, N, true, false, 1.0f,
                1.0f);
      for (std::size_t b = 0; b < B; ++b) {
        View<const float> p;
        if (k.p.empty()) {  // selective: the probabilities again, from the kept q and k
          const std::uint64_t before = ops::gemm_flops();
          scores(scores_.view(), cv(sequence(head(k.q, j), b, dh)),
                 cv(sequence(head(k.k, j), b, dh)));
          recompute_flops_ += ops::gemm_flops() - before;
          p = scores_.view();
        } else {
          p = k.p.view().sub((j * B + b) * S * S, S * S);
        }
        ops::gemm(dp_.view(), cv(sequence(dc_.view(), b, dh)), cv(sequence(head(k.v, j), b, dh)), S,
                  S, dh, false, true);
        ops::gemm(sequence(dv_.view(), b, dh), p, cv(sequence(dc_.view(), b, dh)), S, dh, S, true,
                  false);
        ops::softmax_backward_rows(dp_.view(), p, cv(dp_.view()), S, S);
        ops::gemm(sequence(dq_.view(), b, dh), cv(dp_.view()), cv(sequence(head(k.k, j), b, dh)), S,
                  dh, S, false, false, scale);
        ops::gemm(sequence(dk_.view(), b, dh), cv(dp_.view()), cv(sequence(head(k.q, j), b, dh)), S,
                  dh, S, true, false, scale);
      }
      const std::size_t at = j * d * dh;
      ops::gemm(G(w.wq + at, d * dh), a, cv(dq_.view()), d, dh, N, true, false, 1.0f, 1.0f);
      ops::gemm(G(w.wk + at, d * dh), a, cv(dk_.view()), d, dh, N, true, false, 1.0f, 1.0f);
      ops::gemm(G(w.wv + at, d * dh), a, cv(dv_.view()), d, dh, N, true, false, 1.0f, 1.0f);
      // This rank's part of da: its heads' dQ Wq^T + dK Wk^T + dV Wv^T.
      ops::gemm(da_.view(), cv(dq_.view()), P(w.wq + at, d * dh), N, d, dh, false, true, 1.0f,
                j == 0 ? 0.0f : 1.0f);
      ops::gemm(da_.view(), cv(dk_.view()), P(w.wk + at, d * dh), N, d, dh, false, true, 1.0f,
                1.0f);
      ops::gemm(da_.view(), cv(dv_.view()), P(w.wv + at, d * dh), N, d, dh, false, true, 1.0f,
                1.0f);
    }
  }
  tp::f_backward(tp_, da_.view(), options_.sequence_parallel);
  ops::layernorm_backward(mine(da_.view()), G(w.ln1g, d), G(w.ln1b, d), cv(mine(da_.view())),
                          cv(s.xs[li].view()), cv(k.mean1.view()), cv(k.rstd1.view()), P(w.ln1g, d),
                          rows_, d);
  ops::add(dx, cv(mine(da_.view())));        // dx is dL/dx of the block's input now
  if (options_.charge_per_pass) k = Kept{};  // read for the last time: released
}

}  // namespace distlab::gpt
