// The Schedule panel's model (viewer/model/schedule.hpp): core's orders on its ideal machine,
// utilisation against each schedule's formula (GPipe and 1F1B, interleaved, zero bubble),
// activations in flight, bubbles, the steps clock mapped onto ideal time, the blocks read from
// lesson 11's example traces and from traces of the new schedules (split backwards, model
// chunks), and the level of detail.
#include <fmt/format.h>
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "example_traces.hpp"
#include "pipeline_trace.hpp"
#include "viewer/model/caption.hpp"
#include "viewer/model/playback.hpp"
#include "viewer/model/schedule.hpp"

using namespace distlab::viewer;
namespace pipeline = distlab::pipeline;
using distlab::testing::example_trace;
using distlab::testing::pipeline_trace_json;
using pipeline::Pass;
using pipeline::Schedule;

namespace {

// "F3", "B0" or "I2" appended to s; "F3.1" where the chunk counts.
void put(std::string& s, Pass pass, int micro, int chunk = -1) {
  s += pipeline::letter(pass);
  s += std::to_string(micro);
  if (chunk >= 0) s += "." + std::to_string(chunk);
}
void put(std::string& s, bool forward, int micro) {
  put(s, forward ? Pass::forward : Pass::backward, micro);
}

std::string order_text(const std::vector<pipeline::Op>& ops, bool chunks = false) {
  std::string s;
  for (const pipeline::Op& op : ops) put(s, op.pass, op.micro, chunks ? op.chunk : -1);
  return s;
}

std::string order_text(const std::vector<PipeBlock>& blocks, int iteration, bool chunks = false) {
  std::string s;
  for (const PipeBlock& b : blocks)
    if (b.iteration == iteration) put(s, b.pass, b.micro, chunks ? b.chunk : -1);
  return s;
}

// 1F1B's order as lesson 11's README (and tests/lesson11_trace.sh) writes it.
std::string one_f_one_b_text(int r, int P, int M) {
  const int w = std::min(P - r - 1, M);
  std::string s;
  for (int m = 0; m < w; ++m) put(s, true, m);
  for (int i = 0; i < M - w; ++i) put(s, true, w + i), put(s, false, i);
  for (int m = M - w; m < M; ++m) put(s, false, m);
  return s;
}

// A compute span with phase args on rank `rank`'s compute lane.
void phase(TraceModel& m, int rank, double start, double dur, const char* op, int micro,
           int stage) {
  SpanArgs a;
  a.op = op[0] == 'f' ? 1 : op[0] == 'b' ? 2 : 3;  // forward, backward, update
  a.micro = micro;
  a.stage = stage;
  m.span_args.push_back(a);
  Span s;
  s.start = start;
  s.dur = dur;
  s.lane = static_cast<std::uint32_t>(rank);
  s.args = static_cast<std::int32_t>(m.span_args.size() - 1);
  m.spans.push_back(s);
}

TraceModel two_stage_model() {
  TraceModel m;
  m.strings = {"", "forward", "backward", "update"};
  for (int r = 0; r < 2; ++r) {
    m.ranks.push_back({r + 1, "rank " + std::to_string(r), r, {static_cast<std::uint32_t>(r)}});
    Lane lane;
    lane.rank = r;
    lane.tid = 1;
    m.lanes.push_back(lane);
  }
  // Two iterations of GPipe with M = 2 on 2 stages, forward 10 us, backward 20 us, update 5 us.
  for (int k = 0; k < 2; ++k) {
    const double t = 100.0 * k;
    phase(m, 0, t + 0, 10, "forward", 0, 0);
    phase(m, 0, t + 10, 10, "forward", 1, 0);
    phase(m, 1, t + 10, 10, "forward", 0, 1);
    phase(m, 1, t + 20, 10, "forward", 1, 1);
    phase(m, 1, t + 30, 20, "backward", 1, 1);
    phase(m, 1, t + 50, 20, "backward", 0, 1);
    phase(m, 0, t + 50, 20, "backward", 1, 0);
    phase(m, 0, t + 70, 20, "backward", 0, 0);
    phase(m, 0, t + 90, 5, "update", -1, 0);
    phase(m, 1, t + 90, 5, "update", -1, 1);
  }
  m.t_end = 200;
  return m;
}

}  // namespace

TEST_CASE(
    "the schedules' orders are lesson 11's: GPipe all forwards then backwards, 1F1B warm-up, "
    "steady state, cool-down",
    "[schedule]") {
  for (int r = 0; r < 4; ++r) {
    CHECK(order_text(pipeline::order_of({Schedule::gpipe, 4, 4}, r)) == "F0F1F2F3B3B2B1B0");
    CHECK(order_text(pipeline::order_of({Schedule::naive, 4, 1}, r)) == "F0B0");
  }
  for (int P : {1, 2, 4, 7})
    for (int M : {1, 3, 6, 16})
      for (int r = 0; r < P; ++r) {
        INFO("P " << P << " M " << M << " stage " << r);
        CHECK(order_text(pipeline::order_of({Schedule::one_f_one_b, P, M}, r)) ==
              one_f_one_b_text(r, P, M));
      }
}

TEST_CASE("ideal GPipe on 4 stages and 4 micro-batches keeps every stage busy 4/7 of the step",
          "[schedule]") {
  const ScheduleTimes s = ideal_schedule({Schedule::gpipe, 4, 4});
  REQUIRE(s.stages.size() == 4);
  REQUIRE(s.iterations.size() == 1);
  CHECK(s.iterations[0].end == 21);  // (M + P - 1)(f + b) = 7 x 3
  for (int r = 0; r < 4; ++r) {
    CHECK(s.stages[static_cast<std::size_t>(r)].busy[0] == 12);
    CHECK(s.utilisation(r, 0) == Approx(4.0 / 7.0));
  }
  // Stage 3's first forward waits for the three before it; stage 0's last backward ends the step.
  CHECK(s.stages[3].blocks[0].start == 3);
  CHECK(s.stages[0].blocks.back().end == 21);
}

TEST_CASE(
    "GPipe and 1F1B on the ideal machine: utilisation M/(M+P-1), in flight M and min(P - r, M)",
    "[schedule]") {
  for (Schedule kind : {Schedule::gpipe, Schedule::one_f_one_b})
    for (int P : {1, 2, 3, 4, 8})
      for (int M : {1, 2, 4, 5, 16}) {
        const ScheduleTimes s = ideal_schedule({kind, P, M});
        for (int r = 0; r < P; ++r) {
          INFO(pipeline::to_string(kind) << " P " << P << " M " << M << " stage " << r);
          const StageTimes& st = s.stages[static_cast<std::size_t>(r)];
          REQUIRE(st.blocks.size() == static_cast<std::size_t>(2 * M));  // nothing stalled
          CHECK(s.utilisation(r, 0) == Approx(double(M) / (M + P - 1)));
          CHECK(st.peak_flight == (kind == Schedule::one_f_one_b ? std::min(P - r, M) : M));
          CHECK(flight_at(st, s.iterations[0].end) == 0);  // every backward done: nothing held
          // The bubbles and the blocks tile the step.
          double idle = 0;
          for (const Interval& b : st.bubbles) idle += b.end - b.start;
          CHECK(idle + st.busy[0] == Approx(s.iterations[0].end));
          for (std::size_t i = 1; i < st.blocks.size(); ++i)
            CHECK(st.blocks[i].start >= st.blocks[i - 1].end);
        }
      }
}

TEST_CASE("otherData.pipeline reads back, and a malformed one reads as absent", "[schedule]") {
  const PipelineParams p = parse_pipeline_params(
      R"({"schedule":"1f1b","stages":4,"microbatches":8,"iterations":2,"forward_units":1,)"
      R"("backward_units":2,"first_step":1,"steps_per_iteration":24})");
  CHECK(p.present);
  CHECK(p.schedule == Schedule::one_f_one_b);
  CHECK(p.stages == 4);
  CHECK(p.microbatches == 8);
  CHECK(p.chunks == 1);  // absent: one chunk per rank
  CHECK(p.iterations == 2);
  CHECK(p.steps_per_iteration == 24);
  CHECK_FALSE(parse_pipeline_params("").present);
  CHECK_FALSE(parse_pipeline_params("{\"stages\":4").present);
  CHECK_FALSE(parse_pipeline_params(R"({"stages":4})").present);  // no micro-batches
  CHECK_FALSE(parse_pipeline_params(R"({"stages":"four","microbatches":2})").present);
  CHECK_FALSE(parse_pipeline_params("[1,2]").present);
  CHECK_FALSE(parse_pipeline_params(R"({"stages":1e300,"microbatches":2})").present);
  CHECK_FALSE(parse_pipeline_params(R"({"stages":4,"microbatches":-3})").present);
  const PipelineParams odd = parse_pipeline_params(
      R"({"schedule":"zigzag","stages":2,"microbatches":2,"forward_units":1e300,"first_step":1e12,)"
      R"("chunks":1e300})");
  CHECK(odd.present);
  CHECK_FALSE(odd.schedule);
  CHECK(std::string(schedule_name(odd)) == "unknown");
  CHECK(odd.first_step == -1);
  CHECK(odd.chunks == 1);  // a damaged chunk count: one chunk per rank

  // A pipeline too large to lay out ideally (P x M past 2^20) shows only what ran; an unknown
  // schedule has no ideal either.
  TraceModel m;
  m.info.extra["pipeline"] = R"({"schedule":"gpipe","stages":65536,"microbatches":65536})";
  index_steps(m);
  const PipelineSchedule huge = build_pipeline_schedule(m);
  CHECK(huge.any());
  CHECK_FALSE(huge.has_ideal());
  m.info.extra["pipeline"] = R"({"schedule":"zigzag","stages":4,"microbatches":4})";
  CHECK_FALSE(build_pipeline_schedule(m).has_ideal());
  m.info.extra["pipeline"] = R"({"schedule":"1f1b","stages":4,"microbatches":4})";
  CHECK(build_pipeline_schedule(m).has_ideal());
  // A shape its schedule refuses (pipeline::refusal) has no ideal: interleaved needs P | M.
  m.info.extra["pipeline"] = R"({"schedule":"interleaved","stages":4,"microbatches":6,"chunks":2})";
  CHECK_FALSE(build_pipeline_schedule(m).has_ideal());
  m.info.extra["pipeline"] = R"({"schedule":"interleaved","stages":4,"microbatches":8,"chunks":2})";
  CHECK(build_pipeline_schedule(m).has_ideal());
}

TEST_CASE("the new schedules' names parse: interleaved with its chunks, zb-h1", "[schedule]") {
  const PipelineParams in = parse_pipeline_params(
      R"({"schedule":"interleaved","stages":4,"microbatches":8,"chunks":2,"iterations":1})");
  CHECK(in.present);
  CHECK(in.schedule == Schedule::interleaved);
  CHECK(in.chunks == 2);
  CHECK(std::string(schedule_name(in)) == "interleaved");
  const PipelineParams zb =
      parse_pipeline_params(R"({"schedule":"zb-h1","stages":4,"microbatches":8,"chunks":1})");
  CHECK(zb.schedule == Schedule::zb_h1);
  CHECK(std::string(schedule_name(zb)) == "zb-h1");
}

TEST_CASE(
    "interleaved and zero bubble on the ideal machine: every stage busy vM/(vM+P-1) and "
    "3M/(3M+P-1) exactly, activations in flight as core's formula",
    "[schedule]") {
  struct Case {
    Schedule kind;
    int P, M, v;
    std::int64_t num, den;  // the formula's fraction, written out
  };
  const Case cases[] = {
      {Schedule::interleaved, 2, 4, 2, 8, 9},   {Schedule::interleaved, 4, 8, 2, 16, 19},
      {Schedule::interleaved, 4, 4, 3, 12, 15}, {Schedule::interleaved, 3, 6, 4, 24, 26},
      {Schedule::zb_h1, 2, 2, 1, 6, 7},         {Schedule::zb_h1, 4, 4, 1, 12, 15},
      {Schedule::zb_h1, 4, 8, 1, 24, 27},       {Schedule::zb_h1, 5, 7, 1, 21, 25},
  };
  for (const Case& c : cases) {
    const pipeline::Shape shape{c.kind, c.P, c.M, c.v};
    INFO(pipeline::to_string(c.kind) << " P " << c.P << " M " << c.M << " v " << c.v);
    const ScheduleTimes s = ideal_schedule(shape);
    REQUIRE(s.stages.size() == static_cast<std::size_t>(c.P));
    const double T = s.iterations[0].end;
    // The step in stage forwards: 3(vM + P - 1) chunk forwards, each 1/v of one; 3M + P - 1.
    CHECK(T == Approx(c.kind == Schedule::zb_h1 ? 3.0 * c.M + c.P - 1
                                                : 3.0 * (c.v * c.M + c.P - 1) / c.v));
    for (int r = 0; r < c.P; ++r) {
      INFO("stage " << r);
      const StageTimes& st = s.stages[static_cast<std::size_t>(r)];
      // Nothing stalled: 2vM blocks (F and B per chunk), or 3M (F, I and W).
      const int ops = c.kind == Schedule::zb_h1 ? 3 * c.M : 2 * c.v * c.M;
      REQUIRE(st.blocks.size() == static_cast<std::size_t>(ops));
      // busy / T = num / den, in integers: a unit is a stage's forward, so v units are whole
      // chunk forwards (exact in doubles).
      CHECK(std::llround(st.busy[0] * c.v) * c.den == std::llround(T * c.v) * c.num);
      CHECK(st.busy[0] == Approx(3.0 * c.M));  // 3M stage forwards of work, whatever v
      CHECK(st.peak_flight == pipeline::in_flight_formula(shape, r));
      CHECK(flight_at(st, T) == 0);  // every backward or W done: nothing held
      for (std::size_t i = 1; i < st.blocks.size(); ++i)
        CHECK(st.blocks[i].start >= st.blocks[i - 1].end);
      // The blocks are core's order, with their chunks.
      CHECK(order_text(st.blocks, 0, true) == order_text(pipeline::order_of(shape, r), true));
    }
    // The panel's formula is the same fraction.
    TraceModel m;
    m.info.extra["pipeline"] =
        fmt::format(R"({{"schedule":"{}","stages":{},"microbatches":{},"chunks":{}}})",
                    pipeline::to_string(c.kind), c.P, c.M, c.v);
    const PipelineSchedule ps = build_pipeline_schedule(m);
    REQUIRE(ps.has_ideal());
    CHECK(ps.formula() == Approx(double(c.num) / double(c.den)));
    CHECK(ps.formula_fraction() == fmt::format("{}/{}", c.num, c.den));
    CHECK(ps.formula_symbol() == (c.kind == Schedule::zb_h1 ? "3M/(3M+P-1)" : "vM/(vM+P-1)"));
    CHECK(ps.split == (c.kind == Schedule::zb_h1));
    CHECK(ps.chunks == c.v);
  }
}

TEST_CASE("zero bubble's activations: an I keeps the micro-batch's activations, its W lets them go",
          "[schedule]") {
  // Stage 1 of 2 with M = 2 puts off its first W: F0 I0 F1 I1 W0 W1, holding 1 1 2 2 1 0.
  const ScheduleTimes zb = ideal_schedule({Schedule::zb_h1, 2, 2});
  const StageTimes& st = zb.stages[1];
  REQUIRE(order_text(st.blocks, 0) == "F0I0F1I1W0W1");
  const auto held_after = [&](std::size_t i) { return flight_at(st, st.blocks[i].end); };
  CHECK(held_after(1) == 1);  // I0 done: micro-batch 0's activations wait for W0
  CHECK(held_after(2) == 2);
  CHECK(held_after(3) == 2);
  CHECK(held_after(4) == 1);  // W0 lets them go
  CHECK(held_after(5) == 0);
  CHECK(st.peak_flight == 2);
}

TEST_CASE(
    "traces of the new schedules: the chunk phase arg is read, and backward-input and "
    "backward-weight spans give I and W blocks in core's order",
    "[schedule]") {
  for (const pipeline::Shape shape :
       {pipeline::Shape{Schedule::zb_h1, 4, 6, 1}, pipeline::Shape{Schedule::interleaved, 2, 4, 2},
        pipeline::Shape{Schedule::one_f_one_b, 3, 4, 1}}) {
    const bool interleaved = shape.schedule == Schedule::interleaved;
    INFO(pipeline::to_string(shape.schedule));
    const TraceModel m = parse_trace_model(pipeline_trace_json(shape, 2));
    // The phase args: op, micro, stage, and chunk where the schedule interleaves.
    int with_chunk = 0, splits = 0;
    for (const Span& sp : m.spans) {
      const SpanArgs* a = m.args(sp);
      REQUIRE(a);
      const std::string_view op = m.str(a->op), name = m.str(sp.name);
      if (op == "backward-input" || op == "backward-weight") ++splits;
      if (a->chunk < 0) continue;
      ++with_chunk;
      CHECK(name.ends_with(" chunk " + std::to_string(a->chunk)));
    }
    CHECK((with_chunk > 0) == interleaved);
    CHECK((splits > 0) == (shape.schedule == Schedule::zb_h1));

    const PipelineSchedule s = build_pipeline_schedule(m);
    REQUIRE(s.has_ideal());
    CHECK(s.params.schedule == shape.schedule);
    CHECK(s.chunks == shape.chunks);
    CHECK(s.split == (shape.schedule == Schedule::zb_h1));
    REQUIRE(s.measured.stages.size() == static_cast<std::size_t>(shape.stages));
    REQUIRE(s.measured.iterations.size() == 2);
    for (int r = 0; r < shape.stages; ++r)
      for (int k = 0; k < 2; ++k) {
        INFO("stage " << r << ", iteration " << k);
        const StageTimes& st = s.measured.stages[static_cast<std::size_t>(r)];
        CHECK(order_text(st.blocks, k, true) == order_text(pipeline::order_of(shape, r), true));
        // What ran is the ideal machine's picture (10 us a unit): the same utilisation.
        CHECK(s.measured.utilisation(r, k) == Approx(s.formula()));
        CHECK(st.peak_flight == pipeline::in_flight_formula(shape, r));
      }
  }

  // A damaged chunk reads as the rank's only chunk; the model keeps it clamped to an int.
  const TraceModel odd = parse_trace_model(
      R"({"traceEvents":[{"ph":"X","name":"forward 0","cat":"compute","pid":0,"tid":1,"ts":0,)"
      R"("dur":1,"args":{"op":"forward","micro":0,"stage":0,"chunk":1e300}},)"
      R"({"ph":"X","name":"forward 1","cat":"compute","pid":0,"tid":1,"ts":2,)"
      R"("dur":1,"args":{"op":"forward","micro":1,"stage":0,"chunk":-7}}]})");
  const PipelineSchedule s = build_pipeline_schedule(odd);
  REQUIRE(s.measured.stages.size() == 1);
  REQUIRE(s.measured.stages[0].blocks.size() == 2);
  for (const PipeBlock& b : s.measured.stages[0].blocks) CHECK(b.chunk == 0);
  CHECK(s.chunks == 1);
}

TEST_CASE("a block's words and label: the pass, the micro-batch, and the chunk where it counts",
          "[schedule]") {
  const PipeBlock input{0, 1, 3, 0, Pass::input, 1}, weight{0, 1, 2, 0, Pass::weight, 0},
      forward{0, 1, 5, 0, Pass::forward, 1};
  CHECK(block_text(input, 2) == "backward-input of micro-batch 3 (chunk 1)");
  CHECK(block_text(weight, 1) == "backward-weight of micro-batch 2");
  CHECK(block_text(forward, 1) == "forward of micro-batch 5");
  CHECK(block_label(input, 2) == "I 3.1");
  CHECK(block_label(input, 2, true) == "I3.1");
  CHECK(block_label(weight, 1) == "W 2");
  CHECK(block_label(forward, 1, true) == "F5");
}

TEST_CASE(
    "measured blocks: per stage by start, iterations split by the updates, bubbles and "
    "activations in flight",
    "[schedule]") {
  const TraceModel m = two_stage_model();
  const PipelineSchedule s = build_pipeline_schedule(m);
  REQUIRE(s.any());
  CHECK_FALSE(s.has_ideal());  // no otherData.pipeline
  CHECK(s.stages == 2);
  CHECK(s.microbatches == 2);
  REQUIRE(s.measured.iterations.size() == 2);
  CHECK(s.measured.iterations[0].start == 0);
  CHECK(s.measured.iterations[0].end == 90);
  CHECK(s.measured.iterations[1].start == 100);
  CHECK(order_text(s.measured.stages[0].blocks, 0) == "F0F1B1B0");
  CHECK(order_text(s.measured.stages[1].blocks, 1) == "F0F1B1B0");
  // Stage 1 idles 10 us before its first forward and 20 us after its last backward.
  const auto& bubbles = s.measured.stages[1].bubbles;
  REQUIRE(bubbles.size() == 4);
  CHECK(bubbles[0].start == 0);
  CHECK(bubbles[0].end == 10);
  CHECK(bubbles[1].start == 70);
  CHECK(bubbles[1].end == 90);
  CHECK(bubble_at(s.measured.stages[1], 5) == 0);
  CHECK(bubble_at(s.measured.stages[1], 80) == 1);
  CHECK(bubble_at(s.measured.stages[1], 40) == -1);  // B1 runs
  CHECK(block_at(s.measured.stages[1].blocks, 40) == 2);
  CHECK(s.measured.utilisation(1, 0) == Approx(60.0 / 90.0));
  CHECK(s.formula() == Approx(2.0 / 3.0));
  const StageTimes& st = s.measured.stages[1];
  CHECK(st.peak_flight == 2);
  CHECK(flight_at(st, 15) == 0);  // F0 still running
  CHECK(flight_at(st, 25) == 1);
  CHECK(flight_at(st, 35) == 2);
  CHECK(flight_at(st, 55) == 1);
  CHECK(flight_at(st, 75) == 0);
  CHECK(s.measured.iteration_at(95) == 0);
  CHECK(s.measured.iteration_at(100) == 1);
  CHECK(s.measured.iteration_at(-5) == 0);

  // Without micro-batch args (another lesson's forward phases) there is no schedule.
  TraceModel plain = two_stage_model();
  for (SpanArgs& a : plain.span_args) a.micro = -1;
  CHECK_FALSE(build_pipeline_schedule(plain).any());
}

TEST_CASE(
    "lesson 11's example traces: each stage's blocks come in its schedule's order, and the "
    "steps clock lands on the ideal schedule",
    "[schedule]") {
  const struct {
    const char* name;
    Schedule kind;
    int M, v;
  } cases[] = {{"11_pipeline_microbatching", Schedule::gpipe, 4, 1},
               {"11_pipeline_microbatching_1f1b", Schedule::one_f_one_b, 4, 1},
               {"11_pipeline_microbatching_naive", Schedule::naive, 1, 1},
               {"11_pipeline_microbatching_interleaved", Schedule::interleaved, 4, 2},
               {"11_pipeline_microbatching_zb_h1", Schedule::zb_h1, 4, 1}};
  for (const auto& c : cases) {
    INFO(c.name);
    const TraceModel m = load_trace_model(example_trace(c.name));
    const PipelineSchedule s = build_pipeline_schedule(m);
    REQUIRE(s.params.present);
    CHECK(s.params.schedule == c.kind);
    CHECK(s.params.stages == 4);
    CHECK(s.params.microbatches == c.M);
    CHECK(s.chunks == c.v);
    REQUIRE(s.has_ideal());
    REQUIRE(s.measured.stages.size() == 4);
    REQUIRE(s.measured.iterations.size() == static_cast<std::size_t>(s.params.iterations));
    for (int r = 0; r < 4; ++r) {
      const std::string want = order_text(pipeline::order_of({c.kind, 4, c.M, c.v}, r), c.v > 1);
      const StageTimes& st = s.measured.stages[static_cast<std::size_t>(r)];
      for (int k = 0; k < s.params.iterations; ++k) {
        INFO("stage " << r << ", iteration " << k);
        CHECK(order_text(st.blocks, k, c.v > 1) == want);
        const double u = s.measured.utilisation(r, k);
        CHECK(u > 0);
        CHECK(u <= 1.0 + 1e-9);
      }
      CHECK(st.peak_flight == s.ideal.stages[static_cast<std::size_t>(r)].peak_flight);
    }
    // Every beat sits where its step's ops end on the ideal machine: a message of step id S,
    // sent by rank q at the end of one of its ops, is sent at the ideal end of an op of stage q.
    const double T = s.ideal_period();
    REQUIRE(s.ideal_at.size() == static_cast<std::size_t>(last_beat(m)) + 1);
    CHECK(s.ideal_at.back() == Approx(T * s.params.iterations));
    CHECK(std::is_sorted(s.ideal_at.begin(), s.ideal_at.end()));
    int checked = 0;
    for (const Message& msg : m.messages) {
      if (msg.step < 0 || msg.src < 0 || msg.src >= 4) continue;
      const auto beat =
          std::lower_bound(m.step_ids.begin(), m.step_ids.end(), msg.step) - m.step_ids.begin();
      const double t = s.ideal_time_at_beat(static_cast<double>(beat));
      const double local = t - std::floor(t / T) * T;
      const auto& blocks = s.ideal.stages[static_cast<std::size_t>(msg.src)].blocks;
      INFO("message of step " << msg.step << " from rank " << msg.src << " at ideal " << t);
      CHECK(std::any_of(blocks.begin(), blocks.end(),
                        [&](const PipeBlock& b) { return b.end == Approx(local); }));
      CHECK(s.beat_at_ideal_time(t) == Approx(static_cast<double>(beat)).margin(1e-9));
      ++checked;
    }
    CHECK(checked > 0);
  }
  // A trace of another lesson has none.
  CHECK_FALSE(build_pipeline_schedule(load_trace_model(example_trace("02_scatter_gather"))).any());
}

TEST_CASE("blocks narrower than the minimum merge into runs, every block in view is drawn once",
          "[schedule]") {
  std::vector<PipeBlock> blocks;
  for (int i = 0; i < 20000; ++i) blocks.push_back({i * 1.0, i * 1.0 + 0.6, i % 8, 0});
  blocks.push_back({20000, 22000, 0, 0});  // one wide block at the end
  const ViewWindow view{0, 22000, 200};
  std::vector<BlockItem> items;
  block_items(blocks, view, 2.0f, items);
  CHECK(items.size() <= 200);
  std::uint32_t next = 0;
  for (const BlockItem& it : items) {
    CHECK(it.first == next);  // contiguous, in order, none twice
    CHECK(it.last >= it.first);
    next = it.last + 1;
  }
  CHECK(next == blocks.size());
  CHECK_FALSE(items.back().merged());  // the wide block stands alone

  // A window onto the middle touches only the blocks in it.
  block_items(blocks, ViewWindow{1000, 1010, 1000}, 2.0f, items);
  REQUIRE(!items.empty());
  CHECK(items.front().first >= 999);
  CHECK(items.back().last <= 1010);
  CHECK_FALSE(items.front().merged());

  // In flight per pixel column: the most held in it.
  StageTimes st;
  st.flight = {{1, 1}, {1.2, 2}, {1.4, 1}, {3, 0}};
  std::vector<int> columns;
  flight_columns(st, ViewWindow{0, 4, 4}, columns);
  CHECK(columns == std::vector<int>{0, 2, 1, 0});
}

TEST_CASE(
    "schedule: --describe names the schedule, its formula, and what each stage runs: "
    "backward-input of "
    "micro-batch m (chunk c), or the bubble",
    "[schedule]") {
  // zb-h1 on 2 stages, M = 2: stage 0 runs F0 F1 I0 W0 I1 W1, stage 1 F0 I0 F1 I1 W0 W1; 10 us a
  // unit. From 20 to 30 us stage 0 waits for stage 1's I0.
  const TraceModel zb = parse_trace_model(pipeline_trace_json({Schedule::zb_h1, 2, 2}, 1));
  Moment at;
  at.clock = Clock::measured;
  at.time_us = 25;
  const std::string d = describe_schedule(build_pipeline_schedule(zb), at);
  INFO(d);
  CHECK_THAT(d, Catch::StartsWith("schedule: zb-h1, P = 2, M = 2: each stage busy 3M/(3M+P-1) = "
                                  "6/7 of an iteration on the ideal machine (F 1 unit, I 1, W 1)"));
  CHECK_THAT(d, Catch::Contains("stage 0: idle (bubble); holds the activations of 2"));
  CHECK_THAT(d, Catch::Contains("stage 1: backward-input of micro-batch 0; holds the activations "
                                "of 1 micro-batch\n"));
  CHECK_THAT(describe(zb, at), Catch::Contains("stage 1: backward-input of micro-batch 0"));

  // Interleaved on 2 stages, M = 2, v = 2: the chunk follows the micro-batch.
  const TraceModel in = parse_trace_model(pipeline_trace_json({Schedule::interleaved, 2, 2, 2}, 1));
  at.time_us = 5;
  const std::string di = describe_schedule(build_pipeline_schedule(in), at);
  INFO(di);
  CHECK_THAT(di, Catch::Contains("interleaved, P = 2, M = 2, v = 2"));
  CHECK_THAT(di, Catch::Contains("vM/(vM+P-1) = 4/5"));
  CHECK_THAT(di, Catch::Contains("stage 0: forward of micro-batch 0 (chunk 0)"));
  // Any other trace has no schedule lines.
  CHECK(describe_schedule(build_pipeline_schedule(TraceModel{}), at).empty());
}
