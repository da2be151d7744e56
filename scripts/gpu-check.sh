#!/usr/bin/env bash
# gpu-check.sh — every GPU check in one command, for one H200 (at most 8 minutes).
#
#   scripts/gpu-bundle.sh                       here: build the programs into build/gpu-bundle/
#   scripts/gpu-check.sh                        there: run them (carry build/gpu-bundle)
#
# How it gets there. The GPU machine has the NVIDIA driver, the CUDA 13 toolkit (cuBLAS),
# CMake, ninja and PyTorch, whose wheels carry NCCL under site-packages/nvidia/, but no Debian
# packages and no network, and a call carries at most 64 MiB. So the programs are built here
# by scripts/gpu-bundle.sh (x86-64 both sides, sm_90, no MPI: the check runs in-process
# ranks), stripped and carried with fmt and simdjson; cuBLAS comes from the toolkit there and
# NCCL from PyTorch's wheel, found below at run time. Neither is carried: NCCL's own library
# (218 MB) and cuBLASLt are too large.
#
# What it runs, in order, each with a time limit:
#   1. gpu.unit       distlab_gpu_tests: the CUDA ops against their CPU twins, device transports
#   2. lesson NN      every lesson with --device cuda --ranks 4 (ranks sharing the GPU), each
#                     verified against the CPU float64 reference, its trace checked
#   3. ops            distlab_ops_bench --device cuda --check: add/axpy against the copy
#                     bandwidth of the same run (>= 80%), GEMM against cuBLAS (>= 70%)
#   4. allreduce      distlab-bench --device cuda: every all-reduce algorithm, 1 KiB to 1 GiB, and
#                     the library call (ncclAllReduce) where every rank has its own GPU; on one
#                     GPU the bench says why it is left out (NCCL refuses two ranks on one GPU)
# and prints a summary table last. With $OUT set (the device tool sets it), it writes there:
# summary.txt, check.log (every step's output), bench.csv, ops.txt and traces.tar.gz (the
# lessons' GPU traces, for traces/examples/gpu/). Without $OUT: build/gpu-check/.
#
# Exit status: 0 every step passed; 1 a step failed; 2 no GPU or no bundle.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
bundle="${DISTLAB_GPU_BUNDLE:-$root/build/gpu-bundle}"
[[ -x "$bundle/bin/distlab_gpu_tests" ]] || bundle="$here"  # run from inside the bundle
out="${OUT:-$root/build/gpu-check}"
mkdir -p "$out"
log="$out/check.log"
: >"$log"

if [[ ! -x "$bundle/bin/distlab_gpu_tests" ]]; then
  echo "gpu-check: no bundle at $bundle; build it with scripts/gpu-bundle.sh and carry build/gpu-bundle" >&2
  exit 2
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

{
  echo "gpu-check: bundle $bundle (commit $(cat "$bundle/COMMIT" 2>/dev/null || echo '?'))"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi: not available"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} | tee -a "$log"

if ! "$bundle/bin/distlab_gpu_tests" --probe >>"$log" 2>&1; then
  echo "gpu-check: no CUDA device answers on this machine; nothing to check" | tee -a "$log" >&2
  exit 2
fi

rows=()     # name|result|seconds|detail
failed=0
# step NAME LIMIT_S DETAIL_CMD -- COMMAND...: runs COMMAND with its output in check.log.
step() {
  local name="$1" limit="$2" detail_cmd="$3"
  shift 4
  local start end rc result detail
  echo "=== $name: $*" >>"$log"
  start=$(date +%s.%N)
  timeout "$limit" "$@" >"$out/.step.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  cat "$out/.step.log" >>"$log"
  case $rc in
    0) result=passed ;;
    77) result=skipped ;;
    124) result="TIMEOUT" ;;
    *) result="FAILED ($rc)" ;;
  esac
  [[ $rc == 0 || $rc == 77 ]] || failed=1
  detail=$(eval "$detail_cmd" 2>/dev/null | head -n 1)
  rows+=("$name|$result|$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')|$detail")
}

# 1. The GPU unit tests.
step gpu.unit 120 "grep -E '^(All tests passed|test cases:)' '$out/.step.log'" -- "$bundle/bin/distlab_gpu_tests"

# 2. Every lesson on the GPU, 4 in-process ranks sharing it.
mkdir -p "$out/traces"
for exe in "$bundle"/bin/[0-9][0-9]_*; do
  name=$(basename "$exe")
  trace="$out/traces/$name.json"
  step "lesson $name" 90 "grep -E '^lesson [0-9]+ ' '$out/.step.log' | tail -n 1 | sed -E 's/^lesson [0-9]+ [a-z_]+: //'" -- \
    bash -c "'$exe' --device cuda --ranks 4 --trace '$trace' && '$bundle/bin/distlab_trace_check' '$trace' --verified"
done

# 3. Kernels against the copy bandwidth, GEMM against cuBLAS.
if [[ -x "$bundle/bin/distlab_ops_bench" ]]; then
  step ops 120 "grep -E '^(add|axpy) ' '$out/.step.log' | tr -s ' ' | head -n 2 | paste -sd ';'" -- \
    "$bundle/bin/distlab_ops_bench" --device cuda --check
  cp "$out/.step.log" "$out/ops.txt"
fi

# 4. Every all-reduce algorithm, 1 KiB to 1 GiB, 4 ranks on the GPU.
step allreduce 240 "grep -E '^ *1073741824 ' '$out/.step.log' | awk '{print \$5, \$8 \" GB/s\"}' | paste -sd ';'" -- \
  "$bundle/bin/distlab-bench" --device cuda --ranks 4 --collectives allreduce \
  --algos reduce_broadcast,ring,ring_chunked,recursive_doubling,recursive_halving,library \
  --min-bytes 1K --max-bytes 1G --step-factor 4 --iters 10 --warmup 3 --csv "$out/bench.csv" --no-trace

rm -f "$out/.step.log"
tar -C "$out" -czf "$out/traces.tar.gz" traces 2>/dev/null && rm -rf "$out/traces"

{
  echo
  printf '%-48s %-12s %8s  %s\n' "check" "result" "seconds" "detail"
  for r in "${rows[@]}"; do
    IFS='|' read -r n res s d <<<"$r"
    printf '%-48s %-12s %8s  %s\n' "$n" "$res" "$s" "$d"
  done
  ((failed == 0)) && echo "gpu-check: every step passed" || echo "gpu-check: some steps FAILED (see check.log)"
} | tee "$out/summary.txt"
exit $failed
