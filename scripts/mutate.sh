#!/usr/bin/env bash
# mutate.sh [--only ID,..] [--list FILE] [--scratch DIR] [--reuse BUILD] [--timeout S] [--check]
# — the mutation sweep: does every lesson notice when the code it teaches is wrong?
#
# scripts/mutations.txt lists one-line mutations of the code under test (flip a comparison, drop
# a term, swap two indices, the local count for the global one, a loop one step short, ...), each
# with the lesson whose checks must catch it and a second setting to run it at. For each one, in a
# scratch copy of the tree (DIR/src, built in DIR/build: CPU only, no tests, no viewer), this
# script applies the change, rebuilds that one lesson, runs it at its defaults and at the second
# setting (--no-trace, in-process ranks), and records the outcome:
#   killed      a run failed (a check, a detected deadlock, a crash or the timeout)
#   survived    every run printed `verified`: a hole in the checks, unless the record says why
#               the mutation leaves the behaviour correct (`equivalent: REASON`)
#   equivalent  survived, and the record explains why that is right
#   stillborn   the mutation does not compile: the record needs fixing
# The file is restored after each one. Before the first, every lesson and setting in the list
# runs unmutated and must verify: a sweep over a broken baseline proves nothing.
#
# The list's format (records separated by blank lines; `#` starts a comment line):
#   id: 18-router-bottom-k                       unique, starting with the lesson's number
#   file: lessons/18_expert_parallel/main.cpp    relative to the project root
#   from: ...) > gates[...                       a substring of one line, found exactly once
#   to: ...) < gates[...                         what replaces it
#   lesson: 18_expert_parallel                   the lesson whose checks must catch it
#   args: --top-k 2                              the second setting (may be empty)
#   kind: flip a comparison                      what kind of mistake it is
#   equivalent: ...                              (optional) why surviving is right
#
# --check validates the list alone (every record complete, every `from` found once, every lesson
# present) without building: quick, and what keeps the list from rotting as the code moves.
# --only runs the named records. --reuse BUILD builds nothing of its own: each mutant lesson's
# main.cpp is compiled by BUILD's own command (BUILD is a build of this tree, build/release say)
# from the scratch copy and linked with BUILD's libraries; so only mutations of a lesson's
# main.cpp can run that way (the others are refused), in seconds each. The exit status is 0 when
# nothing survived unexplained and nothing was stillborn. Results: DIR/results.tsv. A full sweep
# rebuilds once per mutation, about an hour per hundred on two cores, so CI runs --check and three
# mutations with --reuse (tests/mutate_smoke.sh), not this.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
list="$root/scripts/mutations.txt"
scratch="${TMPDIR:-/tmp}/distlab-mutate"
only="" check=0 timeout_s=180 reuse=""

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --only) only="${2:?--only needs IDs}"; shift 2 ;;
    --list) list="${2:?--list needs a file}"; shift 2 ;;
    --scratch) scratch="${2:?--scratch needs a folder}"; shift 2 ;;
    --timeout) timeout_s="${2:?--timeout needs seconds}"; shift 2 ;;
    --reuse) reuse="$(cd "${2:?--reuse needs a build folder}" && pwd)"; shift 2 ;;
    --check) check=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "mutate: unknown option '$1' (--help)" >&2; exit 2 ;;
  esac
done
[[ -f "$list" ]] || { echo "mutate: no list at $list" >&2; exit 2; }
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || { echo "mutate: --timeout wants whole seconds" >&2; exit 2; }

# The list's helper: `validate` prints one line per record, fields separated by \x1f (id, file, line, lesson,
# args, equivalent) or fails naming the bad record; `apply FILE FROM TO` changes FILE in place;
# `sync ROOT DEST` copies the tree's files (git's tracked and untracked, not ignored) where their
# content differs, so that ninja rebuilds only what changed.
helper() {
  python3 - "$@" <<'PY'
import os, shutil, subprocess, sys

def records(path):
    out, cur, lineno = [], {}, 0
    for raw in open(path, encoding="utf-8"):
        lineno += 1
        line = raw.rstrip("\n")
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur: out.append(cur); cur = {}
            continue
        key, sep, value = line.partition(":")
        if not sep:
            sys.exit(f"mutate: {path}:{lineno}: '{line}' is not 'key: value'")
        cur.setdefault("_line", lineno)
        cur[key.strip()] = value[1:] if value.startswith(" ") else value
    if cur: out.append(cur)
    return out

cmd = sys.argv[1]
if cmd == "validate":
    path, root, only = sys.argv[2], sys.argv[3], sys.argv[4]
    wanted = set(filter(None, only.split(",")))
    seen, bad = set(), []
    for r in records(path):
        where = f"{path}:{r['_line']}"
        missing = [k for k in ("id", "file", "from", "to", "lesson", "args", "kind") if k not in r]
        if missing:
            bad.append(f"{where}: missing {', '.join(missing)}"); continue
        if r["id"] in seen: bad.append(f"{where}: id {r['id']} twice")
        seen.add(r["id"])
        f = os.path.join(root, r["file"])
        if not os.path.isfile(f):
            bad.append(f"{where} ({r['id']}): no file {r['file']}"); continue
        text = open(f, encoding="utf-8").read()
        n = text.count(r["from"])
        if n != 1 or not r["from"] or "\n" in r["from"]:
            bad.append(f"{where} ({r['id']}): 'from' found {n} times in {r['file']}, not once"); continue
        if r["from"] == r["to"]:
            bad.append(f"{where} ({r['id']}): 'from' and 'to' are the same")
        if not os.path.isfile(os.path.join(root, "lessons", r["lesson"], "main.cpp")):
            bad.append(f"{where} ({r['id']}): no lesson {r['lesson']}")
        line = text[: text.index(r["from"])].count("\n") + 1
        if not wanted or r["id"] in wanted:
            fields = [r["id"], r["file"], str(line), r["lesson"], r["args"].strip(), r.get("equivalent", "").strip()]
            print("\x1f".join(fields))
    missing = wanted - seen
    if missing: bad.append(f"--only names no record: {', '.join(sorted(missing))}")
    if bad:
        sys.exit("mutate: the list is wrong:\n  " + "\n  ".join(bad))
elif cmd == "apply":
    path, old, new = sys.argv[2], sys.argv[3], sys.argv[4]
    text = open(path, encoding="utf-8").read()
    if text.count(old) != 1: sys.exit(f"mutate: {path}: the mutation's text is not there once")
    open(path, "w", encoding="utf-8").write(text.replace(old, new))
elif cmd == "field":  # the record's field, by id (from/to hold any characters)
    path, rid, key = sys.argv[2], sys.argv[3], sys.argv[4]
    for r in records(path):
        if r.get("id") == rid: sys.stdout.write(r[key]); break
elif cmd == "sync":
    root, dest = sys.argv[2], sys.argv[3]
    files = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src, dst = os.path.join(root, rel), os.path.join(dest, rel)
        if not os.path.isfile(src) or os.path.islink(src): continue
        if os.path.isfile(dst) and open(src, "rb").read() == open(dst, "rb").read(): continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
        shutil.copymode(src, dst)
PY
}

table=$(helper validate "$list" "$root" "$only")
count=$(grep -c . <<<"$table" || true)
if ((check)); then
  echo "mutate: $count mutations in $(basename "$list"), each found once in its file"
  exit 0
fi
((count > 0)) || { echo "mutate: no mutation to run" >&2; exit 2; }

# The scratch tree and its build (with --reuse: BUILD, whose lessons are the unmutated ones).
src="$scratch/src" build="$scratch/build"
mkdir -p "$src"
helper sync "$root" "$src"
if [[ -n "$reuse" ]]; then
  [[ -f "$reuse/build.ninja" ]] || { echo "mutate: --reuse $reuse is not a Ninja build" >&2; exit 2; }
  build="$reuse"
  bad=$(awk -F $'\x1f' '$2 != "lessons/" $4 "/main.cpp" { print "  " $1 " (" $2 ")" }' <<<"$table")
  [[ -z "$bad" ]] || { printf 'mutate: --reuse builds a lesson'"'"'s main.cpp only, not:\n%s\n' "$bad" >&2; exit 2; }
elif [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDISTLAB_CUDA=OFF \
    -DDISTLAB_GLOO=OFF -DDISTLAB_MPI=OFF -DDISTLAB_VIEWER=OFF -DDISTLAB_TESTS=OFF \
    -DDISTLAB_UNITY=OFF -DDISTLAB_WERROR=OFF >"$scratch/configure.log" 2>&1 ||
    { echo "mutate: configuring the scratch build failed: $scratch/configure.log" >&2; exit 1; }
fi
mapfile -t lessons < <(cut -d $'\x1f' -f4 <<<"$table" | sort -u)
echo "mutate: $count mutations over ${#lessons[@]} lessons; building them in $build"
ninja -C "$build" "${lessons[@]}" >"$scratch/build.log" 2>&1 ||
  { echo "mutate: the unmutated lessons do not build: $scratch/build.log" >&2; exit 1; }

# reuse_build LESSON: the scratch copy's lessons/LESSON/main.cpp compiled by BUILD's own command
# and linked by its own, with its libraries, into $scratch/reuse/LESSON (--reuse).
reuse_build() {
  local lesson=$1 obj="lessons/CMakeFiles/$1.dir/$1/main.cpp.o" cmds compile link
  mkdir -p "$scratch/reuse"
  cmds=$(ninja -C "$build" -t commands "$lesson")
  compile=$(grep -F -- "-o $obj -c" <<<"$cmds") && link=$(grep -F -- "-o lessons/$lesson " <<<"$cmds") ||
    { echo "mutate: no compile or link command for $lesson in $build" >&2; return 1; }
  compile=${compile//"-I$root "/"-I$src "}
  compile=${compile//" $root/lessons/"/" $src/lessons/"}
  compile=${compile//" $obj"/" $scratch/reuse/$lesson.o"}
  link=${link//" $obj "/" $scratch/reuse/$lesson.o "}
  link=${link//"-o lessons/$lesson "/"-o $scratch/reuse/$lesson "}
  (cd "$build" && bash -c "$compile" && bash -c "$link")
}

# run LESSON ARGS [EXE]: one run, its exit status in $rc and its first failed check (or last line)
# in $why.
run() {
  local exe="${3:-$build/lessons/$1}" out
  rc=0
  # shellcheck disable=SC2086  # the setting's words
  out=$(cd "$src" && timeout "$timeout_s" "$exe" $2 --no-trace 2>&1) || rc=$?
  why=$(grep -m1 "check failed" <<<"$out" || grep -m1 -E "deadlock|failed|FAILED|error:|terminate" <<<"$out" ||
    tail -1 <<<"$out")
  why=${why:0:160}
}

# The baseline: every lesson at every setting the list uses must verify unmutated.
declare -A settled
while IFS=$'\x1f' read -r _ _ _ lesson args _; do
  for a in "" "$args"; do
    [[ -n "${settled["$lesson|$a"]:-}" ]] && continue
    settled["$lesson|$a"]=1
    run "$lesson" "$a"
    ((rc == 0)) || { echo "mutate: $lesson ${a:-(defaults)} fails unmutated (exit $rc): $why" >&2; exit 1; }
  done
done <<<"$table"
echo "mutate: baseline: ${#settled[@]} lesson settings verify unmutated"

results="$scratch/results.tsv"
printf 'id\tat\tlesson\tresult\tdetail\n' >"$results"
killed=0 survived=0 equivalent=0 stillborn=0
while IFS=$'\x1f' read -r id file line lesson args equiv; do
  from=$(helper field "$list" "$id" from)
  to=$(helper field "$list" "$id" to)
  helper apply "$src/$file" "$from" "$to"
  result="" detail="" exe="" built=0
  if [[ -n "$reuse" ]]; then
    exe="$scratch/reuse/$lesson"
    reuse_build "$lesson" >"$scratch/mutant.log" 2>&1 && built=1
  else
    timeout 900 ninja -C "$build" "$lesson" >"$scratch/mutant.log" 2>&1 && built=1
  fi
  if ((!built)); then
    result=stillborn detail=$(grep -m1 "error" "$scratch/mutant.log" || true)
  else
    for a in "" "$args"; do
      run "$lesson" "$a" "$exe"
      if ((rc != 0)); then
        result=killed detail="[${a:-defaults}] exit $rc: $why"
        break
      fi
      [[ -n "$args" ]] || break
    done
    if [[ -z "$result" ]]; then
      if [[ -n "$equiv" ]]; then result=equivalent detail=$equiv; else result=survived; fi
    elif [[ -n "$equiv" ]]; then
      detail="$detail (marked equivalent: the record is stale)"
    fi
  fi
  cp "$root/$file" "$src/$file"  # restored (a new time: the next build recompiles it)
  case $result in
    killed) killed=$((killed + 1)) ;;
    survived) survived=$((survived + 1)) ;;
    equivalent) equivalent=$((equivalent + 1)) ;;
    stillborn) stillborn=$((stillborn + 1)) ;;
  esac
  printf '%-10s %-34s %s:%s  %s\n' "$result" "$id" "$file" "$line" "$detail"
  printf '%s\t%s:%s\t%s\t%s\t%s\n' "$id" "$file" "$line" "$lesson" "$result" "$detail" >>"$results"
done <<<"$table"
[[ -n "$reuse" ]] || ninja -C "$build" "${lessons[@]}" >/dev/null 2>&1 || true  # unmutated again

echo "mutate: $count mutations: $killed killed, $survived survived, $equivalent equivalent" \
  "(explained in the list), $stillborn stillborn; results in $results"
if ((survived > 0)); then
  echo "survivors (add the check that kills each, or say in the list why it is equivalent):"
  awk -F'\t' '$4 == "survived" { print "  " $1 "  " $2 "  " $3 }' "$results"
fi
((survived == 0 && stillborn == 0))
