#include "core/trace/writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/base/check.hpp"
#include "core/base/file.hpp"
#include "core/base/json.hpp"

namespace distlab {

namespace {

constexpr double kDeliverUs = 0.5;  // the short slice a message's flow arrow lands on
constexpr double kPostUs = 0.1;     // the short slice a message's flow arrow leaves from
constexpr double kNs = 1e-3;        // one step of the printed grid

// A slice about to be written, already on rank 0's clock and relative to the epoch.
// span: a recorded span. post: the first moments of a send, where its flow starts (Perfetto
// draws an arrow from the END of the slice its 's' binds to: bound to the whole send, every
// arrow would run backwards). deliver: the last moments of a receive, where its flow ends.
enum class Role : std::uint8_t { span, post, deliver };

struct Slice {
  const SpanEvent* src = nullptr;
  Role role = Role::span;
  double t0 = 0, t1 = 0;
  int tid = 0;
  int sub = 0;                    // sub-lane index
  std::uint64_t flow = 0;         // flow id bound here (0: none)
  const Slice* parent = nullptr;  // post and deliver: the send or receive they belong to
};

// A time on the grid the trace prints (ns, as microseconds with 3 decimals). Slices are placed
// on it before their nesting is decided: two that are disjoint by a fraction of a nanosecond
// touch once printed, and must be treated as touching.
double to_ns(double us) {
  return std::round(us * 1e3) / 1e3;
}

const char* lane_name(Lane lane) {
  switch (lane) {
    case Lane::compute:
      return "compute";
    case Lane::send:
      return "send";
    case Lane::recv:
      return "recv";
    case Lane::gpu:
      return "gpu";
  }
  return "?";
}

// The lane a span is written on: its own, but a window access's is its kind's (a load reads
// into the rank, on the recv lane; a store writes out of it, on the send lane).
Lane lane_of(const SpanEvent& e) {
  if (e.kind == SpanEvent::Kind::load) return Lane::recv;
  if (e.kind == SpanEvent::Kind::store) return Lane::send;
  return e.lane;
}

// Places slices of one lane on sub-lanes so that on each sub-lane they nest strictly:
// first fit over sub-lanes, each a stack of open end times; a post or deliver slice tries its
// parent's sub-lane first. Post and deliver slices are leaves: a flow event binds to the
// deepest slice open at its ts, so a slice nested in another message's post or deliver slice
// that starts where it starts would take its flow. Sorted by start, the outermost first; a post
// or deliver slice that starts with its send or receive comes right after it, so that no other
// slice starting there lands between them (a tie std::sort would write in either order, and a
// flow's finish would then bind to the receive instead of its deliver).
int assign_sub_lanes(std::vector<Slice*>& slices, Lane lane) {
  // The slice a post or deliver slice is ordered with: its parent, where they start together.
  auto anchor = [](const Slice* s) { return s->parent && s->parent->t0 == s->t0 ? s->parent : s; };
  std::stable_sort(slices.begin(), slices.end(), [&](const Slice* a, const Slice* b) {
    if (a->t0 != b->t0) return a->t0 < b->t0;
    const Slice *pa = anchor(a), *pb = anchor(b);
    if (pa->t1 != pb->t1) return pa->t1 > pb->t1;
    if (pa != pb) return std::less<const Slice*>()(pa, pb);  // pushed in order: parents first
    return (a->role != Role::span) < (b->role != Role::span);
  });
  struct Open {
    double end;
    bool leaf;
  };
  std::vector<std::vector<Open>> stacks;
  auto fits = [&](std::size_t k, const Slice* s) {
    auto& st = stacks[k];
    while (!st.empty() && st.back().end <= s->t0) st.pop_back();
    return st.empty() || (!st.back().leaf && s->t1 <= st.back().end);
  };
  for (Slice* s : slices) {
    std::size_t k = 0;
    const auto home = s->parent ? static_cast<std::size_t>(s->parent->sub) : stacks.size();
    if (home < stacks.size() && fits(home, s))
      k = home;
    else
      while (k < stacks.size() && !fits(k, s)) ++k;
    if (k == stacks.size()) stacks.emplace_back();
    stacks[k].push_back({s->t1, s->role != Role::span});
    s->sub = static_cast<int>(k);
    s->tid = sub_lane_tid(lane, s->sub);
  }
  return static_cast<int>(stacks.size());
}

// Where a receive's deliver slice starts: its last kDeliverUs, but at least a nanosecond after
// the send was posted (the post slice before it ends no later) and a nanosecond before the
// receive ends (a slice of no length encloses nothing for the 'f' to bind to).
double deliver_start(double t0, double t1, std::optional<double> sent) {
  double d0 = std::max(t0, t1 - kDeliverUs);
  if (sent) d0 = std::max(d0, *sent + kNs);
  return to_ns(std::max(t0, std::min(d0, t1 - kNs)));
}

// A span's start and end on the printed grid, off: its rank's offset to the epoch. A send or a
// receive lasts at least a nanosecond: one that began and ended within the same nanosecond would
// print with no length, its post or deliver slice too, and the flow event at its start would
// bind to whatever slice encloses that moment on the lane (another receive's deliver). A window
// access too, so that every viewer has a slice to show.
std::pair<double, double> printed_times(const SpanEvent& e, double off) {
  const double t0 = to_ns(e.t0 + off);
  double t1 = to_ns(std::max(e.t1, e.t0) + off);
  if (e.kind != SpanEvent::Kind::plain) t1 = std::max(t1, to_ns(t0 + kNs));
  return {t0, t1};
}

void append_message_args(std::string& out, const SpanEvent& e, std::uint64_t flow) {
  out += fmt::format(R"(,"args":{{"peer":{},"bytes":{},"tag":{})", e.peer, e.bytes, e.tag);
  if (e.meta.step >= 0) out += fmt::format(R"(,"step":{})", e.meta.step);
  if (!e.meta.buffer.empty()) out += fmt::format(R"(,"buffer":{})", json_string(e.meta.buffer));
  if (e.meta.chunk_begin >= 0)
    out += fmt::format(R"(,"chunk":{},"chunk_end":{})", e.meta.chunk_begin, e.meta.chunk_end);
  out += fmt::format(R"(,"apply":"{}","contributions":{})",
                     e.meta.apply == Apply::reduce ? "reduce" : "copy", e.meta.contributions);
  if (e.meta.contrib_mask) out += fmt::format(R"(,"contrib_mask":"0x{:x}")", e.meta.contrib_mask);
  if (!e.meta.group.empty()) out += fmt::format(R"(,"group":{})", json_string(e.meta.group));
  if (flow) out += fmt::format(R"(,"msg":{})", flow);
  out += "}";
}

// A window access's args (schema 4): the window's owner and the bytes moved; the step and the
// buffer's chunks where the lesson set them. No tag, no message id: there is no other end.
void append_window_args(std::string& out, const SpanEvent& e) {
  out += fmt::format(R"(,"args":{{"window":{},"bytes":{})", e.peer, e.bytes);
  if (e.meta.step >= 0) out += fmt::format(R"(,"step":{})", e.meta.step);
  if (!e.meta.buffer.empty()) out += fmt::format(R"(,"buffer":{})", json_string(e.meta.buffer));
  if (e.meta.chunk_begin >= 0)
    out += fmt::format(R"(,"chunk":{},"chunk_end":{})", e.meta.chunk_begin, e.meta.chunk_end);
  out += "}";
}

// Phase args of a compute span (schema 3): only the fields the lesson set.
void append_phase_args(std::string& out, const PhaseArgs& a) {
  if (a.empty()) return;
  std::string args;
  if (!a.op.empty()) args += fmt::format(R"(,"op":{})", json_string(a.op));
  if (a.micro >= 0) args += fmt::format(R"(,"micro":{})", a.micro);
  if (a.stage >= 0) args += fmt::format(R"(,"stage":{})", a.stage);
  if (a.chunk >= 0) args += fmt::format(R"(,"chunk":{})", a.chunk);
  if (!a.text.empty()) args += fmt::format(R"(,"text":{})", json_string(a.text));
  out += R"(,"args":{)" + args.substr(1) + "}";
}

}  // namespace

std::string trace_json(const TraceInfo& info, const std::vector<RankLog>& logs) {
  // Epoch: the earliest start on rank 0's clock.
  double epoch = 1e300;
  for (const auto& log : logs) {
    epoch = std::min(epoch, log.t_start + log.clock_offset_us);
    for (const auto& e : log.spans) epoch = std::min(epoch, e.t0 + log.clock_offset_us);
  }
  if (logs.empty() || epoch > 1e299) epoch = 0;

  // Flow ids: one per message, keyed by (src, dst, tag, group, seq), numbered in send order. Times
  // on the printed nanosecond grid: when each message was sent, and where its deliver slice starts
  // (the post slice at the send's start must end by then).
  std::map<MessageKey, std::uint64_t> flow_ids;
  std::map<std::uint64_t, double> sent_at, delivered_at;  // flow id -> us from the epoch
  std::uint64_t next_flow = 1;
  for (const auto& log : logs)
    for (const auto& e : log.spans)
      if (e.kind == SpanEvent::Kind::send) {
        sent_at[next_flow] = to_ns(e.t0 + log.clock_offset_us - epoch);
        flow_ids[message_key(log.rank, e)] = next_flow++;
      }
  for (const auto& log : logs)
    for (const auto& e : log.spans)
      if (e.kind == SpanEvent::Kind::recv) {
        auto it = flow_ids.find(message_key(log.rank, e));
        if (it == flow_ids.end()) continue;
        const auto [t0, t1] = printed_times(e, log.clock_offset_us - epoch);
        delivered_at[it->second] = deliver_start(t0, t1, sent_at[it->second]);
      }

  std::string out;
  out.reserve(1 << 20);
  out += "{\"traceEvents\":[\n";
  bool first = true;
  auto event = [&](const std::string& text) {
    if (!first) out += ",\n";
    first = false;
    out += text;
  };

  for (const auto& log : logs) {
    const int pid = log.rank + 1;
    const double off = log.clock_offset_us - epoch;
    std::string pname = fmt::format("rank {}", log.rank);
    if (!log.host.empty()) pname += " (" + log.host + ")";
    event(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":{}}}}})",
                      pid, json_string(pname)));
    event(fmt::format(
        R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})",
        pid, pid));

    // Slices of this rank, per lane: every send also gets its post slice, every completed
    // receive its deliver slice. Parents are pushed before their children (reserve: no
    // reallocation, so the parent pointers stay valid).
    std::vector<Slice> slices;
    slices.reserve(log.spans.size() * 2);
    for (const auto& e : log.spans) {
      // On the printed nanosecond grid from here on: nesting is decided on the times written.
      const auto [t0, t1] = printed_times(e, off);
      Slice s{&e, Role::span, t0, t1};
      if (e.kind == SpanEvent::Kind::send) s.flow = flow_ids[message_key(log.rank, e)];
      slices.push_back(s);
      const Slice* parent = &slices.back();
      if (e.kind == SpanEvent::Kind::send) {
        // The post slice: the send's first moments, ended by the time the message is delivered.
        double p1 = std::min(s.t0 + kPostUs, s.t1);
        if (auto it = delivered_at.find(s.flow); it != delivered_at.end())
          p1 = std::min(p1, it->second);
        slices.push_back({&e, Role::post, s.t0, to_ns(std::max(s.t0, p1)), 0, 0, s.flow, parent});
      }
      if (e.kind == SpanEvent::Kind::recv) {
        auto it = flow_ids.find(message_key(log.rank, e));
        const std::uint64_t flow = it == flow_ids.end() ? 0 : it->second;
        const double d0 = flow ? delivered_at[flow] : deliver_start(s.t0, s.t1, std::nullopt);
        slices.push_back({&e, Role::deliver, d0, s.t1, 0, 0, flow, parent});
      }
    }
    std::vector<Slice*> by_lane[kLanes];
    for (auto& s : slices) by_lane[static_cast<int>(lane_of(*s.src))].push_back(&s);
    for (int l = 0; l < kLanes; ++l) {
      if (l == static_cast<int>(Lane::gpu) && by_lane[l].empty())
        continue;  // CPU runs: no gpu lane
      const Lane lane = static_cast<Lane>(l);
      const int subs = std::max(1, assign_sub_lanes(by_lane[l], lane));
      for (int k = 0; k < subs; ++k) {
        const int tid = sub_lane_tid(lane, k);
        const std::string tname =
            k == 0 ? lane_name(lane) : fmt::format("{} {}", lane_name(lane), k + 1);
        event(fmt::format(
            R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{}}}}})", pid, tid,
            json_string(tname)));
        event(fmt::format(
            R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
            pid, tid, l * 100 + k));
      }
    }
    // Spans, outermost first and sorted by start on each lane (assign_sub_lanes sorted them).
    // A flow's 's' follows its post slice and its 'f' its deliver slice, at their start: an
    // importer binds each to the deepest slice open there, which is that one.
    for (int l = 0; l < kLanes; ++l) {
      for (const Slice* s : by_lane[l]) {
        const SpanEvent& e = *s->src;
        const double t0 = s->t0, t1 = s->t1;  // on the nanosecond grid already
        if (s->role == Role::post) {
          event(fmt::format(
              R"({{"ph":"X","name":"post","cat":"post","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"args":{{"msg":{}}}}})",
              pid, s->tid, t0, t1 - t0, s->flow));
          event(fmt::format(
              R"({{"ph":"s","name":"message","cat":"message","id":{},"pid":{},"tid":{},"ts":{:.3f}}})",
              s->flow, pid, s->tid, t0));
          continue;
        }
        const bool deliver = s->role == Role::deliver;
        const bool window = is_window_access(e.kind);
        const char* cat = deliver ? "deliver" : window ? "window" : lane_name(lane_of(e));
        const std::string name = deliver  ? "deliver"
                                 : window ? (e.kind == SpanEvent::Kind::load ? "load" : "store")
                                          : e.name;
        std::string text = fmt::format(
            R"({{"ph":"X","name":{},"cat":"{}","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f})",
            json_string(name), cat, pid, s->tid, t0, t1 - t0);
        if (window)
          append_window_args(text, e);
        else if (is_message(e.kind))
          append_message_args(text, e, s->flow);
        else
          append_phase_args(text, e.phase);
        text += "}";
        event(text);
        if (s->flow && deliver)
          event(fmt::format(
              R"({{"ph":"f","bp":"e","name":"message","cat":"message","id":{},"pid":{},"tid":{},"ts":{:.3f}}})",
              s->flow, pid, s->tid, t0));
      }
    }
    // Memory ledger counters: the parts in "memory" (Catapult stacks a counter's series, so
    // their sum is its height; a total among them would double it), the total in its own.
    for (const auto& c : log.counters) {
      std::string args;
      std::int64_t total = 0;
      for (int k = 0; k < kCategories; ++k) {
        args += fmt::format(R"({}"{}_bytes":{})", k ? "," : "", to_string(static_cast<Category>(k)),
                            c.bytes[k]);
        total += c.bytes[k];
      }
      const double ts = to_ns(c.ts + off);
      event(
          fmt::format(R"({{"ph":"C","name":"memory","pid":{},"tid":0,"ts":{:.3f},"args":{{{}}}}})",
                      pid, ts, args));
      event(fmt::format(
          R"({{"ph":"C","name":"memory total","pid":{},"tid":0,"ts":{:.3f},"args":{{"bytes":{}}}}})",
          pid, ts, total));
    }
    // Values the lesson recorded (a loss): one counter track per name.
    for (const auto& v : log.values)
      if (std::isfinite(v.value))  // JSON has no NaN: a diverged loss leaves a gap
        event(fmt::format(
            R"({{"ph":"C","name":{},"pid":{},"tid":0,"ts":{:.3f},"args":{{"value":{:.9g}}}}})",
            json_string(v.name), pid, to_ns(v.ts + off), v.value));
    // This rank's own step instants (Perfetto puts global ones on one unnamed track): when the
    // rank first acts in each step, marking it, posting one of its messages or starting one of
    // its window accesses.
    std::map<int, double> own_steps;
    auto first_act = [&](int step, double ts) {
      auto [it, fresh] = own_steps.try_emplace(step, ts);
      if (!fresh) it->second = std::min(it->second, ts);
    };
    for (const auto& st : log.steps) first_act(st.step, to_ns(st.ts + off));
    for (const auto& e : log.spans)
      if ((is_message(e.kind) || is_window_access(e.kind)) && e.meta.step >= 0)
        first_act(e.meta.step, to_ns(e.t0 + off));
    for (const auto& [step, ts] : own_steps)
      event(fmt::format(
          R"({{"ph":"i","s":"p","name":"step","pid":{},"tid":0,"ts":{:.3f},"args":{{"step":{}}}}})",
          pid, ts, step));
  }

  // Step frames: one global instant per step, at the earliest rank's start of that step.
  std::map<int, std::pair<double, int>> steps;  // step -> (ts, pid)
  for (const auto& log : logs)
    for (const auto& s : log.steps) {
      const double ts = to_ns(s.ts + log.clock_offset_us - epoch);
      auto it = steps.find(s.step);
      if (it == steps.end() || ts < it->second.first) steps[s.step] = {ts, log.rank + 1};
    }
  for (const auto& [step, at] : steps)
    event(fmt::format(
        R"({{"ph":"i","s":"g","name":"step frame","pid":{},"tid":0,"ts":{:.3f},"args":{{"step":{}}}}})",
        at.second, at.first, step));
  out += "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{";

  // otherData: the lesson's metadata and verification, for the viewer and the tests.
  out += fmt::format(
      R"("schema":"distlab-trace","schema_version":{},"lesson":{},"title":{},"algorithm":{},)",
      kTraceSchemaVersion, json_string(info.lesson), json_string(info.title),
      json_string(info.algorithm));
  out += fmt::format(R"("world_size":{},"mode":"{}","device":"{}","transport":{},)",
                     info.world.size, to_string(info.world.mode), to_string(info.world.device),
                     json_string(info.world.transport));
  // The nodes the hierarchical algorithms group the ranks into (World::ranks_per_node): the
  // viewer's Topology panel draws them. Absent when the run does not say.
  if (info.world.ranks_per_node > 0)
    out += fmt::format(R"("ranks_per_node":{},)", info.world.ranks_per_node);
  out += "\"parameters\":{";
  for (std::size_t i = 0; i < info.parameters.size(); ++i)
    out += fmt::format("{}{}:{}", i ? "," : "", json_string(info.parameters[i].first),
                       info.parameters[i].second);
  out += "},";
  for (const auto& [k, v] : info.metadata) out += fmt::format("{}:{},", json_string(k), v);
  int checks = 0;
  std::string failed;
  for (const auto& log : logs)
    for (const auto& c : log.checks) {
      ++checks;
      if (!c.ok)
        failed += fmt::format(R"({}{{"rank":{},"name":{},"detail":{}}})", failed.empty() ? "" : ",",
                              log.rank, json_string(c.name), json_string(c.detail));
    }
  out += fmt::format(R"("verification":{{"verified":{},"checks":{},"failed":[{}]}},)",
                     info.verified ? "true" : "false", checks, failed);
  out += "\"memory_peak_bytes\":[";
  for (std::size_t i = 0; i < logs.size(); ++i) {
    out +=
        fmt::format(R"({}{{"rank":{},"total":{})", i ? "," : "", logs[i].rank, logs[i].peak_total);
    for (int k = 0; k < kCategories; ++k)
      out += fmt::format(R"(,"{}":{})", to_string(static_cast<Category>(k)), logs[i].peak[k]);
    out += "}";
  }
  out += "],\"buffers\":[";
  std::set<std::string> declared;  // every rank declares the same buffers; list each once
  for (const auto& log : logs)
    for (const auto& b : log.buffers)
      if (declared.insert(b.name).second)
        out += fmt::format(R"({}{{"name":{},"length":{},"chunks":{}}})",
                           declared.size() > 1 ? "," : "", json_string(b.name), b.length, b.chunks);
  out +=
      fmt::format(R"(],"steps":{},"messages":{},"wall_seconds":{},"cost_model":{}}})", steps.size(),
                  flow_ids.size(), json_number(info.wall_seconds), info.cost_model);

  // metadata: the same facts, flat, for Perfetto (it skips otherData) and Catapult's metadata
  // view. Flat values only (Perfetto's reader takes no arrays), and none of the keys Catapult
  // reserves for itself (clock-domain, highres-ticks).
  out += fmt::format(
      ",\n\"metadata\":{{\"schema\":\"distlab-trace\",\"schema_version\":{},\"lesson\":{},"
      "\"title\":{},\"algorithm\":{},\"world_size\":{},\"mode\":\"{}\",\"device\":\"{}\","
      "\"transport\":{},\"verified\":{},\"checks\":{},\"wall_seconds\":{}}}}}\n",
      kTraceSchemaVersion, json_string(info.lesson), json_string(info.title),
      json_string(info.algorithm), info.world.size, to_string(info.world.mode),
      to_string(info.world.device), json_string(info.world.transport),
      info.verified ? "true" : "false", checks, json_number(info.wall_seconds));
  return out;
}

void write_trace(const std::string& path, const TraceInfo& info, const std::vector<RankLog>& logs) {
  write_text_file(path, trace_json(info, logs));
}

}  // namespace distlab
