#include "core/trace/reader.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

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

// Times are printed to the nanosecond and ts + dur is summed in floating point: ends and
// starts within half a nanosecond are equal.
constexpr double kHalfNs = 5e-4;

double end_of(const TraceSpan& s) {
  return s.ts + std::max(0.0, s.dur);
}

// The slice each flow event binds to, the way Perfetto's JSON importer binds it. Its sorter
// orders events by ts; at one ts, complete slices longest first, then everything else (flow
// events among it), ties in file order. One stack of open slices per (pid, tid), a slice
// closed once an event comes at or after its end; a flow event binds to the top of its stack
// (nullptr: none). So a flow event binds to the deepest slice enclosing its ts, wherever the
// file puts it, and of two slices over the same interval, to the one written second.
std::map<const TraceFlow*, const TraceSpan*> bind_flows(const LoadedTrace& t) {
  struct Item {
    double ts, key;  // key: -dur for a slice of some length, else +inf
    std::size_t index;
    const TraceSpan* span;
    const TraceFlow* flow;
  };
  constexpr double kLast = std::numeric_limits<double>::infinity();
  std::map<std::pair<int, int>, std::vector<Item>> lanes;
  for (const auto& s : t.spans)
    lanes[{s.pid, s.tid}].push_back({s.ts, s.dur > 0 ? -s.dur : kLast, s.index, &s, nullptr});
  for (const auto& f : t.flows)
    lanes[{f.pid, f.tid}].push_back({f.ts, kLast, f.index, nullptr, &f});
  std::map<const TraceFlow*, const TraceSpan*> bound;
  for (auto& [key, items] : lanes) {
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      return std::tie(a.ts, a.key, a.index) < std::tie(b.ts, b.key, b.index);
    });
    std::vector<const TraceSpan*> open;
    for (const Item& it : items) {
      while (!open.empty() && end_of(*open.back()) <= it.ts + kHalfNs) open.pop_back();
      if (it.span)
        open.push_back(it.span);
      else
        bound[it.flow] = open.empty() ? nullptr : open.back();
    }
  }
  return bound;
}

// Schema 3: the rules Perfetto and chrome://tracing need (reader.hpp's list).
void check_for_other_viewers(const LoadedTrace& t, std::vector<std::string>& bad) {
  // Arrows forward in time: 's' on its post slice, 'f' on its deliver slice, the first ending
  // no later than the second starts (Perfetto draws from the end of one to the start of the
  // other).
  const auto bound = bind_flows(t);
  std::map<std::uint64_t, const TraceSpan*> start_slice, finish_slice;
  int reported = 0;
  auto report = [&](std::string line) {
    if (reported++ < 5) bad.push_back(std::move(line));  // a broken writer breaks every message
  };
  for (const auto& f : t.flows) {
    const TraceSpan* b = bound.at(&f);
    const auto id = static_cast<std::int64_t>(f.id);
    if (!b || b->msg != id || (!f.start && b->cat != "deliver")) {
      report(fmt::format("flow {}'s {} at {:.3f} us on pid {} tid {} binds to {}, not to {}", f.id,
                         f.start ? "start" : "finish", f.ts, f.pid, f.tid,
                         b ? fmt::format("'{}' (message {})", b->name, b->msg) : "no slice",
                         f.start ? "a slice of its message" : "its message's deliver slice"));
      continue;
    }
    (f.start ? start_slice : finish_slice)[f.id] = b;
  }
  for (const auto& [id, s] : start_slice) {
    auto it = finish_slice.find(id);
    if (it != finish_slice.end() && end_of(*s) > it->second->ts + kHalfNs)
      report(fmt::format(
          "flow {} runs backwards in time: its start's slice '{}' ends at {:.3f} us, after its "
          "finish's slice '{}' starts at {:.3f} us",
          id, s->name, end_of(*s), it->second->name, it->second->ts));
  }

  // The memory counter: parts only (Catapult stacks every series of a counter).
  for (const auto& c : t.counters)
    if (c.total_arg) {
      bad.push_back(fmt::format(
          "the memory counter on pid {} carries total_bytes beside its parts (stacked on them, it "
          "doubles the height); the total goes in the \"memory total\" counter",
          c.pid));
      break;
    }

  // The top-level metadata: there, flat, and without the keys Catapult reserves.
  if (!t.has_metadata)
    bad.push_back("the trace has no top-level \"metadata\" object (Perfetto skips otherData)");
  if (!t.metadata_flat) bad.push_back("the top-level \"metadata\" holds an array or object");
  for (const auto& k : t.metadata_keys)
    if (k == "clock-domain" || k == "highres-ticks")
      bad.push_back(fmt::format("the top-level \"metadata\" uses Catapult's reserved key '{}'", k));

  // Each rank's own step instants: one for every step its messages and window accesses belong
  // to, no later than the first of them.
  std::map<std::pair<int, std::int64_t>, double> own;
  for (const auto& s : t.rank_steps) {
    auto [it, fresh] = own.try_emplace({s.pid, s.step}, s.ts);
    if (!fresh) it->second = std::min(it->second, s.ts);
  }
  std::set<int> missing;
  for (const auto& s : t.spans) {
    if ((s.cat != "send" && s.cat != "recv" && s.cat != "window") || s.step < 0 ||
        missing.count(s.pid))
      continue;
    auto it = own.find({s.pid, s.step});
    if (it == own.end() || it->second > s.ts + kHalfNs) {
      missing.insert(s.pid);
      bad.push_back(fmt::format(
          "pid {} has no step instant of its own (\"s\":\"p\") for step {} at or before its "
          "'{}' at {:.3f} us",
          s.pid, s.step, s.name, s.ts));
    }
  }
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
    t.ranks_per_node = static_cast<int>(int_or(other, "ranks_per_node", 0));
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

  object metadata;
  if (root["metadata"].get_object().get(metadata) == simdjson::SUCCESS) {
    t.has_metadata = true;
    for (auto field : metadata) {
      t.metadata_keys.emplace_back(field.key);
      const auto type = field.value.type();
      if (type == simdjson::dom::element_type::ARRAY || type == simdjson::dom::element_type::OBJECT)
        t.metadata_flat = false;
    }
  }

  simdjson::dom::array events;
  if (root["traceEvents"].get_array().get(events) != simdjson::SUCCESS)
    throw Error("trace has no traceEvents array");
  std::size_t index = 0;
  for (element ev : events) {
    const std::size_t at = index++;
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
      s.index = at;
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
        s.window = int_or(args, "window", -1);
        s.group = string_or(args, "group");
      }
      t.spans.push_back(std::move(s));
    } else if (ph == "s" || ph == "f") {
      TraceFlow f;
      f.index = at;
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
      if (o["args"].get_object().get(args) == simdjson::SUCCESS) {
        for (int k = 0; k < kCategories; ++k)
          c.total_bytes += int_or(args, fmt::format("{}_bytes", kCategoryNames[k]).c_str(), 0);
        std::int64_t total;
        c.total_arg = args["total_bytes"].get_int64().get(total) == simdjson::SUCCESS;
        if (c.total_arg) c.total_bytes = total;  // before schema 3: the total beside its parts
      }
      t.counters.push_back(c);
    } else if (ph == "C" && string_or(o, "name") == "memory total") {
      // The ledger's total (schema 3), the sum of the "memory" parts: nothing more to read.
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
      if (string_or(o, "s") == "p")
        t.rank_steps.push_back(s);
      else
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
  first_bad_pid(t.rank_steps, "step instant");

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

  // Window accesses (schema 4): a load on a recv lane (tid 3, 13, ...) or a store on a send lane
  // (2, 12, ...), of a window some rank owns, with its bytes; never a message's end.
  int window_reported = 0;
  for (const auto& s : t.spans) {
    if (s.cat != "window") continue;
    std::string why;
    const bool load = s.name == "load";
    if (!load && s.name != "store")
      why = "is named neither load nor store";
    else if (s.tid % 10 != lane_base_tid(load ? Lane::recv : Lane::send))
      why = fmt::format("is on tid {}, not on a {} lane", s.tid, load ? "recv" : "send");
    else if (s.window < 0 || s.window >= t.world_size)
      why =
          fmt::format("accesses the window of rank {}, outside 0..{}", s.window, t.world_size - 1);
    else if (s.bytes < 0)
      why = "has no bytes (args.bytes)";
    else if (s.msg != 0)
      why = fmt::format("carries message id {} (a window access has no other end)", s.msg);
    if (!why.empty() && window_reported++ < 5)
      bad.push_back(
          fmt::format("window access '{}' at {:.3f} us on pid {} {}", s.name, s.ts, s.pid, why));
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
      const double end = end_of(*s);
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
  if (t.schema_version >= 3) check_for_other_viewers(t, bad);
  return bad;
}

}  // namespace distlab
