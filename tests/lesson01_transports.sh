#!/usr/bin/env bash
# lesson01_transports.sh PROCS_SH LESSON01 — lesson 01 --compare: the ping-pong on threads and
# over Gloo (distlab's launcher) saves two fits in one calibration file, and the second run
# prints both side by side, each row with its alpha, bandwidth and three predicted times.
set -u
procs="$1" exe="$2"
fail() { echo "lesson01_transports: $*" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cal="$dir/calibration.json"
"$exe" --ranks 2 --size 64K --no-trace --calibration "$cal" >"$dir/threads.log" 2>&1 ||
  fail "the threads run failed: $(cat "$dir/threads.log")"
bash "$procs" 2 "$exe" --transport gloo --size 64K --no-trace --calibration "$cal" --compare \
  >"$dir/gloo.log" 2>&1 || fail "the gloo run failed: $(cat "$dir/gloo.log")"
cat "$dir/gloo.log"
table=$(sed -n '/^the send\/recv schemes side by side/,/runs them all/p' "$dir/gloo.log")
row='[0-9.]+ [mun]?s +[0-9.]+ GB/s +[0-9.]+ [mun]?s +[0-9.]+ [mun]?s +[0-9.]+ [mun]?s$'
grep -Eq "^  threads-cpu +$row" <<<"$table" || fail "no threads-cpu row"
grep -Eq "^  gloo-cpu +$row" <<<"$table" || fail "no gloo-cpu row"
# The lecture's order: threads before gloo.
order=$(grep -Eo '^  (threads|gloo)-cpu' <<<"$table" | tr -d ' ' | tr '\n' ' ')
[[ "$order" == "threads-cpu gloo-cpu " ]] || fail "the rows are not in the lecture's order: $order"
echo "lesson01_transports: ok"
