#include "core/transport/transport.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "core/base/units.hpp"

namespace distlab {

std::string wait_subject(int rank, const RequestState* r) {
  if (!r) return fmt::format("r{} waits in barrier", rank);
  return fmt::format("r{} waits in {} {} r{} (tag {}, {}, {})", rank, r->is_send ? "send" : "recv",
                     r->is_send ? "to" : "from", r->peer, r->tag,
                     format_bytes(static_cast<double>(r->mem.bytes)), to_string(r->mem.dtype));
}

std::string wait_subject(int rank, const std::string& what) {
  return fmt::format("r{} waits in {}", rank, what);
}

std::string describe_wait(int rank, const RequestState* r, double since_us, double now) {
  return fmt::format("{} for {:.1f} s", wait_subject(rank, r), (now - since_us) * 1e-6);
}

std::string describe_wait(int rank, const std::string& what, double since_us, double now) {
  return fmt::format("{} for {:.1f} s", wait_subject(rank, what), (now - since_us) * 1e-6);
}

void print_hang_report(double timeout_s, const std::vector<std::string>& lines) {
  std::string report = fmt::format(
      "distlab: deadlock or hang: no rank has progressed for {:.1f} s (--deadlock-timeout): no "
      "message completed and no rank finished. Who waits for whom:",
      timeout_s);
  for (const auto& line : lines) report += "\n  " + line;
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", report.c_str());
  std::fflush(stderr);
}

ClockOffset clock_offset_from(int rounds, const std::function<double(double now)>& ask) {
  double best_rtt = 1e300;
  ClockOffset best;
  for (int round = 0; round < rounds; ++round) {
    const double t0 = now_us();
    const double remote = ask(t0);
    const double t1 = now_us();
    if (t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      best = {(t0 + t1) / 2 - remote, best_rtt / 2};
    }
  }
  return best;
}

void poll_backoff(long& spins) {
  ++spins;
  if (spins < 2000)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 20000 ? 20 : 500));
}

}  // namespace distlab
