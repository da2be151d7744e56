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
#include "viewer/model/call_align.hpp"
#include "viewer/model/stats.hpp"
#include "viewer/model/torch_calls.hpp"

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

const char* to_string(Absence a) {
  switch (a) {
    case Absence::present:
      return "present";
    case Absence::not_member:
      return "not in the group";
    case Absence::outside_window:
      return "not in the rank's window";
    case Absence::dropped:
      return "missing from the rank's trace (it called the group's later collectives)";
    case Absence::not_called:
      return "never called while the rank's trace runs on: a hang would start here";
  }
  return "?";
}

int CollectiveCall::missing(Absence why) const {
  return static_cast<int>(std::count(absent.begin(), absent.end(), why));
}

int dtype_bytes(std::string_view dtype) {
  std::string d = lower(dtype);
  if (d.starts_with("torch.")) d = d.substr(6);
  // Two spellings reach a trace: c10::toString(ScalarType) in comms args ("Float", "Half",
  // "BFloat16", "Long": c10/core/ScalarType.h's list), and the C++ type's name in record_shapes'
  // Input type ("float", "c10::Half", "c10::BFloat16", "long int", "signed char": caffe2's
  // TypeMeta, as the compiler spells the type); torch.float32 and the like as Python prints them.
  static const std::map<std::string, int, std::less<>> sizes = {
      // c10::ScalarType
      {"byte", 1},
      {"char", 1},
      {"short", 2},
      {"int", 4},
      {"long", 8},
      {"half", 2},
      {"float", 4},
      {"double", 8},
      {"complexhalf", 4},
      {"complexfloat", 8},
      {"complexdouble", 16},
      {"bool", 1},
      {"qint8", 1},
      {"quint8", 1},
      {"qint32", 4},
      {"bfloat16", 2},
      {"quint4x2", 1},
      {"quint2x4", 1},
      {"bits1x8", 1},
      {"bits2x4", 1},
      {"bits4x2", 1},
      {"bits8", 1},
      {"bits16", 2},
      {"float8_e5m2", 1},
      {"float8_e4m3fn", 1},
      {"float8_e5m2fnuz", 1},
      {"float8_e4m3fnuz", 1},
      {"uint16", 2},
      {"uint32", 4},
      {"uint64", 8},
      {"float8_e8m0fnu", 1},
      {"float4_e2m1fn_x2", 1},
      // the C++ types' names (TypeMeta), without "c10::"
      {"long int", 8},
      {"long long int", 8},
      {"long long", 8},
      {"short int", 2},
      {"signed char", 1},
      {"unsigned char", 1},
      {"unsigned short", 2},
      {"short unsigned int", 2},
      {"unsigned int", 4},
      {"long unsigned int", 8},
      {"unsigned long", 8},
      {"complex<float>", 8},
      {"complex<double>", 16},
      {"complex<c10::half>", 4},
      // torch.* dtypes
      {"float32", 4},
      {"float16", 2},
      {"float64", 8},
      {"int64", 8},
      {"int32", 4},
      {"int16", 2},
      {"int8", 1},
      {"uint8", 1},
      {"complex32", 4},
      {"complex64", 8},
      {"complex128", 16},
      {"cfloat", 8},
      {"cdouble", 16}};
  auto it = sizes.find(d);
  if (it == sizes.end() && d.starts_with("c10::")) it = sizes.find(std::string_view(d).substr(5));
  return it != sizes.end() ? it->second : 0;
}

namespace {

// ---- 2. merge -------------------------------------------------------------------------------

// Appends `part` (one rank's file, parse_rank_file) to `run` as rank `rank`.
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
  const auto torch0 = static_cast<std::int32_t>(run.torch_args.size());
  run.span_args.insert(run.span_args.end(), part.span_args.begin(), part.span_args.end());
  for (auto a = run.span_args.begin() + args0; a != run.span_args.end(); ++a) {
    for (std::uint32_t* field :
         {&a->buffer, &a->group, &a->op, &a->text, &a->collective, &a->dtype})
      *field = map[*field];
    if (a->torch >= 0) a->torch += torch0;
  }
  for (TorchArgs& t : part.torch_args) {
    for (std::uint32_t* field : {&t.group_ranks, &t.in_split, &t.out_split}) *field = map[*field];
    for (std::uint32_t& type : t.types) type = map[type];
    run.torch_args.push_back(std::move(t));
  }
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

// The files' base times (Kineto's baseTimeNanoseconds), in microseconds after rank 0's: each
// file's ts counts from its own base. 0 where a file gives none.
std::vector<double> base_times(const TraceModel& m, const std::vector<std::string>& bases) {
  std::vector<double> out(static_cast<std::size_t>(m.world_size()), 0.0);
  auto ns = [](const std::string& text) -> long long {
    return text.empty() ? 0 : std::strtoll(text.c_str(), nullptr, 10);
  };
  for (std::size_t r = 0; r < out.size() && r < bases.size(); ++r)
    out[r] = static_cast<double>(ns(bases[r]) - ns(bases[0])) / 1000.0;
  return out;
}

// One call across the ranks while it is being matched.
struct Entry {
  AlignCall token;        // on the reference rank's clock
  std::vector<int> call;  // per rank: index into its calls, -1 none
};

struct Matcher {
  TraceModel& m;
  StringIds& ids;
  const std::vector<RankTorchCalls>& ranks;
  std::vector<double> base;  // base_times

  int n() const { return m.world_size(); }
  const TorchCall& call(int r, int k) const {
    return ranks[static_cast<std::size_t>(r)].calls[static_cast<std::size_t>(k)];
  }
  AlignCall token(int r, int k, std::uint32_t name) const {
    const TorchCall& c = call(r, k);
    return {name, c.bytes, c.seq, c.end_time};
  }

  // Whether rank r's trace covers time t (its own clock), within `room`.
  bool covers(int r, double t, double room) const {
    const RankTorchCalls& rc = ranks[static_cast<std::size_t>(r)];
    return t >= rc.window_begin - room && t <= rc.window_end + room;
  }

  // The matched calls of one sequence: entries in order, `offset[r]` rank r's clock to the
  // reference's (t_ref = t_r + offset), `members` the ranks that belong (pytorch_trace.hpp).
  void emit(std::uint32_t group, std::vector<Entry>& entries, const std::vector<double>& offset,
            const std::vector<bool>& members, std::uint32_t name_override) {
    const int N = n();
    // Per rank, the last entry it shares with another rank: a rank that made a collective with
    // the others after an entry went on past it (a rank stuck in a hang makes none); one it
    // made alone proves nothing.
    std::vector<int> last(static_cast<std::size_t>(N), -1);
    for (std::size_t e = 0; e < entries.size(); ++e) {
      const int present = static_cast<int>(std::count_if(
          entries[e].call.begin(), entries[e].call.end(), [](int k) { return k >= 0; }));
      for (int r = 0; r < N; ++r)
        if (entries[e].call[static_cast<std::size_t>(r)] >= 0 && present >= 2)
          last[static_cast<std::size_t>(r)] = static_cast<int>(e);
    }
    int index = 0;
    for (std::size_t e = 0; e < entries.size(); ++e) {
      const Entry& en = entries[e];
      CollectiveCall c;
      c.group = group;
      c.index = index++;
      c.spans.assign(static_cast<std::size_t>(N), -1);
      c.cpu_spans.assign(static_cast<std::size_t>(N), -1);
      c.absent.assign(static_cast<std::size_t>(N), Absence::not_member);
      c.name = name_override;
      double longest = 0;
      for (int r = 0; r < N; ++r) {
        const int k = en.call[static_cast<std::size_t>(r)];
        if (k < 0) continue;
        const TorchCall& t = call(r, k);
        c.spans[static_cast<std::size_t>(r)] = t.timed();
        c.cpu_spans[static_cast<std::size_t>(r)] = t.cpu;
        c.absent[static_cast<std::size_t>(r)] = Absence::present;
        ++c.present;
        if (!c.name) c.name = t.name;
        if (c.bytes < 0 && t.bytes >= 0) c.bytes = t.bytes, c.size_from = t.size_from;
        if (c.group_size <= 0 && t.group_size > 0)
          c.group_size = t.group_size, c.group_size_from = t.group_size_from;
        if (c.seq < 0) c.seq = t.seq;
        if (!c.splits) c.splits = t.splits;
        if (!c.phase || m.str(c.phase) == "other") c.phase = t.phase;
        if (c.profiler_step < 0) c.profiler_step = t.step;
        if (t.device < 0 && ranks[static_cast<std::size_t>(r)].has_kernels) ++c.no_kernel;
        longest = std::max(longest, t.end_time - t.start_time);
      }
      if (c.group_size <= 0) c.group_size = c.present;
      for (int r = 0; r < N; ++r) {
        if (c.absent[static_cast<std::size_t>(r)] == Absence::present ||
            !members[static_cast<std::size_t>(r)])
          continue;
        const double t = en.token.time - offset[static_cast<std::size_t>(r)];  // on r's clock
        if (!covers(r, t, 0))
          c.absent[static_cast<std::size_t>(r)] = Absence::outside_window;
        else if (last[static_cast<std::size_t>(r)] > static_cast<int>(e))
          c.absent[static_cast<std::size_t>(r)] = Absence::dropped;
        else if (covers(r, t + longest + 1.0, 0))
          c.absent[static_cast<std::size_t>(r)] = Absence::not_called;
        else
          c.absent[static_cast<std::size_t>(r)] = Absence::outside_window;
      }
      m.collectives.push_back(std::move(c));
    }
  }

  // A group's collectives: every member's calls aligned against the merged sequence so far.
  void match_group(std::uint32_t group, const std::vector<std::vector<int>>& per_rank,
                   const std::vector<int>& listed) {
    const int N = n();
    std::vector<bool> members(static_cast<std::size_t>(N), false);
    int ref = -1;
    for (int r = 0; r < N; ++r)
      if (!per_rank[static_cast<std::size_t>(r)].empty()) {
        members[static_cast<std::size_t>(r)] = true;
        if (ref < 0 || per_rank[static_cast<std::size_t>(r)].size() >
                           per_rank[static_cast<std::size_t>(ref)].size())
          ref = r;
      }
    for (int r : listed)
      if (r >= 0 && r < N) members[static_cast<std::size_t>(r)] = true;
    if (ref < 0) return;
    std::vector<double> offset(static_cast<std::size_t>(N), 0.0);
    for (int r = 0; r < N; ++r)
      offset[static_cast<std::size_t>(r)] =
          base[static_cast<std::size_t>(r)] - base[static_cast<std::size_t>(ref)];
    std::vector<Entry> merged;
    for (int k : per_rank[static_cast<std::size_t>(ref)]) {
      Entry e;
      e.token = token(ref, k, call(ref, k).name);
      e.call.assign(static_cast<std::size_t>(N), -1);
      e.call[static_cast<std::size_t>(ref)] = k;
      merged.push_back(std::move(e));
    }
    for (int r = 0; r < N; ++r) {
      if (r == ref || per_rank[static_cast<std::size_t>(r)].empty()) continue;
      std::vector<AlignCall> a, b;
      for (const Entry& e : merged) a.push_back(e.token);
      for (int k : per_rank[static_cast<std::size_t>(r)]) b.push_back(token(r, k, call(r, k).name));
      const Alignment al = align_calls(a, b, offset[static_cast<std::size_t>(r)]);
      offset[static_cast<std::size_t>(r)] = al.offset;
      std::vector<Entry> next;
      next.reserve(al.path.size());
      for (const auto& [i, j] : al.path) {
        if (i >= 0) {
          next.push_back(std::move(merged[static_cast<std::size_t>(i)]));
        } else {
          Entry e;
          e.token = b[static_cast<std::size_t>(j)];
          e.token.time += al.offset;
          e.call.assign(static_cast<std::size_t>(N), -1);
          next.push_back(std::move(e));
        }
        if (j >= 0) {
          Entry& e = next.back();
          e.call[static_cast<std::size_t>(r)] =
              per_rank[static_cast<std::size_t>(r)][static_cast<std::size_t>(j)];
          if (e.token.bytes < 0) e.token.bytes = b[static_cast<std::size_t>(j)].bytes;
          if (e.token.seq < 0) e.token.seq = b[static_cast<std::size_t>(j)].seq;
        }
      }
      merged = std::move(next);
    }
    emit(group, merged, offset, members, 0);
  }

  // Point-to-point: rank a's k-th send to b pairs with b's k-th receive from a, aligned as a
  // group's calls are (sizes must agree), so a missing one costs only itself.
  void match_point_to_point(const std::vector<std::pair<int, int>>& sends,
                            const std::vector<std::pair<int, int>>& recvs) {
    const int N = n();
    std::map<std::pair<int, int>, std::pair<std::vector<int>, std::vector<int>>> channels;
    std::vector<std::pair<int, int>> alone;  // (rank, call) with no known peer
    for (const auto& [r, k] : sends) {
      const int p = call(r, k).peer;
      if (p >= 0 && p < N && p != r)
        channels[{r, p}].first.push_back(k);
      else
        alone.push_back({r, k});
    }
    for (const auto& [r, k] : recvs) {
      const int p = call(r, k).peer;
      if (p >= 0 && p < N && p != r)
        channels[{p, r}].second.push_back(k);
      else
        alone.push_back({r, k});
    }
    const std::uint32_t name = intern(m, ids, "send-recv");
    for (auto& [pair, lists] : channels) {
      const auto [src, dst] = pair;
      std::vector<AlignCall> a, b;
      for (int k : lists.first) a.push_back(token(src, k, name));
      for (int k : lists.second) b.push_back(token(dst, k, name));
      const Alignment al = align_calls(
          a, b, base[static_cast<std::size_t>(dst)] - base[static_cast<std::size_t>(src)]);
      std::vector<Entry> entries;
      for (const auto& [i, j] : al.path) {
        Entry e;
        e.call.assign(static_cast<std::size_t>(N), -1);
        e.token = i >= 0 ? a[static_cast<std::size_t>(i)] : b[static_cast<std::size_t>(j)];
        if (i < 0) e.token.time += al.offset;
        if (i >= 0)
          e.call[static_cast<std::size_t>(src)] = lists.first[static_cast<std::size_t>(i)];
        if (j >= 0)
          e.call[static_cast<std::size_t>(dst)] = lists.second[static_cast<std::size_t>(j)];
        entries.push_back(std::move(e));
      }
      std::vector<double> offset(static_cast<std::size_t>(N), 0.0);
      offset[static_cast<std::size_t>(dst)] = al.offset;
      std::vector<bool> members(static_cast<std::size_t>(N), false);
      members[static_cast<std::size_t>(src)] = members[static_cast<std::size_t>(dst)] = true;
      emit(intern(m, ids, fmt::format("{}->{}", src, dst)), entries, offset, members, name);
    }
    for (const auto& [r, k] : alone) {
      std::vector<Entry> one(1);
      one[0].token = token(r, k, call(r, k).name);
      one[0].call.assign(static_cast<std::size_t>(N), -1);
      one[0].call[static_cast<std::size_t>(r)] = k;
      std::vector<bool> members(static_cast<std::size_t>(N), false);
      emit(call(r, k).group, one, std::vector<double>(static_cast<std::size_t>(N), 0.0), members,
           0);
    }
  }

  void run() {
    const int N = n();
    std::map<std::uint32_t, std::vector<std::vector<int>>> groups;  // group -> per rank calls
    std::map<std::uint32_t, std::vector<int>> listed;               // the group's ranks listed
    std::vector<std::pair<int, int>> sends, recvs;
    for (int r = 0; r < N; ++r) {
      const auto& calls = ranks[static_cast<std::size_t>(r)].calls;
      for (int k = 0; k < static_cast<int>(calls.size()); ++k) {
        const TorchCall& c = calls[static_cast<std::size_t>(k)];
        const std::string_view name = m.str(c.name);
        if (name == "send") {
          sends.push_back({r, k});
          continue;
        }
        if (is_point_to_point(name)) {
          recvs.push_back({r, k});
          continue;
        }
        auto& per_rank = groups[c.group];
        per_rank.resize(static_cast<std::size_t>(N));
        per_rank[static_cast<std::size_t>(r)].push_back(k);
        if (!c.group_ranks.empty()) listed[c.group] = c.group_ranks;
      }
    }
    for (const auto& [group, per_rank] : groups) match_group(group, per_rank, listed[group]);
    match_point_to_point(sends, recvs);
  }
};

// ---- 4. clocks ------------------------------------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// Offsets, the shift, the error and the steps (pytorch_trace.hpp "clocks" and "steps").
void align_clocks(TraceModel& m, const std::vector<double>& base) {
  const int n = m.world_size();
  m.info.clock_offset_us = base;
  m.info.clock_offset_us.resize(static_cast<std::size_t>(n), 0.0);
  auto device = [&](std::int32_t span) {
    return is_nccl_kernel(m.str(m.spans[static_cast<std::size_t>(span)].name)) ||
           m.str(m.spans[static_cast<std::size_t>(span)].name).starts_with("gloo:");
  };
  bool aligned = n > 0;
  for (int r = 1; r < n; ++r) {
    // Calls both ran on their devices first (a CPU side ends when the launch returns).
    std::vector<double> on_device, any;
    for (const CollectiveCall& c : m.collectives) {
      const std::int32_t a = c.spans[0], b = c.spans[static_cast<std::size_t>(r)];
      if (a < 0 || b < 0) continue;
      const double d =
          m.spans[static_cast<std::size_t>(a)].end() - m.spans[static_cast<std::size_t>(b)].end();
      any.push_back(d);
      if (device(a) && device(b)) on_device.push_back(d);
    }
    if (any.empty())
      aligned = false;
    else
      m.info.clock_offset_us[static_cast<std::size_t>(r)] =
          median(on_device.empty() ? std::move(any) : std::move(on_device));
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
    if (c.present < 2) continue;
    double lo = INFINITY, hi = -INFINITY;
    bool all_device = true;
    for (std::int32_t i : c.spans)
      if (i >= 0)
        lo = std::min(lo, m.spans[static_cast<std::size_t>(i)].end()),
        hi = std::max(hi, m.spans[static_cast<std::size_t>(i)].end()), all_device &= device(i);
    // A CPU side's end is not the collective's: only calls timed alike on every rank count.
    bool any_device = false;
    for (std::int32_t i : c.spans)
      if (i >= 0 && device(i)) any_device = true;
    if (all_device || !any_device) error = std::max(error, hi - lo);
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
  std::vector<std::string> bases(parts.size());
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
    bases[static_cast<std::size_t>(r)] = std::string(parts[i].info.extra_json("base_time_ns"));
    append_rank(run, std::move(parts[i]), r, label, ids);
  }

  std::vector<RankTorchCalls> calls;
  bool kernels = false, gloo = false, cpu = false;
  for (int r = 0; r < n; ++r) {
    calls.push_back(find_torch_calls(run, r, ids));
    kernels |= calls.back().has_kernels;
    cpu |= calls.back().has_cpu_calls;
    for (const TorchCall& c : calls.back().calls)
      if (c.device >= 0 &&
          run.str(run.spans[static_cast<std::size_t>(c.device)].name).starts_with("gloo:"))
        gloo = true;
  }
  if (run.info.mode.empty() && gloo) run.info.mode = "gloo";
  run.info.extra["collectives_from"] = fmt::format(
      "\"{}\"",
      kernels ? (cpu ? "the CPU side (c10d ops, record_param_comms), timed by their NCCL kernels"
                     : "NCCL kernels")
      : gloo  ? (cpu ? "the CPU side (c10d ops), timed by gloo's spans" : "gloo's spans")
              : "the CPU side (c10d ops, record_param_comms, nccl: annotations)");
  const std::vector<double> base = base_times(run, bases);
  Matcher{run, ids, calls, base}.run();
  align_clocks(run, base);
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

namespace {

// Natural order: runs of digits compare as numbers (rank2.json before rank10.json).
bool natural_less(const std::string& a, const std::string& b) {
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
}

bool is_trace_name(const std::string& name) {
  return name.ends_with(".json") || name.ends_with(".json.gz");
}

// distributedInfo's rank from a file's first bytes; -1 when they hold none.
int head_rank(const std::string& path) {
  const std::string head = file_head_text(path);
  const std::size_t info = head.find("\"distributedInfo\"");
  if (info == std::string::npos) return -1;
  const std::size_t key = head.find("\"rank\"", info);
  if (key == std::string::npos || key > info + 4096) return -1;
  std::size_t p = head.find(':', key);
  if (p == std::string::npos) return -1;
  ++p;
  while (p < head.size() && (head[p] == ' ' || head[p] == '\n')) ++p;
  char* end = nullptr;
  const long r = std::strtol(head.c_str() + p, &end, 10);
  return end != head.c_str() + p && r >= 0 && r < (1 << 20) ? static_cast<int>(r) : -1;
}

}  // namespace

std::vector<std::string> trace_files(const std::string& path, std::string* note) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return {path};
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec))
    if (entry.is_regular_file(ec) && is_trace_name(entry.path().filename().string()))
      files.push_back(entry.path().string());
  std::sort(files.begin(), files.end(), natural_less);
  if (files.empty())
    throw Error(fmt::format("{} is a folder with no .json or .json.gz trace in it", path));
  // Several runs' files (tensorboard_trace_handler writes <worker>.<ms>.pt.trace.json[.gz] each
  // time the profiler's schedule ends a window): the latest file of each rank, by name.
  std::map<int, std::vector<std::string>> by_rank;
  for (const std::string& f : files) {
    const int r = head_rank(f);
    if (r < 0) return files;  // no ranks to tell runs apart by: one run, every file
    by_rank[r].push_back(f);
  }
  std::size_t most = 0;
  for (const auto& [r, list] : by_rank) most = std::max(most, list.size());
  if (most <= 1) return files;
  std::vector<std::string> latest;
  std::string took;
  for (const auto& [r, list] : by_rank) {
    latest.push_back(list.back());
    took += fmt::format("{}{}", took.empty() ? "" : ", ",
                        std::filesystem::path(list.back()).filename().string());
  }
  if (note)
    *note = fmt::format(
        "files: {} holds {} files of several runs (up to {} per rank); took the latest of each "
        "of its {} ranks: {} (give the files to choose others)",
        path, files.size(), most, by_rank.size(), took);
  return latest;
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
  std::string notes;
  for (const auto& p : paths) {
    std::string note;
    for (auto& f : trace_files(p, &note)) files.push_back(std::move(f));
    if (!note.empty()) notes += (notes.empty() ? "" : "\n") + note;
  }
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
  TraceModel run = assemble(std::move(parts), files);
  run.info.files_note = notes;
  return run;
}

}  // namespace distlab::viewer
