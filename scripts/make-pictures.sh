#!/usr/bin/env bash
# Renders the README pictures from the example traces with distlab-viewer --png (no display
# needed): docs/pictures/NN_name.png, one per lesson, at a moment that shows its algorithm
# moving. Run after ./distlab build (and scripts/make-examples.sh when the traces change).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
viewer="build/${DISTLAB_PRESET:-release}/viewer/distlab-viewer"
[[ -x "$viewer" ]] || { echo "build distlab-viewer first: ./distlab build" >&2; exit 2; }
out=docs/pictures
mkdir -p "$out"

# lesson -> the step to show (2.5: halfway through the third step)
declare -A step=(
  [00_why_distributed]=1.5
  [01_send_recv]=3.5
  [02_scatter_gather]=2.5
  [03_reduce_broadcast]=8.5
  [04_allreduce_allgather]=8.5
  [05_parameter_server]=4.5
  [06_allreduce_sequential_ring_parallel]=15.5
  [07_recursive_halving]=3.5
  [08_zero1]=4.5        # reduce-scatter done, the new weights' all-gather on the ring
  [09_zero2]=5.5        # backward: layer L1's gradient reduce-scattered, its full gradient on the ledger
  [10_zero3_fsdp]=5.5   # forward: layer L1's weights all-gathered, the params bar up by one layer
)
for trace in traces/examples/[0-9][0-9]_*.json; do
  name=$(basename "${trace%.json}")
  "$viewer" --png "$out/$name.png" --step "${step[$name]:-1.5}" --width 1600 --height 900 "$trace"
done
# Panels on their own, for the main README.
"$viewer" --png "$out/ring_topology.png" --panel topology --step 15.5 --width 640 --height 480 \
  traces/examples/06_allreduce_sequential_ring_parallel.json
"$viewer" --png "$out/ring_shards.png" --panel shards --step 15.5 --width 640 --height 480 \
  traces/examples/06_allreduce_sequential_ring_parallel.json
