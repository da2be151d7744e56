// hand_model.hpp — pieces of a TraceModel built by hand, for tests of the viewer's model.
#pragma once

#include <cstdint>
#include <string>

#include "viewer/model/trace_model.hpp"

namespace distlab::testing {

// Rank r (pid r + 1) with one lane holding one span [start, start + dur) named strings[name];
// ranks must be added in order 0, 1, ..., each right after the previous one's span.
inline void add_rank_with_span(viewer::TraceModel& m, int r, double start, double dur,
                               std::uint32_t name) {
  const auto index = static_cast<std::uint32_t>(r);
  m.ranks.push_back({r + 1, "rank " + std::to_string(r), r, {index}});
  viewer::Lane lane;
  lane.rank = r;
  lane.span_begin = static_cast<std::uint32_t>(m.spans.size());
  lane.span_end = lane.span_begin + 1;
  m.lanes.push_back(lane);
  viewer::Span s;
  s.start = start;
  s.dur = dur;
  s.lane = index;
  s.name = name;
  m.spans.push_back(s);
}

}  // namespace distlab::testing
