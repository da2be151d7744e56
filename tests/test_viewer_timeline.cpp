// test_viewer_timeline.cpp — the Timeline's culling and merging (viewer/model/timeline_lod.hpp)
// on hand-built models, then the Timeline and Playback panels drawn headless on every example
// trace and driven through ImGui's io: wheel zoom, drag pan, click to select, buttons.
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <vector>

#include "imgui_headless.hpp"
#include "viewer/app/colors.hpp"
#include "viewer/model/overlap.hpp"
#include "viewer/model/timeline_lod.hpp"

using namespace distlab::viewer;
using distlab::testing::draw_panel_frame;
using distlab::testing::example_trace;
using distlab::testing::HeadlessImGui;

namespace {

Span span(double start, double dur, SpanKind kind = SpanKind::compute) {
  Span s;
  s.start = start;
  s.dur = dur;
  s.kind = kind;
  return s;
}

// One rank; lane l holds lanes[l], sorted by start, outermost first, as the loader leaves them.
TraceModel model_of(std::vector<std::vector<Span>> lanes) {
  TraceModel m;
  m.ranks.push_back(Rank{1, "rank 0", 1, {}});
  m.t_begin = 1e300, m.t_end = -1e300;
  for (std::uint32_t l = 0; l < lanes.size(); ++l) {
    auto& spans = lanes[l];
    std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.dur > b.dur;
    });
    Lane lane;
    lane.rank = 0;
    lane.tid = static_cast<int>(l) + 1;
    lane.span_begin = static_cast<std::uint32_t>(m.spans.size());
    for (Span s : spans) {
      s.lane = l;
      m.spans.push_back(s);
      m.t_begin = std::min(m.t_begin, s.start), m.t_end = std::max(m.t_end, s.end());
    }
    lane.span_end = static_cast<std::uint32_t>(m.spans.size());
    m.lanes.push_back(lane);
    m.ranks[0].lanes.push_back(l);
  }
  return m;
}

std::vector<DrawItem> items_of(const TraceModel& m, const TimelineIndex& index, double t0,
                               double t1, float width, std::uint32_t lane = 0) {
  std::vector<DrawItem> out;
  lane_draw_items(m, index, lane, ViewWindow{t0, t1, width}, out);
  return out;
}

std::uint32_t total_count(const std::vector<DrawItem>& items) {
  return std::accumulate(items.begin(), items.end(), 0u,
                         [](std::uint32_t n, const DrawItem& d) { return n + d.count; });
}

}  // namespace

// ---- timeline_lod: pure ---------------------------------------------------------------------

TEST_CASE("timeline lod: spans in the view come out, spans outside it do not", "[timeline]") {
  std::vector<Span> spans;
  for (int k = 0; k < 10; ++k) spans.push_back(span(10.0 * k, 5));  // [0,5) [10,15) ... [90,95)
  const TraceModel m = model_of({spans});
  const TimelineIndex index(m);
  const auto items = items_of(m, index, 26, 62, 720);  // 20 px per us: every span is 100 px wide
  REQUIRE(items.size() == 4);
  for (std::size_t k = 0; k < items.size(); ++k) {
    const Span& s = m.spans[items[k].span];
    CHECK(s.start == Approx(30.0 + 10 * k));
    CHECK(items[k].count == 1);
    CHECK_FALSE(items[k].merged());
    CHECK(items[k].depth == 0);
    CHECK(items[k].x0 == Approx((s.start - 26) * 20));
  }
  CHECK(items[3].x1 == Approx(724));  // [60, 65) runs past the view's end (62): clamped 4 px out
  CHECK(items_of(m, index, 96, 200, 500).empty());
  CHECK(items_of(m, index, -50, -1, 500).empty());
  CHECK(items_of(m, index, 5.5, 9.5, 500).empty());  // in the gap between two spans
}

TEST_CASE("timeline lod: tiny neighbouring spans merge into one block with their count",
          "[timeline]") {
  std::vector<Span> spans;
  for (int k = 0; k < 1000; ++k) spans.push_back(span(100 + 0.2 * k, 0.1));  // [100, 300)
  spans.push_back(span(400, 100));                                           // wide: alone
  for (int k = 0; k < 10; ++k) spans.push_back(span(600 + k, 0.5));          // another cluster
  const TraceModel m = model_of({spans});
  const TimelineIndex index(m);

  // 1 px per us: min 3 us; the 0.1 us spans 0.1 us apart are one block.
  const auto far = items_of(m, index, 0, 1000, 1000);
  REQUIRE(far.size() == 3);
  CHECK(far[0].merged());
  CHECK(far[0].count == 1000);
  CHECK(m.spans[far[0].span].start == Approx(100));
  CHECK(m.spans[far[0].last].end() == Approx(299.9));
  CHECK(far[0].x0 == Approx(100));
  CHECK(far[0].x1 == Approx(299.9));
  CHECK(far[1].count == 1);
  CHECK(m.spans[far[1].span].start == Approx(400));
  CHECK(far[2].merged());
  CHECK(far[2].count == 10);
  CHECK(total_count(far) == 1011);

  // Zoomed onto 1 us: the spans are 100 px wide and come one by one.
  const auto near = items_of(m, index, 100, 101, 1000);
  REQUIRE(near.size() == 6);  // starts 100.0, 100.2, ... 101.0 (touching the view's end)
  for (const DrawItem& d : near) CHECK(d.count == 1);

  // A million 1 ns spans on 1000 px: a bounded number of blocks, every span counted once.
  std::vector<Span> dense;
  dense.reserve(1'000'000);
  for (int k = 0; k < 1'000'000; ++k) dense.push_back(span(k * 0.002, 0.001));
  const TraceModel big = model_of({dense});
  const TimelineIndex big_index(big);
  const auto blocks = items_of(big, big_index, 0, 2000, 1000);
  CHECK(blocks.size() <= 1000 / kMinSpanPx + 1);
  CHECK(total_count(blocks) == 1'000'000);
}

TEST_CASE("timeline lod: small spans with gaps wider than the merge distance stay apart",
          "[timeline]") {
  std::vector<Span> spans;
  for (int k = 0; k < 5; ++k) spans.push_back(span(10.0 * k, 1));  // 1 px wide, 9 px apart
  const TraceModel m = model_of({spans});
  const TimelineIndex index(m);
  const auto items = items_of(m, index, 0, 100, 100);
  REQUIRE(items.size() == 5);
  for (const DrawItem& d : items) {
    CHECK(d.count == 1);
    CHECK(d.x1 - d.x0 >= 1.0f);  // a lone small span keeps a pixel
  }
}

TEST_CASE("timeline lod: a long span that started before the view is drawn, with what it holds",
          "[timeline]") {
  std::vector<Span> spans{span(0, 1000)};                                               // the phase
  for (int k = 0; k < 100; ++k) spans.push_back(span(10.0 * k, 5, SpanKind::compute));  // its steps
  const TraceModel m = model_of({spans});
  const TimelineIndex index(m);
  const auto items = items_of(m, index, 500.5, 501, 800);
  REQUIRE(items.size() == 2);
  CHECK(items[0].depth == 0);
  CHECK(m.spans[items[0].span].start == 0);
  CHECK(items[0].x0 <= 0);
  CHECK(items[0].x1 >= 800);
  CHECK(items[1].depth == 1);
  CHECK(m.spans[items[1].span].start == 500);
  // Past the children, only the phase.
  const auto late = items_of(m, index, 995.5, 999, 800);
  REQUIRE(late.size() == 1);
  CHECK(late[0].depth == 0);
}

TEST_CASE("timeline lod: nesting depth is the number of spans still open", "[timeline]") {
  //  A [0,100)  B [10,50)  C [20,30)  D [60,90)  E [60,70)  F [200,210)
  const TraceModel m = model_of(
      {{span(0, 100), span(10, 40), span(20, 10), span(60, 30), span(60, 10), span(200, 10)}});
  const TimelineIndex index(m);
  CHECK(index.lane_depth(0) == 3);
  auto depth_at = [&](double start, double dur) {
    for (std::uint32_t i = 0; i < m.spans.size(); ++i)
      if (m.spans[i].start == start && m.spans[i].dur == dur) return index.depth_of(i);
    return -1;
  };
  CHECK(depth_at(0, 100) == 0);
  CHECK(depth_at(10, 40) == 1);
  CHECK(depth_at(20, 10) == 2);
  CHECK(depth_at(60, 30) == 1);
  CHECK(depth_at(60, 10) == 2);
  CHECK(depth_at(200, 10) == 0);
  const auto items = items_of(m, index, 0, 250, 2500);  // 10 px per us: nothing merges
  REQUIRE(items.size() == 6);
  for (const DrawItem& d : items) CHECK(d.depth == index.depth_of(d.span));
  // Each depth's spans are sorted by start and never overlap.
  for (int d = 0; d < index.lane_depth(0); ++d) {
    const auto& ids = index.spans_at(0, d);
    for (std::size_t k = 1; k < ids.size(); ++k)
      CHECK(m.spans[ids[k - 1]].end() <= m.spans[ids[k]].start);
  }
}

TEST_CASE("timeline lod: messages with an end in view, spans mapped to their message",
          "[timeline]") {
  // Lane 0 sends, lane 1 receives: a recv span holds the deliver span that carries the msg id.
  TraceModel m = model_of(
      {{span(10, 2, SpanKind::send), span(50, 2, SpanKind::send), span(90, 2, SpanKind::send)},
       {span(15, 10, SpanKind::recv), span(24, 0.5, SpanKind::deliver),
        span(60, 50, SpanKind::recv), span(109, 0.5, SpanKind::deliver)}});
  // Message ids on the sends and delivers, as a distlab trace has them.
  m.span_args.resize(4);
  m.span_args[0].msg = 7, m.span_args[1].msg = 8, m.span_args[2].msg = 7, m.span_args[3].msg = 8;
  m.spans[0].args = 0, m.spans[1].args = 1;  // sends at 10 and 50
  m.spans[4].args = 2,
  m.spans[6].args = 3;  // delivers at 24 and 109 (recv, deliver, recv, deliver)
  REQUIRE(m.spans[4].kind == SpanKind::deliver);
  REQUIRE(m.spans[6].kind == SpanKind::deliver);
  Message a, b, c;
  a.id = 7, a.send_time = 10, a.arrival = 24.5, a.send_span = 0, a.deliver_span = 4;
  b.id = 8, b.send_time = 50, b.arrival = 109.5, b.send_span = 1, b.deliver_span = 6;
  c.id = 9, c.send_time = 90, c.arrival = 95, c.send_span = 2;  // no deliver span, no msg arg
  m.messages = {a, b, c};
  const TimelineIndex index(m);

  CHECK(index.message_of_span(0) == 0);
  CHECK(index.message_of_span(1) == 1);
  CHECK(index.message_of_span(2) == 2);  // by send_span alone
  CHECK(index.message_of_span(3) == 0);  // the recv around message 7's deliver
  CHECK(index.message_of_span(4) == 0);
  CHECK(index.message_of_span(5) == 1);
  CHECK(index.message_of_span(6) == 1);

  std::vector<std::uint32_t> out;
  CHECK(index.messages_in_view(m, 20, 30, 10, out));  // only message 7's arrival is in view
  CHECK(out == std::vector<std::uint32_t>{0});
  out.clear();
  CHECK(index.messages_in_view(m, 60, 100, 10, out));  // 8 crosses the view: neither end in it
  CHECK(out == std::vector<std::uint32_t>{2});
  out.clear();
  CHECK(index.messages_in_view(m, 0, 200, 10, out));
  std::sort(out.begin(), out.end());
  CHECK(out == std::vector<std::uint32_t>{0, 1, 2});
  out.clear();
  CHECK_FALSE(index.messages_in_view(m, 0, 200, 2, out));  // over the cap
}

TEST_CASE("timeline lod: zoom keeps the anchor in place, fit shows everything", "[timeline]") {
  const TimeRange r = zoom_around({100, 200}, 125, 0.5, 0.01, 1e9);
  CHECK(r.end - r.begin == Approx(50));
  CHECK((125 - r.begin) / (r.end - r.begin) == Approx(0.25));  // the anchor keeps its place
  const TimeRange out = zoom_around({100, 200}, 150, 4, 0.01, 300);
  CHECK(out.end - out.begin == Approx(300));  // clamped
  CHECK(zoom_around({100, 100.02}, 100.01, 0.01, 0.01, 1e9).end -
            zoom_around({100, 100.02}, 100.01, 0.01, 0.01, 1e9).begin ==
        Approx(0.01));

  TraceModel m;
  m.t_begin = 1000, m.t_end = 3000;
  const TimeRange f = fit_range(m);
  CHECK(f.begin < 1000);
  CHECK(f.end > 3000);
  CHECK(f.end - f.begin < 2200);

  // Setup before the first span (allocations, untraced warm-up) is left out.
  m.lanes.push_back(Lane{});
  m.spans.push_back(Span{2000, 500});
  m.lanes[0].span_begin = 0, m.lanes[0].span_end = 1;
  const TimeRange g = fit_range(m);
  CHECK(g.begin < 2000);
  CHECK(g.begin > 1980);
  CHECK(g.end > 2500);
  CHECK(g.end < 2520);
}

TEST_CASE("timeline lod: ruler ticks are 1-2-5 steps with readable labels", "[timeline]") {
  // 1000 us on 1000 px, labels 80 px apart: a tick every 100 us, in ms (the labels reach 1 ms).
  const RulerTicks t = ruler_ticks(ViewWindow{0, 1000, 1000}, 0, 80);
  CHECK(t.step == Approx(100));
  CHECK(std::string(t.unit) == "ms");
  CHECK(tick_label(t, 500, 0) == "0.5 ms");
  CHECK(tick_label(t, 0, 0) == "0.0 ms");
  // 60 us on 1200 px: 5 us apart, in us.
  const RulerTicks u = ruler_ticks(ViewWindow{10, 70, 1200}, 10, 80);
  CHECK(u.step == Approx(5));
  CHECK(std::string(u.unit) == "us");
  CHECK(u.first == Approx(10));
  CHECK(tick_label(u, 35, 10) == "25 us");
  // 20 s on 1000 px: every 2 s.
  const RulerTicks s = ruler_ticks(ViewWindow{0, 20e6, 1000}, 0, 80);
  CHECK(s.step == Approx(2e6));
  CHECK(tick_label(s, 4e6, 0) == "4 s");
  // The first tick is at or after the view's start, on the step grid from the origin.
  const RulerTicks g = ruler_ticks(ViewWindow{1234, 1334, 1000}, 1000, 80);
  CHECK(g.first >= 1234);
  CHECK(std::fmod(g.first - 1000, g.step) == Approx(0).margin(1e-9));

  CHECK(format_duration(0.731) == "731 ns");
  CHECK(format_duration(16.725) == "16.7 us");
  CHECK(format_duration(1250) == "1.25 ms");
  CHECK(format_duration(2e6) == "2.00 s");
}

// ---- the panels, headless -------------------------------------------------------------------

namespace {

std::vector<std::string> example_traces() {
  std::vector<std::string> out;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(DISTLAB_SOURCE_DIR) + "/traces/examples"))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A press on one frame and a release on the next: ImGui's click.
void click(HeadlessImGui& gui, PanelId panel, Document& doc, ImVec2 at) {
  ImGuiIO& io = ImGui::GetIO();
  io.MousePos = at;
  draw_panel_frame(gui, panel,
                   doc);  // hover first: ImGui picks the hovered window from the last frame
  io.MouseDown[0] = true;
  draw_panel_frame(gui, panel, doc);
  io.MouseDown[0] = false;
  draw_panel_frame(gui, panel, doc);
}

bool drew_colour(ImU32 colour) {
  const ImDrawData* data = ImGui::GetDrawData();
  for (int l = 0; l < data->CmdListsCount; ++l)
    for (const ImDrawVert& v : data->CmdLists[l]->VtxBuffer)
      if (v.col == colour) return true;
  return false;
}

// The top of the first lane row: below the window's title bar, its padding and the ruler.
float lanes_top() {
  return 2 * ImGui::GetFrameHeight() + ImGui::GetStyle().WindowPadding.y + 2;
}

}  // namespace

TEST_CASE("timeline panel: every example trace draws its lanes at several moments", "[timeline]") {
  HeadlessImGui gui;
  for (const auto& name : example_traces()) {
    INFO(name);
    Document doc = open_document(example_trace(name));
    REQUIRE(doc.ok());
    for (const double beat :
         {0.0, 0.5 * last_beat(doc.model), static_cast<double>(last_beat(doc.model))}) {
      doc.playback.seek_beat(doc.model, beat);
      const int timeline = draw_panel_frame(gui, PanelId::timeline, doc);
      CHECK(timeline > 400);
      CHECK_FALSE(doc.timeline.fit);           // the first frame fitted the view to the whole trace
      for (const Span& s : doc.model.spans) {  // every span in view
        CHECK(doc.timeline.view_begin <= s.start);
        CHECK(doc.timeline.view_end >= s.end());
      }
      CHECK(draw_panel_frame(gui, PanelId::playback, doc) > 100);
    }
    // Zoomed onto each span of the first message, its send and its delivery are drawn in their
    // own colours (at the fitted view they may be too small, merged into neutral blocks; a
    // delivery of a few bytes is a sliver of a send that waited long for its receive): their
    // kind's, or their group's when the message was sent in one (lesson 14's tp, pp, dp).
    // The first message between the lowest ranks: their lanes are on screen (lesson 14's 8 ranks'
    // lanes do not all fit the window).
    REQUIRE_FALSE(doc.model.messages.empty());
    const Message& msg = *std::min_element(doc.model.messages.begin(), doc.model.messages.end(),
                                           [](const Message& a, const Message& b) {
                                             return std::max(a.src, a.dst) < std::max(b.src, b.dst);
                                           });
    const auto zoomed_draws = [&](std::int32_t span, SpanKind kind) {
      const Span& s = doc.model.spans[std::size_t(span)];
      doc.timeline.view_begin = s.start - 2, doc.timeline.view_end = s.end() + 2;
      draw_panel_frame(gui, PanelId::timeline, doc);
      return drew_colour(msg.group ? group_color(doc.model.str(msg.group)) : span_color(kind));
    };
    if (msg.send_span >= 0) CHECK(zoomed_draws(msg.send_span, SpanKind::send));
    if (msg.deliver_span >= 0) CHECK(zoomed_draws(msg.deliver_span, SpanKind::deliver));
  }
}

TEST_CASE("timeline panel: communication hidden under compute is hatched, and counted per rank",
          "[timeline]") {
  HeadlessImGui gui;
  // Lesson 16: its nonblocking all-reduces run under the backward phases.
  Document doc = open_document(example_trace("16_overlap_bucketing"));
  REQUIRE(doc.ok());
  const OverlapIndex overlap = index_overlap(doc.model);
  REQUIRE(overlap.shown);
  REQUIRE_FALSE(overlap.hidden[0].empty());
  const auto zoomed_onto = [&](std::pair<double, double> t) {
    doc.timeline.view_begin = t.first, doc.timeline.view_end = t.second;
    draw_panel_frame(gui, PanelId::timeline, doc);
  };
  // Onto rank 0's first stretch of hidden communication: hatched, and the counter in its header.
  zoomed_onto(overlap.hidden[0].front());
  CHECK(drew_colour(kHiddenHatch));
  CHECK(drew_colour(kHiddenText));
  // Onto a stretch of communication under no compute (no buckets: the all-reduce after the
  // backward): no hatch.
  std::pair<double, double> bare{0, 0};
  for (const auto& c : overlap.comm[0])
    if (distlab::intersection({c}, overlap.work[0]).empty() &&
        c.second - c.first > bare.second - bare.first)
      bare = c;
  REQUIRE(bare.second > bare.first);
  zoomed_onto(bare);
  CHECK_FALSE(drew_colour(kHiddenHatch));
  // A lesson with no nonblocking operation: neither the hatch nor the counter.
  Document plain = open_document(example_trace("02_scatter_gather"));
  REQUIRE(plain.ok());
  draw_panel_frame(gui, PanelId::timeline, plain);
  CHECK_FALSE(drew_colour(kHiddenText));
}

TEST_CASE("timeline panel: the wheel zooms around the cursor, dragging pans, fit restores",
          "[timeline]") {
  HeadlessImGui gui;
  Document doc = open_document(example_trace("06_allreduce_sequential_ring_parallel"));
  REQUIRE(doc.ok());
  ImGuiIO& io = ImGui::GetIO();
  io.MousePos = ImVec2(800, lanes_top() + 40);
  draw_panel_frame(gui, PanelId::timeline, doc);
  const TimelineState fitted = doc.timeline;
  const double w0 = fitted.view_end - fitted.view_begin;

  io.MouseWheel = 1;  // one notch towards the trace
  draw_panel_frame(gui, PanelId::timeline, doc);
  const double w1 = doc.timeline.view_end - doc.timeline.view_begin;
  CHECK(w1 < 0.9 * w0);
  // The time under the cursor stayed: it sits at the same fraction of the view.
  const double f = w1 / w0;
  const double anchor = (doc.timeline.view_begin - f * fitted.view_begin) / (1 - f);
  const double frac = (anchor - fitted.view_begin) / w0;
  CHECK(frac > 0.35);
  CHECK(frac < 0.65);

  io.MouseWheel = -2;  // back out, past where it began
  draw_panel_frame(gui, PanelId::timeline, doc);
  CHECK(doc.timeline.view_end - doc.timeline.view_begin > w0);

  // Drag 200 px to the left: the view moves later in time, as wide as before.
  io.MouseWheel = 0;
  const double before = doc.timeline.view_begin,
               width = doc.timeline.view_end - doc.timeline.view_begin;
  io.MouseDown[0] = true;
  draw_panel_frame(gui, PanelId::timeline, doc);
  for (int k = 1; k <= 4; ++k) {
    io.MousePos = ImVec2(800 - 50.0f * k, lanes_top() + 40);
    draw_panel_frame(gui, PanelId::timeline, doc);
  }
  io.MouseDown[0] = false;
  draw_panel_frame(gui, PanelId::timeline, doc);
  CHECK(doc.timeline.view_begin > before);
  CHECK(doc.timeline.view_end - doc.timeline.view_begin == Approx(width));

  doc.timeline.fit = true;  // what the fit button sets
  draw_panel_frame(gui, PanelId::timeline, doc);
  CHECK(doc.timeline.view_begin == Approx(fitted.view_begin));
  CHECK(doc.timeline.view_end == Approx(fitted.view_end));
}

TEST_CASE("timeline panel: clicking a span selects it and its message, which is highlighted",
          "[timeline]") {
  HeadlessImGui gui;
  Document doc = open_document(example_trace("06_allreduce_sequential_ring_parallel"));
  REQUIRE(doc.ok());
  const TraceModel& m = doc.model;
  // The longest send: the view inside it, so it covers the canvas where we click.
  int k = -1;
  for (int i = 0; i < static_cast<int>(m.messages.size()); ++i)
    if (m.messages[i].send_span >= 0 &&
        (k < 0 || m.spans[m.messages[i].send_span].dur > m.spans[m.messages[k].send_span].dur))
      k = i;
  REQUIRE(k >= 0);
  const Span& send = m.spans[m.messages[k].send_span];
  auto look_inside_the_send = [&] {
    doc.timeline.fit = false;
    doc.timeline.view_begin = send.start + 0.1 * send.dur;
    doc.timeline.view_end = send.end() - 0.1 * send.dur;
  };
  look_inside_the_send();
  draw_panel_frame(gui, PanelId::timeline, doc);
  CHECK_FALSE(drew_colour(kHighlight));

  // Click down the canvas, row by row, until a send span is selected (ours, or another send in
  // the same window), and check that its message came with it.
  bool found = false;
  for (float y = lanes_top(); y < 880 && !found; y += 3) {
    look_inside_the_send();
    click(gui, PanelId::timeline, doc, ImVec2(800, y));
    const int s = doc.selection.span;
    if (s >= 0 && m.spans[s].kind == SpanKind::send) {
      found = true;
      CHECK(m.spans[s].start <= doc.timeline.view_end);
      CHECK(m.spans[s].end() >= doc.timeline.view_begin);
      REQUIRE(doc.selection.message >= 0);
      CHECK(m.messages[doc.selection.message].send_span == s);
      CHECK(m.messages[doc.selection.message].src == m.lanes[m.spans[s].lane].rank);
    }
  }
  REQUIRE(found);
  draw_panel_frame(gui, PanelId::timeline, doc);
  CHECK(drew_colour(kHighlight));  // its outline and arrow

  // A click on the ruler seeks playback to the time under the cursor.
  doc.playback.set_clock(m, Clock::measured);
  doc.playback.seek_time(m, m.t_begin);
  click(gui, PanelId::timeline, doc,
        ImVec2(800, ImGui::GetFrameHeight() + ImGui::GetStyle().WindowPadding.y + 5));
  const double t = doc.playback.moment(m).time_us;
  CHECK(t > doc.timeline.view_begin);
  CHECK(t < doc.timeline.view_end);
}

TEST_CASE("timeline panel: 100k tiny spans in view merge instead of drawing one by one",
          "[timeline]") {
  std::vector<Span> spans;
  for (int k = 0; k < 100'000; ++k)
    spans.push_back(span(k * 1.0, 0.5, k % 2 ? SpanKind::send : SpanKind::compute));
  Document doc;
  doc.model = model_of({spans});
  doc.model.ranks[0].name = "rank 0";
  doc.playback.reset(doc.model);
  HeadlessImGui gui;
  const int vertices = draw_panel_frame(gui, PanelId::timeline, doc);
  CHECK(vertices > 100);
  CHECK(vertices < 20'000);  // a rect per span would be 400 000
}

// ---- the Playback panel ---------------------------------------------------------------------

namespace {

// The centre of the k-th icon button (start, prev, play, next) in the panel's one row.
ImVec2 button_centre(int k) {
  const ImGuiStyle& style = ImGui::GetStyle();
  const float h = ImGui::GetFrameHeight(), w = std::round(h * 1.5f);
  return ImVec2(style.WindowPadding.x + k * (w + style.ItemSpacing.x) + w * 0.5f,
                h + style.WindowPadding.y + h * 0.5f);
}

}  // namespace

TEST_CASE("playback panel: its buttons step, play, pause and go back to the start", "[playback]") {
  HeadlessImGui gui;
  Document doc = open_document(example_trace("06_allreduce_sequential_ring_parallel"));
  REQUIRE(doc.ok());
  const TraceModel& m = doc.model;
  draw_panel_frame(gui, PanelId::playback, doc);
  REQUIRE(doc.playback.moment(m).beat == 0);

  click(gui, PanelId::playback, doc, button_centre(3));  // next
  CHECK(doc.playback.moment(m).beat == Approx(1));
  click(gui, PanelId::playback, doc, button_centre(3));
  CHECK(doc.playback.moment(m).beat == Approx(2));
  click(gui, PanelId::playback, doc, button_centre(1));  // previous
  CHECK(doc.playback.moment(m).beat == Approx(1));

  click(gui, PanelId::playback, doc, button_centre(2));  // play
  CHECK(doc.playback.playing);
  click(gui, PanelId::playback, doc, button_centre(2));  // pause
  CHECK_FALSE(doc.playback.playing);

  click(gui, PanelId::playback, doc, button_centre(0));  // start
  CHECK(doc.playback.moment(m).beat == 0);
  CHECK_FALSE(doc.playback.playing);

  // Play at the end starts over.
  doc.playback.seek_beat(m, last_beat(m));
  click(gui, PanelId::playback, doc, button_centre(2));
  CHECK(doc.playback.playing);
  CHECK(doc.playback.moment(m).beat == 0);
}

TEST_CASE("playback panel: draws on both clocks for every example trace", "[playback]") {
  HeadlessImGui gui;
  for (const auto& name : example_traces()) {
    INFO(name);
    Document doc = open_document(example_trace(name));
    REQUIRE(doc.ok());
    for (const Clock c : {Clock::steps, Clock::measured}) {
      doc.playback.set_clock(doc.model, c);
      doc.playback.seek_beat(doc.model, 1.5);
      CHECK(draw_panel_frame(gui, PanelId::playback, doc) > 100);
      CHECK(doc.playback.clock == c);  // drawing alone changes nothing
      CHECK_FALSE(doc.playback.playing);
    }
  }
}
