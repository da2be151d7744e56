// recorder.hpp — what a rank records while it runs, and the message metadata that feeds it.
//
// Each rank owns one Recorder; recording is a push_back into that rank's own vectors: no
// locks, no I/O on the hot path. At the end the runtime merges every rank's RankLog and
// writer.cpp writes Chrome Trace Event JSON (see docs/trace-format.md).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/base/clock.hpp"
#include "core/trace/format.hpp"

namespace distlab {

// What the receiver does with a message's data.
enum class Apply : std::uint8_t { copy = 0, reduce = 1 };

// Data flow of one message: which logical buffer and chunks it carries and whose
// contributions are already summed into it. Replaying these tells, step by step, which
// chunks each rank holds and how complete each is.
struct MsgMeta {
  int step = -1;         // global step id (Comm::next_steps), -1 when none
  std::string buffer;    // logical buffer the lesson declared ("" when none)
  int chunk_begin = -1;  // chunk range [chunk_begin, chunk_end) of that buffer
  int chunk_end = -1;
  Apply apply = Apply::copy;
  int contributions = 0;           // how many ranks' data is summed into this payload
  std::uint64_t contrib_mask = 0;  // bit r set when rank r's data is in it (world <= 64)
  std::string group;               // the group it was sent in (Comm::split's name), "" for all
};

// What a lesson says a compute phase is (schema 3, docs/trace-format.md "Phase args"): the op,
// the micro-batch and pipeline stage it works on, and a caption the viewer shows while it runs.
// Empty fields are not written.
struct PhaseArgs {
  std::string op{};    // "forward", "backward", "update", ...
  int micro = -1;      // micro-batch, -1 when none
  int stage = -1;      // pipeline stage (model chunk), -1 when none
  int chunk = -1;      // the stage's model chunk (an interleaved pipeline's), -1 when none
  std::string text{};  // the caption
  bool empty() const { return op.empty() && micro < 0 && stage < 0 && chunk < 0 && text.empty(); }
};

// A span on one of the rank's lanes. Messages are spans too: a send span carries the flow
// start, a recv span the flow finish (bound to a short "deliver" slice at its end). Window
// accesses are spans with no message: a rank's load from or store to a symmetric window
// (core/transport/symmetric.hpp), `peer` the window's owner, on the recv lane (load) or the send
// lane (store).
struct SpanEvent {
  enum class Kind : std::uint8_t { plain, send, recv, load, store };
  Kind kind = Kind::plain;
  Lane lane = Lane::compute;
  std::string name;
  double t0 = 0, t1 = 0;  // microseconds on this rank's clock
  int peer = -1, tag = -1;
  std::uint64_t bytes = 0;
  std::uint64_t seq = 0;  // k-th message between (src, dst, tag) in its group: pairs send with recv
  MsgMeta meta;
  PhaseArgs phase;  // plain spans on the compute lane only
};

// A message's span (send or recv), as against a plain phase or a window access.
constexpr bool is_message(SpanEvent::Kind k) {
  return k == SpanEvent::Kind::send || k == SpanEvent::Kind::recv;
}
constexpr bool is_window_access(SpanEvent::Kind k) {
  return k == SpanEvent::Kind::load || k == SpanEvent::Kind::store;
}

struct CounterEvent {
  double ts = 0;
  std::array<std::int64_t, kCategories> bytes{};
};

struct StepEvent {
  double ts = 0;
  int step = 0;
};

// A named value a lesson records over time (a training loss): a counter track of its own.
struct ValueEvent {
  double ts = 0;
  std::string name;
  double value = 0;
};

struct CheckResult {
  std::string name;
  bool ok = false;
  std::string detail;
};

// A buffer the lesson declares so that the viewer can draw its chunks.
struct BufferDecl {
  std::string name;
  std::uint64_t length = 0;
  int chunks = 1;
};

// Everything one rank produced: events, memory peaks, checks.
struct RankLog {
  int rank = 0;
  std::string host;
  double clock_offset_us = 0;  // add to this rank's times to get rank 0's clock
  double clock_error_us = 0;   // the true offset is within clock_offset_us +- this
  double t_start = 0, t_end = 0;
  std::vector<SpanEvent> spans;
  std::vector<CounterEvent> counters;
  std::vector<StepEvent> steps;
  std::vector<ValueEvent> values;
  std::vector<CheckResult> checks;
  std::vector<BufferDecl> buffers;
  std::array<std::int64_t, kCategories> peak{};
  std::int64_t peak_total = 0;
};

std::vector<char> serialize(const RankLog& log);
RankLog deserialize(const std::vector<char>& bytes);

// What pairs a send with its receive across the logs: (src, dst, tag, group, seq), the same for
// rank `rank`'s send span and the receive span of its peer.
using MessageKey = std::tuple<int, int, int, std::string, std::uint64_t>;
inline MessageKey message_key(int rank, const SpanEvent& e) {
  return e.kind == SpanEvent::Kind::send ? MessageKey{rank, e.peer, e.tag, e.meta.group, e.seq}
                                         : MessageKey{e.peer, rank, e.tag, e.meta.group, e.seq};
}

// The time a message spends between its send's start and its receive's end is at least this
// (3 ns, the trace's post and deliver slices of a nanosecond each with a rounding to spare);
// through a socket between hosts it is microseconds.
inline constexpr double kMinFlightUs = 0.003;

// Puts together the clock offsets of logs gathered from several hosts (ranks on other hosts
// than rank 0's estimate theirs at start-up, each within its clock_error_us), from two facts:
// 1. the ranks of one host read one clock: each host takes the estimate with the smallest error
//    among its ranks (rank 0's host: offset 0, error 0);
// 2. every message ends after it started, by kMinFlightUs at least: where one between hosts
//    would not on the estimated clocks, the two hosts' offsets move towards each other, each
//    within its error. The true offsets satisfy both, so on a valid run there is room.
// Returns how many host pairs still have a message ending before it started (0 on a valid run;
// the trace checker then names the message).
int align_clocks(std::vector<RankLog>& logs);

class Recorder {
 public:
  explicit Recorder(int rank) { log_.rank = rank; }

  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }

  void span(SpanEvent&& e) {
    if (enabled_) log_.spans.push_back(std::move(e));
  }
  void counter(const std::array<std::int64_t, kCategories>& bytes) {
    if (enabled_) log_.counters.push_back({now_us(), bytes});
  }
  void step(int step) {
    if (enabled_) log_.steps.push_back({now_us(), step});
  }
  void value(const std::string& name, double v) {
    if (enabled_) log_.values.push_back({now_us(), name, v});
  }

  RankLog& log() { return log_; }

 private:
  bool enabled_ = true;
  RankLog log_;
};

}  // namespace distlab
