#!/usr/bin/env bash
# output_width.sh LESSON_DIR: every lesson's default run prints lines of at most 100 columns and
# ends with its verdict ("lesson NN name: verified (...)"), the line a student reads last.
set -uo pipefail
dir="$1"
traces=$(mktemp -d)
trap 'rm -rf "$traces"' EXIT
fail=0 seen=0
for exe in "$dir"/[0-9][0-9]_*; do
  [[ -x "$exe" && -f "$exe" ]] || continue
  lesson=$(basename "$exe")
  seen=$((seen + 1))
  out=$(DISTLAB_TRACE_DIR="$traces" timeout 300 "$exe" 2>&1)
  rc=$?
  wide=$(awk 'length > 100 { printf "  %d columns: %s\n", length, substr($0, 1, 60) "..." }' <<<"$out")
  last=$(tail -n 1 <<<"$out")
  if ((rc != 0)); then
    echo "output_width: $lesson exits $rc with its defaults" >&2; fail=1
  elif [[ -n "$wide" ]]; then
    echo "output_width: $lesson prints lines wider than 100 columns:" >&2; echo "$wide" >&2; fail=1
  elif ! [[ "$last" =~ ^lesson\ ${lesson%%_*}\ ${lesson#*_}:\ verified\ \( ]]; then
    echo "output_width: $lesson's last line is not its verdict: $last" >&2; fail=1
  else
    echo "ok: $lesson, $(wc -l <<<"$out") lines, the widest $(awk '{ if (length > m) m = length } END { print m }' <<<"$out") columns"
  fi
done
((seen > 0)) || { echo "output_width: no lessons in $dir" >&2; exit 1; }
exit $fail
