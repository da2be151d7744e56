#!/usr/bin/env bash
# fuzz-trace-model.sh — fuzz the viewer's trace loader (parse_trace_model) with libFuzzer.
#
#   scripts/fuzz-trace-model.sh [SECONDS]        default 60
#   scripts/fuzz-trace-model.sh 0                the seed corpus once, as CTest runs it (CI)
#
# Configures build/fuzz with clang and -DDISTLAB_FUZZ=ON, builds distlab_fuzz_trace_model
# (libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer), copies the seed corpus
# (viewer/model/fuzz_corpus/) to build/fuzz/corpus/ and fuzzes it for SECONDS with leak
# detection. New interesting inputs stay in build/fuzz/corpus/; a crash, leak or hang is
# written to build/fuzz/artifacts/ and the script exits non-zero. To keep a finding as a
# regression input, fix the loader and copy the artifact into viewer/model/fuzz_corpus/.
# Replay one input:  build/fuzz/viewer/distlab_fuzz_trace_model build/fuzz/artifacts/crash-...
# Seed corpus only, as a test:  ctest --test-dir build/fuzz -L fuzz
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]]; then
  echo "fuzz-trace-model: SECONDS must be a whole number (got '$seconds')" >&2
  exit 2
fi
command -v clang++ >/dev/null || { echo "fuzz-trace-model: clang++ is not installed (apt-get install clang)" >&2; exit 2; }

build=build/fuzz
# Only the fuzz target and its test: the other tests need binaries this build does not make.
CC=clang CXX=clang++ cmake -S . -B "$build" -DDISTLAB_FUZZ=ON -DDISTLAB_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDISTLAB_CUDA=OFF -DDISTLAB_MPI=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target distlab_fuzz_trace_model
if ((seconds == 0)); then
  exec ctest --test-dir "$build" -L fuzz --output-on-failure
fi

mkdir -p "$build/corpus" "$build/artifacts"
for seed in viewer/model/fuzz_corpus/*; do
  [[ -e "$build/corpus/${seed##*/}" ]] || cp "$seed" "$build/corpus/"
done
# -timeout: an input that takes over 10 s is a hang; -max_len: room for a few events more
# than the largest seed.
"$build/viewer/distlab_fuzz_trace_model" "$build/corpus" -max_total_time="$seconds" -detect_leaks=1 \
  -timeout=10 -max_len=16384 -print_final_stats=1 -artifact_prefix="$build/artifacts/"
