// trace_model.cpp — the On-Demand loader (the shard replay is shard_replay.cpp).
//
// Sections:
//   1. JSON helpers (numbers that may be ints or doubles, masks as hex strings)
//   2. Builder: one forward pass over the events, then ranks, lanes, spans sorted per lane
//   3. otherData
//   4. messages: flows joined with the send / deliver spans; window accesses from their spans
//   5. parse_trace_model / load_trace_model
#include "viewer/model/trace_model.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

#include "core/base/check.hpp"
#include "core/trace/format.hpp"
#include "viewer/model/gzip.hpp"
#include "viewer/model/pytorch_trace.hpp"

namespace distlab::viewer {

namespace od = simdjson::ondemand;

const char* to_string(SpanKind k) {
  switch (k) {
    case SpanKind::compute:
      return "compute";
    case SpanKind::send:
      return "send";
    case SpanKind::recv:
      return "recv";
    case SpanKind::deliver:
      return "deliver";
    case SpanKind::load:
      return "load";
    case SpanKind::store:
      return "store";
  }
  return "?";
}

const char* memory_category_name(int k) {
  return k >= 0 && k < kMemoryCategories ? distlab::kCategoryNames[static_cast<std::size_t>(k)]
                                         : "?";
}

int TraceModel::rank_of_pid(int pid) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), pid,
                             [](const Rank& r, int p) { return r.pid < p; });
  return it != ranks.end() && it->pid == pid ? static_cast<int>(it - ranks.begin()) : -1;
}

int TraceModel::max_step() const {
  int k = 0;
  for (const auto& m : messages) k = std::max(k, static_cast<int>(m.step));
  for (const auto& a : accesses) k = std::max(k, static_cast<int>(a.step));
  for (const auto& s : steps) k = std::max(k, s.step);
  return k;
}

namespace {

// The args a message and a window access share: its bytes, its step and its buffer's chunks.
template <class Event>
void take_data_args(Event& e, const SpanArgs& a) {
  e.bytes = a.bytes;
  e.step = a.step;
  e.buffer = a.buffer;
  e.chunk = a.chunk;
  e.chunk_end = a.chunk_end;
}

// ---- 1. JSON helpers ------------------------------------------------------------------------

// A number as double (ints included); nullopt for any other type (the value is then skipped).
std::optional<double> as_double(od::value v) {
  if (v.type() != od::json_type::number) return std::nullopt;
  return double(v.get_double());
}

// An integral number (an integral double counts); nullopt otherwise.
std::optional<std::int64_t> as_int(od::value v) {
  if (v.type() != od::json_type::number) return std::nullopt;
  od::number n = v.get_number();
  if (n.is_int64()) return n.get_int64();
  if (n.is_uint64()) return static_cast<std::int64_t>(n.get_uint64());
  // A double converts only inside int64's range [-2^63, 2^63): outside it (4e42, found by the
  // fuzzer) the cast is undefined behaviour.
  const double d = n.get_double();
  if (!(d >= -0x1p63 && d < 0x1p63)) return std::nullopt;
  if (d == static_cast<double>(static_cast<std::int64_t>(d))) return static_cast<std::int64_t>(d);
  return std::nullopt;
}

// Strings and keys without a backslash are read in place, from the file's own bytes:
// get_string() and unescaped_key() copy every one into simdjson's string buffer, which only
// grows during a document (for a trace, half the file size again, and slower).
bool is_json_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::optional<std::string_view> as_string(od::value v) {
  if (v.type() != od::json_type::string) return std::nullopt;
  std::string_view raw = v.raw_json_token();  // "text" and any whitespace after it
  while (!raw.empty() && is_json_space(raw.back())) raw.remove_suffix(1);
  if (raw.size() >= 2 && raw.back() == '"' && raw.find('\\') == std::string_view::npos) {
    // Consume the value as get_string() would (no copy): an unconsumed value is skipped
    // later with less checking, and a broken document could then slip through.
    v.get_raw_json_string().value();
    return raw.substr(1, raw.size() - 2);
  }
  return std::string_view(v.get_string());
}

// An object key; simdjson has checked that it is a string and that its closing quote exists.
std::string_view key_of(simdjson::simdjson_result<od::field>& field) {
  const char* const begin = field.key().value().raw();  // just after the opening quote
  const char* end = begin;
  while (*end != '"' && *end != '\\' && *end != '\0') ++end;
  if (*end == '"') return {begin, static_cast<std::size_t>(end - begin)};
  return field.unescaped_key();
}

// "0x5", "5" or 5.
std::uint64_t as_mask(od::value v) {
  if (auto s = as_string(v)) return std::strtoull(std::string(*s).c_str(), nullptr, 0);
  if (auto i = as_int(v)) return static_cast<std::uint64_t>(*i);
  return 0;
}

// For a get_object() / get_array() that may fail: true when the value is of another type (the
// caller skips it), false on success. Any other error means the document is broken or cut
// short, and throws: swallowed, it would end the enclosing loop early and silently, and a
// trace cut after a complete event would load as if whole (found by the corpus test).
bool other_type(simdjson::error_code e) {
  if (e == simdjson::SUCCESS) return false;
  if (e == simdjson::INCORRECT_TYPE) return true;
  throw simdjson::simdjson_error(e);
}

int clamp_int(std::int64_t v) {
  return static_cast<int>(std::clamp<std::int64_t>(v, INT32_MIN, INT32_MAX));
}

// An integer written as a number or as text ("337"); nullopt otherwise.
std::optional<std::int64_t> as_int_or_text(od::value v) {
  if (auto s = as_string(v)) {
    const std::string text(*s);
    char* end = nullptr;
    const long long i = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str() || *end) return std::nullopt;
    return i;
  }
  return as_int(v);
}

// A value's text: a string's contents, else its JSON ("[0, 1]" either way).
std::string_view as_text(od::value v) {
  if (auto s = as_string(v)) return *s;
  std::string_view raw;
  if (simdjson::to_json_string(v).get(raw)) return {};
  return raw;
}

// The elements of one "Input Dims" entry (OpInputs::elems): a tensor's dims multiply, a list
// of tensors' elements add up; -1 for anything else, a negative dim or an overflow.
std::int64_t dims_elems(od::array dims, int depth) {
  std::int64_t product = 1, sum = 0;
  bool numbers = false, lists = false, bad = false;
  for (auto item : dims) {
    od::value v;
    if (other_type(item.get(v))) {
      bad = true;
      continue;
    }
    od::array inner;
    if (v.type() == od::json_type::number) {
      numbers = true;
      const std::optional<std::int64_t> d = as_int(v);
      if (!d || *d < 0 || __builtin_mul_overflow(product, *d, &product)) bad = true;
    } else if (depth < 4 && !other_type(v.get_array().get(inner))) {
      lists = true;
      const std::int64_t e = dims_elems(inner, depth + 1);
      if (e < 0 || __builtin_add_overflow(sum, e, &sum)) bad = true;
    } else {
      bad = true;
    }
  }
  if (bad || (numbers && lists)) return -1;
  return lists ? sum : product;
}

// Whether an op's recorded inputs are worth keeping: c10d's collectives, record_param_comms
// and the backends' annotations (nccl:all_reduce, gloo:broadcast).
bool is_collective_op(std::string_view name) {
  return name.starts_with("c10d::") || name.starts_with("nccl:") || name.starts_with("gloo:") ||
         name == "record_param_comms";
}

// Whether a span's "correlation" is worth keeping: an NCCL kernel's, or a launch's (the
// kernel's CPU side: cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernelEx).
bool keeps_correlation(std::string_view name) {
  return name.starts_with("nccl") || name.find("aunch") != std::string_view::npos;
}

// ---- 2. Builder -----------------------------------------------------------------------------

// Everything one event may carry, whatever order its fields come in.
struct EventFields {
  std::string_view ph, name, cat, bp, s_scope;
  std::optional<std::int64_t> pid, tid;
  std::string_view pid_text;  // a string pid (PyTorch's "CPU functions")
  double ts = 0, dur = -1;
  bool has_ts = false;
  std::uint64_t id = 0;
  bool has_id = false;
  // args
  SpanArgs margs;
  bool message_args = false;
  bool phase_args = false;  // op, micro, stage, chunk or text: kept on a compute span too
  bool comms_args = false;  // a PyTorch collective's args: kept too
  TorchArgs torch;          // PyTorch's other args (kept for collectives and launches only)
  bool has_torch = false;
  std::string_view arg_name;
  std::optional<std::int64_t> sort_index, step;
  std::array<std::int64_t, kMemoryCategories> mem{};
  std::int64_t mem_total = -1;
  std::optional<double> value;  // a recorded value's (a "C" event's args.value)
};

struct LaneKey {
  int pid, tid;
  bool operator<(const LaneKey& o) const { return pid != o.pid ? pid < o.pid : tid < o.tid; }
};

struct OpenSpan {  // a B event waiting for its E
  double ts;
  std::uint32_t name;
  SpanKind kind;
};

struct FlowEnd {
  int pid = 0;
  double ts = 0;
  bool seen = false;
};

struct FlowEvent {  // one s or f event; grouped by id in build_messages()
  std::uint64_t id;
  double ts;
  int pid;
  bool finish;
};

SpanKind kind_of(std::string_view cat, std::string_view name) {
  if (cat == "send") return SpanKind::send;
  if (cat == "recv") return SpanKind::recv;
  if (cat == "deliver") return SpanKind::deliver;
  if (cat == "window" && name == "load") return SpanKind::load;  // schema 4: no message
  if (cat == "window" && name == "store") return SpanKind::store;
  return SpanKind::compute;
}

ApplyKind apply_of(std::string_view a) {
  if (a == "copy") return ApplyKind::copy;
  if (a == "reduce") return ApplyKind::reduce;
  return ApplyKind::none;
}

class Builder {
 public:
  TraceModel m;

  std::uint32_t intern(std::string_view s) {
    if (s.empty()) return 0;
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<std::uint32_t>(m.strings.size());
    m.strings.emplace_back(s);
    ids_.emplace(m.strings.back(), id);
    return id;
  }

  void read_events(od::array events) {
    for (auto ev : events) {
      od::object o;
      if (other_type(ev.get_object().get(o))) {
        ++skipped_;
        continue;
      }
      EventFields f;
      read_fields(o, f);
      add_event(f);
      ++m.events;
    }
  }

  void read_other(od::object other);
  void finish();

 private:
  struct StringHash {  // lets ids_ be searched with a string_view, no std::string made per event
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>> ids_;
  std::map<LaneKey, std::uint32_t> lane_ids_;  // lanes hold the pid in Lane::rank until finish()
  std::map<int, std::string> process_names_;
  std::map<int, int> process_sort_;
  std::map<LaneKey, std::string> thread_names_;
  std::map<LaneKey, int> thread_sort_;
  std::map<LaneKey, std::vector<OpenSpan>> open_;
  std::vector<FlowEvent> flows_;                                            // in file order
  std::map<int, std::vector<MemorySample>> memory_;                         // pid -> samples
  std::map<std::pair<std::string, int>, std::vector<ValueSample>> values_;  // (name, pid)
  std::map<int, bool> pids_;
  std::size_t skipped_ = 0;

  void read_fields(od::object o, EventFields& f) {
    for (auto field : o) {
      const std::string_view key = key_of(field);
      od::value v = field.value();
      if (key == "ph")
        f.ph = as_string(v).value_or("");
      else if (key == "name")
        f.name = as_string(v).value_or("");
      else if (key == "cat")
        f.cat = as_string(v).value_or("");
      else if (key == "bp")
        f.bp = as_string(v).value_or("");
      else if (key == "s")
        f.s_scope = as_string(v).value_or("");
      else if (key == "pid") {
        if (auto text = as_string(v))
          f.pid_text = *text;
        else
          f.pid = as_int(v);
      } else if (key == "tid")
        f.tid = as_int(v);
      else if (key == "ts") {
        if (auto d = as_double(v)) f.ts = *d, f.has_ts = true;
      } else if (key == "dur")
        f.dur = as_double(v).value_or(-1);
      else if (key == "id") {
        if (auto s = as_string(v)) {
          char* end = nullptr;
          const std::string text(*s);
          f.id = std::strtoull(text.c_str(), &end, 0);
          if (end == text.c_str() || *end)
            f.id = (std::uint64_t{1} << 63) | intern(text);  // not a number
        } else {
          f.id = static_cast<std::uint64_t>(as_int(v).value_or(0));
        }
        f.has_id = true;
      } else if (key == "args") {
        od::object args;
        if (!other_type(v.get_object().get(args))) read_args(args, f);
      }
    }
  }

  void read_args(od::object args, EventFields& f) {
    SpanArgs& a = f.margs;
    for (auto field : args) {
      const std::string_view key = key_of(field);
      od::value v = field.value();
      if (key == "peer")
        a.peer = clamp_int(as_int(v).value_or(-1)), f.message_args = true;
      else if (key == "window")  // a window access's owner (schema 4)
        a.window = clamp_int(as_int(v).value_or(-1)), f.message_args = true;
      else if (key == "bytes")
        a.bytes = as_int(v).value_or(-1), f.message_args = true;
      else if (key == "tag")
        a.tag = as_int(v).value_or(-1);
      else if (key == "step")
        f.step = as_int(v);
      else if (key == "buffer")
        a.buffer = intern(as_string(v).value_or(""));
      else if (key == "chunk")  // a message's first chunk, or a phase's model chunk
        a.chunk = clamp_int(as_int(v).value_or(-1)), f.phase_args = true;
      else if (key == "chunk_end")
        a.chunk_end = clamp_int(as_int(v).value_or(-1));
      else if (key == "apply")
        a.apply = apply_of(as_string(v).value_or(""));
      else if (key == "contributions")
        a.contributions = clamp_int(as_int(v).value_or(0));
      else if (key == "contrib_mask")
        a.contrib_mask = as_mask(v);
      else if (key == "group")
        a.group = intern(as_string(v).value_or(""));
      else if (key == "msg")
        a.msg = static_cast<std::uint64_t>(as_int(v).value_or(0));
      else if (key == "op")
        a.op = intern(as_string(v).value_or("")), f.phase_args = true;
      else if (key == "micro")
        a.micro = clamp_int(as_int(v).value_or(-1)), f.phase_args = true;
      else if (key == "stage")
        a.stage = clamp_int(as_int(v).value_or(-1)), f.phase_args = true;
      else if (key == "text")
        a.text = intern(as_string(v).value_or("")), f.phase_args = true;
      else if (key == "name")
        f.arg_name = as_string(v).value_or("");
      else if (key == "Collective name")  // PyTorch 2.x's record_param_comms (util.h)
        a.collective = intern(as_string(v).value_or("")), f.comms_args = true;
      else if (key == "In msg nelems")
        a.in_elems = as_int(v).value_or(-1), f.comms_args = true;
      else if (key == "Out msg nelems")
        a.out_elems = as_int(v).value_or(-1), f.comms_args = true;
      else if (key == "dtype")
        a.dtype = intern(as_string(v).value_or(""));
      else if (key == "Group size")
        a.group_size = clamp_int(as_int(v).value_or(-1));
      else if (key == "Process Group Name")
        a.group = intern(as_string(v).value_or(""));
      else if (key == "Process Group Ranks")
        f.torch.group_ranks = intern(as_text(v)), f.has_torch = true;
      else if (key == "In split size")
        f.torch.in_split = intern(as_text(v)), f.has_torch = true;
      else if (key == "Out split size")
        f.torch.out_split = intern(as_text(v)), f.has_torch = true;
      else if (key == "Seq")
        f.torch.seq = as_int_or_text(v).value_or(-1), f.has_torch = true;
      else if (key == "Src Rank" || key == "Dst Rank")
        a.peer = clamp_int(as_int_or_text(v).value_or(-1));
      else if (key == "correlation")
        f.torch.correlation = as_int(v).value_or(-1), f.has_torch = true;
      else if (key == "Input Dims" || key == "Input type" || key == "Concrete Inputs") {
        if (f.name.empty() || is_collective_op(f.name)) read_inputs(key, v, f);
      } else if (key == "sort_index")
        f.sort_index = as_int(v);
      else if (key == "value")
        f.value = as_double(v);
      else if (key == "total_bytes")
        f.mem_total = as_int(v).value_or(0);
      else if (key.size() > 6 && key.ends_with("_bytes")) {
        for (int k = 0; k < kMemoryCategories; ++k)
          if (key.substr(0, key.size() - 6) == memory_category_name(k))
            f.mem[k] = as_int(v).value_or(0);
      }
    }
    if (f.step) a.step = clamp_int(*f.step);
  }

  // One of a collective op's "Input Dims", "Input type" or "Concrete Inputs" (TorchArgs).
  void read_inputs(std::string_view key, od::value v, EventFields& f) {
    od::array list;
    if (other_type(v.get_array().get(list))) return;
    f.has_torch = true;
    TorchArgs& in = f.torch;
    if (key == "Input Dims") {
      for (auto item : list) {
        od::value iv;
        od::array dims;
        if (other_type(item.get(iv)) || other_type(iv.get_array().get(dims)))
          in.elems.push_back(-1);
        else
          in.elems.push_back(dims_elems(dims, 0));
      }
    } else {
      for (auto item : list) {
        od::value iv;
        std::string_view text;
        if (!other_type(item.get(iv))) text = as_string(iv).value_or("");
        if (key == "Input type")
          in.types.push_back(intern(text));
        else
          in.concrete.emplace_back(text);
      }
    }
  }

  std::uint32_t lane_of(int pid, int tid) {
    auto [it, fresh] =
        lane_ids_.try_emplace(LaneKey{pid, tid}, static_cast<std::uint32_t>(m.lanes.size()));
    if (fresh) {
      Lane l;
      l.rank = pid;
      l.tid = tid;
      m.lanes.push_back(l);
      pids_[pid] = true;
    }
    return it->second;
  }

  void add_span(int pid, int tid, double ts, double dur, std::uint32_t name, SpanKind kind,
                const EventFields* f) {
    Span s;
    s.start = ts;
    s.dur = std::max(0.0, dur);
    s.lane = lane_of(pid, tid);
    s.name = name;
    s.kind = kind;
    const bool torch =
        f && f->has_torch &&
        (is_collective_op(f->name) || (f->torch.correlation >= 0 && keeps_correlation(f->name)));
    if (f && (f->message_args || f->phase_args || f->comms_args || f->margs.msg || torch ||
              kind != SpanKind::compute)) {
      s.args = static_cast<std::int32_t>(m.span_args.size());
      m.span_args.push_back(f->margs);
      if (torch) {
        m.span_args.back().torch = static_cast<std::int32_t>(m.torch_args.size());
        m.torch_args.push_back(f->torch);
      }
    }
    m.spans.push_back(s);
  }

  void add_event(const EventFields& f) {
    if (f.ph.empty()) {
      ++skipped_;
      return;
    }
    const char ph = f.ph.size() == 1 ? f.ph[0] : '?';
    if (one_rank) {
      add_rank_event(f, ph);
      return;
    }
    // Metadata may come with pid only; everything else needs an integer pid (tid defaults to 0).
    if (!f.pid) {
      ++skipped_;
      return;
    }
    const int pid = clamp_int(*f.pid), tid = clamp_int(f.tid.value_or(0));
    switch (ph) {
      case 'X':
        // A send's "post" slice (schema 3) exists for other viewers' flow arrows: the message
        // takes its send time from its flow start, and the timeline draws the send span.
        if (f.cat != "post")
          add_span(pid, tid, f.ts, f.dur, intern(f.name), kind_of(f.cat, f.name), &f);
        break;
      case 'B':
        lane_of(pid, tid);
        open_[{pid, tid}].push_back({f.ts, intern(f.name), kind_of(f.cat, f.name)});
        break;
      case 'E': {
        auto& st = open_[{pid, tid}];
        if (st.empty()) break;  // an E without its B: nothing to close
        const OpenSpan b = st.back();
        st.pop_back();
        add_span(pid, tid, b.ts, f.ts - b.ts, b.name, b.kind, nullptr);
        break;
      }
      case 's':
      case 'f': {
        if (!f.has_id) break;
        flows_.push_back({f.id, f.ts, pid, ph == 'f'});
        pids_[pid] = true;
        break;
      }
      case 'C':
        if (f.name == "memory") {
          MemorySample s;
          s.ts = f.ts;
          s.bytes = f.mem;
          s.total = f.mem_total;
          if (s.total < 0) {
            s.total = 0;
            for (auto b : s.bytes) s.total += b;
          }
          memory_[pid].push_back(s);
          pids_[pid] = true;
        } else if (f.value && std::isfinite(*f.value)) {
          values_[{std::string(f.name), pid}].push_back({f.ts, *f.value});
        }
        break;
      case 'i':
      case 'I':
        // The global frames only: each rank's own "step" instants ("s":"p", schema 3) are for
        // other viewers, and would count every step once per rank.
        if (f.name == "step frame" && f.step && f.s_scope != "p" && f.s_scope != "t")
          m.steps.push_back({clamp_int(*f.step), f.ts});
        break;
      case 'M':
        if (f.name == "process_name")
          process_names_[pid] = f.arg_name, pids_[pid] = true;
        else if (f.name == "process_sort_index" && f.sort_index)
          process_sort_[pid] = clamp_int(*f.sort_index);
        else if (f.name == "thread_name")
          thread_names_[{pid, tid}] = f.arg_name;
        else if (f.name == "thread_sort_index" && f.sort_index)
          thread_sort_[{pid, tid}] = clamp_int(*f.sort_index);
        break;
      default:
        break;  // other phases (t, n, b, e, P, ...) are not drawn
    }
    if (f.has_ts) extend(f.ts, ph == 'X' ? f.dur : 0.0);
  }
  bool have_extent_ = false;

  void extend(double ts, double dur) {
    const double end = ts + std::max(0.0, dur);
    if (!have_extent_) m.t_begin = ts, m.t_end = end, have_extent_ = true;
    m.t_begin = std::min(m.t_begin, ts);
    m.t_end = std::max(m.t_end, end);
  }

  // One rank's file (parse_rank_file): each (pid, tid) of the file is a lane of rank pid 1, by
  // first appearance; a string pid is a process of its own.
  std::map<std::pair<std::int64_t, std::int64_t>, int> rank_lanes_;
  std::map<std::int64_t, std::string> rank_processes_;  // process_name by the file's pid

  void add_rank_event(const EventFields& f, char ph) {
    const std::int64_t pid_key = !f.pid_text.empty()
                                     ? -1 - static_cast<std::int64_t>(intern(f.pid_text))
                                     : f.pid.value_or(0);
    const std::int64_t tid_key = f.tid.value_or(0);
    if (ph == 'M') {
      if (f.name == "process_name")
        rank_processes_[pid_key] = f.arg_name;
      else if (f.name == "thread_name" && f.tid)
        thread_names_[{1, rank_lane(pid_key, tid_key)}] = f.arg_name;
      return;
    }
    if (ph != 'X' && ph != 'B' && ph != 'E') return;  // flows, instants, counters: see the header
    EventFields g = f;
    g.pid = 1;
    g.tid = rank_lane(pid_key, tid_key);
    g.pid_text = {};
    one_rank = false;
    add_event(g);
    one_rank = true;
  }
  int rank_lane(std::int64_t pid_key, std::int64_t tid_key) {
    auto [it, fresh] =
        rank_lanes_.try_emplace({pid_key, tid_key}, static_cast<int>(rank_lanes_.size()) + 1);
    return it->second;
  }

 public:
  bool one_rank = false;
  // One rank's lanes named "<process> / <thread>" when the file has several processes (a CPU
  // and its GPUs), and the rank its process's name.
  void name_rank_lanes() {
    std::map<std::int64_t, bool> processes;
    for (const auto& [key, lane] : rank_lanes_) processes[key.first] = true;
    for (const auto& [key, lane] : rank_lanes_) {
      std::string& name = thread_names_[{1, lane}];
      if (name.empty()) name = fmt::format("tid {}", key.second);
      auto p = rank_processes_.find(key.first);
      if (processes.size() > 1)
        name = fmt::format("{} / {}",
                           p != rank_processes_.end() && !p->second.empty() ? p->second
                           : key.first < 0
                               ? std::string(m.str(static_cast<std::uint32_t>(-1 - key.first)))
                               : fmt::format("pid {}", key.first),
                           name);
    }
  }

 private:
  void build_messages();
  void build_accesses();
};

// ---- 3. otherData ---------------------------------------------------------------------------

// otherData.text (schema 2): {"concept": "...", "look_at": "..."}.
void read_text(od::value v, TraceMeta& in) {
  od::object o;
  if (other_type(v.get_object().get(o))) return;
  for (auto f : o) {
    const std::string_view k = f.unescaped_key();
    if (k == "concept")
      in.concept_text = as_string(f.value()).value_or("");
    else if (k == "look_at")
      in.look_at = as_string(f.value()).value_or("");
  }
}

// otherData.memory_formula (schema 2): {"label": "...", "bytes_per_rank": [..]}.
void read_memory_formula(od::value v, TraceMeta& in) {
  od::object o;
  if (other_type(v.get_object().get(o))) return;
  for (auto f : o) {
    const std::string_view k = f.unescaped_key();
    od::value fv = f.value();
    if (k == "label") {
      in.memory_formula = as_string(fv).value_or("");
    } else if (k == "bytes_per_rank") {
      od::array arr;
      if (other_type(fv.get_array().get(arr))) continue;
      for (auto item : arr) {
        od::value iv;
        if (other_type(item.get(iv))) break;
        in.memory_expected_bytes.push_back(std::max(0.0, as_double(iv).value_or(0)));
      }
    }
  }
}

void Builder::read_other(od::object other) {
  TraceMeta& in = m.info;
  for (auto field : other) {
    const std::string_view key = field.unescaped_key();
    od::value v = field.value();
    if (key == "schema")
      in.distlab = as_string(v).value_or("") == "distlab-trace";
    else if (key == "schema_version")
      in.schema_version = clamp_int(as_int(v).value_or(0));
    else if (key == "lesson")
      in.lesson = as_string(v).value_or("");
    else if (key == "title")
      in.title = as_string(v).value_or("");
    else if (key == "algorithm")
      in.algorithm = as_string(v).value_or("");
    else if (key == "mode")
      in.mode = as_string(v).value_or("");
    else if (key == "device")
      in.device = as_string(v).value_or("");
    else if (key == "transport")
      in.transport = as_string(v).value_or("");
    else if (key == "world_size")
      in.world_size = clamp_int(as_int(v).value_or(0));
    else if (key == "ranks_per_node")
      in.ranks_per_node = std::max(0, clamp_int(as_int(v).value_or(0)));
    else if (key == "steps")
      in.steps = as_int(v).value_or(0);
    else if (key == "messages")
      in.messages = as_int(v).value_or(0);
    else if (key == "wall_seconds")
      in.wall_seconds = as_double(v).value_or(0);
    else if (key == "parameters")
      in.parameters_json = std::string(simdjson::to_json_string(v).value());
    else if (key == "cost_model")
      in.cost_model_json = std::string(simdjson::to_json_string(v).value());
    else if (key == "text")
      read_text(v, in);
    else if (key == "memory_formula")
      read_memory_formula(v, in);
    else if (key == "value_tracks") {
      od::array names;
      if (other_type(v.get_array().get(names))) continue;
      for (auto item : names) {
        od::value iv;
        if (other_type(item.get(iv))) break;
        if (auto name = as_string(iv)) in.value_tracks.emplace_back(*name);
      }
    } else if (key == "verification") {
      od::object ver;
      if (other_type(v.get_object().get(ver))) continue;
      in.has_verification = true;
      for (auto vf : ver) {
        const std::string_view k = vf.unescaped_key();
        od::value vv = vf.value();
        if (k == "verified") {
          bool b = false;
          if (!other_type(vv.get_bool().get(b))) in.verified = b;
        } else if (k == "checks") {
          in.checks = as_int(vv).value_or(0);
        } else if (k == "failed") {
          od::array arr;
          if (other_type(vv.get_array().get(arr))) continue;
          for (auto item : arr) {
            od::object fo;
            if (other_type(item.get_object().get(fo))) continue;
            FailedCheck fc;
            for (auto ff : fo) {
              const std::string_view fk = ff.unescaped_key();
              od::value fv = ff.value();
              if (fk == "rank")
                fc.rank = clamp_int(as_int(fv).value_or(-1));
              else if (fk == "name")
                fc.name = as_string(fv).value_or("");
              else if (fk == "detail")
                fc.detail = as_string(fv).value_or("");
            }
            in.failed.push_back(std::move(fc));
          }
        }
      }
    } else if (key == "buffers") {
      od::array arr;
      if (other_type(v.get_array().get(arr))) continue;
      for (auto item : arr) {
        od::object bo;
        if (other_type(item.get_object().get(bo))) continue;
        BufferInfo b;
        for (auto bf : bo) {
          const std::string_view bk = bf.unescaped_key();
          od::value bv = bf.value();
          if (bk == "name")
            b.name = as_string(bv).value_or("");
          else if (bk == "length")
            b.length =
                static_cast<std::uint64_t>(std::max<std::int64_t>(0, as_int(bv).value_or(0)));
          else if (bk == "chunks")
            b.chunks = clamp_int(std::clamp<std::int64_t>(as_int(bv).value_or(1), 1, 1 << 20));
        }
        if (!b.name.empty()) in.buffers.push_back(std::move(b));
      }
    } else {
      std::string_view raw;
      if (!simdjson::to_json_string(v).get(raw)) in.extra[std::string(key)] = std::string(raw);
    }
  }
}

// ---- 4. messages ----------------------------------------------------------------------------

void Builder::build_messages() {
  // Flow events and message spans, each sorted by id; stable, so within one id the file
  // order (flows) and the span order (spans) decide which end counts: the first.
  struct MsgSpan {
    std::uint64_t msg;
    std::int32_t span;
  };
  std::vector<MsgSpan> by_msg;
  for (std::size_t i = 0; i < m.spans.size(); ++i) {
    const Span& s = m.spans[i];
    const SpanArgs* a = m.args(s);
    if (a && a->msg && (s.kind == SpanKind::send || s.kind == SpanKind::deliver))
      by_msg.push_back({a->msg, static_cast<std::int32_t>(i)});
  }
  std::stable_sort(by_msg.begin(), by_msg.end(),
                   [](const MsgSpan& a, const MsgSpan& b) { return a.msg < b.msg; });
  std::stable_sort(flows_.begin(), flows_.end(),
                   [](const FlowEvent& a, const FlowEvent& b) { return a.id < b.id; });

  // Every id seen in a flow or on a message span, ascending (a merge of the two); a message
  // needs both of its ends.
  std::size_t fi = 0, si = 0;
  while (fi < flows_.size() || si < by_msg.size()) {
    const std::uint64_t id = si == by_msg.size()   ? flows_[fi].id
                             : fi == flows_.size() ? by_msg[si].msg
                                                   : std::min(flows_[fi].id, by_msg[si].msg);
    FlowEnd start, finish;
    for (; fi < flows_.size() && flows_[fi].id == id; ++fi) {
      const FlowEvent& e = flows_[fi];
      FlowEnd& end = e.finish ? finish : start;
      if (!end.seen) end = {e.pid, e.ts, true};  // a repeated end keeps the first
    }
    struct {
      std::int32_t send = -1, deliver = -1;
    } ends;
    for (; si < by_msg.size() && by_msg[si].msg == id; ++si) {
      const std::int32_t i = by_msg[si].span;
      if (m.spans[i].kind == SpanKind::send && ends.send < 0) ends.send = i;
      if (m.spans[i].kind == SpanKind::deliver && ends.deliver < 0) ends.deliver = i;
    }
    Message msg;
    msg.id = id;
    const Span* send = ends.send >= 0 ? &m.spans[ends.send] : nullptr;
    const Span* deliver = ends.deliver >= 0 ? &m.spans[ends.deliver] : nullptr;
    if (!(start.seen || send) || !(finish.seen || deliver)) continue;  // half a message
    msg.send_span = ends.send;
    msg.deliver_span = ends.deliver;
    msg.src = send ? m.lanes[send->lane].rank : m.rank_of_pid(start.pid);
    msg.dst = deliver ? m.lanes[deliver->lane].rank : m.rank_of_pid(finish.pid);
    msg.send_time = start.seen ? start.ts : send->start;
    msg.send_end = send ? send->end() : msg.send_time;
    msg.arrival = std::max(msg.send_time, deliver ? deliver->end() : finish.ts);
    const SpanArgs* a = send ? m.args(*send) : deliver ? m.args(*deliver) : nullptr;
    if (a) {
      take_data_args(msg, *a);
      msg.apply = a->apply;
      msg.contributions = a->contributions;
      msg.contrib_mask = a->contrib_mask;
      msg.group = a->group;
    }
    m.messages.push_back(msg);
  }
  std::stable_sort(m.messages.begin(), m.messages.end(),
                   [](const Message& a, const Message& b) { return a.send_time < b.send_time; });
}

// Window accesses (schema 4): one per load or store span, by start. The owner is a world rank
// (pid owner + 1).
void Builder::build_accesses() {
  for (std::size_t i = 0; i < m.spans.size(); ++i) {
    const Span& s = m.spans[i];
    if (s.kind != SpanKind::load && s.kind != SpanKind::store) continue;
    WindowAccess w;
    w.rank = m.lanes[s.lane].rank;
    w.store = s.kind == SpanKind::store;
    w.start = s.start;
    w.end = s.end();
    w.span = static_cast<std::int32_t>(i);
    if (const SpanArgs* a = m.args(s)) {
      w.owner = a->window >= 0 && a->window < INT32_MAX ? m.rank_of_pid(a->window + 1) : -1;
      take_data_args(w, *a);
    }
    m.accesses.push_back(w);
  }
  std::stable_sort(m.accesses.begin(), m.accesses.end(),
                   [](const WindowAccess& a, const WindowAccess& b) { return a.start < b.start; });
}

void Builder::finish() {
  // Ranks: every pid seen, plus 1..world_size for a distlab trace; in pid order.
  if (m.info.distlab)
    for (int p = 1; p <= std::min(m.info.world_size, 1 << 16); ++p) pids_[p] = true;
  for (const auto& [pid, unused] : pids_) {
    Rank r;
    r.pid = pid;
    auto it = process_names_.find(pid);
    r.name =
        it != process_names_.end() && !it->second.empty() ? it->second : fmt::format("pid {}", pid);
    auto si = process_sort_.find(pid);
    r.sort_index = si != process_sort_.end() ? si->second : pid;
    m.ranks.push_back(std::move(r));
  }
  if (m.info.world_size <= 0) m.info.world_size = m.world_size();

  // Lanes: ordered by rank, then sort index, then tid; spans remapped to the new order.
  std::vector<std::uint32_t> order(m.lanes.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) {
    Lane& l = m.lanes[i];
    const LaneKey key{l.rank, l.tid};
    auto tn = thread_names_.find(key);
    l.name = tn != thread_names_.end() && !tn->second.empty() ? tn->second
                                                              : fmt::format("tid {}", l.tid);
    auto ts = thread_sort_.find(key);
    l.sort_index = ts != thread_sort_.end() ? ts->second : l.tid;
    l.rank = m.rank_of_pid(l.rank);
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const Lane &x = m.lanes[a], &y = m.lanes[b];
    if (x.rank != y.rank) return x.rank < y.rank;
    if (x.sort_index != y.sort_index) return x.sort_index < y.sort_index;
    return x.tid < y.tid;
  });
  std::vector<std::uint32_t> new_index(order.size());
  std::vector<Lane> lanes;
  lanes.reserve(order.size());
  for (std::uint32_t k = 0; k < order.size(); ++k) {
    new_index[order[k]] = k;
    lanes.push_back(std::move(m.lanes[order[k]]));
  }
  m.lanes = std::move(lanes);
  for (auto& s : m.spans) s.lane = new_index[s.lane];
  for (std::uint32_t k = 0; k < m.lanes.size(); ++k) m.ranks[m.lanes[k].rank].lanes.push_back(k);

  // Spans: per lane by start, the outermost first; then each lane's range and depth.
  std::stable_sort(m.spans.begin(), m.spans.end(), [](const Span& a, const Span& b) {
    if (a.lane != b.lane) return a.lane < b.lane;
    if (a.start != b.start) return a.start < b.start;
    return a.dur > b.dur;
  });
  std::vector<double> open;
  for (std::uint32_t i = 0; i < m.spans.size();) {
    Lane& l = m.lanes[m.spans[i].lane];
    l.span_begin = i;
    open.clear();
    for (; i < m.spans.size() && &m.lanes[m.spans[i].lane] == &l; ++i) {
      const Span& s = m.spans[i];
      while (!open.empty() && open.back() <= s.start) open.pop_back();
      open.push_back(s.end());
      l.depth = std::max(l.depth, static_cast<int>(open.size()));
    }
    l.span_end = i;
  }

  build_messages();
  build_accesses();

  std::stable_sort(m.steps.begin(), m.steps.end(),
                   [](const StepFrame& a, const StepFrame& b) { return a.step < b.step; });
  m.memory.resize(m.ranks.size());
  for (auto& [pid, samples] : memory_) {
    std::stable_sort(samples.begin(), samples.end(),
                     [](const MemorySample& a, const MemorySample& b) { return a.ts < b.ts; });
    m.memory[m.rank_of_pid(pid)] = std::move(samples);
  }
  for (auto& [key, samples] : values_) {  // by name, then pid
    const int rank = m.rank_of_pid(key.second);
    if (rank < 0) continue;
    std::stable_sort(samples.begin(), samples.end(),
                     [](const ValueSample& a, const ValueSample& b) { return a.ts < b.ts; });
    m.values.push_back({key.first, rank, std::move(samples)});
  }
  std::stable_sort(m.values.begin(), m.values.end(),
                   [](const ValueSeries& a, const ValueSeries& b) {
                     return a.name != b.name ? a.name < b.name : a.rank < b.rank;
                   });
}

constexpr const char* kExpected =
    "a trace is a Chrome Trace Event JSON object {\"traceEvents\": [...]} or an array of events";

}  // namespace

// ---- 5. parse / load ------------------------------------------------------------------------

namespace {

// PyTorch's distributedInfo (Kineto): {"backend": "nccl" or {"name": ...}, "rank": R,
// "world_size": N, ...}; rank, world_size and backend go to info.extra as JSON text.
void read_distributed_info(od::object dist, TraceModel& m) {
  for (auto field : dist) {
    const std::string_view key = field.unescaped_key();
    od::value v = field.value();
    if (key == "rank" || key == "world_size") {
      if (auto i = as_int(v)) m.info.extra[std::string(key)] = std::to_string(*i);
    } else if (key == "backend") {
      std::optional<std::string_view> name = as_string(v);
      od::object o;
      if (!name && !other_type(v.get_object().get(o)))
        for (auto bf : o)
          if (bf.unescaped_key().value() == "name") name = as_string(bf.value());
      if (name) m.info.extra["backend"] = std::string(*name);
    }
  }
}

// Reads a whole trace text into `b` (events and otherData; b.finish() comes after).
void read_trace(simdjson::padded_string_view json, Builder& b) {
  const std::size_t start = json.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos)
    throw Error(fmt::format("the trace is empty ({} bytes); {}", json.size(), kExpected));
  const char first = json[start];
  if (first != '{' && first != '[')
    throw Error(fmt::format("the trace is not a JSON object or array (it starts with '{}'); {}",
                            first, kExpected));
  bool saw_events = false;
  try {
    od::parser parser;
    od::document doc = parser.iterate(json);
    const od::json_type type = doc.type();
    if (type == od::json_type::array) {
      b.read_events(doc.get_array());
      saw_events = true;
    } else if (type == od::json_type::object) {
      for (auto field : doc.get_object()) {
        const std::string_view key = field.unescaped_key();
        if (key == "traceEvents") {
          od::array events;
          if (other_type(field.value().get_array().get(events)))
            throw Error(fmt::format("traceEvents is not an array; {}", kExpected));
          b.read_events(events);
          saw_events = true;
        } else if (key == "otherData") {
          od::object other;
          if (!other_type(field.value().get_object().get(other))) b.read_other(other);
        } else if (key == "baseTimeNanoseconds") {
          // Newer Kineto writes ts relative to this (the host's clock at the start, in ns).
          std::string_view raw;
          if (!simdjson::to_json_string(field.value()).get(raw))
            b.m.info.extra["base_time_ns"] = std::string(raw);
        } else if (key == "distributedInfo") {
          od::object dist;
          if (!other_type(field.value().get_object().get(dist))) read_distributed_info(dist, b.m);
        }
      }
    } else {
      throw Error(fmt::format("the trace is not a JSON object or array; {}", kExpected));
    }
  } catch (const simdjson::simdjson_error& e) {
    throw Error(fmt::format(
        "the trace is not valid JSON ({}); it may be truncated or not a trace at all; {}", e.what(),
        kExpected));
  }
  if (!saw_events) throw Error(fmt::format("the trace has no traceEvents array; {}", kExpected));
  if (b.m.info.schema_version > kTraceSchemaVersion)
    throw Error(
        fmt::format("trace schema version {} is newer than this viewer reads ({}); update distlab",
                    b.m.info.schema_version, kTraceSchemaVersion));
}

// A gzipped file inflated into simdjson's padded buffer, sized from the gzip trailer (one copy
// more when that length is wrong: several members, or past 4 GiB).
simdjson::padded_string read_gzip_file(const std::string& path) {
  simdjson::padded_string text;
  std::size_t used = 0;
  std::string spill;
  const std::size_t total = gunzip_file(
      path, [&](std::size_t n) { text = simdjson::padded_string(n); },
      [&](const char* d, std::size_t n) {
        const std::size_t fit = used < text.size() ? std::min(n, text.size() - used) : 0;
        std::memcpy(text.data() + used, d, fit);
        used += fit;
        if (fit < n) spill.append(d + fit, n - fit);
      });
  if (total == text.size()) return text;
  std::string whole(text.data(), used);
  whole += spill;
  return simdjson::padded_string(whole);
}

// Reads and finishes one text (or file): a distlab or Chrome trace, or one rank's file.
TraceModel finish_model(Builder& b) {
  if (b.one_rank) b.name_rank_lanes();
  b.finish();
  if (!b.one_rank) index_steps(b.m);
  return std::move(b.m);
}

TraceModel parse_with(std::string_view json, bool one_rank) {
  Builder b;
  b.one_rank = one_rank;
  read_trace(simdjson::padded_string(json), b);  // the padded copy is gone before finish()
  return finish_model(b);
}

// Memory (target: a peak of at most 3x the file): the file is read once, straight into simdjson's
// padded buffer, and that buffer and the parser's structural index (4 bytes per JSON token,
// about as large as the file again) are freed before finish() builds messages and sorts.
// A gzipped file (tensorboard_trace_handler(use_gzip=True): *.pt.trace.json.gz) is inflated
// into that buffer instead.
TraceModel load_with(const std::string& path, bool one_rank) {
  Builder b;
  b.one_rank = one_rank;
  {
    simdjson::padded_string text;
    if (is_gzip_file(path))
      text = read_gzip_file(path);
    else if (simdjson::padded_string::load(path).get(text) != simdjson::SUCCESS)
      throw Error(fmt::format("cannot open trace {}: no such file, or not readable", path));
    try {
      read_trace(text, b);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", path, e.what()));
    }
  }
  return finish_model(b);
}

// The first bytes of a file, for looks_like_pytorch (of a gzipped file, the first inflated).
std::string file_head(const std::string& path) {
  if (is_gzip_file(path)) return gzip_file_head(path, 64 * 1024);
  std::ifstream in(path, std::ios::binary);
  std::string head(64 * 1024, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(std::max<std::streamsize>(0, in.gcount())));
  return head;
}

}  // namespace

bool looks_like_pytorch(std::string_view head) {
  if (head.find("\"distlab-trace\"") != std::string_view::npos) return false;
  for (std::string_view mark : {"\"CPU functions\"", "\"distributedInfo\"", "\"deviceProperties\"",
                                "\"ProfilerStep#", "\"record_param_comms\"", "\"cpu_op\"",
                                "\"gloo:", "\"c10d::", "\"ncclDevKernel_", "\"ncclKernel_"})
    if (head.find(mark) != std::string_view::npos) return true;
  return false;
}

std::string file_head_text(const std::string& path) {
  return file_head(path);
}

bool file_looks_like_pytorch(const std::string& path) {
  return looks_like_pytorch(file_head(path));
}

TraceModel parse_trace_model(std::string_view json) {
  if (is_gzip(json)) {
    const std::string text = gunzip(json);
    return parse_trace_model(text);
  }
  if (looks_like_pytorch(json.substr(0, 64 * 1024))) return parse_trace_set({json}, {"trace"});
  return parse_with(json, false);
}

TraceModel parse_rank_file(std::string_view json) {
  if (is_gzip(json)) {
    const std::string text = gunzip(json);
    return parse_with(text, true);
  }
  return parse_with(json, true);
}

TraceModel load_rank_file(const std::string& path) {
  return load_with(path, true);
}

TraceModel load_trace_model(const std::string& path) {
  if (file_looks_like_pytorch(path)) return load_trace_set({path});
  return load_with(path, false);
}

}  // namespace distlab::viewer
