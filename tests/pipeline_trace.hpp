// pipeline_trace.hpp — a pipeline trace as lesson 11 writes one, made from core's schedules for
// the viewer's tests: every stage's ops where the ideal machine runs them (10 us a unit), their
// phase args, an update after each iteration, and otherData.pipeline. No ImGui.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "core/base/pipeline.hpp"

namespace distlab::testing {

inline std::string pipeline_trace_json(const pipeline::Shape& shape, int iterations) {
  const auto orders = pipeline::orders_of(shape);
  const auto ends = pipeline::ideal_ends(orders, shape.micro, shape.chunks);
  const auto ticks = pipeline::ideal_ticks(ends);
  int step = 0;  // one ideal iteration, units
  for (const auto& e : ends)
    for (int t : e) step = std::max(step, t);
  const double unit_us = 10, update_us = 5, period_us = step * unit_us + update_us;
  const bool interleaved = shape.schedule == pipeline::Schedule::interleaved;
  std::string events;
  const auto add = [&](const std::string& event) {
    events += (events.empty() ? "" : ",\n") + event;
  };
  for (int k = 0; k < iterations; ++k)
    for (int r = 0; r < shape.stages; ++r) {
      const auto& order = orders[static_cast<std::size_t>(r)];
      const auto& end = ends[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < end.size(); ++i) {
        const pipeline::Op op = order[i];
        const double t1 = k * period_us + end[i] * unit_us,
                     t0 = t1 - pipeline::units(op.pass) * unit_us;
        const std::string chunk = interleaved ? fmt::format(" chunk {}", op.chunk) : "",
                          chunk_arg = interleaved ? fmt::format(R"(,"chunk":{})", op.chunk) : "";
        add(fmt::format(
            R"({{"ph":"X","name":"{} {}{}","cat":"compute","pid":{},"tid":1,"ts":{},"dur":{},)"
            R"("args":{{"op":"{}","micro":{},"stage":{}{}}}}})",
            pipeline::to_string(op.pass), op.micro, chunk, r, t0, t1 - t0,
            pipeline::to_string(op.pass), op.micro, r, chunk_arg));
      }
      add(fmt::format(
          R"({{"ph":"X","name":"update","cat":"compute","pid":{},"tid":1,"ts":{},"dur":{},)"
          R"("args":{{"op":"update","stage":{}}}}})",
          r, k * period_us + step * unit_us, update_us, r));
    }
  const std::string params = fmt::format(
      R"({{"schedule":"{}","stages":{},"microbatches":{},"chunks":{},"iterations":{},)"
      R"("forward_units":1,"backward_units":2,"first_step":1,"steps_per_iteration":{}}})",
      pipeline::to_string(shape.schedule), shape.stages, shape.micro, shape.chunks, iterations,
      ticks.size());
  return fmt::format(
      R"({{"traceEvents":[{}],"otherData":{{"schema":"distlab-trace","schema_version":3,)"
      R"("world_size":{},"pipeline":{}}}}})",
      events, shape.stages, params);
}

}  // namespace distlab::testing
