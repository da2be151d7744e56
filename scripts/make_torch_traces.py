#!/usr/bin/env python3
"""Record PyTorch profiler traces of small DistributedDataParallel jobs.

Each run starts N processes on one machine (gloo backend, loopback only), trains a small MLP
with DDP under torch.profiler, and has every rank export its own Chrome trace:

    <out>/<run>/rank<R>.json

Runs:
    ddp2       2 ranks
    ddp4       4 ranks
    ddp4-slow  4 ranks; rank 3 sleeps SLOW_SLEEP_S inside record_function("slow_rank_sleep")
               before each forward, so the other ranks wait for it in the gradient all-reduces

The traces are written by prof.export_chrome_trace and not changed afterwards. Where PyTorch is
built without Kineto (Debian's 1.13 is), that call falls back to the autograd profiler's own
writer: a bare JSON array of "X" events, pid "CPU functions", args {}. The program then
reads them back, prints one summary line per run and exits non-zero if a check fails (fewer than
MIN_ALLREDUCES_PER_STEP gloo all-reduces in a profiled step, a file of 1 MB or more, or rank 3
not having the shortest all-reduces in ddp4-slow). Run it with the system Python (Debian's
python3-torch): scripts/make-torch-traces.sh does.
"""

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

# The model: 64 -> 512 -> 512 -> 512 -> 8, about 2.2 MB of float32 gradients.
LAYER_SIZES = [64, 512, 512, 512, 8]
BATCH = 32  # samples per rank per step
# DDP's gradient bucket cap. Its first bucket is capped at 1 MB whatever this says
# (dist._DEFAULT_FIRST_BUCKET_BYTES), and buckets are rebuilt after the first iteration in the
# order the gradients became ready; with 0.25 MB every 512x512 weight (1 MB) closes a bucket of
# its own, so each step issues several all-reduces.
BUCKET_CAP_MB = 0.25
# Profiler schedule: 1 step skipped, 1 warm-up step (traced but discarded), 4 recorded steps.
WAIT, WARMUP, ACTIVE = 1, 1, 4
STEPS = WAIT + WARMUP + ACTIVE
SLOW_RANK = 3
SLOW_SLEEP_S = 0.06
MIN_ALLREDUCES_PER_STEP = 3
LAST_STEP_GRACE_S = 0.05
MAX_FILE_BYTES = 1_000_000

RUNS = {  # name: (world size, slow rank or None)
    "ddp2": (2, None),
    "ddp4": (4, None),
    "ddp4-slow": (4, SLOW_RANK),
}


def make_model() -> nn.Sequential:
    layers = []
    for i, (n_in, n_out) in enumerate(zip(LAYER_SIZES, LAYER_SIZES[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(LAYER_SIZES) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def worker(rank: int, world: int, port: int, run_dir: str, slow_rank) -> None:
    """One rank: join the group, train STEPS steps under the profiler, export rank<R>.json."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)  # several ranks share a few cores
    dist.init_process_group("gloo", rank=rank, world_size=world)

    torch.manual_seed(0)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    model = DDP(make_model(), bucket_cap_mb=BUCKET_CAP_MB)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()

    schedule = torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
    path = os.path.join(run_dir, f"rank{rank}.json")
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=lambda prof: prof.export_chrome_trace(path),
    ) as prof:
        for step in range(STEPS):
            # Rank 0 picks the step's data seed and broadcasts it: one broadcast per step. Every
            # rank gets here together (the last step ended with an all_gather), so no rank waits.
            seed = torch.tensor([1000 + step], dtype=torch.int64)
            dist.broadcast(seed, src=0)
            gen = torch.Generator().manual_seed(int(seed) * world + rank)  # the rank's shard
            x = torch.randn(BATCH, LAYER_SIZES[0], generator=gen)
            y = torch.randn(BATCH, LAYER_SIZES[-1], generator=gen)
            if rank == slow_rank:
                # The straggler: the others reach the gradient all-reduces first and wait there.
                with torch.profiler.record_function("slow_rank_sleep"):
                    time.sleep(SLOW_SLEEP_S)
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP all-reduces the gradient buckets while backward runs
            opt.step()
            # Gather every rank's loss for logging: one all_gather per step.
            losses = [torch.zeros(1) for _ in range(world)]
            dist.all_gather(losses, loss.detach().reshape(1))
            if step == STEPS - 1:
                # A gloo worker thread ends its gloo:* event just after it wakes the main thread;
                # give the last ones time to end, or the profiler stops first and drops them.
                time.sleep(LAST_STEP_GRACE_S)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_events(path: str) -> list:
    """The trace's events, whether the file is a bare array or an object with traceEvents."""
    with open(path) as f:
        data = json.load(f)
    return data if isinstance(data, list) else data.get("traceEvents", [])


def summarize(name: str, run_dir: str, world: int, slow_rank) -> tuple:
    """Print the run's summary line; return it and the list of failed checks."""
    failures = []
    medians, totals, parts = [], [], []
    for rank in range(world):
        path = os.path.join(run_dir, f"rank{rank}.json")
        size = os.path.getsize(path)
        if size >= MAX_FILE_BYTES:
            failures.append(f"{path} is {size} bytes (limit {MAX_FILE_BYTES})")
        events = [e for e in load_events(path) if e.get("ph") == "X"]
        steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
        allreduces = [e for e in events if e.get("name") == "gloo:all_reduce"]
        # All-reduces per profiled step: those that start inside the step's span.
        per_step = [
            sum(1 for a in allreduces if s["ts"] <= a["ts"] < s["ts"] + s["dur"]) for s in steps
        ]
        if len(steps) != ACTIVE:
            failures.append(f"{name} rank {rank}: {len(steps)} ProfilerStep events, not {ACTIVE}")
        if not per_step or min(per_step) < MIN_ALLREDUCES_PER_STEP:
            failures.append(
                f"{name} rank {rank}: all-reduces per step {per_step}, "
                f"fewer than {MIN_ALLREDUCES_PER_STEP}"
            )
        others = {n: sum(1 for e in events if e.get("name") == f"gloo:{n}")
                  for n in ("broadcast", "all_gather")}
        durs = [a["dur"] for a in allreduces]
        medians.append(statistics.median(durs) if durs else 0.0)
        totals.append(sum(durs))
        parts.append(
            f"r{rank}: {len(events)} events, {len(allreduces)} all-reduces "
            f"({'/'.join(map(str, per_step))} per step), median {medians[-1]:.0f} us, "
            f"total {totals[-1] / 1000:.1f} ms, {others['broadcast']} broadcasts, "
            f"{others['all_gather']} all-gathers, {size // 1024} KiB"
        )
    line = f"{name}: " + "; ".join(parts)
    print(line)
    if slow_rank is not None:
        others = [m for r, m in enumerate(medians) if r != slow_rank]
        if not medians[slow_rank] < min(others):
            failures.append(
                f"{name}: rank {slow_rank}'s median all-reduce ({medians[slow_rank]:.0f} us) "
                f"is not the shortest ({', '.join(f'{m:.0f}' for m in medians)} us)"
            )
    return line, failures


def write_readme(out: str, command: str, summary: list) -> None:
    kineto = torch.autograd.kineto_available()
    writer = (
        "Kineto's writer (an object with traceEvents)"
        if kineto
        else "the autograd profiler's own writer: this PyTorch has no Kineto\n"
        "          (torch.autograd.kineto_available() is False), so each file is a bare JSON\n"
        "          array of 'X' events with pid \"CPU functions\", tid a small per-thread\n"
        "          number (here 1 the main thread, the others gloo's worker threads), args {}, ts and\n"
        "          dur in whole microseconds, ts counted from when that rank's profiler began\n"
        "          recording (so the ranks' offsets are the gaps between those instants)"
    )
    text = f"""PyTorch profiler traces of small DistributedDataParallel runs

Made by:  {command}
Date:     {datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
PyTorch:  {torch.__version__} (CPU build, gloo backend)
Python:   {platform.python_version()}
Host:     one machine with {os.cpu_count()} CPU cores (shared with other work while these were
          made, so durations are noisy), MASTER_ADDR=127.0.0.1, one process per rank
          (torch.set_num_threads(1))

Model:    MLP {' -> '.join(map(str, LAYER_SIZES))} (Linear + ReLU), float32, MSE loss, SGD lr 0.01,
          batch {BATCH} random samples per rank per step
DDP:      bucket_cap_mb={BUCKET_CAP_MB} (the first bucket is capped at 1 MB by DDP itself), so
          each step issues several gradient all-reduces (gloo:all_reduce); before the forward
          rank 0 broadcasts the step's data seed (gloo:broadcast), after the optimizer step
          every rank all_gathers the ranks' losses (gloo:all_gather)
Profiler: torch.profiler.profile(activities=[CPU]),
          schedule(wait={WAIT}, warmup={WARMUP}, active={ACTIVE}): {STEPS} steps run,
          the last {ACTIVE} recorded. PyTorch 1.13 names each step after the one before it, so
          they appear as ProfilerStep#{WAIT + WARMUP - 1}..#{STEPS - 2}. Before the profiler stops,
          the last step sleeps {LAST_STEP_GRACE_S * 1000:.0f} ms after its all_gather, so that the
          gloo worker threads end their last events first (else the profiler drops them)

Runs:
  ddp2/       2 ranks
  ddp4/       4 ranks
  ddp4-slow/  4 ranks; rank {SLOW_RANK} sleeps {SLOW_SLEEP_S * 1000:.0f} ms inside
              record_function("slow_rank_sleep") before each forward, so ranks 0-2 wait for it
              in the gradient all-reduces (their gloo:all_reduce events are the long ones)

Each rank writes its own file, rank<R>.json, with prof.export_chrome_trace, timed by its own
process's clock; the files are as the profiler wrote them. Here the ranks share one host's
clock, but nothing in the files says so: a reader must align them as if they did not.
Format:   {writer}

Summary when made (per rank: 'X' events; gloo:all_reduce events, how many fall in each
recorded step, their median and total duration; gloo:broadcast and gloo:all_gather events;
file size):
""" + "\n".join(summary) + "\n"
    with open(os.path.join(out, "README.txt"), "w") as f:
        f.write(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="traces/torch", help="output folder (traces/torch)")
    parser.add_argument("--command", default=None, help="the command to record in README.txt")
    args = parser.parse_args()

    failures, summary = [], []
    for name, (world, slow_rank) in RUNS.items():
        run_dir = os.path.join(args.out, name)
        os.makedirs(run_dir, exist_ok=True)
        for old in os.listdir(run_dir):
            if old.startswith("rank") and old.endswith(".json"):
                os.remove(os.path.join(run_dir, old))
        mp.spawn(worker, args=(world, free_port(), run_dir, slow_rank), nprocs=world, join=True)
        line, failed = summarize(name, run_dir, world, slow_rank)
        summary.append(line)
        failures += failed

    write_readme(args.out, args.command or " ".join([sys.executable] + sys.argv), summary)
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
