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
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"
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
std::string splits_picture(const Shape& s, int n, bool wo_by_columns) {
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
  std::vector<tp::SplitBlock> blocks{whole("X", "none", {T, h}), tp::f_block()};
  for (const char* w : {"Wq", "Wk", "Wv"}) {  // by columns, whole heads: Wk and Wv under Wq
    blocks.push_back(block(w, "weight", {h, h}, {h, m * d}, "columns", {h, d}));
    blocks.back().forward_phase = kForwardHeads;
    blocks.back().backward_phase = kBackwardHeads;
    blocks.back().stack = blocks.size() > 3;
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
  blocks.push_back(tp::g_block());
  blocks.push_back(whole("Y", "none", {T, h}));
  return tp::splits_json("attention",
                         "Y = sum over heads j of softmax(Q_j K_j^T / sqrt d) V_j Wo_j", n, blocks);
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
Reference error_bounds(const Shape& s, const RowMatrix& x, const RowMatrix& wq, const RowMatrix& wk,
                       const RowMatrix& wv, const RowMatrix& wo, const RowMatrix& dy) {
  const auto T = Eigen::Index(s.tokens()), S = Eigen::Index(s.seq), d = Eigen::Index(s.dim);
  const double scale = 1.0 / std::sqrt(double(s.dim)),
               n = double(s.heads / s.mine);  // n: the ranks
  const auto root = [](Eigen::Index k) { return std::sqrt(double(k)); };
  const RowMatrix ax = x.cwiseAbs(), awq = wq.cwiseAbs(), awk = wk.cwiseAbs(), awv = wv.cwiseAbs(),
                  awo = wo.cwiseAbs(), ady = dy.cwiseAbs();
  const Eigen::Index h = x.cols();
  const RowMatrix q = x * wq, k = x * wk, v = x * wv, aq = q.cwiseAbs(), ak = k.cwiseAbs(),
                  av = v.cwiseAbs();
  const RowMatrix eq = root(h) * ax * awq, ek = root(h) * ax * awk,
                  ev = root(h) * ax * awv;  // E(X W)
  const RowMatrix dc = dy * wo.transpose(), adc = dc.cwiseAbs(),
                  edc = root(h) * ady * awo.transpose();
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
  e.dwo = root(T) * ac.transpose() * ady + ec.transpose() * ady;
  e.dwq = root(T) * ax.transpose() * adq + ax.transpose() * edq;
  e.dwk = root(T) * ax.transpose() * adk + ax.transpose() * edk;
  e.dwv = root(T) * ax.transpose() * adv + ax.transpose() * edv;
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
  lesson.add_break("wo-split-by-columns",
                   "the heads are split, but Wo by columns instead of by the heads' rows: "
                   "C_i Wo_i is no longer a partial sum of Y (main.cpp, my part of the weights)");
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
    lesson.set_algorithm(fmt::format("Megatron attention: {} heads over {} ranks, Wo by rows{}",
                                     heads, w.size, causal ? ", causal" : ""));
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

  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    // Here, after the run, not in on_world: the picture shows the split the run used, --break
    // wo-split-by-columns included.
    lesson.set_metadata("splits", splits_picture(s, n, broken("wo-split-by-columns")));
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
    const int me = comm.rank();
    const std::size_t T = s.tokens(), S = s.seq, h = s.hidden, d = s.dim, m = s.split.size(me),
                      first = s.split.begin(me);
    const float scale = 1.0f / std::sqrt(float(d));
    const std::uint64_t seed = opt.seed;
    const double w_scale = 1.0 / std::sqrt(double(h));
    const std::vector<float> x = tp::make_tensor(seed, kX, T, h),
                             dy = tp::make_tensor(seed, kDY, T, h);
    const std::vector<float> wq = tp::make_tensor(seed, kWq, h, h, w_scale),
                             wk = tp::make_tensor(seed, kWk, h, h, w_scale);
    const std::vector<float> wv = tp::make_tensor(seed, kWv, h, h, w_scale),
                             wo = tp::make_tensor(seed, kWo, h, h, w_scale);
    // STEP 1: the split. My heads, H/N whole ones: their columns of Wq, Wk, Wv (head after
    // head, each h x d) and their rows of Wo.
    Buffer<float> Wq = comm.alloc_from(stacked_columns(wq, h, h, first, m, d), Category::params);
    Buffer<float> Wk = comm.alloc_from(stacked_columns(wk, h, h, first, m, d), Category::params);
    Buffer<float> Wv = comm.alloc_from(stacked_columns(wv, h, h, first, m, d), Category::params);
    // --break wo-split-by-columns: my heads' columns of Wo, as A in lesson 12, where the row
    // split belongs (the same count of floats, so nothing but the result shows it)
    Buffer<float> Wo =
        comm.alloc_from(broken("wo-split-by-columns")
                            ? tp::columns(wo, h, h, first * d, m * d)
                            : std::vector<float>(wo.begin() + std::ptrdiff_t(first * d * h),
                                                 wo.begin() + std::ptrdiff_t((first + m) * d * h)),
                        Category::params);
    Buffer<float> X = comm.alloc_from(x, Category::data), dY = comm.alloc_from(dy, Category::data);
    // Activations kept for backward: Q, K, V and C per head (tokens x d), P per head and sequence.
    const std::size_t per_head = T * d;
    Buffer<float> Q = comm.alloc<float>(m * per_head, Category::activations),
                  K = comm.alloc<float>(m * per_head, Category::activations);
    Buffer<float> V = comm.alloc<float>(m * per_head, Category::activations),
                  C = comm.alloc<float>(m * per_head, Category::activations);
    Buffer<float> P = comm.alloc<float>(m * s.batch * S * S, Category::activations);
    Buffer<float> Y = comm.alloc<float>(T * h, Category::activations);
    std::vector<float> causal_mask;  // 0 where a token may look, -inf at the tokens after it
    if (s.causal) {
      causal_mask.assign(S * S, 0.0f);
      for (std::size_t r = 0; r < S; ++r)
        for (std::size_t c = r + 1; c < S; ++c) causal_mask[r * S + c] = -INFINITY;
    }
    Buffer<float> mask = comm.alloc_from(causal_mask, Category::activations);
    auto head = [&](Buffer<float>& buf, std::size_t j) {
      return buf.view().sub(j * per_head, per_head);
    };
    auto seq_of = [&](View<float> v, std::size_t b) {
      return v.sub(b * S * d, S * d);
    };  // (S x d) of one sequence
    auto probs = [&](std::size_t j, std::size_t b) {
      return P.view().sub((j * s.batch + b) * S * S, S * S);
    };
    auto weight = [&](Buffer<float>& w, std::size_t j) {
      return View<const float>(w.view().sub(j * h * d, h * d));
    };
    using CV = View<const float>;

    comm.barrier();
    {
      auto phase = comm.phase("forward");
      {
        // STEP 2: my heads' attention, alone: Q, K, V from X (f's forward is the identity),
        // the scores, softmax per row (a head's softmax needs no other head), C = P V.
        auto step = comm.phase(kForwardHeads);
        for (std::size_t j = 0; j < m; ++j) {
          ops::gemm(head(Q, j), CV(X.view()), weight(Wq, j), T, d, h);
          ops::gemm(head(K, j), CV(X.view()), weight(Wk, j), T, d, h);
          ops::gemm(head(V, j), CV(X.view()), weight(Wv, j), T, d, h);
          for (std::size_t b = 0; b < s.batch; ++b) {
            View<float> pb = probs(j, b);
            ops::gemm(pb, CV(seq_of(head(Q, j), b)), CV(seq_of(head(K, j), b)), S, S, d, false,
                      true, scale);
            if (s.causal) ops::add(pb, CV(mask.view()));
            ops::softmax_rows(pb, CV(pb), S, S);
            ops::gemm(seq_of(head(C, j), b), CV(pb), CV(seq_of(head(V, j), b)), S, d, S);
          }
        }
      }
      {
        // STEP 3: my rows of Wo: Y_i = the sum over my heads of C_j Wo_j, a partial sum of Y.
        auto step = comm.phase(kForwardWo);
        for (std::size_t j = 0; j < m; ++j)  // Y_i = sum over my heads of C_j Wo_j
          ops::gemm(Y.view(), CV(head(C, j)), CV(Wo.view().sub(j * d * h, d * h)), T, h, d, false,
                    false, 1.0f, j == 0 ? 0.0f : 1.0f);
      }
      // STEP 4: g sums the partial Y_i (core/training/tensor_parallel.cpp: g_forward).
      outcome.forward = tp::g_forward(comm, Y.view());
    }

    Buffer<float> dWq = comm.alloc<float>(m * h * d, Category::grads),
                  dWk = comm.alloc<float>(m * h * d, Category::grads);
    Buffer<float> dWv = comm.alloc<float>(m * h * d, Category::grads),
                  dWo = comm.alloc<float>(m * d * h, Category::grads);
    Buffer<float> dC = comm.alloc<float>(per_head, Category::activations),
                  dQ = comm.alloc<float>(per_head, Category::activations);
    Buffer<float> dK = comm.alloc<float>(per_head, Category::activations),
                  dV = comm.alloc<float>(per_head, Category::activations);
    Buffer<float> dP = comm.alloc<float>(S * S, Category::activations),
                  dX = comm.alloc<float>(T * h, Category::activations);
    {
      auto phase = comm.phase("backward");
      {
        // STEP 5: backward through my heads. g's backward is the identity: dY as it is. dWo_j,
        // dC_j, softmax's backward, dQ, dK, dV, my heads' weight gradients and a partial dX.
        auto step = comm.phase(kBackwardHeads);
        for (std::size_t j = 0; j < m; ++j) {
          View<float> dwo = dWo.view().sub(j * d * h, d * h);
          ops::gemm(dwo, CV(head(C, j)), CV(dY.view()), d, h, T, true);  // dWo_j = C_j^T dY
          ops::gemm(dC.view(), CV(dY.view()), CV(Wo.view().sub(j * d * h, d * h)), T, d, h, false,
                    true);  // dC_j = dY Wo_j^T
          for (std::size_t b = 0; b < s.batch; ++b) {
            const CV pb = probs(j, b);
            ops::gemm(dP.view(), CV(seq_of(dC.view(), b)), CV(seq_of(head(V, j), b)), S, S, d,
                      false, true);  // dP = dC V^T
            ops::gemm(seq_of(dV.view(), b), pb, CV(seq_of(dC.view(), b)), S, d, S,
                      true);                                                 // dV = P^T dC
            ops::softmax_backward_rows(dP.view(), pb, CV(dP.view()), S, S);  // dS
            ops::gemm(seq_of(dQ.view(), b), CV(dP.view()), CV(seq_of(head(K, j), b)), S, d, S,
                      false, false, scale);
            ops::gemm(seq_of(dK.view(), b), CV(dP.view()), CV(seq_of(head(Q, j), b)), S, d, S, true,
                      false, scale);
          }
          ops::gemm(dWq.view().sub(j * h * d, h * d), CV(X.view()), CV(dQ.view()), h, d, T,
                    true);  // dWq_j = X^T dQ_j
          ops::gemm(dWk.view().sub(j * h * d, h * d), CV(X.view()), CV(dK.view()), h, d, T, true);
          ops::gemm(dWv.view().sub(j * h * d, h * d), CV(X.view()), CV(dV.view()), h, d, T, true);
          const float keep =
              j == 0 ? 0.0f : 1.0f;  // dX_i: the sum over my heads of dQ Wq^T + dK Wk^T + dV Wv^T
          ops::gemm(dX.view(), CV(dQ.view()), weight(Wq, j), T, h, d, false, true, 1.0f, keep);
          ops::gemm(dX.view(), CV(dK.view()), weight(Wk, j), T, h, d, false, true, 1.0f, 1.0f);
          ops::gemm(dX.view(), CV(dV.view()), weight(Wv, j), T, h, d, false, true, 1.0f, 1.0f);
        }
      }
      // STEP 6: f's backward sums the partial dX_i (tensor_parallel.cpp: f_backward).
      outcome.backward = tp::f_backward(comm, dX.view());
    }

    // STEP 7: against the unsplit layer in float64, element by element within its error bound.
    const Reference ref =
        reference(s, tp::as_matrix(x, T, h), tp::as_matrix(wq, h, h), tp::as_matrix(wk, h, h),
                  tp::as_matrix(wv, h, h), tp::as_matrix(wo, h, h), tp::as_matrix(dy, T, h));
    if (comm.inject_fault()) inject_fault_into(dWv.view());
    const Reference bound =
        error_bounds(s, tp::as_matrix(x, T, h), tp::as_matrix(wq, h, h), tp::as_matrix(wk, h, h),
                     tp::as_matrix(wv, h, h), tp::as_matrix(wo, h, h), tp::as_matrix(dy, T, h));
    const double per_unit = kLambda * kEps32;
    const std::string heads_text = fmt::format("(heads {}..{})", first, first + m - 1);
    std::vector<tp::Compared> compared;
    auto within = [&](const std::string& name, View<const float> got, const RowMatrix& want,
                      const RowMatrix& e) {
      compared.push_back(tp::compare_within(comm, name, got, want, per_unit * e));
    };
    within("Y", Y.view(), ref.y, bound.y);
    within("dX", dX.view(), ref.dx, bound.dx);
    const std::string me_text = std::to_string(me) + " " + heads_text;
    within("dWq_" + me_text, dWq.view(), head_blocks(ref.dwq, first, m, d),
           head_blocks(bound.dwq, first, m, d));
    within("dWk_" + me_text, dWk.view(), head_blocks(ref.dwk, first, m, d),
           head_blocks(bound.dwk, first, m, d));
    within("dWv_" + me_text, dWv.view(), head_blocks(ref.dwv, first, m, d),
           head_blocks(bound.dwv, first, m, d));
    const auto wo_rows = [&](const RowMatrix& a) {
      return RowMatrix(a.middleRows(Eigen::Index(first * d), Eigen::Index(m * d)));
    };
    within("dWo_" + me_text, dWo.view(), wo_rows(ref.dwo), wo_rows(bound.dwo));
    if (me == 0)
      outcome.error_measure = fmt::format(
          "worst |error| / its bound {:.0f} x eps x E (the error model), at most 1", kLambda);
    if (me == 0) outcome.compared = compared;
  });
}
