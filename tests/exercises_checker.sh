#!/usr/bin/env bash
# exercises_checker.sh PYTHON ROOT BUILD: tests/exercises.py on small READMEs written here, one
# lesson 03 run each: a right figure passes, a figure one digit off fails, a figure marked † is
# not held to the output, pieces around "..." must come in order, a break must fail and its
# answer say so (or say "exit 0" where it goes unnoticed), and an answer quoting figures must name
# its command.
set -u
python="$1" root="$2" build="$3"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

# expect STATUS NAME QUESTION ANSWER: a README with that one exercise; the checker must exit STATUS.
expect() {
  local want="$1" name="$2"
  printf '# t\n\n## Exercises\n\n1. **%s** %s\n   <details><summary>Answer</summary>\n\n   %s\n   </details>\n\n## Next lesson\n' \
    "$name" "$3" "$4" >"$dir/README.md"
  local out rc
  out=$("$python" "$root/tests/exercises.py" "$dir/README.md" --root "$root" --build "$build" 2>&1)
  rc=$?
  if ((rc == want)); then
    echo "ok: $name (exit $rc)"
  else
    echo "exercises_checker: $name: exit $rc, want $want" >&2
    echo "$out" | sed 's/^/    /' >&2
    fail=1
  fi
}

run='Run `./distlab lesson 03 --ranks 2 --size 2`.'
expect 0 "the right figure" "$run" 'The root takes `reduce root in 8 B formula 8 B`.'
expect 1 "a figure one digit off" "$run" 'The root takes `reduce root in 9 B formula 8 B`.'
expect 0 "a measured figure marked" "$run" 'It took `12.5 us`† here.'
expect 1 "a measured figure not marked" "$run" 'It took `12.5 us` here.'
expect 0 "pieces in order" "$run" '`reduce root in ... formula 8 B`'
expect 1 "pieces out of order" "$run" '`formula 8 B ... demo gather`'
expect 1 "a run that fails where the answer says it passes" \
  'Run `./distlab lesson 03 --ranks 2 --size 2 --inject-fault`.' 'It fails: exit 2.'
expect 0 "a break that fails as the answer says" \
  'Run `./distlab lesson 03 --ranks 2 --size 2 --inject-fault`.' '`FAILED`, exit 1.'
expect 1 "a break that goes unnoticed where the answer says it fails" \
  'Run `./distlab lesson 03 --ranks 2 --size 2 --inject-fault` and `./distlab lesson 17 --ranks 1 --break no-rescale`.' \
  'Both fail: exit 1.'
expect 0 "a break that goes unnoticed, as the answer says" \
  'Run `./distlab lesson 17 --ranks 1 --break no-rescale`.' 'Nothing notices: exit 0.'
expect 2 "a break whose answer names no exit" \
  'Run `./distlab lesson 03 --ranks 2 --size 2 --inject-fault`.' 'It fails.'
expect 2 "figures with no command" 'What does the root take?' '`reduce root in 8 B`'
exit $fail
