#!/usr/bin/env bash
# sim-results.sh — the table of docs/clusters.md: lessons 05, 06, 07 and 09 on every platform in
# platforms/, 8 ranks each (simulated time, so the figures do not depend on this machine), as
# markdown rows: the lesson, the platform, what was timed, simulated, predicted, their ratio.
#
#   scripts/sim-results.sh > /tmp/rows.md
#
# Builds the smpi preset's lessons when missing. Exits 1 when a run does not verify.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0

# row LESSON PLATFORM LABEL PATTERN -- ARGS...: runs the lesson on 8 ranks of PLATFORM and
# prints the first output line matching PATTERN as a row (its simulated, predicted, ratio).
row() {
  local nn="$1" platform="$2" label="$3" pattern="$4"
  shift 5
  ./distlab lesson "$nn" --sim "$platform" --ranks 8 --no-trace "$@" >"$log" 2>&1 || failed=1
  grep -q ": verified (" "$log" || { failed=1; echo "| $nn | $platform | $label | FAILED | | |"; return; }
  local line
  line=$(grep -E -m1 "$pattern" "$log" || true)
  # The numbers after the label: simulated (value unit), predicted (value unit), ratio.
  awk -v nn="$nn" -v p="$platform" -v l="$label" '{
      for (i = 1; i <= NF; ++i) if ($i ~ /^[0-9.]+$/ && $(i+1) ~ /^[mu]?s$/) { first = i; break }
      printf "| %s | %s | %s | %s %s | %s %s | %s |\n", nn, p, l, $first, $(first+1), $(first+2), $(first+3), $(first+4)
    }' <<<"$line"
}

echo "| lesson | platform | timed (8 ranks) | simulated | predicted | ratio |"
echo "|---|---|---|---|---|---|"
for p in platforms/*.xml; do
  p=$(basename "$p" .xml)
  row 05 "$p" "pull, one server, S = 1 MiB" "^  1 pull " -- --size 512 --layers 2 --steps 3
  row 06 "$p" "ring_chunked, S = 1 MiB" "^  ring_chunked +[0-9.]+ [mu]?s " -- --size 256K --algo ring_chunked
  row 06 "$p" "parallel, S = 1 MiB" "^  parallel +[0-9.]+ [mu]?s " -- --size 256K --algo parallel
  row 07 "$p" "recursive_halving, S = 1 MiB" "^  recursive_halving +[0-9.]+ [mu]?s " -- --size 256K --algo recursive_halving
  row 09 "$p" "ZeRO-2 step, 2 MiB layers" "^  ZeRO-2 " -- --inputs 512 --size 1024 --outputs 512 --steps 2
done
exit $failed
