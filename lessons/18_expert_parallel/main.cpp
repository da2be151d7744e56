// Lesson 18 — expert parallelism: a mixture-of-experts MLP, its tokens sent to their experts by
// all-to-all
//
// Concept: a mixture-of-experts (MoE) layer replaces one MLP by E experts, each an MLP
// h -> f -> h with GeLU, and a router W_r (h x E) that sends each token to its top-k experts
// (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021):
//   gates  p = softmax(x W_r)                 over the E experts, per token
//   top-k  the k experts with the largest p   (ties: the lower expert number)
//   y      = sum over its kept experts e of g_e Expert_e(x)
// with g_e = p_e (--gating softmax: Shazeer's and Switch's weights, the softmax over all E), or
// g_e = p_e / (sum of p over its k chosen) (--gating topk: GShard's top-2 weights, normalised by
// their sum, and Mixtral's softmax over the top-k logits, which is the same function).
// Expert parallelism puts E/N whole experts on each of N ranks; every rank also holds T tokens
// of its own (data parallel over tokens) and the router, replicated. A token's expert is
// usually on another rank, so one layer is four steps per direction:
//   route     gates, top-k, and a slot under the expert's capacity (or dropped)
//   dispatch  all-to-all: rank r's block for rank d holds its tokens for d's experts
//   experts   each rank runs its experts on the tokens it received
//   combine   all-to-all back, each output weighted by its gate at its token's rank
// Capacity: each expert takes at most cap = ceil(C T k / E) tokens from each rank (C =
// --capacity-factor), so every block of the all-to-all has one fixed size: E/N x cap tokens.
// Tokens over it are dropped (their output is 0 here: in a transformer the residual carries
// them), counted per expert. Slots go first-choice first: every token's first choice in token
// order, then every second choice (GShard's priority), so the rule is deterministic.
// Backward runs the same path reversed: dY weighted by the gate back to the experts (all-to-all),
// the experts' backward, their input gradients home (all-to-all); the router learns through the
// gates: d p_e = <dY, Expert_e(x)>, then softmax's backward; its gradient is summed over the ranks
// (all-reduce), each expert's needs no sum (one rank owns it).
//
// Verification: Y, dX, the router's gradient and every expert's weight gradients against a
// float64 MoE on one device given the same routing (decided once from the ranks' float32
// gates and handed to the reference, so a near tie cannot route two ways), each element within
// its bound from the error model below; the bytes of every all-to-all and of the router's
// all-reduce, counted from the trace, against their formulas.
//
// Run:  ./distlab lesson 18                       4 ranks, 8 experts (2 each), top-1
//       ./distlab lesson 18 --top-k 2             every token to its two best experts
//       ./distlab lesson 18 --capacity-factor 2   fewer drops, more padding on the wire
//       ./distlab lesson 18 --alltoall bruck      ceil(lg N) messages per all-to-all
//       ./distlab lesson 18 --mpi 2               one process per rank
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/units.hpp"
#include "core/collectives/all_gather_bruck.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/collectives/all_to_all.hpp"
#include "core/collectives/all_to_all_bruck.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/trace_counts.hpp"
#include "core/runtime/verify.hpp"
#include "core/training/model.hpp"
#include "core/training/model_reference.hpp"
#include "core/training/tensor_parallel.hpp"

using namespace distlab;
using tp::RowMatrix;

namespace {

// data.hpp streams of the layer's tensors (far from any rank number and from lesson 12's).
constexpr int kX = 4'000'001, kDY = 4'000'002, kRouter = 4'000'003, kExperts = 4'100'000;

struct Shape {
  int n = 1;                            // ranks
  std::size_t T = 0, h = 0, f = 0;      // tokens per rank, width, expert hidden width
  std::size_t E = 0, local = 0, k = 1;  // experts, experts per rank, top-k
  double C = 1.25;                      // capacity factor
  std::size_t cap = 0;                  // tokens per expert from each rank: ceil(C T k / E)
  bool bruck = false;                   // --alltoall bruck
  bool topk = false;                    // --gating topk: the chosen gates renormalised
  std::size_t block() const { return local * cap * h; }  // floats per all-to-all block
};

// Expert e's tensors W1 (h x f), b1 (f), W2 (f x h), b2 (h): the same on every rank.
struct Expert {
  std::vector<float> w1, b1, w2, b2;
};
Expert make_expert(std::uint64_t seed, const Shape& s, std::size_t e) {
  const int base = kExperts + 4 * int(e);
  return {tp::make_tensor(seed, base, s.h, s.f, 1.0 / std::sqrt(double(s.h))),
          tp::make_tensor(seed, base + 1, 1, s.f, 0.1),
          tp::make_tensor(seed, base + 2, s.f, s.h, 1.0 / std::sqrt(double(s.f))),
          tp::make_tensor(seed, base + 3, 1, s.h, 0.1)};
}

// One rank's routing: token t's j-th choice is expert[t k + j] (by gate, highest first), in
// slot[t k + j] of that expert's block from this rank, or -1: dropped (over capacity).
struct Routing {
  std::vector<int> expert, slot;
};

// STEP 3's rule: top-k by gate (ties to the lower expert), then slots first choice first, each
// in token order, while the expert has room for this rank's tokens.
Routing route(const std::vector<float>& gates, const Shape& s) {
  // quote: route
  const std::size_t T = s.T, E = s.E, k = s.k;
  Routing r;
  r.expert.assign(T * k, -1);
  r.slot.assign(T * k, -1);
  std::vector<int> order(E);
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t e = 0; e < E; ++e) order[e] = int(e);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return gates[t * E + std::size_t(a)] > gates[t * E + std::size_t(b)];
    });
    if (broken("router-bottom-k")) std::reverse(order.begin(), order.end());  // --break
    for (std::size_t j = 0; j < k; ++j) r.expert[t * k + j] = order[j];
  }
  std::vector<std::size_t> used(E, 0);
  for (std::size_t j = 0; j < k; ++j)
    for (std::size_t t = 0; t < T; ++t) {
      const auto e = std::size_t(r.expert[t * k + j]);
      if (used[e] < s.cap) r.slot[t * k + j] = int(used[e]++);
    }
  // end quote: route
  if (broken("slots-by-token")) {  // --break: token by token, a token's every choice in turn
    std::fill(used.begin(), used.end(), 0);
    for (std::size_t i = 0; i < T * k; ++i) {
      const auto e = std::size_t(r.expert[i]);
      r.slot[i] = used[e] < s.cap ? int(used[e]++) : -1;
    }
  }
  return r;
}

// STEP 3's weights: choice i's g, the gate it is weighted by (softmax: its p; topk: its p over
// the sum of its token's k chosen p, dropped ones included, as GShard normalises before capacity).
std::vector<float> weights(const std::vector<float>& gates, const Routing& r, const Shape& s) {
  std::vector<float> g(r.expert.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    g[i] = gates[(i / s.k) * s.E + std::size_t(r.expert[i])];
  if (s.topk)
    for (std::size_t t = 0; t * s.k < g.size(); ++t) {
      float sum = 0;
      for (std::size_t j = 0; j < s.k; ++j) sum += g[t * s.k + j];
      for (std::size_t j = 0; j < s.k; ++j) g[t * s.k + j] /= sum;
    }
  return g;
}

// Where token slot (expert e, slot) sits in an all-to-all buffer: block of e's owner (sending)
// or of the token's rank (receiving), then e's local number, then the slot: floats from the start.
std::size_t at(const Shape& s, std::size_t block, std::size_t local, std::size_t slot) {
  return ((block * s.local + local) * s.cap + slot) * s.h;
}

// The all-to-all of --alltoall (core/collectives: all_to_all.hpp, all_to_all_bruck.hpp), in a
// phase of its own; returns the step ids it took, for counting its bytes in the trace.
struct Steps {
  int first = 0, last = -1;
};
Steps all_to_all(Comm& comm, const Shape& s, const char* name, const char* buffer,
                 View<const float> send, View<float> recv) {
  auto phase = comm.phase(name);
  const int first = comm.next_steps(0);
  if (s.bruck)
    coll::all_to_all_bruck(comm, send, recv);
  else
    coll::all_to_all_pairwise(comm, send, recv, buffer);
  return {first, comm.next_steps(0) - 1};
}

// --- the reference: the same MoE on one device, in float64 --------------------------------------

// Every tensor the check compares; the same struct holds the magnitudes of the error model.
struct Reference {
  RowMatrix y, dx, dwr;                       // (N T x h), (N T x h), (h x E)
  std::vector<RowMatrix> dw1, db1, dw2, db2;  // per expert
};

// The error model. Each element the ranks compute in float32 is a chain of sums: h terms into a
// logit and into Z, f into an expert's output, N T k tokens into a weight gradient, E into the
// softmax's backward, N ranks into the router's all-reduce. A float32 sum of K terms is off by at
// most about K eps (the sum of the terms' absolute values) (Higham's gamma_K), and the chain's
// errors add, each carried by the next product's absolute values; GeLU passes an error on at
// most 1.13 times (its largest slope), GeLU' at most 0.8 times the error of Z (its curvature).
// A gate p = softmax(l) carries its logits' error: |dp| <= 2 p max|dl|, with |dl| <= h eps L,
// L the largest sum of |x_i| |W_r,ie|: so a gate is off by at most (2 h L + E) eps of itself.
// The magnitudes below are the layer's formulas on absolute values (gates as they are), and an
// element may be off by kBoundFactor K eps of its magnitude, K = h + f + N T k + E + N + 2 h L;
// the factor 2 covers GeLU's and exp's own roundings. With --gating topk a weight p_a / P
// carries its gate's error and its sum's (k gates and k + 1 roundings): K gains 2 h L + E + k + 1.
// A bug (a token at the wrong expert or
// slot, a gate left out, a missing sum) is off by the size of the values themselves.
constexpr double kEps32 = 0x1p-24;
constexpr double kBoundFactor = 2;
constexpr double kGeluSlope = 1.13, kGeluCurve = 0.8;

struct Inputs {  // the float32 inputs, widened
  RowMatrix x, dy, wr;
  std::vector<RowMatrix> w1, b1, w2, b2;
};

// The gates of all N T tokens in float64: the softmax of the float64 logits x W_r, row by row.
RowMatrix reference_gates(const Inputs& in) {
  RowMatrix p = in.x * in.wr;
  for (Eigen::Index t = 0; t < p.rows(); ++t) {
    p.row(t).array() = (p.row(t).array() - p.row(t).maxCoeff()).exp();
    p.row(t) /= p.row(t).sum();
  }
  return p;
}

// The MoE forward and backward for all N T tokens with the given routing (every rank's). With
// `magnitudes` the same formulas on absolute values: the error model's bounds.
Reference moe_reference(const Inputs& in, const std::vector<Routing>& routing, const Shape& s,
                        bool magnitudes) {
  const auto A = [&](const RowMatrix& m) { return magnitudes ? RowMatrix(m.cwiseAbs()) : m; };
  const RowMatrix x = A(in.x), dy = A(in.dy), wr = A(in.wr);
  // The gates are values in both; the weights g too: p at each token's chosen experts, with
  // --gating topk divided by their sum over the chosen (P, per token).
  const RowMatrix p = reference_gates(in);
  Reference r;
  const auto rows = Eigen::Index(std::size_t(s.n) * s.T);
  RowMatrix g = RowMatrix::Zero(rows, Eigen::Index(s.E));
  std::vector<std::vector<Eigen::Index>> chosen(static_cast<std::size_t>(rows));
  for (int src = 0; src < s.n; ++src)
    for (std::size_t i = 0; i < routing[std::size_t(src)].expert.size(); ++i) {
      const auto t = Eigen::Index(std::size_t(src) * s.T + i / s.k);
      const auto e = Eigen::Index(routing[std::size_t(src)].expert[std::size_t(i)]);
      g(t, e) = p(t, e);
      chosen[std::size_t(t)].push_back(e);
    }
  Eigen::VectorXd P = Eigen::VectorXd::Ones(rows);
  if (s.topk) {
    P = g.rowwise().sum();
    g = P.cwiseInverse().asDiagonal() * g;
  }
  r.y = RowMatrix::Zero(rows, Eigen::Index(s.h));
  r.dx = r.y;
  RowMatrix dp = RowMatrix::Zero(rows, Eigen::Index(s.E));
  // Expert by expert: the tokens kept there, from every rank (a dropped choice adds nothing and
  // learns nothing), as one matrix.
  for (std::size_t e = 0; e < s.E; ++e) {
    std::vector<Eigen::Index> at;  // rows of x: rank src's token t is row src T + t
    for (int src = 0; src < s.n; ++src) {
      const Routing& ro = routing[std::size_t(src)];
      for (std::size_t i = 0; i < ro.expert.size(); ++i)
        if (ro.slot[i] >= 0 && std::size_t(ro.expert[i]) == e)
          at.push_back(Eigen::Index(std::size_t(src) * s.T + i / s.k));
    }
    const RowMatrix w1 = A(in.w1[e]), b1 = A(in.b1[e]), w2 = A(in.w2[e]), b2 = A(in.b2[e]);
    const RowMatrix xe = x(at, Eigen::all), dye = dy(at, Eigen::all);
    const Eigen::VectorXd gate = g(at, Eigen::Index(e));
    const RowMatrix z = (xe * w1).rowwise() + b1.row(0);
    const RowMatrix hid =
        magnitudes ? RowMatrix(kGeluSlope * z) : RowMatrix(z.unaryExpr(&model::reference_gelu));
    const RowMatrix out = (hid * w2).rowwise() + b2.row(0);
    const RowMatrix dout = gate.asDiagonal() * dye;  // p dY, what goes to the expert
    const RowMatrix slope = magnitudes ? RowMatrix((kGeluSlope + kGeluCurve * z.array()).matrix())
                                       : RowMatrix(z.unaryExpr(&model::reference_gelu_grad));
    const RowMatrix dz = (dout * w2.transpose()).cwiseProduct(slope);
    r.dw1.push_back(xe.transpose() * dz);
    r.db1.push_back(dz.colwise().sum());
    r.dw2.push_back(hid.transpose() * dout);
    r.db2.push_back(dout.colwise().sum());
    const RowMatrix dxe = dz * w1.transpose();
    const Eigen::VectorXd dgate = dye.cwiseProduct(out).rowwise().sum();  // d p_e = <dY, out>
    for (std::size_t i = 0; i < at.size(); ++i) {  // a token is kept at most once per expert
      const Eigen::Index t = at[i], row = Eigen::Index(i);
      r.y.row(t) += gate[row] * out.row(row);
      r.dx.row(t) += dxe.row(row);
      dp(t, Eigen::Index(e)) = dgate[row];
    }
  }
  // With --gating topk, d g to d p: g_a = p_a / P over the chosen, so d p_a = (d g_a - <g, d g>)
  // / P for a chosen, 0 otherwise; on magnitudes (|d g_a| + <g, |d g|>) / P.
  if (s.topk)
    for (Eigen::Index t = 0; t < rows; ++t) {
      const double dot = g.row(t).dot(dp.row(t));
      for (const Eigen::Index e : chosen[std::size_t(t)])
        dp(t, e) = (dp(t, e) + (magnitudes ? dot : -dot)) / P[t];
    }
  // Softmax's backward: dl = p (dp - <p, dp>); on magnitudes p (|dp| + <p, |dp|>).
  RowMatrix dl(rows, Eigen::Index(s.E));
  for (Eigen::Index t = 0; t < rows; ++t) {
    const double dot = p.row(t).dot(dp.row(t));
    dl.row(t) = p.row(t).array() * (dp.row(t).array() + (magnitudes ? dot : -dot));
  }
  r.dwr = x.transpose() * dl;
  r.dx += dl * wr.transpose();
  return r;
}

// The router's choice against the float64 gates p64 (reference_gates: not the ranks' softmax nor
// their sort): each of rank me's tokens' k choices are distinct experts, in order of gate, and
// no expert left out has a larger gate than one chosen. The ranks choose by float32 gates, each
// within rel of itself (the error model's kBoundFactor (2 h L + E) eps), so two gates nearer
// than their two bounds are a tie either way may take. closest: the smallest gap between a
// token's last choice and the best expert it left out, in units of their two bounds (below 1:
// a near tie).
struct RouterCheck {
  std::string wrong;  // the first token that breaks the rule; empty: none
  double closest = INFINITY;
};
RouterCheck check_routing(const RowMatrix& p64, const Routing& mine, const Shape& s, int me,
                          double rel) {
  RouterCheck c;
  const std::size_t k = s.k, E = s.E;
  for (std::size_t t = 0; t < s.T && c.wrong.empty(); ++t) {
    const auto row = Eigen::Index(std::size_t(me) * s.T + t);
    const auto gate = [&](std::size_t e) { return p64(row, Eigen::Index(e)); };
    const auto gap = [&](std::size_t a, std::size_t b) {  // a's gate over b's, in bounds
      return (gate(a) - gate(b)) / (rel * (gate(a) + gate(b)));
    };
    std::vector<bool> taken(E, false);
    for (std::size_t j = 0; j < k && c.wrong.empty(); ++j) {
      const int e = mine.expert[t * k + j];
      if (e < 0 || std::size_t(e) >= E || taken[std::size_t(e)])
        c.wrong = fmt::format("token {}'s choice {} is expert {}: not a new expert", t, j + 1, e);
      else if (j > 0 && gap(std::size_t(mine.expert[t * k + j - 1]), std::size_t(e)) < -1)
        c.wrong =
            fmt::format("token {}'s choice {} (expert {}, gate {:.6g}) is above its choice {}", t,
                        j + 1, e, gate(std::size_t(e)), j);
      else
        taken[std::size_t(e)] = true;
    }
    const auto last = std::size_t(mine.expert[t * k + k - 1]);
    for (std::size_t other = 0; other < E && c.wrong.empty(); ++other) {
      if (taken[other]) continue;
      c.closest = std::min(c.closest, gap(last, other));
      if (gap(last, other) < -1)
        c.wrong = fmt::format(
            "token {} left out expert {} (gate {:.6g}), above its choice {} (expert {}, gate "
            "{:.6g})",
            t, other, gate(other), k, last, gate(last));
    }
  }
  return c;
}

// One tensor against the reference, element by element within its bound: the worst
// |error| / bound, ok when at most 1.
struct Compared {
  std::string name;
  double error = 0;
  bool ok = false;
};
Compared compare_within(Comm& comm, const std::string& name, View<const float> got,
                        const RowMatrix& want, const RowMatrix& bound) {
  const std::vector<float> host = to_host(got);
  Compared c{name, 0, host.size() == std::size_t(want.size())};
  for (Eigen::Index i = 0; c.ok && i < want.size(); ++i) {
    const double err = std::fabs(double(host[std::size_t(i)]) - want.data()[i]);
    const double ratio = bound.data()[i] > 0 ? err / bound.data()[i] : (err > 0 ? INFINITY : 0);
    c.error = std::isnan(err) ? INFINITY : std::max(c.error, ratio);
  }
  c.ok = c.ok && c.error <= 1;
  comm.check(fmt::format("{} equals the single-device MoE's (worst error {:.2g} of its bound, "
                         "at most 1)",
                         name, c.error),
             c.ok);
  return c;
}

// What rank 0 keeps of the run for the report.
struct Outcome {
  Steps dispatch, combine, combine_back, dispatch_back, router;
  std::vector<Routing> routing;  // every rank's, gathered
  std::vector<Compared> compared;
  std::string measure;
  double router_closest = INFINITY;  // rank 0's check_routing
};

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"18", "expert_parallel",
                 "expert parallelism: a mixture of experts, tokens dispatched and combined by "
                 "all-to-all",
                 4, 1});
  lesson.set_text(
      "A mixture-of-experts layer sends each token to its top-k experts by a router's gates. "
      "Expert parallelism puts E/N experts on each rank: an all-to-all dispatches the tokens to "
      "their experts' ranks and another combines the outputs back, weighted by the gates; "
      "backward reverses both. Each expert takes at most ceil(C T k / E) tokens from each rank: "
      "the rest are dropped.",
      "Timeline: dispatch, experts, combine forward; combine's and dispatch's all-to-alls again "
      "in backward, then the router's all-reduce. Each expert phase names its tokens; the "
      "counters 'tokens at my experts' and 'tokens I dropped' show the imbalance per rank.");
  lesson.describe_size(
      "not used here: the layer's sizes are --tokens, --hidden, --ffn and --experts");
  Shape s;
  std::size_t experts = 0;
  std::string algo = "pairwise";
  s.T = 32, s.h = 16, s.f = 32;
  auto& app = lesson.app();
  app.add_option("--experts", experts,
                 "E, the experts (default 2 per rank); E must divide by the ranks")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--top-k", s.k, "experts per token")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();
  app.add_option("--capacity-factor", s.C,
                 "C: each expert takes at most ceil(C T k / E) tokens from each rank")
      ->check(CLI::Range(0.01, 64.0))
      ->capture_default_str();
  app.add_option("--tokens", s.T, "T, tokens per rank")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 14))
      ->capture_default_str();
  app.add_option("--hidden", s.h, "h, a token's width")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}))
      ->capture_default_str();
  app.add_option("--ffn", s.f, "f, an expert's hidden width (h -> f -> h)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{16384}))
      ->capture_default_str();
  std::string gating = "softmax";
  app.add_option("--gating", gating,
                 "a kept expert's weight: softmax, its gate p as it is (Switch); topk, p over the "
                 "sum of the token's k chosen p (GShard's top-2, Mixtral's softmax over the top-k "
                 "logits)")
      ->check(CLI::IsMember({"softmax", "topk"}))
      ->capture_default_str();
  app.add_option("--alltoall", algo, "the all-to-all: pairwise exchange or Bruck's")
      ->check(CLI::IsMember({"pairwise", "bruck"}))
      ->capture_default_str();
  lesson.add_break("combine-skips-gate",
                   "the combine adds the experts' outputs without their gates: y = sum_e "
                   "Expert_e(x) (main.cpp, STEP 6)");
  lesson.add_break("slots-by-token",
                   "the capacity's slots go token by token, each token's choices in turn: a "
                   "token's second choice can take the place of a later token's first (main.cpp, "
                   "route)");
  lesson.add_break("router-bottom-k",
                   "the router takes each token's k experts with the smallest gates, worst first "
                   "(main.cpp, route)");
  lesson.add_break("router-ignores-gate",
                   "the router's gradient ignores the gates: they are taken as constants, so d p "
                   "= 0 and the router never learns (main.cpp, STEP 10)");
  const auto& opt = lesson.options();
  lesson.on_world([&](const World& w) {
    s.n = w.size;
    s.E = experts > 0 ? experts : 2 * std::size_t(w.size);
    s.bruck = algo == "bruck";
    s.topk = gating == "topk";
    if (s.E % std::size_t(w.size) != 0)
      throw UsageError(fmt::format(
          "--experts {} do not split over {} ranks: each rank holds E/N whole experts; use a "
          "multiple of {}",
          s.E, w.size, w.size));
    if (s.k > s.E)
      throw UsageError(fmt::format("--top-k {} is more than the {} experts", s.k, s.E));
    if (opt.break_name == "slots-by-token" && s.k < 2)
      throw UsageError(
          "--break slots-by-token is a bug of top-k routing past 1 (with one choice a token the "
          "two orders agree): add --top-k 2");
    s.local = s.E / std::size_t(w.size);
    s.cap = std::size_t(std::ceil(s.C * double(s.T * s.k) / double(s.E)));
    lesson.set_algorithm(
        fmt::format("MoE, {} experts over {} ranks, top-{}, {} gating, "
                    "all-to-all {}",
                    s.E, w.size, s.k, gating, algo));
  });
  // Memory: every rank makes every rank's tokens and every expert (float32), and the float64
  // reference and its magnitudes over all of them (twice, with the widened inputs); its own
  // buffers are a few times the all-to-all's N blocks.
  lesson.needs_memory([&](const World& w) {
    const double n = double(w.size), tokens = n * double(s.T), h = double(s.h), f = double(s.f),
                 E = double(s.E ? s.E : 2 * std::size_t(w.size));
    const double all = tokens * (3 * h + 2 * E) + E * (2 * h * f + f + h) + h * E;
    const double cap = std::ceil(s.C * double(s.T * s.k) / E);
    const double a2a = n * (E / n) * cap * (h + f);
    return MemoryNeed{4 * all + 3 * 8 * all + 4 * 12 * a2a, 0,
                      "a smaller --tokens, --hidden, --ffn or --experts"};
  });

  Outcome outcome;
  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    fmt::print(
        "\nMoE layer: {} experts h {} -> f {} -> h {} over {} ranks ({} each), top-{}, T = {} "
        "tokens per rank\ncapacity per expert per rank = ceil(C T k / E) = ceil({} x {} x {} / "
        "{}) = {} tokens\n",
        s.E, s.h, s.f, s.h, n, s.local, s.k, s.T, s.C, s.T, s.k, s.E, s.cap);
    // The load per expert, from every rank's routing: wanted (routed there), kept, dropped.
    std::vector<std::size_t> wanted(s.E, 0), kept(s.E, 0);
    std::vector<std::uint64_t> payload(std::size_t(n), 0);  // token bytes rank r sends away
    for (int src = 0; src < n; ++src) {
      const Routing& ro = outcome.routing[std::size_t(src)];
      for (std::size_t i = 0; i < ro.expert.size(); ++i) {
        const auto e = std::size_t(ro.expert[i]);
        ++wanted[e];
        if (ro.slot[i] < 0) continue;
        ++kept[e];
        if (int(e / s.local) != src) payload[std::size_t(src)] += s.h * sizeof(float);
      }
    }
    std::size_t all_wanted = 0, all_kept = 0, most = 0;
    fmt::print("\nload per expert (tokens from all ranks; capacity N x cap = {}):\n", n * s.cap);
    fmt::print("  {:>6}  {:>5}  {:>7}  {:>5}  {:>7}  {}\n", "expert", "rank", "routed", "kept",
               "dropped", "kept / capacity");
    for (std::size_t e = 0; e < s.E; ++e) {
      all_wanted += wanted[e], all_kept += kept[e], most = std::max(most, wanted[e]);
      if (s.E <= 32) {
        const std::size_t bar = 20 * kept[e] / (std::size_t(n) * s.cap);
        fmt::print("  {:>6}  {:>5}  {:>7}  {:>5}  {:>7}  {}{}\n", e,
                   fmt::format("r{}", e / s.local), wanted[e], kept[e], wanted[e] - kept[e],
                   std::string(bar, '#'), std::string(20 - bar, '.'));
      }
    }
    const double mean = double(all_wanted) / double(s.E);
    fmt::print(
        "  {} token choices, {} kept, {} dropped ({:.1f}%); the busiest expert was sent {:.2f} "
        "times the mean\n",
        all_wanted, all_kept, all_wanted - all_kept,
        100.0 * double(all_wanted - all_kept) / double(all_wanted), double(most) / mean);
    r.check(
        "every token choice is kept or dropped, none lost",
        all_wanted == std::size_t(n) * s.T * s.k,
        fmt::format("{} choices for {} tokens x top-{}", all_wanted, std::size_t(n) * s.T, s.k));

    // The capacity rule, from the gathered routing: from each rank, each expert keeps its first
    // cap choices in priority order, every token's first choice (in token order), then every
    // second choice, ..., in slots 0, 1, ..; the rest are dropped.
    std::string rule;
    for (int src = 0; src < n && rule.empty(); ++src) {
      const Routing& ro = outcome.routing[std::size_t(src)];
      std::vector<std::size_t> taken(s.E, 0);
      for (std::size_t j = 0; j < s.k && rule.empty(); ++j)
        for (std::size_t t = 0; t < s.T && rule.empty(); ++t) {
          const std::size_t i = t * s.k + j, e = std::size_t(ro.expert[i]);
          const int want = taken[e] < s.cap ? int(taken[e]++) : -1;
          if (ro.slot[i] != want)
            rule = fmt::format("r{}'s token {}, choice {} (expert {}): slot {}, the rule's {}", src,
                               t, j + 1, e, ro.slot[i], want);
        }
    }
    r.check("from each rank, each expert keeps its first cap choices, first choices first",
            rule.empty(), rule);

    // Who sends how many kept tokens to whom: the dispatch's real payload (the diagonal stays
    // on its rank, no message).
    if (n <= 8) {
      fmt::print(
          "\nkept tokens rank r dispatches to rank d (the combine returns as many):\n  {:>6}",
          "r \\ d");
      for (int d = 0; d < n; ++d) fmt::print(" {:>5}", fmt::format("r{}", d));
      fmt::print("\n");
      for (int src = 0; src < n; ++src) {
        std::vector<std::size_t> to(std::size_t(n), 0);
        const Routing& ro = outcome.routing[std::size_t(src)];
        for (std::size_t i = 0; i < ro.expert.size(); ++i)
          if (ro.slot[i] >= 0) ++to[std::size_t(ro.expert[i]) / s.local];
        fmt::print("  {:>6}", fmt::format("r{}", src));
        for (std::size_t c : to) fmt::print(" {:>5}", c);
        fmt::print("\n");
      }
      fmt::print("  every cell travels as one block of E/N x cap = {} slots, full or not\n",
                 s.local * s.cap);
    }

    // The all-to-alls' bytes from the trace against the formula: every block is E/N cap tokens
    // of h floats, B bytes; pairwise sends N - 1 of them per rank, Bruck each distance i < N
    // once per set bit of i.
    const std::uint64_t B = s.block() * sizeof(float);
    std::uint64_t blocks = 0, msgs = 0;
    for (int i = 1; i < n; ++i)
      blocks += s.bruck ? std::uint64_t(std::popcount(unsigned(i))) : 1, msgs += s.bruck ? 0 : 1;
    if (s.bruck) msgs = n > 1 ? std::uint64_t(std::bit_width(unsigned(n - 1))) : 0;
    fmt::print("\nall-to-all ({}), a block B = E/N x cap x h x 4 = {}; per rank, from the trace:\n",
               s.bruck ? "bruck" : "pairwise", format_bytes(double(B)));
    fmt::print("  {:<20} {:>6} {:>12} {:>12}   formula {}\n", "", "msgs", "max sent", "all ranks",
               s.bruck ? "sum_i popcount(i) B" : "(N-1) B");
    bool bytes_ok = true;
    const auto row = [&](const char* name, const Steps& st) {
      const StepCounts c = count_steps(r, st.first, st.last);
      bool ok = c.ranks.size() == std::size_t(n) || (n == 1 && c.ranks.empty());
      for (const RankTraffic& t : c.ranks)
        ok = ok && t.bytes_sent == blocks * B && t.bytes_recv == blocks * B && t.msgs_sent == msgs;
      bytes_ok = bytes_ok && ok;
      fmt::print("  {:<20} {:>6} {:>12} {:>12}   {}\n", name, c.max_msgs,
                 format_bytes(double(c.max_sent)), format_bytes(double(c.all_links)),
                 format_bytes(double(blocks * B)));
    };
    row("dispatch", outcome.dispatch);
    row("combine", outcome.combine);
    row("combine's backward", outcome.combine_back);
    row("dispatch's backward", outcome.dispatch_back);
    r.check(
        fmt::format("each all-to-all: every rank sends and receives {} blocks of {} B", blocks, B),
        bytes_ok);
    std::uint64_t padded = 0, useful = 0;
    for (int k = 0; k < n; ++k)
      padded += std::uint64_t(n - 1) * B, useful += payload[std::size_t(k)];
    if (n > 1)
      fmt::print(
          "  of the dispatch's (N-1) B per rank, kept tokens fill {:.0f}% (the loads); the rest "
          "is\n  padding: empty slots of the fixed capacity\n",
          100.0 * double(useful) / double(padded));
    // The router's gradient: one ring all-reduce of h E floats; all ranks together send
    // 2(N-1) h E floats.
    const StepCounts rc = count_steps(r, outcome.router.first, outcome.router.last);
    const std::uint64_t router_bytes = 2 * std::uint64_t(n - 1) * s.h * s.E * sizeof(float);
    fmt::print(
        "\nrouter's gradient: a ring all-reduce of h x E = {} floats, {} sent by all "
        "ranks\n  (formula 2(N-1) h E x 4 = {})\n",
        s.h * s.E, format_bytes(double(rc.all_links)), format_bytes(double(router_bytes)));
    r.check("the router's all-reduce: 2(N-1) h E floats over all ranks",
            rc.all_links == router_bytes, fmt::format("{} B", rc.all_links));

    if (s.k < s.E)
      fmt::print(
          "\nrouting against the float64 gates: rank 0's closest call, its last choice's gate over "
          "the best\nexpert it left out, is {:.3g} times the two gates' error bounds (below 1: a "
          "near tie)\n",
          outcome.router_closest);
    fmt::print("\nagainst the single-device MoE in float64, rank 0's tensors\n({}):\n",
               outcome.measure);
    for (const Compared& c : outcome.compared)
      fmt::print("  {:<34} {:>10.2g}  {}\n", c.name, c.error, c.ok ? "ok" : "WRONG");
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    const int me = comm.rank(), n = comm.size();
    const std::uint64_t seed = opt.seed;
    const std::size_t T = s.T, h = s.h, f = s.f, E = s.E, k = s.k, cap = s.cap;
    const std::size_t whole = std::size_t(n) * s.block(), rows = std::size_t(n) * cap;
    // Every rank can make every rank's tokens and every expert from the seed (the reference
    // needs them); each keeps its own. The router is larger than the experts' 1/sqrt(h) so that
    // its gates differ: some experts get more tokens than others.
    const std::vector<float> x_all = tp::make_tensor(seed, kX, std::size_t(n) * T, h),
                             dy_all = tp::make_tensor(seed, kDY, std::size_t(n) * T, h),
                             wr = tp::make_tensor(seed, kRouter, h, E, 2.0 / std::sqrt(double(h)));
    std::vector<Expert> every;
    for (std::size_t e = 0; e < E; ++e) every.push_back(make_expert(seed, s, e));

    // STEP 1: my T tokens, the router (replicated) and my E/N experts, e = me E/N + l.
    Buffer<float> X = comm.alloc_from(tp::rows(x_all, h, std::size_t(me) * T, T), Category::data);
    Buffer<float> dY = comm.alloc_from(tp::rows(dy_all, h, std::size_t(me) * T, T), Category::data);
    Buffer<float> Wr = comm.alloc_from(wr, Category::params);
    std::vector<Buffer<float>> W1, B1, W2, B2;
    for (std::size_t l = 0; l < s.local; ++l) {
      const Expert& ex = every[std::size_t(me) * s.local + l];
      W1.push_back(comm.alloc_from(ex.w1, Category::params));
      B1.push_back(comm.alloc_from(ex.b1, Category::params));
      W2.push_back(comm.alloc_from(ex.w2, Category::params));
      B2.push_back(comm.alloc_from(ex.b2, Category::params));
    }
    Buffer<float> ones = comm.alloc<float>(rows, Category::activations);
    ops::fill(ones.view(), 1.0f);
    Outcome local;

    comm.barrier();
    // STEP 2: the router: gates p = softmax(X W_r), (T x E).
    Buffer<float> gates = comm.alloc<float>(T * E, Category::activations);
    {
      auto phase = comm.phase("router: softmax(X W_r)",
                              {.op = "forward", .text = "each rank gates its own tokens"});
      ops::gemm(gates.view(), View<const float>(X.view()), View<const float>(Wr.view()), T, E, h);
      ops::softmax_rows(gates.view(), View<const float>(gates.view()), T, E);
    }
    const std::vector<float> p = to_host(gates.view());

    // STEP 3: top-k and capacity: each choice gets a slot in its expert's block, or is dropped.
    // Each choice's weight g: its gate, or (--gating topk) its gate over its token's k chosen.
    const Routing mine = route(p, s);
    const std::vector<float> weight = weights(p, mine, s);
    std::size_t dropped = 0;
    for (int slot : mine.slot) dropped += slot < 0 ? 1 : 0;
    comm.recorder().value("tokens I dropped", double(dropped));

    // STEP 4: dispatch: my kept tokens packed by destination rank, expert, slot (empty slots are
    // zeros), one all-to-all; then block src of `got` holds rank src's tokens for my experts.
    const std::vector<float> x_mine = to_host(X.view());
    std::vector<float> packed(whole, 0.0f);
    for (std::size_t i = 0; i < T * k; ++i) {
      if (mine.slot[i] < 0) continue;
      const auto e = std::size_t(mine.expert[i]), t = i / k;
      std::copy_n(x_mine.begin() + std::ptrdiff_t(t * h), h,
                  packed.begin() +
                      std::ptrdiff_t(at(s, e / s.local, e % s.local, std::size_t(mine.slot[i]))));
    }
    Buffer<float> send = comm.alloc_from(packed, Category::activations);
    Buffer<float> got = comm.alloc<float>(whole, Category::activations);
    local.dispatch = all_to_all(comm, s, "dispatch: all-to-all", "tokens",
                                View<const float>(send.view()), got.view());

    // STEP 5: my experts, each on its N x cap slots (rank src's in rows src cap ..):
    //   Z = Xe W1 + b1, H = GeLU(Z), Ye = H W2 + b2; the outputs in the same slots of `out`.
    // Every slot is computed, full or empty: the GEMMs have one fixed shape (empty ones are
    // never read back).
    // How many tokens each of my experts was sent, kept, from every rank: the imbalance.
    std::vector<std::size_t> load(s.local, 0);
    {
      Buffer<std::int64_t> counts = comm.alloc<std::int64_t>(std::size_t(n) * E, Category::data);
      std::vector<std::int64_t> mine_counts(E, 0);
      for (std::size_t i = 0; i < T * k; ++i)
        if (mine.slot[i] >= 0) ++mine_counts[std::size_t(mine.expert[i])];
      from_host(counts.view().sub(std::size_t(me) * E, E), mine_counts);
      auto phase = comm.phase("loads: all-gather the counts");
      coll::all_gather_bruck(comm, counts.view(), "loads");
      const std::vector<std::int64_t> all = to_host(counts.view());
      for (int src = 0; src < n; ++src)
        for (std::size_t l = 0; l < s.local; ++l)
          load[l] += std::size_t(all[std::size_t(src) * E + std::size_t(me) * s.local + l]);
    }
    std::size_t my_load = 0;
    for (std::size_t c : load) my_load += c;
    comm.recorder().value("tokens at my experts", double(my_load));
    std::vector<Buffer<float>> Xe, Z, H;
    Buffer<float> out = comm.alloc<float>(whole, Category::activations);
    for (std::size_t l = 0; l < s.local; ++l) {
      const std::size_t e = std::size_t(me) * s.local + l;
      auto phase = comm.phase(fmt::format("expert {}: {} tokens", e, load[l]),
                              {.op = "forward",
                               .text = fmt::format("expert {} on rank {}: {} of its {} slots full",
                                                   e, me, load[l], rows)});
      Xe.push_back(comm.alloc<float>(rows * h, Category::activations));
      Z.push_back(comm.alloc<float>(rows * f, Category::activations));
      H.push_back(comm.alloc<float>(rows * f, Category::activations));
      Buffer<float> Ye = comm.alloc<float>(rows * h, Category::activations);
      for (int src = 0; src < n; ++src)
        ops::copy(Xe[l].view().sub(std::size_t(src) * cap * h, cap * h),
                  View<const float>(got.view().sub(at(s, std::size_t(src), l, 0), cap * h)));
      model::linear_forward(Z[l].view(), Xe[l].view(), W1[l].view(), B1[l].view(), ones.view(),
                            rows, h, f);
      ops::gelu_forward(H[l].view(), View<const float>(Z[l].view()));
      model::linear_forward(Ye.view(), H[l].view(), W2[l].view(), B2[l].view(), ones.view(), rows,
                            f, h);
      for (int src = 0; src < n; ++src)
        ops::copy(out.view().sub(at(s, std::size_t(src), l, 0), cap * h),
                  View<const float>(Ye.view().sub(std::size_t(src) * cap * h, cap * h)));
    }

    // STEP 6: combine: the outputs go home by the reverse all-to-all, and each token sums its
    // kept experts' outputs weighted by their gates: y_t = sum_j p_tj out_tj (0 when all dropped).
    Buffer<float> back = comm.alloc<float>(whole, Category::activations);
    local.combine = all_to_all(comm, s, "combine: all-to-all", "outputs",
                               View<const float>(out.view()), back.view());
    const std::vector<float> outs = to_host(back.view());
    std::vector<float> y(T * h, 0.0f);
    const auto slot_of = [&](std::size_t i) {  // where choice i's slot sits on its token's rank
      const auto e = std::size_t(mine.expert[i]);
      return at(s, e / s.local, e % s.local, std::size_t(mine.slot[i]));
    };
    const auto gate_of = [&](std::size_t i) { return weight[i]; };
    {
      auto phase = comm.phase("combine: weight by the gates",
                              {.op = "forward", .text = "y = sum of p_e Expert_e(x)"});
      for (std::size_t i = 0; i < T * k; ++i) {
        if (mine.slot[i] < 0) continue;
        // (--break combine-skips-gate: every kept expert's output counts fully)
        const float g = broken("combine-skips-gate") ? 1.0f : gate_of(i);
        for (std::size_t c = 0; c < h; ++c) y[(i / k) * h + c] += g * outs[slot_of(i) + c];
      }
    }
    Buffer<float> Y = comm.alloc_from(y, Category::activations);

    // STEP 7: backward from dY. Combine's backward: the weight's gradient d g_tj = <dY_t, out_tj>
    // stays here (for the router); g_tj dY_t goes back to its expert's slot by all-to-all. The
    // router needs d p: d g itself (softmax gating), or with topk, g_a = p_a / P over the chosen,
    // d p_a = (d g_a - <g, d g>) / P (a dropped choice has d g = 0 but still shares P).
    const std::vector<float> dy = to_host(dY.view());
    std::vector<float> dg(T * k, 0.0f), dgate(T * E, 0.0f), dout(whole, 0.0f);
    for (std::size_t i = 0; i < T * k; ++i) {
      if (mine.slot[i] < 0) continue;
      const std::size_t t = i / k;
      for (std::size_t c = 0; c < h; ++c) {
        dg[i] += dy[t * h + c] * outs[slot_of(i) + c];
        dout[slot_of(i) + c] = gate_of(i) * dy[t * h + c];
      }
    }
    for (std::size_t t = 0; t < T; ++t) {
      float P = 1, dot = 0;
      if (s.topk) {
        P = 0;
        for (std::size_t j = 0; j < k; ++j)
          P += p[t * E + std::size_t(mine.expert[t * k + j])],
              dot += weight[t * k + j] * dg[t * k + j];
      }
      for (std::size_t j = 0; j < k; ++j)
        dgate[t * E + std::size_t(mine.expert[t * k + j])] = (dg[t * k + j] - dot) / P;
    }
    Buffer<float> dsend = comm.alloc_from(dout, Category::activations);
    Buffer<float> dgot = comm.alloc<float>(whole, Category::activations);
    local.combine_back = all_to_all(comm, s, "combine's backward: all-to-all", "dY x gate",
                                    View<const float>(dsend.view()), dgot.view());

    // STEP 8: my experts' backward: dW2 = H^T dYe, db2, dH = dYe W2^T, GeLU', dW1 = Xe^T dZ, db1,
    // dXe = dZ W1^T. An empty slot's dYe is 0: it adds nothing to the weights' gradients. One
    // rank owns each expert, so its gradient is whole here: no all-reduce.
    std::vector<Buffer<float>> dW1, dB1, dW2, dB2;
    Buffer<float> dxe_out = comm.alloc<float>(whole, Category::activations);
    for (std::size_t l = 0; l < s.local; ++l) {
      const std::size_t e = std::size_t(me) * s.local + l;
      auto phase = comm.phase(fmt::format("expert {} backward", e),
                              {.op = "backward", .text = "dW1, db1, dW2, db2, dXe"});
      dW1.push_back(comm.alloc<float>(h * f, Category::grads));
      dB1.push_back(comm.alloc<float>(f, Category::grads));
      dW2.push_back(comm.alloc<float>(f * h, Category::grads));
      dB2.push_back(comm.alloc<float>(h, Category::grads));
      Buffer<float> dYe = comm.alloc<float>(rows * h, Category::activations);
      Buffer<float> dH = comm.alloc<float>(rows * f, Category::activations);
      Buffer<float> dXe = comm.alloc<float>(rows * h, Category::activations);
      for (int src = 0; src < n; ++src)
        ops::copy(dYe.view().sub(std::size_t(src) * cap * h, cap * h),
                  View<const float>(dgot.view().sub(at(s, std::size_t(src), l, 0), cap * h)));
      model::linear_backward(dH.view(), dW2[l].view(), dB2[l].view(), dYe.view(), H[l].view(),
                             W2[l].view(), rows, f, h);
      ops::gelu_backward(dH.view(), View<const float>(dH.view()), View<const float>(Z[l].view()));
      model::linear_backward(dXe.view(), dW1[l].view(), dB1[l].view(), dH.view(), Xe[l].view(),
                             W1[l].view(), rows, h, f);
      for (int src = 0; src < n; ++src)
        ops::copy(dxe_out.view().sub(at(s, std::size_t(src), l, 0), cap * h),
                  View<const float>(dXe.view().sub(std::size_t(src) * cap * h, cap * h)));
    }

    // STEP 9: dispatch's backward: the input gradients go home by all-to-all, and each token
    // sums its kept experts' dx (the gate is in them already: p dY went out in STEP 7).
    Buffer<float> dback = comm.alloc<float>(whole, Category::activations);
    local.dispatch_back = all_to_all(comm, s, "dispatch's backward: all-to-all", "dX",
                                     View<const float>(dxe_out.view()), dback.view());
    const std::vector<float> dxs = to_host(dback.view());
    std::vector<float> dx(T * h, 0.0f);
    for (std::size_t i = 0; i < T * k; ++i)
      if (mine.slot[i] >= 0)
        for (std::size_t c = 0; c < h; ++c) dx[(i / k) * h + c] += dxs[slot_of(i) + c];
    Buffer<float> dX = comm.alloc_from(dx, Category::activations);

    // STEP 10: the router's backward: softmax's backward of d p gives d logits, then
    // dW_r = X^T dlogits (summed over every rank's tokens: an all-reduce, the router being
    // replicated) and dX += dlogits W_r^T.
    // (--break router-ignores-gate: the gates are constants, d p = 0: the router never learns.)
    if (broken("router-ignores-gate")) std::fill(dgate.begin(), dgate.end(), 0.0f);
    Buffer<float> dlogits = comm.alloc_from(dgate, Category::activations);
    Buffer<float> dWr = comm.alloc<float>(h * E, Category::grads);
    {
      auto phase = comm.phase("router backward",
                              {.op = "backward", .text = "d p = <dY, out>, softmax backward"});
      ops::softmax_backward_rows(dlogits.view(), View<const float>(gates.view()),
                                 View<const float>(dlogits.view()), T, E);
      ops::gemm(dWr.view(), View<const float>(X.view()), View<const float>(dlogits.view()), h, E, T,
                /*trans_a=*/true);
      ops::gemm(dX.view(), View<const float>(dlogits.view()), View<const float>(Wr.view()), T, h, E,
                false, /*trans_b=*/true, 1.0f, 1.0f);
    }
    {
      auto phase = comm.phase("router: all-reduce dW_r");
      const int first = comm.next_steps(0);
      coll::all_reduce_ring_chunked(comm, dWr.view(), "dW_r");
      local.router = {first, comm.next_steps(0) - 1};
    }

    // STEP 11: the check. Every rank's routing, gathered (for the reference only: the layer
    // above never needed it), and the same MoE in float64 on one device with that routing.
    std::vector<Routing> routing(static_cast<std::size_t>(n));
    {
      auto phase = comm.phase("verification: gather the routing");
      Buffer<std::int32_t> all =
          comm.alloc<std::int32_t>(std::size_t(n) * 2 * T * k, Category::data);
      std::vector<std::int32_t> enc(mine.expert.begin(), mine.expert.end());
      enc.insert(enc.end(), mine.slot.begin(), mine.slot.end());
      from_host(all.view().sub(std::size_t(me) * 2 * T * k, 2 * T * k), enc);
      coll::all_gather_bruck(comm, all.view(), "routing");
      const std::vector<std::int32_t> got_all = to_host(all.view());
      for (int r = 0; r < n; ++r) {
        const auto b = got_all.begin() + std::ptrdiff_t(std::size_t(r) * 2 * T * k);
        routing[std::size_t(r)].expert.assign(b, b + std::ptrdiff_t(T * k));
        routing[std::size_t(r)].slot.assign(b + std::ptrdiff_t(T * k),
                                            b + std::ptrdiff_t(2 * T * k));
      }
    }
    comm.check("my routing, gathered, is the one I computed",
               routing[std::size_t(me)].expert == mine.expert &&
                   routing[std::size_t(me)].slot == mine.slot);
    Inputs in;
    in.x = tp::as_matrix(x_all, std::size_t(n) * T, h);
    in.dy = tp::as_matrix(dy_all, std::size_t(n) * T, h);
    in.wr = tp::as_matrix(wr, h, E);
    for (const Expert& ex : every) {
      in.w1.push_back(tp::as_matrix(ex.w1, h, f));
      in.b1.push_back(tp::as_matrix(ex.b1, 1, f));
      in.w2.push_back(tp::as_matrix(ex.w2, f, h));
      in.b2.push_back(tp::as_matrix(ex.b2, 1, h));
    }
    const Reference ref = moe_reference(in, routing, s, false);
    const Reference mag = moe_reference(in, routing, s, true);
    // L: the largest sum of |x_i| |W_r,ie| over tokens and experts (the logits' size).
    const double L = (in.x.cwiseAbs() * in.wr.cwiseAbs()).maxCoeff();
    // With topk, a weight p_a / P carries the error of its gate and of P's (a sum of k gates):
    // the gates' term twice, and k + 1 roundings more.
    const double gate_terms = 2 * double(h) * L + double(E);
    const double chain = double(h + f + std::size_t(n) * T * k + std::size_t(n)) + gate_terms +
                         (s.topk ? gate_terms + double(k + 1) : 0);

    // The router's choice, against the float64 gates (check_routing).
    const RouterCheck router =
        check_routing(reference_gates(in), mine, s, me, kBoundFactor * gate_terms * kEps32);
    comm.check(fmt::format("each of my tokens went to its top {} experts by the float64 gates, "
                           "best first (ties within the gates' error bound)",
                           k),
               router.wrong.empty(), router.wrong);
    const double per = kBoundFactor * chain * kEps32;
    if (comm.inject_fault()) inject_fault_into(dX.view());
    const auto mine_rows = [&](const RowMatrix& m) {
      return RowMatrix(m.middleRows(Eigen::Index(std::size_t(me) * T), Eigen::Index(T)));
    };
    std::vector<Compared> compared;
    const auto within = [&](const std::string& name, View<const float> got_v, const RowMatrix& want,
                            const RowMatrix& m) {
      compared.push_back(compare_within(comm, name, got_v, want, per * m));
    };
    within(fmt::format("Y (my {} tokens)", T), Y.view(), mine_rows(ref.y), mine_rows(mag.y));
    within("dX", dX.view(), mine_rows(ref.dx), mine_rows(mag.dx));
    within("router dW_r (all-reduced)", dWr.view(), ref.dwr, mag.dwr);
    for (std::size_t l = 0; l < s.local; ++l) {
      const std::size_t e = std::size_t(me) * s.local + l;
      within(fmt::format("expert {} dW1", e), dW1[l].view(), ref.dw1[e], mag.dw1[e]);
      within(fmt::format("expert {} db1", e), dB1[l].view(), ref.db1[e], mag.db1[e]);
      within(fmt::format("expert {} dW2", e), dW2[l].view(), ref.dw2[e], mag.dw2[e]);
      within(fmt::format("expert {} db2", e), dB2[l].view(), ref.db2[e], mag.db2[e]);
    }
    if (me == 0) {
      local.routing = routing;
      local.compared = compared;
      local.router_closest = router.closest;
      local.measure =
          fmt::format("worst |error| / its bound {:.0f} x {:.0f} terms x eps x |terms|, at most 1",
                      kBoundFactor, chain);
      outcome = std::move(local);
    }
  });
}
