#!/usr/bin/env bash
# gpu_check_rehearse.sh: scripts/gpu-check.sh --rehearse under the ways a GPU run goes wrong
# (a failing lesson, a hang, a missing library, no GPU, a driver too old, a SIGTERM), each in
# its own output folder, asserting the exit status, the summary's rows, the archive, the files
# left in $OUT and, for hangs, that the script keeps to its deadline. The GPU machine is lent
# for minutes at a time; this is how the script's own mistakes are found without one.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
check="$here/../scripts/gpu-check.sh"
dirs=()
trap 'rm -rf "${dirs[@]}"' EXIT
failures=0

fail() { echo "gpu_check_rehearse: $scenario: $1" >&2; failures=$((failures + 1)); }

# run SCENARIO REHEARSE [ARGS...]: runs the rehearsal into a fresh $OUT; sets out, rc, took.
run() {
  scenario=$1
  out=$(mktemp -d)
  dirs+=("$out")
  local t0; t0=$(date +%s)
  rc=0
  DISTLAB_REHEARSE=$2 OUT=$out bash "$check" --rehearse "${@:3}" >"$out.stdout" 2>&1 || rc=$?
  dirs+=("$out.stdout")
  took=$(($(date +%s) - t0))
  echo "--- $scenario: exit $rc in $took s"
}

row() { grep -m 1 -E "^$1 {2,}" "$out/summary.txt"; }  # the summary row of step $1
expect_rc() { [[ $rc == "$1" ]] || fail "exit status $rc, expected $1 ($(tail -n 1 "$out/summary.txt" 2>/dev/null))"; }
expect_row() {  # expect_row STEP REGEX: the row's result (and detail) match
  local r; r=$(row "$1")
  [[ -n $r ]] || { fail "no row '$1' in summary.txt"; return; }
  [[ $r =~ ^$1\ +$2 ]] || fail "row '$1' is '$r', expected result /$2/"
}
expect_reported() {  # the files every run must leave, and nothing else: at most 5, no folders
  [[ -s $out/summary.txt ]] || fail "no summary.txt"
  [[ -s $out/check.log ]] || fail "no check.log"
  [[ -s $out/gpu-check.tar.gz ]] || fail "no gpu-check.tar.gz"
  tar -tzf "$out/gpu-check.tar.gz" >/dev/null 2>&1 || fail "gpu-check.tar.gz is not a gzip tar archive"
  local n; n=$(find "$out" -mindepth 1 | wc -l)
  ((n <= 5)) || fail "$n entries in \$OUT, at most 5 may come back: $(find "$out" -mindepth 1 -printf "%f ")"
  [[ -z $(find "$out" -mindepth 1 -type d) ]] || fail "folders left in \$OUT: $(find "$out" -mindepth 1 -type d)"
}
expect_in_time() {  # expect_in_time DEADLINE: ended within the deadline and 15 s
  ((took <= $1 + 15)) || fail "took $took s, the deadline was $1 s (15 s allowed over)"
}
steps() { awk 'NR > 3 && NF >= 2 && $1 != "check" && !/^gpu-check/' "$out/summary.txt"; }

# 1. Every stand-in passes: every row passed, the traces in the archive.
run all-pass ""
expect_rc 0
expect_reported
[[ $(steps | wc -l) -ge 20 ]] || fail "only $(steps | wc -l) rows in summary.txt"
steps | grep -vE ' passed +[0-9.]+ ' && fail "rows above did not pass"
grep -q '^gpu-check: every step passed$' "$out/summary.txt" || fail "last line is not 'every step passed'"
# The listing first: `tar | grep -q` would fail under pipefail when grep stops tar early.
listing=$(tar -tzf "$out/gpu-check.tar.gz" 2>/dev/null || true)
grep -qE '^(\./)?traces/[0-9][0-9]_.*\.json$' <<<"$listing" || fail "no lesson trace in the archive"
grep -qE '^(\./)?logs/unit_ops\.log$' <<<"$listing" || fail "no step log in the archive"
[[ -s $out/bench.csv ]] || fail "no bench.csv"
head -n 1 "$out.stdout" | grep -q "tests the script's control flow" || fail "the first line does not say it rehearses"

# 2. One lesson fails: that row only, and the run says so.
run lesson-fails 'lesson 05*=fail'
expect_rc 1
expect_reported
expect_row 'lesson 05_parameter_server' 'FAILED \(1\)'
expect_row 'lesson 04_allreduce_allgather' passed
expect_row allreduce passed
[[ $(steps | grep -c 'FAILED') == 1 ]] || fail "more than one row FAILED"
grep -q '^gpu-check: FAILED: lesson 05_parameter_server$' "$out/summary.txt" || fail "last line does not name the lesson"

# 3. A hang mid-way: killed at the deadline less the reserve, the rest not run.
run hang-transport 'unit transport=hang' --deadline 30
expect_rc 1
expect_reported
expect_in_time 30
expect_row 'unit transport' TIMEOUT
expect_row 'unit ops' passed
expect_row allreduce 'not run'
tail -n 1 "$out/summary.txt" | grep -q 'not run' || fail "last line does not say steps were not run"

# 4. A hang in the first GPU step with a short deadline: everything after it not run, in time.
run hang-early 'unit ops=hang' --deadline 25
expect_rc 1
expect_reported
expect_in_time 25
expect_row 'unit ops' TIMEOUT
expect_row 'unit model' 'not run'
expect_row 'lesson 01_send_recv' 'not run'

# 5. A library the loader cannot find: the environment names it, no GPU step starts.
run missing-lib 'environment=missing-lib'
expect_rc 1
expect_reported
expect_row environment 'FAILED.*libnccl\.so\.2 not found'
expect_row 'unit ops' 'not run'
expect_row stress 'not run'

# 6. No device: exit 2, said so. An old driver: exit 1, the probe's message kept.
run no-gpu 'probe=no-gpu'
expect_rc 2
[[ -s $out/summary.txt ]] || fail "no summary.txt"
grep -q 'no CUDA device answers' "$out/summary.txt" || fail "summary.txt does not say no device answers"
run setup-fail 'probe=setup-fail'
expect_rc 1
[[ -s $out/summary.txt ]] || fail "no summary.txt"
expect_row environment 'FAILED \(3\) .*CUDA setup failed: CUDA driver version is insufficient'
grep -q 'CUDA driver version is insufficient' "$out/check.log" || fail "check.log lacks the probe's message"

# 7. SIGTERM during a hung step: the trap still reports, and the exit is not 0.
scenario=sigterm
out=$(mktemp -d)
dirs+=("$out")
DISTLAB_REHEARSE='unit transport=hang' OUT=$out bash "$check" --rehearse >/dev/null 2>&1 &
pid=$!
# Until the hung step has begun (its "=== unit transport" line in check.log): a fixed wait
# killed it before that on a loaded machine, while the steps before it still ran.
for _ in $(seq 1 600); do
  grep -q '^=== unit transport' "$out/check.log" 2>/dev/null && break
  sleep 0.1
done
sleep 1
kill -TERM "$pid"
t0=$(date +%s)
rc=0
wait "$pid" || rc=$?
echo "--- $scenario: exit $rc, $(($(date +%s) - t0)) s after SIGTERM"
((rc != 0)) || fail "exit status 0 after SIGTERM"
(($(date +%s) - t0 <= 10)) || fail "took more than 10 s to stop after SIGTERM"
expect_reported
expect_row 'unit transport' 'FAILED \(SIGTERM\)'
grep -q 'stopped by SIGTERM' "$out/summary.txt" || fail "summary.txt does not say it was stopped"

# 8. Bad input: one sentence and exit 2.
run bad-deadline "" --deadline soon
expect_rc 2
grep -q 'whole number of seconds' "$out.stdout" || fail "no sentence about the deadline"

if ((failures)); then
  echo "gpu_check_rehearse: $failures check(s) failed" >&2
  exit 1
fi
echo "gpu_check_rehearse: every scenario behaved"
