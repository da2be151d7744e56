#!/usr/bin/env bash
# expect_failure.sh EXIT MAX_SECONDS PATTERN... -- COMMAND...
#   Runs COMMAND (killed 30 s after MAX_SECONDS: a hang, told apart from a slow run) and passes
#   only if it exits with EXIT ("nonzero" for any non-zero status) within MAX_SECONDS and its
#   output matches every PATTERN (grep -E). A command that prints "skipped: WHY" and exits 77
#   (a test whose input is not on this machine) exits 77 too.
set -u
want="$1" max="$2"
shift 2
patterns=()
while (($#)) && [[ "$1" != "--" ]]; do patterns+=("$1"); shift; done
shift
start=$(date +%s%N)
out=$(timeout $((max + 30)) "$@" 2>&1)
rc=$?
secs=$((($(date +%s%N) - start) / 1000000000))
echo "$out"
echo "expect_failure: exit $rc after ${secs} s"
fail() { echo "expect_failure: $*" >&2; exit 1; }
((rc == 124)) && fail "the command hung and was killed"
# A command that says "skipped: ..." and exits 77 is skipped (ctest's SKIP_RETURN_CODE 77).
((rc == 77)) && [[ "$out" == *"skipped: "* ]] && exit 77
if [[ "$want" == nonzero ]]; then ((rc != 0)) || fail "exit status 0, expected non-zero"
else ((rc == want)) || fail "exit status $rc, expected $want"; fi
((secs <= max)) || fail "took ${secs} s, more than ${max} s"
for p in "${patterns[@]}"; do
  grep -qE -- "$p" <<<"$out" || fail "output lacks /$p/"
done
echo "expect_failure: ok"
