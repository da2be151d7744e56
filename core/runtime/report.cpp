// report.cpp — the tables every lesson can print from its run: the schedule, one line per step
// (wrapped at 100 columns),
// and the traffic per rank (counted in trace_counts.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/base/units.hpp"
#include "core/runtime/runtime.hpp"

namespace distlab {

void print_schedule(const RunResult& result, int max_ranks, int max_lines) {
  if (result.world.size > max_ranks) return;
  fmt::print("\nschedule (one line per step):\n");
  std::map<int, std::vector<std::pair<int, const SpanEvent*>>> by_step;
  for (const auto& log : result.logs)
    for (const auto& e : log.spans)
      if (e.kind == SpanEvent::Kind::send && e.meta.step >= 0)
        by_step[e.meta.step].emplace_back(log.rank, &e);
  int lines = 0;
  for (auto& [step, sends] : by_step) {
    if (lines++ >= max_lines) {
      fmt::print("  ... ({} steps in all)\n", by_step.size());
      break;
    }
    std::sort(sends.begin(), sends.end(), [](auto& a, auto& b) { return a.first < b.first; });
    // The step's messages, wrapped at 100 columns under the first one.
    std::string line = fmt::format("  step {:>2}:", step);
    const std::string indent(line.size(), ' ');
    for (std::size_t i = 0; i < sends.size(); ++i) {
      const auto& [src, e] = sends[i];
      std::string msg = fmt::format(" r{} -> r{}", src, e->peer);
      if (e->meta.chunk_begin >= 0) {
        if (e->meta.chunk_end == e->meta.chunk_begin + 1)
          msg += fmt::format(" chunk {}", e->meta.chunk_begin);
        else
          msg += fmt::format(" chunks {}-{}", e->meta.chunk_begin, e->meta.chunk_end - 1);
      }
      msg += fmt::format(" ({}{}){}", format_bytes(static_cast<double>(e->bytes)),
                         e->meta.apply == Apply::reduce ? ", reduce" : "",
                         i + 1 < sends.size() ? "," : "");
      if (i > 0 && line.size() + msg.size() > 100) {
        fmt::print("{}\n", line);
        line = indent;
      }
      line += msg;
    }
    fmt::print("{}\n", line);
  }
}

void print_traffic(const RunResult& result, const std::string& title) {
  fmt::print("\n{}:\n", title);
  const auto traffic = result.traffic();
  fmt::print("  {:>4}  {:>12}  {:>12}  {:>6}  {:>6}  {:>5}  {:>10}\n", "rank", "sent", "received",
             "msgs>", "msgs<", "steps", "comm time");
  std::uint64_t sent = 0, recv = 0;
  for (std::size_t r = 0; r < traffic.size(); ++r) {
    const auto& t = traffic[r];
    fmt::print("  {:>4}  {:>12}  {:>12}  {:>6}  {:>6}  {:>5}  {:>10}\n", fmt::format("r{}", r),
               format_bytes(static_cast<double>(t.bytes_sent)),
               format_bytes(static_cast<double>(t.bytes_recv)), t.msgs_sent, t.msgs_recv, t.steps,
               format_seconds(t.comm_seconds));
    sent += t.bytes_sent;
    recv += t.bytes_recv;
  }
  fmt::print("  {:>4}  {:>12}  {:>12}  {:>6}  {:>6}  {:>5}\n", "all",
             format_bytes(static_cast<double>(sent)), format_bytes(static_cast<double>(recv)), "",
             "", result.steps());
}

}  // namespace distlab
