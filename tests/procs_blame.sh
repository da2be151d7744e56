#!/usr/bin/env bash
# procs_blame.sh PROCS_SH — the launcher names the rank a signal ended, not the peer that failed
# because of it, whatever order it reaps them in. The launcher is stopped (SIGSTOP) while rank 2
# is killed (SIGKILL) and then rank 1, seeing it gone, exits 1; continued, it finds both ended at
# once, and bash hands it rank 1's status first (its older job). It must still say rank 2 was
# killed, exit 137 (128 + SIGKILL) and stop the other two.
set -u
procs="$1"
fail() { echo "procs_blame: $*" >&2; exit 1; }
# shellcheck source=tests/launcher_verdict.sh
source "$(dirname "${BASH_SOURCE[0]}")/launcher_verdict.sh"
dir=$(mktemp -d)
trap 'kill -CONT "$launcher" 2>/dev/null; rm -rf "$dir"' EXIT

# A rank: writes its pid, then rank 2 waits for "kill" and rank 1 for "fail"; the others sleep.
cat >"$dir/rank.sh" <<'RANK'
#!/usr/bin/env bash
echo $$ >"$RANKS/pid.$DISTLAB_RANK.tmp" && mv "$RANKS/pid.$DISTLAB_RANK.tmp" "$RANKS/pid.$DISTLAB_RANK"
case $DISTLAB_RANK in
  1) until [[ -e $RANKS/fail ]]; do sleep 0.01; done; echo "rank 1: lost rank 2" >&2; exit 1 ;;
  2) until [[ -e $RANKS/kill ]]; do sleep 0.01; done; kill -KILL $$ ;;
  *) sleep 60 ;;
esac
RANK
chmod +x "$dir/rank.sh"
state() { awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null; }
# until_state PID PATTERN WHAT: waits until PID's state matches PATTERN (60 s at most: a loaded
# machine is slow, never wrong).
until_state() {
  local deadline=$((SECONDS + 60))
  until [[ "$(state "$1")" == $2 ]]; do
    ((SECONDS < deadline)) || fail "$3 (process $1, state '$(state "$1")')"
    sleep 0.01
  done
}
until_zombie() {  # PID: it has ended and is not reaped (its parent, the launcher, is stopped)
  until_state "$1" Z "process $1 did not end, or was reaped"
}

RANKS=$dir bash "$procs" 4 "$dir/rank.sh" >"$dir/log" 2>&1 &
launcher=$!
for r in 0 1 2 3; do
  for _ in $(seq 1 6000); do [[ -s $dir/pid.$r ]] && break; sleep 0.01; done
  [[ -s $dir/pid.$r ]] || fail "rank $r never started"
done
kill -STOP "$launcher"
# Stopped for sure before rank 2 dies: a SIGSTOP still pending while the launcher sits in wait
# would let it reap rank 2 first (the kernel finishes the wait, then stops it).
until_state "$launcher" "[tT]" "the launcher did not stop"
touch "$dir/kill"
until_zombie "$(cat "$dir/pid.2")"
touch "$dir/fail"
until_zombie "$(cat "$dir/pid.1")"
kill -CONT "$launcher"
wait "$launcher"
expect_rank2_killed $? "$dir/log"
for r in 0 3; do
  [[ -z "$(state "$(cat "$dir/pid.$r")")" ]] || fail "rank $r was left running"
done
echo "procs_blame: ok"
