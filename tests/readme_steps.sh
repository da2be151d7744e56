#!/usr/bin/env bash
# readme_steps.sh LESSON_DIR: every "main.cpp#Lnn" link in the lesson README's table of steps
# points at the line of main.cpp that carries that step's "STEP n" marker, so the README's map
# of the lecture's steps to the code cannot drift as the code changes.
set -euo pipefail
dir="$1"
fail=0 seen=0
while IFS= read -r row; do
  step=$(sed -E 's/^\| *([0-9]+) .*/\1/' <<<"$row")
  line=$(grep -oE 'main\.cpp#L[0-9]+' <<<"$row" | head -n 1 | sed 's/.*#L//')
  seen=$((seen + 1))
  if sed -n "${line}p" "$dir/main.cpp" | grep -q "STEP $step\b"; then
    echo "ok: step $step -> main.cpp line $line"
  else
    echo "readme_steps: step $step links main.cpp line $line, which is: $(sed -n "${line}p" "$dir/main.cpp")" >&2
    echo "  STEP $step is at line(s): $(grep -n "STEP $step\b" "$dir/main.cpp" | cut -d: -f1 | tr '\n' ' ')" >&2
    fail=1
  fi
done < <(grep -E '^\| *[0-9]+ .*main\.cpp#L[0-9]+' "$dir/README.md")
((seen > 0)) || { echo "readme_steps: no step links in $dir/README.md" >&2; exit 1; }
exit $fail
