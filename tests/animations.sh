#!/usr/bin/env bash
# animations.sh ROOT — every lesson README from 01 on shows the animation of its trace
# (docs/animations/NN_name.gif, made by scripts/make-animations.sh): the README links it, the
# file is a looping GIF of more than one frame, under 2 MB.
set -u
root="$1"
failed=0
fail() { echo "animations: $*" >&2; failed=1; }
count=0
for dir in "$root"/lessons/[0-9][0-9]_*/; do
  name=$(basename "$dir")
  nn=$((10#${name%%_*}))
  ((nn >= 1)) || continue
  count=$((count + 1))
  gif="$root/docs/animations/$name.gif"
  grep -qF "](../../docs/animations/$name.gif)" "$dir/README.md" ||
    fail "lessons/$name/README.md does not show ../../docs/animations/$name.gif"
  [[ -f "$gif" ]] || { fail "$gif is missing (scripts/make-animations.sh ${name%%_*})"; continue; }
  size=$(stat -c %s "$gif")
  ((size < 2000000)) || fail "$gif is $size bytes, over 2 MB"
  [[ $(head -c 6 "$gif") == GIF89a ]] || fail "$gif is not a GIF89a file"
  grep -qaF NETSCAPE2.0 "$gif" || fail "$gif does not loop (no NETSCAPE2.0 extension)"
  # A graphic control extension (21 F9 04) precedes every frame of an animation.
  frames=$(LC_ALL=C grep -obaP '\x21\xF9\x04' "$gif" | wc -l)
  ((frames > 1)) || fail "$gif has $frames frames; an animation has more than one"
  echo "animations: $name.gif, $frames frames, $((size / 1024)) KiB"
done
((count >= 15)) || fail "found $count lesson READMEs from 01 on, expected 15 or more"
((failed == 0)) && echo "animations: all $count lessons show their animation"
exit "$failed"
