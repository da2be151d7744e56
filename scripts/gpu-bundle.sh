#!/usr/bin/env bash
# gpu-bundle.sh — builds what scripts/gpu-check.sh runs, here, into build/gpu-bundle/.
#
#   scripts/gpu-bundle.sh          then carry build/gpu-bundle to the GPU machine
#
# The GPU machine has the driver, the CUDA 13 toolkit (cuBLAS) and PyTorch's wheels (NCCL),
# but no Debian packages and no network, and a call carries at most 64 MiB. So the programs
# are built here (x86-64 on both sides; glibc there is newer) with CUDA for sm_90 and without
# MPI (the check runs in-process ranks; NCCL is in all the same), stripped, and carried with the two small shared
# libraries they need that the GPU machine lacks (fmt, simdjson). cuBLAS and NCCL are found
# there at run time (gpu-check.sh sets LD_LIBRARY_PATH); they are too large to carry.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=build/gpu
bundle=build/gpu-bundle
[[ -x /usr/local/cuda/bin/nvcc ]] || { echo "gpu-bundle: nvcc is not installed under /usr/local/cuda" >&2; exit 2; }

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDISTLAB_CUDA=ON -DDISTLAB_MPI=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_DISABLE_FIND_PACKAGE_glfw3=ON >/dev/null
lessons=()
for d in lessons/[0-9][0-9]_*/; do lessons+=("$(basename "$d")"); done
targets=("${lessons[@]}" distlab_gpu_tests distlab-bench distlab_trace_check)
grep -q distlab_ops_bench bench/CMakeLists.txt && targets+=(distlab_ops_bench)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
for t in "${lessons[@]}"; do cp "$build/lessons/$t" "$bundle/bin/"; done
cp "$build/tests/distlab_gpu_tests" "$build/tests/distlab_trace_check" "$build/bench/distlab-bench" "$bundle/bin/"
[[ -x "$build/bench/distlab_ops_bench" ]] && cp "$build/bench/distlab_ops_bench" "$bundle/bin/"
strip "$bundle"/bin/*
# NCCL comes in without MPI (core/transport/nccl_calls.cpp): a GPU test binary without it would test the
# "this build has no NCCL" sentences instead of NCCL.
readelf -d "$bundle/bin/distlab_gpu_tests" | grep -q 'NEEDED.*libnccl' || {
  echo "gpu-bundle: distlab_gpu_tests does not link libnccl (was nccl.h or libnccl found at configure time?)" >&2
  exit 1
}
# The non-system, non-CUDA libraries the programs need: copied beside them.
for lib in $(ldd "$bundle"/bin/* 2>/dev/null | awk '/=> \// {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libfmt.so* | libsimdjson.so*) cp -L "$lib" "$bundle/lib/" ;;
  esac
done
cp scripts/gpu-check.sh "$bundle/"
git rev-parse --short HEAD >"$bundle/COMMIT" 2>/dev/null || true
size=$(du -sm "$bundle" | cut -f1)
echo "gpu-bundle: $bundle ($size MiB): $(ls "$bundle/bin" | tr '\n' ' ')"
((size < 60)) || { echo "gpu-bundle: $size MiB is too much to carry (64 MiB per call, the tree included)" >&2; exit 1; }
