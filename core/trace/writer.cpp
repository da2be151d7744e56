#include "core/trace/writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include "core/base/check.hpp"
#include "core/base/file.hpp"
#include "core/base/json.hpp"

namespace distlab {

namespace {

constexpr double kDeliverUs = 0.5;  // the short slice a message's flow arrow lands on

// A slice about to be written, already on rank 0's clock and relative to the epoch.
struct Slice {
  const SpanEvent* src = nullptr;
  bool deliver = false;
  double t0 = 0, t1 = 0;
  int tid = 0;
  std::uint64_t flow = 0;  // flow id bound here (0: none)
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

// Places slices of one lane on sub-lanes so that on each sub-lane they nest strictly:
// first fit over sub-lanes, each a stack of open end times.
int assign_sub_lanes(std::vector<Slice*>& slices, Lane lane) {
  std::sort(slices.begin(), slices.end(), [](const Slice* a, const Slice* b) {
    return a->t0 != b->t0 ? a->t0 < b->t0 : a->t1 > b->t1;
  });
  std::vector<std::vector<double>> stacks;
  for (Slice* s : slices) {
    std::size_t k = 0;
    for (; k < stacks.size(); ++k) {
      auto& st = stacks[k];
      while (!st.empty() && st.back() <= s->t0) st.pop_back();
      if (st.empty() || s->t1 <= st.back()) break;
    }
    if (k == stacks.size()) stacks.emplace_back();
    stacks[k].push_back(s->t1);
    s->tid = sub_lane_tid(lane, static_cast<int>(k));
  }
  return static_cast<int>(stacks.size());
}

using FlowKey = std::tuple<int, int, int, std::uint64_t>;  // src, dst, tag, seq

void append_message_args(std::string& out, const SpanEvent& e, std::uint64_t flow) {
  out += fmt::format(R"(,"args":{{"peer":{},"bytes":{},"tag":{})", e.peer, e.bytes, e.tag);
  if (e.meta.step >= 0) out += fmt::format(R"(,"step":{})", e.meta.step);
  if (!e.meta.buffer.empty()) out += fmt::format(R"(,"buffer":{})", json_string(e.meta.buffer));
  if (e.meta.chunk_begin >= 0)
    out += fmt::format(R"(,"chunk":{},"chunk_end":{})", e.meta.chunk_begin, e.meta.chunk_end);
  out += fmt::format(R"(,"apply":"{}","contributions":{})",
                     e.meta.apply == Apply::reduce ? "reduce" : "copy", e.meta.contributions);
  if (e.meta.contrib_mask) out += fmt::format(R"(,"contrib_mask":"0x{:x}")", e.meta.contrib_mask);
  if (flow) out += fmt::format(R"(,"msg":{})", flow);
  out += "}";
}

// Phase args of a compute span (schema 3): only the fields the lesson set.
void append_phase_args(std::string& out, const PhaseArgs& a) {
  if (a.empty()) return;
  std::string args;
  if (!a.op.empty()) args += fmt::format(R"(,"op":{})", json_string(a.op));
  if (a.micro >= 0) args += fmt::format(R"(,"micro":{})", a.micro);
  if (a.stage >= 0) args += fmt::format(R"(,"stage":{})", a.stage);
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

  // Flow ids: one per message, keyed by (src, dst, tag, seq), numbered in send order.
  std::map<FlowKey, std::uint64_t> flow_ids;
  std::map<std::uint64_t, double> sent_at;  // flow id -> send post time, relative to the epoch
  std::uint64_t next_flow = 1;
  for (const auto& log : logs)
    for (const auto& e : log.spans)
      if (e.kind == SpanEvent::Kind::send) {
        sent_at[next_flow] = e.t0 + log.clock_offset_us - epoch;
        flow_ids[{log.rank, e.peer, e.tag, e.seq}] = next_flow++;
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

    // Slices of this rank, per lane; every completed receive also gets its deliver slice.
    std::vector<Slice> slices;
    slices.reserve(log.spans.size() * 2);
    for (const auto& e : log.spans) {
      // On the printed nanosecond grid from here on: nesting is decided on the times written.
      Slice s{&e, false, to_ns(e.t0 + off), to_ns(std::max(e.t1, e.t0) + off), 0, 0};
      if (e.kind == SpanEvent::Kind::send) s.flow = flow_ids[{log.rank, e.peer, e.tag, e.seq}];
      slices.push_back(s);
      if (e.kind == SpanEvent::Kind::recv) {
        auto it = flow_ids.find({e.peer, log.rank, e.tag, e.seq});
        const std::uint64_t flow = it == flow_ids.end() ? 0 : it->second;
        // The arrival slice: the last moments of the receive, never before the message was sent.
        double d0 = std::max(s.t0, s.t1 - kDeliverUs);
        if (flow) d0 = std::min(s.t1, std::max(d0, sent_at[flow]));
        d0 = to_ns(d0);
        Slice d{&e, true, d0, s.t1, 0, flow};
        slices.push_back(d);
      }
    }
    std::vector<Slice*> by_lane[kLanes];
    for (auto& s : slices) by_lane[static_cast<int>(s.src->lane)].push_back(&s);
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
    for (int l = 0; l < kLanes; ++l) {
      for (const Slice* s : by_lane[l]) {
        const SpanEvent& e = *s->src;
        const char* cat = s->deliver ? "deliver" : lane_name(e.lane);
        const std::string name = s->deliver ? "deliver" : e.name;
        const double t0 = s->t0, t1 = s->t1;  // on the nanosecond grid already
        std::string text = fmt::format(
            R"({{"ph":"X","name":{},"cat":"{}","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f})",
            json_string(name), cat, pid, s->tid, t0, t1 - t0);
        if (e.kind != SpanEvent::Kind::plain)
          append_message_args(text, e, s->flow);
        else
          append_phase_args(text, e.phase);
        text += "}";
        event(text);
        if (s->flow && e.kind == SpanEvent::Kind::send)
          event(fmt::format(
              R"({{"ph":"s","name":"message","cat":"message","id":{},"pid":{},"tid":{},"ts":{:.3f}}})",
              s->flow, pid, s->tid, s->t0));
        if (s->flow && s->deliver)
          event(fmt::format(
              R"({{"ph":"f","bp":"e","name":"message","cat":"message","id":{},"pid":{},"tid":{},"ts":{:.3f}}})",
              s->flow, pid, s->tid, s->t0));
      }
    }
    // Memory ledger counters.
    for (const auto& c : log.counters) {
      std::string args;
      std::int64_t total = 0;
      for (int k = 0; k < kCategories; ++k) {
        args += fmt::format(R"("{}_bytes":{},)", to_string(static_cast<Category>(k)), c.bytes[k]);
        total += c.bytes[k];
      }
      event(fmt::format(
          R"({{"ph":"C","name":"memory","pid":{},"tid":0,"ts":{:.3f},"args":{{{}"total_bytes":{}}}}})",
          pid, c.ts + off, args, total));
    }
    // Values the lesson recorded (a loss): one counter track per name.
    for (const auto& v : log.values)
      if (std::isfinite(v.value))  // JSON has no NaN: a diverged loss leaves a gap
        event(fmt::format(
            R"({{"ph":"C","name":{},"pid":{},"tid":0,"ts":{:.3f},"args":{{"value":{:.9g}}}}})",
            json_string(v.name), pid, v.ts + off, v.value));
  }

  // Step frames: one global instant per step, at the earliest rank's start of that step.
  std::map<int, std::pair<double, int>> steps;  // step -> (ts, pid)
  for (const auto& log : logs)
    for (const auto& s : log.steps) {
      const double ts = s.ts + log.clock_offset_us - epoch;
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
      fmt::format(R"(],"steps":{},"messages":{},"wall_seconds":{},"cost_model":{}}}}})",
                  steps.size(), flow_ids.size(), json_number(info.wall_seconds), info.cost_model);
  out += "\n";
  return out;
}

void write_trace(const std::string& path, const TraceInfo& info, const std::vector<RankLog>& logs) {
  write_text_file(path, trace_json(info, logs));
}

}  // namespace distlab
