// panel_content.hpp — whether a panel has anything to show for a trace, and if not, why.
//
// The View lays out only the panels with content (a trace that declares no buffers gets no
// Shards panel, one without a memory ledger no Memory panel); a panel asked for by name
// (`--panel shards`) still draws, and says why it is empty. Plain C++ so the rule is tested.
#pragma once

#include <string>

#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

// Shards: some declared buffer, on some rank. (The replay then shows its initial state even
// before a message carries a chunk of it.)
bool shards_have_content(const TraceModel& model);
// Memory: some sample of the ledger ("memory" counters), or the lesson's formula.
bool memory_has_content(const TraceModel& model);

// The sentence a panel shows in place of its content; "" when it has content.
std::string shards_empty_reason(const TraceModel& model);
std::string memory_empty_reason(const TraceModel& model);

}  // namespace distlab::viewer
