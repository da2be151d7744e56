#!/usr/bin/env bash
# mutate_smoke.sh BUILD SCRATCH — scripts/mutate.sh cannot rot: the whole list still applies to
# the code as it is (--check: every mutation's text found once in its file), three of its
# mutations run for real (lesson 03's, compiled against BUILD's libraries: --reuse) and are
# killed, and a mutation no check sees makes the sweep fail and name it, unless the list says why
# it is equivalent.
set -u
build="$1" scratch="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mutate="$root/scripts/mutate.sh"
fail() { echo "mutate_smoke: $*" >&2; exit 1; }
mkdir -p "$scratch"

out=$(bash "$mutate" --check 2>&1) || fail "the list does not apply: $out"
echo "$out"

ids=03-reduce-root-zero,03-broadcast-input-not-sum,03-input-of-root
out=$(bash "$mutate" --only "$ids" --reuse "$build" --scratch "$scratch/list" 2>&1)
rc=$?
echo "$out"
((rc == 0)) || fail "three of the list's mutations: exit $rc, expected 0"
grep -q "3 mutations: 3 killed, 0 survived" <<<"$out" || fail "the three were not all killed"

# A change to what the report prints alone: no check can see it.
cat >"$scratch/survivor.txt" <<'LIST'
id: 03-printed-only
file: lessons/03_reduce_broadcast/main.cpp
from: (result: N values)
to: (result: N numbers)
lesson: 03_reduce_broadcast
args:
kind: a printed word
LIST
out=$(bash "$mutate" --list "$scratch/survivor.txt" --reuse "$build" --scratch "$scratch/one" 2>&1)
rc=$?
echo "$out"
((rc == 1)) || fail "a surviving mutation: exit $rc, expected 1"
grep -qE "^survived +03-printed-only" <<<"$out" || fail "the survivor is not named"
grep -q "^  03-printed-only" <<<"$out" || fail "the survivor is not listed at the end"
echo "equivalent: it changes a word the report prints, nothing any check reads" >>"$scratch/survivor.txt"
out=$(bash "$mutate" --list "$scratch/survivor.txt" --reuse "$build" --scratch "$scratch/one" 2>&1)
rc=$?
echo "$out"
((rc == 0)) || fail "an equivalent mutation: exit $rc, expected 0"
grep -qE "^equivalent +03-printed-only" <<<"$out" || fail "the equivalent mutation is not marked so"
echo "mutate_smoke: ok"
