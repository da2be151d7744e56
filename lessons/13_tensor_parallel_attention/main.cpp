// Lesson 13 — tensor parallelism of attention: heads split, output projection split by rows
//
// Concept: multi-head self-attention runs H independent heads. For head j, with d = h / H,
//   Q_j = X Wq_j, K_j = X Wk_j, V_j = X Wv_j                   (each (tokens, d))
//   C_j = softmax(Q_j K_j^T / sqrt(d) [+ causal mask]) V_j      (per sequence)
//   Y   = sum over heads of C_j Wo_j                            (Wo_j: rows j d .. (j+1) d of Wo)
// Megatron-LM (Shoeybi et al., 2019) gives each of N ranks H/N whole heads: the columns of Wq, Wk
// and Wv that belong to them (a column split, as A in lesson 12) and the same rows of Wo (a row
// split, as B). Every rank computes its heads' attention alone; its sum over its heads is a
// partial sum of Y, and g all-reduces them. Backward, from dY (everyone's: g's backward is the
// identity), each rank computes its heads' gradients and a partial dX, and f all-reduces that:
// one all-reduce each way, and 1/N of the weights (4 h^2 / N floats) per rank.
// Softmax's backward: dS = P (dP - rowsum(P dP)), P the attention weights kept from forward.
//
// Verification: Y, dX and every rank's parts of dWq, dWk, dWv and dWo against the unsplit layer
// computed in float64 with Eigen, element by element within an error model's bound (below);
// exactly one all-reduce each way in the trace.
//
// Run:  ./distlab lesson 13                            4 ranks, 12 heads of 8 (3 per rank), causal
// off
//       ./distlab lesson 13 --causal                   each token attends to itself and earlier
//       ones
//       ./distlab lesson 13 --ranks 2 --heads 4        heads must divide by the ranks
//       ./distlab lesson 13 --mpi 2
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/base/partition.hpp"
#include "core/base/units.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"
#include "core/training/sequence_parallel.hpp"
#include "core/training/tensor_parallel.hpp"

using namespace distlab;
using tp::RowMatrix;

namespace {

constexpr int kX = 4'000'001, kWq = 4'000'002, kWk = 4'000'003, kWv = 4'000'004, kWo = 4'000'005,
              kDY = 4'000'006;

struct Shape {
  std::size_t batch = 0, seq = 0, hidden = 0, heads = 0, dim = 0,
              mine = 0;  // dim = h / H; mine = H / N
  bool causal = false;
  Partition split;  // the H heads over the ranks: rank i's heads are [begin(i), end(i))
  std::size_t tokens() const { return batch * seq; }
};

// The compute phases of the layer (the trace's spans; the viewer's Splits panel lights the
// matrices each one multiplies by).
constexpr const char* kForwardHeads = "my heads' attention";
constexpr const char* kForwardWo = "C_i Wo_i (rows)";
constexpr const char* kBackwardHeads = "my heads' gradients";

// otherData.splits (docs/trace-format.md): the layer as the Splits panel draws it, in the order
// of the computation, each rank's heads (and their columns of Wq, Wk, Wv and rows of Wo) from
// s.split. `wo_by_columns`: the --break's Wo, split as A in lesson 12.
std::string splits_picture(const Shape& s, int n, bool wo_by_columns, bool sp) {
  const std::size_t T = s.tokens(), h = s.hidden, d = s.dim, H = s.heads, m = s.mine;
  const auto heads = tp::rank_ranges(s.split), cols = tp::rank_ranges(s.split, d);
  auto block = [&](std::string name, std::string kind, std::vector<std::size_t> shape,
                   std::vector<std::size_t> rank_shape, std::string split,
                   std::vector<std::size_t> head_shape) {
    tp::SplitBlock b = tp::split_block(std::move(name), std::move(kind), std::move(shape),
                                       std::move(rank_shape), std::move(split));
    b.ranges = b.split == "heads" ? heads : cols;
    b.heads = heads;
    b.head_shape = std::move(head_shape);
    return b;
  };
  auto whole = [](std::string name, std::string split, std::vector<std::size_t> shape) {
    tp::SplitBlock b;
    b.name = std::move(name);
    b.shape = shape;
    b.rank_shape = std::move(shape);
    b.split = std::move(split);
    return b;
  };
  // Under sequence parallelism: LN(X) and O cut along the tokens, f and g an all-gather and a
  // reduce-scatter (and U, the LayerNorm's output, gathered whole before the heads).
  std::vector<tp::SplitBlock> blocks =
      sp ? std::vector<tp::SplitBlock>{tp::token_rows_block("LN(X)", T, h, n), tp::sp_f_block(),
                                       whole("U", "none", {T, h})}
         : std::vector<tp::SplitBlock>{whole("X", "none", {T, h}), tp::f_block()};
  for (const char* w : {"Wq", "Wk", "Wv"}) {  // by columns, whole heads: Wk and Wv under Wq
    blocks.push_back(block(w, "weight", {h, h}, {h, m * d}, "columns", {h, d}));
    blocks.back().forward_phase = kForwardHeads;
    blocks.back().backward_phase = kBackwardHeads;
    blocks.back().stack = w[1] != 'q';
  }
  for (const char* a : {"Q", "K", "V"}) {
    blocks.push_back(block(a, "activation", {T, h}, {T, m * d}, "columns", {T, d}));
    blocks.back().stack = a[0] != 'Q';
  }
  blocks.push_back(block("P_j (softmax)", "activation", {H, s.batch, s.seq, s.seq},
                         {m, s.batch, s.seq, s.seq}, "heads", {s.batch, s.seq, s.seq}));
  blocks.push_back(block("C_j = P_j V_j", "activation", {T, h}, {T, m * d}, "columns", {T, d}));
  tp::SplitBlock wo = wo_by_columns ? block("Wo", "weight", {h, h}, {h, m * d}, "columns", {h, d})
                                    : block("Wo", "weight", {h, h}, {m * d, h}, "rows", {d, h});
  wo.forward_phase = kForwardWo;
  wo.backward_phase = kBackwardHeads;
  blocks.push_back(wo);
  blocks.push_back(whole("C_i Wo_i", "partial", {T, h}));
  blocks.push_back(sp ? tp::sp_g_block() : tp::g_block());
  blocks.push_back(sp ? tp::token_rows_block("O", T, h, n) : whole("Y", "none", {T, h}));
  return tp::splits_json(
      "attention",
      sp ? "O = Dropout(sum over heads j of softmax(Q_j K_j^T / sqrt d) V_j Wo_j), X = LN(input)"
         : "Y = sum over heads j of softmax(Q_j K_j^T / sqrt d) V_j Wo_j",
      n, blocks);
}

// --- the unsplit layer in float64 -------------------------------------------------------------

struct Reference {
  RowMatrix y, dx, dwq, dwk, dwv, dwo;
};

// Softmax of each row of m in place, the future masked when causal (column > row); returns
// each row's largest score, the shift that keeps exp in range.
Eigen::VectorXd softmax_rows(RowMatrix& m, bool causal) {
  Eigen::VectorXd top(m.rows());
  for (Eigen::Index r = 0; r < m.rows(); ++r) {
    if (causal)
      for (Eigen::Index c = r + 1; c < m.cols(); ++c) m(r, c) = -INFINITY;
    top[r] = m.row(r).maxCoeff();
    m.row(r) = (m.row(r).array() - top[r]).exp().matrix();
    m.row(r) /= m.row(r).sum();
  }
  return top;
}

Reference reference(const Shape& s, const RowMatrix& x, const RowMatrix& wq, const RowMatrix& wk,
                    const RowMatrix& wv, const RowMatrix& wo, const RowMatrix& dy) {
  const auto T = Eigen::Index(s.tokens()), S = Eigen::Index(s.seq), d = Eigen::Index(s.dim);
  const double scale = 1.0 / std::sqrt(double(s.dim));
  const RowMatrix q = x * wq, k = x * wk, v = x * wv;
  RowMatrix c = RowMatrix::Zero(T, Eigen::Index(s.hidden)), dq = c, dk = c, dv = c;
  std::vector<RowMatrix> p(s.heads * s.batch);
  for (std::size_t j = 0; j < s.heads; ++j)
    for (std::size_t b = 0; b < s.batch; ++b) {
      const auto rows = Eigen::Index(b) * S, cols = Eigen::Index(j) * d;
      RowMatrix scores = q.block(rows, cols, S, d) * k.block(rows, cols, S, d).transpose() * scale;
      softmax_rows(scores, s.causal);
      p[j * s.batch + b] = scores;
      c.block(rows, cols, S, d) = scores * v.block(rows, cols, S, d);
    }
  Reference out;
  out.y = c * wo;
  out.dwo = c.transpose() * dy;
  const RowMatrix dc = dy * wo.transpose();
  for (std::size_t j = 0; j < s.heads; ++j)
    for (std::size_t b = 0; b < s.batch; ++b) {
      const auto rows = Eigen::Index(b) * S, cols = Eigen::Index(j) * d;
      const RowMatrix& pj = p[j * s.batch + b];
      const RowMatrix dp = dc.block(rows, cols, S, d) * v.block(rows, cols, S, d).transpose();
      dv.block(rows, cols, S, d) = pj.transpose() * dc.block(rows, cols, S, d);
      RowMatrix ds = pj.cwiseProduct(dp);  // P (dP - rowsum(P dP))
      for (Eigen::Index r = 0; r < S; ++r) ds.row(r) -= pj.row(r) * ds.row(r).sum();
      dq.block(rows, cols, S, d) = ds * k.block(rows, cols, S, d) * scale;
      dk.block(rows, cols, S, d) = ds.transpose() * q.block(rows, cols, S, d) * scale;
    }
  out.dwq = x.transpose() * dq;
  out.dwk = x.transpose() * dk;
  out.dwv = x.transpose() * dv;
  out.dx = dq * wq.transpose() + dk * wk.transpose() + dv * wv.transpose();
  return out;
}

// The error model. Every tensor the ranks compute in float32 is a chain of products, and each
// element's error is its own rounding plus the errors it is handed. A float32 dot product of K
// terms is off by at most K * eps of the sum of its terms' absolute values (Higham's gamma_K) if
// every rounding goes the same way; they are independent, so they add up like a random walk:
// beyond lambda sqrt(K) eps with a probability below 2 exp(-lambda^2 / 2) (Higham and Mary,
// 2019), below 1e-13 per element for lambda = 8. So, in units of eps, the error of A B is at most
//   E(A B) = sqrt(K) |A| |B| + E(A) |B| + |A| E(B)              (inputs are exact: E = 0)
// and an element may be off by lambda * eps * E. Softmax passes an error e on its scores on as
// P (e - rowsum(P e)), so E(P) = P e + P rowsum(P e), where e = E(S) plus exp's own roundings
// (|S - max| + 4: exp is off by eps of its argument); its backward dS = P (dP - rowsum(P dP)) the
// same way. A bug (a head in the wrong place, a missing all-reduce) is off by the size of the
// values themselves, millions of times this.
constexpr double kEps32 = 0x1p-24;
constexpr double kLambda = 8;
//
// Under --sequence-parallel the layer's input X is the LayerNorm's float32 output U and its dY
// the dropout's float32 product mask dO: `ex` and `edy` are their errors (in units of eps, from
// norm_errors below), carried by the same products; absent, the inputs are exact.
Reference error_bounds(const Shape& s, const RowMatrix& x, const RowMatrix& wq, const RowMatrix& wk,
                       const RowMatrix& wv, const RowMatrix& wo, const RowMatrix& dy,
                       const RowMatrix* ex = nullptr, const RowMatrix* edy = nullptr) {
  const auto T = Eigen::Index(s.tokens()), S = Eigen::Index(s.seq), d = Eigen::Index(s.dim);
  const double scale = 1.0 / std::sqrt(double(s.dim)),
               n = double(s.heads / s.mine);  // n: the ranks
  const auto root = [](Eigen::Index k) { return std::sqrt(double(k)); };
  const RowMatrix ax = x.cwiseAbs(), awq = wq.cwiseAbs(), awk = wk.cwiseAbs(), awv = wv.cwiseAbs(),
                  awo = wo.cwiseAbs(), ady = dy.cwiseAbs();
  const Eigen::Index h = x.cols();
  const RowMatrix q = x * wq, k = x * wk, v = x * wv, aq = q.cwiseAbs(), ak = k.cwiseAbs(),
                  av = v.cwiseAbs();
  const RowMatrix zero = RowMatrix::Zero(x.rows(), h), &eX = ex ? *ex : zero,
                  &edY = edy ? *edy : zero;
  const RowMatrix eq = root(h) * ax * awq + eX * awq, ek = root(h) * ax * awk + eX * awk,
                  ev = root(h) * ax * awv + eX * awv;  // E(X W)
  const RowMatrix dc = dy * wo.transpose(), adc = dc.cwiseAbs(),
                  edc = root(h) * ady * awo.transpose() + edY * awo.transpose();
  RowMatrix c = RowMatrix::Zero(T, h), ec = c, edq = c, edk = c, edv = c, adq = c, adk = c, adv = c;
  for (std::size_t j = 0; j < s.heads; ++j)
    for (std::size_t b = 0; b < s.batch; ++b) {
      const auto rows = Eigen::Index(b) * S, cols = Eigen::Index(j) * d;
      const auto Q = q.block(rows, cols, S, d), K = k.block(rows, cols, S, d),
                 V = v.block(rows, cols, S, d);
      const auto aQ = aq.block(rows, cols, S, d), aK = ak.block(rows, cols, S, d),
                 aV = av.block(rows, cols, S, d);
      const auto eQ = eq.block(rows, cols, S, d), eK = ek.block(rows, cols, S, d),
                 eV = ev.block(rows, cols, S, d);
      const RowMatrix sc = Q * K.transpose() * scale;
      RowMatrix es =
          scale * (root(d) * aQ * aK.transpose() + eQ * aK.transpose() + aQ * eK.transpose());
      RowMatrix p = sc;
      const Eigen::VectorXd top = softmax_rows(p, s.causal);
      for (Eigen::Index r = 0; r < S; ++r)
        es.row(r) +=
            ((sc.row(r).array() - top[r]).abs() + sc.row(r).cwiseAbs().array() + 4.0).matrix();
      RowMatrix ep = p.cwiseProduct(es);
      for (Eigen::Index r = 0; r < S; ++r) ep.row(r) += p.row(r) * ep.row(r).sum();
      c.block(rows, cols, S, d) = p * V;
      ec.block(rows, cols, S, d) = root(S) * p * aV + ep * aV + p * eV;
      const auto dC = dc.block(rows, cols, S, d), adC = adc.block(rows, cols, S, d),
                 edC = edc.block(rows, cols, S, d);
      const RowMatrix dp = dC * V.transpose(), adp = dp.cwiseAbs();
      const RowMatrix edp =
          root(d) * adC * aV.transpose() + edC * aV.transpose() + adC * eV.transpose();
      adv.block(rows, cols, S, d) = (p.transpose() * dC).cwiseAbs();
      edv.block(rows, cols, S, d) =
          root(S) * p.transpose() * adC + ep.transpose() * adC + p.transpose() * edC;
      RowMatrix ds = p.cwiseProduct(dp), eds = ep.cwiseProduct(adp) + p.cwiseProduct(edp);
      for (Eigen::Index r = 0; r < S; ++r) {
        const double sum = ds.row(r).sum(),
                     esum = eds.row(r).sum() + root(S) * p.row(r).cwiseProduct(adp.row(r)).sum();
        eds.row(r) += ep.row(r) * std::fabs(sum) + p.row(r) * esum +
                      2.0 * (p.row(r).cwiseProduct(adp.row(r)) + p.row(r) * std::fabs(sum));
        ds.row(r) -= p.row(r) * sum;
      }
      const RowMatrix ads = ds.cwiseAbs();
      adq.block(rows, cols, S, d) = (ds * K * scale).cwiseAbs();
      adk.block(rows, cols, S, d) = (ds.transpose() * Q * scale).cwiseAbs();
      edq.block(rows, cols, S, d) =
          scale * (root(S) * ads * aK + eds * aK + ads * eK) + adq.block(rows, cols, S, d);
      edk.block(rows, cols, S, d) =
          scale * (root(S) * ads.transpose() * aQ + eds.transpose() * aQ + ads.transpose() * eQ) +
          adk.block(rows, cols, S, d);
    }
  const RowMatrix ac = c.cwiseAbs();
  Reference e;
  e.y = std::sqrt(double(h) + n) * ac * awo + ec * awo;  // h products, then n partial sums in g
  e.dwo = root(T) * ac.transpose() * ady + ec.transpose() * ady + ac.transpose() * edY;
  e.dwq = root(T) * ax.transpose() * adq + ax.transpose() * edq + eX.transpose() * adq;
  e.dwk = root(T) * ax.transpose() * adk + ax.transpose() * edk + eX.transpose() * adk;
  e.dwv = root(T) * ax.transpose() * adv + ax.transpose() * edv + eX.transpose() * adv;
  e.dx = std::sqrt(3.0 * double(h) + n) *
             (adq * awq.transpose() + adk * awk.transpose() + adv * awv.transpose()) +
         edq * awq.transpose() + edk * awk.transpose() + edv * awv.transpose();
  return e;
}

// Heads [first, first + count) of a matrix whose columns go by head (Wq, Wk, Wv and their
// gradients), stacked: head after head, each (rows, d). The layout a rank keeps its heads in.
RowMatrix head_blocks(const RowMatrix& m, std::size_t first, std::size_t count, std::size_t d) {
  RowMatrix out(m.rows() * Eigen::Index(count), Eigen::Index(d));
  for (std::size_t j = 0; j < count; ++j)
    out.middleRows(Eigen::Index(j) * m.rows(), m.rows()) =
        m.middleCols(Eigen::Index((first + j) * d), Eigen::Index(d));
  return out;
}

std::vector<float> stacked_columns(const std::vector<float>& m, std::size_t rows, std::size_t cols,
                                   std::size_t first, std::size_t count, std::size_t d) {
  std::vector<float> out;
  for (std::size_t j = 0; j < count; ++j) {
    const std::vector<float> block = tp::columns(m, rows, cols, (first + j) * d, d);
    out.insert(out.end(), block.begin(), block.end());
  }
  return out;
}

// --- my heads: their weights, forward and backward (steps 1-3 and 5) ---------------------------

// The whole layer's weights, made from the seed on every rank (each keeps its heads' part).
struct Weights {
  std::vector<float> wq, wk, wv, wo;
};
Weights make_weights(const Shape& s, std::uint64_t seed) {
  const std::size_t h = s.hidden;
  const double w_scale = 1.0 / std::sqrt(double(h));
  return {tp::make_tensor(seed, kWq, h, h, w_scale), tp::make_tensor(seed, kWk, h, h, w_scale),
          tp::make_tensor(seed, kWv, h, h, w_scale), tp::make_tensor(seed, kWo, h, h, w_scale)};
}

// A rank's heads [first, first + m): their weights, what forward keeps for backward, and the
// gradients.
struct MyHeads {
  std::size_t first = 0, m = 0;
  Buffer<float> Wq, Wk, Wv, Wo, Q, K, V, C, P, mask;
  Buffer<float> dWq, dWk, dWv, dWo;
};

MyHeads my_heads(Comm& comm, const Shape& s, const Weights& w) {
  const int me = comm.rank();
  const std::size_t T = s.tokens(), S = s.seq, h = s.hidden, d = s.dim;
  MyHeads my;
  my.first = s.split.begin(me);
  my.m = s.split.size(me);
  const std::size_t first = my.first, m = my.m;
  // STEP 1: the split. My heads, H/N whole ones: their columns of Wq, Wk, Wv (head after
  // head, each h x d) and their rows of Wo.
  my.Wq = comm.alloc_from(stacked_columns(w.wq, h, h, first, m, d), Category::params);
  my.Wk = comm.alloc_from(stacked_columns(w.wk, h, h, first, m, d), Category::params);
  my.Wv = comm.alloc_from(stacked_columns(w.wv, h, h, first, m, d), Category::params);
  // --break wo-split-by-columns: my heads' columns of Wo, as A in lesson 12, where the row
  // split belongs (the same count of floats, so nothing but the result shows it)
  my.Wo =
      comm.alloc_from(broken("wo-split-by-columns")
                          ? tp::columns(w.wo, h, h, first * d, m * d)
                          : std::vector<float>(w.wo.begin() + std::ptrdiff_t(first * d * h),
                                               w.wo.begin() + std::ptrdiff_t((first + m) * d * h)),
                      Category::params);
  // Activations kept for backward: Q, K, V and C per head (tokens x d), P per head and sequence.
  my.Q = comm.alloc<float>(m * T * d, Category::activations);
  my.K = comm.alloc<float>(m * T * d, Category::activations);
  my.V = comm.alloc<float>(m * T * d, Category::activations);
  my.C = comm.alloc<float>(m * T * d, Category::activations);
  my.P = comm.alloc<float>(m * s.batch * S * S, Category::activations);
  std::vector<float> causal_mask;  // 0 where a token may look, -inf at the tokens after it
  if (s.causal) {
    causal_mask.assign(S * S, 0.0f);
    for (std::size_t r = 0; r < S; ++r)
      for (std::size_t c = r + 1; c < S; ++c) causal_mask[r * S + c] = -INFINITY;
  }
  my.mask = comm.alloc_from(causal_mask, Category::activations);
  return my;
}

// The views of my heads' buffers: head j's (tokens x d) part, one sequence of it, head j's
// probabilities for sequence b, and its h x d columns of a weight.
struct HeadViews {
  const Shape& s;
  std::size_t per_head() const { return s.tokens() * s.dim; }
  View<float> head(Buffer<float>& buf, std::size_t j) const {
    return buf.view().sub(j * per_head(), per_head());
  }
  View<float> seq(View<float> v, std::size_t b) const {
    return v.sub(b * s.seq * s.dim, s.seq * s.dim);
  }
  View<float> probs(MyHeads& my, std::size_t j, std::size_t b) const {
    return my.P.view().sub((j * s.batch + b) * s.seq * s.seq, s.seq * s.seq);
  }
  View<const float> weight(Buffer<float>& w, std::size_t j) const {
    return View<const float>(w.view().sub(j * s.hidden * s.dim, s.hidden * s.dim));
  }
};

// Forward through my heads from X (T x h, whole: f's forward has made it so) into Y, my partial
// sum of the layer's output.
void heads_forward(Comm& comm, const Shape& s, MyHeads& my, View<const float> X, View<float> Y) {
  using CV = View<const float>;
  const HeadViews v{s};
  const std::size_t T = s.tokens(), S = s.seq, h = s.hidden, d = s.dim;
  const float scale = 1.0f / std::sqrt(float(d));
  {
    // STEP 2: my heads' attention, alone: Q, K, V from X (f's forward is the identity),
    // the scores, softmax per row (a head's softmax needs no other head), C = P V.
    auto step = comm.phase(kForwardHeads);
    for (std::size_t j = 0; j < my.m; ++j) {
      ops::gemm(v.head(my.Q, j), X, v.weight(my.Wq, j), T, d, h);
      ops::gemm(v.head(my.K, j), X, v.weight(my.Wk, j), T, d, h);
      ops::gemm(v.head(my.V, j), X, v.weight(my.Wv, j), T, d, h);
      for (std::size_t b = 0; b < s.batch; ++b) {
        View<float> pb = v.probs(my, j, b);
        ops::gemm(pb, CV(v.seq(v.head(my.Q, j), b)), CV(v.seq(v.head(my.K, j), b)), S, S, d, false,
                  true, scale);
        if (s.causal) ops::add(pb, CV(my.mask.view()));
        ops::softmax_rows(pb, CV(pb), S, S);
        ops::gemm(v.seq(v.head(my.C, j), b), CV(pb), CV(v.seq(v.head(my.V, j), b)), S, d, S);
      }
    }
  }
  // STEP 3: my rows of Wo: Y_i = the sum over my heads of C_j Wo_j, a partial sum of Y.
  auto step = comm.phase(kForwardWo);
  for (std::size_t j = 0; j < my.m; ++j)  // Y_i = sum over my heads of C_j Wo_j
    ops::gemm(Y, CV(v.head(my.C, j)), CV(my.Wo.view().sub(j * d * h, d * h)), T, h, d, false, false,
              1.0f, j == 0 ? 0.0f : 1.0f);
}

// Backward through my heads from dY (T x h, whole: g's backward has made it so): my heads'
// weight gradients (into my.dW*) and dX, my partial sum of the input's gradient.
void heads_backward(Comm& comm, const Shape& s, MyHeads& my, View<const float> X,
                    View<const float> dY, View<float> dX) {
  using CV = View<const float>;
  const HeadViews v{s};
  const std::size_t T = s.tokens(), S = s.seq, h = s.hidden, d = s.dim, m = my.m;
  const float scale = 1.0f / std::sqrt(float(d));
  my.dWq = comm.alloc<float>(m * h * d, Category::grads);
  my.dWk = comm.alloc<float>(m * h * d, Category::grads);
  my.dWv = comm.alloc<float>(m * h * d, Category::grads);
  my.dWo = comm.alloc<float>(m * d * h, Category::grads);
  Buffer<float> dC = comm.alloc<float>(v.per_head(), Category::activations),
                dQ = comm.alloc<float>(v.per_head(), Category::activations);
  Buffer<float> dK = comm.alloc<float>(v.per_head(), Category::activations),
                dV = comm.alloc<float>(v.per_head(), Category::activations);
  Buffer<float> dP = comm.alloc<float>(S * S, Category::activations);
  // STEP 5: backward through my heads. g's backward is the identity: dY as it is. dWo_j,
  // dC_j, softmax's backward, dQ, dK, dV, my heads' weight gradients and a partial dX.
  auto step = comm.phase(kBackwardHeads);
  for (std::size_t j = 0; j < m; ++j) {
    View<float> dwo = my.dWo.view().sub(j * d * h, d * h);
    ops::gemm(dwo, CV(v.head(my.C, j)), dY, d, h, T, true);  // dWo_j = C_j^T dY
    ops::gemm(dC.view(), dY, CV(my.Wo.view().sub(j * d * h, d * h)), T, d, h, false,
              true);  // dC_j = dY Wo_j^T
    for (std::size_t b = 0; b < s.batch; ++b) {
      const CV pb = v.probs(my, j, b);
      ops::gemm(dP.view(), CV(v.seq(dC.view(), b)), CV(v.seq(v.head(my.V, j), b)), S, S, d, false,
                true);                                                             // dP = dC V^T
      ops::gemm(v.seq(dV.view(), b), pb, CV(v.seq(dC.view(), b)), S, d, S, true);  // dV = P^T dC
      ops::softmax_backward_rows(dP.view(), pb, CV(dP.view()), S, S);              // dS
      ops::gemm(v.seq(dQ.view(), b), CV(dP.view()), CV(v.seq(v.head(my.K, j), b)), S, d, S, false,
                false, scale);
      ops::gemm(v.seq(dK.view(), b), CV(dP.view()), CV(v.seq(v.head(my.Q, j), b)), S, d, S, true,
                false, scale);
    }
    ops::gemm(my.dWq.view().sub(j * h * d, h * d), X, CV(dQ.view()), h, d, T,
              true);  // dWq_j = X^T dQ_j
    ops::gemm(my.dWk.view().sub(j * h * d, h * d), X, CV(dK.view()), h, d, T, true);
    ops::gemm(my.dWv.view().sub(j * h * d, h * d), X, CV(dV.view()), h, d, T, true);
    const float keep =
        j == 0 ? 0.0f : 1.0f;  // dX_i: the sum over my heads of dQ Wq^T + dK Wk^T + dV Wv^T
    ops::gemm(dX, CV(dQ.view()), v.weight(my.Wq, j), T, h, d, false, true, 1.0f, keep);
    ops::gemm(dX, CV(dK.view()), v.weight(my.Wk, j), T, h, d, false, true, 1.0f, 1.0f);
    ops::gemm(dX, CV(dV.view()), v.weight(my.Wv, j), T, h, d, false, true, 1.0f, 1.0f);
  }
}

// My heads' weight gradients against the reference's (`want`) within their bounds.
void check_my_heads(Comm& comm, const Shape& s, MyHeads& my, const Reference& want,
                    const Reference& bound, double per_unit, std::vector<tp::Compared>& compared) {
  const std::size_t first = my.first, m = my.m, d = s.dim;
  const std::string me_text = fmt::format("{} (heads {}..{})", comm.rank(), first, first + m - 1);
  auto within = [&](const std::string& name, View<const float> got, const RowMatrix& w,
                    const RowMatrix& e) {
    compared.push_back(tp::compare_within(comm, name, got, w, per_unit * e));
  };
  within("dWq_" + me_text, my.dWq.view(), head_blocks(want.dwq, first, m, d),
         head_blocks(bound.dwq, first, m, d));
  within("dWk_" + me_text, my.dWk.view(), head_blocks(want.dwk, first, m, d),
         head_blocks(bound.dwk, first, m, d));
  within("dWv_" + me_text, my.dWv.view(), head_blocks(want.dwv, first, m, d),
         head_blocks(bound.dwv, first, m, d));
  const auto wo_rows = [&](const RowMatrix& a) {
    return RowMatrix(a.middleRows(Eigen::Index(first * d), Eigen::Index(m * d)));
  };
  within("dWo_" + me_text, my.dWo.view(), wo_rows(want.dwo), wo_rows(bound.dwo));
}

// --- sequence parallelism (--sequence-parallel): the layer as a transformer runs it -------------
//
// O = Dropout(Attention(LN(X))): the layer gains its LayerNorm in front and its dropout behind,
// the regions tensor parallelism leaves whole on every rank. Sequence parallelism (Korthikanti et
// al., 2022) cuts them along the tokens, as lesson 12 does its MLP's: rank i runs them on its
// T/N rows, f all-gathers LN(X)'s rows before the heads and g reduce-scatters the partial Y
// after Wo. Backward, g's all-gather hands every rank all of dY and f's reduce-scatter its rows
// of dU; the LayerNorm's gain and bias, whole on every rank but computed from its rows alone,
// all-reduce their gradients (2h floats: attention has no biases here).

constexpr int kGamma = 4'000'007, kBeta = 4'000'008, kMask = 4'000'009, kDO = 4'000'010;
constexpr const char* kReplicatedPhase = "dgamma, dbeta: all-reduce";

// The LayerNorm's float32 errors, in units of eps, for the error model: U's (forward), and dX's,
// dgamma's and dbeta's (backward) from dU and its error edu. Each sum of K terms is off by
// sqrt(K) eps of its terms' magnitudes (the random walk, as above), each product or quotient by
// one eps of itself; the row's mean mu, its variance and 1/std carry theirs into xhat and on.
struct NormErrors {
  RowMatrix u, xhat;            // E(U), E(xhat)
  Eigen::VectorXd rstd;         // E(rstd) / rstd, per row
  RowMatrix dx, dgamma, dbeta;  // backward's (norm_backward_errors)
};
NormErrors norm_errors(const tp::LayerNormReference& ln, const RowMatrix& x,
                       const RowMatrix& gamma) {
  const Eigen::Index T = x.rows(), h = x.cols();
  const double rh = std::sqrt(double(h));
  NormErrors e{RowMatrix(T, h), RowMatrix(T, h), Eigen::VectorXd(T), {}, {}, {}};
  for (Eigen::Index r = 0; r < T; ++r) {
    const double mu = ln.mean[r], rs = ln.rstd[r], var = 1.0 / (rs * rs);
    const double e_mu = rh * x.row(r).cwiseAbs().mean() + std::fabs(mu);
    double d_ed = 0;  // mean |x - mu| E(x - mu)
    for (Eigen::Index c = 0; c < h; ++c)
      d_ed += std::fabs(x(r, c) - mu) * (e_mu + std::fabs(x(r, c) - mu)) / double(h);
    e.rstd[r] = 0.5 * (rh + 2 + 2 * d_ed / var) + 2;
    for (Eigen::Index c = 0; c < h; ++c) {
      const double d = x(r, c) - mu, xh = std::fabs(ln.xhat(r, c));
      e.xhat(r, c) = (e_mu + std::fabs(d)) * rs + xh * e.rstd[r] + xh;
      e.u(r, c) = std::fabs(gamma(0, c)) * (e.xhat(r, c) + xh) + std::fabs(ln.u(r, c));
    }
  }
  return e;
}

// Backward, g = dU gamma, dX = rstd (g - mean g - xhat mean(g xhat)), from dU and its error edu;
// the gain's and bias's column sums also add over the all-reduce's `ranks` partial sums.
void norm_backward_errors(NormErrors& e, const tp::LayerNormReference& ln, const RowMatrix& gamma,
                          const RowMatrix& du, const RowMatrix& edu, int ranks) {
  const Eigen::Index T = du.rows(), h = du.cols();
  const double rh = std::sqrt(double(h));
  e.dx.resize(T, h);
  e.dgamma = RowMatrix::Zero(1, h);
  e.dbeta = RowMatrix::Zero(1, h);
  for (Eigen::Index r = 0; r < T; ++r) {
    double g_mean = 0, eg_mean = 0, gx_mean = 0, egx_mean = 0;
    const auto g_of = [&](Eigen::Index c) { return std::fabs(du(r, c) * gamma(0, c)); };
    const auto eg_of = [&](Eigen::Index c) { return edu(r, c) * std::fabs(gamma(0, c)) + g_of(c); };
    for (Eigen::Index c = 0; c < h; ++c) {
      const double xh = std::fabs(ln.xhat(r, c));
      g_mean += g_of(c) / double(h);
      eg_mean += eg_of(c) / double(h);
      gx_mean += g_of(c) * xh / double(h);
      egx_mean += (eg_of(c) * xh + g_of(c) * e.xhat(r, c)) / double(h);
    }
    eg_mean += rh * g_mean;
    egx_mean += rh * gx_mean;
    for (Eigen::Index c = 0; c < h; ++c) {
      const double xh = std::fabs(ln.xhat(r, c));
      const double inner = g_of(c) + g_mean + xh * gx_mean;
      const double e_inner =
          eg_of(c) + eg_mean + e.xhat(r, c) * gx_mean + xh * egx_mean + 3 * inner;
      e.dx(r, c) = ln.rstd[r] * (e_inner + e.rstd[r] * inner + inner);
      e.dgamma(0, c) += edu(r, c) * xh + std::fabs(du(r, c)) * e.xhat(r, c);
      e.dbeta(0, c) += edu(r, c);
    }
  }
  // The column sums over T rows, then the all-reduce's partial sums: sqrt(T + N) of |terms|.
  const double rt = std::sqrt(double(T + ranks));
  e.dgamma += rt * (du.cwiseAbs().cwiseProduct(ln.xhat.cwiseAbs())).colwise().sum();
  e.dbeta += rt * du.cwiseAbs().colwise().sum();
}

// STEP 8: the normalised layer on my ranks; sp: sequence parallel (my rows in the LayerNorm and
// dropout regions), else as Megatron's tensor parallelism runs them (every row on every rank).
void norm_layer(Comm& comm, const Shape& s, bool sp, double p, std::uint64_t seed,
                tp::NormOutcome& outcome) {
  const int me = comm.rank(), n = comm.size();
  const std::size_t T = s.tokens(), h = s.hidden;
  // My rows: a Partition of the T tokens (T divides by N); all of them without sequence
  // parallelism.
  const Partition tokens{T, sp ? n : 1};
  const int part = sp ? me : 0;
  const std::size_t r0 = tokens.begin(part), rows = tokens.size(part);
  const std::vector<float> x = tp::make_tensor(seed, kX, T, h),
                           d_o = tp::make_tensor(seed, kDO, T, h);
  const std::vector<float> gamma = tp::layernorm_gain(seed, kGamma, h),
                           beta = tp::make_tensor(seed, kBeta, 1, h, 0.1);
  const std::vector<float> mask = tp::dropout_mask(seed, kMask, T, h, p);
  const Weights w = make_weights(s, seed);

  // STEP 9: the split: my heads (step 1); the LayerNorm's gain and bias whole. The regions'
  // tensors on a ledger of their own (it also charges the rank's): my rows of X, the
  // LayerNorm's statistics, the mask and the output.
  MyHeads my = my_heads(comm, s, w);
  tp::NormRegions regions(comm, x, mask, gamma, beta, r0, rows, h);  // sequence_parallel.cpp
  Buffer<float> U = comm.alloc<float>(T * h, Category::activations),
                Y = comm.alloc<float>(T * h, Category::activations);
  const View<float> mine_of_u = U.view().sub(r0 * h, rows * h),
                    mine_of_y = Y.view().sub(r0 * h, rows * h);

  comm.barrier();
  {
    auto phase = comm.phase("forward");
    // STEP 10: the LayerNorm region: my rows (all of them without sequence parallelism), into
    // my rows of U; then f all-gathers U's rows (without: U is whole already).
    regions.layernorm(mine_of_u);
    if (sp) outcome.f_forward = tp::sp_all_gather(comm, U.view(), tp::kFGatherPhase, "U (f)");
    // STEP 11: my heads, as in steps 2 and 3, from all of U.
    heads_forward(comm, s, my, View<const float>(U.view()), Y.view());
    // STEP 12: g: the partial Y_i reduce-scattered, my rows of the sum (without: all-reduced,
    // every row); then the dropout region on my rows: O = mask Y.
    outcome.g_forward = tp::g_forward(comm, Y.view(), sp);
    auto step = comm.phase("dropout (my rows)");
    regions.dropout(View<const float>(mine_of_y));
  }

  Buffer<float> dY = comm.alloc<float>(T * h, Category::activations),
                dU = comm.alloc<float>(T * h, Category::activations);
  // The replicated parameters' gradients in one buffer: the LayerNorm's gain and its bias.
  Buffer<float> dRep = comm.alloc<float>(2 * h, Category::grads);
  const View<float> d_gamma = dRep.view().sub(0, h), d_beta = dRep.view().sub(h, h);
  {
    auto phase = comm.phase("backward");
    const View<float> mine_of_dy = dY.view().sub(r0 * h, rows * h);
    {
      // STEP 13: the dropout's backward on my rows, dY = mask dO; g's all-gather hands every
      // rank all of dY (without: every rank has it all).
      auto step = comm.phase("dropout' (my rows)");
      regions.dropout_backward(mine_of_dy, d_o);
    }
    if (sp) outcome.g_backward = tp::sp_all_gather(comm, dY.view(), tp::kGGatherPhase, "dY (g)");
    // STEP 14: my heads' backward, as in step 5: their weight gradients and a partial dU.
    heads_backward(comm, s, my, View<const float>(U.view()), View<const float>(dY.view()),
                   dU.view());
    // STEP 15: f: the partial dU_i reduce-scattered, my rows of the sum (without: all-reduced);
    // the LayerNorm's backward on my rows; and, with sequence parallelism, the gain's and bias's
    // gradients, each a sum over my rows only, all-reduced (2h floats).
    outcome.f_backward = tp::f_backward(comm, dU.view(), sp);
    regions.layernorm_backward(View<const float>(dU.view().sub(r0 * h, rows * h)), d_gamma, d_beta);
    // --break skip-replicated-allreduce: each rank keeps the gain's and bias's gradients of its
    // own rows
    if (sp && !broken("skip-replicated-allreduce"))
      outcome.replicated = tp::collective_phase(comm, kReplicatedPhase, [&] {
        coll::all_reduce_ring_chunked(comm, dRep.view(), "dgamma, dbeta");
      });
  }
  regions.record_peak();

  // STEP 16: against the unsplit layer in float64: my rows of O and dX, my heads' weight
  // gradients, and the gain's and bias's whole gradients, each within the error model's bound:
  // the attention's (error_bounds) from the LayerNorm's U and the dropout's dY, and the
  // LayerNorm's backward from the attention's dU.
  const auto m = [](const std::vector<float>& v, std::size_t r, std::size_t c) {
    return tp::as_matrix(v, r, c);
  };
  const RowMatrix xm = m(x, T, h), gm = m(gamma, 1, h), maskm = m(mask, T, h);
  const tp::LayerNormReference ln = tp::layernorm_reference(xm, gm, m(beta, 1, h));
  const RowMatrix dy = maskm.cwiseProduct(m(d_o, T, h)), edy = dy.cwiseAbs();
  const RowMatrix wq = m(w.wq, h, h), wk = m(w.wk, h, h), wv = m(w.wv, h, h), wo = m(w.wo, h, h);
  const Reference ref = reference(s, ln.u, wq, wk, wv, wo, dy);
  const tp::LayerNormGrads ln_ref = tp::layernorm_backward_reference(ln, gm, ref.dx);
  if (comm.inject_fault()) inject_fault_into(my.dWv.view());
  NormErrors e = norm_errors(ln, xm, gm);
  const Reference bound = error_bounds(s, ln.u, wq, wk, wv, wo, dy, &e.u, &edy);
  norm_backward_errors(e, ln, gm, ref.dx, bound.dx, n);
  const RowMatrix o_ref = maskm.cwiseProduct(ref.y),
                  o_bound = maskm.cwiseAbs().cwiseProduct(bound.y) + o_ref.cwiseAbs();
  const double per_unit = kLambda * kEps32;
  std::vector<tp::Compared> compared;
  const auto within = [&](const std::string& name, View<const float> got, const RowMatrix& want,
                          const RowMatrix& bnd) {
    compared.push_back(tp::compare_within(comm, name, got, want, per_unit * bnd));
  };
  const auto rows_of = [&](const RowMatrix& t) {
    return RowMatrix(t.middleRows(Eigen::Index(r0), Eigen::Index(rows)));
  };
  const std::string which = sp ? fmt::format(" (rows {}..{})", r0, r0 + rows - 1) : "";
  within("O" + which, regions.output(), rows_of(o_ref), rows_of(o_bound));
  within("dX" + which, regions.input_grad(), rows_of(ln_ref.dx), rows_of(e.dx));
  check_my_heads(comm, s, my, ref, bound, per_unit, compared);
  within("dgamma", d_gamma, ln_ref.dgamma, e.dgamma);
  within("dbeta", d_beta, ln_ref.dbeta, e.dbeta);
  if (me == 0) {
    outcome.sequence_parallel = sp;
    outcome.compared = compared;
    outcome.error_measure = fmt::format(
        "worst |error| / its bound {:.0f} x eps x E (the error model), at most 1", kLambda);
  }
}

// The report of a --sequence-parallel run: its bytes per pass against one ring all-reduce's, and
// the LayerNorm and dropout regions' activations against the same layer run without sequence
// parallelism (in-process, here, on as many ranks), both from the traces.
void report_sequence_parallel(RunResult& r, const Shape& s, const tp::NormOutcome& o, double p,
                              std::uint64_t seed) {
  const int n = r.world.size;
  tp::NormOutcome plain;
  const RunResult tp_run =
      run_in_process(n, [&](Comm& comm) { norm_layer(comm, s, false, p, seed, plain); });
  fmt::print(
      "\nO = Dropout(Attention(LN(X))), X ({} x {}), {} heads{}, dropout {:g}: the LayerNorm and "
      "dropout on {} of the {} rows per rank\n",
      s.tokens(), s.hidden, s.heads, s.causal ? ", causal" : "", p, s.tokens() / std::size_t(n),
      s.tokens());
  tp::report_sequence_parallel(r, tp_run, o, plain, s.tokens(), s.hidden,
                               "the LayerNorm's gain and bias", "2h", 2 * s.hidden);
  tp::print_compared("layer", o.error_measure, o.compared);
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"13", "tensor_parallel_attention",
                 "tensor parallelism of attention: heads split, Wo split by rows", 4, 1});
  lesson.set_text(
      "Multi-head attention split the Megatron way: each rank owns H/N whole heads (their "
      "columns of Wq, Wk, Wv and their rows of Wo) and runs their attention alone; its heads' "
      "sum is a partial sum of Y. g all-reduces Y in forward, f all-reduces dX in backward: one "
      "all-reduce each way, 1/N of the weights per rank.",
      "Timeline: every rank computes its heads at once; one all-reduce (g) ends forward, one (f) "
      "ends backward. Stats: bytes per rank equal one ring all-reduce each way.");
  lesson.describe_size("not used here: the layer's sizes are --hidden, --heads, --batch and --seq");
  Shape s;
  std::size_t hidden = 96, heads = 12, batch = 2, seq = 16;
  bool causal = false;
  auto& app = lesson.app();
  app.add_option("--hidden", hidden, "h: the model width; h / heads is each head's size")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 14))
      ->capture_default_str();
  app.add_option("--heads", heads, "H: attention heads; must divide by the ranks")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 12))
      ->capture_default_str();
  app.add_option("--batch", batch, "sequences")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 12))
      ->capture_default_str();
  app.add_option("--seq", seq, "tokens per sequence")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 12))
      ->capture_default_str();
  app.add_flag("--causal", causal, "mask the future: token t attends to tokens 0..t only");
  bool sequence_parallel = false;
  double dropout = 0.1;
  app.add_flag("--sequence-parallel", sequence_parallel,
               "the layer as a transformer runs it, LayerNorm in front and dropout behind, those "
               "two regions cut along the tokens: f and g become an all-gather and a "
               "reduce-scatter (batch x seq must divide by the ranks)");
  app.add_option("--dropout", dropout, "the dropout's probability, with --sequence-parallel")
      ->check(CLI::Range(0.0, 0.95))
      ->capture_default_str();
  lesson.add_break("wo-split-by-columns",
                   "the heads are split, but Wo by columns instead of by the heads' rows: "
                   "C_i Wo_i is no longer a partial sum of Y (main.cpp, my part of the weights)");
  lesson.add_break("skip-replicated-allreduce",
                   "with --sequence-parallel, the LayerNorm's gain and bias keep the gradient of "
                   "the rank's own rows: their all-reduce is left out (main.cpp, norm_layer)");
  tp::Outcome outcome;
  const auto& opt = lesson.options();
  lesson.on_world([&](const World& w) {
    if (heads % std::size_t(w.size) != 0)
      throw UsageError(fmt::format(
          "--heads {} do not split over {} ranks: each rank needs whole heads (use a --heads "
          "that is a multiple of {} and divides --hidden {})",
          heads, w.size, w.size, hidden));
    if (hidden % heads != 0)
      throw UsageError(
          fmt::format("--hidden {} does not split into {} heads of equal size", hidden, heads));
    s = {batch,          seq,
         hidden,         heads,
         hidden / heads, heads / std::size_t(w.size),
         causal,         Partition{heads, w.size}};
    if (sequence_parallel && s.tokens() % std::size_t(w.size) != 0)
      throw UsageError(fmt::format(
          "--sequence-parallel cuts the batch x seq = {} tokens into {} equal parts: use a "
          "--batch or --seq whose product divides by {}",
          s.tokens(), w.size, w.size));
    if (!sequence_parallel && app.count("--dropout") > 0)
      throw UsageError("--dropout is the dropout of the --sequence-parallel layer: add it");
    const bool sp_bug = opt.break_name == "skip-replicated-allreduce";
    if (!opt.break_name.empty() && sequence_parallel != sp_bug)
      throw UsageError(
          sp_bug ? "--break skip-replicated-allreduce is a bug of sequence parallelism: add "
                   "--sequence-parallel"
                 : fmt::format("--break {} is a bug of the plain layer: leave out "
                               "--sequence-parallel",
                               opt.break_name));
    lesson.set_algorithm(fmt::format("Megatron attention{}: {} heads over {} ranks, Wo by rows{}",
                                     sequence_parallel ? " with sequence parallelism" : "", heads,
                                     w.size, causal ? ", causal" : ""));
  });

  // Memory: every rank builds the whole layer and checks against it in float64 (`reference`,
  // then `error_bounds`): some 40 matrices of T x h (X, dY, Y, dX, every head's Q, K, V, C, their
  // gradients, the absolute values and the bounds of each), 24 of h x h (the four weights, their
  // gradients, absolute values and bounds, and the copies they are widened from), and every
  // head's probabilities, which `reference` keeps for its backward (B x S x S per head). Then the
  // float32 inputs, and this rank's own buffers: its heads' share of the weights, Q, K, V, C and
  // probabilities, twice (values and gradients). tests/memory_plan.sh holds the plan to what the
  // process takes.
  lesson.needs_memory([&](const World& w) {
    const double T = double(batch * seq), h = double(hidden), H = double(heads),
                 probs = double(batch * seq * seq), mine = 1.0 / double(w.size);
    const double float64 = 40 * T * h + 24 * h * h + H * probs;
    const double float32 =
        2 * T * h + 4 * h * h + 2 * mine * (4 * h * h + 4 * T * h + H * probs) + 4 * T * h;
    return MemoryNeed{8 * float64 + 4 * float32, 0, "a smaller --hidden, --batch or --seq"};
  });

  tp::NormOutcome norm;
  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    // Here, after the run, not in on_world: the picture shows the split the run used, --break
    // wo-split-by-columns included.
    lesson.set_metadata("splits",
                        splits_picture(s, n, broken("wo-split-by-columns"), sequence_parallel));
    if (sequence_parallel) return report_sequence_parallel(r, s, norm, dropout, opt.seed);
    const std::size_t h = s.hidden, d = s.dim, m = s.mine;
    fmt::print(
        "\nself-attention over X ({} x {}): {} sequences of {} tokens, {} heads of {}{}, split "
        "over {} ranks\n",
        s.tokens(), h, s.batch, s.seq, s.heads, d, s.causal ? ", causal" : "", n);
    fmt::print("  {:>4}  {:>8}  {:>22}  {:>16}  {:>18}  {:>12}\n", "rank", "heads",
               "Wq, Wk, Wv (columns)", "Wo (rows)", "scores per head", "Y_i partial");
    for (int k = 0; k < n; ++k)
      fmt::print("  {:>4}  {:>8}  {:>22}  {:>16}  {:>18}  {:>12}\n", fmt::format("r{}", k),
                 fmt::format("{}..{}", std::size_t(k) * m, std::size_t(k + 1) * m - 1),
                 fmt::format("3 x {} x {}", h, m * d), fmt::format("{} x {}", m * d, h),
                 fmt::format("{} x {} x {}", s.batch, s.seq, s.seq),
                 fmt::format("{} x {}", s.tokens(), h));
    const std::uint64_t unsplit = 4 * h * h * sizeof(float);
    tp::report(r, outcome, s.tokens() * h, unsplit);
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    if (sequence_parallel) return norm_layer(comm, s, true, dropout, opt.seed, norm);
    const std::size_t T = s.tokens(), h = s.hidden;
    const std::vector<float> x = tp::make_tensor(opt.seed, kX, T, h),
                             dy = tp::make_tensor(opt.seed, kDY, T, h);
    const Weights w = make_weights(s, opt.seed);
    MyHeads my = my_heads(comm, s, w);  // step 1
    Buffer<float> X = comm.alloc_from(x, Category::data), dY = comm.alloc_from(dy, Category::data);
    Buffer<float> Y = comm.alloc<float>(T * h, Category::activations);

    comm.barrier();
    {
      auto phase = comm.phase("forward");
      heads_forward(comm, s, my, View<const float>(X.view()), Y.view());  // steps 2 and 3
      // STEP 4: g sums the partial Y_i (core/training/tensor_parallel.cpp: g_forward).
      outcome.forward = tp::g_forward(comm, Y.view());
    }
    Buffer<float> dX = comm.alloc<float>(T * h, Category::activations);
    {
      auto phase = comm.phase("backward");
      heads_backward(comm, s, my, View<const float>(X.view()), View<const float>(dY.view()),
                     dX.view());  // step 5
      // STEP 6: f's backward sums the partial dX_i (tensor_parallel.cpp: f_backward).
      outcome.backward = tp::f_backward(comm, dX.view());
    }

    // STEP 7: against the unsplit layer in float64, element by element within its error bound.
    const RowMatrix xm = tp::as_matrix(x, T, h), dym = tp::as_matrix(dy, T, h),
                    wq = tp::as_matrix(w.wq, h, h), wk = tp::as_matrix(w.wk, h, h),
                    wv = tp::as_matrix(w.wv, h, h), wo = tp::as_matrix(w.wo, h, h);
    const Reference ref = reference(s, xm, wq, wk, wv, wo, dym);
    if (comm.inject_fault()) inject_fault_into(my.dWv.view());
    const Reference bound = error_bounds(s, xm, wq, wk, wv, wo, dym);
    const double per_unit = kLambda * kEps32;
    std::vector<tp::Compared> compared;
    compared.push_back(tp::compare_within(comm, "Y", Y.view(), ref.y, per_unit * bound.y));
    compared.push_back(tp::compare_within(comm, "dX", dX.view(), ref.dx, per_unit * bound.dx));
    check_my_heads(comm, s, my, ref, bound, per_unit, compared);
    if (comm.rank() == 0) {
      outcome.error_measure = fmt::format(
          "worst |error| / its bound {:.0f} x eps x E (the error model), at most 1", kLambda);
      outcome.compared = compared;
    }
  });
}
