#!/usr/bin/env bash
# sim_build.sh SOURCE_DIR — builds the smpi preset's lessons and probes that the sim tests run
# (against SimGrid's SMPI) in SOURCE_DIR/build/smpi, once, before the sim tests (their CTest
# fixture); ./distlab lesson NN --sim builds any other lesson when it is first asked for. Exits 77
# (skipped, with the reason) when SimGrid is not installed: ./distlab deps installs it.
set -euo pipefail
cd "$1"
if ! command -v smpirun >/dev/null || [[ ! -f /usr/include/smpi/mpi.h ]]; then
  echo "sim_build: SimGrid's SMPI is not installed (smpirun, /usr/include/smpi): ./distlab deps installs it"
  exit 77
fi
# Ninja when there is one: it compiles the lessons while the layers below them still link.
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
[[ -f build/smpi/CMakeCache.txt ]] || cmake --preset smpi "${generator[@]}" >/dev/null
cmake --build build/smpi -j "$(nproc)" --target 01_send_recv 05_parameter_server \
  06_allreduce_sequential_ring_parallel 07_recursive_halving 09_zero2 10_zero3_fsdp \
  all_reduce_probe library_probe failure_probe
