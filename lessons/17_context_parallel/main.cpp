// Lesson 17 — context parallelism: ring attention over a sequence split across ranks
//
// Concept: attention over S tokens, H heads of d, per head
//   O = softmax(Q K^T / sqrt(d) [+ causal mask]) V           Q, K, V, O: (S, d)
// needs every key for every query. Context parallelism cuts the sequence into N blocks, one per
// rank: a rank keeps its queries, and the K/V blocks travel around a ring (Liu et al., "Ring
// Attention", 2023). At step t rank i holds the K/V block of rank (i - t) mod N, attends its
// queries to it, and passes it to the right while it takes the next from the left: N steps, and
// no rank ever holds the S x S scores, or more than two K/V blocks.
// Each step's result is merged with the online-softmax rule (Milakov and Gimelshein, 2018), per
// query row: a running max m, a running sum l and an unnormalised output acc; with the block's
// scores s, m' = max(m, max s) and
//   l <- l exp(m - m') + sum exp(s - m'),   acc <- acc exp(m - m') + sum exp(s - m') v,   m <- m'
// and O = acc / l after the last block. Backward (FlashAttention-2's), each rank keeps Q, O, dO
// and the log-sum-exp L = m + log l; K, V travel again with their gradients dK, dV, which pick up
// every rank's queries' share and are one hop from home after N steps; dQ stays at home.
//   P = exp(s - L), dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O)), dQ += dS K / sqrt(d),
//   dK += dS^T Q / sqrt(d)
// --causal: token t attends to tokens 0..t. With contiguous blocks rank N-1 does N times rank 0's
// work; the zig-zag split (2N chunks, rank r holds chunks r and 2N-1-r) gives every rank the same
// (2N+1) (S/2N)^2 score elements per head.
// Bytes each rank sends, W = H d floats per token, B = S/N tokens per block:
//   forward  2 (N-1) B W x 4          (K and V, N-1 hops)
//   backward (4N - 2) B W x 4         (K, V, dK, dV for N-1 hops, dK and dV the last hop home)
//
// Verification: O, dQ, dK and dV of every rank's tokens against unsplit attention computed in
// float64 with Eigen, element by element within an error model's bound (below); the split holds
// every token once; bytes, steps and each rank's score elements against the formulas.
//
// Run:  ./distlab lesson 17                         4 ranks, 48 tokens, contiguous blocks
//       ./distlab lesson 17 --causal                the zig-zag split, balanced
//       ./distlab lesson 17 --causal --split contiguous   the same mask, unbalanced
//       ./distlab lesson 17 --mpi 2 --causal
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/base/partition.hpp"
#include "core/base/units.hpp"
#include "core/collectives/common.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"
#include "core/training/tensor_parallel.hpp"

using namespace distlab;
using tp::RowMatrix;

namespace {

constexpr int kQ = 17'000'001, kK = 17'000'002, kV = 17'000'003, kDO = 17'000'004;
constexpr int kTagKV = 1701, kTagGrads = 1702;

struct Shape {
  std::size_t seq = 0, heads = 0, dim = 0;
  bool causal = false, zigzag = false;
  int ranks = 1;
  Partition chunks;  // the S tokens cut into N chunks (contiguous) or 2N (zig-zag)
  std::size_t width() const { return heads * dim; }  // W: floats per token of Q, K, V
};

// The chunks rank r holds, in the order its rows keep them. Contiguous: chunk r of N. Zig-zag:
// chunk r from the front and chunk 2N-1-r from the back, a cheap chunk paired with a dear one.
std::vector<int> chunks_of(const Shape& s, int r) {
  if (!s.zigzag) return {r};
  // --break zigzag-drop-block: the back chunk counted from 2N-2: chunk 2N-1 is nobody's, and
  // rank N-1 holds chunk N-1 twice
  const int back = broken("zigzag-drop-block") ? 2 * s.ranks - 2 - r : 2 * s.ranks - 1 - r;
  return {r, back};
}
std::size_t tokens_of(const Shape& s, int r) {
  std::size_t t = 0;
  for (int c : chunks_of(s, r)) t += s.chunks.size(c);
  return t;
}

// A tile: my queries of chunk a against the keys of chunk b. Causal, chunk b after chunk a is
// all future (skipped), before it all past (full), and b = a is the diagonal (half masked).
enum class Tile { full, diagonal, skipped };
Tile tile_kind(const Shape& s, int a, int b) {
  if (!s.causal || b < a) return Tile::full;
  return b == a ? Tile::diagonal : Tile::skipped;
}

struct Work {  // what a rank computed: score elements (per head, summed) and tiles by kind
  std::uint64_t elements = 0;
  int full = 0, diagonal = 0, skipped = 0;
  void count(Tile t, std::uint64_t e) {
    (t == Tile::full ? full : t == Tile::diagonal ? diagonal : skipped)++;
    if (t != Tile::skipped) elements += e;
  }
};

// The formula for rank r's score elements: causal, each query chunk a meets the keys 0 .. end(a)
// (the diagonal tile computed whole, then masked); otherwise every query meets all S keys.
std::uint64_t work_formula(const Shape& s, int r) {
  std::uint64_t e = 0;
  for (int a : chunks_of(s, r)) e += s.chunks.size(a) * (s.causal ? s.chunks.end(a) : s.seq);
  return e * s.heads;
}

// Bytes rank r sends, from the block sizes: forward K and V of every block but the one it gets
// last (its right neighbour's); backward those again, and dK, dV of every block (the last hop
// takes them home). Equal blocks of B tokens: 2 (N-1) B W and (4N - 2) B W floats.
std::uint64_t forward_bytes(const Shape& s, int r) {
  if (s.ranks == 1) return 0;
  return 2 * (s.seq - tokens_of(s, (r + 1) % s.ranks)) * s.width() * sizeof(float);
}
std::uint64_t backward_bytes(const Shape& s, int r) {
  if (s.ranks == 1) return 0;
  return forward_bytes(s, r) + 2 * s.seq * s.width() * sizeof(float);
}

// --- the unsplit attention in float64, and the error model ------------------------------------

struct Reference {
  RowMatrix o, dq, dk, dv;  // (S, W) each, head j in columns j d .. (j+1) d - 1
};

// The error model. A float32 dot product of K terms is off by at most K eps of the sum of its
// terms' absolute values if every rounding goes the same way; independent roundings add up like
// a random walk: beyond lambda sqrt(K) eps only with a probability below
// 2K exp(-lambda^2 (1-u)^2 / 2) (Higham and Mary, 2019; u = eps, the unit
// roundoff), about 2.5e-14 K per element for lambda = 8. In units of eps:
//   E(A B) = sqrt(K) |A| |B| + E(A) |B| + |A| E(B)                (Q, K, V, dO exact: E = 0)
// Scores s: E(s) = sqrt(d) |Q| |K|^T / sqrt(d) + 2 |s| (the product, and 1/sqrt(d) in float32).
// Online softmax: each term exp(s - m_t) is rescaled by up to C (chunks) factors exp(m_t - m'),
// each of whose arguments is at most |s - max| and carries the running max's error (at most the
// row's largest E(s)); so a term's relative error is e = E(s) + max E(s) + (C + 1)(|s - max| + 4),
// and P's (after dividing by l): P e + P rowsum(P e). O = acc / l, both sums of S terms rescaled
// C times: E(O) = (2 sqrt(S) + 2C + 1) P |V| + E(P) |V|. The log-sum-exp L = m + log l is off by
// E(L) = max E(s) + |L| + |log l| + sqrt(S) + C + rowsum(P e) + 2; backward's recomputed
// P = exp(s - L) by P (E(s) + E(L) + |s - L| + 4). Then, term by term as above:
//   D = rowsum(dO O), dP = dO V^T, dS = P (dP - D), dV = P^T dO, dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d).
// A bug (a block missed, a sum not rescaled) is off by the size of the values, thousands of
// times this.
constexpr double kEps32 = 0x1p-24;
constexpr double kLambda = 8;

void reference_and_bounds(const Shape& s, const RowMatrix& q, const RowMatrix& k,
                          const RowMatrix& v, const RowMatrix& dout, Reference& ref,
                          Reference& bound) {
  const auto S = Eigen::Index(s.seq), d = Eigen::Index(s.dim), W = Eigen::Index(s.width());
  const double scale = 1.0 / std::sqrt(double(s.dim)), rS = std::sqrt(double(S)),
               rd = std::sqrt(double(d)), C = double(s.chunks.parts);
  for (RowMatrix* m :
       {&ref.o, &ref.dq, &ref.dk, &ref.dv, &bound.o, &bound.dq, &bound.dk, &bound.dv})
    *m = RowMatrix::Zero(S, W);
  for (std::size_t j = 0; j < s.heads; ++j) {
    const Eigen::Index c0 = Eigen::Index(j) * d;
    const RowMatrix Q = q.middleCols(c0, d), K = k.middleCols(c0, d), V = v.middleCols(c0, d),
                    dO = dout.middleCols(c0, d);
    const RowMatrix aQ = Q.cwiseAbs(), aK = K.cwiseAbs(), aV = V.cwiseAbs(), adO = dO.cwiseAbs();
    const RowMatrix sc = Q * K.transpose() * scale;
    const RowMatrix es = scale * rd * aQ * aK.transpose() + 2.0 * sc.cwiseAbs();
    RowMatrix p = RowMatrix::Zero(S, S), e = p, ep2 = p;  // P, its exponent errors, backward's
    Eigen::VectorXd lse(S), el(S), e_lse(S);
    for (Eigen::Index r = 0; r < S; ++r) {
      const Eigen::Index keys = s.causal ? r + 1 : S;  // the mask: keys 0..r
      const double top = sc.row(r).head(keys).maxCoeff(), etop = es.row(r).head(keys).maxCoeff();
      double l = 0;
      for (Eigen::Index c = 0; c < keys; ++c) l += std::exp(sc(r, c) - top);
      for (Eigen::Index c = 0; c < keys; ++c) {
        p(r, c) = std::exp(sc(r, c) - top) / l;
        e(r, c) = es(r, c) + etop + (C + 1) * (std::fabs(sc(r, c) - top) + 4);
      }
      lse[r] = top + std::log(l);
      const double pe = p.row(r).cwiseProduct(e.row(r)).sum();
      el[r] = rS + C + pe;
      e_lse[r] = etop + std::fabs(lse[r]) + std::log(l) + el[r] + 2;
      for (Eigen::Index c = 0; c < keys; ++c)
        ep2(r, c) = p(r, c) * (es(r, c) + e_lse[r] + std::fabs(sc(r, c) - lse[r]) + 4);
    }
    RowMatrix ep = p.cwiseProduct(e);
    for (Eigen::Index r = 0; r < S; ++r) ep.row(r) += p.row(r) * ep.row(r).sum();
    const RowMatrix O = p * V, aO = O.cwiseAbs();
    const RowMatrix eO = (2 * rS + 2 * C + 1) * p * aV + ep * aV;
    // backward
    const Eigen::VectorXd D = dO.cwiseProduct(O).rowwise().sum();
    const Eigen::VectorXd eD =
        rd * adO.cwiseProduct(aO).rowwise().sum() + adO.cwiseProduct(eO).rowwise().sum();
    const RowMatrix dP = dO * V.transpose(), edP = rd * adO * aV.transpose();
    RowMatrix g = dP, dS = dP;
    for (Eigen::Index r = 0; r < S; ++r) g.row(r).array() -= D[r];
    dS = p.cwiseProduct(g);
    RowMatrix eg = g.cwiseAbs() + edP;
    for (Eigen::Index r = 0; r < S; ++r) eg.row(r).array() += eD[r];
    const RowMatrix adS = dS.cwiseAbs();
    const RowMatrix edS = ep2.cwiseProduct(g.cwiseAbs()) + p.cwiseProduct(eg) + adS;
    ref.o.middleCols(c0, d) = O;
    ref.dv.middleCols(c0, d) = p.transpose() * dO;
    ref.dq.middleCols(c0, d) = dS * K * scale;
    ref.dk.middleCols(c0, d) = dS.transpose() * Q * scale;
    bound.o.middleCols(c0, d) = eO;
    bound.dv.middleCols(c0, d) = (rS + 1) * p.transpose() * adO + ep2.transpose() * adO;
    bound.dq.middleCols(c0, d) = scale * ((rS + 2) * adS * aK + edS * aK);
    bound.dk.middleCols(c0, d) = scale * ((rS + 2) * adS.transpose() * aQ + edS.transpose() * aQ);
  }
}

// Rows `tokens` of m, in that order: what one rank holds of an (S, W) tensor.
RowMatrix rows_of(const RowMatrix& m, const std::vector<std::size_t>& tokens) {
  RowMatrix out(Eigen::Index(tokens.size()), m.cols());
  for (std::size_t i = 0; i < tokens.size(); ++i)
    out.row(Eigen::Index(i)) = m.row(Eigen::Index(tokens[i]));
  return out;
}

// --- one rank's side of ring attention (host loops: the rule, as the papers write it) ---------

// A chunk of tokens as held in a block: its index and where its rows start in the block's
// buffers (Q and O rows for my chunks, K and V rows for a visiting block's).
struct Held {
  int chunk;
  std::size_t row;
};
std::vector<Held> held(const Shape& s, int r) {
  std::vector<Held> out;
  std::size_t row = 0;
  for (int c : chunks_of(s, r)) {
    out.push_back({c, row});
    row += s.chunks.size(c);
  }
  return out;
}

// My queries' running state: per head and row, the max m and sum l; acc (rows, W) unnormalised.
struct Running {
  std::vector<float> m, l, acc;
};

// One tile, forward: my query chunk `a` (its rows of q from a.row) against a visiting block's
// chunk `b` (k, v: its |b| rows of K and V), merged into `run` by the online-softmax rule.
void attend_forward(const Shape& s, const Held& a, const std::vector<float>& q, int b,
                    const float* k, const float* v, Running& run, Work& work) {
  const std::size_t W = s.width(), d = s.dim, T = q.size() / W, rows = s.chunks.size(a.chunk),
                    keys = s.chunks.size(b);
  const std::size_t first_a = s.chunks.begin(a.chunk), first_b = s.chunks.begin(b);
  const Tile kind = tile_kind(s, a.chunk, b);
  work.count(kind, rows * keys * s.heads);
  if (kind == Tile::skipped) return;
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<float> sc(keys);
  for (std::size_t h = 0; h < s.heads; ++h)
    for (std::size_t i = 0; i < rows; ++i) {
      const float* qi = &q[(a.row + i) * W + h * d];
      float tile_max = -INFINITY;
      for (std::size_t j = 0; j < keys; ++j) {
        const bool masked = s.causal && first_b + j > first_a + i;  // a future token
        float dot = 0;
        for (std::size_t x = 0; x < d; ++x) dot += qi[x] * k[j * W + h * d + x];
        sc[j] = masked ? -INFINITY : dot * scale;
        tile_max = std::max(tile_max, sc[j]);
      }
      const std::size_t at = h * T + a.row + i;  // (head, row) in m and l
      float& m = run.m[at];
      float& l = run.l[at];
      float* acc = &run.acc[(a.row + i) * W + h * d];
      // quote: online-softmax
      // the online-softmax rule: rescale what is summed so far to the new max, then add
      const float m_new = std::max(m, tile_max), rescale = std::exp(m - m_new);
      // --break no-rescale: the sum is left at the old max while acc moves to the new one
      l = broken("no-rescale") ? l : l * rescale;
      for (std::size_t x = 0; x < d; ++x) acc[x] *= rescale;
      for (std::size_t j = 0; j < keys; ++j) {
        const float p = std::exp(sc[j] - m_new);  // 0 where masked
        l += p;
        for (std::size_t x = 0; x < d; ++x) acc[x] += p * v[j * W + h * d + x];
      }
      m = m_new;
      // end quote: online-softmax
    }
}

// One tile, backward: P recomputed from the log-sum-exp L; dQ into my rows, dK and dV into the
// visiting chunk's rows (dk, dv: |b| rows each, which travel with it).
void attend_backward(const Shape& s, const Held& a, const std::vector<float>& q,
                     const std::vector<float>& dout, const std::vector<float>& lse,
                     const std::vector<float>& delta, int b, const float* k, const float* v,
                     float* dk, float* dv, std::vector<float>& dq) {
  const std::size_t W = s.width(), d = s.dim, rows = s.chunks.size(a.chunk),
                    keys = s.chunks.size(b), mine = q.size() / W;
  const std::size_t first_a = s.chunks.begin(a.chunk), first_b = s.chunks.begin(b);
  if (tile_kind(s, a.chunk, b) == Tile::skipped) return;
  const float scale = 1.0f / std::sqrt(float(d));
  for (std::size_t h = 0; h < s.heads; ++h)
    for (std::size_t i = 0; i < rows; ++i) {
      const std::size_t qrow = (a.row + i) * W + h * d, at = h * mine + a.row + i;
      for (std::size_t j = 0; j < keys; ++j) {
        if (s.causal && first_b + j > first_a + i) continue;  // masked: P = 0, no gradient
        const std::size_t krow = j * W + h * d;
        float dot = 0, dp = 0;
        for (std::size_t x = 0; x < d; ++x) {
          dot += q[qrow + x] * k[krow + x];
          dp += dout[qrow + x] * v[krow + x];
        }
        const float p = std::exp(dot * scale - lse[at]);  // P = exp(s - L)
        const float ds = p * (dp - delta[at]);            // dS = P (dP - rowsum(dO O))
        for (std::size_t x = 0; x < d; ++x) {
          dv[krow + x] += p * dout[qrow + x];
          dq[qrow + x] += ds * scale * k[krow + x];
          dk[krow + x] += ds * scale * q[qrow + x];
        }
      }
    }
}

// My rows of an (S, W) tensor: the tokens of my chunks, in order.
std::vector<float> my_rows(const Shape& s, int r, const std::vector<float>& whole) {
  std::vector<float> out;
  const std::size_t W = s.width();
  for (int c : chunks_of(s, r))
    out.insert(out.end(), whole.begin() + std::ptrdiff_t(s.chunks.begin(c) * W),
               whole.begin() + std::ptrdiff_t(s.chunks.end(c) * W));
  return out;
}
std::vector<std::size_t> my_tokens(const Shape& s, int r) {
  std::vector<std::size_t> out;
  for (int c : chunks_of(s, r))
    for (std::size_t t = s.chunks.begin(c); t < s.chunks.end(c); ++t) out.push_back(t);
  return out;
}

std::string chunk_list(const Shape& s, int r) {
  std::string out;
  for (int c : chunks_of(s, r)) out += (out.empty() ? "" : ", ") + std::to_string(c);
  return out;
}

struct Outcome {
  int forward_first = 0, backward_first = 0;  // step ids
  std::vector<tp::Compared> compared;         // rank 0's
};

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"17", "context_parallel",
                 "context parallelism: ring attention over a sequence split across ranks", 4, 1});
  lesson.set_text(
      "Ring attention: the sequence is cut into N blocks, one per rank. Each rank keeps its "
      "queries; the K/V blocks travel around the ring, one hop per step, and each step's partial "
      "attention is merged with the online-softmax rule (running max and sum). Backward, K and V "
      "travel again with dK and dV, which arrive home after N hops. --causal uses the zig-zag "
      "split (rank r: chunks r and 2N-1-r) so every rank does the same work.",
      "Shards: the K,V buffer's chunks move one rank per step until every rank has seen all; "
      "dK,dV count the ranks whose queries added into them on their way home. Topology: each "
      "rank's caption names the block it attends to and its tiles (full, diagonal, skipped); "
      "with --causal --split contiguous rank 0 skips while rank N-1 computes a full tile, and "
      "zig-zag gives every rank the same.");
  lesson.describe_size("not used here: the sizes are --seq, --heads and --head-dim");
  Shape s;
  std::size_t seq = 48, heads = 2, dim = 8;
  bool causal = false;
  std::string split = "auto";
  auto& app = lesson.app();
  app.add_option("--seq", seq, "S: tokens in the sequence, cut over the ranks")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 12))
      ->capture_default_str();
  app.add_option("--heads", heads, "H: attention heads")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();
  app.add_option("--head-dim", dim, "d: each head's size")
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}))
      ->capture_default_str();
  app.add_flag("--causal", causal, "mask the future: token t attends to tokens 0..t only");
  app.add_option("--split", split,
                 "how the sequence is cut: contiguous (N blocks), zigzag (2N chunks, rank r "
                 "holds r and 2N-1-r), auto (zigzag with --causal, else contiguous)")
      ->check(CLI::IsMember({"auto", "contiguous", "zigzag"}))
      ->capture_default_str();
  lesson.add_break("no-rescale",
                   "online softmax without rescaling the running sum when the max grows: l keeps "
                   "terms at the old max while acc moves to the new one (main.cpp, "
                   "attend_forward)");
  lesson.add_break("zigzag-drop-block",
                   "a zig-zag split that counts the back chunk from 2N-2: chunk 2N-1 is "
                   "nobody's and rank N-1 holds chunk N-1 twice (main.cpp, chunks_of)");
  lesson.add_break("grads-one-hop-short",
                   "backward stops passing dK and dV after N-1 hops: each rank keeps its right "
                   "neighbour's gradients as its own (main.cpp, STEP 6)");
  Outcome outcome;
  const auto& opt = lesson.options();
  lesson.on_world([&](const World& w) {
    const bool zigzag = split == "zigzag" || (split == "auto" && causal);
    const int chunks = zigzag ? 2 * w.size : w.size;
    if (seq < std::size_t(chunks))
      throw UsageError(fmt::format(
          "--seq {} cannot be cut into the {} chunks of {} ranks{}: every chunk needs a token "
          "(use --seq {} or more, or fewer ranks)",
          seq, chunks, w.size, zigzag ? " (zig-zag: 2 per rank)" : "", chunks));
    s = {seq, heads, dim, causal, zigzag, w.size, Partition{seq, chunks}};
    lesson.set_algorithm(fmt::format("ring attention over {} ranks, {} split{}", w.size,
                                     zigzag ? "zig-zag" : "contiguous", causal ? ", causal" : ""));
  });

  // Memory: every rank builds the unsplit attention and its error bounds in float64: per head
  // some 16 (S x S) matrices and 20 (S x d) ones, and 12 (S x W) results; the float32 inputs
  // (4 of S x W), my rows (6 of them) and the K/V buffers (two of 4 B W floats).
  lesson.needs_memory([&](const World&) {
    const double S = double(seq), W = double(heads * dim), d = double(dim);
    const double float64 = 16 * S * S + 20 * S * d + 12 * S * W + 4 * S * W;
    const double float32 = 4 * S * W + 6 * S * W + 8 * S * W + 2 * S * double(heads);
    return MemoryNeed{8 * float64 + 4 * float32, 0, "a smaller --seq, --heads or --head-dim"};
  });

  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    fmt::print(
        "\nring attention over {} tokens, {} heads of {}{}, {} split: {} chunks over {} ranks\n",
        s.seq, s.heads, s.dim, s.causal ? ", causal" : "", s.zigzag ? "zig-zag" : "contiguous",
        s.chunks.parts, n);
    // Measured: bytes and steps from the trace; score elements and tiles from each rank's values.
    const auto fwd = r.traffic(outcome.forward_first, outcome.forward_first + n - 1),
               bwd = r.traffic(outcome.backward_first, outcome.backward_first + n - 1);
    fmt::print("  {:>4}  {:>7}  {:>6}  {:>5}  {:>10}  {:>10}  {:>10}  {:>10}  {:>12}\n", "rank",
               "chunks", "tokens", "steps", "fwd sent", "formula", "bwd sent", "formula",
               "full/diag/skip");
    bool bytes_ok = true, steps_ok = true;
    std::uint64_t most = 0, least = ~std::uint64_t{0};
    std::vector<std::uint64_t> work(std::size_t(n), 0), critical(std::size_t(n), 0);
    for (int k = 0; k < n; ++k) {
      double tiles[3] = {0, 0, 0};
      std::size_t t = 0;  // forward step
      for (const ValueEvent& v : r.logs[std::size_t(k)].values) {
        if (v.name == "score elements this step" && t < critical.size()) {
          critical[t] = std::max(critical[t], std::uint64_t(v.value));
          ++t;
        }
        if (v.name == "score elements computed") work[std::size_t(k)] = std::uint64_t(v.value);
        if (v.name == "tiles full") tiles[0] = v.value;
        if (v.name == "tiles diagonal") tiles[1] = v.value;
        if (v.name == "tiles skipped") tiles[2] = v.value;
      }
      const auto& f = fwd[std::size_t(k)];
      const auto& b = bwd[std::size_t(k)];
      bytes_ok =
          bytes_ok && f.bytes_sent == forward_bytes(s, k) && b.bytes_sent == backward_bytes(s, k);
      steps_ok = steps_ok && f.steps == n - 1 && b.steps == (n > 1 ? n : 0);
      most = std::max(most, work[std::size_t(k)]);
      least = std::min(least, work[std::size_t(k)]);
      fmt::print("  {:>4}  {:>7}  {:>6}  {:>5}  {:>10}  {:>10}  {:>10}  {:>10}  {:>12}\n",
                 fmt::format("r{}", k), chunk_list(s, k), tokens_of(s, k),
                 fmt::format("{}+{}", f.steps, b.steps), format_bytes(double(f.bytes_sent)),
                 format_bytes(double(forward_bytes(s, k))), format_bytes(double(b.bytes_sent)),
                 format_bytes(double(backward_bytes(s, k))),
                 fmt::format("{:.0f}/{:.0f}/{:.0f}", tiles[0], tiles[1], tiles[2]));
    }
    const std::size_t W = s.width();
    fmt::print(
        "  formulas (B = S/N tokens, W = H d = {} floats): forward 2 (N-1) B W x 4 bytes, "
        "backward\n  (4N - 2) B W x 4 (dK, dV make the last hop home); N-1 steps forward, N "
        "backward\n",
        W);
    if (n == 1)
      fmt::print(
          "  one rank: nothing travels, 0 bytes and 0+0 steps (the formulas' N backward steps and\n"
          "  last hop home count from N = 2 on)\n");
    r.check(fmt::format("bytes sent: forward 2 (N-1) B W x 4, backward (4N - 2) B W x 4 on every "
                        "rank (from the trace)"),
            bytes_ok);
    r.check("steps: N-1 with messages forward, N backward (from the trace)", steps_ok);

    if (s.chunks.parts <= 8) {
      // The (query chunk, key chunk) tiles of the score matrix: which rank computes each, at which
      // step (rank i meets the K/V of rank j at step (i - j) mod N); '.' the future, skipped.
      fmt::print(
          "\nwho computes each tile, as rank@step (rows: query chunks; columns: key chunks):\n");
      fmt::print("      ");
      for (int b = 0; b < s.chunks.parts; ++b) fmt::print("{:>5}", fmt::format("k{}", b));
      fmt::print("\n");
      for (int a = 0; a < s.chunks.parts; ++a) {
        fmt::print("  {:>4}", fmt::format("q{}", a));
        for (int b = 0; b < s.chunks.parts; ++b) {
          std::string cell = "-";  // nobody's (a split that drops a chunk)
          for (int i = 0; i < n; ++i)
            for (int j = 0; j < n; ++j) {
              const auto& qa = chunks_of(s, i);
              const auto& kb = chunks_of(s, j);
              if (std::find(qa.begin(), qa.end(), a) == qa.end() ||
                  std::find(kb.begin(), kb.end(), b) == kb.end())
                continue;
              cell = tile_kind(s, a, b) == Tile::skipped
                         ? "."
                         : fmt::format("{}@{}{}", i, ((i - j) % n + n) % n,
                                       tile_kind(s, a, b) == Tile::diagonal ? "\\" : "");
            }
          fmt::print("{:>5}", cell);
        }
        fmt::print("\n");
      }
    }
    fmt::print("\nscore elements computed per rank (all heads; a diagonal tile counts whole):\n");
    fmt::print("  {:>4}  {:>10}  {:>10}\n", "rank", "measured", "formula");
    bool work_ok = true;
    for (int k = 0; k < n; ++k) {
      work_ok = work_ok && work[std::size_t(k)] == work_formula(s, k);
      fmt::print("  {:>4}  {:>10}  {:>10}\n", fmt::format("r{}", k), work[std::size_t(k)],
                 work_formula(s, k));
    }
    r.check(s.causal ? "work: each query chunk a meets keys 0 .. end(a), H |a| end(a) elements"
                     : "work: each query meets all S keys, H S |my tokens| elements",
            work_ok);
    if (s.causal) {
      // Both splits of the same mask, from the formula: the busiest rank against the average.
      auto balance = [&](bool zig) {
        Shape t = s;
        t.zigzag = zig;
        t.chunks = Partition{s.seq, zig ? 2 * n : n};
        std::uint64_t top = 0, sum = 0;
        for (int k = 0; k < n; ++k) {
          top = std::max(top, work_formula(t, k));
          sum += work_formula(t, k);
        }
        return double(top) * n / double(sum);
      };
      // 2N/(N+1) where N blocks of B tokens divide S evenly; uneven blocks are off it.
      fmt::print(
          "  busiest rank / average (formula): contiguous {:.2f} ({} = {:.2f} with N equal "
          "blocks), zig-zag {:.2f}\n",
          balance(false), "2N/(N+1)", 2.0 * n / (n + 1), balance(true));
      fmt::print("  this run: the busiest rank computes {}, the least busy {}\n", most, least);
      // Every step ends when its busiest rank does (the next block comes from it), so a pass
      // takes the sum over the steps of the busiest rank's work. Contiguous: step 0 is every
      // rank's diagonal and every later one a full B x B tile on rank N-1: N B^2 H. Zig-zag: 3
      // chunk tiles (c = S/2N) at step 0, 2 at every later one, on every rank: (2N+1) c^2 H.
      std::uint64_t path = 0;
      for (std::uint64_t w : critical) path += w;
      const std::uint64_t B = s.seq / std::uint64_t(n), c = s.seq / std::uint64_t(2 * n);
      const std::uint64_t formula = s.zigzag ? (2 * std::uint64_t(n) + 1) * c * c * s.heads
                                             : std::uint64_t(n) * B * B * s.heads;
      const bool even = s.seq % std::uint64_t(s.zigzag ? 2 * n : n) == 0;
      fmt::print("  each step waits for its busiest rank: {} in a row{}\n", path,
                 even ? fmt::format(", formula {} = {}",
                                    s.zigzag ? "(2N+1) (S/2N)^2 H" : "N (S/N)^2 H", formula)
                      : " (uneven chunks: no closed formula)");
      if (even)
        r.check(s.zigzag ? "critical path: (2N+1) (S/2N)^2 H score elements per pass"
                         : "critical path: N (S/N)^2 H score elements per pass",
                path == formula);
    }
    tp::print_compared("attention", "worst |error| / its bound 8 x eps x E (the error model)",
                       outcome.compared);
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    const int me = comm.rank(), n = comm.size();
    const int right = (me + 1) % n, left = (me - 1 + n) % n;
    const std::size_t S = s.seq, W = s.width();
    const std::uint64_t seed = opt.seed;
    const std::vector<float> q_all = tp::make_tensor(seed, kQ, S, W),
                             k_all = tp::make_tensor(seed, kK, S, W),
                             v_all = tp::make_tensor(seed, kV, S, W),
                             do_all = tp::make_tensor(seed, kDO, S, W);
    // STEP 1: the split. My chunks of the sequence: my queries (and dO) stay here; my K and V
    // start the ring. A block travels as its chunks, each [K rows; V rows] (+ [dK; dV] backward).
    const std::vector<Held> mine = held(s, me);
    const std::vector<float> q = my_rows(s, me, q_all), dout = my_rows(s, me, do_all);
    const std::size_t T = q.size() / W;  // my tokens
    if (me == 0) {
      // every token is exactly one rank's: the split the ring and the checks rest on
      std::vector<int> owners(S, 0);
      for (int r = 0; r < n; ++r)
        for (std::size_t t : my_tokens(s, r)) owners[t]++;
      const auto bad = std::count_if(owners.begin(), owners.end(), [](int c) { return c != 1; });
      comm.check("the split holds every token exactly once", bad == 0,
                 fmt::format("{} of {} tokens held by none or by more than one rank", bad, S));
    }
    std::size_t biggest = 0;
    for (int r = 0; r < n; ++r) biggest = std::max(biggest, tokens_of(s, r));
    // Two block buffers, the one I attend to and the one arriving: 4 B W floats each (K, V, dK,
    // dV); a chunk's part of a block starts at 4 (its first row) W.
    Buffer<float> block[2] = {comm.alloc<float>(4 * biggest * W, Category::activations),
                              comm.alloc<float>(4 * biggest * W, Category::activations)};
    auto kv = [&](Buffer<float>& b, const Held& c) {  // [K; V] of chunk c
      return b.view().sub(4 * c.row * W, 2 * s.chunks.size(c.chunk) * W);
    };
    auto grads = [&](Buffer<float>& b, const Held& c) {  // [dK; dV] of chunk c
      return b.view().sub((4 * c.row + 2 * s.chunks.size(c.chunk)) * W,
                          2 * s.chunks.size(c.chunk) * W);
    };
    // My chunks' K and V into a block buffer, their dK and dV zero: the ring's start.
    auto start_block = [&](Buffer<float>& into) {
      std::vector<float> packed(4 * biggest * W, 0.0f);
      for (const Held& c : mine)
        for (std::size_t t = 0; t < s.chunks.size(c.chunk); ++t) {
          const std::size_t token = s.chunks.begin(c.chunk) + t, rows = s.chunks.size(c.chunk);
          std::copy_n(&k_all[token * W], W, &packed[(4 * c.row + t) * W]);
          std::copy_n(&v_all[token * W], W, &packed[(4 * c.row + rows + t) * W]);
        }
      from_host(into.view(), packed);
    };
    start_block(block[0]);
    comm.declare_buffer("K,V", 2 * S * W, s.chunks.parts);
    comm.declare_buffer("dK,dV", 2 * S * W, s.chunks.parts);
    // A block's K, V rows from its host copy, chunk c: K at 4 row W, V |c| W after it.
    auto k_rows = [&](const std::vector<float>& b, const Held& c) { return &b[4 * c.row * W]; };
    auto v_rows = [&](const std::vector<float>& b, const Held& c) {
      return &b[(4 * c.row + s.chunks.size(c.chunk)) * W];
    };

    Work work;
    // Each rank's work, as counter tracks in the trace (and for the report): this step's score
    // elements, the running total, and the tiles by kind.
    auto record_work = [&](std::uint64_t before) {
      comm.recorder().value("score elements this step", double(work.elements - before));
      comm.recorder().value("score elements computed", double(work.elements));
      comm.recorder().value("tiles full", work.full);
      comm.recorder().value("tiles diagonal", work.diagonal);
      comm.recorder().value("tiles skipped", work.skipped);
    };
    auto caption = [&](const char* pass, int t, int origin) {
      Work one;
      for (const Held& a : mine)
        for (const Held& b : held(s, origin))
          one.count(tile_kind(s, a.chunk, b.chunk),
                    s.chunks.size(a.chunk) * s.chunks.size(b.chunk) * s.heads);
      return fmt::format(
          "{} step {}: r{} (chunks {}) attends to r{}'s K/V (chunks {}): {} full, {} diagonal, {} "
          "skipped tiles, {} score elements",
          pass, t, me, chunk_list(s, me), origin, chunk_list(s, origin), one.full, one.diagonal,
          one.skipped, one.elements);
    };

    Running run{std::vector<float>(s.heads * T, -INFINITY), std::vector<float>(s.heads * T, 0.0f),
                std::vector<float>(T * W, 0.0f)};
    std::vector<float> o(T * W), lse(s.heads * T), delta(s.heads * T, 0.0f);
    comm.barrier();
    outcome.forward_first = comm.next_steps(n);
    {
      auto phase = comm.phase("forward");
      int cur = 0;
      for (int t = 0; t < n; ++t) {
        // STEP 2: step t. I hold the K/V block of rank (me - t) mod N. Pass it right and take
        // the next from the left (posted before the compute, so the copy runs under it).
        const int step = outcome.forward_first + t, origin = ((me - t) % n + n) % n,
                  next = ((me - t - 1) % n + n) % n;
        comm.mark_step(step);
        std::vector<Request> reqs;
        if (t < n - 1) {
          for (const Held& c : held(s, next))
            reqs.push_back(comm.irecv(
                kv(block[1 - cur], c), left, kTagKV,
                coll::meta(step, "K,V", c.chunk, c.chunk + 1, Apply::copy, coll::rank_bit(next))));
          for (const Held& c : held(s, origin))
            reqs.push_back(comm.isend(coll::cview(kv(block[cur], c)), right, kTagKV,
                                      coll::meta(step, "K,V", c.chunk, c.chunk + 1, Apply::copy,
                                                 coll::rank_bit(origin))));
        }
        {
          // STEP 3: attend my queries to the block, tile by tile (a tile: one of my chunks
          // against one of its chunks), merging into m, l and acc by the online-softmax rule.
          auto compute =
              comm.phase("attend K/V", {.op = "forward", .text = caption("forward", t, origin)});
          const std::vector<float> b = to_host(View<const float>(block[cur].view()));
          const std::uint64_t before = work.elements;
          for (const Held& a : mine)
            for (const Held& c : held(s, origin))
              attend_forward(s, a, q, c.chunk, k_rows(b, c), v_rows(b, c), run, work);
          record_work(before);
        }
        comm.wait_all(reqs);
        cur = 1 - cur;
      }
      // STEP 4: after the last block: O = acc / l, and the log-sum-exp L = m + log l that the
      // backward pass recomputes P from.
      for (std::size_t h = 0; h < s.heads; ++h)
        for (std::size_t i = 0; i < T; ++i) {
          const std::size_t at = h * T + i;
          lse[at] = run.m[at] + std::log(run.l[at]);
          for (std::size_t x = 0; x < s.dim; ++x)
            o[i * W + h * s.dim + x] = run.acc[i * W + h * s.dim + x] / run.l[at];
        }
    }

    // Backward. My dQ accumulates here; dK, dV travel with their block.
    std::vector<float> dq(T * W, 0.0f);
    for (std::size_t h = 0; h < s.heads; ++h)  // rowsum(dO O), per head and row
      for (std::size_t i = 0; i < T; ++i)
        for (std::size_t x = 0; x < s.dim; ++x)
          delta[h * T + i] += dout[i * W + h * s.dim + x] * o[i * W + h * s.dim + x];
    // The forward pass left another rank's K, V in my buffers: the ring starts again from mine.
    int cur = 0;
    start_block(block[cur]);
    outcome.backward_first = comm.next_steps(n);
    {
      auto phase = comm.phase("backward");
      for (int t = 0; t < n; ++t) {
        const int step = outcome.backward_first + t, origin = ((me - t) % n + n) % n,
                  next = ((me - t - 1) % n + n) % n;
        comm.mark_step(step);
        {
          // STEP 5: the block of rank (me - t): P from L, then dQ into mine and dK, dV into the
          // block's, which carries them on.
          auto compute = comm.phase("attend K/V (backward)",
                                    {.op = "backward", .text = caption("backward", t, origin)});
          std::vector<float> b = to_host(View<const float>(block[cur].view()));
          for (const Held& a : mine)
            for (const Held& c : held(s, origin)) {
              const std::size_t rows = s.chunks.size(c.chunk);
              float* dk = &b[(4 * c.row + 2 * rows) * W];
              float* dv = &b[(4 * c.row + 3 * rows) * W];
              attend_backward(s, a, q, dout, lse, delta, c.chunk, k_rows(b, c), v_rows(b, c), dk,
                              dv, dq);
            }
          from_host(block[cur].view(), b);
        }
        // STEP 6: pass the block on: K and V for the next rank to use (not after the last
        // step: home has them), dK and dV always: the last hop takes them home.
        // --break grads-one-hop-short: the last hop is not taken
        const bool last = t == n - 1;
        if (n > 1 && !(last && broken("grads-one-hop-short"))) {
          std::vector<Request> reqs;
          const std::uint64_t seen = coll::ring_mask(me, t + 1, n),
                              got = coll::ring_mask(left, t + 1, n);
          for (const Held& c : held(s, next)) {
            if (!last)
              reqs.push_back(comm.irecv(kv(block[1 - cur], c), left, kTagKV,
                                        coll::meta(step, "K,V", c.chunk, c.chunk + 1, Apply::copy,
                                                   coll::rank_bit(next))));
            reqs.push_back(
                comm.irecv(grads(block[1 - cur], c), left, kTagGrads,
                           coll::meta(step, "dK,dV", c.chunk, c.chunk + 1, Apply::copy, got)));
          }
          for (const Held& c : held(s, origin)) {
            if (!last)
              reqs.push_back(comm.isend(coll::cview(kv(block[cur], c)), right, kTagKV,
                                        coll::meta(step, "K,V", c.chunk, c.chunk + 1, Apply::copy,
                                                   coll::rank_bit(origin))));
            reqs.push_back(
                comm.isend(coll::cview(grads(block[cur], c)), right, kTagGrads,
                           coll::meta(step, "dK,dV", c.chunk, c.chunk + 1, Apply::copy, seen)));
          }
          comm.wait_all(reqs);
          cur = 1 - cur;
        }
      }
    }

    // STEP 7: my tokens' O, dQ, dK and dV against unsplit attention in float64.
    Reference ref, bound;
    reference_and_bounds(s, tp::as_matrix(q_all, S, W), tp::as_matrix(k_all, S, W),
                         tp::as_matrix(v_all, S, W), tp::as_matrix(do_all, S, W), ref, bound);
    const std::vector<std::size_t> tokens = my_tokens(s, me);
    std::vector<float> dk_mine, dv_mine;  // my chunks' dK, dV, home from the ring
    {
      const std::vector<float> b = to_host(View<const float>(block[cur].view()));
      for (const Held& c : mine) {
        const std::size_t rows = s.chunks.size(c.chunk);
        const float* dk = &b[(4 * c.row + 2 * rows) * W];
        dk_mine.insert(dk_mine.end(), dk, dk + rows * W);
        dv_mine.insert(dv_mine.end(), dk + rows * W, dk + 2 * rows * W);
      }
    }
    if (comm.inject_fault()) dv_mine[0] += 1.0f;
    const double per_unit = kLambda * kEps32;
    std::vector<tp::Compared> compared;
    auto within = [&](const std::string& name, const std::vector<float>& got, const RowMatrix& want,
                      const RowMatrix& e) {
      compared.push_back(tp::compare_within(comm, name,
                                            View<const float>{got.data(), got.size(), Device::cpu},
                                            rows_of(want, tokens), per_unit * rows_of(e, tokens)));
    };
    within("O of my tokens", o, ref.o, bound.o);
    within("dQ of my tokens", dq, ref.dq, bound.dq);
    within("dK of my tokens", dk_mine, ref.dk, bound.dk);
    within("dV of my tokens", dv_mine, ref.dv, bound.dv);
    if (me == 0) outcome.compared = compared;
  });
}
