// tensor_parallel.cpp — Megatron's f and g, tensors, checks and the report (tensor_parallel.hpp).
#include "core/training/tensor_parallel.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/base/check.hpp"
#include "core/base/json.hpp"
#include "core/base/units.hpp"
#include "core/collectives/all_gather_ring.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/collectives/reduce_scatter_ring.hpp"
#include "core/runtime/data.hpp"

namespace distlab::tp {

std::vector<float> make_tensor(std::uint64_t seed, int stream, std::size_t rows, std::size_t cols,
                               double scale) {
  std::vector<float> out(rows * cols);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(input_value<float>(seed, stream, i) * scale);
  return out;
}

RowMatrix as_matrix(const std::vector<float>& v, std::size_t rows, std::size_t cols) {
  RowMatrix m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  for (std::size_t i = 0; i < rows * cols; ++i) m.data()[i] = v[i];
  return m;
}

std::vector<float> columns(const std::vector<float>& m, std::size_t rows, std::size_t cols,
                           std::size_t c0, std::size_t count) {
  std::vector<float> out;
  out.reserve(rows * count);
  for (std::size_t r = 0; r < rows; ++r)
    out.insert(out.end(), m.begin() + std::ptrdiff_t(r * cols + c0),
               m.begin() + std::ptrdiff_t(r * cols + c0 + count));
  return out;
}

std::vector<float> rows(const std::vector<float>& m, std::size_t cols, std::size_t r0,
                        std::size_t count) {
  return std::vector<float>(m.begin() + std::ptrdiff_t(r0 * cols),
                            m.begin() + std::ptrdiff_t((r0 + count) * cols));
}

AllReduceSteps collective_phase(Comm& comm, const char* phase_name,
                                const std::function<void()>& collective) {
  auto phase = comm.phase(phase_name);
  AllReduceSteps s;
  s.first = comm.next_steps(0);
  collective();
  s.last = comm.next_steps(0) - 1;
  return s;
}

AllReduceSteps g_forward(Comm& comm, View<float> partial) {
  return collective_phase(comm, kGPhase,
                          [&] { coll::all_reduce_ring_chunked(comm, partial, "Y (g)"); });
}

AllReduceSteps f_backward(Comm& comm, View<float> partial) {
  return collective_phase(comm, kFPhase,
                          [&] { coll::all_reduce_ring_chunked(comm, partial, "dX (f)"); });
}

AllReduceSteps sp_all_gather(Comm& comm, View<float> whole, const char* phase_name,
                             const char* buffer) {
  return collective_phase(comm, phase_name, [&] { coll::all_gather_ring(comm, whole, buffer); });
}

AllReduceSteps sp_reduce_scatter(Comm& comm, View<float> whole, const char* phase_name,
                                 const char* buffer) {
  return collective_phase(comm, phase_name,
                          [&] { coll::reduce_scatter_ring(comm, whole, buffer); });
}

AllReduceSteps g_forward(Comm& comm, View<float> partial, bool sp) {
  return sp ? sp_reduce_scatter(comm, partial, kGScatterPhase, "Y (g)") : g_forward(comm, partial);
}

AllReduceSteps f_backward(Comm& comm, View<float> partial, bool sp) {
  return sp ? sp_reduce_scatter(comm, partial, kFScatterPhase, "dU (f)")
            : f_backward(comm, partial);
}

std::uint64_t sp_gather_bytes(int k, int n, std::uint64_t elements) {
  // all_gather_ring: step s sends part (k - s) mod n, s = 0 .. n-2: every part but (k + 1) mod n.
  const Partition part{elements, n};
  return (elements - part.size((k + 1) % n)) * sizeof(float);
}

std::uint64_t sp_scatter_bytes(int k, int n, std::uint64_t elements) {
  // reduce_scatter_ring: step s sends part (k - s - 1) mod n, s = 0 .. n-2: every part but k.
  const Partition part{elements, n};
  return (elements - part.size(k)) * sizeof(float);
}

Compared compare_tensor(Comm& comm, const std::string& name, View<const float> got,
                        const RowMatrix& want, double tol) {
  const std::vector<float> host = to_host(got);
  Compared c{name, 0, host.size() == std::size_t(want.size())};
  double worst = 0, scale = 0;
  for (Eigen::Index i = 0; c.ok && i < want.size(); ++i) {
    const double err = std::fabs(double(host[std::size_t(i)]) - want.data()[i]);
    worst = std::isnan(err) ? INFINITY : std::max(worst, err);
    scale = std::max(scale, std::fabs(want.data()[i]));
  }
  c.error = scale > 0 ? worst / scale : worst;
  c.ok = c.ok && c.error <= tol;
  comm.check(
      fmt::format(
          "{} equals the unsplit layer's (max error {:.2g} of its largest element, at most {:.0e})",
          name, c.error, tol),
      c.ok);
  return c;
}

Compared compare_within(Comm& comm, const std::string& name, View<const float> got,
                        const RowMatrix& want, const RowMatrix& bound) {
  const std::vector<float> host = to_host(got);
  Compared c{name, 0, host.size() == std::size_t(want.size()) && bound.size() == want.size()};
  for (Eigen::Index i = 0; c.ok && i < want.size(); ++i) {
    const double err = std::fabs(double(host[std::size_t(i)]) - want.data()[i]);
    const double ratio = bound.data()[i] > 0 ? err / bound.data()[i] : (err > 0 ? INFINITY : 0);
    c.error = std::isnan(err) ? INFINITY : std::max(c.error, ratio);
  }
  c.ok = c.ok && c.error <= 1;
  comm.check(
      fmt::format("{} equals the unsplit layer's (worst error {:.2g} of its bound, at most 1)",
                  name, c.error),
      c.ok);
  return c;
}

void report(RunResult& r, const Outcome& o, std::uint64_t elements, std::uint64_t unsplit_bytes,
            std::uint64_t replicated_bytes) {
  const int n = r.world.size;
  // The all-reduces: g phases in forward, f phases in backward, one each per rank.
  fmt::print("\ncommunication per rank (ring all-reduces of {} floats, {}; from the trace):\n",
             format_count(elements), format_bytes(double(elements * sizeof(float))));
  fmt::print("  {:>4}  {:>4}  {:>4}  {:>14}  {:>14}  {:>14}\n", "rank", "g", "f", "forward sent",
             "backward sent", "formula each");
  const auto fwd = r.traffic(o.forward.first, o.forward.last),
             bwd = r.traffic(o.backward.first, o.backward.last);
  bool one_each = true, bytes_ok = true, nothing_else = true;
  for (int k = 0; k < n; ++k) {
    int g = 0, f = 0;
    std::uint64_t sent = 0;  // every message of the whole run, whatever its step or phase
    for (const SpanEvent& e : r.logs[std::size_t(k)].spans) {
      g += e.kind == SpanEvent::Kind::plain && e.name == kGPhase;
      f += e.kind == SpanEvent::Kind::plain && e.name == kFPhase;
      if (e.kind == SpanEvent::Kind::send) sent += e.bytes;
    }
    const std::uint64_t want = coll::ring_chunked_traffic(k, n, elements).sent * sizeof(float);
    one_each = one_each && g == 1 && f == 1;
    bytes_ok = bytes_ok && fwd[std::size_t(k)].bytes_sent == want &&
               bwd[std::size_t(k)].bytes_sent == want;
    nothing_else = nothing_else && sent == 2 * want;
    fmt::print("  {:>4}  {:>4}  {:>4}  {:>14}  {:>14}  {:>14}\n", fmt::format("r{}", k), g, f,
               format_bytes(double(fwd[std::size_t(k)].bytes_sent)),
               format_bytes(double(bwd[std::size_t(k)].bytes_sent)), format_bytes(double(want)));
  }
  fmt::print(
      "  formula: one all-reduce forward (g) and one backward (f), 2(N-1)/N x {} sent by each "
      "rank\n",
      format_bytes(double(elements * sizeof(float))));
  r.check(
      "exactly one all-reduce in forward (g) and one in backward (f) on every rank, from the trace",
      one_each);
  r.check("every rank's bytes in forward and in backward equal one ring all-reduce's", bytes_ok);
  // The phases' names count the collectives the code meant; the messages count what it sent: a
  // collective outside g and f (an extra all-reduce, a gather) adds bytes here.
  r.check(
      "every rank's whole run sends those two all-reduces' bytes and nothing else (every "
      "message in the trace)",
      nothing_else);

  // Weights: 1/N of the unsplit layer's (plus what is replicated) on every rank's ledger.
  const std::uint64_t split = unsplit_bytes - replicated_bytes;
  DL_CHECK(split % std::uint64_t(n) == 0,
           "tp::report: {} bytes of split weights do not divide by {} ranks", split, n);
  const std::uint64_t per_rank_bytes = split / std::uint64_t(n) + replicated_bytes;
  // The split part over N, and what is replicated once on each rank (not inside the split part).
  const std::string over =
      replicated_bytes > 0 && n > 1
          ? fmt::format(", less the\n{} kept whole on every rank, over {} ranks, plus those {}",
                        format_bytes(double(replicated_bytes)), n,
                        format_bytes(double(replicated_bytes)))
          : fmt::format("\nover {} rank{}", n, n == 1 ? "" : "s");
  fmt::print("\nweights per rank (the ledger's params): formula {} = the unsplit layer's {}{}\n",
             format_bytes(double(per_rank_bytes)), format_bytes(double(unsplit_bytes)), over);
  bool weights_ok = true;
  std::string line = " ";
  for (const RankLog& log : r.logs) {
    const auto got = std::uint64_t(log.peak[std::size_t(Category::params)]);
    weights_ok = weights_ok && got == per_rank_bytes;
    const std::string cell = fmt::format(" r{} {}", log.rank, format_bytes(double(got)));
    if (line.size() + cell.size() > 100) {  // the next rank on a line of its own
      fmt::print("{}\n", line);
      line.erase(1);  // its leading space
    }
    line += cell;
  }
  fmt::print("{}\n", line);
  r.check("every rank holds its share of the weights, as the formula says", weights_ok);

  print_compared("layer", o.error_measure, o.compared);
}

void print_compared(const std::string& what, const std::string& measure,
                    const std::vector<Compared>& compared) {
  fmt::print("\nagainst the unsplit {} in float64, rank 0's tensors\n({}):\n", what, measure);
  for (const Compared& c : compared)
    fmt::print("  {:<34} {:>10.2g}  {}\n", c.name, c.error, c.ok ? "ok" : "WRONG");
}

std::vector<SplitRange> rank_ranges(const Partition& part, std::size_t unit) {
  std::vector<SplitRange> out;
  for (int r = 0; r < part.parts; ++r) out.push_back({part.begin(r) * unit, part.end(r) * unit});
  return out;
}

SplitBlock split_block(std::string name, std::string kind, std::vector<std::size_t> shape,
                       std::vector<std::size_t> rank_shape, std::string split) {
  SplitBlock b;
  b.name = std::move(name);
  b.kind = std::move(kind);
  b.shape = std::move(shape);
  b.rank_shape = std::move(rank_shape);
  b.split = std::move(split);
  return b;
}

SplitBlock f_block() {
  SplitBlock f = split_block("f", "f", {}, {}, "none");
  f.forward = "identity";
  f.backward = "all-reduce";
  f.backward_phase = kFPhase;
  return f;
}

SplitBlock g_block() {
  SplitBlock g = split_block("g", "g", {}, {}, "none");
  g.forward = "all-reduce";
  g.backward = "identity";
  g.forward_phase = kGPhase;
  return g;
}

namespace {
std::string json_sizes(const std::vector<std::size_t>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}
std::string json_ranges(const std::vector<SplitRange>& v) {
  std::vector<std::string> items;
  for (const SplitRange& r : v) items.push_back(fmt::format("[{}, {}]", r.begin, r.end));
  return fmt::format("[{}]", fmt::join(items, ", "));
}
// The axis a split cuts: rows and heads the first, columns the second.
int split_axis(const std::string& split) {
  if (split == "rows" || split == "heads") return 0;
  if (split == "columns") return 1;
  return -1;
}
}  // namespace

std::string splits_json(const std::string& layer, const std::string& formula, int ranks,
                        const std::vector<SplitBlock>& blocks) {
  std::vector<std::string> items;
  for (const SplitBlock& b : blocks) {
    std::string o =
        fmt::format(R"({{"name": {}, "kind": {})", json_string(b.name), json_string(b.kind));
    if (b.kind == "f" || b.kind == "g") {
      o += fmt::format(R"(, "forward": {}, "backward": {})", json_string(b.forward),
                       json_string(b.backward));
    } else {
      o += fmt::format(R"(, "shape": {}, "rank_shape": {}, "split": {})", json_sizes(b.shape),
                       json_sizes(b.rank_shape), json_string(b.split));
      if (split_axis(b.split) >= 0)
        o += fmt::format(R"(, "axis": {}, "ranges": {})", split_axis(b.split),
                         json_ranges(b.ranges));
      if (!b.heads.empty())
        o += fmt::format(R"(, "heads": {}, "head_shape": {})", json_ranges(b.heads),
                         json_sizes(b.head_shape));
    }
    if (!b.forward_phase.empty())
      o += fmt::format(R"(, "forward_phase": {})", json_string(b.forward_phase));
    if (!b.backward_phase.empty())
      o += fmt::format(R"(, "backward_phase": {})", json_string(b.backward_phase));
    if (b.stack) o += R"(, "stack": true)";
    items.push_back(o + "}");
  }
  return fmt::format(R"({{"layer": {}, "formula": {}, "ranks": {}, "blocks": [{}]}})",
                     json_string(layer), json_string(formula), ranks, fmt::join(items, ", "));
}

}  // namespace distlab::tp
