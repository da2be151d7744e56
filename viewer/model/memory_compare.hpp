// memory_compare.hpp — ZeRO's picture measured: memory per device for plain data parallel and
// the three ZeRO stages side by side, from the traces of lessons 08, 09 and 10 (plain C++, no
// ImGui; the memory-compare panel draws it).
//
// A ZeRO lesson writes otherData.zero (docs/trace-format.md): its stage, Psi (parameters), N,
// the steps, each rank's model state as its ledger measured it, and the plain data-parallel run
// it trains beside the stage (untraced) as the baseline. From each trace this measures, per rank
// and from the trace's own ledger (the "memory" counter):
//   params, grads, optimizer  the model state before the rank's teardown (the last sample at or
//                             before its last span: TraceModel::rank_end): what a step leaves
//   activations               the rank's peak (ZeRO shards none of them)
//   sent per step             bytes the rank sent in the trace's messages / steps
// and beside them the formulas (Psi parameters, N ranks):
//   stage        model state per parameter   communication per step (ZeRO's count)
//   baseline DP  2 + 2 + 12     = 16          2 Psi   (all-reduce: reduce-scatter + all-gather)
//   P_os         2 + 2 + 12/N   = 4 + 12/N    2 Psi   (reduce-scatter + all-gather)
//   P_os+g       2 + 14/N                     2 Psi
//   P_os+g+p     16/N                         3 Psi   (two all-gathers + a reduce-scatter)
// A ring collective sends (N-1)/N of its Psi x 2 bytes (bf16) per rank, so the measured volume
// in Psi is sent / (2 Psi (N-1)/N); the zero padding of the shards makes it a little above.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

enum class ZeroStage : std::uint8_t { dp, zero1, zero2, zero3 };
inline constexpr int kZeroStages = 4;
// The parts of a bar, bottom-up: the ledger's first four categories.
inline constexpr int kZeroParts = 4;  // params, grads, optimizer, activations

const char* zero_stage_title(ZeroStage s);        // "baseline DP", "P_os", "P_os+g", "P_os+g+p"
const char* zero_stage_formula(ZeroStage s);      // "16", "4 + 12/N", "2 + 14/N", "16/N"
double zero_bytes_per_param(ZeroStage s, int n);  // model state: 16, 4 + 12/N, 2 + 14/N, 16/N
double zero_comm_psi(ZeroStage s);                // communication per step: 2, 2, 2, 3 Psi
// "dp", "zero1", "zero2", "zero3" (otherData.zero.stage); false for anything else.
bool parse_zero_stage(std::string_view text, ZeroStage& out);

// One stage's bars, measured.
struct StageMemory {
  ZeroStage stage = ZeroStage::dp;
  std::string source;   // the lesson that measured it ("10_zero3_fsdp")
  bool traced = false;  // from a trace's ledger; false: a lesson's baseline (metadata only)
  int ranks = 0;
  std::int64_t psi = 0;  // parameters
  int steps = 0;
  // Per rank (one entry for a baseline: rank 0's): params, grads, optimizer, activations.
  std::vector<std::array<std::int64_t, kZeroParts>> bytes;
  double sent_per_step = -1;  // bytes one rank sent per step (mean over ranks); -1: not traced
  bool state_matches_lesson = true;  // the ledger's model state equals what the lesson recorded

  std::int64_t state(int rank) const;  // params + grads + optimizer
  double formula_bytes() const { return zero_bytes_per_param(stage, ranks) * double(psi); }
  // What one rank sends per step by the formula: comm Psi x 2 bytes x (N-1)/N.
  double formula_sent_per_step() const;
  // The measured volume in ZeRO's units (Psi): sent / (2 Psi (N-1)/N); -1 when not traced.
  double measured_comm_psi() const;
};

// otherData.zero of one trace, parsed; nullopt when the trace has none (not a ZeRO lesson's) or
// it is malformed.
struct ZeroInfo {
  ZeroStage stage = ZeroStage::dp;
  std::int64_t psi = 0;
  int ranks = 0, steps = 0;
  std::vector<std::array<std::int64_t, 3>> state;  // per rank: params, grads, optimizer
  // The plain data-parallel run the lesson trains beside the stage, untraced: rank 0's ledger
  // (params, grads, optimizer, activations peak); absent when the lesson gives none.
  std::optional<std::array<std::int64_t, kZeroParts>> baseline;
};
std::optional<ZeroInfo> read_zero_info(const TraceModel& m);

// The stage a trace measured, from its ledger and messages (nullopt: not a ZeRO trace).
std::optional<StageMemory> measure_stage(const TraceModel& m);
// The baseline a ZeRO trace carries (plain DP, rank 0's), nullopt when none.
std::optional<StageMemory> baseline_of(const TraceModel& m);

// The picture from several traces: at most one entry per stage, in stage order. A traced stage
// wins over a baseline from metadata; of two traces of one stage the first is kept and the
// other named in `notes`, as is every trace that is not a ZeRO lesson's.
struct MemoryCompare {
  std::vector<StageMemory> stages;
  std::vector<std::string> notes;
};
MemoryCompare build_memory_compare(const std::vector<const TraceModel*>& models);

}  // namespace distlab::viewer
