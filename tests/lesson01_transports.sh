#!/usr/bin/env bash
# lesson01_transports.sh PROCS_SH LESSON01 — lesson 01 --compare: the ping-pong on threads and
# over Gloo (distlab's launcher) saves two fits in one calibration file, and the second run
# prints both side by side, each row with its alpha, bandwidth and three predicted times.
#
# What a valid run guarantees, and no more: a fit comes from timings, and on a busy machine the
# weighted fit can come out not physical (beta <= 0); the lesson then saves the lower envelope,
# and saves nothing only when no physical line runs under the points, saying why. So the file
# starts with a made-up row for each transport: a run that saved its fit replaced its row (the
# row shows the alpha that run printed), a run that did not said why, and the table has both
# rows in the lecture's order either way.
set -u
procs="$1" exe="$2"
fail() { echo "lesson01_transports: $*" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cal="$dir/calibration.json"
made_up='"alpha_s":0.0005,"beta_s_per_byte":2e-09,"bandwidth_bytes_per_s":5e+08,"points":[]'
printf '{"schema_version":1,"model":"t = alpha + beta * bytes","calibrations":{\n  "threads-cpu":{%s},\n  "gloo-cpu":{%s}\n}}\n' \
  "$made_up" "$made_up" >"$cal"
"$exe" --ranks 2 --size 64K --no-trace --calibration "$cal" >"$dir/threads.log" 2>&1 ||
  fail "the threads run failed: $(cat "$dir/threads.log")"
bash "$procs" 2 "$exe" --transport gloo --size 64K --no-trace --calibration "$cal" --compare \
  >"$dir/gloo.log" 2>&1 || fail "the gloo run failed: $(cat "$dir/gloo.log")"
cat "$dir/gloo.log"
table=$(sed -n '/^the send\/recv schemes side by side/,/runs them all/p' "$dir/gloo.log")
row='[0-9.]+ [mun]?s +[0-9.]+ GB/s +[0-9.]+ [mun]?s +[0-9.]+ [mun]?s +[0-9.]+ [mun]?s$'
for key in threads-cpu gloo-cpu; do
  log="$dir/${key%-cpu}.log"
  line=$(grep -E "^  $key +$row" <<<"$table") || fail "no $key row"
  alpha=$(awk '{ print $2, $3 }' <<<"$line")
  if grep -q "saved as \"$key\"" "$log"; then
    # The alpha this run saved: the weighted fit's, or the lower envelope's when it took over.
    printed=$(sed -nE 's/^  alpha \(latency\) += (.*)$/\1/p; s/^  alpha ([0-9.]+ [mun]?s), beta .*/\1/p' "$log" | tail -n 1)
    [[ "$alpha" == "$printed" ]] || fail "the $key row shows alpha $alpha, its run saved $printed"
  else
    grep -q "not physical" "$log" && grep -q "not saved to" "$log" ||
      fail "the $key run neither saved its fit nor said why"
    [[ "$alpha" == "500.0 us" ]] || fail "the $key row changed ($alpha) though its run saved nothing"
    echo "lesson01_transports: $key saved no fit, and said why: $(grep -m1 'the fit is not physical' "$log")"
  fi
done
# The lecture's order: threads before gloo.
order=$(grep -Eo '^  (threads|gloo)-cpu' <<<"$table" | tr -d ' ' | tr '\n' ' ')
[[ "$order" == "threads-cpu gloo-cpu " ]] || fail "the rows are not in the lecture's order: $order"
echo "lesson01_transports: ok"
