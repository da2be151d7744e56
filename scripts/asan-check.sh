#!/usr/bin/env bash
# asan-check.sh — the failure paths under AddressSanitizer and UndefinedBehaviorSanitizer.
#
# Builds the failure paths' unit tests (distlab_failure_tests), the failure probe and every lesson with -fsanitize=address,undefined
# (build/asan-ci; -O0 and line tables only, and Ninja, which compiles a target's files before the
# libraries below it are linked: the build is most of this script's time; clang where there is
# one, which compiles the Eigen-heavy lessons at -O0 in half GCC's time) and runs:
#   the unit tests of the transport, the runtime, the collectives and the trace;
#   the failure probe: a wrong send/recv order on 2, 64 and 1000 ranks (exit 3), a rank that
#   throws with receives posted, a rank that throws, a size mismatch (exit 1), and the valid
#   slow-peer run (exit 0);
#   every lesson's --inject-fault run (exit 1: the check catches the fault).
# Any sanitizer report fails the script (halt_on_error, and the exit status is checked).
#
#   bash scripts/asan-check.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=build/asan-ci
flags="-O0 -g1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
generator="Unix Makefiles"
command -v ninja >/dev/null && generator=Ninja
compiler=$(command -v clang++ || command -v c++)
if [[ -f "$build/CMakeCache.txt" ]] &&
  ! { grep -q "CMAKE_GENERATOR:INTERNAL=$generator\$" "$build/CMakeCache.txt" &&
    grep -q "CMAKE_CXX_COMPILER:.*=$compiler\$" "$build/CMakeCache.txt"; }; then
  rm -rf "$build"  # made by the other generator or compiler
fi
cmake -S . -B "$build" -G "$generator" -DCMAKE_BUILD_TYPE=None -DDISTLAB_CUDA=OFF \
  -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
# Every lesson in the tree (a list written out went stale as lessons were added).
lessons=()
for dir in lessons/[0-9][0-9]_*/; do lessons+=("$(basename "$dir")"); done
cmake --build "$build" -j "$(nproc)" --target distlab_failure_tests failure_probe "${lessons[@]}"

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failures=0
# expect EXIT NAME COMMAND...: runs it, passes when it exits EXIT and no sanitizer spoke.
expect() {
  local want="$1" name="$2"
  shift 2
  local log="$build/asan-$name.log" rc=0
  "$@" >"$log" 2>&1 || rc=$?
  if ((rc != want)) || grep -qE "ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer" "$log"; then
    echo "asan-check: FAILED $name (exit $rc, expected $want)"
    grep -E -A12 "ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer" "$log" | head -40 || tail -20 "$log"
    failures=$((failures + 1))
  else
    echo "asan-check: ok $name (exit $rc)"
  fi
}

expect 0 unit "$build/tests/distlab_failure_tests" "[transport],[comm],[collectives],[runtime],[trace],[memory]"
probe="$build/tests/probes/failure_probe"
for n in 2 64 1000; do
  expect 3 "wrong-order-n$n" "$probe" --scenario wrong-order --ranks "$n" --deadlock-timeout 30 --no-trace
done
expect 1 throw-posted "$probe" --scenario throw-posted --no-trace
expect 1 throw "$probe" --scenario throw --no-trace
expect 1 size-mismatch "$probe" --scenario size-mismatch --no-trace
expect 0 slow "$probe" --scenario slow --ranks 4 --deadlock-timeout 0.5 --no-trace
for l in "${lessons[@]}"; do
  size=64 ranks=3 extra=()
  [[ $l == 01_* ]] && size=64K
  # The capstone at -O0: 4 ranks (dp 1 x pp 2 x tp 2), a narrower model and 2 steps take every
  # path of the composition in seconds.
  [[ $l == 14_* ]] && ranks=4 extra=(--d 32 --steps 2)
  # Lesson 19 on a tp group of 3 with odd shapes; lesson 20's five recipes on a small MLP, fp16
  # from a scale that overflows (skips, halvings).
  [[ $l == 19_* ]] && extra=(--tp 3 --heads 3 --d 12 --context 7 --batch 2 --layers 1)
  [[ $l == 20_* ]] && extra=(--steps 3 --layers 2 --width 8 --batch 24 --initial-scale-power 30)
  expect 1 "$l-inject-fault" "$build/lessons/$l" --ranks "$ranks" --size "$size" "${extra[@]}" --inject-fault --no-trace
done
if ((failures)); then
  echo "asan-check: $failures run(s) failed"
  exit 1
fi
echo "asan-check: all runs clean"
