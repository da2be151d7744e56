#!/usr/bin/env bash
# breaks.sh LESSON_DIR [README]: every lesson's --break variants are caught by the lesson's own
# checks, and README's table of them (rows "| NN | `name` |") names exactly the same variants.
#
# The table below is the oracle: for each variant, the arguments it needs and the check that must
# fail (its name, as printed after "check failed on rK: "). Each run must exit 1, end with the
# FAILED line, print that check among the failed ones and say the break was caught. Every
# lesson's `--break list` must name exactly the variants in the table (a new variant without a
# row here fails), and an unknown name must be refused with exit 2.
set -uo pipefail
dir="$1" readme="${2:-}"
table=(
  "03_reduce_broadcast|reduce-forget-root||reduce: the root holds the sum of every rank's input"
  "05_parameter_server|sum-not-mean||iteration 1: the summed gradient is the batch's mean gradient"
  "05_parameter_server|sum-not-mean|--optimizer adam|iteration 1: the summed gradient is the batch's mean gradient"
  "06_allreduce_sequential_ring_parallel|ring-resend-own|--algo ring|ring: I hold the sum over every rank"
  "06_allreduce_sequential_ring_parallel|parallel-one-send-at-a-time|--algo parallel|parallel: sends in flight on this rank = N-1"
  "06_allreduce_sequential_ring_parallel|ring-one-step-short|--algo ring_chunked|ring_chunked: I hold the sum over every rank"
  "07_recursive_halving|doubling-one-step-short|--algo recursive_doubling|recursive_doubling: I hold the sum over every rank"
  "08_zero1|skip-gradient-reduce-scatter||step 1: my part of the summed gradient is the reference's"
  "09_zero2|keep-full-gradients||model state after the last step = 2 + 14/N bytes per parameter"
  "10_zero3_fsdp|skip-backward-gather||step 1: my part of the summed gradient is the reference's"
  "10_zero3_fsdp|keep-gathered-weights||peak of the parameters = my shards + one layer's gathered weights"
  "11_pipeline_microbatching|no-grad-accumulation|--no-sweep|step 1's gradient (summed over 4 micro-batches) equals the reference's"
  "11_pipeline_microbatching|warmup-one-long|--schedule 1f1b --microbatches 8 --no-sweep|1F1B: stage r holds at most min(P - r, M) micro-batches' activations (the schedule's formula)"
  "11_pipeline_microbatching|skip-put-off-weights|--schedule zb-h1 --microbatches 8 --no-sweep|stage 1: step 1's gradient (summed over 8 micro-batches) equals the reference's"
  "12_tensor_parallel_mlp|no-g-allreduce||Y equals the unsplit layer's"
  "12_tensor_parallel_mlp|bias-before-g||Y equals the unsplit layer's"
  "12_tensor_parallel_mlp|skip-replicated-allreduce|--sequence-parallel|dgamma equals the unsplit layer's"
  "13_tensor_parallel_attention|wo-split-by-columns||Y equals the unsplit layer's"
  "13_tensor_parallel_attention|skip-replicated-allreduce|--sequence-parallel|dgamma equals the unsplit layer's"
  "14_capstone_3d_parallel|dp-over-tp||dp 0 pp 0 tp 0: step 1's gradient equals one device's"
  "14_capstone_3d_parallel|stage-skips-sync||dp 0 pp 1 tp 0: step 1's gradient equals one device's"
  "15_trees_hierarchy_alltoall|hierarchical-skip-across|--algo hierarchical --size 1000|hierarchical: I hold the sum over every rank"
  "16_overlap_bucketing|bucket-misses-a-layer|--no-zero3 --sweep 16K|buckets of 16.0 KiB: my master weights equal no buckets's bit for bit"
  "15_trees_hierarchy_alltoall|bruck-skip-unrotate|--algo tree --size 1000|all_to_all_bruck delivers what the pairwise exchange does"
  "17_context_parallel|no-rescale||O of my tokens equals the unsplit layer's"
  "17_context_parallel|zigzag-drop-block|--causal|the split holds every token exactly once"
  "17_context_parallel|grads-one-hop-short||dK of my tokens equals the unsplit layer's"
  "18_expert_parallel|combine-skips-gate||Y (my 32 tokens) equals the single-device MoE's"
  "18_expert_parallel|router-bottom-k|--top-k 2|each of my tokens went to its top 2 experts by the float64 gates"
  "18_expert_parallel|router-ignores-gate|--top-k 2|router dW_r (all-reduced) equals the single-device MoE's"
  "18_expert_parallel|slots-by-token|--top-k 2|from each rank, each expert keeps its first cap choices, first choices first"
  "19_activations_recompute|stale-input|--recompute full|the step's gradient equals one device's in float64"
  "19_activations_recompute|gelu-in-place||the step's gradient equals one device's in float64"
  "19_activations_recompute|stale-input|--recompute full --sequence-parallel|the step's gradient equals one device's in float64"
  "20_mixed_precision|scale-never-lowered|--recipe fp16|each skip and loss scale by the rule"
  "20_mixed_precision|forget-unscale|--recipe fp16|each step's gradient into Adam equals float64's"
  "20_mixed_precision|fp16-master|--recipe bf16|each Adam step equals float64's from its own state"
  "21_symmetric_memory|flag-before-data|--algo one_shot|one_shot: the sum equals the float32 rank-order sum bit for bit and the float64 sum within (N-1) 2^-24"
  "21_symmetric_memory|stale-flag|--algo one_shot_ll|one_shot_ll: the sum equals the float32 rank-order sum bit for bit and the float64 sum within (N-1) 2^-24"
  "21_symmetric_memory|two-shot-early-read|--algo two_shot|two_shot: the sum equals the float32 rank-order sum bit for bit and the float64 sum within (N-1) 2^-24"
)
fail=0
bad() { echo "breaks: $*" >&2; fail=1; }

declare -A listed  # lesson -> its variants in the table, one per line
for row in "${table[@]}"; do
  IFS='|' read -r lesson name args want <<<"$row"
  [[ "${listed[$lesson]:-}" == *"$name"* ]] || listed[$lesson]+="$name"$'\n'
  # shellcheck disable=SC2086  # args are words
  out=$(timeout 300 "$dir/$lesson" --no-trace --break "$name" $args 2>&1)
  rc=$?
  what="$lesson --break $name $args"
  ((rc == 1)) || { bad "$what: exit $rc, expected 1"; continue; }
  tail -n 1 <<<"$out" | grep -qE "^lesson [0-9]+ [a-z0-9_]+: FAILED" ||
    bad "$what: the last line is not the FAILED verdict: $(tail -n 1 <<<"$out")"
  # Into a variable first: `grep -q` at the end of a pipe stops reading at its first match, and
  # under pipefail the writer's SIGPIPE then fails the pipe when the failed checks are many.
  failed=$(grep -E '^check failed on r[0-9]+: ' <<<"$out" | sed -E 's/^check failed on r[0-9]+: //')
  grep -qF -- "$want" <<<"$failed" || bad "$what: no failed check named '$want'"
  grep -qxF -- "--break $name: caught, by the failed checks above" <<<"$out" ||
    bad "$what: does not say the break was caught"
  ((fail)) || echo "ok: $what -> check failed: $want"
done

lessons=0 variants=0
for exe in "$dir"/[0-9][0-9]_*; do
  [[ -x "$exe" && -f "$exe" ]] || continue
  lesson=$(basename "$exe")
  names=$("$exe" --break list) || { bad "$lesson --break list: exit $?"; continue; }
  want=$(printf '%s' "${listed[$lesson]:-}")
  [[ "$(sort <<<"$names")" == "$(sort <<<"$want")" ]] ||
    bad "$lesson --break list says [$(tr '\n' ' ' <<<"$names")], the table [$(tr '\n' ' ' <<<"$want")]"
  "$exe" --no-trace --break no-such-bug >/dev/null 2>&1
  rc=$?
  ((rc == 2)) || bad "$lesson --break no-such-bug: exit $rc, expected 2"
  if [[ -n "$names" ]]; then
    lessons=$((lessons + 1))
    variants=$((variants + $(wc -l <<<"$names")))
  fi
done
if [[ -n "$readme" ]]; then
  documented=$(grep -oE '^\| [0-9]{2} \| `[a-z0-9-]+` \|' "$readme" | sed -E 's/^\| ([0-9]{2}) \| `([a-z0-9-]+)`.*/\1 \2/' | sort -u)
  tested=$(for row in "${table[@]}"; do IFS='|' read -r lesson name _ <<<"$row"; echo "${lesson:0:2} $name"; done | sort -u)
  [[ "$documented" == "$tested" ]] ||
    bad "$readme's --break table [$(tr '\n' ',' <<<"$documented")] differs from the tested [$(tr '\n' ',' <<<"$tested")]"
fi
echo "breaks: $variants variants in $lessons lessons"
((lessons >= 8 && variants >= 10)) || bad "fewer than 10 variants in 8 lessons"
exit $fail
