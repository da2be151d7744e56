// colors.hpp — the viewer's palette, shared so every panel colours a thing the same way.
#pragma once

#include <imgui.h>

#include <cstdint>
#include <string_view>

#include "core/base/pipeline.hpp"
#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

// Span kinds: compute green, send blue, recv orange, deliver grey, a window's load teal and
// store pink (no message: the Topology panel draws them dashed); idle is the lane background.
ImU32 span_color(SpanKind k);
inline constexpr ImU32 kWindowLoad = IM_COL32(38, 166, 154, 255);
inline constexpr ImU32 kWindowStore = IM_COL32(236, 64, 122, 255);
// Chunk c of n: evenly spaced hues, so neighbouring chunks differ (packets and shard cells).
ImU32 chunk_color(int chunk, int chunks);
// Rank r of n: chunk r's colour, so a rank's own chunk and its own slice of a split weight
// (Splits panel) share one colour.
ImU32 rank_color(int rank, int ranks);
// A message's group (Comm::split's name): tp red, pp violet, dp cyan (lesson 14's mesh), any
// other name a hue of its own; the world's ("") grey.
ImU32 group_color(std::string_view group);
// Memory ledger category k (memory_category_name(k)).
ImU32 category_color(int k);
// Rank node fill (idle) and glow (computing); the selection highlight.
inline constexpr ImU32 kRankFill = IM_COL32(60, 70, 90, 255);
inline constexpr ImU32 kRankGlow = IM_COL32(120, 230, 120, 255);
inline constexpr ImU32 kHighlight = IM_COL32(255, 230, 60, 255);
inline constexpr ImU32 kText = IM_COL32(230, 230, 230, 255);
inline constexpr ImU32 kDim = IM_COL32(110, 110, 110, 255);

// Micro-batch m of a pipeline: hues a golden angle apart, so neighbours and the first dozen are
// all distinct; each pass a shade of that hue (the Schedule panel): a forward light, a backward
// dark, its input's gradient (I) deep and darker still, its weights' gradient (W) pale.
ImU32 micro_color(int micro, pipeline::Pass pass = pipeline::Pass::forward);
// The text over a block of that colour: dark on the light shades, white on the dark ones.
ImU32 micro_text_color(pipeline::Pass pass);
// Model chunk c of v (an interleaved pipeline): the stripe along the foot of its blocks.
ImU32 model_chunk_color(int chunk, int chunks);
// Idle time inside a pipeline iteration: the bubble.
inline constexpr ImU32 kBubble = IM_COL32(200, 60, 60, 70);

// A node's box around its ranks (the Topology panel, a trace with ranks per node).
inline constexpr ImU32 kNodeBoxFill = IM_COL32(45, 52, 68, 150);
inline constexpr ImU32 kNodeBoxEdge = IM_COL32(140, 150, 175, 255);

// Communication hidden under compute (overlap.hpp): the hatch over those parts of a message span
// (the Timeline panel), and the counter that sums them.
inline constexpr ImU32 kHiddenHatch = IM_COL32(15, 15, 20, 220);
inline constexpr ImU32 kHiddenText = IM_COL32(120, 220, 140, 255);

// a with its alpha scaled by f in [0, 1].
ImU32 with_alpha(ImU32 c, float f);

}  // namespace distlab::viewer
