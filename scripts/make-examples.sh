#!/usr/bin/env bash
# Regenerates traces/examples/: one small trace per lesson (4 in-process ranks, small
# buffers), each checked by the core loader. Run after ./distlab build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="build/${DISTLAB_PRESET:-release}"
out=traces/examples
mkdir -p "$out"
for dir in lessons/[0-9][0-9]_*/; do
  name=$(basename "$dir")
  exe="$build/lessons/$name"
  [[ -x "$exe" ]] || { echo "skip $name (not built)"; continue; }
  args=(--ranks 4 --size 4K)
  [[ "$name" == 01_send_recv ]] && args=(--ranks 2 --size 1M --calibration "")
  [[ "$name" == 05_parameter_server ]] && args=(--ranks 4 --steps 5)  # 1 server, 3 workers, 5 iterations
  [[ "$name" == 00_why_distributed ]] && args=(--ranks 4)  # arithmetic, then a gather of the figures into r0
  # ZeRO-1/2/3: --size is hidden units there; the default 16 -> 64 -> 64 -> 8 MLP, 5 steps
  [[ "$name" == 08_zero1 || "$name" == 09_zero2 || "$name" == 10_zero3_fsdp ]] && args=(--ranks 4)
  "$exe" "${args[@]}" --trace "$out/$name.json" >/dev/null
  "$build/tests/distlab_trace_check" "$out/$name.json" --verified
  size=$(stat -c %s "$out/$name.json")
  ((size < 1000000)) || { echo "$out/$name.json is $size bytes: examples must stay under 1 MB" >&2; exit 1; }
done
