#!/usr/bin/env bash
# warning-sweep.sh — the whole tree built with each compiler in each preset that names its flags
# (release, asan, tsan), every warning counted: the tree promises a quiet build with the GCC and
# the clang of each supported Debian release. Not run by CI (CI builds with -Werror, but not every
# target in every preset: a sweep of both compilers takes about an hour on 2 cores).
#
#   bash scripts/warning-sweep.sh [--compilers "g++ clang++"] [--presets "release asan tsan"]
#
# Each build goes to build/warn-<compiler>-<preset> with warnings as warnings (never -Werror, so
# one warning does not hide the next), every target, ninja's -k 0. Prints one line per build
# (compiler and version, preset, warnings, failed steps, seconds), keeps each build's log
# (build/warn-<compiler>-<preset>.sweep.log) and exits 1 when any build warned or failed. A build
# folder is removed after a clean build (they are large); one that warned stays for a look.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

compilers="g++ clang++" presets="release asan tsan"
while (($#)); do
  case "$1" in
    --compilers) compilers="${2:?--compilers needs a list}"; shift 2 ;;
    --presets) presets="${2:?--presets needs a list}"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "warning-sweep: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v ninja >/dev/null || { echo "warning-sweep: needs ninja (./distlab deps)" >&2; exit 2; }

unset DISTLAB_WERROR  # count every warning; -Werror would stop at the first one
status=0
printf '%-24s %-8s %9s %7s %6s\n' compiler preset warnings failed s
for cxx in $compilers; do
  path=$(command -v "$cxx") || { echo "warning-sweep: no $cxx on this machine" >&2; status=1; continue; }
  version=$("$path" --version | head -n 1 | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -n 1)
  for preset in $presets; do
    build="build/warn-${cxx//+/x}-$preset"
    rm -rf "$build"
    start=$SECONDS
    log=$(mktemp)
    cmake --preset "$preset" -B "$build" -DCMAKE_CXX_COMPILER="$path" -DDISTLAB_WERROR=OFF \
      >"$log" 2>&1 || true
    cmake --build "$build" -j "$(nproc)" -- -k 0 >>"$log" 2>&1 || true
    warnings=$(grep -c 'warning:' "$log" || true)
    failed=$(grep -c '^FAILED:' "$log" || true)
    configured=1
    [[ -f "$build/build.ninja" ]] || configured=0
    mv "$log" "$build.sweep.log"
    printf '%-24s %-8s %9s %7s %6s\n' "$cxx $version" "$preset" "$warnings" \
      "$([[ $configured == 1 ]] && echo "$failed" || echo configure)" "$((SECONDS - start))"
    if ((warnings || failed)) || [[ $configured == 0 ]]; then
      status=1
      grep -E 'warning:|^FAILED:|CMake Error' "$build.sweep.log" | sort | uniq -c | sort -rn | head -n 20 |
        sed 's/^/    /'
    else
      rm -rf "$build"
    fi
  done
done
exit "$status"
