#!/usr/bin/env bash
# lesson11_paper.sh LESSON_EXE — lesson 11 holds every schedule's trace to its paper's order,
# listed by hand at P = 4, M = 8 (main.cpp's paper_orders): each run must verify and must have
# made that check (a listed case the lookup missed would pass unseen).
set -u
exe="$1"
fail() { echo "lesson11_paper: $*" >&2; exit 1; }
for run in "naive 1" "gpipe 8" "1f1b 8" "interleaved 8" "zb-h1 8"; do
  read -r schedule m <<<"$run"
  out=$("$exe" --ranks 4 --schedule "$schedule" --microbatches "$m" --steps 1 --work-us 0 \
    --sample-us 0 --no-sweep --no-trace --checks 2>&1) || fail "$schedule: exit $?: $(tail -3 <<<"$out")"
  grep -q "check passed on r0: every stage ran $schedule's order from its paper" <<<"$out" ||
    fail "$schedule: no check against the paper's order"
done
echo "lesson11_paper: ok"
