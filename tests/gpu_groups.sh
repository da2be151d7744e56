#!/usr/bin/env bash
# gpu_groups.sh GPU_TESTS GPU_CHECK
#   Every GPU test belongs to exactly one of the groups scripts/gpu-check.sh runs, each as its
#   own process: a test in none would never run on the GPU machine, a test in two would run
#   twice in its limited time. Listing needs no GPU, so this runs everywhere.
set -euo pipefail
tests="$1"
check="$2"
groups_line=$(grep -E '^gpu_test_groups=\(' "$check") || {
  echo "gpu_groups.sh: no gpu_test_groups=(...) line in $check" >&2
  exit 1
}
eval "$groups_line"
# Catch2 v2's listing exits with the number of tests it listed, not 0.
names() { { "$tests" --list-test-names-only "$@" || true; } | sed '/^$/d' | sort; }
all=$(names)
total=$(wc -l <<<"$all")
((total > 0)) || { echo "gpu_groups.sh: $tests lists no tests" >&2; exit 1; }
grouped=""
for g in "${gpu_test_groups[@]}"; do
  in_group=$(names "[$g]")
  [[ -n "$in_group" ]] || { echo "gpu_groups.sh: group [$g] has no tests" >&2; exit 1; }
  grouped+="$in_group"$'\n'
done
grouped=$(sed '/^$/d' <<<"$grouped" | sort)
twice=$(uniq -d <<<"$grouped")
none=$(comm -23 <(echo "$all") <(uniq <<<"$grouped"))
fail=0
[[ -z "$twice" ]] || { echo "gpu_groups.sh: in more than one group:"; echo "$twice"; fail=1; }
[[ -z "$none" ]] || { echo "gpu_groups.sh: in none of the groups (${gpu_test_groups[*]}):"; echo "$none"; fail=1; }
((fail == 0)) && echo "gpu_groups.sh: each of the $total GPU tests is in exactly one of ${#gpu_test_groups[@]} groups"
exit $fail
