// splits.cpp — otherData.splits parsed, indexed against the trace's phases, and read at a
// moment (splits.hpp).
#include "viewer/model/splits.hpp"

#include <simdjson.h>

#include <algorithm>
#include <map>
#include <utility>

namespace distlab::viewer {

const char* to_string(SplitBlockKind k) {
  switch (k) {
    case SplitBlockKind::activation:
      return "activation";
    case SplitBlockKind::weight:
      return "weight";
    case SplitBlockKind::f:
      return "f";
    case SplitBlockKind::g:
      return "g";
  }
  return "?";
}

const char* to_string(SplitHow h) {
  switch (h) {
    case SplitHow::none:
      return "none";
    case SplitHow::rows:
      return "rows";
    case SplitHow::columns:
      return "columns";
    case SplitHow::heads:
      return "heads";
    case SplitHow::partial:
      return "partial";
  }
  return "?";
}

const char* to_string(PassState s) {
  switch (s) {
    case PassState::none:
      return "none";
    case PassState::pending:
      return "pending";
    case PassState::running:
      return "running";
    case PassState::done:
      return "done";
  }
  return "?";
}

namespace {

namespace dom = simdjson::dom;

// Bounds on what a trace may declare: a layer is a handful of tensors of at most 4 axes.
constexpr std::size_t kMaxBlocks = 64;
constexpr std::int64_t kMaxRanks = 4096;
constexpr std::size_t kMaxAxes = 4;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 40;

// A refusal: the message says which block and what was wrong.
struct Refused {
  std::string why;
};

std::string block_where(std::size_t i, const std::string& name) {
  return "block " + std::to_string(i) + (name.empty() ? "" : " (" + name + ")");
}

std::string string_field(dom::object o, const char* key) {
  std::string_view v;
  if (o[key].get(v) == simdjson::SUCCESS) return std::string(v);
  return {};
}

// An array of sizes in [0, kMaxDim]; `what` names it in the refusal.
std::vector<std::int64_t> sizes_field(dom::object o, const char* key, const std::string& where,
                                      bool required) {
  dom::array arr;
  if (o[key].get(arr) != simdjson::SUCCESS) {
    if (required) throw Refused{where + " has no \"" + key + "\" array"};
    return {};
  }
  std::vector<std::int64_t> out;
  for (dom::element e : arr) {
    std::int64_t v = 0;
    if (e.get(v) != simdjson::SUCCESS || v < 0 || v > kMaxDim || out.size() == kMaxAxes)
      throw Refused{where + ": \"" + key + "\" must be at most 4 sizes, each in 0 .. 2^40"};
    out.push_back(v);
  }
  if (required && out.empty()) throw Refused{where + ": \"" + key + "\" is empty"};
  return out;
}

// [[begin, end], ...], one pair per rank, each within [0, limit].
std::vector<SplitRange> ranges_field(dom::object o, const char* key, const std::string& where,
                                     int ranks, std::int64_t limit) {
  dom::array arr;
  if (o[key].get(arr) != simdjson::SUCCESS)
    throw Refused{where + " has no \"" + key + "\" (one [begin, end] per rank)"};
  std::vector<SplitRange> out;
  for (dom::element e : arr) {
    dom::array pair;
    std::int64_t b = 0, x = 0;
    if (e.get(pair) != simdjson::SUCCESS || pair.size() != 2 ||
        pair.at(0).get(b) != simdjson::SUCCESS || pair.at(1).get(x) != simdjson::SUCCESS || b < 0 ||
        b > x || x > limit || static_cast<int>(out.size()) == ranks)
      throw Refused{where + ": \"" + key + "\" must be one [begin, end] per rank, with 0 <= " +
                    "begin <= end <= " + std::to_string(limit)};
    out.push_back({b, x});
  }
  if (static_cast<int>(out.size()) != ranks)
    throw Refused{where + ": \"" + key + "\" has " + std::to_string(out.size()) + " ranges for " +
                  std::to_string(ranks) + " ranks"};
  return out;
}

SplitBlock parse_block(dom::object o, std::size_t i, int ranks) {
  SplitBlock b;
  b.name = string_field(o, "name");
  const std::string where = block_where(i, b.name);
  const std::string kind = string_field(o, "kind");
  if (kind == "activation")
    b.kind = SplitBlockKind::activation;
  else if (kind == "weight")
    b.kind = SplitBlockKind::weight;
  else if (kind == "f")
    b.kind = SplitBlockKind::f;
  else if (kind == "g")
    b.kind = SplitBlockKind::g;
  else
    throw Refused{where + ": \"kind\" must be activation, weight, f or g"};
  b.forward_phase = string_field(o, "forward_phase");
  b.backward_phase = string_field(o, "backward_phase");
  bool stack = false;
  if (o["stack"].get(stack) == simdjson::SUCCESS) b.stack = stack;
  if (b.is_operator()) {
    b.forward = string_field(o, "forward");
    b.backward = string_field(o, "backward");
    return b;
  }

  b.shape = sizes_field(o, "shape", where, true);
  b.rank_shape = sizes_field(o, "rank_shape", where, false);
  if (b.rank_shape.empty()) b.rank_shape = b.shape;
  b.head_shape = sizes_field(o, "head_shape", where, false);
  const std::string split = string_field(o, "split");
  if (split.empty() || split == "none")
    b.split = SplitHow::none;
  else if (split == "rows")
    b.split = SplitHow::rows;
  else if (split == "columns")
    b.split = SplitHow::columns;
  else if (split == "heads")
    b.split = SplitHow::heads;
  else if (split == "partial")
    b.split = SplitHow::partial;
  else
    throw Refused{where + ": \"split\" must be none, rows, columns, heads or partial"};
  if (b.split == SplitHow::none || b.split == SplitHow::partial) return b;

  std::int64_t axis = b.split == SplitHow::columns ? 1 : 0, written = 0;
  if (o["axis"].get(written) == simdjson::SUCCESS) axis = written;  // else the split's own
  if (axis < 0 || axis >= static_cast<std::int64_t>(b.shape.size()))
    throw Refused{where + ": \"axis\" " + std::to_string(axis) + " is not an axis of its shape"};
  b.axis = static_cast<int>(axis);
  b.ranges = ranges_field(o, "ranges", where, ranks, b.shape[b.axis]);
  dom::array heads;
  if (o["heads"].get(heads) == simdjson::SUCCESS)
    b.heads = ranges_field(o, "heads", where, ranks, kMaxDim);
  return b;
}

Splits parse_or_throw(std::string_view json) {
  Splits s;
  dom::parser parser;
  dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc) != simdjson::SUCCESS)
    throw Refused{"not valid JSON"};
  dom::object o;
  if (doc.get(o) != simdjson::SUCCESS) throw Refused{"not an object"};
  s.layer = string_field(o, "layer");
  s.formula = string_field(o, "formula");
  std::int64_t ranks = 0;
  if (o["ranks"].get(ranks) != simdjson::SUCCESS || ranks < 1 || ranks > kMaxRanks)
    throw Refused{"\"ranks\" must be a count of ranks, 1 .. 4096"};
  s.ranks = static_cast<int>(ranks);
  dom::array blocks;
  if (o["blocks"].get(blocks) != simdjson::SUCCESS) throw Refused{"no \"blocks\" array"};
  if (blocks.size() > kMaxBlocks) throw Refused{"more than 64 blocks"};
  for (dom::element e : blocks) {
    dom::object bo;
    if (e.get(bo) != simdjson::SUCCESS)
      throw Refused{block_where(s.blocks.size(), "") + " is not an object"};
    s.blocks.push_back(parse_block(bo, s.blocks.size(), s.ranks));
    const int i = static_cast<int>(s.blocks.size()) - 1;
    if (s.blocks.back().kind == SplitBlockKind::f && s.f < 0) s.f = i;
    if (s.blocks.back().kind == SplitBlockKind::g && s.g < 0) s.g = i;
  }
  return s;
}

}  // namespace

Splits parse_splits(std::string_view json) {
  if (json.empty()) return {};
  try {
    return parse_or_throw(json);
  } catch (const Refused& r) {
    Splits s;
    s.error = "otherData.splits: " + r.why;
    return s;
  } catch (const std::exception& e) {  // simdjson or allocation: still no splits, no crash
    Splits s;
    s.error = std::string("otherData.splits: ") + e.what();
    return s;
  }
}

SplitsIndex build_splits_index(const TraceModel& model) {
  SplitsIndex index;
  index.splits = parse_splits(model.info.extra_json("splits"));
  const Splits& s = index.splits;
  // phase name -> the (block, pass) pairs it belongs to (one phase may multiply by several
  // weights: lesson 13's heads use Wq, Wk and Wv at once).
  std::map<std::string_view, std::vector<std::pair<int, bool>>, std::less<>> by_name;
  for (std::size_t b = 0; b < s.blocks.size(); ++b) {
    if (!s.blocks[b].forward_phase.empty())
      by_name[s.blocks[b].forward_phase].push_back({static_cast<int>(b), false});
    if (!s.blocks[b].backward_phase.empty())
      by_name[s.blocks[b].backward_phase].push_back({static_cast<int>(b), true});
  }
  if (by_name.empty()) return index;
  for (const Lane& lane : model.lanes)
    for (std::uint32_t i = lane.span_begin; i < lane.span_end && i < model.spans.size(); ++i) {
      const Span& sp = model.spans[i];
      if (sp.kind != SpanKind::compute) continue;
      const auto it = by_name.find(model.str(sp.name));
      if (it == by_name.end()) continue;
      for (const auto& [block, backward] : it->second)
        index.intervals.push_back({block, lane.rank, backward, sp.start, sp.end()});
    }
  std::sort(index.intervals.begin(), index.intervals.end(),
            [](const SplitsIndex::Interval& a, const SplitsIndex::Interval& b) {
              return a.start < b.start;
            });
  return index;
}

SplitsMoment splits_at(const SplitsIndex& index, const Moment& at) {
  const Splits& s = index.splits;
  const std::size_t n = s.blocks.size();
  SplitsMoment out;
  out.blocks.resize(n);
  // Per block and pass: ranks running now, and whether some interval has ended.
  std::vector<int> running[2] = {std::vector<int>(n), std::vector<int>(n)};
  std::vector<bool> ended[2] = {std::vector<bool>(n), std::vector<bool>(n)};
  for (std::size_t b = 0; b < n; ++b) out.blocks[b].ranks.assign(s.ranks, false);
  const double t = at.time_us;
  for (const SplitsIndex::Interval& iv : index.intervals) {
    if (iv.start > t) break;
    const auto b = static_cast<std::size_t>(iv.block);
    if (b >= n) continue;
    if (t < iv.end) {
      ++running[iv.backward][b];
      if (iv.rank >= 0 && iv.rank < s.ranks) out.blocks[b].ranks[iv.rank] = true;
    } else {
      ended[iv.backward][b] = true;
    }
  }
  auto state = [&](bool has_phase, bool backward, std::size_t b) {
    if (!has_phase) return PassState::none;
    if (running[backward][b] > 0) return PassState::running;
    return ended[backward][b] ? PassState::done : PassState::pending;
  };
  int most = 0;
  for (std::size_t b = 0; b < n; ++b) {
    const SplitBlock& blk = s.blocks[b];
    SplitsMoment::Block& o = out.blocks[b];
    o.forward = state(!blk.forward_phase.empty(), false, b);
    o.backward = state(!blk.backward_phase.empty(), true, b);
    for (const bool backward : {false, true})
      if (blk.kind != SplitBlockKind::activation && running[backward][b] > most) {
        most = running[backward][b];
        out.active = static_cast<int>(b);
        out.backward = backward;
      }
  }
  // An activation holds its values once the block that makes it has run forward: the nearest
  // weight or operator before it with a forward phase (a multiplication: from its start; an
  // all-reduce: only when it is over). One with no producer (X) is the input, always there.
  for (std::size_t b = 0; b < n; ++b) {
    if (s.blocks[b].kind != SplitBlockKind::activation) continue;
    bool filled = true;
    for (std::size_t p = b; p-- > 0;) {
      const SplitBlock& prod = s.blocks[p];
      if (prod.kind == SplitBlockKind::activation || prod.forward_phase.empty()) continue;
      const PassState ps = out.blocks[p].forward;
      filled = ps == PassState::done || (ps == PassState::running && !prod.is_operator());
      break;
    }
    out.blocks[b].filled = filled;
  }
  return out;
}

}  // namespace distlab::viewer
