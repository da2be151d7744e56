// overlap.cpp — communication under computation, per rank (overlap.hpp).
#include "viewer/model/overlap.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/base/units.hpp"
#include "core/trace/format.hpp"

namespace distlab::viewer {

namespace {

// A layer's forward or backward: a phase on the compute lane (or a sub-lane of it) whose op
// says so. Outer phases (a configuration, a training step, "wait for the buckets") do not count.
bool is_work(const TraceModel& m, const Span& s) {
  if (s.kind != SpanKind::compute) return false;
  if (m.lanes[s.lane].tid % 10 != lane_base_tid(distlab::Lane::compute)) return false;
  const SpanArgs* a = m.args(s);
  if (!a || !a->op) return false;
  const std::string_view op = m.str(a->op);
  return op == "forward" || op == "backward";
}

}  // namespace

OverlapIndex index_overlap(const TraceModel& m) {
  const std::size_t n = m.ranks.size();
  std::vector<char> async(m.strings.size());  // by string id: the name of an operation's context
  for (std::size_t i = 0; i < m.strings.size(); ++i) async[i] = is_async_group(m.strings[i]);
  std::vector<Intervals> comm(n), work(n);
  for (const Span& s : m.spans) {
    const int r = m.lanes[s.lane].rank;
    if (r < 0 || static_cast<std::size_t>(r) >= n) continue;
    // A nonblocking operation's send and recv spans: a message posted to done (its deliver
    // slice lies inside the recv). A blocking call's messages are left out: the rank waits in
    // it, whatever phase it sits in.
    const SpanArgs* a = m.args(s);
    if ((s.kind == SpanKind::send || s.kind == SpanKind::recv) && a && a->group < async.size() &&
        async[a->group])
      comm[r].push_back({s.start, s.end()});
    else if (is_work(m, s))
      work[r].push_back({s.start, s.end()});
  }
  OverlapIndex out;
  out.comm.resize(n), out.work.resize(n), out.hidden.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    out.comm[r] = merged(std::move(comm[r]));
    out.work[r] = merged(std::move(work[r]));
    out.hidden[r] = intersection(out.comm[r], out.work[r]);
    out.shown = out.shown || (!out.work[r].empty() && !out.comm[r].empty());
  }
  return out;
}

std::vector<RankOverlap> overlap_until(const OverlapIndex& index, double t_us) {
  std::vector<RankOverlap> out(index.comm.size());
  for (std::size_t r = 0; r < out.size(); ++r)
    out[r] = {length_before(index.comm[r], t_us), length_before(index.hidden[r], t_us)};
  return out;
}

std::string overlap_text(const RankOverlap& o) {
  return fmt::format("{} of {} ({:.0f}%)", format_seconds(o.hidden_us * 1e-6),
                     format_seconds(o.comm_us * 1e-6), 100 * o.share());
}

std::string describe_overlap(const TraceModel& m, double t_us) {
  const OverlapIndex index = index_overlap(m);
  if (!index.shown)
    return "overlap: no nonblocking operation runs beside a forward or backward phase here\n";
  std::string out = "overlap: communication hidden under compute (forward and backward phases)\n";
  const std::vector<RankOverlap> ranks = overlap_until(index, t_us);
  RankOverlap all;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    all.comm_us += ranks[r].comm_us, all.hidden_us += ranks[r].hidden_us;
    if (r < 16) out += fmt::format("  r{}  {}\n", r, overlap_text(ranks[r]));
  }
  if (ranks.size() > 16) out += fmt::format("  ... and {} more ranks\n", ranks.size() - 16);
  out += fmt::format("  all  {}\n", overlap_text(all));
  return out;
}

}  // namespace distlab::viewer
