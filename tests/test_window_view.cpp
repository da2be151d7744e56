// Window accesses in the viewer's model (schema 4): trace_model.hpp's load and store spans and
// WindowAccess list (never messages), playback.hpp's accesses in progress, stats.hpp's bytes
// loaded and stored per rank, and caption.hpp's words for a step of them.
#include "catch.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "core/trace/writer.hpp"
#include "viewer/model/caption.hpp"
#include "viewer/model/playback.hpp"
#include "viewer/model/stats.hpp"
#include "window_trace.hpp"

using namespace distlab::viewer;
using Catch::Contains;

namespace {

// window_trace.hpp's run, through the writer and the viewer's loader.
const TraceModel& windows() {
  static const TraceModel m = [] {
    distlab::TraceInfo info;
    info.lesson = "99_windows";
    info.world.size = 3;
    info.verified = true;
    return parse_trace_model(distlab::trace_json(info, distlab::test::window_logs()));
  }();
  return m;
}

Moment measured(double t_us) {
  Moment at;
  at.clock = Clock::measured;
  at.time_us = t_us;
  at.beat = beat_at_time(windows(), t_us);
  return at;
}

Moment on_beat(double beat) {
  Moment at;
  at.beat = beat;
  at.time_us = time_at_beat(windows(), beat);
  at.step = step_id_at_beat(windows(), static_cast<int>(beat + 1e-9));
  return at;
}

// Which accesses are under way, as "r<rank> <load|store> r<owner> <percent>" lines.
std::vector<std::string> under_way(const Moment& at) {
  std::vector<std::string> out;
  for (const InProgress& p : accesses_in_progress(windows(), at)) {
    const WindowAccess& w = windows().accesses[p.access];
    out.push_back("r" + std::to_string(w.rank) + (w.store ? " store r" : " load r") +
                  std::to_string(w.owner) + " " +
                  std::to_string(static_cast<int>(p.progress * 100 + 0.5)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("viewer: window accesses load as load and store spans, never as messages",
          "[viewer][window]") {
  const TraceModel& m = windows();
  REQUIRE(m.world_size() == 3);
  CHECK(m.messages.size() == 1);  // the one message; no access became one
  int loads = 0, stores = 0;
  for (const Span& s : m.spans) {
    loads += s.kind == SpanKind::load;
    stores += s.kind == SpanKind::store;
  }
  CHECK(loads == 7);
  CHECK(stores == 4);
  REQUIRE(m.accesses.size() == 11);
  for (std::size_t i = 1; i < m.accesses.size(); ++i)
    CHECK(m.accesses[i - 1].start <= m.accesses[i].start);
  // r1's late load: its owner, bytes, step and chunks, on its recv lane.
  const WindowAccess& late = m.accesses.back();
  CHECK(late.rank == 1);
  CHECK(late.owner == 0);
  CHECK_FALSE(late.store);
  CHECK(late.bytes == 4096);
  CHECK(late.step == 4);
  CHECK(m.str(late.buffer) == "data");
  CHECK(late.chunk == 1);
  CHECK(late.chunk_end == 2);
  CHECK(late.start == 50.0);
  CHECK(late.end == 55.0);
  const Span& span = m.spans[static_cast<std::size_t>(late.span)];
  CHECK(span.kind == SpanKind::load);
  CHECK(m.lanes[span.lane].tid == 3);
  REQUIRE(m.args(span));
  CHECK(m.args(span)->window == 0);
  CHECK(m.args(span)->peer == -1);
  // The steps clock has a beat for each step, window-only ones included, each starting with its
  // first access.
  CHECK(m.step_ids == std::vector<int>{1, 2, 3, 4});
  CHECK(m.beat_times == std::vector<double>{10, 30, 40, 50, 55});
  CHECK(m.max_step() == 4);
}

TEST_CASE("viewer: the window accesses in progress at a moment, on either clock",
          "[viewer][window][playback]") {
  // Measured: start <= t < end, progress along each.
  CHECK(under_way(measured(15)) == std::vector<std::string>{"r0 load r1 50", "r0 load r2 30",
                                                            "r1 load r0 30", "r1 load r2 50",
                                                            "r2 load r0 50", "r2 load r1 30"});
  CHECK(under_way(measured(25)).empty());
  CHECK(under_way(measured(32)) ==
        std::vector<std::string>{"r0 store r0 40", "r1 store r1 40", "r2 store r2 40"});
  CHECK(under_way(measured(43)) == std::vector<std::string>{"r2 store r0 50"});
  CHECK(in_flight(windows(), measured(43)).size() == 1);  // the message beside it
  CHECK(under_way(measured(55)).empty());                 // an access ends at its end
  // Steps: the accesses of step ceil(beat) while between steps, none on a whole beat.
  CHECK(under_way(on_beat(0.5)).size() == 6);
  CHECK(under_way(on_beat(0.5)).front() == "r0 load r1 50");
  CHECK(in_flight(windows(), on_beat(0.5)).empty());  // no message in step 1
  CHECK(under_way(on_beat(1.0)).empty());
  CHECK(under_way(on_beat(3.25)) == std::vector<std::string>{"r1 load r0 25"});
}

TEST_CASE("viewer: Stats counts bytes loaded and stored per rank apart from the messages",
          "[viewer][window][stats]") {
  const auto w = window_totals(windows());
  REQUIRE(w.size() == 3);
  CHECK(w[0].bytes_loaded == 8192);
  CHECK(w[0].loads == 2);
  CHECK(w[0].bytes_stored == 1024);
  CHECK(w[0].stores == 1);
  CHECK(w[1].bytes_loaded == 12288);
  CHECK(w[1].loads == 3);
  CHECK(w[1].bytes_stored == 1024);
  CHECK(w[2].bytes_loaded == 8192);
  CHECK(w[2].bytes_stored == 1536);
  CHECK(w[2].stores == 2);
  // The messages' traffic has only the message.
  const auto links = link_totals(windows());
  REQUIRE(links.size() == 1);
  CHECK(links[0].src == 0);
  CHECK(links[0].dst == 1);
  CHECK(links[0].bytes == 64);
  // A trace without window accesses has no such table.
  CHECK(window_totals(TraceModel{}).empty());
}

TEST_CASE("viewer: the caption of a step of window accesses speaks of loads and stores",
          "[viewer][window][caption]") {
  const TraceModel& m = windows();
  CHECK(caption_at(m, on_beat(1)).line() ==
        "step 1 of 4: no messages; every rank loads 4.00 KiB from every other rank's window");
  CHECK(caption_at(m, on_beat(2)).line() ==
        "step 2 of 4: no messages; every rank stores 1.00 KiB into its own window");
  CHECK(caption_at(m, on_beat(3.5)).line() ==
        "step 4 of 4: no messages; r1 loads 4.00 KiB from r0's window");
  // A message and a window access in one step: the message's sentence, then the access.
  const Caption mixed = caption_at(m, on_beat(3));
  CHECK_THAT(mixed.flow, Contains("r0 sends"));
  CHECK_THAT(mixed.flow, Contains("; and through windows, r2 stores 512 B into r0's window"));
  CHECK(mixed.collective.empty());
  // --describe lists the accesses under way.
  CHECK_THAT(describe(m, on_beat(0.5)),
             Contains("window accesses: 6\n  r0 loads from r1's window"));
  CHECK_THAT(describe(m, on_beat(1.5)),
             Contains("r0 stores into its own window  1.00 KiB  50% done"));
}
