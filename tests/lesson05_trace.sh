#!/usr/bin/env bash
# lesson05_trace.sh LESSON TRACE: lesson 05's trace shows the five phases of every iteration on
# the ranks that run them, the loss counter once per iteration, and the server's hotspot (every
# exchange message starts or ends at rank 0). 4 ranks: 1 server, 3 workers, 3 iterations.
set -euo pipefail
lesson="$1" trace="$2"
"$lesson" --ranks 4 --steps 3 --trace "$trace" >/dev/null
count() { grep -c -- "$1" "$trace" || true; }  # the trace has one event per line
fail=0
expect() {  # expect WHAT PATTERN COUNT
  local got
  got=$(count "$2")
  if [[ "$got" != "$3" ]]; then echo "lesson05_trace: $1: $got, expected $3" >&2; fail=1; else echo "ok: $1: $got"; fi
}
expect "pull spans (4 ranks x 3 iterations + the final pull)" '"name":"1 pull","cat":"compute"' 16
expect "split spans (3 workers x 3)" '"name":"2 split data","cat":"compute"' 9
expect "compute spans (3 workers x 3)" '"name":"3 compute gradients","cat":"compute"' 9
expect "push & sum spans (4 ranks x 3)" '"name":"4 push & sum","cat":"compute"' 12
expect "update spans (the server x 3)" '"name":"5 update","cat":"compute"' 3
expect "loss counter samples (one per iteration)" '"ph":"C","name":"loss"' 3
# The hotspot: every pull leaves the server (pid 1) and every push arrives there.
expect "pulls the server sends (3 workers x 4 pulls)" '"name":"send","cat":"send","pid":1,.*"tag":1500,' 12
expect "pulls in all" '"name":"send",.*"tag":1500,' 12
expect "pushes the server receives (3 workers x 3)" '"name":"recv","cat":"recv","pid":1,.*"tag":1510,' 9
expect "pushes in all" '"name":"recv",.*"tag":1510,' 9
exit $fail
