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
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"
#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"
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

// otherData.splits (docs/trace-format.md): the block as the Splits panel draws it, in the order
// of the computation, with each rank's columns of A and rows of B from s.split.
std::string splits_picture(const Shape& s, int n) {
  const std::size_t T = s.rows, h = s.hidden, F = s.ffn, p = s.part;
  const auto ranges = tp::rank_ranges(s.split);
  const auto block = tp::split_block;
  tp::SplitBlock a = block("A", "weight", {h, F}, {h, p}, "columns");
  a.ranges = ranges;
  a.forward_phase = kForwardA;
  a.backward_phase = kBackwardA;
  tp::SplitBlock xa = block("X A_i", "activation", {T, F}, {T, p}, "columns");
  xa.ranges = ranges;
  tp::SplitBlock gelu = block("GeLU", "activation", {T, F}, {T, p}, "columns");
  gelu.ranges = ranges;
  tp::SplitBlock b = block("B", "weight", {F, h}, {p, h}, "rows");
  b.ranges = ranges;
  b.forward_phase = kForwardB;
  b.backward_phase = kBackwardB;
  return tp::splits_json("mlp", "Y = GeLU(X A + a) B + b", n,
                         {block("X", "activation", {T, h}, {T, h}, "none"), tp::f_block(), a, xa,
                          gelu, b, block("H_i B_i", "activation", {T, h}, {T, h}, "partial"),
                          tp::g_block(), block("Y", "activation", {T, h}, {T, h}, "none")});
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
  Shape s;
  lesson.add_break("no-g-allreduce",
                   "g's all-reduce is left out: every rank's Y is its partial H_i B_i, not the sum "
                   "(main.cpp, forward)");
  lesson.add_break("bias-before-g",
                   "every rank adds the bias b to its partial Y_i before g's all-reduce, so the "
                   "sum holds N b (main.cpp, forward)");
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
    lesson.set_algorithm(
        fmt::format("Megatron MLP: A by columns, B by rows, over {} ranks", w.size));
    lesson.set_metadata("splits", splits_picture(s, w.size));
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

  lesson.on_report([&](RunResult& r) {
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
    Buffer<float> B = comm.alloc_from(std::vector<float>(b.begin() + std::ptrdiff_t(c0 * h),
                                                         b.begin() + std::ptrdiff_t((c0 + p) * h)),
                                      Category::params);
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
