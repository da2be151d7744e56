#!/usr/bin/env bash
# check_layers.sh SOURCE_DIR — scripts/check-layers.sh passes on the tree and fails, naming
# file:line, on each kind of include against the layers planted in a copy of it.
set -euo pipefail
src="$1"
checker="$src/scripts/check-layers.sh"
bash "$checker" "$src"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
# plant FILE LINE_TEXT EXPECTED: a fresh copy with LINE_TEXT appended to FILE must fail with EXPECTED.
plant() {
  local file="$1" text="$2" expected="$3" copy="$work/tree" out
  rm -rf "$copy" && mkdir -p "$copy"
  cp -r "$src/core" "$src/lessons" "$src/viewer" "$src/bench" "$copy/"
  mkdir -p "$(dirname "$copy/$file")"
  echo "$text" >> "$copy/$file"
  local line
  line=$(wc -l < "$copy/$file")
  if out=$(bash "$checker" "$copy" 2>&1); then
    echo "FAIL: '$text' in $file passed the check"
    fails=$((fails + 1))
  elif [[ "$out" != *"$file:$line"*"$expected"* && "$out" != *"$file"*"$expected"* ]]; then
    echo "FAIL: '$text' in $file: the report does not say '$file:$line ... $expected':"
    echo "$out"
    fails=$((fails + 1))
  else
    echo "ok: $(grep -m1 "$file" <<<"$out")"
  fi
}
plant core/base/units.cpp '#include "core/comm/comm.hpp"' "core/base may not include core/comm"
plant core/transport/threads.cpp '#include "core/runtime/runtime.hpp"' "core/transport may not include core/runtime"
plant core/device/allocator.hpp '#include "core/ops/ops.hpp"' "core/device may not include core/ops"
plant core/training/zero.cpp '#include "lessons/common/zero_lesson.hpp"' "core/training may not include lessons/common"
plant viewer/model/stats.cpp '#include "core/runtime/runtime.hpp"' "viewer/model may not include core/runtime"
plant lessons/01_send_recv/main.cpp '#include "viewer/model/trace_model.hpp"' "lessons may not include viewer/model"
plant core/comm/comm.cpp '#include "transport.hpp"' "does not name a file from the tree's root"
plant core/loose.cpp '// a file at the top of core/' "outside every layer"
((fails == 0)) || { echo "$fails planted include(s) were not caught"; exit 1; }
echo "every planted include was caught"
