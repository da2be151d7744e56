// schedule.hpp — a pipeline's schedule read from a trace, for the Schedule panel (no ImGui).
//
// A pipeline trace (lessons 11 and 14) marks each pass of a micro-batch on the compute lane with
// phase args {"op": "forward" | "backward" | "backward-input" | "backward-weight", "micro": m,
// "stage": s} (and "chunk": c, the rank's model chunk, when the schedule is interleaved), each
// update with {"op": "update"}, and gives the ideal schedule's parameters in otherData.pipeline
// (docs/trace-format.md). From them, built once per trace (build_pipeline_schedule):
//   measured  per stage the blocks the trace holds (pass, micro-batch, chunk, start, end) by
//             start, each in its iteration (the updates before it on that stage); per iteration
//             its extent (the first block's start to the last block's end over every stage); per
//             stage and iteration the busy time, the bubbles (idle intervals inside the extent)
//             and the activations in flight over time (a forward takes one, a backward or a W
//             lets it go, an I keeps it: pipeline::max_in_flight's rule)
//   ideal     the same for one iteration on the ideal machine of core/base/pipeline.hpp (F 1
//             unit, B 2, I 1, W 1, messages free; an op starts when its stage is free and its
//             input is there), replaying the orders the lesson runs (pipeline::orders_of: naive,
//             GPipe, 1F1B, interleaved 1F1B, zero bubble H1)
//   beats     the steps clock mapped onto ideal time: iteration k's step ids are first_step +
//             k x steps_per_iteration + i, where i ranks the ideal ops' distinct end times; beat
//             j starts step step_ids[j] (as TraceModel::beat_times), so it sits at that end time
// On the ideal machine each stage is busy pipeline::utilisation_formula of the step: M/(M+P-1)
// for GPipe and 1F1B, vM/(vM+P-1) interleaved, 3M/(3M+P-1) zero bubble.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/pipeline.hpp"
#include "viewer/model/playback.hpp"
#include "viewer/model/timeline_lod.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

// One pass (F, B, I or W) of one micro-batch through one model chunk of one stage.
struct PipeBlock {
  double start = 0, end = 0;  // microseconds (measured) or units (ideal)
  std::int32_t micro = 0;
  std::int32_t iteration = 0;
  pipeline::Pass pass = pipeline::Pass::forward;
  std::int32_t chunk = 0;  // the rank's model chunk: virtual stage chunk x P + stage
};

// "backward-input of micro-batch 3", with " (chunk 1)" where the ranks hold several chunks.
std::string block_text(const PipeBlock& b, int chunks);
// The block's label: "I 3", or "I 3.1" (micro-batch 3, chunk 1) where the ranks hold several
// chunks; `tight` drops the space ("I3.1").
std::string block_label(const PipeBlock& b, int chunks, bool tight = false);

struct Interval {
  double start = 0, end = 0;
};

// From t on, the stage holds `count` micro-batches' activations.
struct FlightPoint {
  double t = 0;
  int count = 0;
};

struct StageTimes {
  std::vector<PipeBlock> blocks;    // by start; blocks of one stage never overlap
  std::vector<Interval> bubbles;    // idle inside each iteration's extent, by start
  std::vector<FlightPoint> flight;  // by t, one point per end of a block that changes the count
  std::vector<double> busy;         // per iteration: the blocks' summed duration
  int peak_flight = 0;
};

// One picture of the pipeline: measured (every iteration) or ideal (one iteration from 0).
struct ScheduleTimes {
  std::vector<StageTimes> stages;
  std::vector<Interval> iterations;  // each iteration's extent over every stage
  // busy / extent of stage s in iteration k; 0 when either is missing.
  double utilisation(int stage, int iteration) const;
  int iteration_at(double t) const;  // the last iteration that starts at or before t (0 if none)
};

// otherData.pipeline (lessons 11 and 14): the ideal schedule's parameters. forward_units and
// backward_units are not read: the ideal machine is core's (pipeline::units).
struct PipelineParams {
  bool present = false;  // the trace has the field and it names stages and micro-batches
  std::optional<pipeline::Schedule> schedule;  // none: a name no schedule has
  int stages = 0, microbatches = 0, chunks = 1, iterations = 0;
  int first_step = 1, steps_per_iteration = 0;
};
// Parses the field's raw JSON text; a missing or malformed field gives present = false.
PipelineParams parse_pipeline_params(std::string_view json);
// "1f1b", "zb-h1", ...; "unknown" without a schedule.
const char* schedule_name(const PipelineParams& p);

// pipeline::orders_of(shape) replayed on the ideal machine (pipeline::ideal_ends): one iteration
// from time 0. A stage whose op's input never comes stops there (an order that would deadlock).
ScheduleTimes ideal_schedule(const pipeline::Shape& shape);

struct PipelineSchedule {
  PipelineParams params;
  ScheduleTimes measured;
  ScheduleTimes ideal;           // empty without params (or with an unknown schedule)
  std::vector<double> ideal_at;  // per beat 0 .. last_beat: its ideal time; empty without ideal
  int stages = 0;                // rows: params.stages, or the highest stage any block names + 1
  int microbatches = 0;          // params.microbatches, or the highest micro-batch + 1
  int chunks = 1;                // params.chunks, or the highest chunk any block names + 1
  bool split = false;            // some block is an I or a W (zero bubble)

  // A pipeline trace: the lesson declares one, or its spans carry micro-batch phase args.
  bool any() const { return params.present || !measured.iterations.empty(); }
  bool has_ideal() const { return !ideal.iterations.empty(); }
  double ideal_period() const {  // one ideal iteration's length, units
    return has_ideal() ? ideal.iterations[0].end : 0;
  }
  // The schedule's shape (GPipe's where the trace names none: its formula is 1F1B's too).
  pipeline::Shape shape() const;
  double formula() const;  // pipeline::utilisation_formula(shape()), 0 without P and M
  // The formula as text, apart ("3M/(3M+P-1)") and as a fraction of this shape ("24/27").
  std::string formula_symbol() const;
  std::string formula_fraction() const;
  // The steps clock's beat as ideal time over every iteration (piecewise linear between beats).
  double ideal_time_at_beat(double beat) const;
  // The inverse: the beat of an ideal time (for seeking by a click).
  double beat_at_ideal_time(double t) const;
};

// Reads the blocks, the parameters and the ideal schedule (linear in the spans: build it once,
// Document::derived).
PipelineSchedule build_pipeline_schedule(const TraceModel& model);

// Micro-batches held at t (the last point at or before t).
int flight_at(const StageTimes& stage, double t);

// Where a playback moment falls in the schedule: on the steps clock the ideal schedule where
// there is one (its beats mapped onto ideal time), else what ran; the iteration the moment is in.
struct ScheduleMoment {
  bool ideal = false;
  int iteration = 0, iterations = 1;
  double t0 = 0, length = 0;  // the iteration's start and length, in the picture's time
  double cursor = 0;          // the moment, in the picture's time
};
ScheduleMoment schedule_moment(const PipelineSchedule& s, const Moment& now);

// `distlab-viewer --describe`'s lines for a pipeline trace, "" for any other: the schedule, its
// formula, and per stage what runs at the moment ("backward-input of micro-batch 3 (chunk 1)" or
// "idle (bubble)") and the activations it holds.
std::string describe_schedule(const PipelineSchedule& s, const Moment& now);

// ---- drawing, without ImGui -------------------------------------------------------------------

// The blocks a view shows, left to right: one block, or a run of blocks each narrower than
// min_px merged into one item (one binary search per run, so a frame costs about the pixels).
struct BlockItem {
  std::uint32_t first = 0, last = 0;  // indices into StageTimes::blocks
  float x0 = 0, x1 = 0;               // pixels from the view's left edge
  bool merged() const { return last > first; }
};
void block_items(const std::vector<PipeBlock>& blocks, const ViewWindow& view, float min_px,
                 std::vector<BlockItem>& out);

// The activations in flight, one value per pixel column of the view (the most held in it).
void flight_columns(const StageTimes& stage, const ViewWindow& view, std::vector<int>& out);

// The index of the block under time t, -1 when none.
int block_at(const std::vector<PipeBlock>& blocks, double t);
// The index of the stage's bubble around time t, -1 when none.
int bubble_at(const StageTimes& stage, double t);

}  // namespace distlab::viewer
