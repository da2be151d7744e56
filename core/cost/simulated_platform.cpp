#include "core/cost/simulated_platform.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
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

std::optional<SimulatedRoute> simulated_route(const std::string& from, const std::string& to) {
#ifdef DISTLAB_SMPI
  sg_host_t a = sg_host_by_name(from.c_str()), b = sg_host_by_name(to.c_str());
  DL_CHECK(a != nullptr && b != nullptr,
           "hosts '{}' and '{}' are not both on the simulated platform", from, to);
  return SimulatedRoute{sg_host_get_route_latency(a, b), sg_host_get_route_bandwidth(a, b)};
#else
  (void)from, (void)to;
  return std::nullopt;
#endif
}

std::optional<int> simulated_ranks_per_node(int ranks) {
#ifdef DISTLAB_SMPI
  const char* file = std::getenv("DISTLAB_SIM_HOSTFILE");
  if (!file || !*file || ranks < 1) return std::nullopt;
  std::ifstream in(file);
  std::vector<sg_host_t> hosts;
  for (std::string name; hosts.size() < std::size_t(ranks) && std::getline(in, name);) {
    sg_host_t host = sg_host_by_name(name.c_str());
    if (!host) return std::nullopt;
    hosts.push_back(host);
  }
  if (hosts.size() != std::size_t(ranks)) return std::nullopt;
  const auto bw = [&](int a, int b) {
    return sg_host_get_route_bandwidth(hosts[std::size_t(a)], hosts[std::size_t(b)]);
  };
  double slowest = 0;
  for (int a = 0; a < ranks; ++a)
    for (int b = 0; b < ranks; ++b)
      if (a != b && (slowest == 0 || bw(a, b) < slowest)) slowest = bw(a, b);
  // Rank 0's node: the ranks it reaches faster than the slowest route; they must come first.
  int g = 1;
  while (g < ranks && bw(0, g) > slowest) ++g;
  if (ranks % g != 0) return std::nullopt;
  for (int a = 0; a < ranks; ++a)
    for (int b = 0; b < ranks; ++b)
      if (a != b && (a / g == b / g) != (bw(a, b) > slowest)) return std::nullopt;
  return g;
#else
  (void)ranks;
  return std::nullopt;
#endif
}

}  // namespace distlab
