// colors.cpp — the palette (colors.hpp).
#include "viewer/app/colors.hpp"

#include <algorithm>
#include <cmath>

namespace distlab::viewer {

ImU32 span_color(SpanKind k) {
  switch (k) {
    case SpanKind::compute:
      return IM_COL32(76, 175, 80, 255);
    case SpanKind::send:
      return IM_COL32(66, 133, 244, 255);
    case SpanKind::recv:
      return IM_COL32(245, 150, 40, 255);
    case SpanKind::deliver:
      return IM_COL32(150, 150, 150, 255);
    case SpanKind::load:
      return kWindowLoad;
    case SpanKind::store:
      return kWindowStore;
  }
  return IM_COL32(200, 200, 200, 255);
}

ImU32 chunk_color(int chunk, int chunks) {
  if (chunk < 0) return IM_COL32(200, 200, 200, 255);  // the whole buffer
  const float h =
      static_cast<float>(chunk % std::max(chunks, 1)) / static_cast<float>(std::max(chunks, 1));
  float r = 0, g = 0, b = 0;
  ImGui::ColorConvertHSVtoRGB(h, 0.65f, 0.95f, r, g, b);
  return ImGui::ColorConvertFloat4ToU32(ImVec4(r, g, b, 1.0f));
}

ImU32 rank_color(int rank, int ranks) {
  return chunk_color(rank, ranks);
}

ImU32 group_color(std::string_view group) {
  if (group == "tp") return IM_COL32(239, 83, 80, 255);
  if (group == "pp") return IM_COL32(186, 104, 200, 255);
  if (group == "dp") return IM_COL32(38, 198, 218, 255);
  if (group.empty()) return IM_COL32(170, 170, 170, 255);
  std::uint32_t h = 2166136261u;  // FNV-1a: the same name, the same hue in every frame
  for (const char c : group) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return chunk_color(static_cast<int>(h % 360), 360);
}

ImU32 category_color(int k) {
  static const ImU32 kColors[kMemoryCategories] = {
      IM_COL32(66, 133, 244, 255),   // params
      IM_COL32(234, 67, 53, 255),    // grads
      IM_COL32(251, 188, 5, 255),    // optimizer
      IM_COL32(52, 168, 83, 255),    // activations
      IM_COL32(171, 71, 188, 255),   // comm
      IM_COL32(120, 144, 156, 255),  // data
  };
  return k >= 0 && k < kMemoryCategories ? kColors[k] : IM_COL32(200, 200, 200, 255);
}

ImU32 micro_color(int micro, pipeline::Pass pass) {
  using pipeline::Pass;
  // Saturation and value per pass: F light, B dark, I deeper and darker, W pale and greyed.
  float sat = 0.55f, val = 0.95f;
  if (pass == Pass::backward) sat = 0.75f, val = 0.68f;
  if (pass == Pass::input) sat = 0.95f, val = 0.50f;
  if (pass == Pass::weight) sat = 0.28f, val = 0.78f;
  if (micro < 0) sat = 0;  // a block of no micro-batch: grey, in the pass's shade
  const float h = std::fmod(0.08f + 0.381966f * static_cast<float>(std::max(micro, 0)), 1.0f);
  float r = 0, g = 0, b = 0;
  ImGui::ColorConvertHSVtoRGB(h, sat, val, r, g, b);
  return ImGui::ColorConvertFloat4ToU32(ImVec4(r, g, b, 1.0f));
}

ImU32 micro_text_color(pipeline::Pass pass) {
  const bool dark = pass == pipeline::Pass::backward || pass == pipeline::Pass::input;
  return dark ? IM_COL32(255, 255, 255, 255) : IM_COL32(20, 20, 20, 255);
}

ImU32 model_chunk_color(int chunk, int chunks) {
  // Grey steps from white (chunk 0) to a mid grey (the last, still clear of the panel's dark
  // background), apart from every micro-batch's hue.
  const float f = chunks > 1 ? static_cast<float>(std::clamp(chunk, 0, chunks - 1)) /
                                   static_cast<float>(chunks - 1)
                             : 0.0f;
  const auto v = static_cast<int>(std::lround(245.0f - 150.0f * f));
  return IM_COL32(v, v, v, 255);
}

ImU32 with_alpha(ImU32 c, float f) {
  const auto a = static_cast<ImU32>(static_cast<float>((c >> IM_COL32_A_SHIFT) & 0xFF) *
                                    std::clamp(f, 0.0f, 1.0f));
  return (c & ~IM_COL32_A_MASK) | (a << IM_COL32_A_SHIFT);
}

}  // namespace distlab::viewer
