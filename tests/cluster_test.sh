#!/usr/bin/env bash
# cluster_test.sh CLUSTER_SH MODE ...: scripts/cluster.sh runs across network namespaces, and
# leaves nothing behind on any way out.
#
#   verify TRACE_CHECK TRACE K -- LESSON [ARGS...]
#       the lesson on K hosts, host I's clocks I x 1000 s ahead of host 0's, verifies (exit 0,
#       a final ": verified (" line); its trace holds every invariant (distlab_trace_check:
#       among them, every message arrives after it was sent, which holds only if the lesson
#       lined the hosts' clocks up) and names rank I's host dlc-hI; and every host sent and
#       received over its veth (the run's "bytes on the wire" line)
#   verify-gloo TRACE_CHECK TRACE K -- LESSON [ARGS...]
#       the same with --gloo: no mpirun, distlab's launcher starting rank I on host I, the ranks
#       over Gloo's TCP pairs bound to their hosts' addresses (the final line says gloo)
#   fail -- LESSON [ARGS...]
#       `false` on 2 hosts, and the lesson with --inject-fault on 3: each exits non-zero (the
#       lesson 1, with its FAILED line)
#   interrupt SIG
#       `sleep 60` on 2 hosts, cluster.sh sent SIG once the ranks sleep: it exits 128 + SIG's
#       number within 20 s, and every process that ran in the namespaces is gone
# After each: no namespace, root-namespace link or /etc/netns entry named dlc-*. Where
# namespaces cannot be made (not root, no CAP_NET_ADMIN, no tbf) it says why and exits 77,
# which CTest reports as skipped.
set -uo pipefail
cluster="$1" mode="$2"
shift 2

fail() { echo "cluster_test: $*" >&2; exit 1; }

"$cluster" check || exit $?  # 77 with the reason where namespaces cannot be made

# Nothing named dlc-* anywhere cluster.sh makes things.
nothing_left() {
  local left
  left=$(
    ip netns list | awk '{print $1}' | grep '^dlc-' | sed 's/^/namespace /'
    ip -o link show | awk -F': ' '{print $2}' | grep '^dlc-' | sed 's/^/link /'
    find /etc/netns -maxdepth 1 -name 'dlc-*' 2>/dev/null | sed 's/^/file /'
  )
  [[ -z "$left" ]] || fail "left behind: $(tr '\n' ' ' <<<"$left")"
  echo "cluster_test: nothing named dlc-* is left (namespaces, links, /etc/netns)"
}

# A cluster left by an earlier run would make this one refuse to start: say so.
! ip netns list | grep -q '^dlc-' ||
  fail "a cluster is already up ($(ip netns list | grep '^dlc-' | tr '\n' ' ')); scripts/cluster.sh down removes it"

case "$mode" in
  verify | verify-gloo)
    check="$1" trace="$2" hosts="$3" launcher=() transport=mpi lesson_args=()
    shift 4
    if [[ "$mode" == verify-gloo ]]; then
      launcher=(--gloo) transport=gloo lesson_args=(--transport gloo)
    fi
    rm -f "$trace"
    out=$(timeout 240 "$cluster" run "$hosts" --skew 1000 "${launcher[@]}" -- "$@" "${lesson_args[@]}" --trace "$trace" 2>&1)
    rc=$?
    echo "$out" | tail -n 40
    nothing_left
    ((rc == 0)) || fail "exit status $rc, expected 0"
    grep -q "host I's clocks I x 1000 s ahead" <<<"$out" ||
      echo "cluster_test: the hosts shared one clock (no time namespaces), so the offsets were near 0"
    final=$(grep -E "^lesson [0-9]+ " <<<"$out" | tail -n 1)
    [[ "$final" == *": verified ("* ]] || fail "no final 'verified' line"
    [[ "$final" == *" $hosts ranks, $transport"* ]] || fail "the final line does not say $hosts ranks under $transport"
    "$check" "$trace" --world "$hosts" --verified || fail "trace check failed"
    for ((i = 0; i < hosts; i++)); do
      grep -q "\"name\":\"rank $i (dlc-h$i)\"" "$trace" || fail "the trace does not put rank $i on host dlc-h$i"
    done
    echo "cluster_test: the trace puts rank I on host dlc-hI for I < $hosts"
    # Every host sent and received at least a kilobyte through its switch port.
    wire=$(grep "bytes on the wire:" <<<"$out") || fail "no 'bytes on the wire' line"
    for ((i = 0; i < hosts; i++)); do
      [[ "$wire" =~ dlc-h$i\ [0-9.]+\ (kB|MB|GB)\ out,\ [0-9.]+\ (kB|MB|GB)\ in ]] ||
        fail "host dlc-h$i moved less than a kilobyte each way over its link"
    done
    ;;
  fail)
    shift
    out=$(timeout 120 "$cluster" run 2 -- false 2>&1)
    rc=$?
    echo "$out" | tail -n 20
    nothing_left
    ((rc != 0 && rc != 124)) || fail "'false' on 2 hosts: exit status $rc, expected a failure"
    echo "cluster_test: 'false' on 2 hosts: exit $rc"
    out=$(timeout 120 "$cluster" run 3 -- "$@" --inject-fault --no-trace 2>&1)
    rc=$?
    echo "$out" | tail -n 20
    nothing_left
    ((rc == 1)) || fail "the lesson with --inject-fault on 3 hosts: exit status $rc, expected 1"
    grep -qE "^lesson [0-9]+ .*: FAILED" <<<"$out" || fail "no final 'FAILED' line"
    echo "cluster_test: the lesson with --inject-fault on 3 hosts: exit 1, FAILED"
    ;;
  interrupt)
    sig="$1"
    num=$(kill -l "$sig") || fail "unknown signal '$sig'"
    # Job control: a background job would otherwise start with SIGINT ignored.
    set -m
    "$cluster" run 2 -- sleep 60 &
    pid=$!
    # Wait until both ranks sleep, then note every process in the namespaces.
    ran=()
    sleeping() {  # NS: is a process named sleep in it?
      local p
      for p in $(ip netns pids "$1" 2>/dev/null); do
        [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == sleep ]] && return 0
      done
      return 1
    }
    for ((t = 0; t < 300; t++)); do
      if sleeping dlc-h0 && sleeping dlc-h1; then
        mapfile -t ran < <(ip netns pids dlc-h0; ip netns pids dlc-h1)
        break
      fi
      sleep 0.1
    done
    ((${#ran[@]})) || { kill -KILL "$pid"; "$cluster" down; fail "the ranks did not start within 30 s"; }
    echo "cluster_test: ${#ran[@]} processes in dlc-h0 and dlc-h1; sending SIG$sig to cluster.sh"
    start=$(date +%s)
    kill -"$sig" "$pid"
    wait "$pid"
    rc=$?
    secs=$(($(date +%s) - start))
    nothing_left
    ((rc == 128 + num)) || fail "exit status $rc after SIG$sig, expected $((128 + num))"
    ((secs <= 20)) || fail "took $secs s to stop after SIG$sig"
    for p in "${ran[@]}"; do
      state=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) || continue
      [[ "$state" == Z ]] || fail "process $p ($(cat "/proc/$p/comm")) still runs"
    done
    echo "cluster_test: exit $rc $secs s after SIG$sig; none of the ${#ran[@]} processes runs"
    ;;
  *) fail "unknown mode '$mode'" ;;
esac
echo "cluster_test: ok"
