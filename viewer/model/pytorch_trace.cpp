// pytorch_trace.cpp — a run of PyTorch profiler traces, one per rank (pytorch_trace.hpp).
//
// Sections:
//   1. names: collectives and dtypes
//   2. merge: each rank's file into one model
//   3. collectives: found per rank, matched per group, sized
//   4. clocks: offsets, shift, steps
//   5. parse_trace_set / load_trace_set / trace_files
#include "viewer/model/pytorch_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "core/base/check.hpp"
#include "viewer/model/stats.hpp"

namespace distlab::viewer {

// ---- 1. names -------------------------------------------------------------------------------

namespace {

std::string lower(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool strip_suffix(std::string& s, std::string_view suffix) {
  if (s.size() <= suffix.size() || !std::string_view(s).ends_with(suffix)) return false;
  s.resize(s.size() - suffix.size());
  return true;
}

}  // namespace

std::string canonical_collective(std::string_view name) {
  std::string s = lower(name);
  while (!s.empty() && s.front() == '_') s.erase(s.begin());
  while (!s.empty() && s.back() == '_') s.pop_back();
  // PyTorch's variants of one collective: _allgather_base, all_gather_into_tensor,
  // reduce_scatter_tensor, allreduce_coalesced, alltoall_base, all_to_allv.
  for (bool again = true; again;)
    again = strip_suffix(s, "_base") || strip_suffix(s, "_into_tensor") ||
            strip_suffix(s, "_tensor") || strip_suffix(s, "_coalesced");
  std::string squeezed;
  for (char c : s)
    if (c != '_' && c != '-' && c != ' ') squeezed += c;
  if (squeezed == "alltoallv" || squeezed == "alltoallsingle") return "all-to-all";
  const Pattern p = parse_pattern(squeezed);
  return p != Pattern::unknown ? to_string(p) : squeezed;
}

int dtype_bytes(std::string_view dtype) {
  std::string d = lower(dtype);
  if (d.starts_with("c10::")) d = d.substr(5);
  if (d.starts_with("torch.")) d = d.substr(6);
  static const std::map<std::string, int, std::less<>> sizes = {
      {"float", 4},  {"float32", 4}, {"half", 2},  {"float16", 2},       {"bfloat16", 2},
      {"double", 8}, {"float64", 8}, {"long", 8},  {"int64", 8},         {"int", 4},
      {"int32", 4},  {"short", 2},   {"int16", 2}, {"char", 1},          {"int8", 1},
      {"byte", 1},   {"uint8", 1},   {"bool", 1},  {"float8_e4m3fn", 1}, {"float8_e5m2", 1}};
  auto it = sizes.find(d);
  return it != sizes.end() ? it->second : 0;
}

namespace {

// ---- 2. merge -------------------------------------------------------------------------------

// Appends `part` (one rank's file, parse_rank_file) to `run` as rank `rank`.
// The run's string table index of `s`, added when new; `ids` indexes the table.
using StringIds = std::unordered_map<std::string, std::uint32_t>;
std::uint32_t intern(TraceModel& run, StringIds& ids, std::string_view s) {
  if (s.empty()) return 0;
  auto [it, fresh] =
      ids.try_emplace(std::string(s), static_cast<std::uint32_t>(run.strings.size()));
  if (fresh) run.strings.emplace_back(s);
  return it->second;
}

void append_rank(TraceModel& run, TraceModel&& part, int rank, const std::string& label,
                 StringIds& ids) {
  std::vector<std::uint32_t> map(part.strings.size());
  for (std::size_t i = 0; i < part.strings.size(); ++i) map[i] = intern(run, ids, part.strings[i]);

  Rank& r = run.ranks[static_cast<std::size_t>(rank)];
  r.pid = rank + 1;
  r.sort_index = rank;
  r.name = fmt::format("rank {} ({})", rank, label);
  const auto lane0 = static_cast<std::uint32_t>(run.lanes.size());
  const auto span0 = static_cast<std::uint32_t>(run.spans.size());
  const auto args0 = static_cast<std::int32_t>(run.span_args.size());
  for (Lane l : part.lanes) {
    l.rank = rank;
    l.span_begin += span0;
    l.span_end += span0;
    r.lanes.push_back(static_cast<std::uint32_t>(run.lanes.size()));
    run.lanes.push_back(std::move(l));
  }
  run.spans.insert(run.spans.end(), part.spans.begin(), part.spans.end());
  for (auto s = run.spans.begin() + span0; s != run.spans.end(); ++s) {
    s->lane += lane0;
    s->name = map[s->name];
    if (s->args >= 0) s->args += args0;
  }
  run.span_args.insert(run.span_args.end(), part.span_args.begin(), part.span_args.end());
  for (auto a = run.span_args.begin() + args0; a != run.span_args.end(); ++a)
    for (std::uint32_t* field :
         {&a->buffer, &a->group, &a->op, &a->text, &a->collective, &a->dtype})
      *field = map[*field];
  run.events += part.events;  // the extent comes after alignment (align_clocks)
  part = TraceModel{};        // its memory back before the next rank's is copied
}

// The rank each file names in its distributedInfo, when every file names a different one of
// 0 .. n-1; else nothing (the order given decides).
std::optional<std::vector<int>> ranks_from_files(const std::vector<TraceModel>& parts) {
  const int n = static_cast<int>(parts.size());
  std::vector<int> rank(parts.size());
  std::vector<bool> taken(parts.size(), false);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string_view text = parts[i].info.extra_json("rank");
    if (text.empty()) return std::nullopt;
    const int r = std::atoi(std::string(text).c_str());
    if (r < 0 || r >= n || taken[static_cast<std::size_t>(r)]) return std::nullopt;
    taken[static_cast<std::size_t>(r)] = true;
    rank[i] = r;
  }
  return rank;
}

// ---- 3. collectives -------------------------------------------------------------------------

enum class Source { nccl_kernel = 0, gloo = 1, param_comms = 2, c10d = 3, none = 4 };

const char* source_name(Source s) {
  switch (s) {
    case Source::nccl_kernel:
      return "NCCL kernels";
    case Source::gloo:
      return "gloo's spans";
    case Source::param_comms:
      return "record_param_comms";
    case Source::c10d:
      return "c10d's ops";
    case Source::none:
      break;
  }
  return "none";
}

// What a span is as a collective: its source and the collective's own name ("" when none).
struct Found {
  Source source = Source::none;
  std::string collective;
};

bool is_point_to_point(const std::string& c) {
  return c == "send" || c == "recv" || c == "sendrecv" || c == "recvanysource";
}

Found classify(const TraceModel& m, const Span& s) {
  const std::string_view name = m.str(s.name);
  const SpanArgs* a = m.args(s);
  const std::string_view from_args = a ? m.str(a->collective) : std::string_view{};
  Found f;
  if (name.starts_with("ncclDevKernel_") || name.starts_with("ncclKernel_")) {
    f.source = Source::nccl_kernel;
    std::string_view rest = name.substr(name.find('_') + 1);  // AllReduce_Sum_f32_RING_LL(...)
    rest = rest.substr(0, rest.find_first_of("_("));
    f.collective = canonical_collective(from_args.empty() ? rest : from_args);
  } else if (name.starts_with("gloo:")) {
    f.source = Source::gloo;
    f.collective = canonical_collective(name.substr(5));
  } else if (name == "record_param_comms" && !from_args.empty()) {
    f.source = Source::param_comms;
    f.collective = canonical_collective(from_args);
  } else if (name.starts_with("c10d::")) {
    const std::string c = canonical_collective(name.substr(6));
    if (c.find('-') != std::string::npos || c == "broadcast" || c == "reduce" || c == "barrier" ||
        c == "gather" || c == "scatter" || is_point_to_point(c)) {
      f.source = Source::c10d;
      f.collective = c;
    }
  }
  // Point-to-point calls stay spans; a collective without a name is no call.
  if (is_point_to_point(f.collective) || f.collective.empty()) f.source = Source::none;
  return f;
}

struct RankCall {
  std::int32_t span;
  std::uint32_t name, group;
};

// Per rank, its collective spans from its best source, by start; and its record_param_comms
// spans (they may give the sizes another source lacks).
struct RankCalls {
  std::vector<RankCall> calls, param_comms;
  Source source = Source::none;
};

RankCalls find_rank_calls(TraceModel& m, int rank, StringIds& ids) {
  std::vector<std::pair<Source, RankCall>> all;
  RankCalls out;
  for (std::uint32_t lane : m.ranks[static_cast<std::size_t>(rank)].lanes)
    for (std::uint32_t i = m.lanes[lane].span_begin; i < m.lanes[lane].span_end; ++i) {
      const Found f = classify(m, m.spans[i]);
      if (f.source == Source::none) continue;
      const SpanArgs* a = m.args(m.spans[i]);
      const RankCall call{static_cast<std::int32_t>(i), intern(m, ids, f.collective),
                          a ? a->group : 0};
      all.push_back({f.source, call});
      out.source = std::min(out.source, f.source);
      if (f.source == Source::param_comms) out.param_comms.push_back(call);
    }
  for (const auto& [source, call] : all)
    if (source == out.source) out.calls.push_back(call);
  auto by_start = [&](const RankCall& x, const RankCall& y) {
    return m.spans[x.span].start < m.spans[y.span].start;
  };
  std::stable_sort(out.calls.begin(), out.calls.end(), by_start);
  std::stable_sort(out.param_comms.begin(), out.param_comms.end(), by_start);
  return out;
}

// S in bytes from a span's args (pytorch_trace.hpp "sizes"), -1 when they do not say.
std::int64_t message_bytes(const TraceModel& m, const SpanArgs& a, const std::string& collective,
                           int group_size) {
  const int element = dtype_bytes(m.str(a.dtype));
  if (element == 0) return -1;
  // x * y, or -1 when either is negative or the product does not fit (a file's nonsense).
  auto times = [](std::int64_t x, std::int64_t y) -> std::int64_t {
    std::int64_t p = 0;
    return x < 0 || y < 0 || __builtin_mul_overflow(x, y, &p) ? -1 : p;
  };
  std::int64_t elems = a.in_elems;
  if (collective == "all-gather")
    elems = a.out_elems >= 0 ? a.out_elems : times(a.in_elems, group_size);
  else if (collective == "reduce-scatter" && elems < 0)
    elems = times(a.out_elems, group_size);
  return times(elems, element);
}

// Matches every rank's calls per group, by order (pytorch_trace.hpp "matching" and "sizes").
void match_collectives(TraceModel& m, const std::vector<RankCalls>& ranks) {
  const int n = m.world_size();
  std::map<std::uint32_t, std::vector<std::vector<RankCall>>> groups;  // group -> per rank
  for (int r = 0; r < n; ++r)
    for (const RankCall& c : ranks[static_cast<std::size_t>(r)].calls) {
      auto& per_rank = groups[c.group];
      per_rank.resize(static_cast<std::size_t>(n));
      per_rank[static_cast<std::size_t>(r)].push_back(c);
    }
  for (const auto& [group, per_rank] : groups) {
    std::size_t calls = 0;
    for (const auto& list : per_rank) calls = std::max(calls, list.size());
    for (std::size_t k = 0; k < calls; ++k) {
      CollectiveCall call;
      call.group = group;
      call.index = static_cast<int>(k);
      call.spans.assign(static_cast<std::size_t>(n), -1);
      for (int r = 0; r < n; ++r) {
        const auto& list = per_rank[static_cast<std::size_t>(r)];
        if (k >= list.size()) continue;
        const RankCall& c = list[k];
        call.spans[static_cast<std::size_t>(r)] = c.span;
        if (call.group_size == 0)
          call.name = c.name;
        else if (c.name != call.name)
          call.names_agree = false;
        ++call.group_size;
      }
      m.collectives.push_back(std::move(call));
    }
  }
  // Sizes: the call's own args, else the rank's record_param_comms of the same group and order.
  for (CollectiveCall& call : m.collectives) {
    const std::string collective(m.str(call.name));
    for (int r = 0; r < n && call.bytes < 0; ++r) {
      const std::int32_t i = call.spans[static_cast<std::size_t>(r)];
      if (i < 0) continue;
      const SpanArgs* a = m.args(m.spans[static_cast<std::size_t>(i)]);
      int group_size = a && a->group_size > 0 ? a->group_size : call.group_size;
      if (a && (a->in_elems >= 0 || a->out_elems >= 0)) {
        call.bytes = message_bytes(m, *a, collective, group_size);
        continue;
      }
      int k = 0;  // the call's order among the rank's param_comms of its group
      for (const RankCall& p : ranks[static_cast<std::size_t>(r)].param_comms) {
        if (p.group != call.group) continue;
        if (k++ != call.index) continue;
        const SpanArgs* pa = m.args(m.spans[static_cast<std::size_t>(p.span)]);
        if (pa && p.name == call.name) {
          group_size = pa->group_size > 0 ? pa->group_size : call.group_size;
          call.bytes = message_bytes(m, *pa, collective, group_size);
        }
        break;
      }
    }
  }
}

// ---- 4. clocks ------------------------------------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// Offsets, the shift, the error and the steps (pytorch_trace.hpp "clocks" and "steps").
void align_clocks(TraceModel& m) {
  const int n = m.world_size();
  m.info.clock_offset_us.assign(static_cast<std::size_t>(n), 0.0);
  bool aligned = n > 0;
  for (int r = 1; r < n; ++r) {
    std::vector<double> d;
    for (const CollectiveCall& c : m.collectives) {
      const std::int32_t a = c.spans[0], b = c.spans[static_cast<std::size_t>(r)];
      if (a >= 0 && b >= 0 && c.names_agree)
        d.push_back(m.spans[static_cast<std::size_t>(a)].end() -
                    m.spans[static_cast<std::size_t>(b)].end());
    }
    if (d.empty())
      aligned = false;
    else
      m.info.clock_offset_us[static_cast<std::size_t>(r)] = median(std::move(d));
  }
  for (Span& s : m.spans)
    s.start += m.info.clock_offset_us[static_cast<std::size_t>(m.lanes[s.lane].rank)];
  if (!m.spans.empty()) {
    m.t_begin = m.spans.front().start, m.t_end = m.spans.front().end();
    for (const Span& s : m.spans)
      m.t_begin = std::min(m.t_begin, s.start), m.t_end = std::max(m.t_end, s.end());
  }
  double error = 0;
  for (const CollectiveCall& c : m.collectives) {
    double lo = INFINITY, hi = -INFINITY;
    for (std::int32_t i : c.spans)
      if (i >= 0)
        lo = std::min(lo, m.spans[static_cast<std::size_t>(i)].end()),
        hi = std::max(hi, m.spans[static_cast<std::size_t>(i)].end());
    if (c.group_size > 1 && c.names_agree) error = std::max(error, hi - lo);
  }
  m.info.clock_error_us = aligned && n > 1 ? error : n == 1 ? 0 : -1;

  // By earliest aligned start; each call is a step.
  std::vector<std::pair<double, std::size_t>> order;  // (earliest start, call)
  for (std::size_t k = 0; k < m.collectives.size(); ++k) {
    double t = INFINITY;
    for (std::int32_t i : m.collectives[k].spans)
      if (i >= 0) t = std::min(t, m.spans[static_cast<std::size_t>(i)].start);
    order.push_back({t, k});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<CollectiveCall> sorted;
  m.steps.clear();
  for (const auto& [t, k] : order) {
    sorted.push_back(std::move(m.collectives[k]));
    m.steps.push_back({static_cast<int>(sorted.size()), t});
  }
  m.collectives = std::move(sorted);
}

}  // namespace

// ---- 5. parse / load ------------------------------------------------------------------------

namespace {

TraceModel assemble(std::vector<TraceModel> parts, const std::vector<std::string>& names) {
  TraceModel run;
  const int n = static_cast<int>(parts.size());
  std::vector<int> rank(parts.size());
  if (auto named = ranks_from_files(parts)) {
    rank = *named;
    run.info.rank_origin = "distributedInfo";
  } else {
    for (int i = 0; i < n; ++i) rank[static_cast<std::size_t>(i)] = i;
    run.info.rank_origin = "file order";
  }
  std::vector<int> file_of(parts.size());
  for (int i = 0; i < n; ++i)
    file_of[static_cast<std::size_t>(rank[static_cast<std::size_t>(i)])] = i;

  run.info.source = "pytorch";
  run.info.world_size = n;
  run.info.title = fmt::format("PyTorch profiler trace, {} rank{}", n, n == 1 ? "" : "s");
  run.ranks.resize(parts.size());
  run.info.rank_files.resize(parts.size());
  StringIds ids;
  std::size_t spans = 0, args = 0;
  for (const TraceModel& part : parts) spans += part.spans.size(), args += part.span_args.size();
  run.spans.reserve(spans);
  run.span_args.reserve(args);
  for (int r = 0; r < n; ++r) {
    const std::size_t i = static_cast<std::size_t>(file_of[static_cast<std::size_t>(r)]);
    if (parts[i].info.distlab)
      throw Error(
          fmt::format("{} is a distlab trace, not a PyTorch profiler trace; open it on its "
                      "own, not in a run of one trace per rank",
                      names[i]));
    const std::string label = std::filesystem::path(names[i]).filename().string();
    run.info.rank_files[static_cast<std::size_t>(r)] = names[i];
    if (run.info.mode.empty()) run.info.mode = std::string(parts[i].info.extra_json("backend"));
    append_rank(run, std::move(parts[i]), r, label, ids);
  }

  std::vector<RankCalls> calls;
  Source source = Source::none;
  for (int r = 0; r < n; ++r) {
    calls.push_back(find_rank_calls(run, r, ids));
    source = std::min(source, calls.back().source);
  }
  if (run.info.mode.empty() && source == Source::gloo) run.info.mode = "gloo";
  run.info.extra["collectives_from"] = fmt::format("\"{}\"", source_name(source));
  match_collectives(run, calls);
  align_clocks(run);
  run.info.steps = static_cast<std::int64_t>(run.collectives.size());
  run.memory.resize(run.ranks.size());
  index_steps(run);
  return run;
}

std::string file_label(const std::vector<std::string>& names, std::size_t i) {
  return i < names.size() ? names[i] : fmt::format("file {}", i + 1);
}

}  // namespace

TraceModel parse_trace_set(const std::vector<std::string_view>& texts,
                           const std::vector<std::string>& names) {
  if (texts.empty()) throw Error("no trace given; a run is one PyTorch profiler trace per rank");
  std::vector<TraceModel> parts;
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    labels.push_back(file_label(names, i));
    try {
      parts.push_back(parse_rank_file(texts[i]));
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", labels.back(), e.what()));
    }
  }
  return assemble(std::move(parts), labels);
}

std::vector<std::string> trace_files(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return {path};
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec))
    if (entry.is_regular_file(ec) && entry.path().extension() == ".json")
      files.push_back(entry.path().string());
  // Natural order: runs of digits compare as numbers (rank2.json before rank10.json).
  auto natural_less = [](const std::string& a, const std::string& b) {
    std::size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
      if (std::isdigit(static_cast<unsigned char>(a[i])) &&
          std::isdigit(static_cast<unsigned char>(b[j]))) {
        std::size_t ie = i, je = j;
        while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
        while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
        const std::string x = a.substr(i, ie - i), y = b.substr(j, je - j);
        const std::size_t xz = x.find_first_not_of('0'), yz = y.find_first_not_of('0');
        const std::string_view xs = xz == std::string::npos ? "" : std::string_view(x).substr(xz);
        const std::string_view ys = yz == std::string::npos ? "" : std::string_view(y).substr(yz);
        if (xs.size() != ys.size()) return xs.size() < ys.size();
        if (xs != ys) return xs < ys;
        i = ie, j = je;
      } else {
        if (a[i] != b[j]) return a[i] < b[j];
        ++i, ++j;
      }
    }
    return a.size() - i < b.size() - j;
  };
  std::sort(files.begin(), files.end(), natural_less);
  if (files.empty()) throw Error(fmt::format("{} is a folder with no .json trace in it", path));
  return files;
}

std::vector<std::vector<std::string>> group_trace_args(const std::vector<std::string>& paths) {
  std::vector<std::vector<std::string>> groups;
  std::vector<std::string> run;  // PyTorch files given one after another
  auto flush = [&] {
    if (!run.empty()) groups.push_back(std::move(run));
    run.clear();
  };
  for (const std::string& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      flush();
      std::vector<std::string> files;
      try {
        files = trace_files(p);
      } catch (const Error&) {
        groups.push_back({p});  // loading it says why
        continue;
      }
      if (file_looks_like_pytorch(files.front())) {
        groups.push_back({p});
      } else {
        for (auto& f : files) groups.push_back({std::move(f)});
      }
    } else if (file_looks_like_pytorch(p)) {
      run.push_back(p);
    } else {
      flush();
      groups.push_back({p});
    }
  }
  flush();
  return groups;
}

TraceModel load_trace_set(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths)
    for (auto& f : trace_files(p)) files.push_back(std::move(f));
  if (files.empty()) throw Error("no trace given; a run is one PyTorch profiler trace per rank");
  // The files load side by side, one per core: each is a model of its own until assemble().
  std::vector<TraceModel> parts(files.size());
  std::vector<std::exception_ptr> errors(files.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next++) < files.size();) try {
        parts[i] = load_rank_file(files[i]);  // names the file on error
      } catch (...) {
        errors[i] = std::current_exception();
      }
  };
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> helpers;
  for (std::size_t w = 1; w < std::min(cores, files.size()); ++w) helpers.emplace_back(work);
  work();
  for (auto& t : helpers) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);  // the first file, in order, that did not load
  return assemble(std::move(parts), files);
}

}  // namespace distlab::viewer
