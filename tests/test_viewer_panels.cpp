// The Topology, Shards, Memory, Stats, Schedule and Splits panels: their logic
// (viewer/model/topology_layout.hpp, viewer/model/stats.hpp) on hand-built models and on the
// committed example traces, and the panels drawn headless (tests/imgui_headless.hpp) for every
// example at several moments.
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>

#include "core/trace/writer.hpp"
#include "imgui_headless.hpp"
#include "pipeline_trace.hpp"
#include "viewer/app/colors.hpp"
#include "viewer/app/view.hpp"
#include "viewer/model/schedule.hpp"
#include "viewer/model/splits.hpp"
#include "viewer/model/stats.hpp"
#include "viewer/model/topology_layout.hpp"
#include "window_trace.hpp"

using namespace distlab::viewer;
using distlab::pipeline::Pass;
using distlab::testing::draw_panel_frame;
using distlab::testing::example_trace;
using distlab::testing::HeadlessImGui;

namespace {

const char* const kExamples[] = {"01_send_recv",
                                 "02_scatter_gather",
                                 "03_reduce_broadcast",
                                 "04_allreduce_allgather",
                                 "06_allreduce_sequential_ring_parallel",
                                 "07_recursive_halving"};

std::int64_t message_bytes(const TraceModel& m) {
  std::int64_t b = 0;
  for (const Message& msg : m.messages)
    if (msg.src >= 0 && msg.dst >= 0) b += std::max<std::int64_t>(0, msg.bytes);
  return b;
}

// Vertices of exactly this colour in the last frame: shapes filled with it (a packet, a cell).
int vertices_of_color(ImU32 color) {
  int n = 0;
  const ImDrawData* d = ImGui::GetDrawData();
  for (int l = 0; l < d->CmdListsCount; ++l)
    for (const ImDrawVert& v : d->CmdLists[l]->VtxBuffer) n += v.col == color;
  return n;
}

int draw_at(HeadlessImGui& gui, PanelId panel, Document& doc, double beat) {
  doc.playback.seek_beat(doc.model, beat);
  return draw_panel_frame(gui, panel, doc);
}

// A ring all-reduce on n ranks over buffer "ring" (n chunks, 1000 bytes each), as the lessons
// trace it: reduce-scatter steps 1 .. n-1, then all-gather steps n .. 2n-2, 100 us apart.
TraceModel ring_model(int n) {
  TraceModel m;
  m.strings = {"", "ring"};
  m.info.buffers = {{"ring", 1000, n}};
  m.info.world_size = n;
  for (int r = 0; r < n; ++r) m.ranks.push_back({r + 1, "rank " + std::to_string(r), r, {}});
  const auto mod = [n](int v) { return ((v % n) + n) % n; };
  std::uint64_t id = 1;
  for (int s = 0; s < 2 * (n - 1); ++s) {
    const bool reduce = s < n - 1;
    for (int r = 0; r < n; ++r) {
      Message msg;
      msg.id = id++;
      msg.src = r;
      msg.dst = mod(r + 1);
      msg.bytes = 1000;
      msg.step = s + 1;
      msg.buffer = 1;
      msg.chunk = reduce ? mod(r - s) : mod(r + 1 - (s - (n - 1)));
      msg.chunk_end = msg.chunk + 1;
      msg.apply = reduce ? ApplyKind::reduce : ApplyKind::copy;
      // reduce-scatter step s: ranks r-s .. r are summed in; all-gather: every rank
      msg.contrib_mask = 0;
      for (int k = 0; k <= (reduce ? s : n - 1); ++k) msg.contrib_mask |= 1ull << mod(r - k);
      msg.contributions = reduce ? s + 1 : n;
      msg.send_time = 100.0 * s;
      msg.send_end = msg.arrival = 100.0 * s + 50;
      m.messages.push_back(msg);
    }
  }
  m.t_begin = 0;
  m.t_end = 100.0 * 2 * (n - 1);
  index_steps(m);
  return m;
}

// A ring all-gather on n ranks over buffer "ag" (n chunks of 1000 bytes): in step s + 1 rank r
// copies chunk (r - s) mod n, rank (r - s)'s data, to rank r + 1.
TraceModel all_gather_model(int n) {
  TraceModel m;
  m.strings = {"", "ag"};
  m.info.buffers = {{"ag", 1000, n}};
  for (int r = 0; r < n; ++r) m.ranks.push_back({r + 1, "rank " + std::to_string(r), r, {}});
  std::uint64_t id = 1;
  for (int s = 0; s < n - 1; ++s)
    for (int r = 0; r < n; ++r) {
      Message msg;
      msg.id = id++;
      msg.src = r;
      msg.dst = (r + 1) % n;
      msg.bytes = 1000;
      msg.step = s + 1;
      msg.buffer = 1;
      msg.chunk = ((r - s) % n + n) % n;
      msg.chunk_end = msg.chunk + 1;
      msg.apply = ApplyKind::copy;
      msg.contrib_mask = 1ull << msg.chunk;
      msg.contributions = 1;
      msg.send_time = 100.0 * s;
      msg.send_end = msg.arrival = 100.0 * s + 50;
      m.messages.push_back(msg);
    }
  m.t_end = 100.0 * (n - 1);
  index_steps(m);
  return m;
}

BufferState buffer_state(int ranks, int chunks) {
  BufferState b;
  b.chunks = chunks;
  b.cells.assign(static_cast<std::size_t>(ranks * chunks), ChunkState{});
  return b;
}

void hold(BufferState& b, int rank, int chunk, int count) {
  ChunkState& c = b.at(rank, chunk);
  c.held = true;
  c.count = count;
}

}  // namespace

// ---- topology -------------------------------------------------------------------------------

TEST_CASE("ranks sit on a circle up to 16, on a grid past it, apart and inside the box",
          "[topology]") {
  for (int n = 1; n <= 130; ++n) {
    const auto p = rank_positions(n);
    REQUIRE(static_cast<int>(p.size()) == n);
    const double r = node_radius(n);
    CHECK(r > 0);
    double closest = 1e9;
    for (int i = 0; i < n; ++i) {
      INFO("n = " << n << ", rank " << i);
      CHECK(p[i].x - r >= 0);
      CHECK(p[i].x + r <= 1);
      CHECK(p[i].y - r >= 0);
      CHECK(p[i].y + r <= 1);
      for (int j = i + 1; j < n; ++j)
        closest = std::min(closest, std::hypot(p[i].x - p[j].x, p[i].y - p[j].y));
    }
    if (n > 1) CHECK(closest >= 2 * r);  // nodes do not overlap
  }
  // Circle: one radius, rank 0 at the top, clockwise (rank 1 to the right of rank 0).
  const auto c = rank_positions(8);
  for (const Point& q : c) CHECK(std::hypot(q.x - 0.5, q.y - 0.5) == Approx(0.4));
  CHECK(c[0].x == Approx(0.5));
  CHECK(c[0].y < 0.5);
  CHECK(c[1].x > 0.5);
  // Grid past 16: 17 ranks on 5 columns, row-major; 64 ranks on 8 x 8.
  const auto g = rank_positions(17);
  CHECK(g[5].x == Approx(g[0].x));
  CHECK(g[5].y > g[0].y);
  CHECK(g[1].y == Approx(g[0].y));
  const auto g64 = rank_positions(64);
  for (int r = 0; r < 64; ++r) {
    CHECK(g64[r].x == Approx(g64[r % 8].x));
    CHECK(g64[r].y == Approx(g64[(r / 8) * 8].y));
  }
}

TEST_CASE("packets grow with the log of their bytes and fly on the right of their link",
          "[topology]") {
  CHECK(packet_scale(16, 16, 1 << 20) == 0);
  CHECK(packet_scale(1 << 20, 16, 1 << 20) == 1);
  CHECK(packet_scale(1024, 16, 1 << 16) == Approx(0.5));  // log2: 4, 10, 16
  CHECK(packet_scale(1 << 30, 16, 1 << 20) == 1);         // clamped
  CHECK(packet_scale(4, 16, 1 << 20) == 0);
  CHECK(packet_scale(100, 100, 100) == 0.5);    // all alike
  CHECK(packet_scale(-1, 16, 1 << 20) == 0.5);  // size unknown

  const Point a{0.1, 0.5}, b{0.9, 0.5};
  const Point s = packet_position(a, b, 0, 0.1), e = packet_position(a, b, 1, 0.1),
              mid = packet_position(a, b, 0.5, 0.1);
  CHECK(s.x == Approx(a.x));
  CHECK(s.y == Approx(a.y));
  CHECK(e.x == Approx(b.x));
  CHECK(e.y == Approx(b.y));
  CHECK(mid.x == Approx(0.5));
  CHECK(mid.y == Approx(0.5 + 0.1 * 0.8));  // going right (east), the right-hand side is down
  const Point back = packet_position(b, a, 0.5, 0.1);
  CHECK(back.y == Approx(0.5 - 0.1 * 0.8));  // the way back passes on the other side
}

TEST_CASE("the topology panel draws every example, with packets while messages fly", "[topology]") {
  HeadlessImGui gui;
  for (const char* name : kExamples) {
    INFO(name);
    Document doc = open_document(example_trace(name));
    REQUIRE(doc.ok());
    const int last = last_beat(doc.model);
    for (double beat : {0.0, 0.5, last * 0.5, last - 0.5, static_cast<double>(last)})
      CHECK(draw_at(gui, PanelId::topology, doc, beat) > 0);

    // Half way through the first step its messages are packets of their chunk's colour; at
    // beat 0 nothing flies.
    doc.playback.seek_beat(doc.model, 0.5);
    const auto flying = in_flight(doc.model, doc.playback.moment(doc.model));
    REQUIRE(!flying.empty());
    const Message& msg = doc.model.messages[flying.front().message];
    int chunks = 1;
    for (const BufferInfo& b : doc.model.info.buffers)
      if (b.name == doc.model.str(msg.buffer)) chunks = b.chunks;
    const ImU32 color = chunk_color(msg.chunk, chunks);
    draw_at(gui, PanelId::topology, doc, 0.0);
    const int before = vertices_of_color(color);
    draw_at(gui, PanelId::topology, doc, 0.5);
    CHECK(vertices_of_color(color) > before);
  }
}

TEST_CASE("the topology panel scales to 64 ranks", "[topology]") {
  TraceModel m = ring_model(64);
  Document doc;
  doc.model = std::move(m);
  HeadlessImGui gui;
  const int idle = draw_at(gui, PanelId::topology, doc, 0.0);
  const int busy = draw_at(gui, PanelId::topology, doc, 0.5);  // 64 packets in flight
  CHECK(idle > 0);
  CHECK(busy > idle);
}

TEST_CASE("the topology panel boxes the nodes of a trace that records its ranks per node",
          "[topology][nodes]") {
  HeadlessImGui gui;
  // Lesson 15's example: 8 ranks, --ranks-per-node 4 (otherData.ranks_per_node).
  Document nodes = open_document(example_trace("15_trees_hierarchy_alltoall"));
  REQUIRE(nodes.ok());
  REQUIRE(nodes.model.info.ranks_per_node == 4);
  draw_at(gui, PanelId::topology, nodes, 21.5);
  CHECK(vertices_of_color(kNodeBoxEdge) > 0);
  // The same trace without it, and a trace that never says: no boxes.
  nodes.model.info.ranks_per_node = 0;
  Document plain;
  plain.model = nodes.model;
  draw_at(gui, PanelId::topology, plain, 21.5);
  CHECK(vertices_of_color(kNodeBoxEdge) == 0);
  Document ring = open_document(example_trace("06_allreduce_sequential_ring_parallel"));
  draw_at(gui, PanelId::topology, ring, 1.5);
  CHECK(vertices_of_color(kNodeBoxEdge) == 0);
}

TEST_CASE("topology and timeline draw window accesses in their own colours, not as packets",
          "[topology][timeline][window]") {
  distlab::TraceInfo info;
  info.world.size = 3;
  Document doc;
  doc.model = parse_trace_model(distlab::trace_json(info, distlab::test::window_logs()));
  HeadlessImGui gui;
  // Beat 1: step 1 is over and nothing is under way; half through it, six loads are (dashed
  // arrows and window glyphs in the load colour); half through step 2, each rank's store into its
  // own window (the glyph on its node).
  draw_at(gui, PanelId::topology, doc, 1.0);
  const int idle_loads = vertices_of_color(kWindowLoad);
  const int idle_stores = vertices_of_color(kWindowStore);
  draw_at(gui, PanelId::topology, doc, 0.5);
  CHECK(vertices_of_color(kWindowLoad) > idle_loads);
  CHECK(vertices_of_color(kWindowStore) == idle_stores);
  draw_at(gui, PanelId::topology, doc, 1.5);
  CHECK(vertices_of_color(kWindowStore) > idle_stores);
  CHECK(vertices_of_color(kWindowLoad) == idle_loads);
  // The Timeline: load and store slices in their colours (more than the legend's swatch: 4
  // vertices each).
  draw_at(gui, PanelId::timeline, doc, 0.5);
  CHECK(vertices_of_color(span_color(SpanKind::load)) > 8);
  CHECK(vertices_of_color(span_color(SpanKind::store)) > 8);
  // Stats draws its table of them.
  CHECK(draw_at(gui, PanelId::stats, doc, 4.0) > 0);
}

// ---- shards ---------------------------------------------------------------------------------

TEST_CASE("the shards panel draws every example, all-reduce buffers end complete", "[shards]") {
  HeadlessImGui gui;
  for (const char* name : kExamples) {
    INFO(name);
    Document doc = open_document(example_trace(name));
    REQUIRE(doc.ok());
    const int last = last_beat(doc.model);
    for (double beat : {0.0, 0.5, last * 0.5, static_cast<double>(last)})
      CHECK(draw_at(gui, PanelId::shards, doc, beat) > 0);
  }
  // 04 ends with an all-reduce, and every buffer of 06 is one: at the last step every rank
  // holds every chunk, and in 06 (one buffer per algorithm) with all ranks' data in it. (04
  // runs three collectives on one buffer, so the replay's masks carry over between them.)
  for (const char* name : {"04_allreduce_allgather", "06_allreduce_sequential_ring_parallel"}) {
    INFO(name);
    Document doc = open_document(example_trace(name));
    doc.playback.seek_beat(doc.model, last_beat(doc.model));
    const ShardState& s = doc.shards(doc.playback.moment(doc.model));
    REQUIRE(s.buffers.size() == doc.model.info.buffers.size());
    const bool complete = std::string(name).starts_with("06");
    for (const BufferState& b : s.buffers)
      for (const ChunkState& c : b.cells) {
        CHECK(c.held);
        if (complete) CHECK(c.count == doc.model.world_size());
      }
  }
}

TEST_CASE("the shards panel fills in cell by cell", "[shards]") {
  // A held cell is drawn in its chunk's colour, an empty one is not: in a ring all-gather,
  // chunk 1 starts at rank 1 alone and ends on every rank.
  HeadlessImGui gui;
  Document ag;
  ag.model = all_gather_model(4);
  const ImU32 chunk1 = chunk_color(1, 4);
  draw_at(gui, PanelId::shards, ag, 0.0);
  const int start = vertices_of_color(chunk1);
  CHECK(start > 0);
  draw_at(gui, PanelId::shards, ag, last_beat(ag.model));
  CHECK(vertices_of_color(chunk1) == 4 * start);

  // A hand-built ring all-reduce: the first reduce-scatter step lands one chunk per rank.
  Document ring;
  ring.model = ring_model(4);
  const auto held_complete = [&](double beat) {
    ring.playback.seek_beat(ring.model, beat);
    int complete = 0;
    for (const ChunkState& c : ring.shards(ring.playback.moment(ring.model)).buffers.at(0).cells)
      complete += c.count == 4;
    return complete;
  };
  CHECK(held_complete(0) == 0);
  CHECK(held_complete(3) == 4);   // reduce-scatter done: one complete chunk per rank
  CHECK(held_complete(6) == 16);  // all-gather done: every cell
  CHECK(draw_at(gui, PanelId::shards, ring, 2.5) >
        draw_at(gui, PanelId::shards, ring, 3.0));  // outlines of cells landing
}

// ---- memory ---------------------------------------------------------------------------------

TEST_CASE("the memory panel stacks each rank's ledger and draws the formula line", "[memory]") {
  HeadlessImGui gui;
  for (const char* name : kExamples) {
    INFO(name);
    Document doc = open_document(example_trace(name));
    REQUIRE(doc.ok());
    REQUIRE(!doc.model.memory.empty());
    const int last = last_beat(doc.model);
    for (double beat : {0.0, last * 0.5, static_cast<double>(last)})
      CHECK(draw_at(gui, PanelId::memory, doc, beat) > 0);
  }

  // Bars in the "data" colour come from the ledger: the same trace with the ledger zeroed
  // draws only the legend's swatch in it.
  Document doc = open_document(example_trace("06_allreduce_sequential_ring_parallel"));
  const int data = 5;
  REQUIRE(std::string(memory_category_name(data)) == "data");
  const double mid = last_beat(doc.model) * 0.5;
  draw_at(gui, PanelId::memory, doc, mid);
  const int with_bars = vertices_of_color(category_color(data));
  Document zeroed = doc;  // another model: the panel's per-model cache does not mix them
  for (auto& rank : zeroed.model.memory)
    for (auto& s : rank) s.bytes = {}, s.total = 0;
  zeroed.model.info.memory_expected_bytes = {1.0, 1.0, 1.0,
                                             1.0};  // keep the chart, not the fallback
  draw_at(gui, PanelId::memory, zeroed, mid);
  CHECK(with_bars > vertices_of_color(category_color(data)));

  // The formula line: more to draw with it than without.
  Document formula = doc;
  formula.model.info.memory_formula = "S (data) + 2 S (comm) per rank";
  formula.model.info.memory_expected_bytes.assign(4, 98304.0);
  CHECK(draw_at(gui, PanelId::memory, formula, mid) > draw_at(gui, PanelId::memory, doc, mid));
}

TEST_CASE("at the last step every rank's memory bar is drawn, torn down or not", "[memory]") {
  // Lesson 10's ranks free their memory at different times after their last span: every rank
  // draws its bars in the params colour at the end, as in the middle of the run.
  HeadlessImGui gui;
  Document doc = open_document(example_trace("10_zero3_fsdp"));
  REQUIRE(doc.ok());
  const int params = 0;
  draw_at(gui, PanelId::memory, doc, last_beat(doc.model));
  const int at_end = vertices_of_color(category_color(params));
  // one rank's bar less (its ledger emptied) draws fewer vertices in that colour
  Document one_less = open_document(example_trace("10_zero3_fsdp"));
  for (auto& s : one_less.model.memory[1]) s.bytes = {}, s.total = 0;
  draw_at(gui, PanelId::memory, one_less, last_beat(doc.model));
  CHECK(at_end > vertices_of_color(category_color(params)));
}

// ---- memory-compare -------------------------------------------------------------------------

namespace {

// The memory-compare panel over `docs` (all open), for one frame; returns the vertices drawn.
int draw_compare(HeadlessImGui& gui, std::vector<Document>& docs) {
  gui.begin_frame();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImGui::GetIO().DisplaySize);
  ImGui::Begin("panel");
  PanelContext ctx{docs.front(), docs.front().playback.moment(docs.front().model), &docs};
  draw_panel(PanelId::memory_compare, ctx);
  ImGui::End();
  return gui.end_frame();
}

}  // namespace

TEST_CASE("the memory-compare panel draws a group per ZeRO stage of every open trace",
          "[memory-compare]") {
  HeadlessImGui gui;
  PanelId id;
  REQUIRE(parse_panel("memory-compare", id));
  CHECK(id == PanelId::memory_compare);
  std::vector<Document> all, two, none;
  for (const char* name : {"08_zero1", "09_zero2", "10_zero3_fsdp"})
    all.push_back(open_document(example_trace(name)));
  two.push_back(open_document(example_trace("10_zero3_fsdp")));
  two.push_back(open_document(example_trace("08_zero1")));
  none.push_back(open_document(example_trace("06_allreduce_sequential_ring_parallel")));
  const int optimizer = 2;  // the baseline's 12 bytes per parameter, P_os's 12/N, ...
  const int v_all = draw_compare(gui, all);
  const int bars_all = vertices_of_color(category_color(optimizer));
  const int v_two = draw_compare(gui, two);
  const int bars_two = vertices_of_color(category_color(optimizer));
  const int v_none = draw_compare(gui, none);
  CHECK(vertices_of_color(category_color(optimizer)) == 0);  // a sentence, no chart
  CHECK(v_all > v_two);
  CHECK(v_two > v_none);
  CHECK(bars_all > bars_two);  // four groups against three (baseline, P_os, P_os+g+p)
  CHECK(bars_two > 0);
  // Without the list of documents the panel draws its own trace (and its baseline).
  CHECK(draw_at(gui, PanelId::memory_compare, all.front(), 1.0) > v_none);
}

// ---- the parameter server -------------------------------------------------------------------

TEST_CASE("the parameter server: a star by role, its steps lit as playback passes them",
          "[topology]") {
  HeadlessImGui gui;
  Document ps = open_document(example_trace("05_parameter_server"));
  REQUIRE(ps.ok());
  REQUIRE(!ps.model.info.extra_json("roles").empty());
  const ImU32 lit = with_alpha(kRankGlow, 0.75f);
  // Half way through a "3 compute gradients" span the legend lights that step; the example of
  // lesson 06 has no numbered phases and no legend.
  double mid = 0;
  for (const Span& s : ps.model.spans)
    if (ps.model.str(s.name) == "3 compute gradients") {
      mid = s.start + s.dur * 0.5;
      break;
    }
  REQUIRE(mid > 0);
  ps.playback.set_clock(ps.model, Clock::measured);
  ps.playback.seek_time(ps.model, mid);
  CHECK(draw_panel_frame(gui, PanelId::topology, ps) > 0);
  CHECK(vertices_of_color(lit) > 0);
  Document ring = open_document(example_trace("06_allreduce_sequential_ring_parallel"));
  draw_at(gui, PanelId::topology, ring, 1.5);
  CHECK(vertices_of_color(lit) == 0);

  // With roles the links and nodes carry labels: more to draw than the same trace without.
  const int with_roles = draw_at(gui, PanelId::topology, ps, last_beat(ps.model));
  Document plain = open_document(example_trace("05_parameter_server"));  // its own caches
  plain.model.info.extra.erase("roles");
  CHECK(with_roles > draw_at(gui, PanelId::topology, plain, last_beat(ps.model)));
}

// ---- stats ----------------------------------------------------------------------------------

TEST_CASE("per-link and per-rank totals are the sums of the messages' bytes", "[stats]") {
  TraceModel m;
  for (int r = 0; r < 3; ++r) m.ranks.push_back({r + 1, "", r, {}});
  const auto add = [&](int src, int dst, std::int64_t bytes) {
    Message msg;
    msg.src = src;
    msg.dst = dst;
    msg.bytes = bytes;
    m.messages.push_back(msg);
  };
  add(0, 1, 100);
  add(1, 2, 200);
  add(0, 1, 50);
  add(2, 0, -1);  // size unknown: counted as a message of 0 bytes
  add(-1, 0, 7);  // no sender: left out
  const auto links = link_totals(m);
  REQUIRE(links.size() == 3);
  CHECK(links[0].src == 0);
  CHECK(links[0].dst == 1);
  CHECK(links[0].bytes == 150);
  CHECK(links[0].messages == 2);
  CHECK(links[1].bytes == 200);
  CHECK(links[2].bytes == 0);
  CHECK(links[2].messages == 1);
  const auto ranks = rank_totals(links, 3);
  CHECK(ranks[0].bytes_sent == 150);
  CHECK(ranks[0].messages_sent == 2);
  CHECK(ranks[0].messages_recv == 1);
  CHECK(ranks[1].bytes_recv == 150);
  CHECK(ranks[1].bytes_sent == 200);
  CHECK(ranks[2].bytes_recv == 200);

  for (const char* name : kExamples) {
    INFO(name);
    const TraceModel t = load_trace_model(example_trace(name));
    const auto l = link_totals(t);
    const auto r = rank_totals(l, t.world_size());
    const std::int64_t want = message_bytes(t);
    REQUIRE(want > 0);
    CHECK(std::accumulate(l.begin(), l.end(), std::int64_t{0},
                          [](std::int64_t s, const LinkTraffic& x) { return s + x.bytes; }) ==
          want);
    CHECK(std::accumulate(r.begin(), r.end(), std::int64_t{0},
                          [](std::int64_t s, const RankTraffic& x) { return s + x.bytes_sent; }) ==
          want);
    CHECK(std::accumulate(r.begin(), r.end(), std::int64_t{0},
                          [](std::int64_t s, const RankTraffic& x) { return s + x.bytes_recv; }) ==
          want);
    int msgs = 0;
    for (const LinkTraffic& x : l) msgs += x.messages;
    CHECK(msgs == static_cast<int>(t.messages.size()));
    // At the end of playback the arrived traffic is the whole trace's.
    Moment end;
    end.clock = Clock::measured;
    end.time_us = t.t_end;
    end.beat = last_beat(t);
    end.step = t.max_step();
    const auto arrived = link_traffic(t, end);
    REQUIRE(arrived.size() == l.size());
    for (std::size_t i = 0; i < l.size(); ++i) CHECK(arrived[i].bytes == l[i].bytes);
  }
}

TEST_CASE("bus bandwidth factors are nccl-tests'", "[stats]") {
  CHECK(bus_factor(Pattern::all_reduce, 4) == Approx(1.5));
  CHECK(bus_factor(Pattern::all_reduce, 8) == Approx(1.75));
  CHECK(bus_factor(Pattern::all_gather, 4) == Approx(0.75));
  CHECK(bus_factor(Pattern::reduce_scatter, 4) == Approx(0.75));
  CHECK(bus_factor(Pattern::gather, 2) == Approx(0.5));
  CHECK(bus_factor(Pattern::broadcast, 16) == 1);
  CHECK(bus_factor(Pattern::reduce, 16) == 1);
  CHECK(bus_factor(Pattern::unknown, 4) == 0);
  CHECK(parse_pattern("allreduce") == Pattern::all_reduce);
  CHECK(parse_pattern("All_Reduce") == Pattern::all_reduce);
  CHECK(parse_pattern("reduce-scatter") == Pattern::reduce_scatter);
  CHECK(parse_pattern("reduce") == Pattern::reduce);
  CHECK(parse_pattern("ring") == Pattern::unknown);
  CHECK(format_bandwidth(1.5e9) == "1.50 GB/s");
  CHECK(format_bandwidth(272e6) == "272 MB/s");
  CHECK(format_bandwidth(-1).empty());
}

TEST_CASE("a buffer's collective is read off its state before and after", "[stats]") {
  const int n = 4;
  // reduced into
  BufferState own = buffer_state(n, n), full = buffer_state(n, n), root = buffer_state(n, n),
              rs = buffer_state(n, n);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) {
      hold(own, r, c, 1);
      hold(full, r, c, n);
      hold(root, r, c, r == 0 ? n : 1);
      hold(rs, r, c, c == r ? n : 1);
    }
  CHECK(classify_buffer(own, full, true, n) == Pattern::all_reduce);
  CHECK(classify_buffer(own, root, true, n) == Pattern::reduce);
  CHECK(classify_buffer(own, rs, true, n) == Pattern::reduce_scatter);
  CHECK(classify_buffer(own, own, true, n) == Pattern::unknown);
  // copied
  BufferState at_root = buffer_state(n, n), pieces = buffer_state(n, n), all = buffer_state(n, n);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) {
      if (r == 0) hold(at_root, r, c, 1);
      if (c == r) hold(pieces, r, c, 1);
      hold(all, r, c, 1);
    }
  BufferState scattered = pieces;  // the root keeps everything, the others their piece
  for (int c = 0; c < n; ++c) hold(scattered, 0, c, 1);
  CHECK(classify_buffer(at_root, all, false, n) == Pattern::broadcast);
  CHECK(classify_buffer(pieces, all, false, n) == Pattern::all_gather);
  CHECK(classify_buffer(pieces, scattered, false, n) == Pattern::gather);
  CHECK(classify_buffer(at_root, scattered, false, n) == Pattern::scatter);
  CHECK(classify_buffer(all, all, false, n) == Pattern::unknown);
  CHECK(classify_buffer(own, full, true, 1) == Pattern::unknown);  // one rank: no collective
}

TEST_CASE("busbw: S over the measured time times the collective's factor", "[stats]") {
  const TraceModel m = ring_model(4);
  // From the trace alone: S = 4 chunks x 1000 B; the time from the first send (0 us) to the
  // last arrival (5 x 100 + 50 us).
  const auto ops = operation_stats(m, parse_cost_model("null"));
  REQUIRE(ops.size() == 1);
  const OperationStats& op = ops[0];
  CHECK(op.name == "ring");
  CHECK(op.pattern == Pattern::all_reduce);
  CHECK(op.messages == 24);
  CHECK(op.bytes_moved == 24000);
  CHECK(op.first_step == 1);
  CHECK(op.last_step == 6);
  CHECK(op.bytes == Approx(4000));
  CHECK(op.measured_s == Approx(550e-6));
  CHECK(op.measured_from_trace);
  CHECK(op.predicted_s < 0);
  CHECK(op.algbw() == Approx(4000 / 550e-6));
  CHECK(op.busbw(4) == Approx(4000 / 550e-6 * 2 * 3 / 4));

  // The cost model's S and times win; its other algorithms get rows of their own.
  const CostModel cost = parse_cost_model(
      R"({"model":"alpha-beta-gamma","alpha_s":1e-6,"beta_s_per_byte":1e-10,"bytes":8000,"ranks":4,"collective":"allreduce",)"
      R"("algorithms":{"ring":{"predicted_s":1e-4,"measured_s":2e-4},"tree":{"predicted_s":3e-4,"measured_s":4e-4}}})");
  REQUIRE(cost.present);
  CHECK(cost.alpha_s == Approx(1e-6));
  CHECK(cost.gamma_s_per_byte < 0);  // absent
  CHECK(cost.ranks == 4);
  const auto with_cost = operation_stats(m, cost);
  REQUIRE(with_cost.size() == 2);
  CHECK(with_cost[0].bytes == 8000);
  CHECK(with_cost[0].measured_s == Approx(2e-4));
  CHECK_FALSE(with_cost[0].measured_from_trace);
  CHECK(with_cost[0].predicted_s == Approx(1e-4));
  CHECK(with_cost[0].busbw(4) == Approx(8000 / 2e-4 * 1.5));
  CHECK(with_cost[1].name == "tree");
  CHECK(with_cost[1].pattern == Pattern::all_reduce);  // from "collective"
  CHECK(with_cost[1].messages == 0);
  CHECK(with_cost[1].algbw() == Approx(8000 / 4e-4));

  CHECK_FALSE(parse_cost_model("null").present);
  CHECK_FALSE(parse_cost_model("{\"bytes\":").present);
  CHECK_FALSE(parse_cost_model("[1, 2]").present);
  CHECK(parse_cost_model("{}").algorithms.empty());
}

TEST_CASE("lessons 06 and 07: every algorithm is an all-reduce timed by the cost model",
          "[stats]") {
  for (const char* name : {"06_allreduce_sequential_ring_parallel", "07_recursive_halving"}) {
    INFO(name);
    const TraceModel m = load_trace_model(example_trace(name));
    const CostModel cost = parse_cost_model(m.info.cost_model_json);
    REQUIRE(cost.present);
    REQUIRE(cost.bytes > 0);
    const auto ops = operation_stats(m, cost);
    REQUIRE(ops.size() == m.info.buffers.size());  // one buffer per algorithm, each in the model
    for (const OperationStats& op : ops) {
      INFO(op.name);
      const AlgorithmCost* c = cost.find(op.name);
      REQUIRE(c != nullptr);
      CHECK(op.pattern == Pattern::all_reduce);
      CHECK(op.bytes == cost.bytes);
      CHECK(op.measured_s == c->measured_s);
      CHECK(op.busbw(m.world_size()) ==
            Approx(cost.bytes / c->measured_s * 2 * (m.world_size() - 1) / m.world_size()));
    }
  }
}

TEST_CASE("the stats panel draws every example and a foreign trace", "[stats]") {
  HeadlessImGui gui;
  for (const char* name : kExamples) {
    INFO(name);
    Document doc = open_document(example_trace(name));
    REQUIRE(doc.ok());
    CHECK(draw_at(gui, PanelId::stats, doc, 0.0) > 0);
    CHECK(draw_at(gui, PanelId::stats, doc, last_beat(doc.model)) > 0);
  }
  // A failed verification is listed, in red.
  Document failed = open_document(example_trace("02_scatter_gather"));
  const int passed = draw_at(gui, PanelId::stats, failed, 0.0);
  failed.model.info.verified = false;
  failed.model.info.failed.push_back({2, "gather", "r2's chunk differs at element 17"});
  CHECK(draw_at(gui, PanelId::stats, failed, 0.0) > passed);

  // A Chrome trace from another tool: no otherData, no buffers, no ledger; every panel draws.
  const auto path = std::filesystem::temp_directory_path() / "distlab_panels_foreign.json";
  std::ofstream(path)
      << R"([{"ph":"X","name":"work","pid":7,"tid":3,"ts":5,"dur":10},)"
         R"({"ph":"X","name":"send","cat":"send","pid":7,"tid":4,"ts":6,"dur":2},)"
         R"({"ph":"s","id":1,"pid":7,"tid":4,"ts":6},{"ph":"f","bp":"e","id":1,"pid":9,"tid":1,"ts":12}])";
  Document foreign = open_document(path.string());
  std::filesystem::remove(path);
  REQUIRE(foreign.ok());
  for (PanelId p : {PanelId::topology, PanelId::shards, PanelId::memory, PanelId::stats})
    for (double beat : {0.0, 0.5, 1.0}) CHECK(draw_at(gui, p, foreign, beat) > 0);
}

// ---- schedule -------------------------------------------------------------------------------

namespace {

const char* const kPipelines[] = {"11_pipeline_microbatching", "11_pipeline_microbatching_1f1b",
                                  "11_pipeline_microbatching_naive"};

// Vertices in the colours of micro-batches 0 .. micros - 1 (forward or backward): the blocks.
int block_vertices(int micros) {
  int n = 0;
  for (int m = 0; m < micros; ++m)
    n += vertices_of_color(micro_color(m)) + vertices_of_color(micro_color(m, Pass::backward));
  return n;
}

// The Schedule panel of `doc` with `others` open beside it, for one frame.
int draw_schedule_with(HeadlessImGui& gui, Document& doc, std::vector<Document*> others) {
  gui.begin_frame();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImGui::GetIO().DisplaySize);
  ImGui::Begin("panel");
  PanelContext ctx{doc, doc.playback.moment(doc.model), nullptr, std::move(others)};
  draw_panel(PanelId::schedule, ctx);
  ImGui::End();
  return gui.end_frame();
}

}  // namespace

TEST_CASE(
    "the schedule panel draws lesson 11's schedules as blocks in their micro-batches' "
    "colours, on both clocks",
    "[schedule]") {
  HeadlessImGui gui;
  for (const char* name : kPipelines) {
    INFO(name);
    Document doc = open_document(example_trace(name));
    REQUIRE(doc.ok());
    const PipelineSchedule& s = doc.derived<PipelineSchedule>(build_pipeline_schedule);
    REQUIRE(s.has_ideal());
    // Steps clock: the ideal schedule, P x 2M blocks of one iteration, each micro-batch's colour.
    for (double beat : {0.0, 1.5, last_beat(doc.model) / 2.0, double(last_beat(doc.model))}) {
      CHECK(draw_at(gui, PanelId::schedule, doc, beat) > 0);
      for (int m = 0; m < s.microbatches; ++m) {
        INFO("micro-batch " << m << ", beat " << beat);
        // 4 vertices per filled block, one forward and one backward per stage
        CHECK(vertices_of_color(micro_color(m)) >= 4 * s.stages);
        CHECK(vertices_of_color(micro_color(m, Pass::backward)) >= 4 * s.stages);
      }
      CHECK(vertices_of_color(micro_color(s.microbatches)) == 0);  // no micro-batch beyond M
    }
    // Measured clock: what ran, in every iteration.
    doc.playback.set_clock(doc.model, Clock::measured);
    for (const Interval& it : s.measured.iterations) {
      doc.playback.seek_time(doc.model, (it.start + it.end) / 2);
      CHECK(draw_panel_frame(gui, PanelId::schedule, doc) > 0);
      CHECK(block_vertices(s.microbatches) >= 4 * 2 * s.microbatches * s.stages);
    }
  }
}

TEST_CASE(
    "the schedule panel draws zero bubble's I and W and interleaved chunks, each pass in a shade "
    "of its micro-batch's colour, on both clocks",
    "[schedule]") {
  namespace pipeline = distlab::pipeline;
  HeadlessImGui gui;
  for (const pipeline::Shape shape : {pipeline::Shape{pipeline::Schedule::zb_h1, 4, 4, 1},
                                      pipeline::Shape{pipeline::Schedule::interleaved, 2, 4, 2}}) {
    const bool zb = shape.schedule == pipeline::Schedule::zb_h1;
    INFO(pipeline::to_string(shape.schedule));
    const auto path = std::filesystem::temp_directory_path() / "distlab_panels_pipeline.json";
    std::ofstream(path) << distlab::testing::pipeline_trace_json(shape, 2);
    Document doc = open_document(path.string());
    std::filesystem::remove(path);
    REQUIRE(doc.ok());
    const PipelineSchedule& s = doc.derived<PipelineSchedule>(build_pipeline_schedule);
    REQUIRE(s.has_ideal());
    for (Clock c : {Clock::steps, Clock::measured}) {
      INFO((c == Clock::steps ? "steps" : "measured"));
      doc.playback.set_clock(doc.model, c);
      if (c == Clock::measured)
        doc.playback.seek_time(doc.model,
                               (s.measured.iterations[0].start + s.measured.iterations[0].end) / 2);
      CHECK(draw_panel_frame(gui, PanelId::schedule, doc) > 0);
      // 4 vertices a block: each stage runs every micro-batch's passes once per chunk.
      const int per_pass = 4 * shape.stages * shape.chunks;
      for (int m = 0; m < shape.micro; ++m) {
        INFO("micro-batch " << m);
        CHECK(vertices_of_color(micro_color(m)) >= per_pass);
        CHECK(vertices_of_color(micro_color(m, Pass::backward)) >= (zb ? 0 : per_pass));
        CHECK(vertices_of_color(micro_color(m, Pass::input)) >= (zb ? per_pass : 0));
        CHECK(vertices_of_color(micro_color(m, Pass::weight)) >= (zb ? per_pass : 0));
        if (zb) CHECK(vertices_of_color(micro_color(m, Pass::backward)) == 0);  // split: no B
      }
      // Interleaved: a stripe per block in its chunk's grey, 2M blocks per chunk and stage.
      for (int k = 0; k < 2 && !zb; ++k)
        CHECK(vertices_of_color(model_chunk_color(k, 2)) >= 4 * 2 * shape.micro * shape.stages);
    }
  }
}

TEST_CASE("the schedule panel stacks the other open pipelines under the current one",
          "[schedule]") {
  HeadlessImGui gui;
  Document gpipe = open_document(example_trace("11_pipeline_microbatching"));
  Document one_f_one_b = open_document(example_trace("11_pipeline_microbatching_1f1b"));
  Document ring = open_document(example_trace("06_allreduce_sequential_ring_parallel"));
  REQUIRE(gpipe.ok());
  REQUIRE(one_f_one_b.ok());
  gpipe.playback.seek_beat(gpipe.model, 9.5);
  draw_schedule_with(gui, gpipe, {});
  const int alone = block_vertices(4);
  draw_schedule_with(gui, gpipe, {&one_f_one_b, &ring});  // the ring is no pipeline: left out
  CHECK(block_vertices(4) - alone == 4 * 4 * 2 * 4);      // 1F1B's P x 2M blocks, 4 vertices each
  for (Clock c : {Clock::steps, Clock::measured}) {
    gpipe.playback.set_clock(gpipe.model, c);
    one_f_one_b.playback.set_clock(one_f_one_b.model, c);
    CHECK(draw_schedule_with(gui, gpipe, {&one_f_one_b}) > 0);
    CHECK(draw_schedule_with(gui, one_f_one_b, {&gpipe}) > 0);
  }
}

TEST_CASE(
    "a trace with no pipeline: the schedule panel says so and draws no block, the default "
    "layout shows Schedule in place of Shards for a pipeline",
    "[schedule]") {
  HeadlessImGui gui;
  Document ring = open_document(example_trace("06_allreduce_sequential_ring_parallel"));
  CHECK(draw_at(gui, PanelId::schedule, ring, 2.5) > 0);
  CHECK(block_vertices(4) == 0);
  CHECK_FALSE(shows_schedule(ring));

  for (const char* name : {"11_pipeline_microbatching", "06_allreduce_sequential_ring_parallel"}) {
    View view;
    view.open(example_trace(name));
    const bool pipeline = std::string(name).rfind("11_", 0) == 0;
    CHECK(shows_schedule(view.documents().front()) == pipeline);
    gui.begin_frame();
    view.draw(0.0);
    gui.end_frame();
    INFO(name);
    CHECK((block_vertices(4) > 0) == pipeline);
  }
}

TEST_CASE("clicking a stage's row seeks the playback to that moment of the ideal schedule",
          "[schedule]") {
  HeadlessImGui gui;
  Document doc = open_document(example_trace("11_pipeline_microbatching"));
  REQUIRE(doc.ok());
  const PipelineSchedule& s = doc.derived<PipelineSchedule>(build_pipeline_schedule);
  doc.playback.seek_beat(doc.model, 0);
  draw_panel_frame(gui, PanelId::schedule, doc);
  // The lowest vertex of micro-batch 0's forward colour: the bottom of the last stage's F 0.
  float bottom = 0;
  const ImDrawData* d = ImGui::GetDrawData();
  for (int l = 0; l < d->CmdListsCount; ++l)
    for (const ImDrawVert& v : d->CmdLists[l]->VtxBuffer)
      if (v.col == micro_color(0)) bottom = std::max(bottom, v.pos.y);
  REQUIRE(bottom > 0);
  ImGuiIO& io = ImGui::GetIO();
  io.MousePos = ImVec2(800, bottom - 3);  // the middle of the time axis, in that row
  draw_panel_frame(gui, PanelId::schedule, doc);
  io.MouseDown[0] = true;
  draw_panel_frame(gui, PanelId::schedule, doc);
  io.MouseDown[0] = false;
  draw_panel_frame(gui, PanelId::schedule, doc);
  const double t = s.ideal_time_at_beat(doc.playback.position());
  INFO("beat " << doc.playback.position() << ", ideal time " << t);
  CHECK_FALSE(doc.playback.playing);
  CHECK(t > 0.35 * s.ideal_period());
  CHECK(t < 0.65 * s.ideal_period());
}

// ---- splits ---------------------------------------------------------------------------------

TEST_CASE("the splits panel draws lessons 12 and 13: every rank's slice, f and g lit in turn",
          "[splits]") {
  HeadlessImGui gui;
  for (const char* name : {"12_tensor_parallel_mlp", "13_tensor_parallel_attention"}) {
    INFO(name);
    Document doc = open_document(example_trace(name));
    REQUIRE(doc.ok());
    CHECK(panel_nothing_to_show(PanelId::splits, doc).empty());
    const int n = doc.model.world_size();
    const int last = last_beat(doc.model);
    for (double beat : {0.0, 0.5, last * 0.5, static_cast<double>(last)})
      CHECK(draw_at(gui, PanelId::splits, doc, beat) > 0);

    // Each rank's slice of the weights is drawn in its colour.
    draw_at(gui, PanelId::splits, doc, 0.0);
    for (int r = 0; r < n; ++r) CHECK(vertices_of_color(rank_color(r, n)) > 0);

    // The moments every rank spends in g's and in f's all-reduce (from the spans): g, then f,
    // lit yellow; at the end both are done (green) and nothing is lit.
    const SplitsIndex& index = doc.derived<SplitsIndex>(build_splits_index);
    doc.playback.set_clock(doc.model, Clock::measured);
    const auto middle_of = [&](const char* phase) {
      double begin = -1e300, end = 1e300;
      for (const Span& sp : doc.model.spans)
        if (sp.kind == SpanKind::compute && doc.model.str(sp.name) == phase)
          begin = std::max(begin, sp.start), end = std::min(end, sp.end());
      REQUIRE(begin < end);
      return 0.5 * (begin + end);
    };
    for (const char* phase : {"g: all-reduce", "f: all-reduce"}) {
      INFO(phase);
      doc.playback.seek_time(doc.model, middle_of(phase));
      CHECK(splits_at(index, doc.playback.moment(doc.model)).active ==
            (phase[0] == 'g' ? index.splits.g : index.splits.f));
      draw_panel_frame(gui, PanelId::splits, doc);
      CHECK(vertices_of_color(kHighlight) > 0);
    }
    doc.playback.seek_time(doc.model, active_range(doc.model).end);
    draw_panel_frame(gui, PanelId::splits, doc);
    CHECK(vertices_of_color(kHighlight) == 0);
    const int done = vertices_of_color(IM_COL32(76, 175, 80, 255));
    CHECK(done > 0);
  }
}

TEST_CASE("under sequence parallelism f and g light in both passes: all-gather and reduce-scatter",
          "[splits]") {
  HeadlessImGui gui;
  // The halo around an operator's circle while one of its collectives runs (draw_operator).
  const ImU32 halo = with_alpha(kHighlight, 0.35f);
  for (const char* name : {"12_tensor_parallel_mlp_sp", "13_tensor_parallel_attention_sp"}) {
    INFO(name);
    Document doc = open_document(example_trace(name));
    REQUIRE(doc.ok());
    const SplitsIndex& index = doc.derived<SplitsIndex>(build_splits_index);
    REQUIRE(index.splits.f >= 0);
    REQUIRE(index.splits.g >= 0);
    doc.playback.set_clock(doc.model, Clock::measured);
    for (const char* phase :
         {"f: all-gather", "g: reduce-scatter", "g: all-gather", "f: reduce-scatter"}) {
      INFO(phase);
      double begin = -1e300, end = 1e300;
      for (const Span& sp : doc.model.spans)
        if (sp.kind == SpanKind::compute && doc.model.str(sp.name) == phase)
          begin = std::max(begin, sp.start), end = std::min(end, sp.end());
      REQUIRE(begin < end);
      doc.playback.seek_time(doc.model, 0.5 * (begin + end));
      const SplitsMoment now = splits_at(index, doc.playback.moment(doc.model));
      CHECK(now.active == (phase[0] == 'g' ? index.splits.g : index.splits.f));
      // g gathers in backward, f in forward
      const bool gather = std::string(phase).find("all-gather") != std::string::npos;
      CHECK(now.backward == (gather == (phase[0] == 'g')));
      draw_panel_frame(gui, PanelId::splits, doc);
      CHECK(vertices_of_color(halo) > 0);
    }
  }
}

TEST_CASE("the splits panel on a trace without splits says so and draws no slices", "[splits]") {
  HeadlessImGui gui;
  Document doc = open_document(example_trace("02_scatter_gather"));
  REQUIRE(doc.ok());
  const std::string why = panel_nothing_to_show(PanelId::splits, doc);
  CHECK(why.find("no tensor-parallel splits") != std::string::npos);
  CHECK(draw_at(gui, PanelId::splits, doc, 1.0) > 0);  // the sentence
  for (int r = 0; r < doc.model.world_size(); ++r)
    CHECK(vertices_of_color(rank_color(r, doc.model.world_size())) == 0);

  // Malformed splits: the same sentence, with the reason.
  Document bad = open_document(example_trace("12_tensor_parallel_mlp"));
  bad.model.info.extra["splits"] = R"({"ranks":4,"blocks":[{"kind":"weight","shape":[2,2],)"
                                   R"("split":"columns","ranges":[[0,1],[1,3]]}]})";
  CHECK(panel_nothing_to_show(PanelId::splits, bad).find("ranges") != std::string::npos);
  CHECK(draw_at(gui, PanelId::splits, bad, 1.0) > 0);
  CHECK(panel_nothing_to_show(PanelId::topology, bad).empty());
}
