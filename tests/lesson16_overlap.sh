#!/usr/bin/env bash
# lesson16_overlap.sh LESSON VIEWER OUT_DIR: the viewer's overlap counter (viewer/model/overlap.hpp,
# `distlab-viewer --describe`) agrees with the figures lesson 16 prints for the same run.
#
# The run: 2 ranks, 2 steps, no buckets and buckets of 16 KiB, data parallel only (--no-zero3).
# The lesson prints, per configuration, communication and exposed time per rank and step; the
# viewer prints, at the end of the trace, the sums over every rank. So over the whole trace
#   communication = n steps (sum over configurations of "comm / rank")
#   hidden        = n steps (sum over configurations of "comm / rank" - "exposed")
# Tolerance, from how the figures are printed (format_seconds: "x.xx ms", "x.x us"): each printed
# figure is within half its last digit of the value it stands for, so the lesson's sums are
# within n steps (the sum of those half-digits), the viewer's within its own half-digit; plus 1 us
# for the trace's nanosecond grid (a few hundred span ends, each rounded by at most 0.5 ns).
# Both measure the same spans of the same run, so a disagreement past that is a different
# definition (which messages, which phases), not noise.
set -euo pipefail
lesson="$1" viewer="$2" dir="$3"
mkdir -p "$dir"
trace="$dir/16_overlap.json"
ranks=2 steps=2
printed=$("$lesson" --ranks $ranks --steps $steps --sweep 16K --bucket-bytes 16K --no-zero3 --trace "$trace")
described=$("$viewer" --describe --time 1e12 "$trace")
echo "$printed" | sed -n '/  configuration/,/  (comm/p'
echo "$described" | sed -n '/^overlap:/,$p'
# "2.40 ms" -> "2400 5" (microseconds and half the last printed digit, in microseconds).
us() {
  awk -v v="$1" -v u="$2" 'BEGIN {
    f = (u == "s") ? 1e6 : (u == "ms") ? 1e3 : (u == "us") ? 1 : 1e-3
    n = split(v, p, "."); d = (n > 1) ? length(p[2]) : 0
    printf "%.6f %.6f\n", v * f, 0.5 * f / (10 ^ d) }'
}
lesson_comm=0 lesson_hidden=0 lesson_tol=0
while read -r comm comm_unit exposed exposed_unit; do
  read -r c ct < <(us "$comm" "$comm_unit")
  read -r e et < <(us "$exposed" "$exposed_unit")
  read -r lesson_comm lesson_hidden lesson_tol < <(awk -v a="$lesson_comm" -v b="$lesson_hidden" \
    -v t="$lesson_tol" -v c="$c" -v e="$e" -v ct="$ct" -v et="$et" -v k=$((ranks * steps)) \
    'BEGIN { printf "%.6f %.6f %.6f\n", a + k * c, b + k * (c - e), t + k * (ct + et) }')
done < <(echo "$printed" | awk '/^  (no buckets|buckets of)/ { print $(NF-4), $(NF-3), $(NF-1), $NF }')
read -r v_hidden v_hidden_unit v_comm v_comm_unit < <(echo "$described" |
  awk '/^  all  / { print $2, $3, $5, $6 }')
read -r vh vht < <(us "$v_hidden" "$v_hidden_unit")
read -r vc vct < <(us "$v_comm" "$v_comm_unit")
awk -v lc="$lesson_comm" -v lh="$lesson_hidden" -v lt="$lesson_tol" -v vc="$vc" -v vh="$vh" \
  -v vct="$vct" -v vht="$vht" 'BEGIN {
  fail = 0
  tc = lt + vct + 1; th = lt + vht + 1
  dc = vc - lc; if (dc < 0) dc = -dc
  dh = vh - lh; if (dh < 0) dh = -dh
  printf "communication: viewer %.1f us, lesson %.1f us (|difference| %.1f us, tolerance %.1f us)\n", vc, lc, dc, tc
  printf "hidden:        viewer %.1f us, lesson %.1f us (|difference| %.1f us, tolerance %.1f us)\n", vh, lh, dh, th
  if (lc <= 0) { print "lesson16_overlap: the lesson printed no communication" > "/dev/stderr"; fail = 1 }
  if (dc > tc) { print "lesson16_overlap: the viewer counts other communication than the lesson" > "/dev/stderr"; fail = 1 }
  if (dh > th) { print "lesson16_overlap: the viewer hides other time than the lesson" > "/dev/stderr"; fail = 1 }
  exit fail }'
