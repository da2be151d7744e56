// stats.cpp — traffic totals, the cost model, and per-buffer bandwidth (stats.hpp).
#include "viewer/model/stats.hpp"
#include "viewer/model/shard_replay.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <utility>

namespace distlab::viewer {

// ---- traffic --------------------------------------------------------------------------------

std::vector<LinkTraffic> link_totals(const TraceModel& model) {
  Moment end;  // past every arrival: every message counts
  end.clock = Clock::measured;
  end.time_us = std::numeric_limits<double>::infinity();
  return link_traffic(model, end);
}

std::vector<RankTraffic> rank_totals(const std::vector<LinkTraffic>& links, int ranks) {
  std::vector<RankTraffic> out(static_cast<std::size_t>(std::max(ranks, 0)));
  for (const LinkTraffic& l : links) {
    if (l.src >= 0 && l.src < ranks)
      out[l.src].bytes_sent += l.bytes, out[l.src].messages_sent += l.messages;
    if (l.dst >= 0 && l.dst < ranks)
      out[l.dst].bytes_recv += l.bytes, out[l.dst].messages_recv += l.messages;
  }
  return out;
}

std::vector<WindowTraffic> window_totals(const TraceModel& model) {
  if (model.accesses.empty()) return {};
  std::vector<WindowTraffic> out(model.ranks.size());
  for (const WindowAccess& w : model.accesses) {
    if (w.rank < 0 || w.rank >= static_cast<int>(out.size())) continue;
    WindowTraffic& t = out[static_cast<std::size_t>(w.rank)];
    const std::int64_t b = std::max<std::int64_t>(w.bytes, 0);
    if (w.store)
      t.bytes_stored += b, ++t.stores;
    else
      t.bytes_loaded += b, ++t.loads;
  }
  return out;
}

std::vector<GroupTraffic> group_totals(const TraceModel& model) {
  std::map<std::string_view, GroupTraffic> by_name;
  bool named = false;
  for (const Message& msg : model.messages) {
    GroupTraffic& g = by_name[model.str(msg.group)];
    g.group = msg.group;
    g.bytes += std::max<std::int64_t>(msg.bytes, 0);
    ++g.messages;
    named = named || msg.group != 0;
  }
  std::vector<GroupTraffic> out;
  if (!named) return out;
  for (const auto& [name, g] : by_name) out.push_back(g);
  return out;
}

std::map<std::pair<int, int>, std::uint32_t> pair_groups(const TraceModel& model) {
  // per pair, per group name: bytes and messages
  std::map<std::pair<int, int>, std::map<std::string_view, GroupTraffic>> seen;
  for (const Message& msg : model.messages) {
    if (msg.src < 0 || msg.dst < 0 || msg.src == msg.dst) continue;
    GroupTraffic& g = seen[std::minmax(msg.src, msg.dst)][model.str(msg.group)];
    g.group = msg.group;
    g.bytes += std::max<std::int64_t>(msg.bytes, 0);
    ++g.messages;
  }
  std::map<std::pair<int, int>, std::uint32_t> out;
  for (const auto& [pair, groups] : seen) {
    const GroupTraffic* best = nullptr;
    for (const auto& [name, g] : groups)  // by name: the first wins a tie
      if (!best || g.bytes > best->bytes || (g.bytes == best->bytes && g.messages > best->messages))
        best = &g;
    out[pair] = best->group;
  }
  return out;
}

// ---- cost model -----------------------------------------------------------------------------

const AlgorithmCost* CostModel::find(std::string_view name) const {
  for (const auto& a : algorithms)
    if (a.name == name) return &a;
  return nullptr;
}

namespace {

double number_or(simdjson::dom::element e, double fallback) {
  double d = 0;
  if (e.get_double().get(d) == simdjson::SUCCESS) return d;  // get_double takes integers too
  return fallback;
}

std::string string_or_empty(simdjson::dom::element e) {
  std::string_view s;
  return e.get_string().get(s) == simdjson::SUCCESS ? std::string(s) : std::string();
}

}  // namespace

CostModel parse_cost_model(std::string_view json) {
  CostModel out;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json.data(), json.size()).get(root) != simdjson::SUCCESS) return out;
  simdjson::dom::object o;
  if (root.get_object().get(o) != simdjson::SUCCESS) return out;
  out.present = true;
  for (auto [key, value] : o) {
    if (key == "model")
      out.model = string_or_empty(value);
    else if (key == "source")
      out.source = string_or_empty(value);
    else if (key == "collective")
      out.collective = string_or_empty(value);
    else if (key == "alpha_s")
      out.alpha_s = number_or(value, -1);
    else if (key == "beta_s_per_byte")
      out.beta_s_per_byte = number_or(value, -1);
    else if (key == "gamma_s_per_byte")
      out.gamma_s_per_byte = number_or(value, -1);
    else if (key == "bytes")
      out.bytes = std::max(0.0, number_or(value, 0));
    else if (key == "ranks")
      out.ranks = static_cast<int>(std::clamp(number_or(value, 0), 0.0, 1e9));
    else if (key == "algorithms") {
      simdjson::dom::object algos;
      if (value.get_object().get(algos) != simdjson::SUCCESS) continue;
      for (auto [name, a] : algos) {
        AlgorithmCost c;
        c.name = std::string(name);
        simdjson::dom::element v;
        if (a["predicted_s"].get(v) == simdjson::SUCCESS) c.predicted_s = number_or(v, -1);
        if (a["measured_s"].get(v) == simdjson::SUCCESS) c.measured_s = number_or(v, -1);
        out.algorithms.push_back(std::move(c));
      }
    }
  }
  return out;
}

// ---- patterns -------------------------------------------------------------------------------

const char* to_string(Pattern p) {
  switch (p) {
    case Pattern::unknown:
      return "?";
    case Pattern::all_reduce:
      return "all-reduce";
    case Pattern::reduce_scatter:
      return "reduce-scatter";
    case Pattern::all_gather:
      return "all-gather";
    case Pattern::reduce:
      return "reduce";
    case Pattern::broadcast:
      return "broadcast";
    case Pattern::gather:
      return "gather";
    case Pattern::scatter:
      return "scatter";
    case Pattern::all_to_all:
      return "all-to-all";
    case Pattern::send_recv:
      return "send-recv";
  }
  return "?";
}

Pattern parse_pattern(std::string_view name) {
  std::string s;  // lower case, without '_', '-' and ' ': "all_reduce" == "AllReduce"
  for (char c : name)
    if (c != '_' && c != '-' && c != ' ')
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (Pattern p : {Pattern::all_reduce, Pattern::reduce_scatter, Pattern::all_gather,
                    Pattern::reduce, Pattern::broadcast, Pattern::gather, Pattern::scatter,
                    Pattern::all_to_all, Pattern::send_recv}) {
    std::string n;
    for (const char* c = to_string(p); *c; ++c)
      if (*c != '-') n += *c;
    if (s == n) return p;
  }
  return Pattern::unknown;
}

double bus_factor(Pattern p, int ranks) {
  if (ranks < 1) return 0;
  const double n = ranks;
  switch (p) {
    case Pattern::all_reduce:
      return 2 * (n - 1) / n;
    case Pattern::reduce_scatter:
    case Pattern::all_gather:
    case Pattern::gather:
    case Pattern::scatter:
    case Pattern::all_to_all:
      return (n - 1) / n;
    case Pattern::reduce:
    case Pattern::broadcast:
    case Pattern::send_recv:  // nccl-tests' sendrecv: busbw = algbw
      return 1;
    case Pattern::unknown:
      return 0;
  }
  return 0;
}

namespace {

// How the chunks of a buffer state are spread over the ranks.
struct Spread {
  int ranks_with_all = 0;       // ranks that hold (or complete) every chunk
  int ranks_with_some = 0;      // ranks that hold (or complete) at least one chunk
  bool each_chunk_once = true;  // every chunk on exactly one rank
};

template <class Has>
Spread spread(const BufferState& b, int ranks, Has has) {
  Spread s;
  std::vector<int> owners(static_cast<std::size_t>(b.chunks), 0);
  for (int r = 0; r < ranks; ++r) {
    int n = 0;
    for (int c = 0; c < b.chunks; ++c)
      if (has(b.at(r, c))) ++n, ++owners[c];
    s.ranks_with_all += n == b.chunks;
    s.ranks_with_some += n > 0;
  }
  for (int o : owners) s.each_chunk_once = s.each_chunk_once && o == 1;
  return s;
}

}  // namespace

Pattern classify_buffer(const BufferState& before, const BufferState& after, bool reduced,
                        int ranks) {
  if (ranks < 2 || after.chunks < 1 || before.chunks != after.chunks) return Pattern::unknown;
  const auto cells = static_cast<std::size_t>(ranks) * after.chunks;
  if (before.cells.size() < cells || after.cells.size() < cells) return Pattern::unknown;
  if (reduced) {
    const auto complete = [ranks](const ChunkState& c) { return c.held && c.count >= ranks; };
    const Spread end = spread(after, ranks, complete);
    if (end.ranks_with_all == ranks) return Pattern::all_reduce;
    if (end.ranks_with_all == 1 && end.ranks_with_some == 1) return Pattern::reduce;
    if (end.each_chunk_once && end.ranks_with_some == ranks) return Pattern::reduce_scatter;
    return Pattern::unknown;
  }
  const auto held = [](const ChunkState& c) { return c.held; };
  const Spread start = spread(before, ranks, held), end = spread(after, ranks, held);
  const bool one_root = start.ranks_with_all == 1 && start.ranks_with_some == 1;
  const bool pieces = start.each_chunk_once && start.ranks_with_some == ranks;
  if (end.ranks_with_all == ranks)
    return one_root ? Pattern::broadcast : pieces ? Pattern::all_gather : Pattern::unknown;
  if (end.ranks_with_all == 1 && pieces) return Pattern::gather;
  if (one_root && end.ranks_with_some == ranks) return Pattern::scatter;
  return Pattern::unknown;
}

// ---- operations -----------------------------------------------------------------------------

std::vector<OperationStats> operation_stats(const TraceModel& model, const CostModel& cost) {
  const auto& buffers = model.info.buffers;
  const int ranks = model.world_size();
  struct Acc {
    OperationStats op;
    bool reduced = false;
    double t0 = 0, t1 = 0;
    double chunk_bytes = 0;  // the largest bytes per chunk any message carried
  };
  std::vector<Acc> acc(buffers.size());
  std::map<std::string_view, std::size_t> index;
  for (std::size_t b = 0; b < buffers.size(); ++b) index.emplace(buffers[b].name, b);
  for (const Message& m : model.messages) {
    const auto it = m.buffer ? index.find(model.str(m.buffer)) : index.end();
    if (it == index.end()) continue;
    Acc& a = acc[it->second];
    OperationStats& op = a.op;
    if (op.messages == 0 || m.send_time < a.t0) a.t0 = m.send_time;
    if (op.messages == 0 || m.arrival > a.t1) a.t1 = m.arrival;
    ++op.messages;
    op.bytes_moved += std::max<std::int64_t>(0, m.bytes);
    if (m.step >= 0) {
      op.first_step = op.first_step < 0 ? m.step : std::min(op.first_step, m.step);
      op.last_step = std::max(op.last_step, m.step);
    }
    a.reduced = a.reduced || m.apply == ApplyKind::reduce;
    if (m.bytes > 0) {
      const int chunks = m.chunk >= 0 && m.chunk_end > m.chunk ? m.chunk_end - m.chunk
                                                               : buffers[it->second].chunks;
      a.chunk_bytes = std::max(a.chunk_bytes, static_cast<double>(m.bytes) / std::max(chunks, 1));
    }
  }

  // Each buffer's messages change only that buffer, so the state at step 0 is every buffer's
  // state before its first message, and the final state every buffer's after its last.
  const ShardState start = state_at_step(model, 0), end = state_at_step(model, model.max_step());
  std::vector<OperationStats> out;
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    Acc& a = acc[b];
    if (a.op.messages == 0) continue;
    OperationStats op = std::move(a.op);
    op.name = buffers[b].name;
    if (b < start.buffers.size() && b < end.buffers.size())
      op.pattern = classify_buffer(start.buffers[b], end.buffers[b], a.reduced, ranks);
    op.bytes = a.chunk_bytes * buffers[b].chunks;
    op.measured_s = (a.t1 - a.t0) * 1e-6;
    op.measured_from_trace = true;
    if (const AlgorithmCost* c = cost.find(op.name)) {  // the lesson's own numbers win
      if (cost.bytes > 0) op.bytes = cost.bytes;
      if (parse_pattern(cost.collective) != Pattern::unknown)
        op.pattern = parse_pattern(cost.collective);
      if (c->measured_s > 0) op.measured_s = c->measured_s, op.measured_from_trace = false;
      op.predicted_s = c->predicted_s;
    }
    out.push_back(std::move(op));
  }
  for (const AlgorithmCost& c : cost.algorithms) {
    const bool matched = std::any_of(out.begin(), out.end(),
                                     [&](const OperationStats& o) { return o.name == c.name; });
    if (matched) continue;
    OperationStats op;
    op.name = c.name;
    op.pattern = parse_pattern(cost.collective);
    op.bytes = cost.bytes;
    op.measured_s = c.measured_s;
    op.predicted_s = c.predicted_s;
    out.push_back(std::move(op));
  }
  return out;
}

std::string format_bandwidth(double bytes_per_s) {
  if (bytes_per_s < 0) return "";
  const char* units[] = {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"};
  int u = 0;
  while (bytes_per_s >= 1000.0 && u < 4) bytes_per_s /= 1000.0, ++u;
  return fmt::format("{:.{}f} {}", bytes_per_s, bytes_per_s < 10 ? 2 : (bytes_per_s < 100 ? 1 : 0),
                     units[u]);
}

}  // namespace distlab::viewer
