// memory_compare.cpp — ZeRO's memory per device measured from the traces (memory_compare.hpp).
#include "viewer/model/memory_compare.hpp"

#include <simdjson.h>

#include <algorithm>
#include <string_view>

namespace distlab::viewer {

namespace {

namespace dom = simdjson::dom;

std::int64_t int_of(dom::element e, const char* key) {
  std::int64_t v = 0;
  if (e[key].get_int64().get(v)) {
    double d = 0;
    if (e[key].get_double().get(d)) return 0;
    v = static_cast<std::int64_t>(d);
  }
  return v;
}

const char* kStageKeys[kZeroStages] = {"dp", "zero1", "zero2", "zero3"};

}  // namespace

const char* zero_stage_title(ZeroStage s) {
  switch (s) {
    case ZeroStage::dp:
      return "baseline DP";
    case ZeroStage::zero1:
      return "P_os";
    case ZeroStage::zero2:
      return "P_os+g";
    case ZeroStage::zero3:
      return "P_os+g+p";
  }
  return "?";
}

const char* zero_stage_formula(ZeroStage s) {
  switch (s) {
    case ZeroStage::dp:
      return "16";
    case ZeroStage::zero1:
      return "4 + 12/N";
    case ZeroStage::zero2:
      return "2 + 14/N";
    case ZeroStage::zero3:
      return "16/N";
  }
  return "?";
}

double zero_bytes_per_param(ZeroStage s, int n) {
  const double N = std::max(1, n);
  switch (s) {
    case ZeroStage::dp:
      return 16;
    case ZeroStage::zero1:
      return 4 + 12 / N;
    case ZeroStage::zero2:
      return 2 + 14 / N;
    case ZeroStage::zero3:
      return 16 / N;
  }
  return 0;
}

double zero_comm_psi(ZeroStage s) {
  return s == ZeroStage::zero3 ? 3.0 : 2.0;
}

bool parse_zero_stage(std::string_view text, ZeroStage& out) {
  for (int i = 0; i < kZeroStages; ++i)
    if (text == kStageKeys[i]) {
      out = static_cast<ZeroStage>(i);
      return true;
    }
  return false;
}

std::int64_t StageMemory::state(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(bytes.size())) return 0;
  const auto& b = bytes[static_cast<std::size_t>(rank)];
  return b[0] + b[1] + b[2];
}

double StageMemory::formula_sent_per_step() const {
  const double n = std::max(1, ranks);
  return zero_comm_psi(stage) * double(psi) * 2.0 * (n - 1) / n;
}

double StageMemory::measured_comm_psi() const {
  const double n = std::max(1, ranks);
  if (sent_per_step < 0 || psi <= 0 || n < 2) return -1;
  return sent_per_step / (2.0 * double(psi) * (n - 1) / n);
}

std::optional<ZeroInfo> read_zero_info(const TraceModel& m) {
  const std::string_view raw = m.info.extra_json("zero");
  if (raw.empty()) return std::nullopt;
  dom::parser parser;
  dom::element z;
  if (parser.parse(raw.data(), raw.size()).get(z) || !z.is_object()) return std::nullopt;
  ZeroInfo info;
  std::string_view stage;
  if (z["stage"].get_string().get(stage) || !parse_zero_stage(stage, info.stage))
    return std::nullopt;
  info.psi = int_of(z, "psi");
  info.ranks = static_cast<int>(int_of(z, "ranks"));
  info.steps = static_cast<int>(int_of(z, "steps"));
  if (info.psi <= 0 || info.ranks <= 0) return std::nullopt;
  dom::array state;
  if (!z["state"].get_array().get(state))
    for (dom::element r : state)
      info.state.push_back({int_of(r, "params"), int_of(r, "grads"), int_of(r, "optimizer")});
  dom::element base;
  if (!z["baseline"].get(base) && base.is_object())
    info.baseline = std::array<std::int64_t, kZeroParts>{
        int_of(base, "params"), int_of(base, "grads"), int_of(base, "optimizer"),
        int_of(base, "activations")};
  return info;
}

std::optional<StageMemory> measure_stage(const TraceModel& m) {
  const auto info = read_zero_info(m);
  if (!info) return std::nullopt;
  StageMemory s;
  s.stage = info->stage;
  s.source = m.info.lesson;
  s.traced = true;
  s.ranks = info->ranks;
  s.psi = info->psi;
  s.steps = info->steps;
  const int n = m.world_size();
  s.bytes.assign(static_cast<std::size_t>(n), {});
  for (int r = 0; r < n && r < static_cast<int>(m.memory.size()); ++r) {
    const double end = r < static_cast<int>(m.rank_end.size()) && m.rank_end[r] >= 0 ? m.rank_end[r]
                                                                                     : m.active_end;
    auto& b = s.bytes[static_cast<std::size_t>(r)];
    for (const MemorySample& x : m.memory[r]) {
      if (x.ts <= end)  // the last sample before the teardown: the state a step leaves
        for (int k = 0; k < 3; ++k) b[k] = x.bytes[k];
      b[3] = std::max(b[3], x.bytes[3]);  // activations: the peak
    }
    if (r < static_cast<int>(info->state.size()))
      for (int k = 0; k < 3; ++k)
        s.state_matches_lesson = s.state_matches_lesson && b[k] == info->state[r][k];
  }
  if (info->steps > 0 && n > 0) {
    std::int64_t sent = 0;
    for (const Message& msg : m.messages)
      if (msg.src >= 0 && msg.dst >= 0 && msg.src != msg.dst)
        sent += std::max<std::int64_t>(0, msg.bytes);
    s.sent_per_step = double(sent) / n / info->steps;
  }
  return s;
}

std::optional<StageMemory> baseline_of(const TraceModel& m) {
  const auto info = read_zero_info(m);
  if (!info || !info->baseline) return std::nullopt;
  StageMemory s;
  s.stage = ZeroStage::dp;
  s.source = m.info.lesson;
  s.traced = false;
  s.ranks = info->ranks;
  s.psi = info->psi;
  s.steps = info->steps;
  s.bytes.assign(1, *info->baseline);  // = {x} warns falsely (GCC 14, ASan, -Warray-bounds)
  return s;
}

MemoryCompare build_memory_compare(const std::vector<const TraceModel*>& models) {
  MemoryCompare out;
  std::array<std::optional<StageMemory>, kZeroStages> slot;
  std::optional<StageMemory> baseline;
  for (const TraceModel* m : models) {
    if (!m) continue;
    auto s = measure_stage(*m);
    const std::string name = m->info.lesson.empty() ? std::string("a trace") : m->info.lesson;
    if (!s) {
      out.notes.push_back(name + ": not a ZeRO lesson's trace (no otherData.zero)");
      continue;
    }
    auto& here = slot[static_cast<int>(s->stage)];
    if (here) {
      out.notes.push_back(name + ": a second " + zero_stage_title(s->stage) + " trace, left out");
      continue;
    }
    if (!baseline) baseline = baseline_of(*m);
    here = std::move(s);
  }
  if (!slot[0] && baseline) slot[0] = std::move(baseline);
  for (auto& s : slot)
    if (s) out.stages.push_back(std::move(*s));
  return out;
}

}  // namespace distlab::viewer
