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
  [11_pipeline_microbatching]=6.5  # GPipe: the last stage's first backward (B3) on its way to r2; the bubble
  # tensor parallelism: 12 ring steps, g's all-reduce in forward (1-6), f's in backward (7-12)
  [12_tensor_parallel_mlp]=2.5        # forward: g's reduce-scatter, its last step; no gradients on the ledger yet
  [13_tensor_parallel_attention]=8.5  # backward: f's reduce-scatter, its last step; Y (g) already whole everywhere
  [14_capstone_3d_parallel]=17.5      # 1F1B's steady state: stage 0 forwards micro-batch 2 (tp), stage 1 sends a gradient back (pp)
  [15_trees_hierarchy_alltoall]=9.5   # the double binary tree's reduce: segments climb both trees at once
  [16_overlap_bucketing]=18.5         # buckets of 16 KiB: bucket 2's all-gather under the backward
  [17_context_parallel]=2.5           # ring attention's forward: the K/V chunks' second hop, each rank's tiles in the captions
  [18_expert_parallel]=1.5            # the dispatch's second step: each rank's block to the rank two ahead
  [19_activations_recompute]=7.5      # selective's forward: g's all-gather, the activations on the ledger rising
  [20_mixed_precision]=14.5           # fp16: its loss scale climbing in the Timeline's track; 2 + 2 + 12 B per parameter
  [21_symmetric_memory]=2.5           # one-shot's second call: every rank loads from every window (dashed: no messages)
)
for trace in traces/examples/[0-9][0-9]_*.json; do
  name=$(basename "${trace%.json}")
  [[ -d "lessons/$name" ]] || continue  # a lesson's extra traces (other options) get theirs below
  "$viewer" --png "$out/$name.png" --step "${step[$name]:-1.5}" --width 1600 --height 900 "$trace"
done
# Lesson 15: the hierarchical all-reduce's step between the two nodes of 4 (r ^ 4), and the
# pairwise all-to-all's dispatch buffer filling a block a step.
"$viewer" --png "$out/15_hierarchy.png" --panel topology --step 21.5 --width 640 --height 480 \
  traces/examples/15_trees_hierarchy_alltoall.json
"$viewer" --png "$out/15_alltoall.png" --panel shards --step 46.5 --width 800 --height 560 \
  traces/examples/15_trees_hierarchy_alltoall.json
# Lesson 16: the timeline alone, the buckets' messages hatched where they ran under the backward.
"$viewer" --png "$out/16_overlap.png" --panel timeline --step 18.5 --width 1600 --height 480 \
  --font-size 13 traces/examples/16_overlap_bucketing.json
# Lesson 17: dK,dV on their way home in the backward pass (each chunk's count of ranks summed in),
# and the contiguous split's causal work, rank by rank, in the Topology panel's captions.
"$viewer" --png "$out/17_shards.png" --panel shards --step 6.5 --width 800 --height 400 \
  traces/examples/17_context_parallel.json
"$viewer" --png "$out/17_contiguous_topology.png" --panel topology --step 2.5 --width 720 --height 480 \
  traces/examples/17_context_parallel_contiguous.json
# Lesson 19: the Memory panel alone, with its strip of rank 0's activations over the run (each
# setting's rise through forward and fall through backward), in full recompute's backward.
"$viewer" --png "$out/19_memory.png" --panel memory --step 40.5 --width 900 --height 480 \
  traces/examples/19_activations_recompute.json
# Panels on their own, for the main README.
"$viewer" --png "$out/ring_topology.png" --panel topology --step 15.5 --width 640 --height 480 \
  traces/examples/06_allreduce_sequential_ring_parallel.json
"$viewer" --png "$out/ring_shards.png" --panel shards --step 15.5 --width 640 --height 480 \
  traces/examples/06_allreduce_sequential_ring_parallel.json
# Lesson 11: the timeline alone is the pipeline diagram; one per schedule, at the moment the last
# stage sends its first backward (naive step 4, GPipe step 7, 1F1B step 5 of each training step).
for schedule in naive:3.5 gpipe:6.5 1f1b:4.5; do
  trace=traces/examples/11_pipeline_microbatching.json
  [[ "${schedule%:*}" == gpipe ]] || trace=traces/examples/11_pipeline_microbatching_${schedule%:*}.json
  "$viewer" --png "$out/11_timeline_${schedule%:*}.png" --panel timeline --step "${schedule#*:}" \
    --width 1600 --height 480 --font-size 13 "$trace"
done
# The Schedule panel: GPipe above 1F1B on the ideal machine (docs/viewer.md, lesson 11's README).
"$viewer" --png "$out/schedule.png" --panel schedule --compare --step 9.5 --width 1200 --height 760 \
  traces/examples/11_pipeline_microbatching.json traces/examples/11_pipeline_microbatching_1f1b.json
# Beyond the lecture: 1F1B above zero bubble, and 1F1B above interleaved (v = 2), P = M = 4 each,
# on one time axis (a unit is a stage's forward).
"$viewer" --png "$out/11_schedule_zb_h1.png" --panel schedule --compare --step 9.5 --width 1200 \
  --height 760 traces/examples/11_pipeline_microbatching_1f1b.json \
  traces/examples/11_pipeline_microbatching_zb_h1.json
"$viewer" --png "$out/11_schedule_interleaved.png" --panel schedule --compare --step 9.5 \
  --width 1200 --height 760 traces/examples/11_pipeline_microbatching_1f1b.json \
  traces/examples/11_pipeline_microbatching_interleaved.json
# Lesson 12 with sequence parallelism: f's all-gather of LN(X)'s rows running (step 2.5).
"$viewer" --png "$out/12_sp_splits.png" --panel splits --step 2.5 --width 1100 --height 500 \
  traces/examples/12_tensor_parallel_mlp_sp.json
# Lesson 13 likewise: g's reduce-scatter of the partial Y into each rank's rows of O (step 3.5).
"$viewer" --png "$out/13_sp_splits.png" --panel splits --step 3.5 --width 1100 --height 560 \
  traces/examples/13_tensor_parallel_attention_sp.json
# Lessons 12 and 13: the Shards panel alone at the other all-reduce, so that each README shows both:
# f in backward (step 8.5) for the MLP, g in forward (step 2.5) for attention.
"$viewer" --png "$out/12_shards_f.png" --panel shards --step 8.5 --width 800 --height 340 \
  traces/examples/12_tensor_parallel_mlp.json
"$viewer" --png "$out/13_shards_g.png" --panel shards --step 2.5 --width 800 --height 340 \
  traces/examples/13_tensor_parallel_attention.json
# ZeRO's three stages and plain data parallel side by side, from the three ZeRO traces at once;
# lesson 05's star, servers in the middle, as the second iteration's gradients fly in.
"$viewer" --png "$out/memory-compare.png" --panel memory-compare --width 1200 --height 560 \
  traces/examples/08_zero1.json traces/examples/09_zero2.json traces/examples/10_zero3_fsdp.json
"$viewer" --png "$out/parameter-server.png" --panel topology --step 5.5 --width 800 --height 720 \
  traces/examples/05_parameter_server.json
# The Splits panel alone (docs/viewer.md, lessons 12 and 13): g lit in forward, f in backward.
"$viewer" --png "$out/splits.png" --panel splits --step 2.5 --width 960 --height 520 \
  traces/examples/12_tensor_parallel_mlp.json
"$viewer" --png "$out/13_splits.png" --panel splits --step 8.5 --width 960 --height 520 \
  traces/examples/13_tensor_parallel_attention.json
# The step's caption above lesson 08's ring (docs/viewer.md, "Captions").
"$viewer" --png "$out/caption_topology.png" --panel topology --step 2.5 --width 1000 --height 560 \
  traces/examples/08_zero1.json
# Lesson 14: the mesh alone (tp red in the rows, pp violet down the columns, dp cyan across the
# replicas at the step's end), its Schedule panel and its Memory panel against the mesh's formula.
"$viewer" --png "$out/14_topology.png" --panel topology --step 40.5 --width 900 --height 760 \
  traces/examples/14_capstone_3d_parallel.json
"$viewer" --png "$out/14_topology_dp.png" --panel topology --step 54.5 --width 900 --height 760 \
  traces/examples/14_capstone_3d_parallel.json
"$viewer" --png "$out/14_schedule.png" --panel schedule --step 17.5 --width 1000 --height 420 \
  traces/examples/14_capstone_3d_parallel.json
"$viewer" --png "$out/14_memory.png" --panel memory --step 17.5 --width 900 --height 420 \
  traces/examples/14_capstone_3d_parallel.json
# Real runs (docs/viewer.md "Real runs"): PyTorch profiler traces, one per rank. The slow-rank
# run at its second gradient all-reduce (rank 3 last in), and the synthetic 2.x run's Stats
# panel with its bandwidth.
"$viewer" --png "$out/torch_ddp4_slow.png" --step 3 --width 1600 --height 900 traces/torch/ddp4-slow/
"$viewer" --png "$out/torch_pt2_stats.png" --panel stats --step 6 --width 1000 --height 620 \
  traces/torch/pt2-comms/
