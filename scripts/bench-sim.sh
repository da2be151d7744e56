#!/usr/bin/env bash
# bench-sim.sh — the simulated clusters' targets (docs/clusters.md), measured in one run:
#
#   scripts/bench-sim.sh [--quick]
#
#   1. lesson 07 at 64 ranks on fat-tree-64: its wall time on this machine (target: under 60 s);
#   2. lesson 06 (ring_chunked) at 256 ranks on cluster-10gbe: that it runs and verifies, and its
#      wall time (every algorithm at 256 ranks takes over 13 minutes: parallel alone puts
#      N(N-1) = 65,280 flows on the network at once, and SimGrid shares bandwidth among them);
#   3. ring_chunked all-reduce of 64 MiB on 8 ranks of cluster-10gbe: simulated time against the
#      alpha-beta-gamma model with the platform's alpha and beta (target: within 5%).
#
# Wall times measure this machine, so run it on a quiet one (nothing else building or testing).
# --quick skips the 256-rank run. Prints a table; exits 1 when a run fails to verify or the
# ring's ratio is off by more than 5%. Builds the smpi preset's lessons 06 and 07 when missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
quick=0
[[ "${1:-}" == --quick ]] && quick=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0

run() {  # NAME LOG ./distlab args...: runs, prints the name, the wall time and the verdict line
  local name="$1" log="$out/$2" start end
  shift 2
  start=$(date +%s%N)
  "$@" >"$log" 2>&1 || true
  end=$(date +%s%N)
  local verdict
  verdict=$(grep -E "^lesson [0-9]+ .*: (verified|FAILED)" "$log" | tail -n 1 || true)
  [[ "$verdict" == *": verified "* ]] || { failed=1; verdict="FAILED: $(tail -n 3 "$log" | tr '\n' ' ')"; }
  printf '%-44s %8.1f s   %s\n' "$name" "$(((end - start) / 1000000))e-3" "${verdict#lesson }"
}

printf '%-44s %10s   %s\n' "run" "wall" "verdict"
run "07, 64 ranks, fat-tree-64 (target < 60 s)" 07.log \
  ./distlab lesson 07 --sim fat-tree-64 --ranks 64 --no-trace
((quick)) || run "06 ring_chunked, 256 ranks, cluster-10gbe" 06-256.log \
  ./distlab lesson 06 --sim cluster-10gbe --ranks 256 --size 64K --algo ring_chunked --no-trace
run "06 ring_chunked, 64 MiB, 8 ranks, cluster-10gbe" ring.log \
  ./distlab lesson 06 --sim cluster-10gbe --ranks 8 --size 16M --algo ring_chunked --no-trace
line=$(grep -E "^  ring_chunked +[0-9.]+ [mu]?s" "$out/ring.log" | head -n 1 || true)
ratio=$(awk '{print $6}' <<<"$line")
echo "ring_chunked, 64 MiB, 8 ranks: simulated/predicted = ${ratio:-?} (target: within 5%)"
echo "  ${line# }"
if [[ -z "$ratio" ]] || ! awk -v r="$ratio" 'BEGIN { exit !(r >= 0.95 && r <= 1.05) }'; then
  failed=1
fi
exit $failed
