#!/usr/bin/env bash
# steps-sweep.sh [--quick] [--lessons "05 11 ..."] [--build DIR]
#   The training lessons' weight checks at any number of steps: each lesson at 1 step, its
#   default, 20, 100 and 300 (16, whose runs at 300 steps take minutes: to 100), on 2, 3, 4 and
#   8 ranks with three seeds (lesson 11: every schedule, interleaved at 2 virtual stages; 08-10:
#   with and without --deterministic; 14: with and without ZeRO-1), with --work-us 0 where the
#   lesson has it. Every run must verify. Then every --break of those lessons at 1 step and at
#   its default: every one must fail on the check tests/breaks.sh names for it. Prints one row
#   per setting and step count: runs, verified, the slowest wall, and how close the bounded
#   checks came to their bounds (the largest share of its bound a check's worst element took,
#   from --checks): "drift" for the checks against the reference's whole run, "1-step" for the
#   others (the checks of a step from the rank's own state: the last one, or every one in 08-10
#   and 16). Exits 1 when a run verified wrongly (a clean run that failed, or a break that
#   verified).
#   --quick   CI's slice: one seed, 8 ranks (16: 4, its 8 ranks take turns on CI's two cores
#             for a minute), 20 and 100 steps, and the breaks at 1 step
#   --lessons the lessons to sweep (default: every one whose checks hold at any step count)
#   --build   the build folder (default build/release; ./distlab tour or test builds it)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

quick=0 lessons="05 08 09 10 11 14 16" build=build/release
while (($#)); do
  case "$1" in
    --quick) quick=1; shift ;;
    --lessons) lessons="${2:?--lessons needs a list}"; shift 2 ;;
    --build) build="${2:?--build needs a folder}"; shift 2 ;;
    -h | --help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "steps-sweep: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

ranks=(2 3 4 8) seeds=(5 11 17)
((quick)) && ranks=(8) seeds=(11)
lesson_steps() {  # lesson_steps NN: the step counts it runs, in REPLY (an array)
  if ((quick)); then
    REPLY=(20 100)
  elif [[ $1 == 16 ]]; then
    REPLY=(1 default 20 100)
  else
    REPLY=(1 default 20 100 300)
  fi
}

binary() {  # binary NN: the lesson's program in the build
  local b
  b=$(find "$build/lessons" -maxdepth 2 -type f -name "${1}_*" -perm -u+x 2>/dev/null | head -1)
  [[ -n "$b" ]] || { echo "steps-sweep: no lesson $1 in $build (run ./distlab tour first)" >&2; exit 2; }
  REPLY=$b
}

# settings NN RANKS: the lesson's settings at that rank count, one per line ("" is its defaults).
settings() {
  case "$1" in
    05)
      echo "--mode allreduce --optimizer sgd"
      echo "--mode allreduce --optimizer adam"
      echo "--mode ps --optimizer sgd"
      echo "--mode ps --optimizer adam"
      (($2 >= 3)) && echo "--mode ps --servers 2 --optimizer adam"
      ;;
    11)
      local p=$2
      echo "--schedule naive"
      echo "--schedule gpipe --microbatches 4"
      echo "--schedule 1f1b --microbatches 8"
      echo "--schedule interleaved --virtual-stages 2 --microbatches $((2 * p)) --batch $((16 * p))"
      echo "--schedule zb-h1 --microbatches $((p + 4)) --batch $((8 * (p + 4)))"
      ;;
    08 | 09 | 10)
      echo ""
      echo "--deterministic"
      ;;
    14)
      echo ""
      echo "--zero 1"
      ;;
    16) echo "" ;;
  esac
}
extra() {  # extra NN: what every run of the lesson adds (no pauses, no side table)
  case "$1" in
    11) echo "--work-us 0 --sample-us 0 --no-sweep" ;;
    16) echo "--work-us 0" ;;
  esac
}

# share [-v] LOG: the largest "N of its bound" in LOG's checks against float32's drift (-v: in
# the others), in REPLY (0 if none).
share() {
  local pick=(grep)
  [[ $1 == -v ]] && pick=(grep -v) && shift
  REPLY=$("${pick[@]}" "float32's drift" "$1" |
    sed -n 's/.*|error| [^,]*, \([0-9.e+-]*\) of its bound.*/\1/p' | sort -g | tail -1)
  REPLY=${REPLY:-0}
}

failed=0 log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf '%-8s %-80s %7s %5s %9s %9s %6s %6s\n' lesson setting steps runs verified slowest drift 1-step
for nn in $lessons; do
  binary "$nn"
  bin=$REPLY
  lesson_steps "$nn"
  steps=("${REPLY[@]}")
  rank_counts=("${ranks[@]}")
  ((quick)) && [[ $nn == 16 ]] && rank_counts=(4)
  for p in "${rank_counts[@]}"; do
    while IFS= read -r setting; do
      for s in "${steps[@]}"; do
        runs=0 ok=0 slowest=0 drift=0 step=0
        for seed in "${seeds[@]}"; do
          step_args=()
          [[ $s == default ]] || step_args=(--steps "$s")
          start=$(date +%s.%N)
          # shellcheck disable=SC2046,SC2086  # the settings are words
          "$bin" --ranks "$p" --seed "$seed" $setting $(extra "$nn") "${step_args[@]}" --no-trace \
            --checks >"$log" 2>&1
          rc=$?
          wall=$(echo "$(date +%s.%N) - $start" | bc)
          ((runs++))
          if ((rc == 0)) && grep -q "verified" "$log"; then
            ((ok++))
          else
            failed=1
            echo "steps-sweep: FAILED (exit $rc): $bin --ranks $p --seed $seed $setting $(extra "$nn") ${step_args[*]}" >&2
            grep -m 3 "check failed" "$log" >&2
          fi
          (($(echo "$wall > $slowest" | bc))) && slowest=$wall
          # The largest share of its bound that a bounded check's worst element took (--checks):
          # the checks against the whole run's drift, and the others (one step's rounding).
          share "$log"
          (($(echo "${REPLY/e/*10^} > ${drift/e/*10^}" | bc -l))) && drift=$REPLY
          share -v "$log"
          (($(echo "${REPLY/e/*10^} > ${step/e/*10^}" | bc -l))) && step=$REPLY
        done
        printf '%-8s %-80s %7s %5d %9d %8.1fs %6s %6s\n' "$nn" "--ranks $p $setting" "$s" "$runs" \
          "$ok" "$slowest" "$drift" "$step"
      done
    done < <(settings "$nn" "$p")
  done
done

# Every break still caught: at 1 step and at the default (the default only with --quick's 1).
break_steps=(1 default)
((quick)) && break_steps=(1)
for nn in $lessons; do
  binary "$nn"
  bin=$REPLY
  for b in $("$bin" --break list 2>/dev/null | awk '{print $1}'); do
    row=$(grep -h "^  \"${nn}_[a-z_0-9]*|$b|" tests/breaks.sh | head -1)
    args=$(cut -d'|' -f3 <<<"$row")
    check=$(cut -d'|' -f4 <<<"$row" | sed 's/"$//')
    for s in "${break_steps[@]}"; do
      step_args=()
      [[ $s == default ]] || step_args=(--steps "$s")
      # shellcheck disable=SC2046,SC2086  # the break's arguments are words
      "$bin" --break "$b" $args $(extra "$nn") "${step_args[@]}" --no-trace >"$log" 2>&1
      rc=$?
      # Caught: the run fails on the check tests/breaks.sh names for the break.
      if ((rc == 1)) && grep -q "FAILED" "$log" && grep -qF -- "$check" "$log"; then
        printf '%-8s %-80s %7s %5s %9s\n' "$nn" "--break $b $args" "$s" 1 "caught"
      else
        failed=1
        printf '%-8s %-80s %7s %5s %9s\n' "$nn" "--break $b $args" "$s" 1 "MISSED"
        echo "steps-sweep: --break $b at $s steps: exit $rc, without its check failing: $check" >&2
      fi
    done
  done
done
if ((failed)); then
  echo "steps-sweep: a run verified wrongly (above)"
  exit 1
fi
echo "steps-sweep: every run verified and every break was caught"
