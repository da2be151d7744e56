// distlab_trace_check — loads a trace with the core loader and checks its invariants.
//
//   distlab_trace_check TRACE.json [--world N] [--verified | --failed]
// Prints each broken rule and exits 1; prints a one-line summary and exits 0 when all hold.
#include <fmt/format.h>

#include <cstring>
#include <string>

#include "core/trace/reader.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr,
               "usage: distlab_trace_check TRACE.json [--world N] [--verified | --failed]\n");
    return 2;
  }
  int world = -1, expect = 0;  // expect: 1 verified, -1 failed
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--world") && i + 1 < argc)
      world = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--verified"))
      expect = 1;
    else if (!std::strcmp(argv[i], "--failed"))
      expect = -1;
  }
  try {
    const auto trace = distlab::load_trace(argv[1]);
    auto problems = distlab::check_invariants(trace);
    if (world >= 0 && trace.world_size != world)
      problems.push_back(fmt::format("world_size is {}, expected {}", trace.world_size, world));
    if (expect == 1 && !trace.verified)
      problems.push_back("otherData.verification.verified is false");
    if (expect == -1 && trace.verified)
      problems.push_back("otherData.verification.verified is true");
    std::size_t windows = 0;  // window accesses (schema 4): a run may move data only by them
    for (const auto& s : trace.spans) windows += s.cat == "window";
    if (trace.flows.empty() && windows == 0 && trace.world_size > 1)
      problems.push_back("no messages and no window accesses in a multi-rank trace");
    for (const auto& p : problems) fmt::print(stderr, "{}: {}\n", argv[1], p);
    if (!problems.empty()) return 1;
    fmt::print(
        "{}: ok ({} ranks, {} spans, {} flow events, {} window accesses, {} counters, {} step "
        "frames, {} rank step instants)\n",
        argv[1], trace.world_size, trace.spans.size(), trace.flows.size(), windows,
        trace.counters.size(), trace.steps.size(), trace.rank_steps.size());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
}
