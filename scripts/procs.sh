#!/usr/bin/env bash
# procs.sh N EXE [options] — distlab's launcher: N processes of EXE on this machine, started the
# way torchrun starts them (./distlab lesson NN --procs N and ./distlab bench --procs N call it).
#
# Each process finds its rank and the world size in the environment (DISTLAB_RANK,
# DISTLAB_LOCAL_RANK, DISTLAB_WORLD_SIZE) and a rendezvous folder in DISTLAB_STORE (Gloo's file
# store: each rank writes its address there and reads the others'), made here and removed after
# the run (and /dev/shm/<its name>, the segment of a run with --transport shm, should a rank die
# before unlinking it). DISTLAB_HOST, when set, is the address every rank binds to (127.0.0.1 otherwise).
# When a process fails or dies the others are stopped (SIGTERM, then SIGKILL after 5 s), one line
# says which rank ended how, and the run ends with that rank's status (128 + N for signal N).
# Status 2 (bad options: every rank finds the same fault, rank 0 says it) lets them end alone.
# Ctrl-C stops them all and removes the folder. DISTLAB_PROCS_AGENT, when set, is a command each
# rank is started through, as `AGENT RANK EXE [options]` (scripts/cluster.sh: a rank in its
# network namespace, bound to its address).
set -euo pipefail

np="${1:-}"
[[ "$np" =~ ^[1-9][0-9]*$ ]] || { echo "usage: procs.sh N EXE [options]" >&2; exit 2; }
exe="${2:-}"
[[ -x "$exe" ]] || { echo "procs.sh: '$exe' is not an executable" >&2; exit 2; }
shift 2

store=$(mktemp -d "${TMPDIR:-/tmp}/distlab-store.XXXXXX")
pids=()
agent=()
[[ -n "${DISTLAB_PROCS_AGENT:-}" ]] && read -r -a agent <<<"$DISTLAB_PROCS_AGENT"
for ((r = 0; r < np; r++)); do
  start=("$exe")
  ((${#agent[@]})) && start=("${agent[@]}" "$r" "$exe")
  DISTLAB_RANK=$r DISTLAB_LOCAL_RANK=$r DISTLAB_WORLD_SIZE=$np DISTLAB_STORE="$store" \
    "${start[@]}" "$@" &
  pids+=($!)
done

# shellcheck disable=SC2317  # called from the trap too
stop_all() {
  local p i
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for ((i = 0; i < 50; i++)); do
    kill -0 "${pids[@]}" 2>/dev/null || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
}
# What a run leaves: the folder, and under --transport shm the segment named after it, which the
# ranks unlink once all have mapped it (so it is there only when one died before that).
clean_up() { rm -rf "$store" "/dev/shm/${store##*/}"; }
trap 'stop_all; clean_up; exit 130' INT TERM

left=$np code=0 failed=-1 reaped=()
# reap R: collects rank R's status (its process has ended) into st, once.
reap() {
  st=0
  wait "${pids[$1]}" || st=$?
  reaped[$1]=1
  left=$((left - 1))
}
while ((left > 0)); do
  done_pid="" done_rank=-1 status=0
  wait -n -p done_pid || status=$?
  [[ -n "${done_pid:-}" ]] || break  # no child left
  left=$((left - 1))
  for ((r = 0; r < np; r++)); do [[ "${pids[r]}" == "$done_pid" ]] && reaped[r]=1 && done_rank=$r; done
  ((status == 0 || failed >= 0)) && continue
  failed=$done_rank
  # The first failure reaped may be a consequence: a peer that saw its connection break when
  # another rank was killed, and that the scheduler let end first. A rank ended by a signal is
  # the cause and the one named: a zombie not yet reaped, one bash reaped already (its status kept
  # for `wait`), or one a moment from either; the others are looked at for half a second.
  for ((i = 0; i < 10 && status <= 128; i++)); do
    ((i)) && sleep 0.05
    for ((r = 0; r < np; r++)); do
      [[ -z "${reaped[r]:-}" ]] || continue
      state=$(awk '{ print $3 }' "/proc/${pids[r]}/stat" 2>/dev/null || true)
      [[ -z "$state" || "$state" == Z ]] || continue  # still running
      reap "$r"
      if ((st > 128 && status <= 128)); then failed=$r status=$st; fi
    done
  done
  code=$status
  how="exited with status $status"
  if ((status > 128)); then
    how="was killed by signal $((status - 128)) ($(kill -l $((status - 128)) 2>/dev/null || echo '?'))"
  fi
  if ((status == 2)); then
    # A usage error: every rank reached the same verdict and rank 0 says it. Let them end so.
    for ((i = 0; i < 50; i++)); do
      kill -0 "${pids[@]}" 2>/dev/null || break
      sleep 0.1
    done
  else
    echo "distlab: rank $failed of $np $how; stopping the others (one process down ends the run)" >&2
  fi
  stop_all
done
wait 2>/dev/null || true
trap - INT TERM
clean_up
exit "$code"
