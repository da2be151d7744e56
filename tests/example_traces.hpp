// example_traces.hpp — the committed example traces (traces/examples/), for tests of the viewer's
// model; no ImGui.
#pragma once

#include <string>

namespace distlab::testing {

// An example trace committed under traces/examples/.
inline std::string example_trace(const std::string& name) {
  return std::string(DISTLAB_SOURCE_DIR) + "/traces/examples/" + name + ".json";
}

}  // namespace distlab::testing
