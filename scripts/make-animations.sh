#!/usr/bin/env bash
# Renders the README animations from the example traces: docs/animations/NN_name.gif for every
# lesson from 01 on, the whole playback on the steps clock (distlab-viewer --png-sequence, no display
# needed), assembled by ImageMagick (Debian: imagemagick). Each must stay under 2 MB.
# Run after ./distlab build (and scripts/make-examples.sh when the traces change).
#
#   scripts/make-animations.sh            every lesson
#   scripts/make-animations.sh 06 11      only these lessons
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
viewer="build/${DISTLAB_PRESET:-release}/viewer/distlab-viewer"
[[ -x "$viewer" ]] || { echo "build distlab-viewer first: ./distlab build" >&2; exit 2; }
command -v convert >/dev/null || {
  echo "ImageMagick's convert is missing: apt-get install imagemagick" >&2
  exit 2
}
out=docs/animations
mkdir -p "$out"
frames_dir=$(mktemp -d)
trap 'rm -rf "$frames_dir"' EXIT

# The frame count: 3 frames a step (a packet seen leaving, midway and arriving), 60 at most (a
# long trace is sampled evenly), 12 at least.
frames_for() {
  local steps
  steps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["otherData"]["steps"])' "$1")
  local n=$((3 * steps + 1))
  ((n > 60)) && n=60
  ((n < 12)) && n=12
  echo "$n"
}

wanted=("$@")
# Besides each lesson's own trace: zero bubble's pipeline (lesson 11's README shows both) and
# sequence parallelism in lessons 12 and 13.
extras=" 11_pipeline_microbatching_zb_h1 12_tensor_parallel_mlp_sp 13_tensor_parallel_attention_sp "
for trace in traces/examples/[0-9][0-9]_*.json; do
  name=$(basename "${trace%.json}")
  nn=${name%%_*}
  # one per lesson README from 01 on, and the extras
  [[ (-d "lessons/$name" || "$extras" == *" $name "*) && "$nn" != 00 ]] || continue
  if ((${#wanted[@]})); then
    [[ " ${wanted[*]} " == *" $nn "* ]] || continue
  fi
  n=$(frames_for "$trace")
  rm -f "$frames_dir"/*.png
  "$viewer" --png "$frames_dir/f.png" --png-sequence "$n" --width 1120 --height 630 \
    --font-size 13 "$trace" >/dev/null
  # 0.25 s a frame, the end state held 2.5 s; -layers Optimize keeps only what changed.
  frames=("$frames_dir"/f-*.png)
  last=${frames[-1]}
  unset 'frames[-1]'
  convert -delay 25 -loop 0 "${frames[@]}" -delay 250 "$last" -layers Optimize "$out/$name.gif"
  size=$(stat -c %s "$out/$name.gif")
  echo "$out/$name.gif: $n frames, $((size / 1024)) KiB"
  ((size < 2000000)) || { echo "$out/$name.gif is $size bytes: animations must stay under 2 MB" >&2; exit 1; }
done
