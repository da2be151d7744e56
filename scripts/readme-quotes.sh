#!/usr/bin/env bash
# readme-quotes.sh [--write] [ROOT] — the code a lesson README quotes is the code in the tree.
#
# A README quotes a piece of source with a marker line and a fenced block right after it:
#
#   <!-- quote core/collectives/all_reduce_ring.hpp ring -->
#   ```cpp
#   ...the lines between "// quote: ring" and "// end quote: ring" in that file, dedented...
#   ```
#
# The source marks the piece with the comment lines `// quote: NAME` and `// end quote: NAME`.
# Without --write the script checks that every quote equals its source and fails, naming the
# README, the file and the first line that differs; with --write it rewrites the quotes from the
# source (run it after changing a quoted loop).
set -euo pipefail
write=0
if [[ "${1:-}" == --write ]]; then write=1; shift; fi
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$root"

# The piece NAME of FILE, dedented by its least indentation; fails when the markers are missing.
extract() {
  awk -v name="$2" '
    $0 ~ "^[ \t]*// end quote: " name "$" { inside = 0; done = 1; next }
    inside { lines[++n] = $0 }
    $0 ~ "^[ \t]*// quote: " name "$" { inside = 1; found = 1 }
    END {
      if (!found || !done) exit 1
      least = -1
      for (i = 1; i <= n; i++) if (lines[i] ~ /[^ \t]/) {
        match(lines[i], /^[ ]*/); if (least < 0 || RLENGTH < least) least = RLENGTH
      }
      for (i = 1; i <= n; i++) print substr(lines[i], least + 1)
    }' "$1"
}

fail=0 quotes=0
for readme in README.md lessons/*/README.md; do
  grep -q '^<!-- quote ' "$readme" || continue
  out=$(mktemp)
  state=copy  # copy: outside a quote; fence: expecting its opening; skip: inside the old block
  while IFS= read -r line || [[ -n "$line" ]]; do
    case "$state" in
      copy)
        printf '%s\n' "$line" >>"$out"
        if [[ "$line" =~ ^\<!--\ quote\ ([^ ]+)\ ([A-Za-z0-9_-]+)\ --\>$ ]]; then
          file="${BASH_REMATCH[1]}" name="${BASH_REMATCH[2]}"
          quotes=$((quotes + 1))
          if ! want=$(extract "$file" "$name"); then
            echo "readme-quotes: $readme quotes '$name' of $file, which has no '// quote: $name' ... '// end quote: $name'" >&2
            fail=1
          fi
          state=fence got="" lines=0
        fi
        ;;
      fence)
        [[ "$line" == '```'* ]] || { echo "readme-quotes: $readme: no code block after the quote of $file $name" >&2; fail=1; }
        printf '%s\n' "$line" >>"$out"
        state=skip
        ;;
      skip)
        if [[ "$line" == '```' ]]; then
          if [[ "$got" != "$want" ]]; then
            if ((write)); then echo "readme-quotes: rewrote $readme's quote of $file $name"
            else
              echo "readme-quotes: $readme's quote of $file '$name' differs from the source:" >&2
              diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") | head -n 6 >&2 || true
              fail=1
            fi
          fi
          printf '%s\n' "$want" '```' >>"$out"
          state=copy
        else
          ((lines++ == 0)) && got="$line" || got+=$'\n'"$line"
        fi
        ;;
    esac
  done <"$readme"
  if ((write)); then cat "$out" >"$readme"; fi
  rm -f "$out"
done
((quotes > 0)) || { echo "readme-quotes: no quotes found" >&2; exit 1; }
((fail)) || echo "readme-quotes: $quotes quotes equal their source"
exit $fail
