// playback.cpp — the two clocks, and what the trace shows at a moment (playback.hpp).
#include "viewer/model/playback.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <utility>

namespace distlab::viewer {

namespace {

constexpr double kEps = 1e-9;
constexpr double kMeasuredSeconds = 10.0;  // the measured clock plays the whole trace in 10 s

double lerp(double a, double b, double f) {
  return a + (b - a) * f;
}

// The beat -> time knots; a model nobody indexed maps [0, 1] onto the extent.
std::vector<double> fallback_knots(const TraceModel& m) {
  const TimeSpan a = active_range(m);
  return {a.begin, a.end};
}

const std::vector<double>& knots(const TraceModel& m, std::vector<double>& scratch) {
  if (m.beat_times.size() >= 2) return m.beat_times;
  scratch = fallback_knots(m);
  return scratch;
}

// The step id played during beat (k - 1, k], for k in 1 .. step count; -1 when none.
int step_id_of_beat(const TraceModel& m, int k) {
  return k >= 1 && k <= static_cast<int>(m.step_ids.size()) ? m.step_ids[k - 1] : -1;
}

}  // namespace

void index_steps(TraceModel& m) {
  m.step_ids.clear();
  for (const auto& msg : m.messages)
    if (msg.step >= 0) m.step_ids.push_back(msg.step);
  for (const auto& w : m.accesses)
    if (w.step >= 0) m.step_ids.push_back(w.step);
  for (const auto& f : m.steps)
    if (f.step >= 0) m.step_ids.push_back(f.step);
  std::sort(m.step_ids.begin(), m.step_ids.end());
  m.step_ids.erase(std::unique(m.step_ids.begin(), m.step_ids.end()), m.step_ids.end());

  // The active range: the spans' extent (the whole trace when it has none).
  m.active_begin = m.t_end, m.active_end = m.t_begin;
  for (const Span& s : m.spans)
    m.active_begin = std::min(m.active_begin, s.start),
    m.active_end = std::max(m.active_end, s.end());
  if (!(m.active_begin < m.active_end)) m.active_begin = m.t_begin, m.active_end = m.t_end;
  m.rank_end.assign(m.ranks.size(), -1.0);  // -1: the rank has no span
  for (const Span& s : m.spans) {
    const int r = s.lane < m.lanes.size() ? m.lanes[s.lane].rank : -1;
    if (r >= 0 && r < static_cast<int>(m.rank_end.size()))
      m.rank_end[r] = std::max(m.rank_end[r], s.end());
  }

  // Beat k - 1 starts step k: its frame's time, else its earliest send or window access (a step
  // of window accesses only has no send); never before the beat
  // before (the map stays monotone), and the last beat is the end of the active range.
  const std::size_t n = m.step_ids.size();
  std::vector<double> start(n, -1.0);
  auto index = [&](int id) {
    return static_cast<std::size_t>(std::lower_bound(m.step_ids.begin(), m.step_ids.end(), id) -
                                    m.step_ids.begin());
  };
  for (const auto& f : m.steps)
    if (f.step >= 0) {
      double& s = start[index(f.step)];
      s = s < 0 ? f.ts : std::min(s, f.ts);
    }
  // No frame for a step: its first send or window access starts it.
  std::vector<double> first(n, -1.0);
  auto earliest = [&](int id, double t) {
    double& f = first[index(id)];
    f = f < 0 ? t : std::min(f, t);
  };
  for (const auto& msg : m.messages)
    if (msg.step >= 0) earliest(msg.step, msg.send_time);
  for (const auto& w : m.accesses)
    if (w.step >= 0) earliest(w.step, w.start);
  for (std::size_t k = 0; k < n; ++k)
    if (start[k] < 0) start[k] = first[k];
  m.beat_times.assign(std::max<std::size_t>(n, 1) + 1, m.active_begin);
  for (std::size_t k = 0; k < n; ++k) {
    const double t =
        std::clamp(start[k] < 0 ? m.active_begin : start[k], m.active_begin, m.active_end);
    m.beat_times[k] = k ? std::max(t, m.beat_times[k - 1]) : t;
  }
  m.beat_times.back() = std::max(m.active_end, m.beat_times[m.beat_times.size() - 2]);
}

TimeSpan active_range(const TraceModel& m) {
  if (m.active_end > m.active_begin) return {m.active_begin, m.active_end};
  return {m.t_begin, m.t_end};
}

const char* to_string(Clock c) {
  return c == Clock::steps ? "steps" : "measured";
}

int last_beat(const TraceModel& model) {
  return std::max<int>(1, static_cast<int>(model.step_ids.size()));
}

int step_id_at_beat(const TraceModel& model, int beat) {
  return std::max(0, step_id_of_beat(model, beat));
}

double time_at_beat(const TraceModel& model, double beat) {
  std::vector<double> scratch;
  const auto& k = knots(model, scratch);
  const double last = static_cast<double>(k.size() - 1);
  if (!(beat > 0)) return k.front();
  if (beat >= last) return k.back();
  const auto i = static_cast<std::size_t>(std::floor(beat));
  return lerp(k[i], k[i + 1], beat - static_cast<double>(i));
}

double beat_at_time(const TraceModel& model, double t_us) {
  std::vector<double> scratch;
  const auto& k = knots(model, scratch);
  if (t_us <= k.front()) return 0;
  if (t_us >= k.back()) return static_cast<double>(k.size() - 1);
  // The last knot at or before t; within a segment of zero length the beat is its end.
  const auto it = std::upper_bound(k.begin(), k.end(), t_us) - 1;
  const auto i = static_cast<std::size_t>(it - k.begin());
  const double span = k[i + 1] - k[i];
  return static_cast<double>(i) + (span > 0 ? (t_us - k[i]) / span : 0.0);
}

// ---- Playback -------------------------------------------------------------------------------

void Playback::reset(const TraceModel& model) {
  playing = false;
  position_ = clock == Clock::steps ? 0.0 : active_range(model).begin;
}

void Playback::set_clock(const TraceModel& model, Clock c) {
  if (c == clock) return;
  const Moment now = moment(model);
  clock = c;
  position_ = c == Clock::steps ? now.beat : now.time_us;
}

void Playback::advance(const TraceModel& model, double wall_seconds) {
  if (!playing || wall_seconds <= 0) return;
  if (clock == Clock::steps) {
    position_ += speed * wall_seconds;
    if (position_ >= last_beat(model)) position_ = last_beat(model), playing = false;
  } else {
    const TimeSpan a = active_range(model);
    position_ += (a.end - a.begin) * speed * wall_seconds / kMeasuredSeconds;
    if (position_ >= a.end) position_ = a.end, playing = false;
  }
}

void Playback::next_step(const TraceModel& model) {
  const double beat = moment(model).beat;
  seek_beat(model, std::floor(beat + kEps) + 1);
}

void Playback::prev_step(const TraceModel& model) {
  const double beat = moment(model).beat;
  seek_beat(model, std::ceil(beat - kEps) - 1);
}

void Playback::seek_beat(const TraceModel& model, double beat) {
  beat = std::clamp(beat, 0.0, static_cast<double>(last_beat(model)));
  position_ = clock == Clock::steps ? beat : time_at_beat(model, beat);
}

void Playback::seek_time(const TraceModel& model, double t_us) {
  t_us = std::clamp(t_us, active_range(model).begin, active_range(model).end);
  position_ = clock == Clock::measured ? t_us : beat_at_time(model, t_us);
}

Moment Playback::moment(const TraceModel& model) const {
  Moment m;
  m.clock = clock;
  if (clock == Clock::steps) {
    m.beat = position_;
    m.time_us = time_at_beat(model, position_);
  } else {
    m.time_us = position_;
    m.beat = beat_at_time(model, position_);
  }
  m.step = step_id_at_beat(model, static_cast<int>(std::floor(m.beat + kEps)));
  return m;
}

// ---- what the moment shows ------------------------------------------------------------------

namespace {

// How far an event of step `step` that runs [start, end) has gone at the moment, 0 to 1: the
// share of its step's beat on the steps clock (an event with a step), else of its time; -1 when
// it is not under way.
double progress_at(const TraceModel& model, const Moment& at, int step, double start, double end) {
  const double whole = std::floor(at.beat + kEps);
  const bool between = at.beat - whole > kEps;  // steps clock: strictly between two steps
  if (at.clock == Clock::steps && step >= 0)
    return between && step == step_id_of_beat(model, static_cast<int>(whole) + 1) ? at.beat - whole
                                                                                  : -1;
  if (start <= at.time_us && at.time_us < end) {
    const double d = end - start;
    return d > 0 ? (at.time_us - start) / d : 0.0;
  }
  return -1;
}

}  // namespace

std::vector<InFlight> in_flight(const TraceModel& model, const Moment& at) {
  std::vector<InFlight> out;
  for (std::size_t i = 0; i < model.messages.size(); ++i) {
    const Message& m = model.messages[i];
    const double progress = progress_at(model, at, m.step, m.send_time, m.arrival);
    if (progress >= 0)
      out.push_back({static_cast<std::uint32_t>(i), std::clamp(progress, 0.0, 1.0)});
  }
  return out;
}

std::vector<InProgress> accesses_in_progress(const TraceModel& model, const Moment& at) {
  std::vector<InProgress> out;
  for (std::size_t i = 0; i < model.accesses.size(); ++i) {
    const WindowAccess& w = model.accesses[i];
    const double progress = progress_at(model, at, w.step, w.start, w.end);
    if (progress >= 0)
      out.push_back({static_cast<std::uint32_t>(i), std::clamp(progress, 0.0, 1.0)});
  }
  return out;
}

std::vector<bool> computing(const TraceModel& model, const Moment& at) {
  std::vector<bool> out(model.ranks.size(), false);
  for (const Lane& lane : model.lanes) {
    if (out[lane.rank]) continue;
    // Spans are sorted by start: only those starting at or before t can cover it.
    const auto first = model.spans.begin() + lane.span_begin;
    const auto last = std::upper_bound(first, model.spans.begin() + lane.span_end, at.time_us,
                                       [](double t, const Span& s) { return t < s.start; });
    for (auto it = first; it != last; ++it)
      if (it->kind == SpanKind::compute && at.time_us < it->end()) {
        out[lane.rank] = true;
        break;
      }
  }
  return out;
}

std::vector<LinkTraffic> link_traffic(const TraceModel& model, const Moment& at) {
  std::map<std::pair<int, int>, LinkTraffic> links;
  for (const Message& m : model.messages) {
    if (m.src < 0 || m.dst < 0) continue;
    const bool arrived =
        at.clock == Clock::steps && m.step >= 0 ? m.step <= at.step : m.arrival <= at.time_us;
    if (!arrived) continue;
    LinkTraffic& l = links[{m.src, m.dst}];
    l.src = m.src;
    l.dst = m.dst;
    l.bytes += std::max<std::int64_t>(0, m.bytes);
    ++l.messages;
  }
  std::vector<LinkTraffic> out;
  out.reserve(links.size());
  for (auto& [key, l] : links) out.push_back(l);
  return out;
}

ShardState shards_at(const TraceModel& model, const Moment& at) {
  return shards_at(ShardReplay(model), at);
}

ShardState shards_at(const ShardReplay& replay, const Moment& at) {
  return at.clock == Clock::steps ? replay.at_step(at.step) : replay.at_time(at.time_us);
}

std::vector<MemorySample> memory_at(const TraceModel& model, const Moment& at) {
  std::vector<MemorySample> out(model.ranks.size());
  for (std::size_t r = 0; r < model.memory.size() && r < out.size(); ++r) {
    const auto& samples = model.memory[r];
    // A rank that has finished its spans shows its state before its teardown, not the frees
    // that follow: ranks finish at different times, and the moment must read the same on all.
    const double t = r < model.rank_end.size() && model.rank_end[r] >= 0
                         ? std::min(at.time_us, model.rank_end[r])
                         : at.time_us;
    auto it = std::upper_bound(samples.begin(), samples.end(), t,
                               [](double t, const MemorySample& s) { return t < s.ts; });
    if (it != samples.begin()) out[r] = *std::prev(it);
    out[r].ts = at.time_us;
  }
  return out;
}

std::vector<double> memory_history(const TraceModel& model, int rank, int category, double t0,
                                   double t1, int columns) {
  std::vector<double> out(static_cast<std::size_t>(std::max(columns, 0)), 0.0);
  if (rank < 0 || static_cast<std::size_t>(rank) >= model.memory.size() || out.empty() || t1 <= t0)
    return out;
  const auto& samples = model.memory[static_cast<std::size_t>(rank)];
  const double end = static_cast<std::size_t>(rank) < model.rank_end.size() &&
                             model.rank_end[static_cast<std::size_t>(rank)] >= 0
                         ? model.rank_end[static_cast<std::size_t>(rank)]
                         : t1;
  auto bytes = [&](const MemorySample& s) {
    return static_cast<double>(
        category >= kMemoryCategories ? s.total : s.bytes[static_cast<std::size_t>(category)]);
  };
  const double width = (t1 - t0) / static_cast<double>(columns);
  std::size_t i = 0;                            // the next sample not yet read
  double held = 0;                              // the bytes held after the samples read
  auto read_to = [&](double t, double* most) {  // every sample at or before t
    while (i < samples.size() && samples[i].ts <= t && samples[i].ts <= end) {
      held = bytes(samples[i++]);
      if (most) *most = std::max(*most, held);
    }
  };
  for (int c = 0; c < columns; ++c) {
    const double lo = t0 + width * static_cast<double>(c), hi = lo + width;
    read_to(lo, nullptr);  // held at the slice's start
    double most = held;
    // Inside it: up to its end, the last slice's end included.
    read_to(c + 1 == columns ? t1 : std::nextafter(hi, lo), &most);
    out[static_cast<std::size_t>(c)] = most;
  }
  return out;
}

std::vector<const ValueSeries*> value_tracks(const TraceModel& model) {
  std::vector<const ValueSeries*> out;
  const auto& named = model.info.value_tracks;
  for (const ValueSeries& v : model.values)  // by name, then rank: a name's lowest rank first
    if (v.samples.size() >= 2 && (out.empty() || out.back()->name != v.name) &&
        std::find(named.begin(), named.end(), v.name) != named.end())
      out.push_back(&v);
  return out;
}

double value_at(const ValueSeries& series, double t) {
  const auto after = std::upper_bound(series.samples.begin(), series.samples.end(), t,
                                      [](double x, const ValueSample& s) { return x < s.ts; });
  return after == series.samples.begin() ? NAN : std::prev(after)->value;
}

ValueScale value_scale(const ValueSeries& series) {
  ValueScale s;
  if (series.samples.empty()) return s;
  s.lo = s.hi = series.samples.front().value;
  for (const ValueSample& v : series.samples)
    s.lo = std::min(s.lo, v.value), s.hi = std::max(s.hi, v.value);
  s.log = s.lo > 0 && s.hi / s.lo >= 16;
  return s;
}

double ValueScale::height(double v) const {
  if (!(hi > lo)) return 0.5;
  const double h = log ? std::log(v / lo) / std::log(hi / lo) : (v - lo) / (hi - lo);
  return std::clamp(h, 0.0, 1.0);
}

std::string format_value(double v) {
  int exponent = 0;
  if (v > 0 && std::frexp(v, &exponent) == 0.5 && exponent - 1 >= 8)
    return "2^" + std::to_string(exponent - 1);
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

}  // namespace distlab::viewer
