#!/usr/bin/env bash
# shm_left.sh CMD... — runs CMD and exits with its status, or 1 when the run left a segment of
# distlab's in /dev/shm that was not there before (the shared-memory transport unlinks its own
# once every rank has mapped it, and the launcher removes it when a rank dies before that).
set -u
list() { find /dev/shm -maxdepth 1 -name 'distlab-*' -newer "$mark" 2>/dev/null | sort; }
mark=$(mktemp)
trap 'rm -f "$mark"' EXIT
"$@"
rc=$?
left=$(list)
if [[ -n "$left" ]]; then
  echo "shm_left: the run left in /dev/shm: $left" >&2
  exit 1
fi
exit "$rc"
