#!/usr/bin/env bash
# stress-suite.sh — the whole test suite, several times in a row, with busy loops beside it: a
# valid run must pass on a loaded machine too, so no test may assert what load can change (a
# fit, a ranking, a ratio of times, a deadline). Not run by CI (on 2 cores each loaded run takes
# about twice the quiet one); the notes quote its results.
#
#   bash scripts/stress-suite.sh [--runs N] [--loops K] [ctest options...]
#
#   --runs N    runs of the suite, one after another (default 3)
#   --loops K   busy loops (one process spinning each) beside them (default 2)
#
# Builds the release preset first (./distlab build), then runs ctest -j (cores) on it each time.
# Prints one line per run (passed or the failed tests, and the time) and exits 1 when any run
# failed. Each run's log: build/<preset>/stress/run-N.log.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs=3 loops=2 ctest_args=()
while (($#)); do
  case "$1" in
    --runs) runs="${2:?--runs needs a number}"; shift 2 ;;
    --loops) loops="${2:?--loops needs a number}"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) ctest_args+=("$1"); shift ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "stress-suite: --runs needs a positive number" >&2; exit 2; }
[[ "$loops" =~ ^[0-9]+$ ]] || { echo "stress-suite: --loops needs a number" >&2; exit 2; }

preset="${DISTLAB_PRESET:-release}"
build="build/$preset"
./distlab build >/dev/null
mkdir -p "$build/stress"

spinners=()
stop_spinners() {
  local p
  for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_spinners EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < loops; i++)); do
  sh -c 'while :; do :; done' &
  spinners+=($!)
done
echo "stress-suite: $runs runs of the suite ($build, ctest -j $(nproc)) beside $loops busy loops"

failed_runs=0
for ((run = 1; run <= runs; run++)); do
  log="$build/stress/run-$run.log"
  start=$SECONDS
  rc=0
  ctest --test-dir "$build" -j "$(nproc)" --output-on-failure "${ctest_args[@]}" >"$log" 2>&1 || rc=$?
  took=$((SECONDS - start))
  summary=$(grep -E '^[0-9]+% tests passed' "$log" | tail -n 1 || true)
  if ((rc == 0)); then
    echo "run $run: passed, ${summary:-no summary}, $((took / 60)) min $((took % 60)) s"
  else
    failed_runs=$((failed_runs + 1))
    echo "run $run: FAILED (ctest exit $rc), ${summary:-no summary}, $((took / 60)) min $((took % 60)) s; see $log"
    sed -n '/The following tests FAILED/,$p' "$log" | grep -E '^\s+[0-9]+ - ' || true
  fi
done
((failed_runs == 0)) || { echo "stress-suite: $failed_runs of $runs runs failed"; exit 1; }
echo "stress-suite: $runs of $runs runs passed"
