// timeline_lod.cpp — culling and merging for the Timeline panel (timeline_lod.hpp).
#include "viewer/model/timeline_lod.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

namespace distlab::viewer {

TimelineIndex::TimelineIndex(const TraceModel& model) {
  const auto& spans = model.spans;
  depth_.assign(spans.size(), 0);
  span_message_.assign(spans.size(), -1);
  std::vector<std::int32_t> parent(spans.size(), -1);

  // Depths as the loader computes Lane::depth: a span's depth is the number of spans still
  // open when it starts. The spans left open at one depth have all ended, so a depth's spans
  // never overlap.
  lanes_.resize(model.lanes.size());
  std::vector<std::uint32_t> open;
  for (std::size_t l = 0; l < model.lanes.size(); ++l) {
    LaneIndex& lane = lanes_[l];
    open.clear();
    for (std::uint32_t i = model.lanes[l].span_begin; i < model.lanes[l].span_end; ++i) {
      while (!open.empty() && spans[open.back()].end() <= spans[i].start) open.pop_back();
      const auto d = static_cast<std::int32_t>(open.size());
      depth_[i] = d;
      parent[i] = open.empty() ? -1 : static_cast<std::int32_t>(open.back());
      open.push_back(i);
      if (lane.by_depth.size() <= open.size() - 1) {
        lane.by_depth.emplace_back();
        lane.deliver_only.push_back(true);
      }
      lane.by_depth[d].push_back(i);
      if (spans[i].kind != SpanKind::deliver) lane.deliver_only[d] = false;
    }
  }

  // Spans to messages: by the `msg` arg first, then the message's own ends, then the recv
  // span around a deliver (a recv carries no msg id; the deliver inside it does).
  std::unordered_map<std::uint64_t, std::int32_t> by_id;
  by_id.reserve(model.messages.size());
  for (std::size_t k = 0; k < model.messages.size(); ++k)
    by_id.emplace(model.messages[k].id, static_cast<std::int32_t>(k));
  for (std::size_t i = 0; i < spans.size(); ++i)
    if (const SpanArgs* a = model.args(spans[i]); a && a->msg != 0)
      if (auto it = by_id.find(a->msg); it != by_id.end()) span_message_[i] = it->second;
  for (std::size_t k = 0; k < model.messages.size(); ++k) {
    const Message& m = model.messages[k];
    for (const std::int32_t s : {m.send_span, m.deliver_span})
      if (s >= 0 && static_cast<std::size_t>(s) < spans.size())
        span_message_[s] = static_cast<std::int32_t>(k);
    if (m.deliver_span >= 0 && static_cast<std::size_t>(m.deliver_span) < spans.size()) {
      const std::int32_t p = parent[m.deliver_span];
      if (p >= 0 && spans[p].kind == SpanKind::recv && span_message_[p] < 0)
        span_message_[p] = static_cast<std::int32_t>(k);
    }
  }

  by_arrival_.resize(model.messages.size());
  for (std::uint32_t k = 0; k < by_arrival_.size(); ++k) by_arrival_[k] = k;
  std::stable_sort(by_arrival_.begin(), by_arrival_.end(), [&](std::uint32_t a, std::uint32_t b) {
    return model.messages[a].arrival < model.messages[b].arrival;
  });
}

bool TimelineIndex::messages_in_view(const TraceModel& model, double t0, double t1, std::size_t cap,
                                     std::vector<std::uint32_t>& out) const {
  const auto& ms = model.messages;  // by send time
  const auto a = std::lower_bound(ms.begin(), ms.end(), t0,
                                  [](const Message& m, double t) { return m.send_time < t; });
  const auto b =
      std::upper_bound(a, ms.end(), t1, [](double t, const Message& m) { return t < m.send_time; });
  if (static_cast<std::size_t>(b - a) > cap) return false;
  for (auto it = a; it != b; ++it) out.push_back(static_cast<std::uint32_t>(it - ms.begin()));
  // Those arriving in view but sent before it (sent after it cannot arrive in it).
  const auto c = std::lower_bound(by_arrival_.begin(), by_arrival_.end(), t0,
                                  [&](std::uint32_t k, double t) { return ms[k].arrival < t; });
  const auto d = std::upper_bound(c, by_arrival_.end(), t1,
                                  [&](double t, std::uint32_t k) { return t < ms[k].arrival; });
  for (auto it = c; it != d; ++it) {
    if (ms[*it].send_time >= t0) continue;  // already counted by its send
    if (out.size() >= cap) return false;
    out.push_back(*it);
  }
  return true;
}

void lane_draw_items(const TraceModel& model, const TimelineIndex& index, std::uint32_t lane,
                     const ViewWindow& view, std::vector<DrawItem>& out) {
  if (!(view.t1 > view.t0) || view.width <= 0) return;
  const Span* spans = model.spans.data();
  const double min_us = kMinSpanPx / view.px_per_us();  // a span shorter than this merges
  constexpr double kPad = 4;                            // clamped edges stay off screen
  const double max_x = view.width + kPad;
  auto px = [&](double t) { return static_cast<float>(std::clamp(view.x(t), -kPad, max_x)); };
  auto ends_before = [&](std::uint32_t i, double t) { return spans[i].end() < t; };

  for (int d = 0; d < index.lane_depth(lane); ++d) {
    const auto& ids = index.spans_at(lane, d);
    // In view: end >= t0 (ends are sorted at one depth) and start <= t1.
    auto it = std::lower_bound(ids.begin(), ids.end(), view.t0, ends_before);
    const auto last = std::upper_bound(
        it, ids.end(), view.t1, [&](double t, std::uint32_t i) { return t < spans[i].start; });
    while (it != last) {
      const Span& s = spans[*it];
      if (s.dur >= min_us) {
        out.push_back({*it, *it, 1, px(s.start), px(s.end()), d});
        ++it;
        continue;
      }
      // A run of small spans: take every span that ends within min_us of the run's end (they
      // cannot be wider than min_us), then a small span just past that, until a wide span or a
      // gap of min_us. Each search moves the run's end on by about min_us: O(pixels) searches.
      const auto run = it;
      double run_end = s.end();
      ++it;
      while (it != last) {
        const auto next = std::lower_bound(it, last, run_end + min_us, ends_before);
        if (next != it) {
          it = next;
          run_end = spans[*(next - 1)].end();
          continue;
        }
        const Span& n = spans[*it];
        if (n.dur >= min_us || n.start - run_end >= min_us) break;
        run_end = n.end();
        ++it;
      }
      const auto count = static_cast<std::uint32_t>(it - run);
      const float x0 = px(s.start);
      // A lone small span keeps a pixel; a merged run at least kMinSpanPx, so it reads as a block.
      const float x1 = std::max(px(run_end), x0 + (count > 1 ? kMinSpanPx : 1.0f));
      out.push_back({*run, *(it - 1), count, x0, x1, d});
    }
  }
}

// ---- view range -----------------------------------------------------------------------------

TimeRange fit_range(const TraceModel& model) {
  // The spans' extent, not the trace's: setup before the first span (allocations, untraced
  // warm-up) and the report after the last would leave most of the fitted view empty.
  double begin = model.t_end, end = model.t_begin;
  for (const Span& s : model.spans) begin = std::min(begin, s.start), end = std::max(end, s.end());
  if (!(begin < end)) begin = model.t_begin, end = model.t_end;
  const double extent = end - begin;
  if (!(extent > 0)) return {begin - 0.5, begin + 0.5};
  return {begin - 0.02 * extent, end + 0.02 * extent};
}

TimeRange zoom_around(TimeRange r, double anchor, double factor, double min_width,
                      double max_width) {
  const double width = r.end - r.begin;
  if (!(width > 0)) return r;
  const double w = std::clamp(width * factor, min_width, std::max(min_width, max_width));
  const double begin = anchor - (anchor - r.begin) * (w / width);
  return {begin, begin + w};
}

// ---- ruler ----------------------------------------------------------------------------------

RulerTicks ruler_ticks(const ViewWindow& view, double origin, float min_px) {
  RulerTicks t;
  const double least = min_px / view.px_per_us();  // the smallest step that keeps ticks apart
  if (!(least > 0) || !std::isfinite(least)) return t;
  const double p = std::pow(10.0, std::floor(std::log10(least)));
  t.step = p;
  for (const double m : {2.0, 5.0, 10.0})
    if (t.step < least) t.step = p * m;
  t.first = origin + std::ceil((view.t0 - origin) / t.step) * t.step;
  // One unit for the whole ruler, by the largest label in view.
  const double largest = std::max(std::abs(view.t0 - origin), std::abs(view.t1 - origin));
  if (largest >= 1e6)
    t.unit = "s", t.unit_us = 1e6;
  else if (largest >= 1e3)
    t.unit = "ms", t.unit_us = 1e3;
  else
    t.unit = "us", t.unit_us = 1;
  t.decimals =
      std::clamp(static_cast<int>(std::ceil(-std::log10(t.step / t.unit_us) - 1e-9)), 0, 9);
  return t;
}

std::string tick_label(const RulerTicks& ticks, double t, double origin) {
  double v = (t - origin) / ticks.unit_us;
  if (std::abs(v) < 0.5 * ticks.step / ticks.unit_us) v = 0;  // no "-0.0"
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", ticks.decimals, v, ticks.unit);
  return buf;
}

std::string format_duration(double us) {
  const double a = std::abs(us);
  double v = us;
  const char* unit = "us";
  if (a < 1)
    v = us * 1e3, unit = "ns";
  else if (a >= 1e6)
    v = us / 1e6, unit = "s";
  else if (a >= 1e3)
    v = us / 1e3, unit = "ms";
  const double av = std::abs(v);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", av >= 100 || unit[0] == 'n' ? 0 : (av >= 10 ? 1 : 2), v,
                unit);
  return buf;
}

}  // namespace distlab::viewer
