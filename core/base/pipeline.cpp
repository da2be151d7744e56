// pipeline.cpp — the schedules' orders and the ideal machine's replay of them (pipeline.hpp).
#include "core/base/pipeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "core/base/breaks.hpp"

namespace distlab::pipeline {

namespace {

// The formula's fraction: each stage's busy units over the step's, per the table in the header.
std::pair<std::int64_t, std::int64_t> fraction(const Shape& s) {
  const std::int64_t P = s.stages, M = s.micro, v = s.chunks;
  switch (s.schedule) {
    case Schedule::interleaved:
      return {v * M, v * M + P - 1};
    case Schedule::zb_h1:  // busy M (F + I + W) = 3M; bubble (P - 1)(F + I - W) = P - 1
      return {3 * M, 3 * M + P - 1};
    default:
      return {M, M + P - 1};
  }
}

// 1F1B over M micro-batches on stage r of P; zero bubble when split: I in place of B, and the
// first `put_off` W's left for the cool-down (every other W right after its I).
std::vector<Op> one_f_one_b(int r, int P, int M, bool split) {
  std::vector<Op> ops;
  // --break warmup-one-long (lesson 11): one forward more before the first backward, P - r
  const int warmup = std::min(P - r - 1 + (broken("warmup-one-long") ? 1 : 0), M),
            put_off = split ? r : 0;
  int backwards = 0, weights = 0;
  const auto backward = [&] {
    if (!split) {
      ops.push_back({Pass::backward, backwards++});
      return;
    }
    ops.push_back({Pass::input, backwards++});
    if (backwards > put_off) ops.push_back({Pass::weight, weights++});
  };
  for (int m = 0; m < warmup; ++m) ops.push_back({Pass::forward, m});
  for (int m = warmup; m < M; ++m) {  // steady state: one forward, one backward
    ops.push_back({Pass::forward, m});
    backward();
  }
  while (backwards < M) backward();                                       // cool-down
  while (weights < M && split) ops.push_back({Pass::weight, weights++});  // the W's put off
  return ops;
}

// Megatron's interleaved 1F1B: the k-th forward of stage r is micro-batch (k / Pv) P + k mod P
// of chunk (k / P) mod v; the k-th backward the same micro-batch of the chunks in reverse.
std::vector<Op> interleaved(int r, int P, int M, int v) {
  const int total = M * v;
  const auto op = [&](Pass pass, int k) {
    const int group = k % (P * v), c = group / P;
    return Op{pass, k / (P * v) * P + k % P, pass == Pass::forward ? c : v - 1 - c};
  };
  const int warmup = std::min(2 * (P - r - 1) + (v - 1) * P, total);
  std::vector<Op> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(op(Pass::forward, k));
  for (int k = warmup; k < total; ++k) {
    ops.push_back(op(Pass::forward, k));
    ops.push_back(op(Pass::backward, k - warmup));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(op(Pass::backward, k));
  return ops;
}

}  // namespace

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::naive:
      return "naive";
    case Schedule::gpipe:
      return "gpipe";
    case Schedule::one_f_one_b:
      return "1f1b";
    case Schedule::interleaved:
      return "interleaved";
    case Schedule::zb_h1:
      return "zb-h1";
  }
  return "unknown";
}

std::optional<Schedule> schedule_named(std::string_view name) {
  for (Schedule s : {Schedule::naive, Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved,
                     Schedule::zb_h1})
    if (name == to_string(s)) return s;
  return std::nullopt;
}

const char* to_string(Pass p) {
  switch (p) {
    case Pass::forward:
      return "forward";
    case Pass::backward:
      return "backward";
    case Pass::input:
      return "backward-input";
    case Pass::weight:
      return "backward-weight";
  }
  return "unknown";
}

std::optional<Pass> pass_named(std::string_view name) {
  for (Pass p : {Pass::forward, Pass::backward, Pass::input, Pass::weight})
    if (name == to_string(p)) return p;
  return std::nullopt;
}

char letter(Pass p) {
  return "FBIW"[static_cast<int>(p)];
}

int units(Pass p) {
  switch (p) {
    case Pass::forward:
      return kForwardUnits;
    case Pass::backward:
      return kBackwardUnits;
    case Pass::input:
      return kInputUnits;
    case Pass::weight:
      return kWeightUnits;
  }
  return 0;
}

std::string refusal(const Shape& s) {
  if (s.stages < 1 || s.micro < 1 || s.chunks < 1)
    return "a pipeline needs at least one stage, micro-batch and chunk";
  if (s.schedule != Schedule::interleaved && s.chunks != 1)
    return fmt::format("{} gives each rank one model chunk: --virtual-stages is for interleaved",
                       to_string(s.schedule));
  if (s.schedule == Schedule::naive && s.micro != 1)
    return "naive runs the whole batch at once (one micro-batch)";
  if (s.schedule == Schedule::interleaved && s.chunks < 2)
    return "interleaved needs at least 2 chunks per rank (--virtual-stages 2 or more; with 1 it "
           "is 1f1b)";
  if (s.schedule == Schedule::interleaved && s.micro % s.stages != 0)
    return fmt::format(
        "interleaved sends the micro-batches through each chunk P = {} at a time: the {} "
        "micro-batches must be a multiple of the {} stages",
        s.stages, s.micro, s.stages);
  if (s.schedule == Schedule::zb_h1 && s.micro < s.stages)
    return fmt::format(
        "zb-h1 fills the bubble with the W's of at least P micro-batches: {} micro-batches on {} "
        "stages is too few (M >= P)",
        s.micro, s.stages);
  return {};
}

std::vector<Op> order_of(const Shape& s, int r) {
  const int P = s.stages, M = s.micro;
  switch (s.schedule) {
    case Schedule::naive:
    case Schedule::gpipe: {  // every forward, then every backward
      std::vector<Op> ops;
      for (int m = 0; m < M; ++m) ops.push_back({Pass::forward, m});
      for (int m = M - 1; m >= 0; --m)
        ops.push_back({Pass::backward, m});  // the last forward's backward first
      return ops;
    }
    case Schedule::one_f_one_b:
      return one_f_one_b(r, P, M, false);
    case Schedule::zb_h1:
      return one_f_one_b(r, P, M, true);
    case Schedule::interleaved:
      return interleaved(r, P, M, s.chunks);
  }
  return {};
}

std::vector<std::vector<Op>> orders_of(const Shape& s) {
  std::vector<std::vector<Op>> orders;
  for (int r = 0; r < s.stages; ++r) orders.push_back(order_of(s, r));
  return orders;
}

double utilisation_formula(const Shape& s) {
  const auto [num, den] = fraction(s);
  return den > 0 ? double(num) / double(den) : 0.0;
}

std::string utilisation_symbol(const Shape& s) {
  switch (s.schedule) {
    case Schedule::interleaved:
      return "vM/(vM+P-1)";
    case Schedule::zb_h1:
      return "3M/(3M+P-1)";
    default:
      return "M/(M+P-1)";
  }
}

std::string utilisation_fraction(const Shape& s) {
  const auto [num, den] = fraction(s);
  return fmt::format("{}/{}", num, den);
}

std::string utilisation_text(const Shape& s) {
  return utilisation_symbol(s) + " = " + utilisation_fraction(s);
}

int in_flight_formula(const Shape& s, int r) {
  const int P = s.stages, M = s.micro, v = s.chunks;
  switch (s.schedule) {
    case Schedule::one_f_one_b:
      return std::min(P - r, M);
    case Schedule::zb_h1:
      return std::min(P, M);
    case Schedule::interleaved:
      return std::min(2 * (P - r - 1) + (v - 1) * P + 1, v * M);
    default:
      return M;
  }
}

int max_in_flight(const std::vector<Op>& ops) {
  int now = 0, most = 0;
  for (const Op& op : ops) {
    if (op.pass == Pass::forward) ++now;
    if (op.pass == Pass::backward || op.pass == Pass::weight) --now;
    most = std::max(most, now);
  }
  return most;
}

std::vector<std::vector<int>> ideal_ends(const std::vector<std::vector<Op>>& ops, int M,
                                         int chunks) {
  const int P = int(ops.size()), V = P * std::max(chunks, 1);
  const auto at = [&](std::vector<int>& table, int vs, int m) -> int& {
    return table[std::size_t(vs) * std::size_t(M) + std::size_t(m)];
  };
  // Per virtual stage and micro-batch: when its forward ended, and its input's gradient (B or I).
  std::vector<int> f_end(std::size_t(V) * std::size_t(std::max(M, 0)), -1), g_end = f_end;
  std::vector<std::vector<int>> end(static_cast<std::size_t>(P));
  std::vector<std::size_t> next(std::size_t(P), 0);
  std::vector<int> free_at(std::size_t(P), 0);
  for (bool progress = true; progress;) {  // each round starts every op whose input is ready
    progress = false;
    for (int r = 0; r < P; ++r) {
      auto& i = next[std::size_t(r)];
      if (i == ops[std::size_t(r)].size()) continue;
      const Op op = ops[std::size_t(r)][i];
      // Not a micro-batch or chunk of this pipeline: never ready.
      if (op.micro < 0 || op.micro >= M || op.chunk < 0 || op.chunk * P + r >= V) continue;
      const int vs = op.chunk * P + r;
      int ready = 0;
      switch (op.pass) {
        case Pass::forward:
          ready = vs > 0 ? at(f_end, vs - 1, op.micro) : 0;
          break;
        case Pass::backward:
        case Pass::input:
          ready = vs + 1 < V ? at(g_end, vs + 1, op.micro) : at(f_end, vs, op.micro);
          break;
        case Pass::weight:
          ready = at(g_end, vs, op.micro);
          break;
      }
      if (ready < 0) continue;
      const int start = std::max(ready, free_at[std::size_t(r)]), stop = start + units(op.pass);
      if (op.pass == Pass::forward) at(f_end, vs, op.micro) = stop;
      if (op.pass == Pass::backward || op.pass == Pass::input) at(g_end, vs, op.micro) = stop;
      free_at[std::size_t(r)] = stop;
      end[std::size_t(r)].push_back(stop);
      ++i;
      progress = true;
    }
  }
  return end;
}

std::vector<int> ideal_ticks(const std::vector<std::vector<int>>& ends) {
  std::vector<int> ticks;
  for (const auto& stage_ends : ends)
    ticks.insert(ticks.end(), stage_ends.begin(), stage_ends.end());
  std::sort(ticks.begin(), ticks.end());
  ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
  return ticks;
}

IdealReplay replay_ideal(const std::vector<std::vector<Op>>& orders, int M, int chunks) {
  const std::vector<std::vector<int>> ends = ideal_ends(orders, M, chunks);
  IdealReplay r{true, 0, 0};
  for (std::size_t k = 0; k < orders.size(); ++k) {
    r.complete = r.complete && ends[k].size() == orders[k].size();
    for (const Op& op : orders[k]) r.busy += units(op.pass);
    for (int e : ends[k]) r.step = std::max(r.step, e);
  }
  return r;
}

bool IdealReplay::matches(const Shape& s) const {
  const auto [num, den] = fraction(s);
  return complete && std::int64_t(busy) * den == std::int64_t(s.stages) * step * num;
}

}  // namespace distlab::pipeline
