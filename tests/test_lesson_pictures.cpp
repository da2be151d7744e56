// The lessons' own pictures on the viewer's model side (no ImGui): ZeRO's memory per device
// side by side (viewer/model/memory_compare.hpp), the parameter server's star
// (topology_layout.hpp: role_positions) and its numbered steps (phase_steps.hpp), on hand-built
// models and on the example traces of lessons 05, 08, 09 and 10; lesson 14's mesh
// (topology_layout.hpp: mesh_positions), its groups (stats.hpp: group_totals, pair_groups), its
// memory formula and its pipeline (schedule.hpp) on its example trace.
#include <fmt/format.h>
#include "catch.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <string>

#include "example_traces.hpp"
#include "hand_model.hpp"
#include "viewer/model/memory_compare.hpp"
#include "viewer/model/phase_steps.hpp"
#include "viewer/model/playback.hpp"
#include "viewer/model/schedule.hpp"
#include "viewer/model/stats.hpp"
#include "viewer/model/topology_layout.hpp"

using namespace distlab::viewer;
using distlab::testing::example_trace;

namespace {

MemorySample sample(double ts, std::int64_t params, std::int64_t grads, std::int64_t optimizer,
                    std::int64_t activations) {
  MemorySample s;
  s.ts = ts;
  s.bytes = {params, grads, optimizer, activations, 0, 0};
  s.total = params + grads + optimizer + activations;
  return s;
}

// A ZeRO lesson's trace in miniature: n ranks, one span [0, 100) each, a step's model state
// (params, grads, optimizer per rank), an activation peak at t = 50, the teardown's frees at
// t = 120 after the spans, and a ring of `sent` bytes per rank and step for `steps` steps.
TraceModel zero_model(const std::string& stage, int n, std::int64_t psi, std::int64_t params,
                      std::int64_t grads, std::int64_t optimizer, std::int64_t sent = 100,
                      int steps = 2) {
  TraceModel m;
  m.strings = {"", "phase"};
  m.info.lesson = "zero_" + stage;
  std::string state;
  for (int r = 0; r < n; ++r) {
    distlab::testing::add_rank_with_span(m, r, 0, 100, 1);
    m.memory.push_back({sample(10, params, grads, optimizer, 0),
                        sample(50, params, grads, optimizer, 800),
                        sample(60, params, grads, optimizer, 0), sample(120, 0, 0, 0, 0)});
    state += fmt::format("{}{{\"params\":{},\"grads\":{},\"optimizer\":{}}}", r ? "," : "", params,
                         grads, optimizer);
    for (int k = 0; k < steps; ++k) {
      Message msg;
      msg.id = static_cast<std::uint64_t>(m.messages.size() + 1);
      msg.src = r;
      msg.dst = (r + 1) % n;
      msg.bytes = sent;
      msg.step = k + 1;
      msg.send_time = 20.0 + 10 * k;
      msg.send_end = msg.arrival = msg.send_time + 5;
      m.messages.push_back(msg);
    }
  }
  m.info.extra["zero"] = "{\"stage\":\"" + stage + "\",\"psi\":" + std::to_string(psi) +
                         ",\"ranks\":" + std::to_string(n) + ",\"steps\":" + std::to_string(steps) +
                         ",\"state\":[" + state +
                         "],\"baseline\":{\"stage\":\"dp\",\"params\":" + std::to_string(2 * psi) +
                         ",\"grads\":" + std::to_string(2 * psi) +
                         ",\"optimizer\":" + std::to_string(12 * psi) + ",\"activations\":800}}";
  m.t_begin = 0;
  m.t_end = 130;
  index_steps(m);
  return m;
}

}  // namespace

// ---- ZeRO memory side by side ---------------------------------------------------------------

TEST_CASE("ZeRO's formulas at N = 4: 16, 4 + 12/N, 2 + 14/N, 16/N bytes, 2, 2, 2, 3 Psi",
          "[memory-compare]") {
  CHECK(zero_bytes_per_param(ZeroStage::dp, 4) == 16);
  CHECK(zero_bytes_per_param(ZeroStage::zero1, 4) == 7);
  CHECK(zero_bytes_per_param(ZeroStage::zero2, 4) == 5.5);
  CHECK(zero_bytes_per_param(ZeroStage::zero3, 4) == 4);
  CHECK(zero_bytes_per_param(ZeroStage::zero3, 64) == 0.25);
  CHECK(zero_comm_psi(ZeroStage::dp) == 2);
  CHECK(zero_comm_psi(ZeroStage::zero1) == 2);
  CHECK(zero_comm_psi(ZeroStage::zero2) == 2);
  CHECK(zero_comm_psi(ZeroStage::zero3) == 3);
  ZeroStage s = ZeroStage::dp;
  CHECK(parse_zero_stage("zero2", s));
  CHECK(s == ZeroStage::zero2);
  CHECK_FALSE(parse_zero_stage("zero4", s));
  CHECK(std::string(zero_stage_title(ZeroStage::zero3)) == "P_os+g+p");
}

TEST_CASE("a ZeRO trace's stage and its bars come from otherData.zero and the ledger",
          "[memory-compare]") {
  // ZeRO-2 on 4 ranks, Psi = 100: 2 Psi params, 14 Psi / N grads + optimizer (here 50 + 300)
  const TraceModel m = zero_model("zero2", 4, 100, 200, 50, 300);
  const auto info = read_zero_info(m);
  REQUIRE(info);
  CHECK(info->stage == ZeroStage::zero2);
  CHECK(info->psi == 100);
  CHECK(info->ranks == 4);
  REQUIRE(info->baseline);
  CHECK((*info->baseline)[2] == 1200);

  const auto s = measure_stage(m);
  REQUIRE(s);
  CHECK(s->traced);
  REQUIRE(s->bytes.size() == 4);
  for (const auto& b : s->bytes) {
    // the model state before the teardown's frees (t = 120), not 0; activations: the peak
    CHECK(b[0] == 200);
    CHECK(b[1] == 50);
    CHECK(b[2] == 300);
    CHECK(b[3] == 800);
  }
  CHECK(s->state_matches_lesson);
  CHECK(s->formula_bytes() == Approx(550));  // (2 + 14/4) x 100
  // each rank sent 100 B in each of 2 steps; a ring moves 2 Psi x 2 B x (N-1)/N = 300 B
  CHECK(s->sent_per_step == Approx(100));
  CHECK(s->formula_sent_per_step() == Approx(300));
  CHECK(s->measured_comm_psi() == Approx(100.0 / 300.0 * 2));

  // A ledger that disagrees with what the lesson recorded is flagged.
  TraceModel off = m;
  off.memory[2][2].bytes[1] = 51;
  CHECK_FALSE(measure_stage(off)->state_matches_lesson);

  // No otherData.zero: not a ZeRO trace; malformed: not either.
  TraceModel plain = m;
  plain.info.extra.clear();
  CHECK_FALSE(read_zero_info(plain));
  plain.info.extra["zero"] = "{\"stage\":\"zero9\",\"psi\":100,\"ranks\":4}";
  CHECK_FALSE(measure_stage(plain));
}

TEST_CASE("memory-compare: one group per stage in order, the baseline from a lesson's metadata",
          "[memory-compare]") {
  const TraceModel z3 = zero_model("zero3", 4, 100, 50, 50, 300);
  const TraceModel z1 = zero_model("zero1", 4, 100, 200, 200, 300);
  const TraceModel z1_again = zero_model("zero1", 4, 100, 200, 200, 300);
  TraceModel other = z1;
  other.info.extra.clear();
  other.info.lesson = "06_allreduce";

  // any subset, in any order: stage order out, the baseline first
  const MemoryCompare c = build_memory_compare({&z3, &z1});
  REQUIRE(c.stages.size() == 3);
  CHECK(c.stages[0].stage == ZeroStage::dp);
  CHECK_FALSE(c.stages[0].traced);
  CHECK(c.stages[0].state(0) == 1600);  // 16 bytes per parameter, measured by the lesson
  CHECK(c.stages[0].measured_comm_psi() < 0);
  CHECK(c.stages[1].stage == ZeroStage::zero1);
  CHECK(c.stages[2].stage == ZeroStage::zero3);
  CHECK(c.stages[2].state(0) == 400);
  CHECK(c.notes.empty());

  // one trace of each stage at most; a trace that is not a ZeRO lesson's is named, not drawn
  const MemoryCompare d = build_memory_compare({&z1, &z1_again, &other});
  CHECK(d.stages.size() == 2);
  CHECK(d.notes.size() == 2);
  CHECK(build_memory_compare({&other}).stages.empty());
}

TEST_CASE("the ZeRO example traces measure their stage's formula on the ledger",
          "[memory-compare]") {
  const char* const names[] = {"08_zero1", "09_zero2", "10_zero3_fsdp"};
  const ZeroStage stages[] = {ZeroStage::zero1, ZeroStage::zero2, ZeroStage::zero3};
  std::vector<TraceModel> models;
  for (const char* name : names) models.push_back(load_trace_model(example_trace(name)));
  for (int i = 0; i < 3; ++i) {
    INFO(names[i]);
    const auto s = measure_stage(models[i]);
    REQUIRE(s);
    CHECK(s->stage == stages[i]);
    CHECK(s->ranks == 4);
    CHECK(s->state_matches_lesson);
    // The zero padding of the shards is the only difference from the formula
    // (core/training/zero.hpp): each unit a stage shards is padded to a multiple of N, at most
    // N - 1 elements, and the example's MLP (16 -> 64 -> 64 -> 8) has 3 layers, so at most
    // 3 (N - 1) padded elements over Psi: every byte of state and traffic is at most
    // 1 + 3 (N - 1) / Psi times the formula's.
    const double pad = 1.0 + 3.0 * (s->ranks - 1) / double(s->psi);
    for (int r = 0; r < 4; ++r) {
      CHECK(double(s->state(r)) >= s->formula_bytes());
      CHECK(double(s->state(r)) <= pad * s->formula_bytes());
    }
    CHECK(s->bytes[0][3] > 0);  // activations
    // every byte sent is a training exchange: the volume is the formula's, up to the padding
    CHECK(s->measured_comm_psi() >= zero_comm_psi(stages[i]));
    CHECK(s->measured_comm_psi() <= pad * zero_comm_psi(stages[i]));
  }
  const MemoryCompare c = build_memory_compare({&models[0], &models[1], &models[2]});
  REQUIRE(c.stages.size() == 4);
  CHECK(c.stages[0].stage == ZeroStage::dp);
  CHECK(double(c.stages[0].state(0)) == Approx(16.0 * double(c.stages[0].psi)).epsilon(0.02));
}

// ---- the parameter server -------------------------------------------------------------------

TEST_CASE("the role layout puts the servers in the middle and the workers around them",
          "[topology]") {
  CHECK(parse_roles("[\"server\",\"worker\"]") == std::vector<std::string>{"server", "worker"});
  CHECK(parse_roles("").empty());
  CHECK(parse_roles("{\"server\":1}").empty());
  CHECK(parse_roles("[\"server\",2]").empty());

  const auto one = role_positions({"server", "worker", "worker", "worker"});
  REQUIRE(one.size() == 4);
  CHECK(one[0].x == Approx(0.5));
  CHECK(one[0].y == Approx(0.5));
  for (int r = 1; r < 4; ++r) CHECK(std::hypot(one[r].x - 0.5, one[r].y - 0.5) == Approx(0.4));
  CHECK(one[1].y < 0.5);  // the first worker at the top

  // --servers 2 on 8 ranks: both servers near the centre, apart; six workers on the circle
  std::vector<std::string> roles(8, "worker");
  roles[0] = roles[1] = "server";
  const auto two = role_positions(roles);
  const double r_node = node_radius(8);
  CHECK(std::hypot(two[0].x - two[1].x, two[0].y - two[1].y) >= 2 * r_node);
  for (int r = 0; r < 2; ++r) CHECK(std::hypot(two[r].x - 0.5, two[r].y - 0.5) < 0.15);
  for (int r = 2; r < 8; ++r) CHECK(std::hypot(two[r].x - 0.5, two[r].y - 0.5) == Approx(0.4));

  // no server: the plain circle
  const auto ring = role_positions({"worker", "worker", "worker"});
  const auto circle = rank_positions(3);
  for (int r = 0; r < 3; ++r) CHECK(ring[r].x == Approx(circle[r].x));

  // lesson 05's trace records its roles: rank 0 serves, the others work
  const TraceModel ps = load_trace_model(example_trace("05_parameter_server"));
  const auto recorded = parse_roles(ps.info.extra_json("roles"));
  REQUIRE(recorded.size() == 4);
  CHECK(recorded[0] == "server");
  CHECK(recorded[3] == "worker");
  CHECK(role_positions(recorded)[0].x == Approx(0.5));
}

TEST_CASE("the parameter server's five steps light up as playback passes them", "[topology]") {
  const TraceModel m = load_trace_model(example_trace("05_parameter_server"));
  const auto steps = phase_steps(m);
  REQUIRE(steps.size() == 5);
  const char* const want[] = {"1 pull", "2 split data", "3 compute gradients", "4 push & sum",
                              "5 update"};
  for (int i = 0; i < 5; ++i) CHECK(steps[i].name == want[i]);

  // At the start of each span of step k, step k is lit; before any span nothing is lit or
  // passed; at the end every step has been passed.
  Moment at;
  at.clock = Clock::measured;
  at.time_us = m.active_begin - 1;
  for (const PhaseState& s : phase_states(steps, at)) {
    CHECK(s.ranks.empty());
    CHECK_FALSE(s.passed);
  }
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const auto& v = steps[k].intervals.front();
    at.time_us = (v.start + v.end) * 0.5;
    const auto states = phase_states(steps, at);
    CHECK(std::find(states[k].ranks.begin(), states[k].ranks.end(), v.rank) !=
          states[k].ranks.end());
  }
  at.time_us = m.active_end;
  for (const PhaseState& s : phase_states(steps, at)) CHECK(s.passed);
}

// ---- lesson 14: the mesh, its groups, its memory formula and its pipeline ------------------

TEST_CASE("otherData.mesh reads back only when it covers the ranks", "[topology][mesh]") {
  const MeshDims m = parse_mesh(R"({"dp": 2, "pp": 2, "tp": 2})", 8);
  CHECK((m.dp == 2 && m.pp == 2 && m.tp == 2));
  CHECK_FALSE(parse_mesh(R"({"dp": 2, "pp": 2, "tp": 2})", 6).any());  // 8 is not the ranks
  CHECK_FALSE(parse_mesh(R"({"dp": 2, "pp": 0, "tp": 4})", 8).any());
  CHECK_FALSE(parse_mesh(R"([2, 2, 2])", 8).any());
  CHECK_FALSE(parse_mesh("", 8).any());
  CHECK_FALSE(parse_mesh("{not json", 8).any());
}

TEST_CASE("the mesh layout: replicas side by side, a row per stage, tp neighbours adjacent",
          "[topology][mesh]") {
  for (const MeshDims m : {MeshDims{2, 2, 2}, MeshDims{1, 4, 2}, MeshDims{4, 1, 2},
                           MeshDims{2, 2, 4}, MeshDims{1, 1, 1}, MeshDims{8, 1, 1}}) {
    CAPTURE(m.dp, m.pp, m.tp);
    const auto p = mesh_positions(m);
    REQUIRE(static_cast<int>(p.size()) == m.size());
    const double r = mesh_node_radius(m);
    for (int a = 0; a < m.size(); ++a) {
      CHECK((p[a].x > r && p[a].x < 1 - r && p[a].y > r && p[a].y < 1 - r));
      for (int b = a + 1; b < m.size(); ++b)
        CHECK(std::hypot(p[a].x - p[b].x, p[a].y - p[b].y) > 2 * r);  // nodes never overlap
    }
    const auto at = [&](int dp, int pp, int tp) { return p[(dp * m.pp + pp) * m.tp + tp]; };
    for (int dp = 0; dp < m.dp; ++dp)
      for (int pp = 0; pp < m.pp; ++pp)
        for (int tp = 0; tp < m.tp; ++tp) {
          const Point here = at(dp, pp, tp);
          if (tp + 1 < m.tp) {  // the next tp rank: same row, the next column
            CHECK(at(dp, pp, tp + 1).y == Approx(here.y));
            CHECK(at(dp, pp, tp + 1).x > here.x);
          }
          if (pp + 1 < m.pp) {  // the next stage: same column, the row below
            CHECK(at(dp, pp + 1, tp).x == Approx(here.x));
            CHECK(at(dp, pp + 1, tp).y > here.y);
          }
          if (dp + 1 < m.dp)  // the next replica: right of this whole block, in the same row
            CHECK(at(dp + 1, pp, 0).x > at(dp, pp, m.tp - 1).x + 2 * r);
        }
  }
}

namespace {
std::uint32_t intern(TraceModel& m, const std::string& text) {
  const auto it = std::find(m.strings.begin(), m.strings.end(), text);
  if (it != m.strings.end()) return static_cast<std::uint32_t>(it - m.strings.begin());
  m.strings.push_back(text);
  return static_cast<std::uint32_t>(m.strings.size() - 1);
}
// A message from src to dst in `group` ("" for the world's), `bytes` long.
Message grouped(TraceModel& m, int src, int dst, const std::string& group, std::int64_t bytes) {
  Message msg;
  msg.src = src, msg.dst = dst, msg.bytes = bytes;
  msg.id = m.messages.size() + 1;
  msg.group = group.empty() ? 0 : intern(m, group);
  return msg;
}
}  // namespace

TEST_CASE("the node layout: a box per node around its ranks, a node's ring its circle",
          "[topology][nodes]") {
  for (const auto& [n, g] : {std::pair{8, 4}, std::pair{8, 2}, std::pair{12, 3}, std::pair{6, 2},
                             std::pair{16, 4}, std::pair{32, 8}}) {
    CAPTURE(n, g);
    const NodeLayout l = node_layout(n, g);
    REQUIRE(l.any());
    REQUIRE(static_cast<int>(l.ranks.size()) == n);
    REQUIRE(static_cast<int>(l.nodes.size()) == n / g);
    const double r = l.node_radius;
    for (int k = 0; k < n / g; ++k) {
      const NodeBox& b = l.nodes[std::size_t(k)];
      CHECK(b.first == k * g);
      CHECK(b.last == k * g + g - 1);
      CHECK((b.x0 >= 0 && b.y0 >= 0 && b.x1 <= 1 && b.y1 <= 1 && b.x0 < b.x1 && b.y0 < b.y1));
      for (int j = k + 1; j < n / g; ++j) {  // boxes never overlap
        const NodeBox& o = l.nodes[std::size_t(j)];
        CHECK((b.x1 <= o.x0 || o.x1 <= b.x0 || b.y1 <= o.y0 || o.y1 <= b.y0));
      }
      for (int i = b.first; i <= b.last; ++i) {  // its ranks, whole, inside its box
        const Point p = l.ranks[std::size_t(i)];
        CHECK((p.x - r >= b.x0 && p.x + r <= b.x1 && p.y - r >= b.y0 && p.y + r <= b.y1));
      }
    }
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b)
        CHECK(std::hypot(l.ranks[a].x - l.ranks[b].x, l.ranks[a].y - l.ranks[b].y) > 2 * r);
    // Rank r and its partner r + g in the next node sit at the same place of their boxes.
    for (int a = 0; a + g < n; ++a) {
      const NodeBox &ba = l.nodes[std::size_t(a / g)], &bb = l.nodes[std::size_t(a / g + 1)];
      CHECK(l.ranks[a].x - ba.x0 == Approx(l.ranks[a + g].x - bb.x0));
      CHECK(l.ranks[a].y - ba.y0 == Approx(l.ranks[a + g].y - bb.y0));
    }
  }
  // No nodes to draw: none given, one node of every rank, a size that does not divide the ranks.
  CHECK_FALSE(node_layout(8, 0).any());
  CHECK_FALSE(node_layout(8, 8).any());
  CHECK_FALSE(node_layout(8, 3).any());
}

TEST_CASE("traffic per group, and each pair of ranks coloured by the group that moved most",
          "[topology][mesh]") {
  TraceModel m;
  m.strings = {""};
  m.ranks.resize(4);
  m.messages.push_back(grouped(m, 0, 1, "tp", 100));
  m.messages.push_back(grouped(m, 1, 0, "tp", 100));
  m.messages.push_back(grouped(m, 0, 2, "pp", 40));
  m.messages.push_back(grouped(m, 2, 0, "dp", 10));  // the pair 0-2 moved 40 in pp, 10 in dp
  m.messages.push_back(grouped(m, 3, 2, "", 7));     // the world's
  const auto totals = group_totals(m);
  REQUIRE(totals.size() == 4);  // by name: "", dp, pp, tp
  CHECK((totals[0].group == 0 && totals[0].bytes == 7));
  CHECK((m.str(totals[1].group) == "dp" && totals[1].bytes == 10 && totals[1].messages == 1));
  CHECK((m.str(totals[2].group) == "pp" && totals[2].bytes == 40));
  CHECK((m.str(totals[3].group) == "tp" && totals[3].bytes == 200 && totals[3].messages == 2));
  const auto pairs = pair_groups(m);
  CHECK(m.str(pairs.at({0, 1})) == "tp");
  CHECK(m.str(pairs.at({0, 2})) == "pp");
  CHECK(pairs.at({2, 3}) == 0);
  for (Message& msg : m.messages) msg.group = 0;
  CHECK(group_totals(m).empty());
}

TEST_CASE("lesson 14's example trace: the mesh, its three groups, the memory formula, 1F1B",
          "[topology][mesh][schedule]") {
  const TraceModel m = load_trace_model(example_trace("14_capstone_3d_parallel"));
  const MeshDims mesh = parse_mesh(m.info.extra_json("mesh"), m.world_size());
  REQUIRE(mesh.size() == 8);
  REQUIRE((mesh.dp == 2 && mesh.pp == 2 && mesh.tp == 2));
  // Every message names its group, and a group's messages join ranks that differ in that
  // coordinate only: the trace's groups are the mesh's.
  const auto coord = [&](int r) {
    return std::array<int, 3>{r / (mesh.pp * mesh.tp), r / mesh.tp % mesh.pp, r % mesh.tp};
  };
  std::map<std::string, int> count;
  for (const Message& msg : m.messages) {
    const std::string g(m.str(msg.group));
    ++count[g];
    const auto a = coord(msg.src), b = coord(msg.dst);
    const int axis = g == "dp" ? 0 : g == "pp" ? 1 : g == "tp" ? 2 : -1;
    CAPTURE(g, msg.src, msg.dst);
    REQUIRE(axis >= 0);
    for (int k = 0; k < 3; ++k) CHECK((k == axis ? a[k] != b[k] : a[k] == b[k]));
    CHECK(msg.step >= 0);  // on the steps clock: pipeline messages too
  }
  CHECK((count["dp"] > 0 && count["pp"] > 0 && count["tp"] > 0));
  CHECK(group_totals(m).size() == 3);
  // The memory formula, one per rank, equals what each rank's ledger holds in params, grads,
  // optimizer and activations at its end.
  REQUIRE(m.info.memory_expected_bytes.size() == 8);
  for (int r = 0; r < 8; ++r) {
    std::int64_t most = 0;
    for (const MemorySample& s : m.memory[static_cast<std::size_t>(r)])
      most = std::max(most, s.bytes[0] + s.bytes[1] + s.bytes[2] + s.bytes[3]);
    CHECK(double(most) == m.info.memory_expected_bytes[static_cast<std::size_t>(r)]);
  }
  // The Schedule panel: one row per stage from its lowest rank, 1F1B against the ideal machine.
  const PipelineSchedule s = build_pipeline_schedule(m);
  REQUIRE(s.stages == 2);
  REQUIRE(s.has_ideal());
  CHECK(s.formula() == Approx(4.0 / 5.0));
  for (const StageTimes& st : s.measured.stages) CHECK(st.blocks.size() == 8);  // 4 F, 4 B
  CHECK(s.ideal.utilisation(0, 0) == Approx(0.8));
}
