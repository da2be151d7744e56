#!/usr/bin/env bash
# run_gpu.sh PROBE -- COMMAND...
#   Runs COMMAND when a CUDA device answers (PROBE --probe exits 0); otherwise prints why and
#   exits 77, which the gpu-labelled tests declare as SKIP_RETURN_CODE: CTest reports them
#   skipped, never passed.
set -u
probe="$1"
shift 2
if ! "$probe" --probe; then
  exit 77
fi
exec "$@"
