#!/usr/bin/env bash
# torch_samples.sh ANALYZE OUT — scripts/make-torch-traces.sh end to end where PyTorch is
# installed (/usr/bin/python3 with torch: Debian's python3-torch): the three DDP runs recorded
# into OUT, then the slow one read by distlab-analyze, whose slowest rank must be rank 3 (the
# one the script makes sleep). Without PyTorch it says so and exits 77 (ctest: skipped); CI
# does not install it, and the other tests read the committed samples in traces/torch/.
set -euo pipefail
analyze="$1" out="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "skipped: /usr/bin/python3 cannot import torch (apt-get install python3-torch)"
  exit 77
fi
rm -rf "$out"
bash "$root/scripts/make-torch-traces.sh" --out "$out"
summary=$("$analyze" --summary "$out/ddp4-slow")
echo "$summary"
grep -q "^slowest rank: rank 3 " <<<"$summary" || {
  echo "torch_samples: the recorded slow run's slowest rank is not rank 3" >&2
  exit 1
}
