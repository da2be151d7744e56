// real_run.cpp — a real run's calls, stragglers and overlap (real_run.hpp).
#include "viewer/model/real_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string_view>

#include "core/base/intervals.hpp"
#include "core/base/units.hpp"
#include "viewer/model/torch_calls.hpp"

namespace distlab::viewer {

namespace {

// Below a nanosecond, the finest time a trace writes (Kineto: ts to 3 decimals of a
// microsecond), two arrivals are the same.
constexpr double kTimeResolutionUs = 1e-3;

bool is_communication(std::string_view name) {
  return name.starts_with("nccl") || name.starts_with("gloo:") || name.starts_with("c10d::") ||
         name == "record_param_comms";
}

// Not computation either (HTA's users found overlap misreported when these counted: HTA PR
// #162): copies, fills and waits, on the GPU (Memcpy HtoD, Memset) or the CPU (cudaMemcpyAsync,
// cudaStreamSynchronize, cudaEventSynchronize, cudaStreamWaitEvent, cudaDeviceSynchronize).
bool is_copy_or_sync(std::string_view name) {
  return name.starts_with("Memcpy") || name.starts_with("Memset") ||
         name.starts_with("cudaMemcpy") || name.starts_with("cudaMemset") ||
         name.find("Synchronize") != std::string_view::npos ||
         name.starts_with("cudaStreamWaitEvent") || name.starts_with("cudaEventSynchronize");
}

// The rank's computation: its lanes' innermost spans that are not communication (real_run.hpp).
Intervals computation(const TraceModel& m, int rank, bool gpu_only) {
  Intervals work;
  for (std::uint32_t l : m.ranks[static_cast<std::size_t>(rank)].lanes) {
    const Lane& lane = m.lanes[l];
    if (gpu_only && !is_gpu_lane(m, lane)) continue;
    for (std::uint32_t i = lane.span_begin; i < lane.span_end; ++i) {
      const Span& s = m.spans[i];
      // Spans are sorted by start, outermost first: s has a child when the next span starts
      // before s ends.
      const bool leaf = i + 1 == lane.span_end || m.spans[i + 1].start >= s.end();
      if (leaf && s.dur > 0 && !is_communication(m.str(s.name)) && !is_copy_or_sync(m.str(s.name)))
        work.push_back({s.start, s.end()});
    }
  }
  return merged(std::move(work));
}

}  // namespace

RealRun analyze_real_run(const TraceModel& m) {
  RealRun run;
  const int n = m.world_size();
  run.present = m.info.source == "pytorch" && !m.collectives.empty();
  run.ranks.resize(static_cast<std::size_t>(n));
  if (!run.present) return run;
  // Computation on the GPU streams when a rank has any.
  for (const Lane& lane : m.lanes)
    if (is_gpu_lane(m, lane)) run.gpu = true;
  std::vector<Intervals> work;
  for (int r = 0; r < n; ++r) work.push_back(computation(m, r, run.gpu));
  std::map<std::string, std::size_t> phase_of;  // name -> run.phases
  std::vector<Intervals> comm(static_cast<std::size_t>(n));
  for (std::size_t k = 0; k < m.collectives.size(); ++k) {
    const CollectiveCall& c = m.collectives[k];
    CallStats s;
    s.call = static_cast<int>(k);
    s.pattern = parse_pattern(m.str(c.name));
    s.arrival.assign(static_cast<std::size_t>(n), -1);
    s.dur.assign(static_cast<std::size_t>(n), -1);
    s.wait.assign(static_cast<std::size_t>(n), -1);
    double last = -INFINITY;
    for (int r = 0; r < n; ++r) {
      const std::int32_t i = c.spans[static_cast<std::size_t>(r)];
      if (i < 0) continue;
      const Span& span = m.spans[static_cast<std::size_t>(i)];
      s.arrival[static_cast<std::size_t>(r)] = span.start;
      s.dur[static_cast<std::size_t>(r)] = span.dur;
      // Its time in the call not under its computation: hidden = the part of [a, b) inside it.
      const Intervals one{{span.start, span.end()}};
      s.exposed_us += span.dur - length(intersection(one, work[static_cast<std::size_t>(r)]));
      comm[static_cast<std::size_t>(r)].push_back({span.start, span.end()});
      RankRunStats& rs = run.ranks[static_cast<std::size_t>(r)];
      ++rs.calls;
      if (span.start > last) last = span.start, s.last_rank = r;
    }
    for (int r = 0; r < n; ++r) {
      const double a = s.arrival[static_cast<std::size_t>(r)];
      if (c.spans[static_cast<std::size_t>(r)] < 0) continue;
      const double w = last - a;
      s.wait[static_cast<std::size_t>(r)] = w;
      run.ranks[static_cast<std::size_t>(r)].waited_us += w;
      s.caused_us += w;
      s.max_wait_us = std::max(s.max_wait_us, w);
    }
    if (c.present > 0) s.exposed_us /= c.present;
    // A rank is the straggler only when it arrived later than the clocks can tell apart.
    if (c.present > 1 && s.max_wait_us > std::max(kTimeResolutionUs, m.info.clock_error_us)) {
      RankRunStats& straggler = run.ranks[static_cast<std::size_t>(s.last_rank)];
      straggler.caused_us += s.caused_us;
      ++straggler.last_arrivals;
    } else {
      s.straggler = false;
    }
    s.transfer_us = s.dur[static_cast<std::size_t>(s.last_rank)];
    if (c.bytes >= 0 && s.transfer_us > 0) {
      ++run.sized_calls;
      s.algbw = static_cast<double>(c.bytes) / (s.transfer_us * 1e-6);
      const double f = bus_factor(s.pattern, c.group_size);
      s.busbw = f > 0 ? s.algbw * f : -1;
    } else if (c.bytes >= 0) {
      ++run.sized_calls;
    }
    if (c.missing(Absence::not_called)) ++run.hang_calls;
    if (c.present > c.group_size) ++run.merged_group_calls;
    if (c.missing(Absence::dropped) || c.missing(Absence::outside_window)) ++run.partial_calls;
    if (c.no_kernel) ++run.no_kernel_calls;
    // Its phase's figures: the ranks' mean time in it, and the mean of what was exposed.
    const std::string phase(c.phase ? m.str(c.phase) : "other");
    auto [it, fresh] = phase_of.try_emplace(phase, run.phases.size());
    if (fresh) run.phases.push_back(PhaseStats{phase});
    PhaseStats& ps = run.phases[it->second];
    ++ps.calls;
    if (c.bytes >= 0) ps.bytes += c.bytes, ++ps.sized_calls;
    double mean = 0;
    for (double d : s.dur)
      if (d >= 0) mean += d;
    ps.time_us += c.present > 0 ? mean / c.present : 0;
    ps.exposed_us += s.exposed_us;
    run.calls.push_back(std::move(s));
  }

  for (int r = 0; r < n; ++r) {
    RankRunStats& rs = run.ranks[static_cast<std::size_t>(r)];
    const Intervals c = merged(std::move(comm[static_cast<std::size_t>(r)]));
    rs.comm_us = length(c);
    rs.hidden_us = length(intersection(c, work[static_cast<std::size_t>(r)]));
  }
  double most = 0;
  for (int r = 0; r < n; ++r)
    if (run.ranks[static_cast<std::size_t>(r)].caused_us > most)
      most = run.ranks[static_cast<std::size_t>(r)].caused_us, run.slowest_rank = r;
  return run;
}

std::vector<int> worst_calls(const RealRun& run) {
  std::vector<int> order(run.calls.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const CallStats &x = run.calls[static_cast<std::size_t>(a)],
                    &y = run.calls[static_cast<std::size_t>(b)];
    if (x.caused_us != y.caused_us) return x.caused_us > y.caused_us;
    return x.transfer_us > y.transfer_us;
  });
  return order;
}

std::string call_label(const TraceModel& m, const CollectiveCall& call) {
  const std::string_view group = m.str(call.group);
  return fmt::format("{} #{}{}", m.str(call.name), call.index,
                     group.empty() ? "" : fmt::format(" (group {})", group));
}

namespace {

std::string us(double microseconds) {
  return format_seconds(microseconds * 1e-6);
}

std::string size_text(const CollectiveCall& c) {
  return c.bytes >= 0 ? format_bytes(static_cast<double>(c.bytes)) : "?";
}

// "64 MiB (shapes of nccl:all_reduce)", or "size unknown".
std::string size_text(const TraceModel& m, const CollectiveCall& c) {
  if (c.bytes < 0) return "size unknown";
  return fmt::format("{} ({})", format_bytes(static_cast<double>(c.bytes)), m.str(c.size_from));
}

// "forward, ProfilerStep#3".
std::string phase_text(const TraceModel& m, const CollectiveCall& c) {
  const std::string_view phase = c.phase ? m.str(c.phase) : "other";
  return c.profiler_step >= 0 ? fmt::format("{}, ProfilerStep#{}", phase, c.profiler_step)
                              : std::string(phase);
}

// "; not in rank 3's window; ..." for each rank the call misses, by reason; and a CPU side
// without its kernel.
std::string absence_text(const TraceModel& m, const CollectiveCall& c) {
  std::string out;
  for (Absence why : {Absence::not_called, Absence::dropped, Absence::outside_window}) {
    std::string ranks;
    for (std::size_t r = 0; r < c.absent.size(); ++r)
      if (c.absent[r] == why) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", r);
    if (ranks.empty()) continue;
    switch (why) {
      case Absence::not_called:
        out += fmt::format(
            "; rank {} never called it, and its trace runs on past it: a hang would start here",
            ranks);
        break;
      case Absence::dropped:
        out += fmt::format(
            "; missing from rank {}'s trace, which holds the group's later calls (a sampled "
            "window, not a hang)",
            ranks);
        break;
      default:
        out += fmt::format("; not in rank {}'s window", ranks);
    }
  }
  if (c.no_kernel)
    out += fmt::format("; {} rank{} kept from the CPU side (no kernel in the window)", c.no_kernel,
                       c.no_kernel == 1 ? "" : "s");
  if (c.splits) out += fmt::format("; splits {}", m.str(c.splits));
  (void)m;
  return out;
}

// The straggler's rank, or "-" when the ranks arrived together as far as the clocks tell.
std::string last_text(const CallStats& s) {
  return s.straggler ? std::to_string(s.last_rank) : "-";
}

std::string ranks_origin(const TraceModel& m) {
  return m.info.rank_origin == "distributedInfo"
             ? "ranks from each file's distributedInfo"
             : "ranks in the order the files were given (the files carry no distributedInfo)";
}

}  // namespace

std::string call_caption(const TraceModel& m, const RealRun& run, int k) {
  const CallStats& s = run.calls[static_cast<std::size_t>(k)];
  const CollectiveCall& c = m.collectives[static_cast<std::size_t>(s.call)];
  std::string out = call_label(m, c) + ": ";
  if (c.group_size > 1 && s.straggler)
    out += fmt::format("rank {} arrives last, {} after the first; the others wait {} in all; ",
                       s.last_rank, us(s.max_wait_us), us(s.caused_us));
  else if (c.group_size > 1)
    out += fmt::format("the ranks arrive together (within {}, the clocks' error); ",
                       us(s.max_wait_us));
  else
    out += fmt::format("rank {} alone (no other rank's call matched); ", s.last_rank);
  out += fmt::format("transfer {}; {}", us(s.transfer_us), size_text(m, c));
  if (s.busbw > 0) out += fmt::format(", busbw {}", format_bandwidth(s.busbw));
  out += fmt::format("; {}", phase_text(m, c));
  out += absence_text(m, c);
  return out;
}

std::string describe_call(const TraceModel& m, const RealRun& run, int k) {
  if (k < 0 || k >= static_cast<int>(run.calls.size())) return "";
  const CallStats& s = run.calls[static_cast<std::size_t>(k)];
  double first = INFINITY;
  for (double a : s.arrival)
    if (a >= 0) first = std::min(first, a);
  std::string out = fmt::format("this step's call, {}, rank by rank:\n",
                                call_label(m, m.collectives[static_cast<std::size_t>(s.call)]));
  for (std::size_t r = 0; r < s.arrival.size(); ++r) {
    if (s.dur[r] < 0) continue;
    out += fmt::format("  r{}: arrives +{}, waits {}, in the call {}{}\n", r,
                       us(s.arrival[r] - first), us(s.wait[r]), us(s.dur[r]),
                       s.straggler && static_cast<int>(r) == s.last_rank ? " (last in)" : "");
  }
  return out;
}

std::string describe_real_run(const TraceModel& m, const RealRun& run) {
  std::string out;
  const int n = m.world_size();
  out += fmt::format("real run: {} ranks, {}; collectives from {}\n", n, ranks_origin(m),
                     m.info.extra_json("collectives_from"));
  if (!m.info.files_note.empty()) out += m.info.files_note + "\n";
  for (int r = 0; r < n && r < static_cast<int>(m.info.rank_files.size()); ++r)
    out += fmt::format("  rank {}: {}, clock offset {:+.3f} us\n", r,
                       m.info.rank_files[static_cast<std::size_t>(r)],
                       r < static_cast<int>(m.info.clock_offset_us.size())
                           ? m.info.clock_offset_us[static_cast<std::size_t>(r)]
                           : 0.0);
  if (m.info.clock_error_us >= 0)
    out += fmt::format(
        "clocks: aligned on matched collectives' ends; after alignment they agree within {}\n",
        us(m.info.clock_error_us));
  else
    out += "clocks: not aligned (some rank shares no collective with rank 0)\n";
  if (!run.present) {
    out += "collectives: none found (no NCCL kernel, gloo span, record_param_comms or c10d op)\n";
    return out;
  }
  out += fmt::format(
      "collectives: {} calls, matched across ranks within each group by content (collective, "
      "size, PyTorch's sequence numbers where the trace has them), in order\n",
      run.calls.size());
  if (run.hang_calls)
    out += fmt::format(
        "  {} call{} some rank never made while its trace ran on past it: a hang would start at "
        "the first\n",
        run.hang_calls, run.hang_calls == 1 ? "" : "s");
  if (run.partial_calls)
    out += fmt::format(
        "  {} call{} outside some rank's window or dropped from its trace (partial or sampled "
        "windows; no hang)\n",
        run.partial_calls, run.partial_calls == 1 ? "" : "s");
  if (run.merged_group_calls)
    out += fmt::format(
        "  {} call{} matched more ranks than the group holds: the trace names neither the groups "
        "nor their ranks, so groups of one size were taken as one (their waits mix)\n",
        run.merged_group_calls, run.merged_group_calls == 1 ? "" : "s");
  if (run.no_kernel_calls)
    out += fmt::format("  {} call{} with no kernel in some rank's window, kept from the CPU side\n",
                       run.no_kernel_calls, run.no_kernel_calls == 1 ? "" : "s");
  std::map<std::string, int> sources;
  for (const CollectiveCall& c : m.collectives)
    if (c.bytes >= 0) ++sources[std::string(m.str(c.size_from))];
  if (run.sized_calls == 0) {
    out +=
        "sizes: the trace gives none (no comms args, and no Input Dims with a dtype), so no "
        "bandwidth\n";
  } else {
    out += fmt::format("sizes: {} of {} calls have them:", run.sized_calls, run.calls.size());
    for (const auto& [from, k] : sources) out += fmt::format(" {} from {};", k, from);
    out.back() = '\n';
  }
  out += "phases (calls, bytes, the ranks' mean time in them, of it exposed):\n";
  for (const PhaseStats& p : run.phases)
    out += fmt::format("  {:<10} {:>5} calls {:>12} {:>12} exposed {:>12}\n", p.name, p.calls,
                       p.sized_calls ? format_bytes(static_cast<double>(p.bytes)) : "?",
                       us(p.time_us), us(p.exposed_us));
  if (run.slowest_rank >= 0) {
    const RankRunStats& s = run.ranks[static_cast<std::size_t>(run.slowest_rank)];
    out += fmt::format(
        "slowest rank: rank {} arrived last at {} of {} calls; the others waited {} for it\n",
        run.slowest_rank, s.last_arrivals, run.calls.size(), us(s.caused_us));
  }
  out += "worst collectives (the others' wait for the last rank):\n";
  const std::vector<int> worst = worst_calls(run);
  for (std::size_t k = 0; k < worst.size() && k < 5; ++k) {
    const CallStats& s = run.calls[static_cast<std::size_t>(worst[k])];
    const CollectiveCall& c = m.collectives[static_cast<std::size_t>(s.call)];
    out += fmt::format("  {}: {}, last rank {} (late {}), waits {}, transfer {}", call_label(m, c),
                       size_text(c), last_text(s), us(s.max_wait_us), us(s.caused_us),
                       us(s.transfer_us));
    if (s.busbw > 0)
      out +=
          fmt::format(", algbw {}, busbw {}", format_bandwidth(s.algbw), format_bandwidth(s.busbw));
    out += "\n";
  }
  out += fmt::format("per rank ({}):\n",
                     run.gpu ? "computation on GPU streams" : "computation on the CPU threads");
  for (int r = 0; r < n; ++r) {
    const RankRunStats& s = run.ranks[static_cast<std::size_t>(r)];
    out += fmt::format(
        "  rank {}: {} calls, communication {}, waited {}, caused {} (last {}x), hidden {} "
        "exposed {}\n",
        r, s.calls, us(s.comm_us), us(s.waited_us), us(s.caused_us), s.last_arrivals,
        us(s.hidden_us), us(s.exposed_us()));
  }
  return out;
}

std::string real_run_table(const TraceModel& m, const RealRun& run) {
  std::string out = describe_real_run(m, run);
  if (!run.present) return out;
  out += fmt::format(
      "\n{:>4}  {:<32} {:>10} {:>5} {:>4} {:>10} {:>10} {:>10} {:>12} {:>12}  {:<10} {}\n", "step",
      "collective", "size", "ranks", "last", "late", "waits", "transfer", "algbw", "busbw", "phase",
      "size from; notes");
  for (std::size_t k = 0; k < run.calls.size(); ++k) {
    const CallStats& s = run.calls[k];
    const CollectiveCall& c = m.collectives[static_cast<std::size_t>(s.call)];
    std::string notes = c.bytes >= 0 ? std::string(m.str(c.size_from)) : "size unknown";
    notes += absence_text(m, c);
    out += fmt::format(
        "{:>4}  {:<32} {:>10} {:>5} {:>4} {:>10} {:>10} {:>10} {:>12} {:>12}  {:<10} {}\n", k + 1,
        call_label(m, c), size_text(c), fmt::format("{}/{}", c.present, c.group_size), last_text(s),
        us(s.max_wait_us), us(s.caused_us), us(s.transfer_us),
        s.algbw > 0 ? format_bandwidth(s.algbw) : "-",
        s.busbw > 0 ? format_bandwidth(s.busbw) : "-",
        phase_text(m, c).substr(0, phase_text(m, c).find(',')), notes);
  }
  return out;
}

std::string real_run_csv(const TraceModel& m, const RealRun& run) {
  std::string out =
      "step,collective,index,group,rank,arrival_us,duration_us,wait_us,last_rank,straggler,bytes,"
      "transfer_us,algbw_bytes_per_s,busbw_bytes_per_s,size_from,group_size,phase,profiler_step,"
      "seq,exposed_us,kernel\n";
  auto quoted = [](std::string_view s) {
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  for (std::size_t k = 0; k < run.calls.size(); ++k) {
    const CallStats& s = run.calls[k];
    const CollectiveCall& c = m.collectives[static_cast<std::size_t>(s.call)];
    for (int r = 0; r < m.world_size(); ++r) {
      if (c.spans[static_cast<std::size_t>(r)] < 0) continue;
      const std::int32_t span = c.spans[static_cast<std::size_t>(r)];
      const bool kernel = span != c.cpu_spans[static_cast<std::size_t>(r)];
      out += fmt::format(
          "{},{},{},{},{},{:.3f},{:.3f},{:.3f},{},{:d},{},{:.3f},{},{},{},{},{},{},{},{:.3f},{:d}"
          "\n",
          k + 1, quoted(m.str(c.name)), c.index, quoted(m.str(c.group)), r,
          s.arrival[static_cast<std::size_t>(r)] - m.t_begin, s.dur[static_cast<std::size_t>(r)],
          s.wait[static_cast<std::size_t>(r)], s.last_rank, s.straggler, c.bytes, s.transfer_us,
          s.algbw > 0 ? fmt::format("{:.6g}", s.algbw) : "",
          s.busbw > 0 ? fmt::format("{:.6g}", s.busbw) : "", quoted(m.str(c.size_from)),
          c.group_size, quoted(c.phase ? m.str(c.phase) : "other"), c.profiler_step, c.seq,
          s.exposed_us, kernel);
    }
  }
  return out;
}

}  // namespace distlab::viewer
