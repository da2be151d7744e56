#!/usr/bin/env bash
# sim_build.sh SOURCE_DIR — builds the smpi preset (lessons and bench against SimGrid's SMPI) in
# SOURCE_DIR/build/smpi, once, before the sim tests (their CTest fixture). Exits 77 (skipped,
# with the reason) when SimGrid is not installed: ./distlab deps installs it.
set -euo pipefail
cd "$1"
if ! command -v smpirun >/dev/null || [[ ! -f /usr/include/smpi/mpi.h ]]; then
  echo "sim_build: SimGrid's SMPI is not installed (smpirun, /usr/include/smpi): ./distlab deps installs it"
  exit 77
fi
[[ -f build/smpi/CMakeCache.txt ]] || cmake --preset smpi >/dev/null
cmake --build build/smpi -j "$(nproc)"
