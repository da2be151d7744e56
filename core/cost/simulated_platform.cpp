#include "core/cost/simulated_platform.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <map>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"

#ifdef DISTLAB_SMPI
#include <simgrid/host.h>
#endif

namespace distlab {

std::string simulated_platform_name() {
  const char* name = std::getenv("DISTLAB_SIM_PLATFORM");
  return name && *name ? name : "";
}

std::optional<SimulatedNetwork> simulated_network(const std::vector<std::string>& hosts) {
#ifdef DISTLAB_SMPI
  SimulatedNetwork net;
  net.platform = simulated_platform_name();
  if (net.platform.empty()) net.platform = "a SimGrid platform";
  std::map<std::string, sg_host_t> by_name;
  for (const std::string& h : hosts) {
    sg_host_t host = sg_host_by_name(h.c_str());
    DL_CHECK(host != nullptr, "host '{}' is not on the simulated platform", h);
    by_name.emplace(h, host);
  }
  double min_bw = 0, first_lat = -1, first_bw = -1;
  for (auto a = by_name.begin(); a != by_name.end(); ++a)
    for (auto b = std::next(a); b != by_name.end(); ++b)
      for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
        const double lat = sg_host_get_route_latency(from->second, to->second);
        const double bw = sg_host_get_route_bandwidth(from->second, to->second);
        if (first_lat < 0) first_lat = lat, first_bw = bw;
        net.uniform = net.uniform && lat == first_lat && bw == first_bw;
        net.alpha_s = std::max(net.alpha_s, lat);
        if (min_bw == 0 || bw < min_bw) {
          min_bw = bw;
          net.slowest = fmt::format("{} -> {}", from->first, to->first);
        }
      }
  net.beta_s_per_byte = min_bw > 0 ? 1 / min_bw : 0;
  return net;
#else
  (void)hosts;
  return std::nullopt;
#endif
}

}  // namespace distlab
