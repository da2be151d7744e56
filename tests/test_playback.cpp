// viewer/model/playback.hpp: the two clocks and what a moment shows, on the committed example
// traces (06: five all-reduce algorithms on 4 ranks; 02: scatter and gather).
#include "catch.hpp"

#include <cmath>
#include <string>

#include "example_traces.hpp"
#include "hand_model.hpp"
#include "viewer/model/playback.hpp"

using namespace distlab::viewer;
using distlab::testing::example_trace;

namespace {

const TraceModel& all_reduce_trace() {
  static const TraceModel m =
      load_trace_model(example_trace("06_allreduce_sequential_ring_parallel"));
  return m;
}

std::int64_t total_bytes(const TraceModel& m) {
  std::int64_t b = 0;
  for (const auto& msg : m.messages) b += std::max<std::int64_t>(0, msg.bytes);
  return b;
}

}  // namespace

TEST_CASE("beats and times map onto each other through the step frames", "[playback]") {
  const TraceModel& m = all_reduce_trace();
  const int last = last_beat(m);
  // Beats count the steps the trace holds; their ids are sparse (warm-up runs use ids too).
  REQUIRE(last == static_cast<int>(m.step_ids.size()));
  REQUIRE(last >= 10);
  REQUIRE(m.step_ids.back() > last);
  // The clocks run over the spans, not the setup before them or the report after them.
  REQUIRE(m.active_begin > m.t_begin);
  REQUIRE(m.active_end <= m.t_end);
  CHECK(time_at_beat(m, last) == Approx(m.active_end));
  double prev = time_at_beat(m, 0);
  CHECK(prev >= m.active_begin);
  for (double b = 0.25; b <= last; b += 0.25) {
    const double t = time_at_beat(m, b);
    CHECK(t >= prev);  // monotone
    prev = t;
  }
  // Beat k - 1 is the start of the k-th step.
  for (int k = 1; k <= last; ++k)
    for (const auto& f : m.steps)
      if (f.step == m.step_ids[k - 1]) CHECK(time_at_beat(m, k - 1) == Approx(f.ts));
  // Inverse where the map is strictly increasing.
  for (double b = 0.5; b < last; b += 1.0) {
    const double t = time_at_beat(m, b);
    if (time_at_beat(m, b - 0.5) < t && t < time_at_beat(m, b + 0.5))
      CHECK(beat_at_time(m, t) == Approx(b).margin(1e-6));
  }
  // Out of range clamps.
  CHECK(time_at_beat(m, -3) == time_at_beat(m, 0));
  CHECK(beat_at_time(m, m.t_end + 1e6) == Approx(last));
}

TEST_CASE("a trace without steps plays over one beat", "[playback]") {
  TraceModel m;
  m.t_begin = 10;
  m.t_end = 30;
  CHECK(last_beat(m) == 1);
  CHECK(time_at_beat(m, 0.5) == Approx(20));
  CHECK(beat_at_time(m, 25) == Approx(0.75));
}

TEST_CASE("playback steps, plays, stops at the end and switches clocks", "[playback]") {
  const TraceModel& m = all_reduce_trace();
  Playback p;
  p.reset(m);
  CHECK(p.position() == 0);
  p.next_step(m);
  CHECK(p.position() == 1);
  p.next_step(m);
  CHECK(p.moment(m).step == m.step_ids[1]);
  p.seek_beat(m, 2.5);
  p.prev_step(m);
  CHECK(p.position() == 2);
  p.seek_beat(m, 2.5);
  p.next_step(m);
  CHECK(p.position() == 3);
  p.seek_beat(m, 0);
  p.prev_step(m);
  CHECK(p.position() == 0);  // clamped

  p.speed = 2;
  p.playing = true;
  p.advance(m, 0.5);
  CHECK(p.position() == Approx(1));
  p.advance(m, 1000);
  CHECK(p.position() == last_beat(m));
  CHECK_FALSE(p.playing);

  // Switching clocks keeps the instant.
  p.seek_beat(m, 3.5);
  const Moment before = p.moment(m);
  p.set_clock(m, Clock::measured);
  CHECK(p.position() == Approx(before.time_us));
  CHECK(p.moment(m).time_us == Approx(before.time_us));
  p.next_step(m);
  CHECK(p.moment(m).beat == Approx(4).margin(1e-6));
  p.playing = true;
  p.advance(m, 1e6);
  CHECK(p.position() == Approx(m.active_end));
  CHECK_FALSE(p.playing);
  p.reset(m);
  CHECK(p.position() == Approx(m.active_begin));
}

TEST_CASE("in flight: a step's messages travel between its beats", "[playback]") {
  const TraceModel& m = all_reduce_trace();
  Playback p;
  p.reset(m);
  p.seek_beat(m, 0.25);
  const auto moving = in_flight(m, p.moment(m));
  int step1 = 0;
  for (const auto& msg : m.messages) step1 += msg.step == m.step_ids[0];
  REQUIRE(step1 > 0);
  CHECK(static_cast<int>(moving.size()) == step1);
  for (const auto& f : moving) {
    CHECK(m.messages[f.message].step == m.step_ids[0]);
    CHECK(f.progress == Approx(0.25));
  }
  p.seek_beat(m, 1);
  CHECK(in_flight(m, p.moment(m)).empty());  // on a whole step nothing travels

  // Measured clock: a message is on the wire between its send and its arrival.
  const Message& msg = m.messages[m.messages.size() / 2];
  REQUIRE(msg.arrival > msg.send_time);
  p.set_clock(m, Clock::measured);
  p.seek_time(m, (msg.send_time + msg.arrival) / 2);
  bool found = false;
  for (const auto& f : in_flight(m, p.moment(m)))
    if (&m.messages[f.message] == &msg) {
      found = true;
      CHECK(f.progress == Approx(0.5));
    }
  CHECK(found);
}

TEST_CASE("link traffic so far adds up to every message at the end", "[playback]") {
  const TraceModel& m = all_reduce_trace();
  Playback p;
  p.reset(m);
  CHECK(link_traffic(m, p.moment(m)).empty());
  p.seek_beat(m, last_beat(m));
  std::int64_t sum = 0;
  int messages = 0;
  for (const auto& l : link_traffic(m, p.moment(m))) {
    CHECK(l.src != l.dst);
    sum += l.bytes;
    messages += l.messages;
  }
  CHECK(sum == total_bytes(m));
  CHECK(messages == static_cast<int>(m.messages.size()));
}

TEST_CASE("shards at the end of a ring all-reduce: every rank holds every chunk from every rank",
          "[playback]") {
  const TraceModel& m = all_reduce_trace();
  Playback p;
  p.reset(m);
  p.seek_beat(m, last_beat(m));
  for (const Clock c : {Clock::steps, Clock::measured}) {
    p.set_clock(m, c);
    const ShardState s = shards_at(m, p.moment(m));
    bool seen = false;
    for (const auto& b : s.buffers) {
      if (b.name != "ring_chunked") continue;
      seen = true;
      for (int r = 0; r < m.world_size(); ++r)
        for (int c2 = 0; c2 < b.chunks; ++c2) {
          CHECK(b.at(r, c2).held);
          CHECK(b.at(r, c2).count == m.world_size());
        }
    }
    CHECK(seen);
  }
}

TEST_CASE("memory at a moment is the last ledger sample before it", "[playback]") {
  const TraceModel& m = all_reduce_trace();
  REQUIRE(!m.memory.empty());
  REQUIRE(!m.memory[0].empty());
  Moment at;
  at.clock = Clock::measured;
  at.time_us = m.memory[0].front().ts - 1;
  CHECK(memory_at(m, at)[0].total == 0);  // before the first sample: nothing allocated
  // at a sample's time during the run, that sample ...
  REQUIRE(m.rank_end.size() == m.ranks.size());
  const MemorySample* last = nullptr;
  for (const MemorySample& s : m.memory[0])
    if (s.ts <= m.rank_end[0]) last = &s;
  REQUIRE(last);
  at.time_us = last->ts;
  CHECK(memory_at(m, at)[0].total == last->total);
  // ... and after the rank's last span, in its teardown, still the state it finished in
  at.time_us = m.memory[0].back().ts;
  REQUIRE(at.time_us > m.rank_end[0]);
  CHECK(memory_at(m, at)[0].total == last->total);
  CHECK(memory_at(m, at).size() == m.ranks.size());
}

TEST_CASE("memory at the end: every rank shows its state before its teardown", "[playback]") {
  // Two ranks; rank 1 finishes its span at 50 and frees everything at 60 (its teardown), while
  // rank 0 works on to 100 and frees at 110. At the end of the active range (100) both ranks
  // show the state they finished in, not 0 B on rank 1 and full bars on rank 0.
  TraceModel m;
  m.strings = {"", "work"};
  for (int r = 0; r < 2; ++r) {
    distlab::testing::add_rank_with_span(m, r, 0, r == 0 ? 100 : 50, 1);
    MemorySample full, freed;
    full.ts = 10;
    full.bytes[0] = 1000;
    full.total = 1000;
    freed.ts = r == 0 ? 110 : 60;
    m.memory.push_back({full, freed});
  }
  m.t_end = 120;
  index_steps(m);
  REQUIRE(active_range(m).end == 100);

  Playback p;
  p.seek_beat(m, last_beat(m));  // the end, as --png draws it
  for (const MemorySample& s : memory_at(m, p.moment(m))) CHECK(s.total == 1000);
  p.set_clock(m, Clock::measured);
  p.seek_time(m, 1e9);  // clamped to the active range's end
  for (const MemorySample& s : memory_at(m, p.moment(m))) CHECK(s.total == 1000);
  // Before a rank's teardown nothing changes: at 55 rank 1 has finished and still holds it all.
  Moment at;
  at.clock = Clock::measured;
  at.time_us = 55;
  CHECK(memory_at(m, at)[1].total == 1000);

  // The ZeRO-3 and attention examples, whose ranks tear down at different times: at the last
  // step every rank holds memory, the same model state on every rank of ZeRO-3.
  for (const char* name : {"10_zero3_fsdp", "13_tensor_parallel_attention"}) {
    INFO(name);
    const TraceModel t = load_trace_model(example_trace(name));
    Playback q;
    q.seek_beat(t, last_beat(t));
    const auto end = memory_at(t, q.moment(t));
    for (const MemorySample& s : end) CHECK(s.total > 0);
    if (std::string(name) == "10_zero3_fsdp")
      for (const MemorySample& s : end)
        CHECK(s.bytes[0] + s.bytes[1] + s.bytes[2] ==
              end[0].bytes[0] + end[0].bytes[1] + end[0].bytes[2]);
  }
}

TEST_CASE("computing is true only inside a compute span", "[playback]") {
  const TraceModel& m = all_reduce_trace();
  const Span* compute = nullptr;
  for (const auto& s : m.spans)
    if (s.kind == SpanKind::compute && s.dur > 0) compute = &s;
  REQUIRE(compute);
  const int rank = m.lanes[compute->lane].rank;
  Moment at;
  at.clock = Clock::measured;
  at.time_us = compute->start + compute->dur / 2;
  CHECK(computing(m, at)[rank]);
  at.time_us = m.t_end + 1;
  CHECK_FALSE(computing(m, at)[rank]);
}

TEST_CASE("memory history: each slice of time holds its most, the teardown left out",
          "[playback]") {
  TraceModel m;
  m.ranks.resize(1);
  m.rank_end = {100};
  const int act = 3;  // activations
  auto sample = [&](double ts, std::int64_t bytes) {
    MemorySample s;
    s.ts = ts;
    s.bytes[act] = bytes;
    s.total = bytes + 1000;
    m.memory.resize(1);
    m.memory[0].push_back(s);
  };
  // A rise to 5 at t = 10, to 50 at 20, a dip to 0 at 30 and a refill to 9 at 33 and 0 at 36,
  // 7 at 90; the teardown's free at 110 comes after the rank's last span.
  for (auto [ts, b] : std::vector<std::pair<double, std::int64_t>>{
           {10, 5}, {20, 50}, {30, 0}, {33, 9}, {36, 0}, {90, 7}, {110, 0}})
    sample(ts, b);
  const auto h = memory_history(m, 0, act, 0, 100, 10);  // slices [10k, 10k + 10)
  CHECK(h == std::vector<double>{0, 5, 50, 9, 0, 0, 0, 0, 0, 7});
  // The total (none before the first sample), and slices finer than the samples: the held value
  // carries over.
  const auto t = memory_history(m, 0, kMemoryCategories, 0, 40, 8);  // slices of 5
  CHECK(t == std::vector<double>{0, 0, 1005, 1005, 1050, 1050, 1009, 1009});
  // Past the rank's end the teardown is left out: it still holds 7.
  CHECK(memory_history(m, 0, act, 95, 120, 1) == std::vector<double>{7});
  // Nothing to show: an unknown rank, no columns, an empty range.
  CHECK(memory_history(m, 3, act, 0, 100, 4) == std::vector<double>(4, 0.0));
  CHECK(memory_history(m, 0, act, 0, 100, 0).empty());
  CHECK(memory_history(m, 0, act, 50, 50, 2) == std::vector<double>(2, 0.0));
}

TEST_CASE("value tracks: a lesson's values over the run, read from the trace", "[playback]") {
  // Two ranks record a loss scale at every step, rank 1 a final loss once: the loss scale is a
  // track (rank 0's), the loss is not (a single value); a memory counter is not a value. Only the
  // names otherData lists are tracks.
  const std::string json = R"({"otherData": {"value_tracks": ["loss scale", "final loss"]},
    "traceEvents": [
    {"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"rank 0"}},
    {"ph":"M","name":"process_name","pid":2,"tid":0,"args":{"name":"rank 1"}},
    {"ph":"X","name":"step","pid":1,"tid":1,"ts":0,"dur":100},
    {"ph":"X","name":"step","pid":2,"tid":1,"ts":0,"dur":100},
    {"ph":"C","name":"loss scale","pid":2,"tid":0,"ts":5,"args":{"value":65536}},
    {"ph":"C","name":"loss scale","pid":1,"tid":0,"ts":30,"args":{"value":131072}},
    {"ph":"C","name":"loss scale","pid":1,"tid":0,"ts":10,"args":{"value":65536}},
    {"ph":"C","name":"loss scale","pid":1,"tid":0,"ts":60,"args":{"value":65536}},
    {"ph":"C","name":"final loss","pid":2,"tid":0,"ts":90,"args":{"value":0.25}},
    {"ph":"C","name":"memory","pid":1,"tid":0,"ts":1,"args":{"params_bytes":64}}]})";
  const TraceModel m = parse_trace_model(json);
  REQUIRE(m.values.size() == 3);  // (final loss, r1), (loss scale, r0), (loss scale, r1)
  const auto tracks = value_tracks(m);
  REQUIRE(tracks.size() == 1);
  const ValueSeries& v = *tracks[0];
  CHECK(v.name == "loss scale");
  CHECK(v.rank == 0);
  REQUIRE(v.samples.size() == 3);  // by time, whatever the file's order
  CHECK(v.samples[1].ts == 30);
  CHECK(std::isnan(value_at(v, 9)));  // before the first
  CHECK(value_at(v, 10) == 65536);
  CHECK(value_at(v, 59.9) == 131072);
  CHECK(value_at(v, 1000) == 65536);
  // A factor of 2 is drawn on a linear scale; 2^16 to 2^29 on a log one.
  const ValueScale lin = value_scale(v);
  CHECK_FALSE(lin.log);
  CHECK(lin.height(65536) == 0);
  CHECK(lin.height(131072) == 1);
  ValueSeries wide{"s", 0, {{0, 65536}, {1, 0x1p29}, {2, 0x1p22}}};
  const ValueScale log = value_scale(wide);
  CHECK(log.log);
  CHECK(log.height(0x1p22) == Approx(6.0 / 13));
  CHECK(format_value(0x1p28) == "2^28");
  CHECK(format_value(3) == "3");
  CHECK(format_value(0.000123456) == "0.0001235");
  TraceModel unlisted = m;
  unlisted.info.value_tracks.clear();
  CHECK(value_tracks(unlisted).empty());
}
