#!/usr/bin/env bash
# trace_stress.sh RUNS TRACE_CHECK MPIEXEC OUT_DIR -- LESSON_EXE [ARGS...]
#   Writes RUNS traces of the same lesson under mpirun with busy loops beside it (one per
#   core, so ranks are preempted at random points), and checks every trace's invariants
#   (spans nest strictly on every lane, written sorted, flows paired): a writer that breaks
#   them only now and then shows up here, not as a chance failure of another test.
set -uo pipefail
runs="$1" check="$2" mpiexec="$3" out="$4"
shift 5
mkdir -p "$out"
busy=()
stop_busy() { ((${#busy[@]})) && kill "${busy[@]}" 2>/dev/null; wait 2>/dev/null; }
trap stop_busy EXIT
for ((c = 0; c < $(nproc); c++)); do
  timeout 600 bash -c 'while :; do :; done' &
  busy+=($!)
done
failed=0
for ((i = 1; i <= runs; i++)); do
  trace="$out/stress-$i.json"
  if ! log=$("$mpiexec" -n 4 "$@" --trace "$trace" 2>&1); then
    echo "trace_stress: run $i of $runs failed:"; echo "$log" | tail -n 20
    failed=$((failed + 1))
    continue
  fi
  if ! "$check" "$trace" --world 4 --verified; then
    echo "trace_stress: the trace of run $i of $runs breaks an invariant ($trace kept)"
    failed=$((failed + 1))
    continue
  fi
  rm -f "$trace"
done
echo "trace_stress: $((runs - failed)) of $runs traced runs under load wrote traces that hold every invariant"
((failed == 0))
