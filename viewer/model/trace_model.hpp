// trace_model.hpp — a trace loaded for the viewer: plain C++, no ImGui, no GL.
//
// load_trace_model() reads a Chrome Trace Event file with simdjson On-Demand (one forward
// pass, no DOM) into compact structs:
//   ranks    one per pid, in pid order (distlab traces: rank = pid - 1)
//   lanes    one per (pid, tid), named by thread_name metadata
//   spans    X events (and B/E pairs from other tools), sorted per lane by start, outermost
//            first; each lane owns the range [span_begin, span_end) of `spans`
//   messages one per flow id (s -> f), with the send and deliver spans' args
//   accesses one per window access (schema 4: a rank's load from or store to a symmetric
//            window, spans of kind load / store): never a message, no flow
//   steps    the global "step frame" instants, by step
//   memory   per rank, the ledger after each change (one value per category)
//   info     otherData: lesson, world size, buffers, verification, cost model (raw JSON)
// A trace without otherData (from another tool) still loads: its world size is the number of
// distinct pids, its spans are compute spans unless their cat says send/recv/deliver (or window,
// named load or store).
// Malformed, truncated or empty input, or a newer schema, throws distlab::Error with a sentence.
//
// shard_replay.hpp replays the messages into which chunks each rank holds.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/trace/format.hpp"

namespace distlab::viewer {

// load / store: a window access (schema 4), a rank reading from or writing to a symmetric
// window (its own or another rank's) with no message.
enum class SpanKind : std::uint8_t { compute, send, recv, deliver, load, store };
enum class ApplyKind : std::uint8_t { none, copy, reduce };

const char* to_string(SpanKind k);

// Message args of a send, recv or deliver span (docs/trace-format.md), a window access's args
// (window, bytes, step, buffer, chunks); -1 / 0 when absent.
struct SpanArgs {
  std::int32_t peer = -1;    // the other rank
  std::int32_t window = -1;  // a load's or store's window: its owner's rank
  std::int32_t step = -1;
  // A message's chunk range [chunk, chunk_end) of its buffer; on a compute span, the phase arg
  // `chunk`: the model chunk of an interleaved pipeline's stage (chunk c of rank r is virtual
  // stage c P + r).
  std::int32_t chunk = -1, chunk_end = -1;
  std::int32_t contributions = 0;
  std::uint32_t buffer = 0;  // string table index; 0 = "" (none)
  ApplyKind apply = ApplyKind::none;
  std::int64_t bytes = -1;
  std::int64_t tag = -1;
  std::uint64_t contrib_mask = 0;
  std::uint64_t msg = 0;    // message (flow) id, 0 when none
  std::uint32_t group = 0;  // string table index: the group it was sent in ("tp"), 0 = world
  // Phase args of a compute span (schema 3, docs/trace-format.md "Phase args"): what the lesson
  // says the phase is. 0 / -1 when absent.
  std::uint32_t op = 0;     // string table index: "forward", "backward", "update", ...
  std::int32_t micro = -1;  // micro-batch
  std::int32_t stage = -1;  // pipeline stage (the rank's row) the phase runs
  std::uint32_t text = 0;   // string table index: the lesson's caption for the phase
  // A collective's args in a PyTorch profiler trace (PyTorch 2.x's record_param_comms and the
  // kernels Kineto copies them to: "Collective name", "In msg nelems", "Out msg nelems",
  // "dtype", "Group size"; "Process Group Name" is `group`). 0 / -1 when absent.
  std::uint32_t collective = 0;  // string table index
  std::uint32_t dtype = 0;       // string table index: "Float", "BFloat16", ...
  std::int32_t group_size = -1;
  std::int64_t in_elems = -1, out_elems = -1;
  std::int32_t torch = -1;  // PyTorch's other args of a collective or launch: torch_args
};

// The rest of what PyTorch's profiler records of a collective (kept beside SpanArgs, for the
// collective ops, record_param_comms, the nccl:/gloo: annotations, NCCL's kernels and the
// launches only): 0 / -1 / empty when absent.
//   seq, group_ranks, in_split, out_split   newer PyTorch's comms args: "Seq" (the call's
//             number in its group), "Process Group Ranks" ("[0, 1]"), "In split size" and
//             "Out split size" ("[2, 6]"), as text in the string table (a send's "Dst Rank" and
//             a recv's "Src Rank" are SpanArgs::peer)
//   correlation  a kernel's and its launch's "correlation" (Kineto pairs a cudaLaunchKernel
//             with the kernel it launched by it)
//   record_shapes' inputs, one entry per position:
//     elems     the elements of the tensor or tensor list there ("Input Dims": [4, 2048, 4096]
//               is one tensor of 33554432, [[2, 3], [4]] a list of two, summed: 10; [] a 0-d
//               tensor: 1); -1 where the position holds no tensor
//     types     "Input type" (string table): a dtype ("c10::Half", "float"), "TensorList",
//               "Scalar", "ScalarList", or ""
//     concrete  "Concrete Inputs": a scalar's value as text ("337", "[2, 6]"), "" for others
struct TorchArgs {
  std::int64_t seq = -1, correlation = -1;
  std::uint32_t group_ranks = 0, in_split = 0, out_split = 0;
  std::vector<std::int64_t> elems;
  std::vector<std::uint32_t> types;
  std::vector<std::string> concrete;
};

// 32 bytes; the args of message spans live beside, in TraceModel::span_args.
struct Span {
  double start = 0, dur = 0;  // microseconds from the trace's epoch
  std::uint32_t lane = 0;     // index into TraceModel::lanes
  std::uint32_t name = 0;     // index into TraceModel::strings
  std::int32_t args = -1;     // index into TraceModel::span_args, -1 when none
  SpanKind kind = SpanKind::compute;
  double end() const { return start + dur; }
};

struct Rank {
  int pid = 0;
  std::string name;  // process_name ("rank 0 (host)"), or "pid N"
  int sort_index = 0;
  std::vector<std::uint32_t> lanes;  // indices into TraceModel::lanes, by sort index then tid
};

struct Lane {
  int rank = 0;  // index into TraceModel::ranks
  int tid = 0;
  std::string name;  // thread_name ("send 2"), or "tid N"
  int sort_index = 0;
  std::uint32_t span_begin = 0, span_end = 0;  // its spans in TraceModel::spans
  int depth = 0;                               // deepest nesting on this lane (1 = flat)
};

// One message: a flow start paired with its finish, plus the send / deliver spans' args.
struct Message {
  std::uint64_t id = 0;
  int src = -1, dst = -1;   // rank indices
  std::int64_t bytes = -1;  // -1 when the trace does not say
  double send_time = 0;     // flow start (the send was posted)
  double send_end = 0;      // the send span's end (send_time when unknown)
  double arrival = 0;       // end of the deliver span (else the flow finish), >= send_time
  std::int32_t step = -1;
  std::uint32_t buffer = 0;  // string table index, 0 = none
  std::int32_t chunk = -1, chunk_end = -1;
  ApplyKind apply = ApplyKind::none;
  std::int32_t contributions = 0;
  std::uint64_t contrib_mask = 0;
  std::uint32_t group = 0;  // string table index: its group (Comm::split's name), 0 = world
  std::int32_t send_span = -1, deliver_span = -1;  // indices into spans, -1 when absent
};

// One window access (schema 4): a rank's load from or store to a symmetric window, from its span
// (kind load or store). No message: the data moves by the rank's own loads and stores.
struct WindowAccess {
  int rank = -1;   // who loads or stores (index into ranks)
  int owner = -1;  // whose window (index into ranks): may be `rank` itself; -1 when unknown
  bool store = false;
  std::int64_t bytes = -1;  // -1 when the trace does not say
  double start = 0, end = 0;
  std::int32_t step = -1;
  std::uint32_t buffer = 0;  // string table index, 0 = none
  std::int32_t chunk = -1, chunk_end = -1;
  std::int32_t span = -1;  // index into spans
};

struct StepFrame {
  int step = 0;
  double ts = 0;  // earliest start of the step on any rank
};

inline constexpr int kMemoryCategories = distlab::kCategories;  // format.hpp: params, grads, ...
const char* memory_category_name(int k);

struct MemorySample {
  double ts = 0;
  std::array<std::int64_t, kMemoryCategories> bytes{};
  std::int64_t total = 0;
};

// A value a lesson recorded over the run (the trace's "C" events with args.value, one series per
// name and rank: lesson 20's loss scale, a training lesson's loss), by time.
struct ValueSample {
  double ts = 0, value = 0;
};
struct ValueSeries {
  std::string name;
  int rank = 0;
  std::vector<ValueSample> samples;
};

struct BufferInfo {
  std::string name;
  std::uint64_t length = 0;
  int chunks = 1;
};

struct FailedCheck {
  int rank = -1;
  std::string name, detail;
};

// otherData; empty strings and zeros for a trace from another tool.
struct TraceMeta {
  bool distlab = false;  // otherData.schema == "distlab-trace"
  int schema_version = 0;
  std::string lesson, title, algorithm, mode, device, transport;
  int world_size = 0;  // from otherData, else the number of distinct pids
  // Ranks per node (otherData.ranks_per_node: World::ranks_per_node, --ranks-per-node or the
  // simulated platform's); 0 when the trace does not say.
  int ranks_per_node = 0;
  bool has_verification = false, verified = false;
  std::int64_t checks = 0;
  std::vector<FailedCheck> failed;
  std::vector<BufferInfo> buffers;
  std::int64_t steps = 0, messages = 0;
  double wall_seconds = 0;
  std::string parameters_json = "{}";
  std::string cost_model_json = "null";  // raw JSON text of otherData.cost_model
  // Schema 2: the lesson's own words (otherData.text) and its memory formula
  // (otherData.memory_formula: the expected ledger total per rank and its label).
  std::string concept_text, look_at;
  std::string memory_formula;
  // otherData.value_tracks: the recorded values the Timeline draws as tracks (Lesson::
  // set_value_tracks; lesson 20's loss scale).
  std::vector<std::string> value_tracks;
  std::vector<double> memory_expected_bytes;  // per rank; empty when the lesson gives none
  // Every other otherData field, as its raw JSON text by key (a lesson's own metadata:
  // "roles", "splits", "zero", "alpha_s", ...). A panel that needs one parses it.
  std::map<std::string, std::string, std::less<>> extra;
  // A run loaded from several files, one per rank (load_trace_set: PyTorch profiler traces):
  // each rank's file, how ranks were assigned ("distributedInfo" when every file names its
  // rank, else "file order"), and the clock alignment (real_run.hpp, align_clocks): the offset
  // added to each rank's times, in microseconds, and the worst disagreement left between the
  // ends of a matched collective, which bounds each offset's error. Empty for one distlab trace.
  std::string source;  // "pytorch" for profiler traces, else ""
  std::vector<std::string> rank_files;
  std::string rank_origin;
  std::string files_note;  // a folder of several runs' files: which it took, and why
  std::vector<double> clock_offset_us;
  double clock_error_us = -1;  // -1: the clocks were not aligned (no collective in common)
  // extra[key], or "" when the trace has no such field.
  std::string_view extra_json(std::string_view key) const {
    auto it = extra.find(key);
    return it == extra.end() ? std::string_view{} : std::string_view(it->second);
  }
};

// Why a rank has no span in a matched call (pytorch_trace.hpp "matching").
enum class Absence : std::uint8_t {
  present,         // it has one
  not_member,      // it is not in the call's group (or not the pair of a send/recv)
  outside_window,  // the call lies before the start or after the end of the rank's trace
  dropped,         // the rank called the group's later collectives: this one is missing from
                   // its trace (a sampled window), not a hang
  not_called,      // the rank's trace runs on past the call and it never called it nor any
                   // later collective of the group: where a hang would start
};
const char* to_string(Absence a);

// One collective of a real run, matched across the ranks of its group (pytorch_trace.hpp).
struct CollectiveCall {
  std::uint32_t name = 0;   // string table index: "all-reduce", "all-to-all", "send-recv", ...
  std::uint32_t group = 0;  // string table index: its process group, 0 = the default one
  int index = 0;            // its order within the group, from 0
  // Per rank (index into ranks): the call's timed span (its NCCL kernel or gloo span when the
  // window has one, else its CPU side), -1 when the rank has none; its CPU side (the c10d op,
  // record_param_comms or nccl: annotation), -1 when none; and why a span is missing.
  std::vector<std::int32_t> spans, cpu_spans;
  std::vector<Absence> absent;
  std::int64_t bytes = -1;      // S, nccl-tests' message size; -1 when the trace gives no sizes
  std::uint32_t size_from = 0;  // string table index: where S came from ("comms args",
                                // "shapes of nccl:all_reduce"); 0 when unknown
  int group_size = 0;           // the group's ranks (from the args, else those that called it)
  std::uint32_t group_size_from = 0;  // string table index: "Group size", "Process Group
                                      // Ranks", "record_param_comms" or 0 (the ranks present)
  int present = 0;                    // ranks with a span
  std::int64_t seq = -1;              // PyTorch's sequence number in its group; -1 when none
  std::uint32_t splits = 0;           // string table index: an all-to-all's split sizes, as given
  std::uint32_t phase = 0;  // string table index: "forward", "backward", "optimizer", "other"
  int profiler_step = -1;   // N of the ProfilerStep#N it ran in; -1 when none
  int no_kernel = 0;        // ranks whose call has no kernel in the window (kept from the CPU)
  int missing(Absence why) const;  // ranks absent for that reason
};

struct TraceModel {
  TraceMeta info;
  std::vector<std::string> strings{""};  // string table; index 0 is ""
  std::vector<Rank> ranks;
  std::vector<Lane> lanes;
  std::vector<Span> spans;
  std::vector<SpanArgs> span_args;
  std::vector<TorchArgs> torch_args;              // SpanArgs::torch indexes it
  std::vector<Message> messages;                  // by send time
  std::vector<WindowAccess> accesses;             // by start
  std::vector<StepFrame> steps;                   // by step
  std::vector<std::vector<MemorySample>> memory;  // per rank, by time
  std::vector<ValueSeries> values;                // by name, then rank
  double t_begin = 0, t_end = 0;                  // extent of all events, microseconds
  // The steps clock (playback.hpp), filled by index_steps(): the distinct step ids of messages,
  // window accesses and frames in order (ids need not be contiguous), and the time of each beat:
  // beat k - 1 is the start of step step_ids[k - 1], the last beat is t_end (step_ids.size() + 1
  // entries).
  std::vector<int> step_ids;
  std::vector<double> beat_times;
  // Where the spans are (also by index_steps): setup before the first span and the report after
  // the last carry only counters, so playback runs over [active_begin, active_end].
  double active_begin = 0, active_end = 0;
  // Per rank, the end of its last span (also by index_steps; empty for a model nobody indexed):
  // what the ledger records after it is the rank's teardown, which ranks reach at different
  // times, so the Memory panel shows each rank no later than this (memory_at).
  std::vector<double> rank_end;
  std::size_t events = 0;  // events read
  // A real run's collectives (load_trace_set), by the start of their earliest call.
  std::vector<CollectiveCall> collectives;

  int world_size() const { return static_cast<int>(ranks.size()); }
  std::string_view str(std::uint32_t i) const {
    return i < strings.size() ? strings[i] : std::string_view{};
  }
  int rank_of_pid(int pid) const;  // -1 when no rank has that pid
  int max_step() const;  // the last step any message, window access or frame names, 0 when none
  const SpanArgs* args(const Span& s) const { return s.args >= 0 ? &span_args[s.args] : nullptr; }
  const TorchArgs* torch(const Span& s) const {
    const SpanArgs* a = args(s);
    return a && a->torch >= 0 ? &torch_args[static_cast<std::size_t>(a->torch)] : nullptr;
  }
};

// Fills step_ids and beat_times from messages, window accesses, steps and the extent (the loader
// calls it; a model built by hand calls it after filling those).
void index_steps(TraceModel& model);

// Throws distlab::Error: "<what was wrong>; <what a trace should look like>".
// A PyTorch profiler trace (looks_like_pytorch) loads as a run of one rank (pytorch_trace.hpp).
TraceModel parse_trace_model(std::string_view json);
TraceModel load_trace_model(const std::string& path);

// Whether a trace's first bytes are a PyTorch profiler (Kineto) trace's and not distlab's
// (pytorch_trace.hpp loads those: one file per rank, collectives matched, clocks aligned).
bool looks_like_pytorch(std::string_view head);
bool file_looks_like_pytorch(const std::string& path);  // its first 64 KiB do
// A file's first 64 KiB (inflated when it is gzipped).
std::string file_head_text(const std::string& path);

// One rank's file of a run traced one file per rank: every process and thread in it becomes a
// lane of a single rank (pid 1; string pids such as PyTorch's "CPU functions" included), flow
// arrows, instants and counters are left out (they link a rank's CPU to its own GPU), and
// distributedInfo's rank, world size and backend go to info.extra ("rank", "world_size",
// "backend"). pytorch_trace.hpp merges such ranks into one run.
TraceModel parse_rank_file(std::string_view json);
TraceModel load_rank_file(const std::string& path);

}  // namespace distlab::viewer
