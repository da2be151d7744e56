#!/usr/bin/env bash
# Regenerates traces/examples/: one small trace per lesson (4 in-process ranks, small
# buffers), each checked by the core loader. Run after ./distlab build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="build/${DISTLAB_PRESET:-release}"
out=traces/examples
mkdir -p "$out"

# example NAME EXE ARGS...: run EXE ARGS into $out/NAME.json, check it, keep it under 1 MB.
example() {
  local name=$1 exe=$2
  shift 2
  "$exe" "$@" --trace "$out/$name.json" >/dev/null
  "$build/tests/distlab_trace_check" "$out/$name.json" --verified
  local size
  size=$(stat -c %s "$out/$name.json")
  ((size < 1000000)) || { echo "$out/$name.json is $size bytes: examples must stay under 1 MB" >&2; exit 1; }
}

for dir in lessons/[0-9][0-9]_*/; do
  name=$(basename "$dir")
  exe="$build/lessons/$name"
  [[ -x "$exe" ]] || { echo "skip $name (not built)"; continue; }
  args=(--ranks 4 --size 4K)
  [[ "$name" == 01_send_recv ]] && args=(--ranks 2 --size 1M --calibration "")
  [[ "$name" == 05_parameter_server ]] && args=(--ranks 4 --steps 5)  # 1 server, 3 workers, 5 iterations
  [[ "$name" == 00_why_distributed ]] && args=(--ranks 4)  # arithmetic, then a gather of the measurements into r0
  # ZeRO-1/2/3: --size is hidden units there; the default 16 -> 64 -> 64 -> 8 MLP, 5 steps
  [[ "$name" == 08_zero1 || "$name" == 09_zero2 || "$name" == 10_zero3_fsdp ]] && args=(--ranks 4)
  # pipeline: 4 stages of the default MLP (3 hidden layers, 4 Linear: one per stage), 2 steps;
  # the other two schedules below
  [[ "$name" == 11_pipeline_microbatching ]] && args=(--ranks 4 --schedule gpipe)
  # tensor parallelism: --size is not used there; the default block (MLP h = 48, attention 12 heads
  # of 8) split 4 ways
  [[ "$name" == 12_tensor_parallel_mlp || "$name" == 13_tensor_parallel_attention ]] && args=(--ranks 4)
  # the capstone: the default mesh dp 2 x pp 2 x tp 2 and 4 micro-batches, one training step of
  # a smaller GPT (a block per stage, d 32, context 16) to stay under 1 MB
  [[ "$name" == 14_capstone_3d_parallel ]] && args=(--ranks 8 --steps 1 --layers 2 --d 32 --context 16)
  # trees, hierarchy, all-to-all: two nodes of four ranks, so the hierarchical all-reduce has both
  # levels; the sweep is not traced
  [[ "$name" == 15_trees_hierarchy_alltoall ]] && args=(--ranks 8 --ranks-per-node 4 --size 1K --reps 1)
  # overlap: no buckets, buckets of 16K, ZeRO-3 with and without prefetch, one step each
  # (4 layers: with the memory ledger's counters, 6 would pass 1 MB)
  [[ "$name" == 16_overlap_bucketing ]] && args=(--ranks 4 --steps 1 --sweep 16K --bucket-bytes 16K --layers 4)
  # ring attention: causal, the zig-zag split; the contiguous split below, to compare the work
  [[ "$name" == 17_context_parallel ]] && args=(--ranks 4 --causal)
  # expert parallelism: --size is not used there; the default layer (8 experts over 4 ranks, top-1)
  [[ "$name" == 18_expert_parallel ]] && args=(--ranks 4)
  # activations and recomputation: 2 replicas of tp 2, selective recompute first, 2 layers to
  # stay under 1 MB
  [[ "$name" == 19_activations_recompute ]] && args=(--ranks 4 --recompute selective --layers 2)
  # fp16's 16 steps: its loss scale doubling, then an overflow skipped and the scale halved
  [[ "$name" == 20_mixed_precision ]] && args=(--ranks 2 --recipe fp16)
  # symmetric memory: 4 ranks, two calls of each algorithm on 1K floats (PAT's messages too)
  [[ "$name" == 21_symmetric_memory ]] && args=(--ranks 4 --size 1K --calls 2)
  example "$name" "$exe" "${args[@]}"
done

# Lesson 11's other schedules, so that the pipelines can be compared (the README's pictures):
# interleaved over 2 chunks per rank and zero bubble, both with GPipe's and 1F1B's M = 4.
exe="$build/lessons/11_pipeline_microbatching"
if [[ -x "$exe" ]]; then
  example 11_pipeline_microbatching_naive "$exe" --ranks 4 --schedule naive
  example 11_pipeline_microbatching_1f1b "$exe" --ranks 4 --schedule 1f1b
  example 11_pipeline_microbatching_interleaved "$exe" --ranks 4 --schedule interleaved --no-sweep
  example 11_pipeline_microbatching_zb_h1 "$exe" --ranks 4 --schedule zb-h1 --no-sweep
fi
# Lesson 12 with sequence parallelism: the LayerNorm and dropout on each rank's rows.
exe="$build/lessons/12_tensor_parallel_mlp"
[[ -x "$exe" ]] && example 12_tensor_parallel_mlp_sp "$exe" --ranks 4 --sequence-parallel
# Lesson 13 likewise: the attention layer's LayerNorm and dropout on each rank's rows.
exe="$build/lessons/13_tensor_parallel_attention"
[[ -x "$exe" ]] && example 13_tensor_parallel_attention_sp "$exe" --ranks 4 --sequence-parallel
# Lesson 17 with contiguous blocks under the same causal mask: rank 3 computes 4 times rank 0's.
exe="$build/lessons/17_context_parallel"
[[ -x "$exe" ]] && example 17_context_parallel_contiguous "$exe" --ranks 4 --causal --split contiguous
