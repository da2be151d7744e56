// Lesson 12 — tensor parallelism of an MLP: column split, then row split (Megatron-LM)
//
// Concept: tensor parallelism splits one layer's weight matrices across N ranks that compute
// at the same time. A transformer's MLP block is Y = GeLU(X A + a) B + b, with A (h, 4h) and
// B (4h, h). Shoeybi et al. (2019) split it so that it needs one all-reduce each way:
//   A by columns: rank i holds A_i (h, 4h/N) and a_i     Z_i = X A_i + a_i, H_i = GeLU(Z_i)
//       (GeLU acts element by element, so each rank applies it to its own columns: no message)
//   B by rows:    rank i holds B_i (4h/N, h)             Y_i = H_i B_i, a partial sum of Y
//   g: all-reduce the Y_i                                Y = sum_i Y_i, then + b (replicated)
// Backward, from dY (the same on every rank: g's backward is the identity):
//   dB_i = H_i^T dY, dH_i = dY B_i^T, dZ_i = dH_i GeLU'(Z_i), dA_i = X^T dZ_i, da_i = 1^T dZ_i
//   dX_i = dZ_i A_i^T is a partial sum of dX; f: all-reduce them   dX = sum_i dX_i
// Each rank holds 1/N of the block's weights (b, h floats, is on every rank). Communication: two
// all-reduces of (rows, h) floats per block, one forward and one backward; nothing else.
//
// Verification: Y, dX, every rank's dA_i, da_i, dB_i and db against the unsplit block computed in
// float64 with Eigen on one device; the trace must show exactly one all-reduce each way.
//
// Run:  ./distlab lesson 12                         4 ranks, h = 48 (4h = 192 split 4 ways)
//       ./distlab lesson 12 --ranks 3 --hidden 96   4h must divide by N
//       ./distlab lesson 12 --mpi 2                 one process per rank
//       ./distlab lesson 12 --device cuda           the GEMMs through cuBLAS
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/base/partition.hpp"
#include "core/base/units.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"
#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"
#include "core/training/sequence_parallel.hpp"
#include "core/training/tensor_parallel.hpp"

using namespace distlab;
using tp::RowMatrix;

namespace {

// data.hpp streams of the block's tensors (far from any rank number).
constexpr int kX = 3'000'001, kA = 3'000'002, kBiasA = 3'000'003, kB = 3'000'004,
              kBiasB = 3'000'005, kDY = 3'000'006;

struct Shape {
  std::size_t rows = 0, hidden = 0, ffn = 0,
              part = 0;  // rows = batch x seq; ffn = 4h; part = ffn / N
  Partition split;       // the 4h columns of A (and rows of B) over the ranks
};

// The compute phases of the block (the trace's spans; the viewer's Splits panel lights the
// matrix each one multiplies by).
constexpr const char* kForwardA = "X A_i + a_i, GeLU (columns)";
constexpr const char* kForwardB = "H_i B_i (rows)";
constexpr const char* kBackwardB = "dB_i, dH_i (rows)";
constexpr const char* kBackwardA = "GeLU', dA_i, dX_i (columns)";

// A and B as the Splits panel draws them: each rank's columns of A, the same rows of B, and the
// phases that multiply by them.
std::pair<tp::SplitBlock, tp::SplitBlock> weight_blocks(const Shape& s) {
  const std::size_t h = s.hidden, F = s.ffn, p = s.part;
  tp::SplitBlock a = tp::split_block("A", "weight", {h, F}, {h, p}, "columns");
  a.ranges = tp::rank_ranges(s.split);
  a.forward_phase = kForwardA;
  a.backward_phase = kBackwardA;
  tp::SplitBlock b = tp::split_block("B", "weight", {F, h}, {p, h}, "rows");
  b.ranges = a.ranges;
  b.forward_phase = kForwardB;
  b.backward_phase = kBackwardB;
  return {a, b};
}

// otherData.splits (docs/trace-format.md): the block as the Splits panel draws it, in the order
// of the computation, with each rank's columns of A and rows of B from s.split.
std::string splits_picture(const Shape& s, int n) {
  const std::size_t T = s.rows, h = s.hidden, F = s.ffn, p = s.part;
  const auto ranges = tp::rank_ranges(s.split);
  const auto block = tp::split_block;
  const auto [a, b] = weight_blocks(s);
  tp::SplitBlock xa = block("X A_i", "activation", {T, F}, {T, p}, "columns");
  xa.ranges = ranges;
  tp::SplitBlock gelu = block("GeLU", "activation", {T, F}, {T, p}, "columns");
  gelu.ranges = ranges;
  return tp::splits_json("mlp", "Y = GeLU(X A + a) B + b", n,
                         {block("X", "activation", {T, h}, {T, h}, "none"), tp::f_block(), a, xa,
                          gelu, b, block("H_i B_i", "activation", {T, h}, {T, h}, "partial"),
                          tp::g_block(), block("Y", "activation", {T, h}, {T, h}, "none")});
}

// The same picture under sequence parallelism: X and the output split by rows (the tokens), f
// and g an all-gather and a reduce-scatter.
std::string sequence_parallel_picture(const Shape& s, int n) {
  const std::size_t T = s.rows, h = s.hidden, F = s.ffn, p = s.part;
  const auto block = tp::split_block;
  const auto [a, b] = weight_blocks(s);
  tp::SplitBlock gelu = block("GeLU", "activation", {T, F}, {T, p}, "columns");
  gelu.ranges = tp::rank_ranges(s.split);
  return tp::splits_json("mlp", "O = Dropout(GeLU(LN(X) A + a) B + b)", n,
                         {tp::token_rows_block("LN(X)", T, h, n), tp::sp_f_block(),
                          block("U", "activation", {T, h}, {T, h}, "none"), a, gelu, b,
                          block("H_i B_i", "activation", {T, h}, {T, h}, "partial"),
                          tp::sp_g_block(), tp::token_rows_block("O", T, h, n)});
}

// The unsplit block in float64: output and every gradient, from the same tensors, and for each
// element the size of the terms it sums (`bound`: the same formulas on absolute values).
struct Reference {
  RowMatrix y, dx, da, dbias_a, db, dbias_b;
  Reference* bound = nullptr;
};

// The error model. Each element the ranks compute in float32 is a chain of sums: h terms into
// Z, F into Y (N of them across the ranks in g), T rows into the weight gradients, and back the
// same way. A float32 sum of K terms is off by at most about K * eps * (the sum of the terms'
// absolute values) (Higham's gamma_K), and the chain's errors add, each carried by the next
// product's absolute values; GeLU passes an error on at most 1.13 times (its largest slope),
// and GeLU' at most 0.8 times the error of Z (its largest curvature). So the magnitudes below
// are the block's formulas on absolute values with those factors, and an element's error may
// be kBoundFactor * K * eps of its magnitude, K the length of the longest chain of sums. The
// factor 2 covers the float32 GeLU's own few roundings. A bug (a shard in the wrong place, a
// missing all-reduce) is off by the size of the values themselves, far above this.
constexpr double kEps32 = 0x1p-24;
constexpr double kBoundFactor = 2;
constexpr double kGeluSlope = 1.13, kGeluCurve = 0.8;
Reference reference(const RowMatrix& x, const RowMatrix& a, const RowMatrix& bias_a,
                    const RowMatrix& b, const RowMatrix& bias_b, const RowMatrix& dy) {
  Reference out;
  const RowMatrix z = (x * a).rowwise() + bias_a.row(0);
  const RowMatrix h = z.unaryExpr(&model::reference_gelu);
  out.y = (h * b).rowwise() + bias_b.row(0);
  out.db = h.transpose() * dy;
  out.dbias_b = dy.colwise().sum();
  const RowMatrix dz =
      (dy * b.transpose()).cwiseProduct(RowMatrix(z.unaryExpr(&model::reference_gelu_grad)));
  out.da = x.transpose() * dz;
  out.dbias_a = dz.colwise().sum();
  out.dx = dz * a.transpose();
  return out;
}

// The magnitudes of the error model above, as a Reference: each element's sum of |terms|.
Reference magnitudes(const RowMatrix& x, const RowMatrix& a, const RowMatrix& bias_a,
                     const RowMatrix& b, const RowMatrix& bias_b, const RowMatrix& dy) {
  const RowMatrix ax = x.cwiseAbs(), aa = a.cwiseAbs(), ab = b.cwiseAbs(), ady = dy.cwiseAbs();
  Reference m;
  const RowMatrix mz = (ax * aa).rowwise() + bias_a.cwiseAbs().row(0);
  const RowMatrix mh = kGeluSlope * mz;
  m.y = (mh * ab).rowwise() + bias_b.cwiseAbs().row(0);
  m.db = mh.transpose() * ady;
  m.dbias_b = ady.colwise().sum();
  const RowMatrix mdz =
      (ady * ab.transpose())
          .cwiseProduct(RowMatrix((kGeluSlope + kGeluCurve * mz.array()).matrix()));
  m.da = ax.transpose() * mdz;
  m.dbias_a = mdz.colwise().sum();
  m.dx = mdz * aa.transpose();
  return m;
}

// --- sequence parallelism (--sequence-parallel): the block as a transformer runs it -------------
//
// O = Dropout(GeLU(LN(X) A + a) B + b): the block gains its LayerNorm in front and its dropout
// behind, the regions tensor parallelism leaves whole on every rank. Sequence parallelism
// (Korthikanti et al., 2022) cuts them along the tokens instead: rank i runs them on its T/N rows,
// f all-gathers LN(X)'s rows before A and g reduce-scatters the partial Y after B, so each rank
// gets its rows of the sum. Backward, g's all-gather hands every rank all of dY and f's
// reduce-scatter its rows of dU; the LayerNorm's gain and bias and b, whole on every rank but
// computed from its rows alone, all-reduce their gradients (3h floats).

constexpr int kGamma = 3'000'007, kBeta = 3'000'008, kMask = 3'000'009, kDO = 3'000'010;
constexpr const char* kReplicatedPhase = "dgamma, dbeta, db: all-reduce";

// The normalised block in float64, and its magnitudes for the error model (the same formulas on
// absolute values; LayerNorm's: |gamma| rstd (|x - mu| + |mu|) + |beta| forward, and backward
// rstd (|g| + mean |g| + |xhat| mean |g xhat|), g = dU gamma: core/training/sequence_parallel).
struct NormReference {
  RowMatrix o, dx, dgamma, dbeta;
  Reference core;  // the MLP between: y, dx (= dU), da, dbias_a, db, dbias_b
};
NormReference norm_reference(const RowMatrix& x, const RowMatrix& gamma, const RowMatrix& beta,
                             const RowMatrix& a, const RowMatrix& bias_a, const RowMatrix& b,
                             const RowMatrix& bias_b, const RowMatrix& mask, const RowMatrix& d_o,
                             bool magnitudes_of) {
  const tp::LayerNormReference ln = tp::layernorm_reference(x, gamma, beta);
  const RowMatrix u = magnitudes_of ? tp::layernorm_magnitudes(ln, x, gamma, beta) : ln.u;
  NormReference out;
  const RowMatrix dy = mask.cwiseProduct(d_o);
  out.core = magnitudes_of ? magnitudes(u, a, bias_a, b, bias_b, dy)
                           : reference(u, a, bias_a, b, bias_b, dy);
  out.o = mask.cwiseProduct(out.core.y);
  tp::LayerNormGrads g = tp::layernorm_backward_reference(ln, gamma, out.core.dx, magnitudes_of);
  out.dx = std::move(g.dx);
  out.dgamma = std::move(g.dgamma);
  out.dbeta = std::move(g.dbeta);
  return out;
}

// STEP 9: the normalised block on my ranks; sp: sequence parallel (my rows in the LayerNorm and
// dropout regions), else as Megatron's tensor parallelism runs them (every row on every rank).
void norm_block(Comm& comm, const Shape& s, bool sp, double p, std::uint64_t seed,
                tp::NormOutcome& outcome) {
  const int me = comm.rank(), n = comm.size();
  const std::size_t T = s.rows, h = s.hidden, F = s.ffn, pc = s.split.size(me),
                    c0 = s.split.begin(me);
  // My rows: a Partition of the T tokens (the all-gather and reduce-scatter cut the T h
  // elements the same way, T dividing by N); all of them without sequence parallelism.
  const Partition tokens{T, sp ? n : 1};
  const int part = sp ? me : 0;
  const std::size_t r0 = tokens.begin(part), rows = tokens.size(part);
  const std::vector<float> x = tp::make_tensor(seed, kX, T, h),
                           d_o = tp::make_tensor(seed, kDO, T, h);
  const std::vector<float> gamma = tp::layernorm_gain(seed, kGamma, h);  // around 1
  const std::vector<float> beta = tp::make_tensor(seed, kBeta, 1, h, 0.1);
  const std::vector<float> a = tp::make_tensor(seed, kA, h, F, 1.0 / std::sqrt(double(h)));
  const std::vector<float> bias_a = tp::make_tensor(seed, kBiasA, 1, F, 0.1);
  const std::vector<float> b = tp::make_tensor(seed, kB, F, h, 1.0 / std::sqrt(double(F)));
  const std::vector<float> bias_b = tp::make_tensor(seed, kBiasB, 1, h, 0.1);
  const std::vector<float> mask = tp::dropout_mask(seed, kMask, T, h, p);

  // STEP 10: the split: my columns of A, rows of B (as above); the LayerNorm's gain and bias and
  // b whole. The regions' tensors on a ledger of their own (it also charges the rank's): my
  // rows of X, the LayerNorm's statistics, the mask and the output.
  Buffer<float> A = comm.alloc_from(tp::columns(a, h, F, c0, pc), Category::params);
  Buffer<float> bA = comm.alloc_from(tp::columns(bias_a, 1, F, c0, pc), Category::params);
  Buffer<float> B = comm.alloc_from(tp::rows(b, h, c0, pc), Category::params);
  Buffer<float> bB = comm.alloc_from(bias_b, Category::params);
  tp::NormRegions regions(comm, x, mask, gamma, beta, r0, rows, h);  // sequence_parallel.cpp
  Buffer<float> ones = comm.alloc<float>(T, Category::activations);
  ops::fill(ones.view(), 1.0f);
  Buffer<float> U = comm.alloc<float>(T * h, Category::activations),
                Z = comm.alloc<float>(T * pc, Category::activations),
                H = comm.alloc<float>(T * pc, Category::activations),
                Y = comm.alloc<float>(T * h, Category::activations);
  const View<float> mine_of_u = U.view().sub(r0 * h, rows * h),
                    mine_of_y = Y.view().sub(r0 * h, rows * h);

  comm.barrier();
  {
    auto phase = comm.phase("forward");
    // STEP 11: the LayerNorm region: my rows (all of them without sequence parallelism), into
    // my rows of U; then f all-gathers U's rows (without: U is whole already).
    regions.layernorm(mine_of_u);
    if (sp) outcome.f_forward = tp::sp_all_gather(comm, U.view(), tp::kFGatherPhase, "U (f)");
    {
      // STEP 12: the MLP between, as in steps 2 and 3: my columns of A, my rows of B.
      auto step = comm.phase(kForwardA);
      model::linear_forward(Z.view(), U.view(), A.view(), bA.view(), ones.view(), T, h, pc);
      ops::gelu_forward(H.view(), View<const float>(Z.view()));
    }
    {
      auto step = comm.phase(kForwardB);
      ops::gemm(Y.view(), View<const float>(H.view()), View<const float>(B.view()), T, h, pc);
    }
    // STEP 13: g: the partial Y_i reduce-scattered, my rows of the sum (without: all-reduced,
    // every row); then the dropout region on my rows: O = mask (Y + b).
    outcome.g_forward = tp::g_forward(comm, Y.view(), sp);
    auto step = comm.phase("bias, dropout (my rows)");
    ops::gemm(mine_of_y, View<const float>(ones.view().sub(0, rows)), View<const float>(bB.view()),
              rows, h, 1, false, false, 1.0f, 1.0f);
    regions.dropout(View<const float>(mine_of_y));
  }

  Buffer<float> dY = comm.alloc<float>(T * h, Category::activations),
                dH = comm.alloc<float>(T * pc, Category::activations),
                dU = comm.alloc<float>(T * h, Category::activations);
  Buffer<float> dA = comm.alloc<float>(h * pc, Category::grads),
                dbA = comm.alloc<float>(pc, Category::grads),
                dB = comm.alloc<float>(pc * h, Category::grads);
  // The replicated parameters' gradients in one buffer: the LayerNorm's gain, its bias, and b.
  Buffer<float> dRep = comm.alloc<float>(3 * h, Category::grads);
  const View<float> d_gamma = dRep.view().sub(0, h), d_beta = dRep.view().sub(h, h),
                    d_b = dRep.view().sub(2 * h, h);
  {
    auto phase = comm.phase("backward");
    const View<float> mine_of_dy = dY.view().sub(r0 * h, rows * h);
    {
      // STEP 14: the dropout's backward on my rows, dY = mask dO, and b's gradient from them;
      // g's all-gather hands every rank all of dY (without: every rank has it all).
      auto step = comm.phase("dropout' (my rows)");
      regions.dropout_backward(mine_of_dy, d_o);
      ops::col_sums(d_b, View<const float>(mine_of_dy), rows, h);
    }
    if (sp) outcome.g_backward = tp::sp_all_gather(comm, dY.view(), tp::kGGatherPhase, "dY (g)");
    {
      auto step = comm.phase(kBackwardB);
      ops::gemm(dB.view(), View<const float>(H.view()), View<const float>(dY.view()), pc, h, T,
                /*trans_a=*/true);
      ops::gemm(dH.view(), View<const float>(dY.view()), View<const float>(B.view()), T, pc, h,
                false, /*trans_b=*/true);
    }
    {
      auto step = comm.phase(kBackwardA);
      ops::gelu_backward(dH.view(), View<const float>(dH.view()), View<const float>(Z.view()));
      model::linear_backward(dU.view(), dA.view(), dbA.view(), dH.view(), U.view(), A.view(), T, h,
                             pc);
    }
    // STEP 15: f: the partial dU_i reduce-scattered, my rows of the sum (without: all-reduced);
    // the LayerNorm's backward on my rows; and, with sequence parallelism, the gradients of the
    // parameters every rank holds whole, each a sum over my rows only, all-reduced (3h floats).
    outcome.f_backward = tp::f_backward(comm, dU.view(), sp);
    regions.layernorm_backward(View<const float>(dU.view().sub(r0 * h, rows * h)), d_gamma, d_beta);
    // --break skip-replicated-allreduce: each rank keeps the gain's, bias's and b's gradients of
    // its own rows
    if (sp && !broken("skip-replicated-allreduce"))
      outcome.replicated = tp::collective_phase(comm, kReplicatedPhase, [&] {
        coll::all_reduce_ring_chunked(comm, dRep.view(), "dgamma, dbeta, db");
      });
  }
  regions.record_peak();

  // STEP 16: against the unsplit block in float64: my rows of O and dX, my parts of the weights'
  // gradients, and the replicated parameters' whole gradients.
  const auto m = [](const std::vector<float>& v, std::size_t r, std::size_t c) {
    return tp::as_matrix(v, r, c);
  };
  const NormReference ref =
      norm_reference(m(x, T, h), m(gamma, 1, h), m(beta, 1, h), m(a, h, F), m(bias_a, 1, F),
                     m(b, F, h), m(bias_b, 1, h), m(mask, T, h), m(d_o, T, h), false);
  const NormReference mag =
      norm_reference(m(x, T, h), m(gamma, 1, h), m(beta, 1, h), m(a, h, F), m(bias_a, 1, F),
                     m(b, F, h), m(bias_b, 1, h), m(mask, T, h).cwiseAbs(), m(d_o, T, h), true);
  if (comm.inject_fault()) inject_fault_into(dA.view());
  // The chain of sums: the LayerNorm's h, then as in the plain block, and the N-term all-reduces.
  const double chain = double(2 * h + F + T + std::size_t(2 * n));
  const double per_magnitude = kBoundFactor * chain * kEps32;
  std::vector<tp::Compared> compared;
  const auto within = [&](const std::string& name, View<const float> got, const RowMatrix& want,
                          const RowMatrix& mg) {
    compared.push_back(tp::compare_within(comm, name, got, want, per_magnitude * mg));
  };
  const auto rows_of = [&](const RowMatrix& t) {
    return RowMatrix(t.middleRows(Eigen::Index(r0), Eigen::Index(rows)));
  };
  const auto cols = [&](const RowMatrix& t) {
    return RowMatrix(t.middleCols(Eigen::Index(c0), Eigen::Index(pc)));
  };
  const auto brows = [&](const RowMatrix& t) {
    return RowMatrix(t.middleRows(Eigen::Index(c0), Eigen::Index(pc)));
  };
  const std::string which = sp ? fmt::format(" (rows {}..{})", r0, r0 + rows - 1) : "";
  within("O" + which, regions.output(), rows_of(ref.o), rows_of(mag.o));
  within("dX" + which, regions.input_grad(), rows_of(ref.dx), rows_of(mag.dx));
  within(fmt::format("dA_{}", me), dA.view(), cols(ref.core.da), cols(mag.core.da));
  within(fmt::format("da_{}", me), dbA.view(), cols(ref.core.dbias_a), cols(mag.core.dbias_a));
  within(fmt::format("dB_{}", me), dB.view(), brows(ref.core.db), brows(mag.core.db));
  within("dgamma", d_gamma, ref.dgamma, mag.dgamma);
  within("dbeta", d_beta, ref.dbeta, mag.dbeta);
  within("db", d_b, ref.core.dbias_b, mag.core.dbias_b);
  if (me == 0) {
    outcome.sequence_parallel = sp;
    outcome.compared = compared;
    outcome.error_measure =
        fmt::format("worst |error| / its bound {:.0f} x {} terms x eps x |terms|, at most 1",
                    kBoundFactor, chain);
  }
}

// The report of a --sequence-parallel run: its bytes per pass against one ring all-reduce's, and
// the LayerNorm and dropout regions' activations against the same block run without sequence
// parallelism (in-process, here, on as many ranks), both from the traces.
void report_sequence_parallel(RunResult& r, const Shape& s, const tp::NormOutcome& o, double p,
                              std::uint64_t seed) {
  const int n = r.world.size;
  tp::NormOutcome plain;
  const RunResult tp_run =
      run_in_process(n, [&](Comm& comm) { norm_block(comm, s, false, p, seed, plain); });
  fmt::print(
      "\nO = Dropout(GeLU(LN(X) A + a) B + b), X ({} x {}), dropout {:g}: the LayerNorm and "
      "dropout on {} of the {} rows per rank\n",
      s.rows, s.hidden, p, s.rows / std::size_t(n), s.rows);
  tp::report_sequence_parallel(r, tp_run, o, plain, s.rows, s.hidden,
                               "the LayerNorm's gain and bias and b", "3h", 3 * s.hidden);
  tp::print_compared("block", o.error_measure, o.compared);
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"12", "tensor_parallel_mlp",
                 "tensor parallelism of an MLP: A split by columns, B by rows", 4, 1});
  lesson.set_text(
      "Megatron-LM's MLP split: A by columns (each rank computes GeLU(X A_i) alone), B by rows "
      "(each rank's H_i B_i is a partial sum of Y). The operator g all-reduces Y in forward; f "
      "all-reduces dX in backward: one all-reduce each way per block, and every rank holds 1/N "
      "of the weights.",
      "Timeline: compute on every rank at once, then one all-reduce (g) at the end of forward and "
      "one (f) at the end of backward. Memory: params are 1/N of the unsplit block's.");
  lesson.describe_size("not used here: the block's sizes are --hidden, --batch and --seq");
  std::size_t hidden = 48, batch = 4, seq = 16;
  auto& app = lesson.app();
  app.add_option("--hidden", hidden,
                 "h: the block's width (A is h x 4h, B is 4h x h); 4h must divide by the ranks")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 14))
      ->capture_default_str();
  app.add_option("--batch", batch, "sequences")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 14))
      ->capture_default_str();
  app.add_option("--seq", seq, "tokens per sequence (X has batch x seq rows)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 14))
      ->capture_default_str();
  bool sequence_parallel = false;
  double dropout = 0.1;
  app.add_flag("--sequence-parallel", sequence_parallel,
               "the block as a transformer runs it, LayerNorm in front and dropout behind, those "
               "two regions cut along the tokens: f and g become an all-gather and a "
               "reduce-scatter (batch x seq must divide by the ranks)");
  app.add_option("--dropout", dropout, "the dropout's probability, with --sequence-parallel")
      ->check(CLI::Range(0.0, 0.95))
      ->capture_default_str();
  Shape s;
  lesson.add_break("no-g-allreduce",
                   "g's all-reduce is left out: every rank's Y is its partial H_i B_i, not the sum "
                   "(main.cpp, forward)");
  lesson.add_break("bias-before-g",
                   "every rank adds the bias b to its partial Y_i before g's all-reduce, so the "
                   "sum holds N b (main.cpp, forward)");
  lesson.add_break("skip-replicated-allreduce",
                   "with --sequence-parallel, the LayerNorm's gain and bias and b keep the "
                   "gradient of the rank's own rows: their all-reduce is left out (main.cpp, "
                   "norm_block)");
  tp::Outcome outcome;
  const auto& opt = lesson.options();
  lesson.on_world([&](const World& w) {
    s = {batch * seq, hidden, 4 * hidden, 4 * hidden / std::size_t(w.size),
         Partition{4 * hidden, w.size}};
    if (s.ffn % std::size_t(w.size) != 0)
      throw UsageError(fmt::format(
          "4h = {} columns of A do not split into {} equal parts: use a --hidden whose 4h "
          "divides by {}",
          s.ffn, w.size, w.size));
    if (sequence_parallel && s.rows % std::size_t(w.size) != 0)
      throw UsageError(fmt::format(
          "--sequence-parallel cuts the batch x seq = {} tokens into {} equal parts: use a "
          "--batch or --seq whose product divides by {}",
          s.rows, w.size, w.size));
    if (!sequence_parallel && app.count("--dropout") > 0)
      throw UsageError("--dropout is the dropout of the --sequence-parallel block: add it");
    const bool sp_bug = opt.break_name == "skip-replicated-allreduce";
    if (!opt.break_name.empty() && sequence_parallel != sp_bug)
      throw UsageError(
          sp_bug ? "--break skip-replicated-allreduce is a bug of sequence parallelism: add "
                   "--sequence-parallel"
                 : fmt::format("--break {} is a bug of the plain block's g: leave out "
                               "--sequence-parallel",
                               opt.break_name));
    lesson.set_algorithm(
        sequence_parallel
            ? fmt::format("Megatron MLP with sequence parallelism over {} ranks", w.size)
            : fmt::format("Megatron MLP: A by columns, B by rows, over {} ranks", w.size));
    lesson.set_metadata("splits", sequence_parallel ? sequence_parallel_picture(s, w.size)
                                                    : splits_picture(s, w.size));
  });

  // Memory: every rank builds the whole block and checks against it, so per rank the unsplit
  // tensors: X, dY, Y, dX (T x h), A, B, dA, dB (h x 4h), Z, H, dH (T x 4h), in float64 twice
  // (the reference and its rounding bounds) and once more while they are widened, plus the
  // float32 inputs (X, dY, A, B) and this rank's own buffers (a fifth of them at N = 1).
  // tests/memory_plan.sh holds the plan to what the process takes.
  lesson.needs_memory([&](const World&) {
    const double T = double(s.rows), h = double(s.hidden), F = double(s.ffn), p = double(s.part);
    const double unsplit = 4 * T * h + 4 * h * F + 3 * T * F;
    return MemoryNeed{
        3 * 8 * unsplit + 4 * (2 * T * h + 2 * h * F) + 4 * (5 * T * h + 4 * h * p + 3 * T * p), 0,
        "a smaller --hidden, --batch or --seq"};
  });

  tp::NormOutcome norm;
  lesson.on_report([&](RunResult& r) {
    if (sequence_parallel) return report_sequence_parallel(r, s, norm, dropout, opt.seed);
    const int n = r.world.size;
    fmt::print(
        "\nY = GeLU(X A + a) B + b with X ({} x {}), A ({} x {}), B ({} x {}), split over {} "
        "ranks\n",
        s.rows, s.hidden, s.hidden, s.ffn, s.ffn, s.hidden, n);
    fmt::print("  {:>4}  {:>14}  {:>10}  {:>14}  {:>14}  {:>10}\n", "rank", "A_i (columns)", "a_i",
               "B_i (rows)", "Y_i partial", "b");
    for (int k = 0; k < n; ++k)
      fmt::print("  {:>4}  {:>14}  {:>10}  {:>14}  {:>14}  {:>10}\n", fmt::format("r{}", k),
                 fmt::format("{} x {}", s.hidden, s.part), s.part,
                 fmt::format("{} x {}", s.part, s.hidden), fmt::format("{} x {}", s.rows, s.hidden),
                 fmt::format("{} (all)", s.hidden));
    fmt::print("  A_i is columns [{} i, {} (i+1)) of A, B_i the same rows of B\n", s.part, s.part);
    const std::uint64_t unsplit = (2 * s.hidden * s.ffn + s.ffn + s.hidden) * sizeof(float);
    tp::report(r, outcome, s.rows * s.hidden, unsplit,
               s.hidden * sizeof(float));  // b is on every rank
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    if (sequence_parallel) return norm_block(comm, s, true, dropout, opt.seed, norm);
    const int me = comm.rank();
    const std::uint64_t seed = opt.seed;
    const std::size_t T = s.rows, h = s.hidden, F = s.ffn, p = s.split.size(me),
                      c0 = s.split.begin(me);
    // Every rank makes the same X and dY (f's forward: X is already everywhere) and the whole A,
    // a, B, b, of which it keeps its part. Scales keep GeLU's input around 1.
    const std::vector<float> x = tp::make_tensor(seed, kX, T, h),
                             dy = tp::make_tensor(seed, kDY, T, h);
    const std::vector<float> a = tp::make_tensor(seed, kA, h, F, 1.0 / std::sqrt(double(h)));
    const std::vector<float> bias_a = tp::make_tensor(seed, kBiasA, 1, F, 0.1);
    const std::vector<float> b = tp::make_tensor(seed, kB, F, h, 1.0 / std::sqrt(double(F)));
    const std::vector<float> bias_b = tp::make_tensor(seed, kBiasB, 1, h, 0.1);

    // STEP 1: the split. My part of the weights: columns [c0, c0 + p) of A and a, the same rows
    // of B; b whole on every rank.
    Buffer<float> A = comm.alloc_from(tp::columns(a, h, F, c0, p), Category::params);
    Buffer<float> bA = comm.alloc_from(tp::columns(bias_a, 1, F, c0, p), Category::params);
    Buffer<float> B = comm.alloc_from(tp::rows(b, h, c0, p), Category::params);
    Buffer<float> bB = comm.alloc_from(bias_b, Category::params);
    Buffer<float> X = comm.alloc_from(x, Category::data), dY = comm.alloc_from(dy, Category::data);
    Buffer<float> ones = comm.alloc<float>(T, Category::activations);
    ops::fill(ones.view(), 1.0f);
    Buffer<float> Z = comm.alloc<float>(T * p, Category::activations),
                  H = comm.alloc<float>(T * p, Category::activations);
    Buffer<float> Y = comm.alloc<float>(T * h, Category::activations);

    comm.barrier();
    {
      auto phase = comm.phase("forward");
      {
        // STEP 2: f is the identity: X is already on every rank. My columns of A give my
        // columns of Z and, GeLU being elementwise, of H, with no message.
        auto step = comm.phase(kForwardA);
        model::linear_forward(Z.view(), X.view(), A.view(), bA.view(), ones.view(), T, h, p);
        ops::gelu_forward(H.view(), View<const float>(Z.view()));
      }
      {
        // STEP 3: my rows of B: Y_i = H_i B_i is a partial sum of Y, (T x h) on every rank.
        auto step = comm.phase(kForwardB);
        ops::gemm(Y.view(), View<const float>(H.view()), View<const float>(B.view()), T, h, p);
      }
      // STEP 4: g sums the partial Y_i (a ring all-reduce, core/training/tensor_parallel.cpp:
      // g_forward); b is added once, after the sum.
      const auto add_bias = [&] {  // Y += 1 b: the row-parallel bias, once, after the sum
        ops::gemm(Y.view(), View<const float>(ones.view()), View<const float>(bB.view()), T, h, 1,
                  false, false, 1.0f, 1.0f);
      };
      if (broken("bias-before-g")) add_bias();  // --break: every rank adds b, the sum holds N b
      if (!broken("no-g-allreduce"))            // --break: Y stays my partial Y_i
        outcome.forward = tp::g_forward(comm, Y.view());  // Y = sum of the partial Y_i
      if (!broken("bias-before-g")) add_bias();
    }

    Buffer<float> dB = comm.alloc<float>(p * h, Category::grads),
                  dbB = comm.alloc<float>(h, Category::grads);
    Buffer<float> dA = comm.alloc<float>(h * p, Category::grads),
                  dbA = comm.alloc<float>(p, Category::grads);
    Buffer<float> dH = comm.alloc<float>(T * p, Category::activations),
                  dX = comm.alloc<float>(T * h, Category::activations);
    {
      auto phase = comm.phase("backward");
      {
        // STEP 5: backward. g's backward is the identity: every rank has all of dY. My rows of B
        // give dB_i and my columns of dH.
        auto step = comm.phase(kBackwardB);  // g's backward is the identity: dY as it is
        ops::col_sums(dbB.view(), View<const float>(dY.view()), T, h);
        ops::gemm(dB.view(), View<const float>(H.view()), View<const float>(dY.view()), p, h, T,
                  /*trans_a=*/true);
        ops::gemm(dH.view(), View<const float>(dY.view()), View<const float>(B.view()), T, p, h,
                  false, /*trans_b=*/true);
      }
      {
        // STEP 6: through GeLU, my columns of A give dA_i, da_i and a partial dX_i.
        auto step = comm.phase(kBackwardA);
        ops::gelu_backward(dH.view(), View<const float>(dH.view()), View<const float>(Z.view()));
        model::linear_backward(dX.view(), dA.view(), dbA.view(), dH.view(), X.view(), A.view(), T,
                               h, p);
      }
      // STEP 7: f's backward sums the partial dX_i (tensor_parallel.cpp: f_backward).
      outcome.backward = tp::f_backward(comm, dX.view());  // dX = sum of the partial dX_i
    }

    // STEP 8: against the unsplit block in float64: Y and dX whole, my parts of the weights'
    // gradients, each element within its error bound.
    const Reference ref =
        reference(tp::as_matrix(x, T, h), tp::as_matrix(a, h, F), tp::as_matrix(bias_a, 1, F),
                  tp::as_matrix(b, F, h), tp::as_matrix(bias_b, 1, h), tp::as_matrix(dy, T, h));
    if (comm.inject_fault()) inject_fault_into(dA.view());
    const Reference mag =
        magnitudes(tp::as_matrix(x, T, h), tp::as_matrix(a, h, F), tp::as_matrix(bias_a, 1, F),
                   tp::as_matrix(b, F, h), tp::as_matrix(bias_b, 1, h), tp::as_matrix(dy, T, h));
    const double chain =
        double(h + F + T + std::size_t(comm.size()));  // the longest chain of sums, in terms
    const double per_magnitude = kBoundFactor * chain * kEps32;
    std::vector<tp::Compared> compared;
    auto within = [&](const std::string& name, View<const float> got, const RowMatrix& want,
                      const RowMatrix& m) {
      compared.push_back(tp::compare_within(comm, name, got, want, per_magnitude * m));
    };
    within("Y", Y.view(), ref.y, mag.y);
    within("dX", dX.view(), ref.dx, mag.dx);
    const auto cols = [&](const RowMatrix& m) {
      return RowMatrix(m.middleCols(Eigen::Index(c0), Eigen::Index(p)));
    };
    const auto rows = [&](const RowMatrix& m) {
      return RowMatrix(m.middleRows(Eigen::Index(c0), Eigen::Index(p)));
    };
    within(fmt::format("dA_{} (columns {}..{})", me, c0, c0 + p - 1), dA.view(), cols(ref.da),
           cols(mag.da));
    within(fmt::format("da_{}", me), dbA.view(), cols(ref.dbias_a), cols(mag.dbias_a));
    within(fmt::format("dB_{} (rows {}..{})", me, c0, c0 + p - 1), dB.view(), rows(ref.db),
           rows(mag.db));
    within("db", dbB.view(), ref.dbias_b, mag.dbias_b);
    if (me == 0) {
      outcome.compared = compared;
      outcome.error_measure =
          fmt::format("worst |error| / its bound {:.0f} x {} terms x eps x |terms|, at most 1",
                      kBoundFactor, chain);
    }
  });
}
