#!/usr/bin/env bash
# gloo_launcher.sh PROCS_SH LESSON_EXE [TRANSPORT] — distlab's launcher (scripts/procs.sh) when a
# process dies: rank 2 of 4 is killed (SIGKILL) in the middle of a run over Gloo (or TRANSPORT:
# shm); the launcher must stop the others, say which rank ended how, exit with its status (137),
# leave no process behind and remove its rendezvous folder, and nothing in /dev/shm. Under shm,
# a rank is also killed as soon as it starts, which may be before the ranks unlinked their
# segment. Then a rank that fails (--deadlock-timeout 0 is refused on every rank, exit 2) ends
# the run with exit 2 and the rank's own sentence.
set -u
procs="$1" exe="$2" transport="${3:-gloo}"
fail() { echo "gloo_launcher: $*" >&2; exit 1; }
# shellcheck source=tests/launcher_verdict.sh
source "$(dirname "${BASH_SOURCE[0]}")/launcher_verdict.sh"
export TMPDIR
TMPDIR=$(mktemp -d)
trap 'rm -rf "$TMPDIR"' EXIT

log="$TMPDIR/run.log"
mark="$TMPDIR/mark"
touch "$mark"
# kill_rank2 WAIT_S: starts a run, kills rank 2 WAIT_S seconds after all four have started.
# Every algorithm on 16M: seconds long on any machine, so the kill lands mid-run (one ring on 4M
# could end within the half second on a fast one).
run=(--size 16M)
kill_rank2() {
bash "$procs" 4 "$exe" --transport "$transport" --no-trace "${run[@]}" >"$log" 2>&1 &
launcher=$!
# Rank 2's process: the one whose environment says DISTLAB_RANK=2 (the launcher's children).
victim="" ranks=()
deadline=$((SECONDS + 60))  # a loaded machine starts them slowly, never wrongly
while ((SECONDS < deadline)); do
  mapfile -t ranks < <(pgrep -P "$launcher" 2>/dev/null)
  for pid in "${ranks[@]}"; do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "DISTLAB_RANK=2" && victim=$pid
  done
  [[ -n "$victim" ]] && ((${#ranks[@]} == 4)) && break
  sleep 0.05
done
[[ -n "$victim" ]] || fail "rank 2 never started"
sleep "$1"
kill -KILL "$victim"
start=$SECONDS
wait "$launcher"
expect_rank2_killed $? "$log"
((SECONDS - start <= 15)) || fail "the others took $((SECONDS - start)) s to stop"
for pid in "${ranks[@]}"; do
  kill -0 "$pid" 2>/dev/null && fail "rank process $pid was left behind"
done
compgen -G "$TMPDIR/distlab-store.*" >/dev/null && fail "the rendezvous folder was not removed"
left=$(find /dev/shm -maxdepth 1 -name 'distlab-*' -newer "$mark")
[[ -z "$left" ]] || fail "left in /dev/shm: $left"
}
kill_rank2 0.5  # connected and moving data
[[ "$transport" == shm ]] && kill_rank2 0  # perhaps before the segment was unlinked

bash "$procs" 3 "$exe" --transport "$transport" --no-trace --deadlock-timeout 0 >"$log" 2>&1
rc=$?
cat "$log"
((rc == 2)) || fail "a usage error exited $rc, expected 2"
grep -q "deadlock-timeout must be a positive number" "$log" || fail "the rank's sentence is missing"
echo "gloo_launcher: ok"
