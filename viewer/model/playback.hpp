// playback.hpp — where playback stands in a trace, and what the trace shows at that moment.
// Plain C++ over TraceModel (no ImGui), so the panels only draw and the tests check the logic.
//
// Two clocks (the Playback panel switches between them):
//   steps     each algorithm step is one beat: the position p runs over [0, number of steps];
//             the messages (and window accesses) of the k-th step travel while p is in
//             (k - 1, k), and at p = k every message of it and the steps before has been
//             applied. The default for teaching.
//             Beats count the steps the trace holds (TraceModel::step_ids); step ids themselves
//             need not be contiguous (a lesson's untraced warm-up runs use ids too).
//   measured  real timestamps: the position is a time in microseconds in the active range
//             (first span to last span end; active_range());
//             a message travels from its send to its arrival.
// Either position maps to the other through the step frames (piecewise linear), so a panel
// can always ask for both a time and a beat.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "viewer/model/shard_replay.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

enum class Clock : std::uint8_t { steps, measured };
const char* to_string(Clock c);

// The moment a frame draws: both clocks' views of the same instant.
struct Moment {
  Clock clock = Clock::steps;
  double beat = 0;     // steps clock position, in [0, last_beat]
  double time_us = 0;  // measured time, in active_range()
  int step = 0;        // the step id of beat floor(beat) (0 before the first): messages of
                       // steps <= this are complete on the steps clock
};

// Beat <-> time through TraceModel::beat_times: beat k - 1 is the start of the k-th step, the
// last beat is active_end. A trace without steps maps [0, 1] onto the active range.
double time_at_beat(const TraceModel& model, double beat);
double beat_at_time(const TraceModel& model, double t_us);
int last_beat(const TraceModel& model);  // the steps clock's end: the number of steps, at least 1
// The measured clock's range: TraceModel::active_begin/end, or the whole extent of a model
// nobody indexed.
struct TimeSpan {
  double begin = 0, end = 0;
};
TimeSpan active_range(const TraceModel& model);
int step_id_at_beat(const TraceModel& model, int beat);  // the id of the beat-th step; 0 for beat 0

class Playback {
 public:
  Clock clock = Clock::steps;
  bool playing = false;
  // steps clock: beats per second; measured clock: the whole trace plays in 10 s / speed.
  double speed = 1.0;

  void reset(const TraceModel& model);                         // to the start, paused
  void set_clock(const TraceModel& model, Clock c);            // keeps the instant
  void advance(const TraceModel& model, double wall_seconds);  // when playing; stops at the end
  void next_step(const TraceModel& model);                     // to the next whole step
  void prev_step(const TraceModel& model);
  void seek_beat(const TraceModel& model, double beat);
  void seek_time(const TraceModel& model, double t_us);
  double position() const { return position_; }  // beat or time, by the clock
  Moment moment(const TraceModel& model) const;

 private:
  double position_ = 0;
};

// A message on the wire at a moment: progress 0 at the sender, 1 at the receiver.
struct InFlight {
  std::uint32_t message = 0;  // index into TraceModel::messages
  double progress = 0;
};
// steps clock: the messages of step ceil(beat) while beat is between steps (messages without a
// step by time); measured clock: send_time <= t < arrival.
std::vector<InFlight> in_flight(const TraceModel& model, const Moment& at);

// A window access under way at a moment (TraceModel::accesses): progress 0 at its start, 1 at
// its end. As in_flight: on the steps clock the accesses of step ceil(beat) while beat is
// between steps (those without a step by time); on the measured clock start <= t < end.
struct InProgress {
  std::uint32_t access = 0;  // index into TraceModel::accesses
  double progress = 0;
};
std::vector<InProgress> accesses_in_progress(const TraceModel& model, const Moment& at);

// Per rank: true while a compute span covers the moment's time.
std::vector<bool> computing(const TraceModel& model, const Moment& at);

// Bytes that have arrived on each directed link (src, dst) by the moment.
struct LinkTraffic {
  int src = 0, dst = 0;
  std::int64_t bytes = 0;
  int messages = 0;
};
std::vector<LinkTraffic> link_traffic(const TraceModel& model, const Moment& at);

// The shard state the moment shows: state_at_step(step) on the steps clock, state_at_time on
// the measured one.
ShardState shards_at(const TraceModel& model, const Moment& at);
ShardState shards_at(const ShardReplay& replay, const Moment& at);  // prepared once

// The ledger of each rank at the moment's time (the last sample at or before it; zeros before
// the first). One entry per rank. A rank's time stops at the end of its last span
// (TraceModel::rank_end): the frees of its teardown come after, at a different time on every
// rank, so at the end every rank shows the state it finished in, not 0 B on some and full bars
// on others.
std::vector<MemorySample> memory_at(const TraceModel& model, const Moment& at);

// One rank's bytes of ledger category `category` (kMemoryCategories: the total) over the times
// [t0, t1] cut into `columns` equal slices: each slice's most, the bytes held at its start or
// any sample inside it, so a short rise between two pixels still shows (lesson 19's activations
// rise through each forward and fall through each backward); a dip shorter than a slice does not
// (full recompute's buffers, freed and charged again within microseconds). Like memory_at, a
// rank's time stops at its last span: its teardown's frees are left out. For the Memory panel's
// strip of the run.
std::vector<double> memory_history(const TraceModel& model, int rank, int category, double t0,
                                   double t1, int columns);

// The Timeline's value tracks: each name the trace lists in otherData.value_tracks that the lesson
// recorded at least twice (a value over the run), its lowest rank's series, by name.
std::vector<const ValueSeries*> value_tracks(const TraceModel& model);
// A series' value at time t: its last sample at or before t; NaN before the first.
double value_at(const ValueSeries& series, double t);
// How a track draws its values: on a log scale where they are all positive and span a factor of
// 16 or more (a loss scale of 2^16 to 2^29), else a linear one; each value's height in [0, 1]
// between the series' least and most.
struct ValueScale {
  double lo = 0, hi = 1;
  bool log = false;
  double height(double v) const;  // 0 at lo, 1 at hi (0.5 where lo == hi)
};
ValueScale value_scale(const ValueSeries& series);
// "2^28" for a power of two at or above 2^8, else the value's 4 significant digits.
std::string format_value(double v);

}  // namespace distlab::viewer
