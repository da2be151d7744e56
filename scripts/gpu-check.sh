#!/usr/bin/env bash
# gpu-check.sh — every GPU check in one command, on one borrowed H200, within a deadline.
#
#   scripts/gpu-bundle.sh                     here: build the programs into build/gpu-bundle/
#   scripts/gpu-check.sh [--deadline SECONDS] there: run them (carry build/gpu-bundle)
#   scripts/gpu-check.sh --rehearse           anywhere: the same control flow, with stand-ins
#                                             for every command that touches the GPU
#
# Why it is shaped this way. The GPU machine is lent for about 15 minutes in all and at most
# 10 a command, has no network and no Debian packages, and gives back only the files under
# $OUT (at most 8, 16 MiB each). So one run keeps to a deadline (default 480 s; --deadline or
# DISTLAB_GPU_CHECK_DEADLINE) and reports whatever happens: a hang, a missing library, a
# signal. The programs are built here by scripts/gpu-bundle.sh (x86-64, sm_90, no MPI: the
# check runs in-process ranks) and carried with fmt and simdjson; cuBLAS comes from the
# toolkit there and NCCL from PyTorch's nvidia/ wheels, found below at run time.
#
# Steps, most important first because the deadline cuts the tail. Each is one process under
# `timeout -k 5 LIMIT`, LIMIT = min(its own limit, the time left before the deadline less 15 s
# kept for the report); a step with under 5 s of that left is "not run".
#   environment          ldd of every program (a "not found" stops the check here), where
#                        cudart, cuBLAS and NCCL resolve, the driver, `distlab_gpu_tests --probe`
#   unit GROUP     60 s  distlab_gpu_tests "[GROUP]", one process per group, because a fault
#                        poisons the shared CUDA context for the rest of its process
#   lesson NN_name 60 s  the lesson with --device cuda --ranks 4, verified, its trace checked
#                        (lesson 21, whose windows are host memory: --device cpu --sweep)
#                        (lesson 11 also with --schedule zb-h1 and interleaved, 8 micro-batches;
#                        lessons 12 and 13 also with --sequence-parallel)
#   stress         90 s  distlab_gpu_tests "[stress]", 8 ranks and a delay kernel, up to 20
#                        times while its 90 s last
#   sanitizer TOOL 90 s  compute-sanitizer memcheck, synccheck, racecheck (skipped if absent)
#   ops            90 s  distlab_ops_bench --device cuda --check
#   allreduce     120 s  distlab-bench, every all-reduce algorithm, 1 KiB to 1 GiB (256 MiB
#                        when less than 120 s is left)
#
# Output, in $OUT (or build/gpu-check): summary.txt (rewritten after every step, so even a
# SIGKILL leaves one), check.log (each step's last 2000 lines), gpu-check.tar.gz (traces/,
# logs/, bench.csv, ops.txt: written by the exit trap, whatever happens) and bench.csv. The
# summary table is printed last.
#
# Exit status: 0 every step passed (or was skipped, saying why); 1 a step failed, timed out
# or was not run; 2 no GPU, no bundle or a bad option; 128+N when stopped by signal N.
#
# --rehearse tests this script, not the GPU: DISTLAB_REHEARSE="PATTERN=BEHAVIOUR,..." picks
# each stand-in's behaviour by a glob on the step name (the probe's name is "probe"), one of
# pass fail hang missing-lib no-gpu setup-fail absent; unlisted steps pass.
#   DISTLAB_REHEARSE='lesson 05*=fail,stress=hang' scripts/gpu-check.sh --rehearse --deadline 60
# shellcheck disable=SC2317  # the trap's functions and the detail functions are called by name
set -uo pipefail
shopt -s nullglob
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

usage() { sed -n '2,/^\(# shellcheck\|[^#]\)/{/^# shellcheck/d;/^#/!d;s/^# \{0,1\}//;p;}' "${BASH_SOURCE[0]}"; }
bad() { echo "gpu-check: $1" >&2; exit 2; }

# ---- options -------------------------------------------------------------------------------
deadline="${DISTLAB_GPU_CHECK_DEADLINE:-480}"
rehearse=0
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --rehearse) rehearse=1 ;;
    --deadline) (($# >= 2)) || bad "--deadline needs a number of seconds, as in --deadline 480"
                deadline=$2; shift ;;
    --deadline=*) deadline=${1#*=} ;;
    *) bad "$1 is not an option; the options are --deadline SECONDS, --rehearse and --help" ;;
  esac
  shift
done
if [[ ! $deadline =~ ^[0-9]+$ ]] || ((10#$deadline == 0)); then
  bad "the deadline (--deadline or DISTLAB_GPU_CHECK_DEADLINE) must be a whole number of seconds above 0, not '$deadline'"
fi
deadline=$((10#$deadline))
reserve=15  # seconds kept after the last step for the summary and the archive
min_step=5  # a step given less than this is not started

# The rehearsal's table: pattern i asks for behaviour i; the first pattern that matches wins.
rehearse_pat=() rehearse_how=()
if ((rehearse)); then
  IFS=',' read -r -a entries <<<"${DISTLAB_REHEARSE:-}"
  for e in ${entries[@]+"${entries[@]}"}; do
    [[ -n $e ]] || continue
    case ${e##*=} in
      pass | fail | hang | missing-lib | no-gpu | setup-fail | absent) ;;
      *) e="" ;;
    esac
    [[ $e == ?*=* ]] || bad "DISTLAB_REHEARSE: each entry is PATTERN=BEHAVIOUR with BEHAVIOUR one of pass, fail, hang, missing-lib, no-gpu, setup-fail, absent; got '${entries[*]}'"
    rehearse_pat+=("${e%=*}") rehearse_how+=("${e##*=}")
  done
fi
behaviour() {
  local i
  for i in "${!rehearse_pat[@]}"; do
    # shellcheck disable=SC2053  # the pattern is a glob on purpose
    if [[ $1 == ${rehearse_pat[i]} ]]; then echo "${rehearse_how[i]}"; return; fi
  done
  echo pass
}

# ---- where things are ----------------------------------------------------------------------
bundle="${DISTLAB_GPU_BUNDLE:-$root/build/gpu-bundle}"
[[ -x "$bundle/bin/distlab_gpu_tests" ]] || [[ ! -x "$here/bin/distlab_gpu_tests" ]] || bundle="$here"  # run from inside the bundle
bin="$bundle/bin"
tests="$bin/distlab_gpu_tests"
out="${OUT:-$root/build/gpu-check}"
mkdir -p "$out" || bad "cannot create the output folder $out"
out=$(cd "$out" && pwd)
rm -f "$out"/{summary.txt,check.log,gpu-check.tar.gz,bench.csv,ops.txt,traces.tar.gz,.step.log}
[[ -n ${OUT:-} ]] || rm -rf "$out/traces"  # the layout of earlier versions, in our own folder only
check_log="$out/check.log"
: >"$check_log"
# Traces and full logs live outside $OUT until the trap archives them, so that no run, however
# it ends, leaves a folder of many files there.
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || bad "cannot create a scratch folder"
mkdir -p "$work/logs" "$work/traces"

if ((rehearse)); then
  # No bundle: the programs it would hold, named after the lessons in the tree.
  lessons=()
  for d in "$root"/lessons/[0-9][0-9]_*/ "$bin"/[0-9][0-9]_*; do lessons+=("$bin/$(basename "$d")"); done
  ((${#lessons[@]})) || lessons=("$bin/01_send_recv" "$bin/02_scatter_gather")
  mapfile -t lessons < <(printf '%s\n' "${lessons[@]}" | sort -u)
  programs=("${lessons[@]}" "$tests" "$bin/distlab_trace_check" "$bin/distlab-bench" "$bin/distlab_ops_bench")
  commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?') (rehearsal)"
else
  lessons=("$bin"/[0-9][0-9]_*)
  programs=("$bin"/*)
  commit=$(cat "$bundle/COMMIT" 2>/dev/null || echo '?')
fi

# Libraries: the bundle's, the toolkit's, and the NVIDIA wheels' (cuBLAS, NCCL, runtime).
libs="$bundle/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$d" ]] && libs="$libs:$d"
done
wheels=$(python3 - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
print(":".join(d for r in roots for d in sorted(glob.glob(os.path.join(r, "*", "lib")))))
PY
)
[[ -n "$wheels" ]] && libs="$libs:$wheels"
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ---- the rows --------------------------------------------------------------------------------
# plan: every step in order; res/sec/det: its result, seconds and one-line detail. Rows start
# "pending" and become "not run" at the end if nothing ran them.
plan=()
declare -A res sec det
plan_row() { plan+=("$1"); res[$1]=pending; sec[$1]=""; det[$1]=""; }

plan_row environment
gpu_test_groups=(ops model context transport ordering all_reduce trace library nccl)
for g in "${gpu_test_groups[@]}"; do plan_row "unit $g"; done
for exe in ${lessons[@]+"${lessons[@]}"}; do plan_row "lesson $(basename "$exe")"; done
# Lessons' variants past the lecture's, NN:label:options: lesson 11's schedules (zero bubble runs
# the MLP's backward in two halves), and sequence parallelism in lessons 12 and 13 (the
# LayerNorm and dropout kernels on each rank's rows, all-gathers and reduce-scatters).
lesson_variants=("11:zb-h1:--schedule zb-h1 --microbatches 8 --no-sweep"
                 "11:interleaved:--schedule interleaved --microbatches 8 --no-sweep"
                 "12:sp:--sequence-parallel" "13:sp:--sequence-parallel")
variant_exe() {  # variant_exe NN: the lesson NN's program, if it was built
  local exe
  for exe in ${lessons[@]+"${lessons[@]}"}; do [[ $(basename "$exe") == "$1"_* ]] && echo "$exe"; done
  return 0
}
for v in "${lesson_variants[@]}"; do
  exe=$(variant_exe "${v%%:*}")
  label=${v#*:}
  [[ -n $exe ]] && plan_row "lesson $(basename "$exe") ${label%%:*}"
done
plan_row stress
sanitizer_tools=(memcheck synccheck racecheck)
for t in "${sanitizer_tools[@]}"; do plan_row "sanitizer $t"; done
plan_row ops
plan_row allreduce

now() { local t=${EPOCHREALTIME:-}; if [[ -n $t ]]; then now_us=${t/[.,]/}; else now_us=$(date +%s%6N); fi; }
tenths() { printf '%d.%d' $(($1 / 1000000)) $(($1 / 100000 % 10)); }  # microseconds as "12.3"
now
start_us=$now_us
deadline_us=$((start_us + deadline * 1000000))

# limit_for OWN: sets limit = min(OWN, seconds left before the deadline less the reserve);
# fails when that is under min_step.
limit_for() {
  now
  local left=$(((deadline_us - now_us) / 1000000 - reserve))
  limit=$(($1 < left ? $1 : left))
  ((limit >= min_step))
}

state="starting"  # what a partial summary says is going on
current=""        # the step now running, for the trap
signal="" signum=0
verdict=""        # no-gpu or no-bundle: exit 2 whatever the rows say
main_done=0

conclude() {  # sets code and line (the summary's last line) from the rows
  local n failed=() timeouts=() notrun=() skipped=() parts=()
  for n in "${plan[@]}"; do
    case ${res[$n]} in
      passed) ;;
      skipped) skipped+=("$n") ;;
      TIMEOUT) timeouts+=("$n") ;;
      "not run" | pending | running) notrun+=("$n") ;;
      *) failed+=("$n") ;;
    esac
  done
  join() { local IFS=,; local s="$*"; echo "${s//,/, }"; }
  ((${#failed[@]})) && parts+=("FAILED: $(join "${failed[@]}")")
  ((${#timeouts[@]})) && parts+=("TIMEOUT: $(join "${timeouts[@]}")")
  ((${#notrun[@]})) && parts+=("not run: ${#notrun[@]} steps (${notrun[0]} first)")
  if [[ -n $signal ]]; then
    code=$((128 + signum))
    line="gpu-check: stopped by SIG$signal; $(IFS=';'; s="${parts[*]}"; echo "${s//;/; }")"
  elif [[ $verdict == no-bundle ]]; then
    code=2 line="gpu-check: no bundle at $bundle; build it with scripts/gpu-bundle.sh and carry build/gpu-bundle"
  elif [[ $verdict == no-gpu ]]; then
    code=2 line="gpu-check: no CUDA device answers on this machine; nothing was checked"
  elif ((!${#parts[@]})); then
    code=0 line="gpu-check: every step passed"
    ((${#skipped[@]})) && line+=" (skipped: $(join "${skipped[@]}"))"
  else
    code=1 line="gpu-check: $(IFS=';'; s="${parts[*]}"; echo "${s//;/; }")"
  fi
}

write_summary() {
  local n
  now
  conclude
  {
    printf 'gpu-check%s: commit %s, deadline %d s, %s s used\n' "$( ((rehearse)) && echo ' rehearsal (stand-ins, no GPU)')" \
      "$commit" "$deadline" "$(tenths $((now_us - start_us)))"
    [[ $state == finished ]] || echo "(in progress: $state; this file is rewritten after every step)"
    echo
    printf '%-46s %-18s %8s  %s\n' check result seconds detail
    for n in "${plan[@]}"; do printf '%-46s %-18s %8s  %s\n' "$n" "${res[$n]}" "${sec[$n]}" "${det[$n]}"; done
    echo
    echo "$line"
  } >"$out/summary.txt"
}

not_run() {  # not_run WHY: every row still pending becomes "not run", saying why
  local n
  for n in "${plan[@]}"; do
    [[ ${res[$n]} == pending ]] && res[$n]="not run" det[$n]="$1"
  done
}

# ---- running one command ---------------------------------------------------------------------
# The rehearsal's stand-in for one command: $1 step, $2 kind, $3 behaviour, $4 a file the real
# command would write ("" if none), then the real command, which it never runs.
read -r -d '' standin <<'STANDIN'
name=$1 kind=$2 how=$3 writes=$4
shift 4
if [[ $kind == ldd && ($how == pass || $how == missing-lib) ]]; then
  for f in "${@:2}"; do
    printf '%s:\n\tlinux-vdso.so.1 (0x0)\n' "$f"
    printf '\tlibcudart.so.13 => /usr/local/cuda/lib64/libcudart.so.13 (0x0)\n'
    printf '\tlibcublas.so.13 => /usr/local/cuda/lib64/libcublas.so.13 (0x0)\n'
    printf '\tlibcublasLt.so.13 => /usr/local/cuda/lib64/libcublasLt.so.13 (0x0)\n'
    if [[ $how == missing-lib ]]; then printf '\tlibnccl.so.2 => not found\n'
    else printf '\tlibnccl.so.2 => /opt/python/site-packages/nvidia/nccl/lib/libnccl.so.2 (0x0)\n'; fi
  done
  exit 0
fi
case $how in
  fail) echo "rehearsal: $name fails, as DISTLAB_REHEARSE asks"; exit 1 ;;
  hang) exec sleep 100000 ;;
  missing-lib) echo "$1: error while loading shared libraries: libnccl.so.2: cannot open shared object file: No such file or directory" >&2; exit 127 ;;
  no-gpu) echo "SKIPPED: no CUDA device answers on this machine; the GPU tests need one"; exit 77 ;;
  setup-fail) echo "CUDA setup failed: CUDA driver version is insufficient for CUDA runtime version (rehearsal)" >&2; exit 3 ;;
esac
case $kind in
  smi) echo "NVIDIA H200 (rehearsal), 143771 MiB, 000.00" ;;
  probe) echo "CUDA runtime 13.0 (rehearsal)"; echo "device 0: NVIDIA H200 (rehearsal)" ;;
  lesson) n=${name#lesson }; echo "lesson ${n%%_*} ${n#*_}: verified (rehearsal stand-in)" ;;
  sanitizer) echo "All tests passed (1 assertion in 1 test case)"; echo "========= ERROR SUMMARY: 0 errors" ;;
  ops) echo "add      (rehearsal)"; echo "axpy     (rehearsal)" ;;
  bench) echo " 1073741824   268435456  float      allreduce                ring      1.0     1.00     1.50       1.0       0"
         echo " 268435456     67108864  float      allreduce                ring      1.0     1.00     1.50       1.0       0" ;;
  *) echo "All tests passed (1 assertion in 1 test case)" ;;
esac
case $writes in
  *.json) echo '{"traceEvents":[],"otherData":{"rehearsal":true}}' >"$writes" ;;
  *.csv) echo "rehearsal,0" >"$writes" ;;
esac
exit 0
STANDIN

# run_timed NAME KIND LIMIT LOG CMD...: CMD (rehearsing: the stand-in) under timeout, output in
# LOG, status in rc. It runs in the background and is waited for, so that a signal reaches the
# trap at once rather than when the command ends.
standin_writes=""
child=""
run_timed() {
  local name=$1 kind=$2 lim=$3 log=$4
  shift 4
  ((rehearse)) && set -- bash -c "$standin" standin "$name" "$kind" "$(behaviour "$name")" "$standin_writes" "$@"
  timeout -k 5 "$lim" "$@" >"$log" 2>&1 </dev/null &
  child=$!
  wait "$child"
  rc=$?
  child=""
}

stop_child() {  # ends the running step: timeout passes TERM on; its group gets KILL 5 s later
  [[ -n $child ]] || return 0
  kill -TERM "$child" 2>/dev/null
  local i
  for ((i = 0; i < 50; i++)); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$child" 2>/dev/null || kill -KILL "$child" 2>/dev/null
  wait "$child" 2>/dev/null
  child=""
}

log_of() { echo "$work/logs/$(tr -c 'A-Za-z0-9._-' '_' <<<"$1" | sed 's/_$//').log"; }
one_line() { tr -s '\t\n\r ' ' ' | sed 's/^ //; s/ $//' | cut -c 1-160; }

begin() {  # begin NAME COMMAND-TEXT
  current=$1 state="running $1"
  res[$1]=running
  now
  step_start=$now_us
  echo "=== $1 (limit ${limit} s): $2" >>"$check_log"
  write_summary
}

# finish_step NAME RC DETAIL LOG: the row from the status, the log's tail into check.log.
finish_step() {
  local name=$1 status=$2 detail=$3 log=$4 result
  now
  local used=$((now_us - step_start))
  case $status in
    0) result=passed ;;
    77) result=skipped ;;
    124) result=TIMEOUT ;;
    137) if ((used >= limit * 1000000)); then result=TIMEOUT; else result="FAILED (137)"; fi ;;
    *) result="FAILED ($status)" ;;
  esac
  [[ $result == TIMEOUT ]] && detail="killed after ${limit} s${detail:+; $detail}"
  res[$name]=$result sec[$name]=$(tenths "$used") det[$name]=$(one_line <<<"$detail")
  [[ -f $log ]] && { tail -n 2000 "$log" | tail -c 200000; echo "--- $name: $result"; } >>"$check_log"
  current=""
  echo "gpu-check: $name: $result (${sec[$name]} s) ${det[$name]}"
  write_summary
}

# The detail of a step: what its own detail function finds, else what went wrong, else its
# last line.
detail_of() {  # detail_of LOG FN
  local log=$1 fn=$2 d=""
  if ((rc == 127)) && grep -q 'error while loading shared libraries' "$log"; then
    d="a library is missing: $(sed -n 's/.*error while loading shared libraries: \([^:]*\):.*/\1/p' "$log" | head -n 1)"
  elif grep -q '^No test cases matched' "$log"; then
    d=$(grep -m 1 '^No test cases matched' "$log")
  else
    d=$("$fn" "$log" 2>/dev/null)
  fi
  [[ -n $d ]] || d=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)
  echo "$d"
}
detail_unit() { grep -m 1 -E '^(All tests passed|test cases:)' "$1"; }
detail_lesson() {
  local l
  l=$(grep -E '^lesson [0-9]+ ' "$1" | tail -n 1 | sed -E 's/^lesson [0-9]+ [a-z0-9_]+: //')
  # A lesson that verified and still failed: the trace check said why, last.
  if ((rc != 0)) && [[ $l == verified* ]]; then grep -v '^[[:space:]]*$' "$1" | tail -n 1; else echo "$l"; fi
}
detail_sanitizer() { grep -oE '(ERROR|RACECHECK) SUMMARY: .*' "$1" | paste -sd ';' - | sed 's/;/; /g'; }
detail_ops() { grep -E '^(add|axpy) ' "$1" | tr -s ' ' | head -n 2 | paste -sd ';' -; }
detail_bench() { grep -E "^ *$bench_bytes " "$1" | awk '{print $5, $8 " GB/s"}' | paste -sd ';' -; }

# step NAME KIND OWN_LIMIT DETAIL_FN -- COMMAND...: one row.
step() {
  local name=$1 kind=$2 own=$3 fn=$4
  shift 5
  if ! limit_for "$own"; then
    res[$name]="not run" det[$name]="under ${min_step} s left before the deadline (${deadline} s, ${reserve} s kept for the report)"
    write_summary
    return 0
  fi
  local log; log=$(log_of "$name")
  begin "$name" "$*"
  run_timed "$name" "$kind" "$limit" "$log" "$@"
  finish_step "$name" "$rc" "$(detail_of "$log" "$fn")" "$log"
}

skip_row() {  # skip_row NAME WHY
  res[$1]=skipped sec[$1]=0.0 det[$1]=$2
  echo "gpu-check: $1: skipped: $2"
  write_summary
}

# ---- the end, however it comes ---------------------------------------------------------------
archive() {
  [[ -f $work/bench.csv ]] && cp "$work/bench.csv" "$out/bench.csv"
  if ! tar -C "$work" -czf "$out/gpu-check.tar.gz" . 2>>"$check_log"; then
    line_note="writing gpu-check.tar.gz failed (see check.log)"
  fi
  local size; size=$(du -k "$out/gpu-check.tar.gz" 2>/dev/null | cut -f1)
  ((${size:-0} < 15 * 1024)) || line_note="gpu-check.tar.gz is ${size} KiB, more than the 16 MiB that comes back"
}

finish() {
  local status=$?
  trap '' INT TERM HUP
  stop_child
  if [[ -n $current ]]; then
    now
    sec[$current]=$(tenths $((now_us - step_start)))
    if [[ -n $signal ]]; then
      res[$current]="FAILED (SIG$signal)" det[$current]="the script was stopped by SIG$signal during this step"
    else
      res[$current]="FAILED (script)" det[$current]="the script stopped during this step (status $status)"
    fi
    [[ -f $(log_of "$current") ]] && tail -n 2000 "$(log_of "$current")" | tail -c 200000 >>"$check_log"
  fi
  if [[ -n $signal ]]; then not_run "the script was stopped by SIG$signal"
  elif ((!main_done)) && [[ -z $verdict ]]; then not_run "the script stopped early (status $status)"
  fi
  line_note=""
  archive
  state=finished
  write_summary
  [[ -n $line_note ]] && echo "gpu-check: $line_note" >>"$out/summary.txt"
  { echo; cat "$out/summary.txt"; } | tee -a "$check_log" 2>/dev/null
  rm -rf "$work"
  exit "$code"
}
on_signal() { signal=$1 signum=$2; exit $((128 + $2)); }
trap finish EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP

# ---- 0. the environment ----------------------------------------------------------------------
((rehearse)) && echo "gpu-check --rehearse: this run tests the script's control flow (deadline, trap, summary, archive, exit statuses) with stand-ins; it does not touch or test a GPU" | tee -a "$check_log"
{
  echo "gpu-check: bundle $bundle (commit $commit), deadline $deadline s, output $out"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} | tee -a "$check_log"

environment() {
  local log missing libs smi="" driver probe_out n
  if ((!rehearse)) && [[ ! -x $tests ]]; then
    verdict=no-bundle
    res[environment]="FAILED" det[environment]="no bundle at $bundle"
    not_run "there is no bundle"
    return 1
  fi
  limit_for 60 || return 1
  begin environment "ldd ${programs[*]##*/}; nvidia-smi; distlab_gpu_tests --probe"

  # Every program's libraries: one "not found" and the GPU steps cannot start.
  log="$work/logs/environment-ldd.log"
  run_timed environment ldd "$limit" "$log" ldd "${programs[@]}"
  cat "$log" >>"$work/logs/environment.log"
  if ((rc == 124 || rc == 137)); then finish_step environment "$rc" "ldd did not answer" "$log"; return 1; fi
  missing=$(awk '/^[^ \t].*:$/ { n = split(substr($0, 1, length($0) - 1), p, "/"); prog = p[n]; next }
                 /=> not found/ { if (!($1 in seen)) order[++k] = $1; seen[$1] = seen[$1] (seen[$1] ? ", " : "") prog }
                 END { for (i = 1; i <= k; i++) { l = order[i]; c = split(seen[l], q, ", ");
                         printf "%s%s not found (needed by %s%s)", (i > 1 ? "; " : ""), l,
                                (c > 3 ? q[1] ", " q[2] ", " q[3] : seen[l]), (c > 3 ? " and " c - 3 " more" : "") } }' "$log")
  libs=$(awk -v want="${tests##*/}" '/^[^ \t].*:$/ { n = split(substr($0, 1, length($0) - 1), p, "/"); prog = p[n]; next }
              prog == want && $1 ~ /^lib(cudart|cublas|cublasLt|nccl)\.so/ { print "  " $1 " => " $3 }' "$log")
  { echo "libraries of ${tests##*/}:"; echo "${libs:-  (none of cudart, cublas, cublasLt, nccl)}"; } | tee -a "$check_log"
  grep -q 'libnccl' <<<"$libs" || echo "  libnccl: not linked" | tee -a "$check_log"
  if [[ -n $missing ]]; then
    echo "$missing" | tee -a "$check_log"
    finish_step environment 1 "$missing" "$log"
    not_run "the environment step did not pass"
    return 1
  fi

  # The driver: informative only; a machine without nvidia-smi may still have a device.
  if ((rehearse)) || command -v nvidia-smi >/dev/null; then
    limit_for 20 && run_timed environment smi "$limit" "$work/logs/nvidia-smi.log" \
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    smi=$(head -n 1 "$work/logs/nvidia-smi.log")
  fi
  [[ ${smi:-} =~ ,\ *([0-9][0-9.]*)$ ]] && driver="driver ${BASH_REMATCH[1]}" || driver="driver unknown (nvidia-smi: ${smi:-not available})"
  echo "gpu: ${smi:-nvidia-smi not available}" | tee -a "$check_log"

  # The probe: 0 a device answers, 77 none, 127 the loader lacks a library, else setup failed.
  log="$work/logs/probe.log"
  limit_for 30 || { finish_step environment 124 "no time left for the probe" ""; return 1; }
  run_timed probe probe "$limit" "$log" "$tests" --probe
  cat "$log" >>"$work/logs/environment.log"
  probe_out=$(grep -v '^[[:space:]]*$' "$log" | paste -sd ';' - | sed 's/;/; /g')
  sed 's/^/probe: /' "$log"
  case $rc in
    0) finish_step environment 0 "$driver; $probe_out" "$log" ;;
    77) verdict=no-gpu
        finish_step environment 77 "no CUDA device answers: $probe_out" "$log"
        echo "gpu-check: no CUDA device answers on this machine; nothing to check" | tee -a "$check_log"
        not_run "no CUDA device answers"
        return 1 ;;
    124 | 137) finish_step environment "$rc" "the probe did not answer" "$log"; not_run "the probe did not answer"; return 1 ;;
    127) n=$(sed -n 's/.*error while loading shared libraries: \([^:]*\):.*/\1/p' "$log" | head -n 1)
         finish_step environment 127 "a library is missing: ${n:-?} (the loader's message is in check.log)" "$log"
         not_run "the environment step did not pass"
         return 1 ;;
    *) probe_out=${probe_out#CUDA setup failed: }
       finish_step environment "$rc" "CUDA setup failed: $probe_out" "$log"
       echo "gpu-check: CUDA setup failed: $probe_out" | tee -a "$check_log"
       not_run "the environment step did not pass"
       return 1 ;;
  esac
}

if ! environment; then
  [[ ${res[environment]} == pending ]] &&
    res[environment]="not run" det[environment]="under ${min_step} s left before the deadline"
  not_run "the environment step did not pass"
  main_done=1
  exit
fi

# ---- 1. the GPU unit tests, one process per group --------------------------------------------
# --warn NoTests: a tag that matches no test fails the step instead of passing it empty.
for g in "${gpu_test_groups[@]}"; do
  step "unit $g" unit 60 detail_unit -- "$tests" "[$g]" --warn NoTests
done

# ---- 2. every lesson on the GPU, 4 in-process ranks sharing it --------------------------------
for exe in ${lessons[@]+"${lessons[@]}"}; do
  name=$(basename "$exe")
  trace="$work/traces/$name.json"
  standin_writes=$trace
  # Lesson 21's windows are host memory: it runs on this machine's cores instead, with its sweep,
  # whose crossover check needs a core per rank (the 2-core CI machines never make it).
  options="--device cuda"
  [[ $name == 21_* ]] && options="--device cpu --sweep"
  # shellcheck disable=SC2016  # $1..$4 are bash -c's arguments
  step "lesson $name" lesson 60 detail_lesson -- \
    bash -c '"$1" $4 --ranks 4 --trace "$3" && "$2" "$3" --verified' lesson "$exe" "$bin/distlab_trace_check" "$trace" "$options"
  standin_writes=""
done

for v in "${lesson_variants[@]}"; do
  exe=$(variant_exe "${v%%:*}")
  [[ -n $exe ]] || continue
  label=${v#*:}
  name="$(basename "$exe") ${label%%:*}"
  trace="$work/traces/${name// /_}.json"
  standin_writes=$trace
  # shellcheck disable=SC2016  # $1..$4 are bash -c's arguments; $4 the variant's options
  step "lesson $name" lesson 60 detail_lesson -- \
    bash -c '"$1" --device cuda --ranks 4 $4 --trace "$3" && "$2" "$3" --verified' lesson "$exe" "$bin/distlab_trace_check" "$trace" "${label#*:}"
  standin_writes=""
done

# ---- 3. stress: ordering and all-reduce on 8 ranks, repeated while its time share lasts --------
stress() {
  local name=stress reps=20 k=0 i longest=0 t0 left log part why=""
  if ! limit_for 90; then
    res[$name]="not run" det[$name]="under ${min_step} s left before the deadline"
    write_summary
    return
  fi
  local end_us=$((now_us + limit * 1000000)) share=$limit
  log=$(log_of "$name")
  begin "$name" "DISTLAB_GPU_STRESS_RANKS=8 DISTLAB_GPU_DELAY_US=200 distlab_gpu_tests [stress], up to $reps times"
  rc=0
  for ((i = 1; i <= reps; i++)); do
    now
    left=$(((end_us - now_us) / 1000000))
    # Another repetition only if it fits: it took `longest` before, give it half as much again.
    if ((i > 1 && left * 1000000 < longest * 3 / 2 + min_step * 1000000)); then why="; its ${share} s were used"; break; fi
    part="$work/logs/stress-$i.log"
    t0=$now_us
    limit=$left
    run_timed "$name" stress "$left" "$part" \
      env DISTLAB_GPU_STRESS_RANKS=8 DISTLAB_GPU_DELAY_US=200 "$tests" "[stress]" --warn NoTests
    now
    ((now_us - t0 > longest)) && longest=$((now_us - t0))
    { echo "--- repetition $i: status $rc"; cat "$part"; } >>"$log"
    rm -f "$part"
    ((rc == 0)) || break
    k=$((k + 1))
  done
  limit=$share
  case $rc in
    0) finish_step "$name" 0 "$k of $reps repetitions passed$why" "$log" ;;
    124 | 137) finish_step "$name" "$rc" "repetition $i hung; $k of $reps repetitions passed" "$log" ;;
    *) finish_step "$name" "$rc" "repetition $i failed: $(detail_of "$log" detail_unit); $k of $reps repetitions passed" "$log" ;;
  esac
}
stress

# ---- 4. compute-sanitizer: memory errors, missing syncs, shared-memory races ---------------------
looked="PATH, /usr/local/cuda/bin, /usr/local/cuda/compute-sanitizer"
cs=$(command -v compute-sanitizer 2>/dev/null)
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -n $cs ]] || [[ ! -x $c ]] || cs=$c
done
((rehearse)) && cs=compute-sanitizer
sanitize() {  # sanitize TOOL -- COMMAND...
  local tool=$1
  shift 2
  if [[ -z $cs ]] || { ((rehearse)) && [[ $(behaviour "sanitizer $tool") == absent ]]; }; then
    skip_row "sanitizer $tool" "compute-sanitizer not found (looked in $looked)"
    return
  fi
  step "sanitizer $tool" sanitizer 90 detail_sanitizer -- "$@"
}
# The ops group less its 8 GiB test (past 2^31 elements), which would spend a sanitizer's whole
# limit on one fill.
ops_sanitized='[ops]~*past 2^31*'
export ops_sanitized
# memcheck: the ops group, then a small lesson (2 ranks, 4096 elements) for the transports.
lesson02="$bin/02_scatter_gather"
if ((rehearse)) || [[ -x $lesson02 ]]; then
  # shellcheck disable=SC2016  # $1, $2 and ${@:3} are bash -c's arguments
  sanitize memcheck -- bash -c '"${@:3}" "$1" "$ops_sanitized" --warn NoTests &&
    "${@:3}" "$2" --device cuda --ranks 2 --size 4096 --no-trace' memcheck "$tests" "$lesson02" \
    "$cs" --tool memcheck --error-exitcode 9 --leak-check full
else
  sanitize memcheck -- "$cs" --tool memcheck --error-exitcode 9 --leak-check full "$tests" "$ops_sanitized" --warn NoTests
fi
sanitize synccheck -- "$cs" --tool synccheck --error-exitcode 9 "$tests" "$ops_sanitized" --warn NoTests
# racecheck on the kernels that share memory: the reductions. One test spec, patterns joined by
# commas (Catch2 ANDs specs given as separate arguments); `*` is its only wildcard.
sanitize racecheck -- "$cs" --tool racecheck --error-exitcode 9 "$tests" \
  'cuda ops: sum*,cuda ops: softmax_rows*' --warn NoTests

# ---- 5. kernels against the copy bandwidth, GEMM against cuBLAS -----------------------------------
if { ((rehearse)) && [[ $(behaviour ops) != absent ]]; } || [[ -x $bin/distlab_ops_bench ]]; then
  step ops ops 90 detail_ops -- "$bin/distlab_ops_bench" --device cuda --check
  cp "$(log_of ops)" "$work/ops.txt" 2>/dev/null
else
  skip_row ops "distlab_ops_bench is not in the bundle"
fi

# ---- 6. every all-reduce algorithm, 4 ranks on the GPU --------------------------------------------
max_bytes=1G bench_bytes=1073741824
if ! limit_for 120; then :; elif ((limit < 120)); then max_bytes=256M bench_bytes=268435456; fi
standin_writes="$work/bench.csv"
step allreduce bench 120 detail_bench -- \
  "$bin/distlab-bench" --device cuda --ranks 4 --collectives allreduce \
  --algos reduce_broadcast,ring,ring_chunked,recursive_doubling,recursive_halving,library \
  --min-bytes 1K --max-bytes "$max_bytes" --step-factor 4 --iters 10 --warmup 3 --csv "$work/bench.csv" --no-trace
standin_writes=""

main_done=1
exit
