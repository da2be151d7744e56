// playback.cpp — the two clocks, and what the trace shows at a moment (playback.hpp).
#include "playback.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace distlab::viewer {

namespace {

constexpr double kEps = 1e-9;
constexpr double kMeasuredSeconds = 10.0;  // the measured clock plays the whole trace in 10 s

// (beat, time) knots of the piecewise-linear map between the clocks: beat s - 1 at the start of
// step s, the last beat at the end of the trace; both coordinates non-decreasing.
std::vector<std::pair<double, double>> knots(const TraceModel& m) {
  std::vector<std::pair<double, double>> k;
  const double last = last_beat(m);
  for (const auto& f : m.steps) {
    if (f.step < 1 || f.step - 1 >= last) continue;
    const double beat = f.step - 1;
    const double t = std::clamp(f.ts, m.t_begin, m.t_end);
    if (!k.empty() && beat <= k.back().first) continue;  // a repeated step keeps the first
    k.emplace_back(beat, k.empty() ? t : std::max(t, k.back().second));
  }
  if (k.empty() || k.front().first > 0) k.insert(k.begin(), {0.0, m.t_begin});
  if (k.back().first < last) k.emplace_back(last, std::max(m.t_end, k.back().second));
  return k;
}

double lerp(double a, double b, double f) { return a + (b - a) * f; }

}  // namespace

const char* to_string(Clock c) { return c == Clock::steps ? "steps" : "measured"; }

int last_beat(const TraceModel& model) { return std::max(1, model.max_step()); }

double time_at_beat(const TraceModel& model, double beat) {
  const auto k = knots(model);
  if (beat <= k.front().first) return k.front().second;
  for (std::size_t i = 1; i < k.size(); ++i)
    if (beat <= k[i].first) {
      const double span = k[i].first - k[i - 1].first;
      return lerp(k[i - 1].second, k[i].second, span > 0 ? (beat - k[i - 1].first) / span : 1.0);
    }
  return k.back().second;
}

double beat_at_time(const TraceModel& model, double t_us) {
  const auto k = knots(model);
  if (t_us <= k.front().second) return k.front().first;
  for (std::size_t i = 1; i < k.size(); ++i)
    if (t_us < k[i].second || (i + 1 == k.size() && t_us <= k[i].second)) {
      const double span = k[i].second - k[i - 1].second;
      return lerp(k[i - 1].first, k[i].first, span > 0 ? (t_us - k[i - 1].second) / span : 0.0);
    }
  return k.back().first;
}

// ---- Playback -------------------------------------------------------------------------------

void Playback::reset(const TraceModel& model) {
  playing = false;
  position_ = clock == Clock::steps ? 0.0 : model.t_begin;
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
    position_ += (model.t_end - model.t_begin) * speed * wall_seconds / kMeasuredSeconds;
    if (position_ >= model.t_end) position_ = model.t_end, playing = false;
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
  t_us = std::clamp(t_us, model.t_begin, model.t_end);
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
  m.step = static_cast<int>(std::floor(m.beat + kEps));
  return m;
}

// ---- what the moment shows ------------------------------------------------------------------

std::vector<InFlight> in_flight(const TraceModel& model, const Moment& at) {
  std::vector<InFlight> out;
  const double whole = std::floor(at.beat + kEps);
  const bool between = at.beat - whole > kEps;  // steps clock: strictly between two steps
  for (std::size_t i = 0; i < model.messages.size(); ++i) {
    const Message& m = model.messages[i];
    double progress = -1;
    if (at.clock == Clock::steps && m.step >= 0) {
      if (between && m.step == static_cast<int>(whole) + 1) progress = at.beat - whole;
    } else if (m.send_time <= at.time_us && at.time_us < m.arrival) {
      const double d = m.arrival - m.send_time;
      progress = d > 0 ? (at.time_us - m.send_time) / d : 0.0;
    }
    if (progress >= 0) out.push_back({static_cast<std::uint32_t>(i), std::clamp(progress, 0.0, 1.0)});
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
    const bool arrived = at.clock == Clock::steps && m.step >= 0 ? m.step <= at.step : m.arrival <= at.time_us;
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
  return at.clock == Clock::steps ? state_at_step(model, at.step) : state_at_time(model, at.time_us);
}

std::vector<MemorySample> memory_at(const TraceModel& model, const Moment& at) {
  std::vector<MemorySample> out(model.ranks.size());
  for (std::size_t r = 0; r < model.memory.size() && r < out.size(); ++r) {
    const auto& samples = model.memory[r];
    auto it = std::upper_bound(samples.begin(), samples.end(), at.time_us,
                               [](double t, const MemorySample& s) { return t < s.ts; });
    if (it != samples.begin()) out[r] = *std::prev(it);
    out[r].ts = at.time_us;
  }
  return out;
}

}  // namespace distlab::viewer
