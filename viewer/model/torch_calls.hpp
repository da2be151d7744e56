// torch_calls.hpp — one rank's collective calls in a PyTorch profiler trace, as the CPU issued
// them and as the GPU (or gloo) ran them: the first half of pytorch_trace.hpp's matching.
//
//   the CPU side   on each CPU thread, the outermost span that is a collective op: c10d's
//                  (c10d::allreduce_, c10d::_allgather_base_, c10d::alltoall_base_,
//                  c10d::send, ...), else the backend's annotation (nccl:all_reduce), else a
//                  record_param_comms whose comms args name a collective. The spans inside it
//                  add what they record: record_param_comms' comms args or Concrete Inputs,
//                  the annotation's Input Dims and Input type, the launches of its kernels
//   the device     the NCCL kernel the call launched (Kineto's "correlation" joins a launch to
//                  its kernel; a trace without it pairs a rank's kernels and calls of each
//                  collective in order), or the gloo span that ran it (gloo:all_reduce, in
//                  order per collective); kernels and gloo spans no call claims are calls of
//                  their own (a GPU-only trace), point-to-point kernels excepted
//   sizes          in this order, each call saying where its size came from:
//                    1. comms args ("In msg nelems" / "Out msg nelems" x "dtype": PyTorch 2.x)
//                    2. shapes: the elements of the op's input (or output) tensors in its
//                       Input Dims, or record_param_comms', x the element size of a dtype in
//                       an Input type (the annotation's "c10::Half"; a reducing kernel's name,
//                       ..._Sum_f16_..., when no Input type names one)
//                  S as nccl-tests counts it: the buffer (all-reduce, broadcast, reduce,
//                  all-to-all, send/recv), the output (all-gather), the input (reduce-scatter)
//   group          "Process Group Name"; else record_param_comms' process group (its pointer or
//                  name in Concrete Inputs, one per group within a rank) keyed by its size and
//                  order of appearance; else the default group. Its size from "Group size",
//                  "Process Group Ranks" or record_param_comms' world size. A group of one rank
//                  is that rank's alone
//   record_param_comms' Concrete Inputs, by position, as PyTorch's ParamCommsUtils.hpp lays
//   them out (RECORD_PARAM_COMMS_DATA; the form without tensors drops position 0):
//     8: tensors, seq, pg pointer, rank, collective, in splits, out splits, world size (<= 2.1)
//    10: tensors, seq, (pg name, desc), rank, collective, in splits, out splits, global rank
//        start, stride, world size (2.2-2.3)
//    11: as 10, then whether the op is asynchronous (2.4 on)
//   "rank" there is a send's destination or a recv's source within the group
//   phase          from the spans around the CPU side, innermost first: backward
//                  ("autograd::engine::evaluate_function: ...", "...Backward0", "## backward
//                  ##", FSDP's post-backward), optimizer ("Optimizer.step#...",
//                  "Optimizer.zero_grad#..."), forward ("## forward ##",
//                  "DistributedDataParallel.forward", Megatron's "..._Region" and
//                  "_VocabParallelCrossEntropy" autograd Functions), else "other"; the step
//                  from the ProfilerStep#N span of any of the rank's threads around it
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

using StringIds = std::unordered_map<std::string, std::uint32_t>;
// The run's string table index of `s`, added when new; `ids` indexes the table.
std::uint32_t intern(TraceModel& run, StringIds& ids, std::string_view s);

struct TorchCall {
  std::int32_t cpu = -1;     // the CPU side's span; -1 for a kernel or gloo span alone
  std::int32_t device = -1;  // the kernel or gloo span that ran it; -1 when none in the window
  std::uint32_t name = 0;    // canonical collective: "all-reduce", "send", "recv", ...
  std::uint32_t group = 0;   // the group's key (the run's string table), 0 = default
  int group_size = -1;
  std::uint32_t group_size_from = 0;
  std::vector<int> group_ranks;  // the group's global ranks, when the trace lists them
  std::int64_t bytes = -1;
  std::uint32_t size_from = 0;
  std::int64_t seq = -1;
  int peer = -1;             // a send's destination or a recv's source, as a global rank
  std::uint32_t splits = 0;  // an all-to-all's split sizes, as the trace gives them
  std::uint32_t phase = 0;
  int step = -1;
  double start_time = 0, end_time = 0;  // the timed span's, on the rank's own clock
  std::int32_t timed() const { return device >= 0 ? device : cpu; }
};

struct RankTorchCalls {
  std::vector<TorchCall> calls;  // by start of the timed span
  bool has_kernels = false;      // the rank's window holds NCCL kernels
  bool has_cpu_calls = false;
  double window_begin = 0, window_end = 0;  // the rank's first and last span
};

RankTorchCalls find_torch_calls(TraceModel& m, int rank, StringIds& ids);

// A lane of a GPU (Kineto names them "stream 7", under a process "GPU 0"), or one that runs
// NCCL's kernels.
bool is_gpu_lane(const TraceModel& m, const Lane& lane);
bool is_nccl_kernel(std::string_view name);
// send, recv, send-recv (and PyTorch's spellings of them).
bool is_point_to_point(std::string_view collective);
// Element bytes of a kernel name's dtype (..._Sum_f16_..., ..._Sum_float, ...), 0 when none.
int kernel_dtype_bytes(std::string_view kernel);

}  // namespace distlab::viewer
