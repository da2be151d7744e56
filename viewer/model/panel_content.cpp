// panel_content.cpp — which panels have something to show (panel_content.hpp).
#include "viewer/model/panel_content.hpp"

namespace distlab::viewer {

bool shards_have_content(const TraceModel& m) {
  return m.world_size() > 0 && !m.info.buffers.empty();
}

bool memory_has_content(const TraceModel& m) {
  if (m.world_size() == 0) return false;
  if (!m.info.memory_expected_bytes.empty()) return true;
  for (const auto& series : m.memory)
    if (!series.empty()) return true;
  return false;
}

std::string shards_empty_reason(const TraceModel& m) {
  if (shards_have_content(m)) return "";
  if (m.world_size() == 0) return "this trace has no ranks";
  return "this trace declares no buffers (otherData.buffers): there are no shards to replay";
}

std::string memory_empty_reason(const TraceModel& m) {
  if (memory_has_content(m)) return "";
  if (m.world_size() == 0) return "this trace has no ranks";
  return "this trace has no memory ledger (no \"memory\" counter events)";
}

}  // namespace distlab::viewer
