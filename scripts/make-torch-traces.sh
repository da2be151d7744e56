#!/usr/bin/env bash
# Regenerates traces/torch/{ddp2,ddp4,ddp4-slow}/: PyTorch profiler traces, one file per rank,
# of small DistributedDataParallel jobs on the gloo backend (loopback only), recorded by
# scripts/make_torch_traces.py with the system Python's PyTorch (Debian's python3-torch), and
# <out>/README.txt saying how. Prints one summary line per run and fails if a check fails.
# The synthetic PyTorch 2.x sample, traces/torch/pt2-comms/, comes from make_torch2_sample.py.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/make-torch-traces.sh [--out DIR]

Records PyTorch profiler traces of DDP runs (ddp2, ddp4, ddp4-slow) into DIR/<run>/rank<R>.json
and writes DIR/README.txt. Needs /usr/bin/python3 with torch (apt install python3-torch).

  --out DIR   output folder (default: traces/torch)
  -h, --help  this help
EOF
}

out=traces/torch
while (($# > 0)); do
  case $1 in
    --out)
      (($# >= 2)) || { echo "--out needs a folder" >&2; exit 2; }
      out=$2
      shift 2
      ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."
python=/usr/bin/python3
"$python" -c 'import torch' 2>/dev/null || { echo "$python cannot import torch (apt install python3-torch)" >&2; exit 1; }
command="scripts/make-torch-traces.sh"
[[ "$out" == traces/torch ]] || command+=" --out $out"
"$python" scripts/make_torch_traces.py --out "$out" --command "$command"
