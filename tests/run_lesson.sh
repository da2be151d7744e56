#!/usr/bin/env bash
# run_lesson.sh TRACE_CHECK TRACE EXPECT WORLD -- COMMAND...
#   EXPECT verified: exit 0, a final line with ": verified (", and a trace that loads with every
#                    invariant holding and says verified.
#   EXPECT failed:   exit 1, a final line with ": FAILED", and a trace that says not verified.
set -u
check="$1" trace="$2" expect="$3" world="$4"
shift 5
rm -f "$trace"
out=$("$@" 2>&1)
rc=$?
echo "$out" | tail -n 40
final=$(echo "$out" | grep -E "^lesson [0-9]+ " | tail -n 1)
fail() { echo "run_lesson: $*" >&2; exit 1; }
if [[ "$expect" == verified ]]; then
  ((rc == 0)) || fail "exit status $rc, expected 0"
  [[ "$final" == *": verified ("* ]] || fail "no final 'verified' line"
  "$check" "$trace" --world "$world" --verified || fail "trace check failed"
else
  ((rc == 1)) || fail "exit status $rc, expected 1"
  [[ "$final" == *": FAILED"* ]] || fail "no final 'FAILED' line"
  [[ "$out" == *"check failed on r"* ]] || fail "no line names the failed check"
  "$check" "$trace" --world "$world" --failed || fail "trace check failed"
fi
echo "run_lesson: ok"
