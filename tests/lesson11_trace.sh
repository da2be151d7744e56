#!/usr/bin/env bash
# lesson11_trace.sh LESSON TRACE_DIR: in lesson 11's traces, each stage's forwards and backwards
# of the first step come in its schedule's order, read straight from the JSON (independently of
# the lesson's own check): GPipe and naive run every forward before any backward; 1F1B's stage r
# of P runs min(P - r - 1, M) forwards before its first backward, then one more forward (the
# steady state's), then backwards and forwards alternate. 4 stages, 6 micro-batches.
# Each forward, backward and update also says what it is in its args (op, micro-batch, stage: the
# viewer's Schedule panel draws them), and otherData.pipeline gives the ideal schedule's parameters.
set -euo pipefail
lesson="$1" dir="$2"
mkdir -p "$dir"
P=4 M=6 fail=0
# "pid ts kind micro" per forward / backward span of step 1 (the trace holds one event per line).
spans() {
  grep -E '"name":"(forward|backward) [0-9]+","cat":"compute"' "$1" |
    sed -E 's/.*"name":"(forward|backward) ([0-9]+)".*"pid":([0-9]+),.*"ts":([0-9.]+).*/\3 \4 \1 \2/' |
    sort -k1,1n -k2,2n | awk '{ if (++n[$1] <= 2 * '"$M"') print }'
}
for schedule in gpipe 1f1b; do
  trace="$dir/11_$schedule.json"
  "$lesson" --ranks "$P" --microbatches "$M" --batch 48 --steps 1 --schedule "$schedule" --trace "$trace" >/dev/null
  for ((r = 0; r < P; ++r)); do
    order=$(spans "$trace" | awk -v pid=$((r + 1)) '$1 == pid { printf "%s%s", ($3 == "forward" ? "F" : "B"), $4 } END { print "" }')
    if [[ $schedule == gpipe ]]; then
      want="F0F1F2F3F4F5B5B4B3B2B1B0"
    else
      w=$((P - r - 1))
      if ((w > M)); then w=$M; fi
      want=""
      for ((m = 0; m < w; ++m)); do want+="F$m"; done
      for ((i = 0; i < M - w; ++i)); do want+="F$((w + i))B$i"; done
      for ((m = M - w; m < M; ++m)); do want+="B$m"; done
    fi
    if [[ "$order" == "$want" ]]; then echo "ok: $schedule stage $r: $order"
    else echo "lesson11_trace: $schedule stage $r ran $order, its schedule is $want" >&2; fail=1; fi
  done
  # Phase args: "forward m" on pid p says {"op":"forward","micro":m,"stage":p-1}; "update" too.
  bad=$(grep -E '"name":"((forward|backward) [0-9]+|update)","cat":"compute"' "$trace" |
    sed -E 's/.*"name":"([a-z]+) ?([0-9]*)".*"pid":([0-9]+),.*"args":\{"op":"([a-z]+)",("micro":([0-9]+),)?"stage":([0-9]+)\}.*/\1 \2 \3 \4 \6 \7/' |
    awk '{ if ($1 == "update") ok = NF == 4 && $3 == "update" && $2 - 1 == $4  # update pid op stage
           else ok = NF == 6 && $1 == $4 && $2 == $5 && $3 - 1 == $6            # kind m pid op m stage
           if (!ok) print }' | head -3)
  phases=$(grep -cE '"name":"((forward|backward) [0-9]+|update)","cat":"compute"' "$trace")
  if [[ -z "$bad" && $phases -eq $((P * (2 * M + 1))) ]]; then echo "ok: $schedule: $phases phases say what they are"
  else echo "lesson11_trace: $schedule: $phases phases; without the right args: ${bad:-none}" >&2; fail=1; fi
  want_meta="\"pipeline\":{\"schedule\":\"$schedule\",\"stages\":$P,\"microbatches\":$M,\"iterations\":1,"
  if grep -qF "$want_meta" "$trace"; then echo "ok: $schedule: otherData.pipeline"
  else echo "lesson11_trace: $schedule: no $want_meta... in otherData" >&2; fail=1; fi
done
exit $fail
