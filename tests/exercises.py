#!/usr/bin/env python3
"""exercises.py README [--root DIR] [--build DIR] [--only K] [--list]

Runs a lesson README's exercises as a student would and holds their answers to the output.

The README's "## Exercises" section is a numbered list. In each exercise:
- every code span of the question that starts with `./distlab lesson` is a command, run as
  written through ./distlab (its lesson built in --build, traces written to a scratch folder);
- the answer (a <details> block, or the text after *Answer:*) says how the commands exit: every
  command must exit 0 or with a status the answer names ("exit 1", "exit 2"), a command with
  --break or --inject-fault must fail unless the answer says "exit 0" (a bug that goes
  unnoticed), and a non-zero status the answer names must be seen;
- every code span of the answer that holds a digit and is not a command or an option is a
  figure the output must show: whitespace is squeezed on both sides, and "..." inside a span
  stands for any text between its pieces. A span followed by † is a figure that changes with
  the machine (a time, a rate, a ranking by time): listed, not checked.
- `<!-- not run: WHY -->` in an exercise keeps its commands from running (an exercise that edits
  the code first); an answer that quotes figures must then say where they come from in WHY.
Commands that need what this machine may lack are skipped, saying so: --sim (SimGrid's build,
the `sim.` tests), --cluster (network namespaces, the `cluster.` tests), --device cuda (a GPU).
Exit: 0 all ran and agreed, 1 a command or a figure disagreed, 2 a malformed exercise.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

SPAN = re.compile(r"`([^`]+)`(†?)")


def squeeze(text):
    return " ".join(text.split())


def exercises(readme):
    """(number, question, answer, line) for each exercise of the README."""
    lines = open(readme, encoding="utf-8").read().split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith("## Exercises"))
    except StopIteration:
        return []
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    items, current = [], None
    for i in range(start + 1, end):
        m = re.match(r"^(\d+)\. ", lines[i])
        if m:
            current = [int(m.group(1)), [], i + 1]
            items.append(current)
        elif current is not None:
            current[1].append(lines[i])
        if m:
            current[1].append(lines[i][m.end():])
    out = []
    for number, body, line in items:
        text = "\n".join(body)
        if "<details>" in text:
            question, answer = text.split("<details>", 1)
            answer = answer.split("</details>", 1)[0]
        elif "*Answer:*" in text:
            question, answer = text.split("*Answer:*", 1)
        else:
            question, answer = text, ""
        out.append((number, question, answer, line))
    return out


def spans(text):
    """(content, marked †) for every code span, line breaks inside a span read as spaces."""
    return [(squeeze(m.group(1)), bool(m.group(2))) for m in SPAN.finditer(text)]


def is_figure(span):
    if not re.search(r"\d", span) or span.startswith("./distlab") or span.startswith("-"):
        return False
    # A piece of code (a file, a call, an expression of the source) is not output.
    return not re.search(r"\.(cpp|hpp|md|json)\b|::|\(\)|^[a-z_]+\(|[{}]|;$|==", span)


def found(figure, output):
    at = 0
    for piece in (p.strip() for p in figure.split("...")):
        if not piece:
            continue
        at = output.find(piece, at)
        if at < 0:
            return False
        at += len(piece)
    return True


def needs(command):
    """Why the command cannot run here, or None."""
    words = command.split()
    if "--sim" in words:
        return "SimGrid (--sim: the sim. tests run lessons so)"
    if "--cluster" in words:
        return "network namespaces (--cluster: the cluster. tests run lessons so)"
    if "cuda" in words and "--device" in words:
        return "a GPU (--device cuda)"
    if "--mpi" in words and not shutil.which("mpirun"):
        return "mpirun (--mpi)"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("readme")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--build", default=None, help="the build folder (default ROOT/build/release)")
    ap.add_argument("--only", type=int, default=None, help="run exercise K only")
    ap.add_argument("--list", action="store_true", help="list commands and figures; run nothing")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per command (default 300)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    build = os.path.abspath(args.build or os.path.join(root, "build", "release"))
    readme = os.path.abspath(args.readme)
    where = os.path.relpath(readme, root)
    items = exercises(readme)
    if not items:
        print(f"exercises: {where} has no exercises")
        return 2

    env = dict(os.environ, DISTLAB_NO_DEPS="1", DISTLAB_BUILD_DIR=build)
    bad = malformed = checked = skipped = ran = 0
    scratch = tempfile.mkdtemp(prefix="distlab-exercises-")
    try:
        for number, question, answer, line in items:
            if args.only is not None and number != args.only:
                continue
            head = f"{where}:{line}: exercise {number}"
            commands = [s for s, _ in spans(question) if s.startswith("./distlab lesson ")]
            figures = [(s, marked) for s, marked in spans(answer) if is_figure(s)]
            exits = {int(x) for x in
                     re.findall(r"\bexit(?:s|ed)?(?:\s+with)?(?:\s+status)?\s+(\d+)", answer)}
            not_run = re.search(r"<!-- not run: (.*?) -->", question + answer, re.S)
            if figures and not commands:
                print(f"{head}: its answer quotes {figures[0][0]!r} but the question runs no "
                      "command (name it as `./distlab lesson NN ...`)")
                malformed += 1
                continue
            breaking = [c for c in commands if re.search(r"--break (?!list)|--inject-fault", c)]
            if breaking and not exits:
                print(f"{head}: `{breaking[0]}` fails on purpose, but the answer names no exit status "
                      "(\"exit 1\")")
                malformed += 1
                continue
            if args.list:
                print(f"{head}:")
                for c in commands:
                    print(f"  run   {c}")
                for f, marked in figures:
                    print(f"  {'vary' if marked else 'shows'} {f}")
                continue
            if not_run:
                print(f"{head}: not run ({squeeze(not_run.group(1))})")
                skipped += len(commands)
                continue
            output, seen, failed, unrun = "", set(), False, False
            for k, command in enumerate(commands):
                why = needs(command)
                if why:
                    print(f"{head}: skipped: `{command}` needs {why}")
                    skipped += 1
                    unrun = True
                    continue
                env["DISTLAB_TRACE_DIR"] = os.path.join(scratch, f"{number}-{k}")
                try:
                    run = subprocess.run(["bash", os.path.join(root, "distlab"),
                                          *command.split()[1:]], cwd=root, env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         timeout=args.timeout)
                    text, code = run.stdout.decode("utf-8", "replace"), run.returncode
                except subprocess.TimeoutExpired:
                    text, code = "", "timeout"
                ran += 1
                seen.add(code)
                output += text + "\n"
                # A break that goes unnoticed (exit 0) must be what the answer says ("exit 0").
                if code == "timeout" or (code != 0 and code not in exits) or (
                        command in breaking and code == 0 and 0 not in exits):
                    tail = "\n    ".join(text.strip().split("\n")[-8:])
                    said = "a failure (--break)" if command in breaking else sorted(exits | {0})
                    print(f"{head}: `{command}` exited {code}; the answer says {said}\n    {tail}")
                    failed = True
            if unrun:  # a command could not run here: the figures cannot be held to its output
                print(f"{head}: figures not checked (a command was skipped)")
                bad += failed
                continue
            missing = sorted(exits - seen - {0})
            if missing and commands:
                print(f"{head}: the answer says exit {missing[0]}, no command exited so")
                failed = True
            flat = squeeze(output)
            for figure, marked in figures:
                if marked:
                    skipped += 1
                    continue
                checked += 1
                if not found(figure, flat):
                    print(f"{head}: the answer quotes `{figure}`, which the output of "
                          f"{' and '.join('`' + c + '`' for c in commands)} does not show")
                    failed = True
            bad += bool(failed)
            if commands and not failed:
                print(f"{head}: ok ({len(commands)} run, {len(figures)} figures)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.list:
        return 2 if malformed else 0
    print(f"exercises: {where}: {len(items)} exercises, {ran} commands run, {checked} figures "
          f"checked, {skipped} skipped; {bad} disagree, {malformed} malformed")
    return 2 if malformed else 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
