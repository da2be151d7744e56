// schedule.hpp — a pipeline's schedule read from a trace, for the Schedule panel (no ImGui).
//
// A pipeline trace (lesson 11) marks each forward and backward on the compute lane with phase
// args {"op": "forward" | "backward", "micro": m, "stage": s}, each update with {"op": "update"},
// and gives the ideal schedule's parameters in otherData.pipeline (docs/trace-format.md). From
// them, built once per trace (build_pipeline_schedule):
//   measured  per stage the blocks the trace holds (op, micro-batch, start, end) by start, each in
//             its iteration (the updates before it on that stage); per iteration its extent (the
//             first block's start to the last block's end over every stage); per stage and
//             iteration the busy time, the bubbles (idle intervals inside the extent) and the
//             activations in flight over time (forwards done minus backwards done)
//   ideal     the same for one iteration on lesson 11's ideal machine (a forward 1 unit, a
//             backward 2, messages free; an op starts when its stage is free and its input is
//             there), from the orders lesson 11 runs: GPipe and naive (M = 1) every forward then
//             every backward, the last forward's first; 1F1B min(P - r - 1, M) warm-up forwards on
//             stage r, then one forward and one backward, then the cool-down backwards
//   beats     the steps clock mapped onto ideal time: iteration k's step ids are first_step +
//             k x steps_per_iteration + i, where i ranks the ideal ops' distinct end times; beat
//             j starts step step_ids[j] (as TraceModel::beat_times), so it sits at that end time
// On an ideal machine each stage is busy M (f + b) of (M + P - 1)(f + b): M/(M+P-1).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "viewer/model/timeline_lod.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

enum class PipeOp : std::uint8_t { forward, backward };

// One forward or backward of one micro-batch on one stage.
struct PipeBlock {
  double start = 0, end = 0;  // microseconds (measured) or units (ideal)
  std::int32_t micro = 0;
  std::int32_t iteration = 0;
  PipeOp op = PipeOp::forward;
};

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
  std::vector<FlightPoint> flight;  // by t, one point per forward end and backward end
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

enum class PipelineKind : std::uint8_t { unknown, naive, gpipe, one_f_one_b };
const char* to_string(PipelineKind k);  // "naive", "gpipe", "1f1b", "unknown"

// otherData.pipeline (lesson 11): the ideal schedule's parameters.
struct PipelineParams {
  bool present = false;  // the trace has the field and it names stages and micro-batches
  PipelineKind kind = PipelineKind::unknown;
  int stages = 0, microbatches = 0, iterations = 0;
  double forward_units = 1, backward_units = 2;
  int first_step = 1, steps_per_iteration = 0;
};
// Parses the field's raw JSON text; a missing or malformed field gives present = false.
PipelineParams parse_pipeline_params(std::string_view json);

// Stage r's order of work (lesson 11's schedule_of): forward or backward of micro-batch m.
struct PipeStep {
  PipeOp op = PipeOp::forward;
  int micro = 0;
  bool operator==(const PipeStep&) const = default;
};
std::vector<PipeStep> pipeline_order(PipelineKind kind, int stage, int stages, int micro);

// The orders of every stage replayed on the ideal machine: one iteration from time 0. A stage
// whose op's input never comes stops there (an order that would deadlock).
ScheduleTimes ideal_schedule(PipelineKind kind, int stages, int micro, double forward_units = 1,
                             double backward_units = 2);

struct PipelineSchedule {
  PipelineParams params;
  ScheduleTimes measured;
  ScheduleTimes ideal;           // empty without params (or with an unknown schedule)
  std::vector<double> ideal_at;  // per beat 0 .. last_beat: its ideal time; empty without ideal
  int stages = 0;                // rows: params.stages, or the highest stage any block names + 1
  int microbatches = 0;          // params.microbatches, or the highest micro-batch + 1

  // A pipeline trace: the lesson declares one, or its spans carry micro-batch phase args.
  bool any() const { return params.present || !measured.iterations.empty(); }
  bool has_ideal() const { return !ideal.iterations.empty(); }
  double ideal_period() const {  // one ideal iteration's length, units
    return has_ideal() ? ideal.iterations[0].end : 0;
  }
  double formula() const;  // M / (M + P - 1), 0 without P and M
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
