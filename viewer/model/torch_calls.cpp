// torch_calls.cpp — one rank's collective calls in a PyTorch profiler trace (torch_calls.hpp).
//
// Sections:
//   1. names: ops, kernels, dtypes, phases
//   2. the CPU side: calls found on each thread, and what the spans inside them record
//   3. sizes, groups and peers
//   4. the device side: kernels and gloo spans joined to their calls
#include "viewer/model/torch_calls.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "viewer/model/pytorch_trace.hpp"

namespace distlab::viewer {

std::uint32_t intern(TraceModel& run, StringIds& ids, std::string_view s) {
  if (s.empty()) return 0;
  auto [it, fresh] =
      ids.try_emplace(std::string(s), static_cast<std::uint32_t>(run.strings.size()));
  if (fresh) run.strings.emplace_back(s);
  return it->second;
}

// ---- 1. names -------------------------------------------------------------------------------

bool is_nccl_kernel(std::string_view name) {
  return name.starts_with("ncclDevKernel_") || name.starts_with("ncclKernel_");
}

bool is_gpu_lane(const TraceModel& m, const Lane& lane) {
  if (lane.name.find("stream") != std::string::npos || lane.name.find("GPU") != std::string::npos)
    return true;
  for (std::uint32_t i = lane.span_begin; i < lane.span_end; ++i)
    if (is_nccl_kernel(m.str(m.spans[i].name))) return true;
  return false;
}

bool is_point_to_point(std::string_view c) {
  return c == "send" || c == "recv" || c == "sendrecv" || c == "send-recv" || c == "recvanysource";
}

int kernel_dtype_bytes(std::string_view kernel) {
  kernel = kernel.substr(0, kernel.find('('));
  // NCCL's names: ncclDevKernel_AllReduce_Sum_f16_RING_LL (2.19 on), and
  // ncclKernel_AllReduce_RING_LL_Sum_float (before): the dtype is one '_'-separated word.
  static const std::map<std::string_view, int> sizes = {
      {"i8", 1},     {"u8", 1},     {"int8_t", 1},        {"uint8_t", 1},
      {"i32", 4},    {"u32", 4},    {"int32_t", 4},       {"uint32_t", 4},
      {"i64", 8},    {"u64", 8},    {"int64_t", 8},       {"uint64_t", 8},
      {"f16", 2},    {"half", 2},   {"bf16", 2},          {"__nv_bfloat16", 2},
      {"f32", 4},    {"float", 4},  {"f64", 8},           {"double", 8},
      {"f8e4m3", 1}, {"f8e5m2", 1}, {"__nv_fp8_e4m3", 1}, {"__nv_fp8_e5m2", 1}};
  std::size_t pos = 0;
  while (pos < kernel.size()) {
    std::size_t end = kernel.find('_', pos);
    if (end == std::string_view::npos) end = kernel.size();
    // "__nv_bfloat16" holds '_' itself: try the rest of the name first.
    for (std::string_view word : {kernel.substr(pos), kernel.substr(pos, end - pos)}) {
      auto it = sizes.find(word);
      if (it != sizes.end()) return it->second;
    }
    pos = end + 1;
  }
  return 0;
}

namespace {

std::string lowered(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A kernel's collective from its name: ncclDevKernel_AllReduce_Sum_f32_RING_LL -> all-reduce,
// ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t and ncclDevKernel_SendRecv -> sendrecv.
std::string kernel_collective(std::string_view name) {
  std::string_view rest = name.substr(name.find('_') + 1);
  rest = rest.substr(0, rest.find_first_of("_("));
  return canonical_collective(rest);
}

// The phase a span's name marks (torch_calls.hpp "phase"), or "" when it marks none.
const char* phase_of(std::string_view name) {
  const std::string n = lowered(name);
  if (n.find("optimizer") != std::string::npos) return "optimizer";
  if (n.find("backward") != std::string::npos || n.starts_with("autograd::engine::evaluate"))
    return "backward";
  if (n.find("forward") != std::string::npos) return "forward";
  // Megatron's autograd Functions run their forward under their class name
  // (_ReduceFromModelParallelRegion); their backward is "...Backward", caught above.
  if (name.starts_with("_") && (name.ends_with("Region") || name.ends_with("CrossEntropy")))
    return "forward";
  return "";
}

// Whether an Input type names a tensor's dtype (not "TensorList", "Scalar", "" ...).
bool is_dtype(std::string_view t) {
  return dtype_bytes(t) > 0;
}

std::optional<std::int64_t> to_int(std::string_view text) {
  const std::string t(text);
  char* end = nullptr;
  const long long v = std::strtoll(t.c_str(), &end, 10);
  if (t.empty() || end == t.c_str() || *end) return std::nullopt;
  return v;
}

// "[0, 1, 2]" -> {0, 1, 2}; empty for anything else.
std::vector<int> int_list(std::string_view text) {
  std::vector<int> out;
  std::string cur;
  for (char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-') {
      cur += c;
    } else if (!cur.empty()) {
      if (auto v = to_int(cur)) out.push_back(static_cast<int>(*v));
      cur.clear();
    }
  }
  if (!cur.empty())
    if (auto v = to_int(cur)) out.push_back(static_cast<int>(*v));
  return out;
}

// ---- 2. the CPU side ------------------------------------------------------------------------

// What the spans of one call record, before sizes and groups are worked out (section 3).
struct Gathered {
  std::string op;                   // c10d's op without "c10d::" and underscores: "allgatherbase"
  std::string collective;           // canonical
  const SpanArgs* comms = nullptr;  // record_param_comms' (or a kernel's) comms args
  const TorchArgs* comms_torch = nullptr;   // and the rest of them
  const TorchArgs* op_inputs = nullptr;     // the c10d op's
  const TorchArgs* param_inputs = nullptr;  // record_param_comms'
  const TorchArgs* annotation = nullptr;    // nccl:... / gloo:...'s
  std::string annotation_name;
  std::vector<std::int64_t> launches;  // correlations of the launches inside
};

// Positions of a c10d op's output and input tensors (Ops.cpp's schemas): -1 none.
std::pair<int, int> op_positions(const std::string& op) {
  if (op == "barrier") return {-1, -1};
  if (op == "allreduce" || op == "allreducecoalesced" || op == "broadcast" || op == "reduce" ||
      op == "send" || op == "recv" || op == "recvanysource")
    return {-1, 0};
  return {0, 1};  // allgather*, reducescatter*, alltoall*, gather, scatter
}

std::string squeeze(std::string_view s) {
  std::string out;
  for (char c : lowered(s))
    if (c != '_') out += c;
  return out;
}

bool root_candidate(const TraceModel& m, const Span& s, std::string& collective) {
  const std::string_view name = m.str(s.name);
  if (name.starts_with("c10d::")) {
    collective = canonical_collective(name.substr(6));
    return collective.find('-') != std::string::npos || collective == "broadcast" ||
           collective == "reduce" || collective == "barrier" || collective == "gather" ||
           collective == "scatter" || is_point_to_point(collective);
  }
  if (name.starts_with("nccl:")) {
    collective = canonical_collective(name.substr(5));
    return !collective.empty();
  }
  if (name == "record_param_comms") {
    const SpanArgs* a = m.args(s);
    const std::string_view c = a ? m.str(a->collective) : std::string_view{};
    collective = canonical_collective(c);
    return !collective.empty() && collective != "wait";
  }
  return false;
}

void gather(const TraceModel& m, const Span& s, Gathered& g) {
  const std::string_view name = m.str(s.name);
  const SpanArgs* a = m.args(s);
  const TorchArgs* in = m.torch(s);
  if (name.starts_with("c10d::")) {
    if (g.op.empty()) g.op = squeeze(name.substr(6)), g.op_inputs = in;
  } else if (name == "record_param_comms") {
    if (a && (a->in_elems >= 0 || a->out_elems >= 0 || a->collective) && !g.comms)
      g.comms = a, g.comms_torch = in;
    if (in && !g.param_inputs) g.param_inputs = in;
  } else if (name.starts_with("nccl:") || name.starts_with("gloo:")) {
    if (!g.annotation) g.annotation = in, g.annotation_name = std::string(name);
  }
  if (in && in->correlation >= 0 && !is_nccl_kernel(name)) g.launches.push_back(in->correlation);
}

// ---- 3. sizes, groups and peers ------------------------------------------------------------

// record_param_comms' Concrete Inputs by position (torch_calls.hpp); nullopt for another layout.
struct ParamPositions {
  int seq, pg, rank, in_split, out_split, world, start = -1, stride = -1;
};
std::optional<ParamPositions> param_positions(const TraceModel& m, const TorchArgs& in) {
  const bool tensors =
      !in.elems.empty() && in.elems[0] >= 0 && !in.types.empty() &&
      (m.str(in.types[0]).find("Tensor") != std::string_view::npos || is_dtype(m.str(in.types[0])));
  const int o = tensors ? 1 : 0, k = static_cast<int>(in.concrete.size()) - o;
  if (k == 7) return ParamPositions{o, o + 1, o + 2, o + 4, o + 5, o + 6};
  if (k == 9 || k == 10) return ParamPositions{o, o + 1, o + 2, o + 4, o + 5, o + 8, o + 6, o + 7};
  return std::nullopt;
}

// S from elements and an element size, nccl-tests' way (torch_calls.hpp "sizes").
std::int64_t nccl_tests_bytes(const std::string& collective, std::int64_t in, std::int64_t out,
                              int element, int group_size) {
  auto times = [](std::int64_t x, std::int64_t y) -> std::int64_t {
    std::int64_t p = 0;
    return x < 0 || y < 0 || __builtin_mul_overflow(x, y, &p) ? -1 : p;
  };
  if (element <= 0) return -1;
  std::int64_t elems = in >= 0 ? in : out;
  if (collective == "all-gather")
    elems = out >= 0 ? out : group_size > 0 ? times(in, group_size) : -1;
  else if (collective == "reduce-scatter" && in < 0)
    elems = group_size > 0 ? times(out, group_size) : -1;
  return times(elems, element);
}

struct GroupKeys {  // a rank's record_param_comms process groups, numbered per size
  std::map<std::string, int> ordinal;
  std::map<int, int> next;
};

void resolve(TraceModel& m, StringIds& ids, int rank, const Gathered& g, const Span* kernel,
             GroupKeys& keys, TorchCall& call) {
  const std::string collective(m.str(call.name));
  // The group: comms args, else record_param_comms' Concrete Inputs.
  const SpanArgs* comms = g.comms;
  const TorchArgs* more = g.comms_torch;
  const SpanArgs* kargs = kernel ? m.args(*kernel) : nullptr;
  if (!comms && kargs && (kargs->in_elems >= 0 || kargs->out_elems >= 0))
    comms = kargs, more = m.torch(*kernel);
  static const TorchArgs none;
  if (!more) more = &none;
  std::optional<ParamPositions> pos;
  if (g.param_inputs) pos = param_positions(m, *g.param_inputs);
  const std::vector<std::string>* concrete = g.param_inputs ? &g.param_inputs->concrete : nullptr;
  auto concrete_at = [&](int i) -> std::string_view {
    return concrete && i >= 0 && i < static_cast<int>(concrete->size())
               ? std::string_view((*concrete)[static_cast<std::size_t>(i)])
               : std::string_view{};
  };
  int peer_in_group = -1;
  if (comms) {
    call.group = comms->group;
    if (comms->group_size > 0)
      call.group_size = comms->group_size, call.group_size_from = intern(m, ids, "Group size");
    call.group_ranks = int_list(m.str(more->group_ranks));
    if (call.group_size <= 0 && !call.group_ranks.empty())
      call.group_size = static_cast<int>(call.group_ranks.size()),
      call.group_size_from = intern(m, ids, "Process Group Ranks");
    call.seq = more->seq;
    if (comms->peer >= 0) call.peer = comms->peer;  // Src / Dst Rank: global already
    auto given = [&](std::uint32_t id) { return id && m.str(id) != "[]"; };
    if (given(more->in_split) || given(more->out_split))
      call.splits = intern(
          m, ids, fmt::format("in {} out {}", m.str(more->in_split), m.str(more->out_split)));
  }
  if (pos) {
    if (call.seq < 0) call.seq = to_int(concrete_at(pos->seq)).value_or(-1);
    const int world = static_cast<int>(to_int(concrete_at(pos->world)).value_or(-1));
    if (call.group_size <= 0 && world > 0)
      call.group_size = world, call.group_size_from = intern(m, ids, "record_param_comms");
    if (call.group == 0) {
      const std::string pg(concrete_at(pos->pg));
      if (!pg.empty() && call.group_size > 0) {
        auto [it, fresh] = keys.ordinal.try_emplace(pg, 0);
        if (fresh) it->second = keys.next[call.group_size]++;
        call.group =
            intern(m, ids,
                   call.group_size == 1 ? fmt::format("1-rank #{} of rank {}", it->second, rank)
                                        : fmt::format("{}-rank #{}", call.group_size, it->second));
      }
    }
    if (is_point_to_point(collective))  // the c10d op's own dst / src argument comes first
      peer_in_group = static_cast<int>(to_int(concrete_at(pos->rank)).value_or(-1));
    const std::int64_t start = to_int(concrete_at(pos->start)).value_or(-1),
                       stride = to_int(concrete_at(pos->stride)).value_or(-1);
    if (call.group_ranks.empty() && start >= 0 && stride > 0 && world > 0)
      for (int i = 0; i < world; ++i)
        call.group_ranks.push_back(static_cast<int>(start + i * stride));
    const std::string_view in = concrete_at(pos->in_split), out = concrete_at(pos->out_split);
    if (!call.splits && ((!in.empty() && in != "[]") || (!out.empty() && out != "[]")))
      call.splits = intern(m, ids, fmt::format("in {} out {}", in, out));
  }
  // A c10d op's own Concrete Inputs: a send's destination and a recv's source (in the group),
  // an all-to-all's split sizes.
  if (g.op_inputs) {
    const auto& c = g.op_inputs->concrete;
    if (is_point_to_point(collective) && c.size() > 2 && to_int(c[2]))
      peer_in_group = static_cast<int>(*to_int(c[2]));
    if (g.op == "alltoallbase" && c.size() > 4 && !call.splits && (c[3] != "[]" || c[4] != "[]") &&
        !c[3].empty())
      call.splits = intern(m, ids, fmt::format("in {} out {}", c[4], c[3]));
  }
  if (call.peer < 0 && peer_in_group >= 0)
    call.peer = peer_in_group < static_cast<int>(call.group_ranks.size())
                    ? call.group_ranks[static_cast<std::size_t>(peer_in_group)]
                    : peer_in_group;

  // Sizes: 1. comms args.
  if (comms && (comms->in_elems >= 0 || comms->out_elems >= 0)) {
    call.bytes = nccl_tests_bytes(collective, comms->in_elems, comms->out_elems,
                                  dtype_bytes(m.str(comms->dtype)), call.group_size);
    if (call.bytes >= 0) call.size_from = intern(m, ids, "comms args");
  }
  if (call.bytes >= 0) return;
  // 2. shapes: elements from the op's (or record_param_comms') Input Dims, the element size
  // from a dtype an Input type names.
  std::int64_t in = -1, out = -1;
  int element = 0;
  std::string from;
  if (g.op_inputs) {
    const auto [o, i] = op_positions(g.op);
    const TorchArgs& x = *g.op_inputs;
    // A position's elements when it holds a tensor: its Input type a dtype or a TensorList.
    auto elems_at = [&](int p) -> std::int64_t {
      if (p < 0 || p >= static_cast<int>(x.elems.size())) return -1;
      if (p < static_cast<int>(x.types.size())) {
        const std::string_view t = m.str(x.types[static_cast<std::size_t>(p)]);
        if (!is_dtype(t) && t.find("Tensor") == std::string_view::npos) return -1;
      }
      return x.elems[static_cast<std::size_t>(p)];
    };
    in = elems_at(i), out = elems_at(o);
    for (int p : {i, o})
      if (p >= 0 && p < static_cast<int>(x.types.size()) && !element)
        element = dtype_bytes(m.str(x.types[static_cast<std::size_t>(p)]));
    if (in >= 0 || out >= 0) from = fmt::format("c10d::{}", g.op);
  }
  if (in < 0 && out < 0 && g.param_inputs && !g.param_inputs->elems.empty() &&
      g.param_inputs->elems[0] >= 0) {
    in = g.param_inputs->elems[0];
    from = "record_param_comms";
  }
  if (g.annotation) {
    std::int64_t sum = 0;
    int first = 0;
    bool any = false;
    for (std::size_t p = 0; p < g.annotation->elems.size() && p < g.annotation->types.size(); ++p)
      if (g.annotation->elems[p] >= 0 && is_dtype(m.str(g.annotation->types[p]))) {
        sum += g.annotation->elems[p], any = true;
        if (!first) first = dtype_bytes(m.str(g.annotation->types[p]));
      }
    if (!element && first) element = first;
    if (in < 0 && out < 0 && any)
      in = sum, from = g.annotation_name;
    else if (any && !from.empty() && from != g.annotation_name)
      from += " and " + g.annotation_name;
  }
  // A reducing kernel's name holds the dtype (a copying one's is int8_t: bytes).
  if (!element && kernel &&
      (collective == "all-reduce" || collective == "reduce-scatter" || collective == "reduce"))
    element = kernel_dtype_bytes(m.str(kernel->name));
  if (collective == "barrier") return;
  call.bytes = nccl_tests_bytes(collective, in, out, element, call.group_size);
  if (call.bytes >= 0) call.size_from = intern(m, ids, fmt::format("shapes of {}", from));
}

}  // namespace

// ---- 4. find_torch_calls -----------------------------------------------------------------------

RankTorchCalls find_torch_calls(TraceModel& m, int rank, StringIds& ids) {
  RankTorchCalls out;
  const Rank& r = m.ranks[static_cast<std::size_t>(rank)];
  struct StepSpan {
    double start, end;
    int step;
  };
  std::vector<StepSpan> steps;
  struct Device {
    std::int32_t span;
    std::string collective;
    std::int64_t correlation;
    bool claimed = false;
  };
  std::vector<Device> kernels, gloo;
  std::vector<TorchCall> calls;
  std::vector<Gathered> gathered;
  bool first = true;
  for (std::uint32_t l : r.lanes) {
    const Lane& lane = m.lanes[l];
    for (std::uint32_t i = lane.span_begin; i < lane.span_end; ++i) {
      const Span& s = m.spans[i];
      if (first) out.window_begin = s.start, out.window_end = s.end(), first = false;
      out.window_begin = std::min(out.window_begin, s.start);
      out.window_end = std::max(out.window_end, s.end());
      const std::string_view name = m.str(s.name);
      if (name.starts_with("ProfilerStep#"))
        steps.push_back({s.start, s.end(), static_cast<int>(to_int(name.substr(13)).value_or(-1))});
      const SpanArgs* a = m.args(s);
      if (is_nccl_kernel(name)) {
        const std::string_view c = a ? m.str(a->collective) : std::string_view{};
        kernels.push_back({static_cast<std::int32_t>(i),
                           c.empty() ? kernel_collective(name) : canonical_collective(c),
                           m.torch(s) ? m.torch(s)->correlation : -1});
      } else if (name.starts_with("gloo:")) {
        gloo.push_back({static_cast<std::int32_t>(i), canonical_collective(name.substr(5)), -1});
      }
    }
    if (is_gpu_lane(m, lane)) continue;
    // The CPU side: the outermost collective op, and every span inside it.
    std::vector<std::uint32_t> open;  // the spans around the current one, outermost first
    bool in_call = false;             // the lane's last call is still open
    double call_end = -1;
    for (std::uint32_t i = lane.span_begin; i < lane.span_end; ++i) {
      const Span& s = m.spans[i];
      while (!open.empty() && m.spans[open.back()].end() <= s.start) open.pop_back();
      if (in_call && call_end > s.start) {
        gather(m, s, gathered.back());
      } else {
        in_call = false;
        std::string collective;
        if (root_candidate(m, s, collective)) {
          TorchCall c;
          c.cpu = static_cast<std::int32_t>(i);
          c.name = intern(m, ids, collective);
          const char* phase = "";
          for (auto it = open.rbegin(); it != open.rend() && !*phase; ++it)
            phase = phase_of(m.str(m.spans[*it].name));
          c.phase = intern(m, ids, *phase ? phase : "other");
          calls.push_back(c);
          gathered.emplace_back();
          gathered.back().collective = collective;
          gather(m, s, gathered.back());
          call_end = s.end();
          in_call = true;
        }
      }
      open.push_back(i);
    }
  }
  std::sort(steps.begin(), steps.end(),
            [](const StepSpan& a, const StepSpan& b) { return a.start < b.start; });
  out.has_kernels = !kernels.empty();
  out.has_cpu_calls = !calls.empty();

  // The device side: by correlation, else in order per collective.
  std::unordered_map<std::int64_t, std::size_t> by_correlation;
  for (std::size_t k = 0; k < kernels.size(); ++k)
    if (kernels[k].correlation >= 0) by_correlation.emplace(kernels[k].correlation, k);
  bool correlated = false;  // some call found its kernel by correlation
  for (std::size_t c = 0; c < calls.size(); ++c)
    for (std::int64_t corr : gathered[c].launches) {
      auto it = by_correlation.find(corr);
      if (it == by_correlation.end() || kernels[it->second].claimed) continue;
      kernels[it->second].claimed = true;
      calls[c].device = kernels[it->second].span;
      correlated = true;
      break;
    }
  auto kind = [](const std::string& c) {  // the kernels' name for a CPU call's collective
    return is_point_to_point(c) || c == "all-to-all" ? std::string("send-recv") : c;
  };
  auto pair_in_order = [&](std::vector<Device>& devices) {
    std::map<std::string, std::size_t> next;  // per collective, the next unclaimed device
    for (std::size_t c = 0; c < calls.size(); ++c) {
      if (calls[c].device >= 0) continue;
      const std::string want = kind(gathered[c].collective);
      std::size_t& k = next[want];
      while (k < devices.size() && (devices[k].claimed || kind(devices[k].collective) != want)) ++k;
      if (k < devices.size()) devices[k].claimed = true, calls[c].device = devices[k++].span;
    }
  };
  // A trace with correlations joins by them alone: a kernel none claims was launched by a
  // call outside the window.
  if (!correlated) pair_in_order(kernels);
  pair_in_order(gloo);
  // Devices no call claims are calls of their own (point-to-point kernels excepted).
  for (auto* devices : {&kernels, &gloo})
    for (const Device& d : *devices) {
      if (d.claimed || is_point_to_point(d.collective) || d.collective.empty()) continue;
      TorchCall c;
      c.device = d.span;
      c.name = intern(m, ids, d.collective);
      c.phase = intern(m, ids, "other");
      calls.push_back(c);
      gathered.emplace_back();
      gathered.back().collective = d.collective;
    }

  GroupKeys keys;
  for (std::size_t c = 0; c < calls.size(); ++c) {
    TorchCall& call = calls[c];
    const Span* kernel =
        call.device >= 0 &&
                is_nccl_kernel(m.str(m.spans[static_cast<std::size_t>(call.device)].name))
            ? &m.spans[static_cast<std::size_t>(call.device)]
            : nullptr;
    resolve(m, ids, rank, gathered[c], kernel, keys, call);
    const Span& t = m.spans[static_cast<std::size_t>(call.timed())];
    call.start_time = t.start, call.end_time = t.end();
    // The ProfilerStep# span around it: the last to start at or before it (steps do not nest).
    const double at = call.cpu >= 0 ? m.spans[static_cast<std::size_t>(call.cpu)].start : t.start;
    auto it = std::upper_bound(steps.begin(), steps.end(), at,
                               [](double v, const StepSpan& st) { return v < st.start; });
    if (it != steps.begin() && at < std::prev(it)->end) call.step = std::prev(it)->step;
  }
  std::vector<std::size_t> order(calls.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return calls[x].start_time < calls[y].start_time;
  });
  for (std::size_t i : order) out.calls.push_back(std::move(calls[i]));
  return out;
}

}  // namespace distlab::viewer
