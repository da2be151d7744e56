#!/usr/bin/env bash
# bench-pipeline.sh — lesson 11's measured utilisation against each schedule's bubble formula.
#
#   scripts/bench-pipeline.sh [P] [M] [REPEATS]     default: 4 stages, 4 micro-batches, 3 runs
#
# Runs GPipe and 1F1B (M/(M+P-1)), interleaved with 2 chunks per rank (vM/(vM+P-1); when P divides
# M) and zero bubble (3M/(3M+P-1); when M >= P) REPEATS times each with --expect-utilisation:
# every stage's busy time over the step's time, in the last step, must be within 10 points of the
# schedule's formula with stages of equal cost. It is a timing, so it belongs here and not in the tests: run it on a quiet machine (a
# loaded one stretches the step and the sleeps). Prints one line per run and how many passed;
# exits 1 if any run failed. Environment: DISTLAB_PRESET (default release).
#
#   scripts/bench-pipeline.sh --big-trace FILE [ITERATIONS]     default: 38 iterations
#
# Instead writes a large pipeline trace for the viewer's Schedule panel benchmark: 4 stages, 1F1B,
# 256 micro-batches, no simulated compute: about 25,700 events per iteration, so 38 iterations
# are just over 1M events (about 185 MB; a minute of CPU). Deeper pipelines trained this long
# drive the updates so small that the weights check can fail; 4 stages stay verified. Then: distlab-viewer --bench-frames 300 --panel schedule FILE
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/built.sh
built bench-pipeline lessons/11_pipeline_microbatching 11_pipeline_microbatching
lesson="$BUILT"
if [[ "${1:-}" == --big-trace ]]; then
  file="${2:?usage: $0 --big-trace FILE [ITERATIONS]}" iterations="${3:-38}"
  [[ "$iterations" =~ ^[1-9][0-9]*$ ]] || { echo "bench-pipeline: '$iterations' is not a positive whole number of iterations" >&2; exit 2; }
  "$lesson" --ranks 4 --schedule 1f1b --microbatches 256 --batch 4096 --steps "$iterations" \
    --work-us 0 --sample-us 0 --trace "$file" | tail -1
  exit 0
fi
stages="${1:-4}"
micro="${2:-4}"
repeats="${3:-3}"
for n in "$stages" "$micro" "$repeats"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "bench-pipeline: '$n' is not a positive whole number (usage: $0 [P] [M] [REPEATS])" >&2; exit 2; }
done
# --batch: 16 samples per micro-batch, so every M splits the batch.
batch=$((16 * micro))

schedules=(gpipe 1f1b)
((micro % stages == 0)) && schedules+=(interleaved)
((micro >= stages)) && schedules+=(zb-h1)
failed=0 runs=0
for schedule in "${schedules[@]}"; do
  # The layers: one per stage (per chunk, interleaved), at least 3 hidden.
  chunks=1
  [[ $schedule == interleaved ]] && chunks=2
  layers=$((stages * chunks > 4 ? stages * chunks - 1 : 3))
  for ((i = 1; i <= repeats; ++i)); do
    runs=$((runs + 1))
    set +e
    out="$("$lesson" --ranks "$stages" --microbatches "$micro" --batch "$batch" --layers "$layers" \
      --schedule "$schedule" --expect-utilisation --no-sweep --no-trace 2>&1)"
    rc=$?
    set -e
    line="$(grep -m1 'mean utilisation measured' <<<"$out" | sed 's/^ *//')"
    formula="$(grep -m1 '^  formula ' <<<"$out" | sed 's/^ *//')"
    verdict="$(grep -m1 -E '(verified|FAILED) \(' <<<"$out" | sed 's/^lesson 11 pipeline_microbatching: //')"
    printf '%-11s run %d: %s %s; %s\n' "$schedule" "$i" "${line:-no utilisation line}" "$formula" "${verdict:-exit $rc}"
    ((rc == 0)) || failed=$((failed + 1))
  done
done
echo "bench-pipeline: $((runs - failed)) of $runs runs within 10 points of their schedule's formula on $stages stages, $micro micro-batches"
((failed == 0))
