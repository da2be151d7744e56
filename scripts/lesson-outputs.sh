#!/usr/bin/env bash
# lesson-outputs.sh — every lesson's output with its measured times masked, to diff two builds.
#
#   scripts/lesson-outputs.sh BUILD_DIR OUT_DIR       e.g. before and after a refactor:
#   scripts/lesson-outputs.sh build/release /tmp/before; ...; scripts/lesson-outputs.sh build/release /tmp/after
#   diff -r /tmp/before /tmp/after                   (no output: nothing but timings changed)
#
# Runs each lesson with its defaults and with --ranks 3, and lessons 08-10 with --deterministic,
# all with --no-trace, on in-process ranks. What is measured rather than computed is masked as T:
# times, rates, percentages (lesson 11's utilisation, measured beside its formula), lesson 01's ping-pong table and
# fit, the cost model's measured alpha, beta and gamma, and resident memory sizes.
set -euo pipefail
build="${1:?usage: lesson-outputs.sh BUILD_DIR OUT_DIR}"
out="${2:?usage: lesson-outputs.sh BUILD_DIR OUT_DIR}"
[[ -d "$build/lessons" ]] || { echo "lesson-outputs: no lessons in $build (build it first)" >&2; exit 2; }
mkdir -p "$out"

mask() {
  sed -E 's/[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)? *(ms|us|µs|s|ns\/B|GB\/s|MB\/s|GiB\/s|x)\b/T/g; s/[0-9]+(\.[0-9]+)?%/T/g; s/ +/ /g' |
    grep -v -E '^ *[0-9.]+ [KMG]?i?B [0-9]+ T T T|resident|alpha T|n_1/2|within 10 points' || true
}

run() {  # NAME ARGS...: one run's output, masked, and its exit status
  local name="$1" exe="$2"
  shift 2
  local code=0
  "$exe" --no-trace "$@" > "$out/$name.raw" 2>&1 || code=$?
  { mask < "$out/$name.raw"; echo "exit $code"; } > "$out/$name.txt"
  rm -f "$out/$name.raw"
}

for exe in "$build"/lessons/[0-9][0-9]_*; do
  [[ -f "$exe" && -x "$exe" ]] || continue
  n=$(basename "$exe")
  run "$n" "$exe"
  run "$n.ranks3" "$exe" --ranks 3
  case "$n" in 08_* | 09_* | 10_*) run "$n.deterministic" "$exe" --deterministic ;; esac
done
echo "lesson-outputs: $(ls "$out"/*.txt | wc -l) runs in $out"
