#!/usr/bin/env bash
# lesson16_memory.sh LESSON OUT_DIR: lesson 16's trace carries the memory ledger (the viewer's
# Memory panel), and during "ZeRO-3 with prefetch" the weights' counter peaks where the lesson
# says: my shards + the largest two neighbouring layers, the figure it prints and checks on its
# own ledger. Each configuration measures on a ledger of its own, which also charges the rank's
# (core/device/memory_ledger.hpp): the trace's counters are the rank's.
#
# Tolerance: the printed figure has three significant digits (format_bytes: "106 KiB"), so the
# trace's peak must be within half its last digit; the counter itself is exact (bytes).
set -euo pipefail
lesson="$1" dir="$2"
mkdir -p "$dir"
trace="$dir/16_memory.json" ranks=4
printed=$("$lesson" --ranks $ranks --steps 1 --sweep 16K --bucket-bytes 16K --trace "$trace")
read -r value unit < <(echo "$printed" | sed -n 's/^and with prefetch \([0-9.]*\) \([KMG]\{0,1\}i\{0,1\}B\) = .*/\1 \2/p')
[[ -n "${value:-}" ]] || { echo "lesson16_memory: the lesson printed no prefetch peak" >&2; exit 1; }
# The trace holds one event per line: the phase of rank 0 (pid 1), then its memory counters in it.
awk -v value="$value" -v unit="$unit" -v ranks=$ranks '
  /"ph":"X","name":"ZeRO-3 with prefetch","cat":"compute","pid":1,/ {
    match($0, /"ts":[0-9.]+/); t0 = substr($0, RSTART + 5, RLENGTH - 5) + 0
    match($0, /"dur":[0-9.]+/); t1 = t0 + substr($0, RSTART + 6, RLENGTH - 6)
  }
  /"ph":"C","name":"memory"/ {
    match($0, /"pid":[0-9]+/); pid = substr($0, RSTART + 6, RLENGTH - 6) + 0; seen[pid] = 1
    match($0, /"ts":[0-9.]+/); ts[NR] = substr($0, RSTART + 5, RLENGTH - 5) + 0
    match($0, /"params_bytes":[0-9]+/); params[NR] = substr($0, RSTART + 15, RLENGTH - 15) + 0
    on_rank0[NR] = (pid == 1)
  }
  END {
    fail = 0
    for (p = 1; p <= ranks; ++p)
      if (!(p in seen)) { printf "lesson16_memory: rank %d has no memory counter\n", p - 1 > "/dev/stderr"; fail = 1 }
    if (t1 <= t0) { print "lesson16_memory: no \"ZeRO-3 with prefetch\" phase on rank 0" > "/dev/stderr"; exit 1 }
    peak = 0
    for (i in ts) if (on_rank0[i] && ts[i] >= t0 && ts[i] <= t1 && params[i] > peak) peak = params[i]
    f = (unit == "B") ? 1 : (unit == "KiB") ? 1024 : (unit == "MiB") ? 1048576 : 1073741824
    n = split(value, part, "."); digits = (n > 1) ? length(part[2]) : 0
    half = 0.5 * f / (10 ^ digits)
    d = peak - value * f; if (d < 0) d = -d
    printf "ZeRO-3 with prefetch, rank 0: the trace'"'"'s weights peak at %d B; the lesson prints %s %s (|difference| %.0f B, tolerance %.0f B)\n", peak, value, unit, d, half
    if (d > half) { print "lesson16_memory: the trace'"'"'s weights peak is not the lesson'"'"'s" > "/dev/stderr"; fail = 1 }
    exit fail
  }' "$trace"
