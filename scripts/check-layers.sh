#!/usr/bin/env bash
# check-layers.sh — every #include under core/, lessons/, viewer/ and bench/ goes down the layers.
#
#   scripts/check-layers.sh [ROOT]     (ROOT: the source tree, default: this script's checkout)
#
# A file's layer is its folder (core/<layer>/, lessons/common/, a numbered lesson, viewer/model/,
# viewer/app/, viewer/analyze/, bench/). A quoted include must name a file from the tree's root ("core/comm/comm.hpp",
# one style everywhere) and land in the file's own layer or in one the table below allows.
# Anything else fails, naming file:line; docs/architecture.md draws the same table.
set -euo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$root"

# layer: the layers it may include (besides itself). core's layers are in order, bottom first.
declare -A allowed=(
  [core/base]=""
  [core/trace]="core/base"
  [core/device]="core/base core/trace"
  [core/ops]="core/base core/trace core/device"
  [core/transport]="core/base core/trace core/device"
  [core/comm]="core/base core/trace core/device core/transport"
  [core/collectives]="core/base core/trace core/device core/ops core/transport core/comm"
  [core/cost]="core/base core/trace core/device core/ops core/transport core/comm core/collectives"
  [core/runtime]="core/base core/trace core/device core/ops core/transport core/comm core/collectives core/cost"
  [core/training]="core/base core/trace core/device core/ops core/transport core/comm core/collectives core/cost core/runtime"
  [lessons/common]="core"
  [lessons]="core lessons/common"
  [bench]="core lessons/common viewer/model"
  [viewer/model]="core/base core/trace"
  [viewer/app]="core/base core/trace viewer/model"
  [viewer/analyze]="core/base core/trace viewer/model"
)

# The layer of a path under the tree's root, in $layer ("" when it is in none). No subshell:
# the check runs this for every include.
layer_of() {
  case "$1" in
    core/*/*)
      layer="${1#core/}"
      layer="core/${layer%%/*}"
      ;;
    lessons/common/*) layer=lessons/common ;;
    lessons/[0-9][0-9]_*/*) layer=lessons ;;
    viewer/model/*) layer=viewer/model ;;
    viewer/app/*) layer=viewer/app ;;
    viewer/analyze/*) layer=viewer/analyze ;;
    bench/*) layer=bench ;;
    *) layer="" ;;
  esac
}

# True when layer $1 may include layer $2 ("core" in a table entry allows every core layer).
may_include() {
  local from="$1" to="$2" a
  [[ "$from" == "$to" ]] && return 0
  for a in ${allowed[$from]}; do
    [[ "$a" == "$to" || ("$a" == core && "$to" == core/*) ]] && return 0
  done
  return 1
}

failures=0
fail() {
  echo "check-layers: $1" >&2
  failures=$((failures + 1))
}

mapfile -t files < <(find core lessons viewer bench -type f \( -name '*.cpp' -o -name '*.hpp' -o \
  -name '*.cu' -o -name '*.cuh' -o -name '*.h' \) | sort)
for file in "${files[@]}"; do
  layer_of "$file"
  if [[ -z "$layer" ]]; then
    fail "$file: a source file outside every layer (core/ holds folders only)"
  elif [[ -z "${allowed[$layer]+set}" ]]; then
    fail "$file: layer '$layer' is not in the table"
  fi
done

# Every quoted include of every file, read by one grep: FILE:LINE:TARGET.
while IFS=: read -r file line target; do
  layer_of "$file"
  from="$layer"
  [[ -n "$from" && -n "${allowed[$from]+set}" ]] || continue  # reported above
  if [[ ! -f "$target" ]]; then
    fail "$file:$line: #include \"$target\" does not name a file from the tree's root"
    continue
  fi
  layer_of "$target"
  to="$layer"
  if [[ -z "$to" ]]; then
    fail "$file:$line: #include \"$target\" is outside every layer"
  elif ! may_include "$from" "$to"; then
    fail "$file:$line: #include \"$target\": $from may not include $to (allowed: ${allowed[$from]:-nothing})"
  fi
done < <(((${#files[@]})) && grep -n -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "${files[@]}" |
  sed 's/^\([^:]*\):\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2:\3/' || true)

if ((failures)); then
  echo "check-layers: $failures include(s) against the layers (the table is at the top of scripts/check-layers.sh)" >&2
  exit 1
fi
echo "check-layers: every include goes down the layers"
