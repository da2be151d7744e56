// pytorch_trace.hpp — a real training run: PyTorch profiler (Kineto) traces, one file per rank,
// loaded as one run whose collectives are matched across ranks and whose clocks are aligned.
//
//   ranks        one per file (parse_rank_file: the file's threads and GPU streams are its
//                lanes); numbered by each file's distributedInfo.rank when every file has one
//                and they are 0 .. n-1 once each, else by the order given (info.rank_origin)
//   collectives  per rank, the spans that are collectives, from the first source its file has:
//                  1. NCCL's kernels on a GPU stream (ncclDevKernel_*, ncclKernel_*): the
//                     collective as the GPU ran it
//                  2. gloo's worker spans (gloo:all_reduce, ...): as gloo ran it, on the CPU
//                  3. record_param_comms (PyTorch 2.x): the call on the CPU, launch included
//                  4. c10d's ops (c10d::allreduce_, ...): the call as the Python thread made it
//                point-to-point sends and receives stay plain spans
//   matching     per process group ("Process Group Name", else the default group), the k-th
//                call on each rank is one CollectiveCall: PyTorch requires every rank to issue
//                a group's collectives in the same order (one that does not hangs), so order
//                is identity. names_agree is false where the k-th calls differ: where a hang
//                would start
//   sizes        "In msg nelems" / "Out msg nelems" and "dtype" of the span, else of the rank's
//                record_param_comms of the same group and order; S as nccl-tests counts it: the
//                buffer (all-reduce, broadcast, reduce, all-to-all), the output (all-gather), the
//                input (reduce-scatter). No args: S unknown, and no bandwidth is shown
//   clocks       each file has its own clock. A collective ends on every rank at nearly the same
//                moment (its last data reaches all ranks together), so rank r's offset is the
//                median over its calls matched with rank 0's of (end on rank 0 - end on r), and
//                info.clock_error_us is the widest spread of a matched call's aligned ends: each
//                offset is within it of the truth, except for a skew common to every call (a
//                rank that always finishes a few microseconds late looks like a clock offset)
//   steps        one per matched call, at its earliest aligned start: the steps clock replays
//                the job collective by collective
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "viewer/model/trace_model.hpp"

namespace distlab::viewer {

// Several files that are one run, one rank each. `names` label the ranks (file names); throws
// distlab::Error naming the file that did not load.
TraceModel parse_trace_set(const std::vector<std::string_view>& texts,
                           const std::vector<std::string>& names);
// Each path a file, or a folder of .json and .json.gz files (trace_files); a file may be
// gzipped.
TraceModel load_trace_set(const std::vector<std::string>& paths);
// The files a path names: itself, or a folder's .json and .json.gz files in natural order
// (rank2 before rank10); throws when a folder holds none. A folder of several runs' files
// (some rank's distributedInfo in more than one) gives the last file of each rank by name
// (Kineto's names end in the time they were written), and `note` says which it took.
std::vector<std::string> trace_files(const std::string& path, std::string* note = nullptr);

// What a command line's trace paths open, one entry per document: a distlab (or other Chrome)
// trace alone; PyTorch profiler traces given one after another together, as one run; a folder
// of PyTorch traces as one run (its path), else each of its files alone.
std::vector<std::vector<std::string>> group_trace_args(const std::vector<std::string>& paths);

// "all-reduce", "all-gather", ... for the names PyTorch, gloo and NCCL give a collective
// ("allreduce", "_allgather_base", "all_gather_into_tensor", "AllReduce", "reduce_scatter_tensor",
// "alltoall_base"); others lower case without decoration ("barrier", "send", "sendrecv").
std::string canonical_collective(std::string_view name);
// Bytes per element of PyTorch's dtype names ("Float", "BFloat16", "c10::Half", ...); 0 unknown.
int dtype_bytes(std::string_view dtype);

}  // namespace distlab::viewer
