#!/usr/bin/env bash
# memory_plan.sh BINARY ARGS...
#   Runs a lesson with --verbose --no-trace and compares the memory it planned before the run
#   (the plan every lesson checks against MemAvailable, exit 2 when it does not fit) with what
#   the process took: its resident peak (VmHWM) less what it held when the plan was made.
#   The plan must cover the run: growth <= plan + 64 MiB. The 64 MiB is what no plan counts:
#   library pages touched late, malloc's per-thread arenas, the trace recorder's vectors. A plan
#   below the growth would let a run the machine cannot hold start and be killed mid-way.
#   The plan must not be far above it either: plan <= 3 x growth + 64 MiB, or valid runs near
#   the limit are refused (the plans count every buffer the lesson allocates, some of which are
#   freed before the next is made, so the peak may sit below the sum). Run at sizes where the
#   buffers dominate (hundreds of MiB), so the slack is small beside them.
set -u
bin="$1"
shift
out="$("$bin" "$@" --verbose --no-trace 2>&1)"
rc=$?
line="$(grep -m1 '^memory: planned' <<<"$out")"
if ((rc != 0)) || ! grep -q ': verified (' <<<"$out"; then
  echo "memory_plan: $bin $* did not verify (exit $rc):"
  tail -20 <<<"$out"
  exit 1
fi
if [[ -z "$line" ]]; then
  echo "memory_plan: no 'memory: planned' line from $bin $* --verbose"
  exit 1
fi
# "memory: planned 2.00 GiB for this process; resident 158 MiB at the start, peak 1.86 GiB"
read -r plan start peak < <(awk '
  function bytes(v, u) { return v * (u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : u == "TiB" ? 1099511627776 : 1) }
  { for (i = 1; i <= NF; ++i) {
      if ($i == "planned") p = bytes($(i + 1), $(i + 2))
      if ($i == "resident") s = bytes($(i + 1), $(i + 2))
      if ($i == "peak") k = bytes($(i + 1), $(i + 2))
  } printf "%.0f %.0f %.0f\n", p, s, k }' <<<"${line//,/ }")
slack=$((64 * 1048576))
growth=$((peak - start))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "$line"
echo "memory_plan: growth $(mib $growth), plan $(mib $plan) ($bin $*)"
if ((growth > plan + slack)); then
  echo "memory_plan: FAILED: the run took $(mib $growth) beyond its start, more than its plan $(mib $plan) + 64 MiB"
  exit 1
fi
if ((plan > 3 * growth + slack)); then
  echo "memory_plan: FAILED: the plan $(mib $plan) is more than 3 x the $(mib $growth) the run took + 64 MiB"
  exit 1
fi
echo "memory_plan: the plan covers the run"
