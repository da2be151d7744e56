// timeline_lod.hpp — what the Timeline panel draws, decided without ImGui: which spans of a lane
// fall in the view, which are too small to draw and merge into one block (as Tracy does), which
// messages get a flow arrow, and the ruler's ticks.
//
// The index (built once per trace) splits each lane's spans by nesting depth. On one lane spans
// nest strictly, so the spans of one depth never overlap: sorted by start they are sorted by end
// too, and the spans in a view [t0, t1] are one contiguous range found by two binary searches
// (end >= t0, start <= t1). An outer span that started long before t0 is found at its depth like
// any other; no span outside the view is touched.
//
// lane_draw_items() then walks each depth's range. A span narrower than kMinSpanPx starts a
// merged run, and one more binary search jumps the run over every span that ends within
// kMinSpanPx of the run's end; a frame costs O(pixels x log spans) per lane, however many spans
// the view holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

inline constexpr float kMinSpanPx = 3.0f;  // narrower spans merge with their neighbours

// The view's time window mapped onto `width` pixels.
struct ViewWindow {
  double t0 = 0, t1 = 1;  // microseconds
  float width = 1;        // pixels
  double px_per_us() const { return width / (t1 - t0); }
  double x(double t) const { return (t - t0) * px_per_us(); }
  double time_at(double x) const { return t0 + x / px_per_us(); }
};

// One thing to draw on a lane: a span, or a merged run of `count` spans of one depth.
struct DrawItem {
  std::uint32_t span = 0;   // the span, or the run's first span (index into TraceModel::spans)
  std::uint32_t last = 0;   // the run's last span (== span for one span)
  std::uint32_t count = 1;  // 1: one span; more: a merged run
  float x0 = 0, x1 = 0;     // pixels from the view's left edge, clamped just outside [0, width]
  int depth = 0;            // 0 = outermost
  bool merged() const { return count > 1; }
};

class TimelineIndex {
 public:
  TimelineIndex() = default;
  explicit TimelineIndex(const TraceModel& model);

  int lane_depth(std::uint32_t lane) const {
    return static_cast<int>(lanes_[lane].by_depth.size());
  }
  // The spans of one lane at one depth, by start (and so by end).
  const std::vector<std::uint32_t>& spans_at(std::uint32_t lane, int depth) const {
    return lanes_[lane].by_depth[depth];
  }
  // True when every span at that depth is a deliver span (the panel draws such a row thin).
  bool deliver_row(std::uint32_t lane, int depth) const { return lanes_[lane].deliver_only[depth]; }
  int depth_of(std::uint32_t span) const { return depth_[span]; }

  // The message a span belongs to: its `msg` arg, the message's send or deliver span, or the
  // recv span around a message's deliver span. -1 when none.
  int message_of_span(std::uint32_t span) const { return span_message_[span]; }

  // The messages with either end (send_time, arrival) in [t0, t1], each once, into `out`.
  // Returns false, leaving `out` partial, when there are more than `cap`.
  bool messages_in_view(const TraceModel& model, double t0, double t1, std::size_t cap,
                        std::vector<std::uint32_t>& out) const;

 private:
  struct LaneIndex {
    std::vector<std::vector<std::uint32_t>> by_depth;
    std::vector<bool> deliver_only;
  };
  std::vector<LaneIndex> lanes_;
  std::vector<std::int32_t> depth_;         // per span
  std::vector<std::int32_t> span_message_;  // per span, -1 when none
  std::vector<std::uint32_t> by_arrival_;   // message indices by arrival
};

// Appends the draw items of one lane in the view, depth by depth, each depth left to right.
void lane_draw_items(const TraceModel& model, const TimelineIndex& index, std::uint32_t lane,
                     const ViewWindow& view, std::vector<DrawItem>& out);

// ---- view range -----------------------------------------------------------------------------

struct TimeRange {
  double begin = 0, end = 0;
};
// The spans' extent with a 2% margin each side (the trace's extent when there are no spans;
// 1 us around a trace with no extent). Linear in the spans: call it to fit, not every frame.
TimeRange fit_range(const TraceModel& model);
// `r` scaled by `factor` (< 1 zooms in) around `anchor`, which keeps its place on screen; the
// width stays within [min_width, max_width].
TimeRange zoom_around(TimeRange r, double anchor, double factor, double min_width,
                      double max_width);

// ---- ruler ----------------------------------------------------------------------------------

// Ticks every `step` microseconds (1, 2 or 5 times a power of ten), at least `min_px` apart;
// labels are times from `origin` (the trace start) in one unit chosen by their size.
struct RulerTicks {
  double step = 1;   // microseconds between ticks
  double first = 0;  // the first tick at or after the view's start
  const char* unit = "us";
  double unit_us = 1;  // microseconds per unit
  int decimals = 0;    // enough to tell neighbouring ticks apart
};
RulerTicks ruler_ticks(const ViewWindow& view, double origin, float min_px);
std::string tick_label(const RulerTicks& ticks, double t, double origin);  // "1.5 ms"

// A duration with three significant digits: "731 ns", "16.7 us", "1.25 ms", "2.00 s".
std::string format_duration(double us);

}  // namespace distlab::viewer
