#include "core/transport/transport.hpp"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "core/base/units.hpp"

namespace distlab {

std::string describe_wait(int rank, const RequestState* r, double since_us, double now) {
  if (!r) return fmt::format("r{} waits in barrier for {:.1f} s", rank, (now - since_us) * 1e-6);
  return fmt::format("r{} waits in {} {} r{} (tag {}, {}, {}) for {:.1f} s", rank,
                     r->is_send ? "send" : "recv", r->is_send ? "to" : "from", r->peer, r->tag,
                     format_bytes(static_cast<double>(r->mem.bytes)), to_string(r->mem.dtype),
                     (now - since_us) * 1e-6);
}

std::string describe_wait(int rank, const std::string& what, double since_us, double now) {
  return fmt::format("r{} waits in {} for {:.1f} s", rank, what, (now - since_us) * 1e-6);
}

void poll_backoff(long& spins) {
  ++spins;
  if (spins < 2000)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 20000 ? 20 : 500));
}

}  // namespace distlab
