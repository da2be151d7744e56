# built.sh — sourced by the bench scripts: where a built program is, or how to build it.
#   built SCRIPT PATH TARGET: sets BUILT to build/$DISTLAB_PRESET/PATH (preset: release by
#   default), or says which cmake command builds TARGET and exits 2 when it is missing.
built() {
  local preset="${DISTLAB_PRESET:-release}"
  BUILT="build/$preset/$2"
  if [[ ! -x "$BUILT" ]]; then
    echo "$1: $BUILT is missing; build it with: cmake --build build/$preset --target $3" >&2
    exit 2
  fi
}
