// The lessons' own pictures on the viewer's model side (no ImGui): ZeRO's memory per device
// side by side (viewer/model/memory_compare.hpp), the parameter server's star
// (topology_layout.hpp: role_positions) and its numbered steps (phase_steps.hpp), on hand-built
// models and on the example traces of lessons 05, 08, 09 and 10.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "example_traces.hpp"
#include "hand_model.hpp"
#include "viewer/model/memory_compare.hpp"
#include "viewer/model/phase_steps.hpp"
#include "viewer/model/playback.hpp"
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
    state += (r ? "," : "") + std::string("{\"params\":") + std::to_string(params) +
             ",\"grads\":" + std::to_string(grads) + ",\"optimizer\":" + std::to_string(optimizer) +
             "}";
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

TEST_CASE("ZeRO's formulas at N = 4: 16, 4 + 12/N, 2 + 14/N, 16/N bytes; 2, 2, 2, 3 Psi",
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
