// simulated_platform.hpp — the network of a simulated run, read off its SimGrid platform.
//
// Under smpirun (the smpi build) the ranks live on the hosts of a platform file (platforms/),
// and their clock is the simulation's. The alpha-beta model then takes alpha and beta from
// that platform, not from a ping-pong of this machine: alpha is a route's latency (the sum of
// its links'), beta the inverse of its bandwidth (its slowest link's). distlab runs SMPI with
// computation not simulated, so gamma is 0: the simulated clock is the network's.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace distlab {

struct SimulatedNetwork {
  std::string platform;        // its name (platforms/NAME.xml), or "a SimGrid platform"
  double alpha_s = 0;          // the largest route latency between two of the run's hosts
  double beta_s_per_byte = 0;  // 1 / the smallest route bandwidth between two of them
  std::string slowest;         // "node-0 -> node-1": the pair with the smallest bandwidth
  // Every pair of the run's hosts has the same route latency and bandwidth: one switch, where
  // messages between different pairs share no link (each host's link is full duplex).
  bool uniform = true;
};

// The network between `hosts` (each rank's host, in rank order) on the simulated platform;
// nullopt when this build is not the smpi one. Call it on a rank of the simulation (rank 0
// after the run is one).
std::optional<SimulatedNetwork> simulated_network(const std::vector<std::string>& hosts);

// One route of the simulated platform: its latency (the sum of its links') and bandwidth (its
// slowest link's). nullopt outside the smpi build.
struct SimulatedRoute {
  double latency_s = 0;
  double bandwidth_Bps = 0;
};
std::optional<SimulatedRoute> simulated_route(const std::string& from, const std::string& to);

// The simulated platform's nodes over the first `ranks` hosts of the run (DISTLAB_SIM_HOSTFILE,
// the hosts in rank order, which ./distlab --sim writes): ranks share a node when the route
// between them is faster (more bandwidth) than the slowest route of the run. G when every G
// consecutive ranks form one node (dgx-pair: 4), 1 when every route is alike (one switch: each
// host its own node), nullopt outside the smpi build or when the hosts form no such grouping.
std::optional<int> simulated_ranks_per_node(int ranks);

// The platform's name: DISTLAB_SIM_PLATFORM (./distlab lesson NN --sim sets it), else "".
std::string simulated_platform_name();

}  // namespace distlab
