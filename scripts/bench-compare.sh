#!/usr/bin/env bash
# bench-compare.sh — distlab's chunked ring on in-process ranks against MPI_Allreduce across
# processes, on the same machine, both printed by one script.
#
#   scripts/bench-compare.sh [RANKS] [BYTES]      default: 4 ranks, 64M (float32 all-reduce)
#
# Runs distlab-bench twice:
#   1. RANKS in-process ranks (threads): ring_chunked
#   2. mpirun -np RANKS: MPI_Allreduce (library) and ring_chunked over MPI, timed alternately
# and prints each busbw and the ratio in-process ring_chunked / MPI_Allreduce (issue 3 wants
# >= 1). Environment: ITERS (default 20), DISTLAB_PRESET (default release).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/built.sh
built bench-compare bench/distlab-bench distlab-bench
bench="$BUILT"
ranks="${1:-4}"
bytes="${2:-64M}"
iters="${ITERS:-20}"
command -v mpirun >/dev/null || { echo "bench-compare: mpirun is not installed (apt-get install openmpi-bin)" >&2; exit 2; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
flags=()
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
((ranks > $(nproc))) && flags+=(--oversubscribe)
common=(--min-bytes "$bytes" --max-bytes "$bytes" --collectives allreduce --iters "$iters")

echo "1/2: $bench --ranks $ranks ${common[*]} --algos ring_chunked"
"$bench" --ranks "$ranks" "${common[@]}" --algos ring_chunked --csv "$tmp/threads.csv" >"$tmp/threads.log" ||
  { cat "$tmp/threads.log"; exit 1; }
echo "2/2: mpirun ${flags[*]} -np $ranks $bench ${common[*]} --algos ring_chunked,library"
mpirun "${flags[@]}" -np "$ranks" "$bench" "${common[@]}" --algos ring_chunked,library --csv "$tmp/mpi.csv" \
  >"$tmp/mpi.log" 2>&1 || { cat "$tmp/mpi.log"; exit 1; }

# busbw is column 10 of the CSV (docs/performance.md lists the columns).
busbw() { awk -F, -v a="$2" 'NR > 1 && $5 == a { print $10 }' "$1"; }
ring_threads="$(busbw "$tmp/threads.csv" ring_chunked)"
ring_mpi="$(busbw "$tmp/mpi.csv" ring_chunked)"
library="$(busbw "$tmp/mpi.csv" library)"

echo
printf '%-46s %8s GB/s\n' "ring_chunked, $ranks in-process ranks (threads)" "$ring_threads"
printf '%-46s %8s GB/s\n' "MPI_Allreduce, mpirun -np $ranks" "$library"
printf '%-46s %8s GB/s\n' "ring_chunked, mpirun -np $ranks (same run)" "$ring_mpi"
awk -v t="$ring_threads" -v l="$library" -v m="$ring_mpi" 'BEGIN {
  printf "\nbusbw ratio, in-process ring_chunked / MPI_Allreduce:  %.2fx   (target >= 1)\n", t / l
  printf "busbw ratio, ring_chunked over MPI / MPI_Allreduce:     %.2fx   (target >= 0.9)\n", m / l
}'
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
