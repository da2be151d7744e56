#!/usr/bin/env bash
# lesson11_trace.sh LESSON TRACE_DIR: in lesson 11's traces, each stage's passes of the first
# step come in its schedule's order, read straight from the JSON and derived here apart from the
# lesson's code (4 stages):
#   gpipe        every forward, then every backward, the last forward's first (M = 6)
#   1f1b         min(P - r - 1, M) forwards on stage r, then a forward and a backward in turn,
#                then the backwards left (M = 6)
#   zb-h1        1F1B with each backward split into I then W, stage r's first r W's put off to
#                after its last I (M = 6)
#   interleaved  v = 2 chunks per stage: the k-th forward is micro-batch (k / Pv) P + k mod P of
#                chunk (k / P) mod v, the k-th backward the same of chunk v - 1 - that;
#                2(P - r - 1) + (v - 1) P forwards first, then a forward and a backward in turn
#                (M = 8)
# Each pass and update also says what it is in its args (op, micro-batch, stage, chunk: the
# viewer's Schedule panel draws them), and otherData.pipeline gives the ideal schedule's
# parameters.
set -euo pipefail
lesson="$1" dir="$2"
mkdir -p "$dir"
P=4 fail=0
pass_re='(forward|backward|backward-input|backward-weight) ([0-9]+)( chunk ([0-9]+))?'
# "pid ts letter micro chunk" per pass (the trace holds one event per line; one step).
spans() {
  grep -E "\"name\":\"$pass_re\",\"cat\":\"compute\"" "$1" |
    sed -E "s/.*\"name\":\"$pass_re\".*\"pid\":([0-9]+),.*\"ts\":([0-9.]+).*/\5 \6 \1 \2 \4/" |
    awk '{ l = $3 == "forward" ? "F" : $3 == "backward" ? "B" : $3 == "backward-input" ? "I" : "W"
           print $1, $2, l, $4, ($5 == "" ? 0 : $5) }' |
    sort -k1,1n -k2,2n
}
# The order stage r of P runs under $schedule over M micro-batches (v chunks), in $want.
derive() {
  local r=$1 M=$2 v=$3 w m k b wt c
  want=""
  case "$schedule" in
    gpipe)
      for ((m = 0; m < M; ++m)); do want+="F$m "; done
      for ((m = M - 1; m >= 0; --m)); do want+="B$m "; done
      ;;
    1f1b | zb-h1)
      w=$((P - r - 1))
      ((w > M)) && w=$M
      b=0 wt=0
      back() {  # one backward: B, or I and (past the first r) its W
        if [[ $schedule == 1f1b ]]; then
          want+="B$b "
        else
          want+="I$b "
          ((b + 1 > r)) && want+="W$wt " && wt=$((wt + 1))
        fi
        b=$((b + 1))
      }
      for ((m = 0; m < w; ++m)); do want+="F$m "; done
      for ((m = w; m < M; ++m)); do
        want+="F$m "
        back
      done
      while ((b < M)); do back; done
      while [[ $schedule == zb-h1 ]] && ((wt < M)); do
        want+="W$wt "
        wt=$((wt + 1))
      done
      ;;
    interleaved)
      w=$((2 * (P - r - 1) + (v - 1) * P))
      ((w > M * v)) && w=$((M * v))
      fwd() { c=$((($1 % (P * v)) / P)) m=$((($1 / (P * v)) * P + $1 % P)); want+="F$m.$c "; }
      bwd() { c=$((v - 1 - ($1 % (P * v)) / P)) m=$((($1 / (P * v)) * P + $1 % P)); want+="B$m.$c "; }
      for ((k = 0; k < w; ++k)); do fwd $k; done
      for ((k = w; k < M * v; ++k)); do
        fwd $k
        bwd $((k - w))
      done
      for ((k = M * v - w; k < M * v; ++k)); do bwd $k; done
      ;;
  esac
}
for schedule in gpipe 1f1b zb-h1 interleaved; do
  M=6 v=1 extra=()
  [[ $schedule == interleaved ]] && M=8 v=2 extra=(--virtual-stages 2)
  trace="$dir/11_$schedule.json"
  # A run whose own checks fail still writes its trace: read it all the same, so that this
  # script's order (derived apart from the lesson's code) is compared too.
  if ! "$lesson" --ranks "$P" --microbatches "$M" --batch 48 --steps 1 --schedule "$schedule" \
    "${extra[@]}" --no-sweep --trace "$trace" >/dev/null; then
    echo "lesson11_trace: $schedule: the lesson's own checks failed" >&2
    fail=1
  fi
  for ((r = 0; r < P; ++r)); do
    order=$(spans "$trace" | awk -v pid=$((r + 1)) -v v=$v '$1 == pid {
      printf "%s%s%s ", $3, $4, (v > 1 ? "." $5 : "") } END { print "" }')
    derive "$r" "$M" "$v"
    if [[ "$order" == "$want" ]]; then echo "ok: $schedule stage $r: $order"
    else echo "lesson11_trace: $schedule stage $r ran $order, its schedule is $want" >&2; fail=1; fi
  done
  # Phase args: "backward-input m" on pid p says {"op":"backward-input","micro":m,"stage":p-1},
  # with "chunk":c after it when the name has one; "update" {"op":"update","stage":p-1}.
  bad=$(grep -E "\"name\":\"($pass_re|update)\",\"cat\":\"compute\"" "$trace" |
    perl -ne 'my ($kind, $m, $c) = /"name":"([a-z-]+) ?(\d*)(?: chunk (\d+))?"/;
      my ($pid) = /"pid":(\d+),/;
      my ($op, $am, $stage, $ac) = /"args":\{"op":"([a-z-]+)",(?:"micro":(\d+),)?"stage":(\d+)(?:,"chunk":(\d+))?\}/;
      my $ok = defined $op && $op eq $kind && $stage == $pid - 1 &&
        ($kind eq "update" ? !defined $am && !defined $ac
                           : defined $am && $am == $m && ($c // -1) == ($ac // -1));
      print unless $ok' | head -3)
  phases=$(grep -cE "\"name\":\"($pass_re|update)\",\"cat\":\"compute\"" "$trace")
  per_stage=$((2 * M * v + 1))
  [[ $schedule == zb-h1 ]] && per_stage=$((3 * M + 1))
  if [[ -z "$bad" && $phases -eq $((P * per_stage)) ]]; then echo "ok: $schedule: $phases phases say what they are"
  else echo "lesson11_trace: $schedule: $phases phases; without the right args: ${bad:-none}" >&2; fail=1; fi
  want_meta="\"pipeline\":{\"schedule\":\"$schedule\",\"stages\":$P,\"microbatches\":$M,\"chunks\":$v,\"iterations\":1,"
  if grep -qF "$want_meta" "$trace"; then echo "ok: $schedule: otherData.pipeline"
  else echo "lesson11_trace: $schedule: no $want_meta... in otherData" >&2; fail=1; fi
done
exit $fail
