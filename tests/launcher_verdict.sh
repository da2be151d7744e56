# shellcheck shell=bash
# launcher_verdict.sh — sourced by the launcher's tests (gloo_launcher.sh, procs_blame.sh), which
# define fail(). expect_rank2_killed RC LOG: the launcher (scripts/procs.sh) exited with rank 2's
# SIGKILL (137) and its log says so.
expect_rank2_killed() {
  cat "$2"
  (($1 == 137)) || fail "the launcher exited $1, expected 137 (rank 2's SIGKILL)"
  grep -q "distlab: rank 2 of 4 was killed by signal 9 (KILL); stopping the others" "$2" ||
    fail "no line says rank 2 was killed"
}
