#!/usr/bin/env bash
# clang-syntax.sh — every C++ file a build compiles, parsed by clang with that build's flags and
# warnings as errors: CI's check that the tree stays quiet under clang as well as under the GCC
# that built it. Clang's warnings come from its front end (parsing and template instantiation, not
# optimization), so -fsyntax-only finds every one a clang build would print, in about a third of
# the time. CUDA files (nvcc) are left out.
#
#   bash scripts/clang-syntax.sh [BUILD_DIR]     (default build/release, configured and built)
#
# Reads BUILD_DIR/compile_commands.json (the tree exports one), runs `clang++ -fsyntax-only
# -Werror` on each entry, as many at once as there are cores, prints each file's diagnostics and
# exits 1 when any file has one. scripts/warning-sweep.sh builds the whole tree for real with
# each compiler and preset.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${1:-build/release}"
[[ -f "$build/compile_commands.json" ]] ||
  { echo "clang-syntax: no $build/compile_commands.json (configure and build $build first)" >&2; exit 2; }
clang=$(command -v clang++) || { echo "clang-syntax: needs clang++ (apt-get install clang)" >&2; exit 2; }
exec python3 - "$build/compile_commands.json" "$clang" "$(nproc)" <<'EOF'
import concurrent.futures, json, shlex, subprocess, sys

commands, clang, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])

def clang_args(entry):
    """The entry's command with clang as the compiler, no output file, no depfile, -Werror."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [clang, "-fsyntax-only", "-Werror"], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif a not in ("-c", "-MD", "-MMD", "-Werror"):
            out.append(a)
    return out

entries = [e for e in json.load(open(commands)) if not e["file"].endswith(".cu")]

def check(entry):
    run = subprocess.run(clang_args(entry), cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], run.returncode, run.stderr

failed = 0
with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    for path, code, err in pool.map(check, entries):
        if code != 0 or err.strip():
            failed += 1
            print(f"clang-syntax: {path}\n{err}", end="" if err.endswith("\n") else "\n")
version = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
print(f"clang-syntax: {len(entries)} files parsed by {version}: "
      + (f"{failed} with a diagnostic" if failed else "no warning"))
sys.exit(1 if failed else 0)
EOF
