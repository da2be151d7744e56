#!/usr/bin/env python3
"""Write traces/torch/pt2-comms/: a small synthetic 4-rank trace in PyTorch 2.x's Kineto format.

Not recorded from a PyTorch 2.x run: the events are laid out here, deterministically, using the
field names PyTorch and Kineto write (torch/csrc/profiler/util.h's collective metadata on the
record_param_comms CPU op, copied by Kineto onto the NCCL kernel; the top-level schemaVersion,
distributedInfo, deviceProperties, baseTimeNanoseconds). The point is a sample whose answers are
known: each rank's clock offset, which rank arrives late where, and every collective's bus
bandwidth (kernel durations are chosen so that algbw and busbw come out exact).

Timeline: 4 ranks, one GPU each on four hosts, 3 training steps of 10 ms. Each step: two
forward GEMMs, a backward with two GEMMs, then on the NCCL stream an all-reduce (Float), an
all-reduce (BFloat16), an all-gather (BFloat16) and a reduce-scatter (Float), then an optimizer
kernel; the first step starts with a broadcast (BFloat16). In step 1 rank 2's second backward
GEMM runs LATE_US longer, so rank 2 reaches that step's Float all-reduce LATE_US after the
others, who wait for it inside their NCCL kernel.

Usage: scripts/make_torch2_sample.py [--out DIR]   (default traces/torch/pt2-comms)
Standard library only.
"""

import argparse
import json
import os

WORLD = 4
STEPS = 3
FIRST_STEP = 10  # the steps are ProfilerStep#10..#12
STEP_US = 10_000
LATE_RANK, LATE_STEP, LATE_US = 2, 1, 3_000

# Clocks. True time t (µs) is 0 at the first step's start, which is the instant E0 (epoch ns).
# Rank R's host clock reads true time + R * CLOCK_OFFSET_NS. Kineto writes ts = (clock -
# baseTimeNanoseconds) / 1000; real Kineto floors baseTimeNanoseconds to a trimonth boundary (the
# same on every rank), here rank R's base is R * BASE_STEP_NS later, so that the raw ts fields and
# the absolute times (base + ts) give different offsets, both documented.
BASE0_NS = 1_727_743_122_000_000_000  # 1727743122 s: a multiple of 7889238 s, as Kineto floors
E0_NS = BASE0_NS + 5_506_678_123_456_789  # 2024-12-03 18:16:40.123456789 UTC
CLOCK_OFFSET_NS = 1_234_567_000  # 1234.567 ms per rank
BASE_STEP_NS = 1_000_000_000  # 1 s per rank

DTYPE_BYTES = {"Float": 4, "BFloat16": 2}
NCCL_TYPE = {"Float": "f32", "BFloat16": "bf16"}
N = 1_048_576  # 2^20 elements

# The collectives: (collective name as record_param_comms gives it, c10d op, NCCL kernel name
# part, dtype, In msg nelems, Out msg nelems, kernel µs when no rank is late).
ALLREDUCE_F32 = ("allreduce", "c10d::allreduce_", "AllReduce_Sum_{t}", "Float", N, N, 128)
ALLREDUCE_BF16 = (
    "allreduce", "c10d::allreduce_", "AllReduce_Sum_{t}", "BFloat16", 2 * N, 2 * N, 64)
ALLGATHER_BF16 = (
    "_allgather_base", "c10d::_allgather_base_", "AllGather", "BFloat16", N, 4 * N, 256)
REDUCE_SCATTER_F32 = (
    "_reduce_scatter_base", "c10d::_reduce_scatter_base_", "ReduceScatter_Sum_{t}", "Float",
    4 * N, N, 512)
BROADCAST_BF16 = ("broadcast", "c10d::broadcast_", "Broadcast", "BFloat16", N, N, 64)
STEP_COLLECTIVES = [ALLREDUCE_F32, ALLREDUCE_BF16, ALLGATHER_BF16, REDUCE_SCATTER_F32]

COMPUTE_STREAM, NCCL_STREAM = 7, 13
GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1_"
        "execute_segment_k_off_kernel__5x_cublas")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "at::detail::Array<char*, 3>)")


def bus_factor(coll: str, n: int) -> float:
    """nccl-tests' busbw / algbw."""
    return {"allreduce": 2 * (n - 1) / n, "_allgather_base": (n - 1) / n,
            "_reduce_scatter_base": (n - 1) / n, "broadcast": 1.0}[coll]


def message_bytes(spec) -> int:
    """nccl-tests' S: the buffer (all-reduce, broadcast), the output (all-gather), the input
    (reduce-scatter)."""
    coll, _, _, dtype, n_in, n_out, _ = spec
    return (n_out if coll == "_allgather_base" else n_in) * DTYPE_BYTES[dtype]


def fmt_us(ns: int) -> str:
    """A time in µs as Kineto writes it: whole µs, a point, 3 digits of ns."""
    return f"{ns // 1000}.{ns % 1000:03d}"


class Rank:
    """Builds one rank's events; times are given in true µs and written in the rank's clock."""

    def __init__(self, rank: int):
        self.rank = rank
        self.pid = 41_000 + rank  # the rank's OS process; its main thread has tid == pid
        self.base_ns = BASE0_NS + rank * BASE_STEP_NS
        self.events = []
        self.ext_id = 0  # Kineto's "External id": links a CPU op to its launches and kernels
        self.corr = 1000  # CUDA correlation id: links a launch to its kernel
        self.seq = 0  # the process group's collective sequence number

    def ts_ns(self, true_us: float) -> int:
        clock_ns = E0_NS + round(true_us * 1000) + self.rank * CLOCK_OFFSET_NS
        return clock_ns - self.base_ns

    def event(self, ph, cat, name, pid, tid, t_us, dur_us=None, args=None, extra=None):
        e = {"ph": ph, "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": self.ts_ns(t_us)}
        if dur_us is not None:
            e["dur"] = round(dur_us * 1000)
        e.update(extra or {})
        if args is not None:
            e["args"] = args
        self.events.append(e)

    def cpu_op(self, name, t_us, dur_us, cat="cpu_op", more=None):
        self.ext_id += 1
        args = {"External id": self.ext_id, "Record function id": 0, "Ev Idx": self.ext_id - 1}
        args.update(more or {})
        self.event("X", cat, name, self.pid, self.pid, t_us, dur_us, args)
        return self.ext_id

    def launch(self, ext, t_us, gpu_t_us, gpu_dur_us, kernel, stream, kargs, driver=False):
        """A launch on the CPU, its kernel on the GPU, and Kineto's ac2g flow between them."""
        self.corr += 1
        name, cat, cbid = ("cuLaunchKernelEx", "cuda_driver", 307) if driver else (
            "cudaLaunchKernel", "cuda_runtime", 211)
        self.event("X", cat, name, self.pid, self.pid, t_us, 8,
                   {"External id": ext, "cbid": cbid, "correlation": self.corr})
        args = {"External id": ext, "queued": 0, "device": 0, "context": 1, "stream": stream,
                "correlation": self.corr}
        args.update(kargs)
        self.event("X", "kernel", kernel, 0, stream, gpu_t_us, gpu_dur_us, args)
        flow = {"id": self.corr}
        self.event("s", "ac2g", "ac2g", self.pid, self.pid, t_us, extra=flow)
        self.event("f", "ac2g", "ac2g", 0, stream, gpu_t_us, extra=dict(flow, bp="e"))

    def gemm(self, name, t_us, gpu_t_us, gpu_dur_us):
        ext = self.cpu_op(name, t_us, 40, more={
            "Input Dims": [[4096, 4096], [4096, 4096]],
            "Input type": ["c10::BFloat16", "c10::BFloat16"]})
        self.launch(ext, t_us + 20, gpu_t_us, gpu_dur_us, GEMM, COMPUTE_STREAM, {
            "registers per thread": 168, "shared memory": 213504, "blocks per SM": 1.0,
            "warps per SM": 12.0, "grid": [132, 1, 1], "block": [384, 1, 1],
            "est. achieved occupancy %": 19})

    def collective(self, spec, t_us, gpu_t_us, gpu_dur_us):
        """c10d::<op> > record_param_comms > cuLaunchKernelEx, and the NCCL kernel."""
        coll, op, kname, dtype, n_in, n_out, _ = spec
        self.seq += 1
        meta = {  # what util.h's saveNcclMeta records, in its spelling and JSON types
            "Collective name": coll, "dtype": dtype,
            "In msg nelems": n_in, "Out msg nelems": n_out,
            "In split size": "[]", "Out split size": "[]",
            "Global rank start": 0, "Global rank stride": 1, "Group size": WORLD,
            "Process Group Name": "0", "Process Group Description": "default_pg",
            "Process Group Ranks": "[0, 1, 2, 3]", "Rank": self.rank, "Seq": self.seq,
        }
        self.cpu_op(op, t_us, 60)
        ext = self.cpu_op("record_param_comms", t_us + 5, 50, more=meta)
        kernel = f"ncclDevKernel_{kname.format(t=NCCL_TYPE[dtype])}_RING_LL" \
                 "(ncclDevKernelArgsStorage<4096ul>)"
        # Kineto copies the collective's metadata onto the kernel (output_json.cpp), less the
        # sequence number and global rank fields.
        kmeta = {k: v for k, v in meta.items()
                 if k not in ("Seq", "Global rank start", "Global rank stride")}
        self.launch(ext, t_us + 30, gpu_t_us, gpu_dur_us, kernel, NCCL_STREAM, dict({
            "registers per thread": 96, "shared memory": 0, "blocks per SM": 0.03,
            "warps per SM": 0.5, "grid": [4, 1, 1], "block": [512, 1, 1],
            "est. achieved occupancy %": 0}, **kmeta), driver=True)

    def step(self, k: int):
        t0 = k * STEP_US
        late_step = k == LATE_STEP
        self.cpu_op(f"ProfilerStep#{FIRST_STEP + k}", t0, STEP_US - 100, cat="user_annotation")
        if k == 0:
            self.collective(BROADCAST_BF16, t0 + 20, t0 + 60, BROADCAST_BF16[6])
        # forward
        self.gemm("aten::mm", t0 + 100, t0 + 200, 1000)
        self.gemm("aten::mm", t0 + 200, t0 + 1200, 1000)
        # backward: ends on the GPU at t0 + 3200, but for rank 2 in the late step LATE_US later
        self.cpu_op("autograd::engine::evaluate_function: MmBackward0", t0 + 400, 300)
        self.cpu_op("MmBackward0", t0 + 410, 280)
        self.gemm("aten::mm", t0 + 420, t0 + 2200, 500)
        slow = LATE_US if late_step and self.rank == LATE_RANK else 0
        self.gemm("aten::mm", t0 + 500, t0 + 2700, 500 + slow)
        # The collectives, launched early by the CPU, run one after the other on the NCCL stream
        # from t0 + 3300 with 100 µs gaps. In the late step the first one starts on time on ranks
        # 0, 1 and 3 but ends only when rank 2 has joined and the transfer is done: LATE_US + its
        # time after the on-time start; on rank 2 it lasts its time. All later work is LATE_US late.
        gpu_t = t0 + 3300
        for i, spec in enumerate(STEP_COLLECTIVES):
            dur = spec[6]
            if late_step and i == 0:
                start, end = gpu_t + slow, gpu_t + LATE_US + dur
            else:
                start, end = gpu_t, gpu_t + dur
            self.collective(spec, t0 + 800 + 100 * i, start, end - start)
            gpu_t = end + 100
        # optimizer: one elementwise kernel on the compute stream, after the collectives
        ext = self.cpu_op("aten::add_", t0 + 5000, 30)
        self.launch(ext, t0 + 5010, max(t0 + 5000, gpu_t), 200, ADD, COMPUTE_STREAM, {
            "registers per thread": 32, "shared memory": 0, "blocks per SM": 6.2,
            "warps per SM": 24.8, "grid": [816, 1, 1], "block": [128, 1, 1],
            "est. achieved occupancy %": 39})

    def build(self) -> list:
        """The rank's events: Kineto's metadata and span events, then the steps."""
        end = STEPS * STEP_US
        for pid, tid, kind, args in [
            (self.pid, 0, "process_name", {"name": "python3"}),
            (self.pid, 0, "process_labels", {"labels": "CPU"}),
            (self.pid, self.pid, "thread_name", {"name": f"thread {self.pid} (python3)"}),
            (0, 0, "process_name", {"name": "python3"}),
            (0, 0, "process_labels", {"labels": "GPU 0"}),
            (0, COMPUTE_STREAM, "thread_name", {"name": f"stream {COMPUTE_STREAM}"}),
            (0, NCCL_STREAM, "thread_name", {"name": f"stream {NCCL_STREAM}"}),
        ]:
            self.event("M", None, kind, pid, tid, 0, args=args)
        self.event("X", "Trace", "PyTorch Profiler (0)", "Spans", "PyTorch Profiler", 0, end,
                   {"Op count": 0})
        self.event("i", None, "Iteration Start: PyTorch Profiler", "Traces",
                   "Trace PyTorch Profiler", 0, extra={"s": "g"})
        for k in range(STEPS):
            self.step(k)
        self.event("i", None, "Record Window End", "", "", end, extra={"s": "g"})
        return self.events


def event_text(e: dict) -> str:
    """One event laid out as Kineto writes it (ts and dur with 3 decimals of ns)."""
    head = [f'"ph": "{e["ph"]}"']
    if e.get("cat"):
        head.append(f'"cat": "{e["cat"]}"')
    head += [f'"name": {json.dumps(e["name"])}', f'"pid": {json.dumps(e["pid"])}',
             f'"tid": {json.dumps(e["tid"])}']
    times = [f'"ts": {fmt_us(e["ts"])}']
    if "dur" in e:
        times.append(f'"dur": {fmt_us(e["dur"])}')
    for key in ("s", "id", "bp"):
        if key in e:
            times.append(f'"{key}": {json.dumps(e[key])}')
    lines = ["  {", "    " + ", ".join(head) + ",", "    " + ", ".join(times)]
    if "args" in e:
        lines[-1] += ","
        lines.append("    \"args\": " + json.dumps(e["args"]))
    return "\n".join(lines) + "\n  }"


def trace_text(rank: int) -> str:
    r = Rank(rank)
    events = r.build()
    top = [
        ("schemaVersion", 1),
        ("distributedInfo", {
            "backend": "nccl", "rank": rank, "world_size": WORLD, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                           "pg_size": WORLD, "ranks": list(range(WORLD))}],
            "nccl_version": "2.21.5"}),
        ("deviceProperties", [{
            "id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592,
            "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
            "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
            "sharedMemPerMultiprocessor": 233472, "numSms": 132,
            "sharedMemPerBlockOptin": 232448}]),
    ]
    out = ["{"] + [f'  "{k}": {json.dumps(v)},' for k, v in top]
    out.append('  "traceEvents": [')
    out.append(",\n".join(event_text(e) for e in events))
    out.append("  ],")
    out.append(f'  "traceName": "rank{rank}.json",')
    out.append('  "displayTimeUnit": "ms",')
    out.append(f'  "baseTimeNanoseconds": {r.base_ns}')
    out.append("}")
    return "\n".join(out) + "\n"


def readme_text() -> str:
    rows = []
    order = [(0, BROADCAST_BF16)] + [(k, c) for k in range(STEPS) for c in STEP_COLLECTIVES]
    for seq, (k, spec) in enumerate(order, start=1):
        coll, _, _, dtype, n_in, n_out, dur = spec
        size = message_bytes(spec)
        algbw = size / (dur * 1e-6) / 1e9
        busbw = algbw * bus_factor(coll, WORLD)
        rows.append(f"  {seq:>3}  #{FIRST_STEP + k}  {coll:<20} {dtype:<8} "
                    f"{n_in:>9} {n_out:>9} {size:>10} {dur:>5}  {algbw:>7.3f} {busbw:>7.3f}")
    table = "\n".join(rows)
    offsets = "\n".join(
        f"  rank {r}: baseTimeNanoseconds {BASE0_NS + r * BASE_STEP_NS}, clock "
        f"+{r * CLOCK_OFFSET_NS / 1e6:.3f} ms, ts +{r * (CLOCK_OFFSET_NS - BASE_STEP_NS) / 1e6:.3f} ms"
        for r in range(WORLD))
    clock_ms = CLOCK_OFFSET_NS / 1e6
    ts_ms = (CLOCK_OFFSET_NS - BASE_STEP_NS) / 1e6
    late_seq = 1 + LATE_STEP * len(STEP_COLLECTIVES) + 1  # the broadcast is Seq 1
    late_step = FIRST_STEP + LATE_STEP
    t_ar = ALLREDUCE_F32[6]
    t_wait = t_ar + LATE_US
    on_time = ", ".join(str(r) for r in range(WORLD) if r != LATE_RANK)
    naive = message_bytes(ALLREDUCE_F32) / (t_wait * 1e-6) / 1e9
    naive_bus = naive * bus_factor("allreduce", WORLD)
    last = FIRST_STEP + STEPS - 1
    return f"""pt2-comms: a SYNTHETIC 4-rank trace in PyTorch 2.x's Kineto format

Made by scripts/make_torch2_sample.py (deterministic, standard library only). NOT recorded
from a PyTorch 2.x run: written from the field names in PyTorch's and Kineto's source
(torch/csrc/profiler/util.h's collective metadata, Kineto's output_json.cpp), so that a reader
has a sample with known answers. The ddp* folders beside it are real (PyTorch 1.13) recordings.

Layout: rank<R>.json, one per rank, each an object: schemaVersion, distributedInfo (backend
nccl, rank, world_size 4, one process group "0" "default_pg" of ranks 0-3, nccl_version),
deviceProperties (one H100), traceEvents, traceName, displayTimeUnit, baseTimeNanoseconds.
Each rank is one process (pid 41000 + R, main thread tid = pid) on its own host with one GPU
(GPU events: pid 0 = the device index, tid = the stream: {COMPUTE_STREAM} compute, {NCCL_STREAM} NCCL).
Per collective: CPU op c10d::<op> (cat cpu_op) > record_param_comms (cat cpu_op; args
"Collective name", "dtype", "In msg nelems", "Out msg nelems", "In split size", "Out split
size", "Global rank start", "Global rank stride", "Group size", "Process Group Name",
"Process Group Description", "Process Group Ranks", "Rank", "Seq") > cuLaunchKernelEx
(cat cuda_driver); then the kernel (cat kernel)
ncclDevKernel_<Coll>[_Sum_<type>]_RING_LL(ncclDevKernelArgsStorage<4096ul>), which carries the
same collective args less Seq and the global rank fields. ac2g flow events join each launch to
its kernel ("correlation"); "External id" joins CPU op, launch and kernel.
Steps ProfilerStep#{FIRST_STEP}..#{last}, {STEP_US} µs apart in true time: forward aten::mm x2, backward
aten::mm x2, then on the NCCL stream allreduce Float, allreduce BFloat16, _allgather_base
BFloat16, _reduce_scatter_base Float, then an aten::add_ kernel; ProfilerStep#{FIRST_STEP} starts with a
broadcast BFloat16. True time 0 = ProfilerStep#{FIRST_STEP}'s start on rank 0 = 2024-12-03
18:16:40.123456789 UTC.

Clocks (absolute time = baseTimeNanoseconds + ts x 1000 ns; true time = rank 0's clock; + is
how far ahead of rank 0's, for the same true instant, the clock and the raw ts fields are):
{offsets}
To align on absolute time, subtract R x {clock_ms:.3f} ms from rank R's; a reader that ignores
baseTimeNanoseconds and uses the ts fields alone must subtract R x {ts_ms:.3f} ms. (Real Kineto
floors baseTimeNanoseconds to the same trimonth boundary on every rank; here the bases differ
on purpose.)

The late rank: in ProfilerStep#{late_step} rank {LATE_RANK}'s second backward aten::mm kernel lasts
{500 + LATE_US} µs instead of 500, so rank {LATE_RANK} reaches that step's Float all-reduce (Seq {late_seq}) {LATE_US} µs
after the others. That NCCL kernel lasts {t_ar} µs on rank {LATE_RANK} and {t_wait} µs on ranks {on_time}, which
start on time and wait; all four end at the same true time. Late means on the GPU: the CPU ops
(c10d::allreduce_, record_param_comms) are launched ahead at the usual times on every rank, as
CUDA lets them. The rest of that step's GPU work is {LATE_US} µs later on every rank. Every other
collective starts and ends at the same true time on all ranks.

Expected bandwidth (nccl-tests: algbw = S / t, S = the buffer for all-reduce and broadcast, the
output for all-gather, the input for reduce-scatter; busbw = algbw x 2(n-1)/n for all-reduce,
(n-1)/n for all-gather and reduce-scatter, 1 for broadcast; n = 4; GB = 1e9 bytes; t = the
kernel's duration; for Seq {late_seq}, the late rank's {t_ar} µs, the time from the last arrival):
  Seq  step collective           dtype    In nelems Out nelems  S bytes   t µs   algbw   busbw (GB/s)
{table}
For Seq {late_seq}, an on-time rank's own kernel duration ({t_wait} µs) would give algbw {naive:.6f} GB/s
and busbw {naive_bus:.6f} GB/s: the wait, not the transfer.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(root, "traces", "torch", "pt2-comms"),
                        help="output folder (traces/torch/pt2-comms)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for rank in range(WORLD):
        with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
            f.write(trace_text(rank))
    with open(os.path.join(args.out, "README.txt"), "w") as f:
        f.write(readme_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
