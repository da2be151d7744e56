#!/usr/bin/env bash
# run_gpu.sh PROBE -- COMMAND...
#   Runs COMMAND when a CUDA device answers (PROBE --probe exits 0). Where none does (exit 77)
#   it prints why and exits 77, which the gpu-labelled tests declare as SKIP_RETURN_CODE: CTest
#   reports them skipped, never passed. Any other probe exit (CUDA that does not start, a
#   library the loader cannot find) is a failure, reported as what it is.
set -u
probe="$1"
shift 2
"$probe" --probe
rc=$?
case $rc in
  0) exec "$@" ;;
  77) exit 77 ;;
  *) echo "run_gpu.sh: the GPU probe failed with exit $rc (not 'no device'): see its message above" >&2
     exit "$rc" ;;
esac
