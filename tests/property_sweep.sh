#!/usr/bin/env bash
# property_sweep.sh LESSON BINARY SEED COUNT
#   Runs BINARY (lesson LESSON: 05, 08-13, 18 or 19) on COUNT valid settings drawn from a
#   generator seeded with SEED: ranks (1 to 8, and 64 with small sizes), sizes, seeds and the
#   lesson's own switches. Every run must exit 0 and print "verified". A run that fails prints
#   its command line, so the setting can be replayed by hand. The same SEED draws the same
#   settings on every machine (bash's RANDOM sequence after RANDOM=SEED).
set -u
lesson="$1" bin="$2" seed="$3" count="$4"
RANDOM=$seed
# Draws go to REPLY, never through $(...): a subshell would not advance (or would reseed) RANDOM.
pick() { REPLY=$(($1 + RANDOM % ($2 - $1 + 1))); }  # an integer in [lo, hi]
one_of() {
  local a=("$@")
  REPLY="${a[RANDOM % ${#a[@]}]}"
}
ranks() { if ((RANDOM % 5 == 0)); then REPLY=64; else pick 1 8; fi; }  # one in five at N = 64
add() { args+=" $1 $REPLY"; }                                        # add OPTION: the last draw

# settings: one valid command line for the lesson, in $args.
settings() {
  local n
  ranks
  n=$REPLY
  args="--ranks $n"
  pick 1 100000 && add --seed
  case "$lesson" in
    05)
      local mode
      one_of ps allreduce
      mode=$REPLY
      ((n == 1)) && mode=allreduce  # a parameter server needs a worker besides its server
      args+=" --mode $mode"
      ((n > 1)) && [[ $mode == ps ]] && pick 1 $(((n - 1) < 4 ? (n - 1) : 4)) && add --servers
      one_of sgd adam && add --optimizer
      pick 1 3 && add --layers
      pick 1 5 && add --steps
      pick 64 96 && add --batch
      pick 1 $((n == 64 ? 16 : 96)) && add --size
      ;;
    08 | 09 | 10)
      pick 1 3 && add --layers
      pick 1 5 && add --steps
      pick 64 96 && add --batch
      pick 1 $((n == 64 ? 32 : 128)) && add --size
      ((RANDOM % 4 == 0)) && args+=" --deterministic"
      ;;
    11)
      local m b schedule
      one_of naive gpipe 1f1b interleaved zb-h1
      schedule=$REPLY
      pick 1 8
      m=$REPLY
      [[ $schedule == naive ]] && m=1  # the whole batch at once
      ((n == 64 && m > 1)) && m=$((m % 2 + 1))
      [[ $schedule == zb-h1 ]] && m=$((n + m - 1))  # at least as many micro-batches as stages
      [[ $schedule == interleaved ]] && m=$((n * m))  # a multiple of the stages
      pick 1 8
      b=$((m * REPLY))
      ((b < n)) && b=$((m * n))
      args+=" --schedule $schedule --batch $b --work-us 0 --sample-us 0 --no-sweep"
      [[ $schedule == naive ]] || args+=" --microbatches $m"
      [[ $schedule == interleaved ]] && pick 2 $((n == 64 ? 2 : 4)) && add --virtual-stages
      pick 1 3 && add --steps
      pick 1 $((n == 64 ? 16 : 64)) && add --size
      ;;
    12)
      # 4h must divide by the ranks: h a multiple of n / gcd(n, 4).
      local unit=$n
      ((n % 4 == 0)) && unit=$((n / 4))
      ((n % 4 == 2)) && unit=$((n / 2))
      pick 1 $((n == 64 ? 1 : 12))
      args+=" --hidden $((unit * REPLY))"
      local b
      pick 1 4
      b=$REPLY
      add --batch
      pick 1 16 && add --seq
      # sequence parallelism, one draw in three, where the batch x seq tokens divide by the ranks
      ((RANDOM % 3 == 0 && (b * REPLY) % n == 0)) && args+=" --sequence-parallel"
      ;;
    13)
      local heads
      pick 1 $((n == 64 ? 1 : 3))
      heads=$((n * REPLY))
      pick 1 8
      args+=" --heads $heads --hidden $((heads * REPLY))"
      local b
      pick 1 3
      b=$REPLY
      add --batch
      pick 1 16 && add --seq
      ((RANDOM % 2 == 0)) && args+=" --causal"
      # sequence parallelism, one draw in three, where the batch x seq tokens divide by the ranks
      ((RANDOM % 3 == 0 && (b * REPLY) % n == 0)) && args+=" --sequence-parallel"
      ;;
    18)
      local e
      pick 1 $((n == 64 ? 1 : 4))
      e=$((n * REPLY))  # the experts split over the ranks
      args+=" --experts $e"
      pick 1 $((e < 4 ? e : 4)) && add --top-k
      one_of 0.3 0.5 1 1.25 2 4 && add --capacity-factor
      pick 1 $((n == 64 ? 8 : 48)) && add --tokens
      pick 1 48 && add --hidden
      pick 1 64 && add --ffn
      one_of pairwise bruck && add --alltoall
      one_of softmax topk && add --gating
      ;;
    19)
      local tp heads ctx b
      pick 1 "$n"
      tp=$REPLY
      while ((n % tp)); do tp=$((tp - 1)); done  # a divisor of the ranks; the rest replicas
      args+=" --tp $tp"
      pick 1 $((n == 64 ? 1 : 3))
      heads=$((tp * REPLY))
      args+=" --heads $heads"
      pick 1 $((n == 64 ? 1 : 6))
      args+=" --d $((heads * REPLY))"
      pick 1 $((n == 64 ? 1 : 3)) && add --layers
      pick 2 $((n == 64 ? 6 : 24)) && add --context
      ctx=$REPLY
      pick 1 4
      b=$REPLY
      if ((RANDOM % 2)); then  # sequence parallel: the b s tokens split over tp
        args+=" --sequence-parallel"
        ((b * ctx % tp)) && b=$tp
      fi
      args+=" --batch $b"
      one_of none selective full && add --recompute
      ;;
    *)
      echo "property_sweep: no generator for lesson $lesson" >&2
      exit 2
      ;;
  esac
  return 0
}

failed=0
for ((i = 1; i <= count; i++)); do
  settings
  # shellcheck disable=SC2086  # the settings are words
  out=$(timeout 120 "$bin" $args --no-trace 2>&1)
  rc=$?
  if ((rc == 0)) && grep -q ": verified (" <<<"$out"; then
    echo "ok $i: $args"
  else
    echo "FAILED $i (exit $rc): $bin $args --no-trace"
    grep -E "check failed|distlab lesson|FAILED|error" <<<"$out" | head -n 5 | sed 's/^/    /'
    failed=$((failed + 1))
  fi
done
echo "property_sweep: lesson $lesson, seed $seed: $((count - failed)) of $count settings verified"
((failed == 0))
