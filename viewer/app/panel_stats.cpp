// panel_stats.cpp — the run in numbers, and the lesson's own words.
//
// Sections, top to bottom (each collapsible):
//   the run         lesson, title, algorithm, ranks, mode, device, transport; verification
//   operations      per buffer: what collective it was, S, measured and predicted time, algbw
//                   and busbw (stats.hpp; the nccl-tests table)
//   traffic         bytes and messages per rank and per directed link, over the whole trace
//   windows         bytes each rank loaded from and stored to symmetric windows (schema 4's
//                   window accesses, no messages), only for a trace that has any
//   cost model      alpha, beta, gamma and where they came from
//   the lesson      otherData.text: the concept, and what to look at
// Everything is computed once per loaded trace (stats.hpp); a trace from another tool shows
// "—" where it has no such data.
#include <fmt/format.h>
#include <imgui.h>

#include <algorithm>
#include <map>
#include <string>

#include "core/base/units.hpp"
#include "viewer/app/colors.hpp"
#include "viewer/app/panels.hpp"
#include "viewer/model/real_run.hpp"
#include "viewer/model/stats.hpp"

namespace distlab::viewer {

namespace {

const ImVec4 kGood(0.45f, 0.85f, 0.45f, 1.0f);
const ImVec4 kBad(1.0f, 0.42f, 0.42f, 1.0f);
constexpr ImGuiTableFlags kTable =
    ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit;
constexpr int kMaxLinkRows = 4096;  // past this, the busiest links only

struct Summary {
  std::vector<LinkTraffic> links;  // by bytes, busiest first
  std::vector<RankTraffic> ranks;
  std::vector<WindowTraffic> windows;  // empty: no window access in the trace
  std::int64_t bytes = 0;
  CostModel cost;
  std::vector<OperationStats> operations;
  RealRun real;  // a PyTorch run's collectives (real_run.hpp)
};

Summary build_summary(const TraceModel& m) {
  Summary s;
  s.links = link_totals(m);
  s.ranks = rank_totals(s.links, m.world_size());
  s.windows = window_totals(m);
  for (const LinkTraffic& l : s.links) s.bytes += l.bytes;
  std::stable_sort(s.links.begin(), s.links.end(),
                   [](const LinkTraffic& a, const LinkTraffic& b) { return a.bytes > b.bytes; });
  s.cost = parse_cost_model(m.info.cost_model_json);
  s.operations = operation_stats(m, s.cost);
  s.real = analyze_real_run(m);
  return s;
}

// What a missing value shows: an em dash, or "-" when the font has no glyph for it (ImGui's
// default ranges stop at Latin-1).
const char* none() {
  const ImFont* font = ImGui::GetFont();
  return font && font->FindGlyphNoFallback(0x2014) ? "\u2014" : "-";
}

const char* or_none(const std::string& s) {
  return s.empty() ? none() : s.c_str();
}
std::string bytes_text(double b) {
  return format_bytes(b);
}
std::string seconds_text(double s) {
  return s > 0 ? format_seconds(s) : none();
}
std::string bandwidth_text(double b) {
  return b >= 0 ? format_bandwidth(b) : none();
}

void row_label(const char* label) {
  ImGui::TableNextRow();
  ImGui::TableNextColumn();
  ImGui::TextDisabled("%s", label);
  ImGui::TableNextColumn();
}

// A label and its value in the two-column "run" table; the value wraps.
void fact(const char* label, const std::string& value) {
  ImGui::TableNextRow();
  ImGui::TableNextColumn();
  ImGui::TextDisabled("%s", label);
  ImGui::TableNextColumn();
  ImGui::TextWrapped("%s", value.empty() ? none() : value.c_str());
}

void draw_run(const TraceModel& m, const Summary& s) {
  const TraceMeta& in = m.info;
  if (!in.title.empty()) ImGui::TextWrapped("%s", in.title.c_str());
  if (ImGui::BeginTable("run", 2, ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableSetupColumn("label", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("value", ImGuiTableColumnFlags_WidthStretch);
    const bool lesson = in.source.empty();  // a real run has no lesson, algorithm or checks
    if (lesson) fact("lesson", in.lesson);
    if (lesson) fact("algorithm", in.algorithm);
    const auto dash = [](const std::string& v) { return v.empty() ? std::string(none()) : v; };
    fact("ranks", std::to_string(m.world_size()) + " \u00b7 " + dash(in.mode) + " \u00b7 " +
                      dash(in.device) + " \u00b7 " + dash(in.transport));
    fact("steps", std::to_string(m.step_ids.size()) + " steps \u00b7 " +
                      std::to_string(m.messages.size()) + " messages \u00b7 " +
                      bytes_text(static_cast<double>(s.bytes)) + " sent" +
                      (m.accesses.empty()
                           ? std::string()
                           : " \u00b7 " + std::to_string(m.accesses.size()) + " window accesses"));
    fact("time", (in.wall_seconds > 0 ? "wall " + format_seconds(in.wall_seconds) + " \u00b7 "
                                      : std::string()) +
                     "traced " + seconds_text((m.t_end - m.t_begin) * 1e-6) + " \u00b7 " +
                     std::to_string(m.events) + " events");
    // A run on a simulated cluster (otherData.clock, docs/trace-format.md): its time is the
    // cluster's, not this machine's.
    if (in.extra_json("clock") == "\"simulated\"") {
      std::string_view platform = in.extra_json("platform");
      if (platform.size() >= 2 && platform.front() == '"')
        platform = platform.substr(1, platform.size() - 2);
      fact("clock", "simulated: the cluster " + std::string(platform) +
                        " (SimGrid SMPI); computation takes no time");
    }
    ImGui::EndTable();
  }
  if (!in.source.empty()) return;  // a real run verifies nothing
  if (!in.has_verification) {
    ImGui::TextDisabled("verification: %s", none());
  } else if (in.verified && in.failed.empty()) {
    ImGui::TextColored(kGood, "verified: %lld checks passed", static_cast<long long>(in.checks));
  } else {
    ImGui::TextColored(kBad, "FAILED: %zu of %lld checks", in.failed.size(),
                       static_cast<long long>(in.checks));
    ImGui::PushStyleColor(ImGuiCol_Text, kBad);
    for (const FailedCheck& f : in.failed)
      ImGui::TextWrapped("r%d  %s: %s", f.rank, f.name.c_str(), f.detail.c_str());
    ImGui::PopStyleColor();
  }
}

void draw_operations(const TraceModel& m, const Summary& s) {
  if (s.operations.empty()) {
    ImGui::TextDisabled("no buffers declared and no cost model: no collective to time");
    return;
  }
  const int n = m.world_size();
  if (ImGui::BeginTable("operations", 8, kTable)) {
    for (const char* h :
         {"buffer", "collective", "size S", "measured", "predicted", "meas/pred", "algbw", "busbw"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const OperationStats& op : s.operations) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(op.name.c_str());
      ImGui::TableNextColumn();
      if (op.pattern == Pattern::unknown)
        ImGui::TextDisabled("%s", none());
      else
        ImGui::TextUnformatted(to_string(op.pattern));
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(op.bytes > 0 ? bytes_text(op.bytes).c_str() : none());
      ImGui::TableNextColumn();
      ImGui::Text("%s%s", seconds_text(op.measured_s).c_str(), op.measured_from_trace ? "*" : "");
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(seconds_text(op.predicted_s).c_str());
      ImGui::TableNextColumn();
      if (op.measured_s > 0 && op.predicted_s > 0)
        ImGui::Text("%.1fx", op.measured_s / op.predicted_s);
      else
        ImGui::TextDisabled("%s", none());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(bandwidth_text(op.algbw()).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(bandwidth_text(op.busbw(n)).c_str());
      if (op.pattern != Pattern::unknown && ImGui::IsItemHovered())
        ImGui::SetTooltip("busbw = algbw x %.3g (%s over %d ranks)", bus_factor(op.pattern, n),
                          to_string(op.pattern), n);
    }
    ImGui::EndTable();
  }
  ImGui::TextDisabled(
      "algbw = S / time; busbw = algbw x (2(n-1)/n all-reduce, (n-1)/n all-gather, reduce-scatter, "
      "gather, scatter; 1 broadcast, reduce). * time from the trace: first send to last arrival.");
}

// Rows past this scroll inside their table.
constexpr int kMaxVisibleRows = 12;

// Table flags and size for `rows` rows: their natural height, or a scrolling box.
ImGuiTableFlags rows_flags(int rows, ImVec2& size) {
  if (rows <= kMaxVisibleRows) return kTable;
  size.y = ImGui::GetTextLineHeightWithSpacing() * (kMaxVisibleRows + 1);
  return kTable | ImGuiTableFlags_ScrollY;
}

void rank_table(const Summary& s) {
  ImVec2 size(0, 0);
  const ImGuiTableFlags flags = rows_flags(static_cast<int>(s.ranks.size()), size);
  if (!ImGui::BeginTable("ranks", 5, flags, size)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (const char* h : {"rank", "sent", "msgs", "received", "msgs"}) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  ImGuiListClipper clip;
  clip.Begin(static_cast<int>(s.ranks.size()));
  while (clip.Step())
    for (int r = clip.DisplayStart; r < clip.DisplayEnd; ++r) {
      const RankTraffic& t = s.ranks[r];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("r%d", r);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(bytes_text(static_cast<double>(t.bytes_sent)).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%d", t.messages_sent);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(bytes_text(static_cast<double>(t.bytes_recv)).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%d", t.messages_recv);
    }
  ImGui::EndTable();
}

void link_table(const Summary& s) {
  const int rows = std::min(static_cast<int>(s.links.size()), kMaxLinkRows);
  ImVec2 size(0, 0);
  const ImGuiTableFlags flags = rows_flags(rows, size);
  if (!ImGui::BeginTable("links", 3, flags, size)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (const char* h : {"link, busiest first", "bytes", "msgs"}) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  ImGuiListClipper clip;
  clip.Begin(rows);
  while (clip.Step())
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      const LinkTraffic& l = s.links[i];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("r%d -> r%d", l.src, l.dst);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(bytes_text(static_cast<double>(l.bytes)).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%d", l.messages);
    }
  ImGui::EndTable();
  if (rows < static_cast<int>(s.links.size()))
    ImGui::TextDisabled("the %d busiest of %zu links", rows, s.links.size());
}

void draw_traffic(const Summary& s) {
  if (s.links.empty()) {
    ImGui::TextDisabled("no messages in this trace");
    return;
  }
  // side by side when the panel is wide enough, else one under the other
  if (ImGui::GetContentRegionAvail().x >= 440 &&
      ImGui::BeginTable("traffic", 2, ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    rank_table(s);
    ImGui::TableNextColumn();
    link_table(s);
    ImGui::EndTable();
  } else {
    rank_table(s);
    link_table(s);
  }
}

// Bytes each rank moved through symmetric windows, by its own loads and stores: no message
// carried them, so they are apart from the traffic above.
void draw_windows(const Summary& s) {
  ImVec2 size(0, 0);
  const ImGuiTableFlags flags = rows_flags(static_cast<int>(s.windows.size()), size);
  if (!ImGui::BeginTable("windows", 5, flags, size)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (const char* h : {"rank", "loaded", "loads", "stored", "stores"}) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  ImGuiListClipper clip;
  clip.Begin(static_cast<int>(s.windows.size()));
  while (clip.Step())
    for (int r = clip.DisplayStart; r < clip.DisplayEnd; ++r) {
      const WindowTraffic& t = s.windows[static_cast<std::size_t>(r)];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("r%d", r);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(bytes_text(static_cast<double>(t.bytes_loaded)).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%d", t.loads);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(bytes_text(static_cast<double>(t.bytes_stored)).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%d", t.stores);
    }
  ImGui::EndTable();
  ImGui::TextDisabled("a rank's own loads and stores on the windows (its own included)");
}

void draw_cost(const Summary& s) {
  const CostModel& c = s.cost;
  if (!c.present) {
    ImGui::TextDisabled("this trace has no cost model (otherData.cost_model)");
    return;
  }
  ImGui::TextWrapped("%s", or_none(c.model));
  if (ImGui::BeginTable("cost", 2, ImGuiTableFlags_SizingFixedFit)) {
    row_label("alpha (per message)");
    ImGui::TextUnformatted(seconds_text(c.alpha_s).c_str());
    row_label("beta (per byte)");
    if (c.beta_s_per_byte > 0)
      ImGui::Text("%.3g s  (%s)", c.beta_s_per_byte,
                  format_bandwidth(1.0 / c.beta_s_per_byte).c_str());
    else
      ImGui::TextUnformatted(none());
    row_label("gamma (per byte reduced)");
    if (c.gamma_s_per_byte > 0)
      ImGui::Text("%.3g s  (%s)", c.gamma_s_per_byte,
                  format_bandwidth(1.0 / c.gamma_s_per_byte).c_str());
    else
      ImGui::TextUnformatted(none());
    row_label("S, ranks");
    ImGui::Text("%s, %d", c.bytes > 0 ? bytes_text(c.bytes).c_str() : none(), c.ranks);
    row_label("source");
    ImGui::TextUnformatted(or_none(c.source));
    ImGui::EndTable();
  }
}

void draw_text(const TraceMeta& in) {
  ImGui::TextDisabled("concept");
  ImGui::TextWrapped("%s", or_none(in.concept_text));
  ImGui::TextDisabled("look at");
  ImGui::TextWrapped("%s", or_none(in.look_at));
}

std::string us_text(double microseconds) {
  return microseconds >= 0 ? format_seconds(microseconds * 1e-6) : none();
}

// A real run (real_run.hpp): where its ranks and clocks came from, the slowest rank, the worst
// calls and every rank's waits and overlap.
void draw_real_run(const TraceModel& m, const RealRun& run) {
  const TraceMeta& in = m.info;
  if (ImGui::BeginTable("real", 2, ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableSetupColumn("label", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("value", ImGuiTableColumnFlags_WidthStretch);
    fact("ranks", in.rank_origin == "distributedInfo"
                      ? "from each file's distributedInfo"
                      : "in the order the files were given (no distributedInfo)");
    std::string_view from = in.extra_json("collectives_from");
    if (from.size() >= 2) from = from.substr(1, from.size() - 2);
    fact("collectives",
         fmt::format("{} matched by content within their group, from {}; {} with sizes",
                     run.calls.size(), from, run.sized_calls));
    if (!in.files_note.empty()) fact("files", in.files_note);
    std::string offsets;
    for (std::size_t r = 0; r < in.clock_offset_us.size(); ++r)
      offsets += fmt::format("{}r{} {:+.1f} us", r ? ", " : "", r, in.clock_offset_us[r]);
    fact("clocks", in.clock_error_us >= 0
                       ? fmt::format("offsets {}; matched ends agree within {}", offsets,
                                     us_text(in.clock_error_us))
                       : std::string("not aligned: a rank shares no collective with rank 0"));
    ImGui::EndTable();
  }
  if (run.hang_calls)
    ImGui::TextColored(kBad,
                       "%d calls some rank never made while its trace ran on past them: a hang "
                       "would start at the first",
                       run.hang_calls);
  if (run.partial_calls)
    ImGui::TextDisabled("%d calls outside some rank's window or dropped from its trace (no hang)",
                        run.partial_calls);
  if (run.merged_group_calls)
    ImGui::TextColored(kBad,
                       "%d calls matched more ranks than their group holds: groups of one size "
                       "taken as one (the trace names neither the groups nor their ranks)",
                       run.merged_group_calls);
  if (run.no_kernel_calls)
    ImGui::TextDisabled("%d calls with no kernel in some rank's window, kept from the CPU side",
                        run.no_kernel_calls);
  ImGui::TextDisabled("per phase: calls, bytes, the ranks' mean time in them, of it exposed");
  if (ImGui::BeginTable("phases", 5, kTable)) {
    for (const char* h : {"phase", "calls", "bytes", "time", "exposed"}) ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const PhaseStats& p : run.phases) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(p.name.c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%d", p.calls);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(p.sized_calls ? bytes_text(static_cast<double>(p.bytes)).c_str()
                                           : "?");
      for (double v : {p.time_us, p.exposed_us}) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(us_text(v).c_str());
      }
    }
    ImGui::EndTable();
  }
  if (run.slowest_rank >= 0) {
    const RankRunStats& slow = run.ranks[static_cast<std::size_t>(run.slowest_rank)];
    ImGui::TextColored(kBad, "slowest rank: rank %d, last at %d of %zu calls; the others waited %s",
                       run.slowest_rank, slow.last_arrivals, run.calls.size(),
                       us_text(slow.caused_us).c_str());
  }
  ImGui::TextDisabled("worst collectives: the others' wait for the last rank");
  if (ImGui::BeginTable("worst", 10, kTable)) {
    for (const char* h : {"collective", "size S", "last", "late", "waits", "transfer", "algbw",
                          "busbw", "phase", "size from"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    const std::vector<int> worst = worst_calls(run);
    for (std::size_t k = 0; k < worst.size() && k < 8; ++k) {
      const CallStats& c = run.calls[static_cast<std::size_t>(worst[k])];
      const CollectiveCall& call = m.collectives[static_cast<std::size_t>(c.call)];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(call_label(m, call).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(call.bytes >= 0 ? bytes_text(static_cast<double>(call.bytes)).c_str()
                                             : "?");
      ImGui::TableNextColumn();
      if (c.straggler)
        ImGui::Text("r%d", c.last_rank);
      else
        ImGui::TextDisabled("together");
      for (double v : {c.max_wait_us, c.caused_us, c.transfer_us}) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(us_text(v).c_str());
      }
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(bandwidth_text(c.algbw).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(bandwidth_text(c.busbw).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(std::string(call.phase ? m.str(call.phase) : "other").c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(call.bytes >= 0 ? std::string(m.str(call.size_from)).c_str() : "-");
    }
    ImGui::EndTable();
  }
  if (run.sized_calls == 0)
    ImGui::TextDisabled(
        "no sizes in this trace (no comms args, no Input Dims with a dtype): no bandwidth");
  ImGui::TextDisabled("per rank: communication %s", run.gpu ? "vs computation on its GPU streams"
                                                            : "vs computation on its CPU threads");
  if (ImGui::BeginTable("real ranks", 8, kTable)) {
    for (const char* h :
         {"rank", "calls", "communication", "waited", "caused", "last", "hidden", "exposed"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (std::size_t r = 0; r < run.ranks.size(); ++r) {
      const RankRunStats& rs = run.ranks[r];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      if (static_cast<int>(r) == run.slowest_rank)
        ImGui::TextColored(kBad, "r%zu", r);
      else
        ImGui::Text("r%zu", r);
      ImGui::TableNextColumn();
      ImGui::Text("%d", rs.calls);
      for (double v : {rs.comm_us, rs.waited_us, rs.caused_us}) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(us_text(v).c_str());
      }
      ImGui::TableNextColumn();
      ImGui::Text("%dx", rs.last_arrivals);
      for (double v : {rs.hidden_us, rs.exposed_us()}) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(us_text(v).c_str());
      }
    }
    ImGui::EndTable();
  }
}

}  // namespace

void draw_stats(PanelContext& ctx) {
  const TraceModel& m = ctx.model();
  const Summary& s = ctx.doc.derived<Summary>(build_summary);
  draw_run(m, s);
  if (m.info.source == "pytorch") {
    if (s.real.present)
      draw_real_run(m, s.real);
    else
      ImGui::TextDisabled(
          "no collectives found (no NCCL kernel, gloo span, record_param_comms or c10d op)");
    return;  // the lesson's sections have nothing to show for a real run
  }
  if (ImGui::CollapsingHeader("the lesson", ImGuiTreeNodeFlags_DefaultOpen)) draw_text(m.info);
  if (ImGui::CollapsingHeader("operations: time and bandwidth", ImGuiTreeNodeFlags_DefaultOpen))
    draw_operations(m, s);
  if (ImGui::CollapsingHeader("traffic per rank and link", ImGuiTreeNodeFlags_DefaultOpen))
    draw_traffic(s);
  if (!s.windows.empty() &&
      ImGui::CollapsingHeader("window loads and stores per rank", ImGuiTreeNodeFlags_DefaultOpen))
    draw_windows(s);
  if (ImGui::CollapsingHeader("cost model", ImGuiTreeNodeFlags_DefaultOpen)) draw_cost(s);
}

}  // namespace distlab::viewer
