// trace_counts.cpp — every count of a run's messages, in one place: what each rank sent and
// received (RunResult::traffic), the steps, and a range of steps against its formulas
// (count_steps). Window accesses (a rank's loads and stores on a symmetric window) are not
// messages: no count here includes them.
#include "core/runtime/trace_counts.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

namespace distlab {

namespace {

// A send is in flight from its post to its completion; at each send's start, count the same
// rank's sends that have started and not yet finished (itself included).
int most_in_flight(const std::vector<const SpanEvent*>& sends) {
  int most = 0;
  for (const SpanEvent* s : sends) {
    int now = 0;
    for (const SpanEvent* o : sends)
      if (o == s || (o->t0 <= s->t0 && o->t1 > s->t0)) ++now;
    most = std::max(most, now);
  }
  return most;
}

// Distinct step ids in [first, last] among the messages (sends and receives) of every rank.
int distinct_steps(const RunResult& run, int first, int last) {
  std::set<int> steps;
  for (const auto& log : run.logs)
    for (const auto& e : log.spans)
      if (is_message(e.kind) && e.meta.step >= first && e.meta.step <= last)
        steps.insert(e.meta.step);
  return static_cast<int>(steps.size());
}

}  // namespace

std::vector<RankTraffic> RunResult::traffic(int first_step, int last_step) const {
  std::vector<RankTraffic> out(logs.size());
  for (std::size_t i = 0; i < logs.size(); ++i) {
    auto& t = out[i];
    std::set<int> steps;
    std::vector<std::pair<double, double>> spans;
    for (const auto& e : logs[i].spans) {
      if (!is_message(e.kind)) continue;
      if (first_step >= 0 && (e.meta.step < first_step || e.meta.step > last_step)) continue;
      if (e.kind == SpanEvent::Kind::send) {
        t.bytes_sent += e.bytes;
        ++t.msgs_sent;
      } else {
        t.bytes_recv += e.bytes;
        ++t.msgs_recv;
      }
      if (e.meta.step >= 0) steps.insert(e.meta.step);
      spans.emplace_back(e.t0, e.t1);
    }
    t.steps = static_cast<int>(steps.size());
    // Time covered by at least one message: the union of their intervals.
    std::sort(spans.begin(), spans.end());
    double end = -1e300;
    for (const auto& [a, b] : spans) {
      if (a > end) {
        t.comm_seconds += (b - a) * 1e-6;
        end = b;
      } else if (b > end) {
        t.comm_seconds += (b - end) * 1e-6;
        end = b;
      }
    }
  }
  return out;
}

std::vector<std::string> RunResult::hosts() const {
  std::vector<std::string> out(logs.size());
  for (const RankLog& log : logs)
    if (log.rank >= 0 && std::size_t(log.rank) < out.size()) out[std::size_t(log.rank)] = log.host;
  return out;
}

int RunResult::steps() const {
  return distinct_steps(*this, 0, std::numeric_limits<int>::max());
}

StepCounts count_steps(const RunResult& run, int first_step, int last_step,
                       const std::string& phase) {
  StepCounts c;
  c.ranks = run.traffic(first_step, last_step);
  std::map<int, std::uint64_t> step_all;  // step -> bytes all ranks sent in it
  for (const auto& log : run.logs) {
    std::map<int, std::uint64_t> step_mine;
    std::vector<const SpanEvent*> sends;
    for (const auto& e : log.spans) {
      if (e.kind == SpanEvent::Kind::plain) {
        if (!phase.empty() && e.name == phase)
          c.seconds = std::max(c.seconds, (e.t1 - e.t0) * 1e-6);
        continue;
      }
      if (e.meta.step < first_step || e.meta.step > last_step) continue;
      if (e.kind != SpanEvent::Kind::send) continue;
      step_mine[e.meta.step] += e.bytes;
      step_all[e.meta.step] += e.bytes;
      sends.push_back(&e);
    }
    for (const auto& [s, b] : step_mine) c.peak.rank = std::max(c.peak.rank, b);
    c.in_flight = std::max(c.in_flight, most_in_flight(sends));
  }
  for (const auto& [s, b] : step_all) c.peak.all = std::max(c.peak.all, b);
  c.steps = distinct_steps(run, first_step, last_step);
  for (const auto& t : c.ranks) {
    c.max_sent = std::max(c.max_sent, t.bytes_sent);
    c.all_links += t.bytes_sent;
    c.max_msgs = std::max(c.max_msgs, t.msgs_sent);
  }
  return c;
}

std::vector<double> phase_seconds(const RankLog& log, const std::string& phase) {
  std::vector<std::pair<double, double>> spans;
  for (const SpanEvent& e : log.spans)
    if (e.kind == SpanEvent::Kind::plain && e.lane == Lane::compute && e.name == phase)
      spans.emplace_back(e.t0, e.t1);
  std::sort(spans.begin(), spans.end());
  std::vector<double> out;
  for (const auto& [t0, t1] : spans) out.push_back((t1 - t0) * 1e-6);
  return out;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const auto mid = values.begin() + std::ptrdiff_t(values.size() / 2);
  std::nth_element(values.begin(), mid, values.end());
  return *mid;
}

RunResult only_steps(const RunResult& run, int first_step, int last_step) {
  RunResult out;
  out.world = run.world;
  for (const auto& log : run.logs) {
    RankLog l;
    l.rank = log.rank;
    for (const auto& e : log.spans)
      if (is_message(e.kind) && e.meta.step >= first_step && e.meta.step <= last_step)
        l.spans.push_back(e);
    out.logs.push_back(std::move(l));
  }
  return out;
}

}  // namespace distlab
