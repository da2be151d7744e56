#include "core/trace/reader.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/base/check.hpp"
#include "core/trace/format.hpp"

namespace distlab {

namespace {

using simdjson::dom::element;
using simdjson::dom::object;

std::int64_t int_or(const object& o, const char* key, std::int64_t fallback) {
  std::int64_t v;
  if (o[key].get_int64().get(v) == simdjson::SUCCESS) return v;
  std::uint64_t u;
  if (o[key].get_uint64().get(u) == simdjson::SUCCESS) return static_cast<std::int64_t>(u);
  return fallback;
}

double number_or(const object& o, const char* key, double fallback) {
  double v;
  if (o[key].get_double().get(v) == simdjson::SUCCESS) return v;
  std::int64_t i;
  if (o[key].get_int64().get(i) == simdjson::SUCCESS) return static_cast<double>(i);
  return fallback;
}

std::string string_or(const object& o, const char* key, const std::string& fallback = {}) {
  std::string_view v;
  if (o[key].get_string().get(v) == simdjson::SUCCESS) return std::string(v);
  return fallback;
}

}  // namespace

LoadedTrace parse_trace(const std::string& json) {
  simdjson::dom::parser parser;
  element root;
  const auto err = parser.parse(json).get(root);
  if (err) throw Error(fmt::format("not valid JSON: {}", simdjson::error_message(err)));
  LoadedTrace t;
  object other;
  if (root["otherData"].get_object().get(other) == simdjson::SUCCESS) {
    t.schema_version = static_cast<int>(int_or(other, "schema_version", 0));
    t.lesson = string_or(other, "lesson");
    t.algorithm = string_or(other, "algorithm");
    t.mode = string_or(other, "mode");
    t.device = string_or(other, "device");
    t.transport = string_or(other, "transport");
    t.world_size = static_cast<int>(int_or(other, "world_size", 0));
    object ver;
    if (other["verification"].get_object().get(ver) == simdjson::SUCCESS) {
      bool v = false;
      if (ver["verified"].get_bool().get(v) == simdjson::SUCCESS) t.verified = v;
      t.checks = int_or(ver, "checks", 0);
    }
  }
  if (t.schema_version == 0)
    throw Error("not a distlab trace (otherData.schema_version is missing)");
  if (t.schema_version > kTraceSchemaVersion)
    throw Error(
        fmt::format("trace schema version {} is newer than this loader ({}); update distlab",
                    t.schema_version, kTraceSchemaVersion));

  simdjson::dom::array events;
  if (root["traceEvents"].get_array().get(events) != simdjson::SUCCESS)
    throw Error("trace has no traceEvents array");
  for (element ev : events) {
    object o;
    if (ev.get_object().get(o) != simdjson::SUCCESS) {
      t.problems.push_back("an event is not a JSON object");
      continue;
    }
    const std::string ph = string_or(o, "ph");
    std::int64_t pid = 0, tid = 0;
    if (o["pid"].get_int64().get(pid) != simdjson::SUCCESS ||
        o["tid"].get_int64().get(tid) != simdjson::SUCCESS) {
      t.problems.push_back(fmt::format("a '{}' event has no integer pid and tid", ph));
      continue;
    }
    const double ts = number_or(o, "ts", 0);
    if (ph == "X") {
      TraceSpan s;
      s.pid = static_cast<int>(pid);
      s.tid = static_cast<int>(tid);
      s.name = string_or(o, "name");
      s.cat = string_or(o, "cat");
      s.ts = ts;
      s.dur = number_or(o, "dur", -1);
      object args;
      if (o["args"].get_object().get(args) == simdjson::SUCCESS) {
        s.peer = int_or(args, "peer", -1);
        s.bytes = int_or(args, "bytes", -1);
        s.tag = int_or(args, "tag", -1);
        s.step = int_or(args, "step", -1);
        s.msg = int_or(args, "msg", 0);
      }
      t.spans.push_back(std::move(s));
    } else if (ph == "s" || ph == "f") {
      TraceFlow f;
      f.start = ph == "s";
      f.pid = static_cast<int>(pid);
      f.tid = static_cast<int>(tid);
      f.ts = ts;
      f.id = static_cast<std::uint64_t>(int_or(o, "id", 0));
      if (!f.start && string_or(o, "bp") != "e")
        t.problems.push_back("a flow finish is not bound to its enclosing slice (bp:e)");
      t.flows.push_back(f);
    } else if (ph == "C" &&
               string_or(o, "name") == "memory") {  // other counters: a lesson's values
      TraceCounter c;
      c.pid = static_cast<int>(pid);
      c.ts = ts;
      object args;
      if (o["args"].get_object().get(args) == simdjson::SUCCESS)
        c.total_bytes = int_or(args, "total_bytes", 0);
      t.counters.push_back(c);
    } else if (ph == "C") {
      TraceValue v;
      v.pid = static_cast<int>(pid);
      v.ts = ts;
      v.name = string_or(o, "name");
      object args;
      if (o["args"].get_object().get(args) == simdjson::SUCCESS)
        v.value = number_or(args, "value", 0);
      t.values.push_back(std::move(v));
    } else if (ph == "i") {
      object args;
      TraceStep s;
      s.pid = static_cast<int>(pid);
      s.ts = ts;
      if (o["args"].get_object().get(args) == simdjson::SUCCESS) s.step = int_or(args, "step", -1);
      t.steps.push_back(s);
    } else if (ph == "M") {
      if (string_or(o, "name") == "process_name") t.named_pids.push_back(static_cast<int>(pid));
    } else {
      t.problems.push_back(fmt::format("event phase '{}' is not one of X, s, f, C, i, M", ph));
    }
  }
  return t;
}

LoadedTrace load_trace(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("cannot open trace {}", path));
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return parse_trace(ss.str());
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
}

std::vector<std::string> check_invariants(const LoadedTrace& t) {
  std::vector<std::string> bad = t.problems;
  auto pid_ok = [&](int pid) { return pid >= 1 && pid <= t.world_size; };

  // pids match the world size.
  std::set<int> named(t.named_pids.begin(), t.named_pids.end());
  for (int r = 1; r <= t.world_size; ++r)
    if (!named.count(r))
      bad.push_back(fmt::format("rank {} (pid {}) has no process_name", r - 1, r));
  for (int pid : named)
    if (!pid_ok(pid)) bad.push_back(fmt::format("pid {} is outside 1..{}", pid, t.world_size));
  auto first_bad_pid = [&](const auto& events, const char* what) {
    for (const auto& e : events)
      if (!pid_ok(e.pid)) {
        bad.push_back(fmt::format("a {} has pid {} outside 1..{}", what, e.pid, t.world_size));
        return;
      }
  };
  first_bad_pid(t.spans, "span");
  first_bad_pid(t.flows, "flow event");
  first_bad_pid(t.counters, "counter");
  first_bad_pid(t.steps, "step frame");

  // Durations and timestamps.
  for (const auto& s : t.spans) {
    if (s.dur < 0)
      bad.push_back(
          fmt::format("span '{}' on pid {} has a negative duration {}", s.name, s.pid, s.dur));
    if (s.ts < 0)
      bad.push_back(
          fmt::format("span '{}' on pid {} starts before the epoch ({})", s.name, s.pid, s.ts));
  }

  // Flows: one start and one finish per id, the finish not before the start.
  std::map<std::uint64_t, const TraceFlow*> starts, finishes;
  for (const auto& f : t.flows) {
    auto& side = f.start ? starts : finishes;
    if (!side.emplace(f.id, &f).second)
      bad.push_back(
          fmt::format("flow {} has more than one {}", f.id, f.start ? "start" : "finish"));
  }
  for (const auto& [id, s] : starts) {
    auto it = finishes.find(id);
    if (it == finishes.end())
      bad.push_back(fmt::format("flow {} (from pid {}) has no finish", id, s->pid));
    else if (it->second->ts < s->ts)
      bad.push_back(fmt::format("flow {} arrives at {:.3f} us, before it was sent at {:.3f} us", id,
                                it->second->ts, s->ts));
  }
  for (const auto& [id, f] : finishes)
    if (!starts.count(id))
      bad.push_back(fmt::format("flow {} (to pid {}) has no start", id, f->pid));

  // Bytes on both ends of each message.
  std::map<std::int64_t, const TraceSpan*> sends, delivers;
  for (const auto& s : t.spans) {
    if (s.msg == 0) continue;
    if (s.cat == "send")
      sends[s.msg] = &s;
    else if (s.cat == "deliver")
      delivers[s.msg] = &s;
  }
  for (const auto& [id, s] : sends) {
    auto it = delivers.find(id);
    if (it != delivers.end() && it->second->bytes != s->bytes)
      bad.push_back(fmt::format("message {} has {} B at the sender and {} B at the receiver", id,
                                s->bytes, it->second->bytes));
  }

  // Strict nesting and order per lane.
  std::map<std::pair<int, int>, std::vector<const TraceSpan*>> lanes;
  for (const auto& s : t.spans) lanes[{s.pid, s.tid}].push_back(&s);
  for (const auto& [key, spans] : lanes) {
    std::vector<double> open;  // end times of enclosing spans
    double last_start = -1e300;
    for (const TraceSpan* s : spans) {
      if (s->ts < last_start) {
        bad.push_back(
            fmt::format("pid {} tid {}: span '{}' at {:.3f} us is written after a later one",
                        key.first, key.second, s->name, s->ts));
        break;
      }
      last_start = s->ts;
      const double end = s->ts + std::max(0.0, s->dur);
      // Times are printed to the nanosecond and ts + dur is summed in floating point: ends and
      // starts within half a nanosecond are equal.
      constexpr double kHalfNs = 5e-4;
      while (!open.empty() && open.back() <= s->ts + kHalfNs) open.pop_back();
      if (!open.empty() && end > open.back() + kHalfNs) {
        bad.push_back(fmt::format(
            "pid {} tid {}: span '{}' at {:.3f} us overlaps its neighbour without nesting",
            key.first, key.second, s->name, s->ts));
        break;
      }
      open.push_back(end);
    }
  }
  return bad;
}

}  // namespace distlab
