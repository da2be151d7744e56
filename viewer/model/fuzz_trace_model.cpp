// fuzz_trace_model.cpp — libFuzzer target for the viewer's trace loader (clang only).
//
// Any bytes go to parse_trace_model. distlab::Error is the expected rejection of bad input;
// anything else is a loader bug: a crash, an AddressSanitizer or UndefinedBehaviorSanitizer
// report, a leak, or another exception type escaping (libFuzzer reports it as a crash).
// A trace that loads is also replayed (state_at_step, state_at_time) when its shard grid,
// ranks x chunks summed over buffers, is small: the replay's state is that grid by design. Its
// pipeline schedule (schedule.hpp: phase args, otherData.pipeline) is built too.
// Its otherData.splits (a lesson's own JSON, parsed apart) is indexed and read at a moment.
// A PyTorch profiler trace (pytorch_trace.hpp) is also loaded twice over as a run of two ranks:
// its collectives matched, the clocks aligned, the run analysed and written as text and CSV.
//
// Run it (builds build/fuzz with clang, fuzzes a copy of the seed corpus for SECONDS):
//   scripts/fuzz-trace-model.sh [SECONDS]
// Once over the seed corpus (viewer/model/fuzz_corpus/), after a first run of the script:
//   ctest --test-dir build/fuzz -L fuzz
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/base/check.hpp"
#include "viewer/model/caption.hpp"
#include "viewer/model/pytorch_trace.hpp"
#include "viewer/model/real_run.hpp"
#include "viewer/model/schedule.hpp"
#include "viewer/model/shard_replay.hpp"
#include "viewer/model/splits.hpp"
#include "viewer/model/trace_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace distlab::viewer;
  TraceModel m;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    m = parse_trace_model(text);
  } catch (const distlab::Error&) {
    return 0;  // rejected with a sentence: the expected outcome for most inputs
  }
  if (m.info.source == "pytorch") {
    const TraceModel run = parse_trace_set({text, text}, {"a", "b"});  // loaded once already
    const RealRun r = analyze_real_run(run);
    real_run_table(run, r);
    real_run_csv(run, r);
    index_captions(run);
  }
  std::size_t cells = 0;
  for (const BufferInfo& b : m.info.buffers)
    cells += static_cast<std::size_t>(m.world_size()) * b.chunks;
  if (cells <= (1u << 16)) {
    state_at_step(m, m.max_step());
    state_at_time(m, m.t_end);
  }
  const PipelineSchedule s = build_pipeline_schedule(m);
  s.ideal_time_at_beat(0.5);
  s.beat_at_ideal_time(1.0);
  const SplitsIndex splits = build_splits_index(m);
  Moment mid;
  mid.time_us = 0.5 * (m.t_begin + m.t_end);
  splits_at(splits, mid);
  return 0;
}
