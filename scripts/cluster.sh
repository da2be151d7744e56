#!/usr/bin/env bash
# cluster.sh — a real cluster on this machine: K network namespaces ("hosts") joined by shaped
# veth links to one bridge, and Open MPI over TCP between them. Needs root (CAP_NET_ADMIN).
#
#   scripts/cluster.sh up K [--rate R]           make hosts dlc-h0 .. dlc-h(K-1), 1 <= K <= 16
#   scripts/cluster.sh run K [--rate R] [--skew S] [--gloo] -- COMMAND [ARGS...]
#                                                up, mpirun -np K COMMAND (one rank per host),
#                                                down; exits with mpirun's status. --gloo: no
#                                                mpirun; distlab's launcher (scripts/procs.sh)
#                                                starts rank I on host I, bound to its address,
#                                                and the ranks talk over Gloo's TCP pairs
#   scripts/cluster.sh down                      remove everything named dlc-* (idempotent)
#   scripts/cluster.sh status                    what exists now, with link counters
#   scripts/cluster.sh check                     exit 0 if namespaces can be made here, else
#                                                say why and exit 77
#
# What it makes, every name starting with dlc-:
#   namespace dlc-sw        the switch: bridge dlc-br0 and one port dlc-hI-sw per host
#   namespace dlc-hI        host I: lo and dlc-hI-eth with address 10.213.0.(I+1)/24
#   /etc/netns/dlc-hI/      hosts (every dlc-hI name) and an empty resolv.conf, which
#                           `ip netns exec` shows as /etc/hosts and /etc/resolv.conf there
# Addresses: 10.213.0.0/24, used only inside these namespaces. The root namespace gets no
# address, no route and no link: the veths are created inside the namespaces, so no packet
# can leave them, and nothing inside has a route anywhere but 10.213.0.0/24 and loopback.
#
# Rate R (tc's syntax: 100mbit, 1gbit, 2.5gbit, 10gbit; default 1gbit, 1mbit to 100gbit)
# shapes both directions of every host's link with tbf: the host's egress on dlc-hI-eth and
# the switch's egress towards it on dlc-hI-sw. No latency is added: this kernel has tbf and
# htb but no netem, so a link is as fast to answer as the machine (tens of microseconds).
#
# The launch: mpirun runs in dlc-h0; Open MPI's rsh launcher starts its daemon on dlc-hI
# with `cluster.sh agent dlc-hI COMMAND` (ip netns exec, no ssh). Each host runs in its own
# UTS namespace with hostname dlc-hI, so Open MPI sees K nodes, rank I on dlc-hI. Transport:
# pml ob1, btl tcp,self (no shared memory, no UCX), TCP and Open MPI's own wiring on
# 10.213.0.0/24 only.
#
# Clocks: the hosts share this machine's clock, where real nodes would not. So, as on a real
# cluster, each host gets its own: host I runs in a time namespace whose monotonic and boot
# clocks are I x S seconds ahead of host 0's (--skew S, default 1000; 0 turns it off; also 0
# where the kernel has no time namespaces). The lessons' trace must then line its ranks up by
# the clock offsets it estimates at start (core/transport/mpi.cpp): with S = 1000 a message
# between hosts would otherwise seem to arrive 1000 s before or after it was sent.
#
# Cleanup: `run` removes the cluster on every way out (exit, failure, INT, TERM, HUP); `down`
# stops every process left in the namespaces (TERM, then KILL) before deleting them, since a
# namespace with a process in it outlives `ip netns del`. Check that nothing is left with
#   ip netns list | grep dlc- ; ip -o link | grep dlc- ; ls /etc/netns | grep dlc-
#
# Exit status: run: the command's (mpirun's); 130/143 when interrupted; 2 bad input or a
# cluster already up; 77 from `check` where namespaces cannot be made.
# shellcheck disable=SC2317  # the traps' functions are called by name
set -euo pipefail

self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
prefix=dlc
switch_ns="$prefix-sw"
bridge="$prefix-br0"
subnet=10.213.0
cidr="$subnet.0/24"
max_hosts=16
default_rate=1gbit
default_skew=1000

usage() { sed -n '2,/^# shellcheck/{/^# shellcheck/d;s/^# \{0,1\}//;p;}' "$self"; }

die() {
  echo "cluster.sh: $*" >&2
  exit 2
}

host_ns() { echo "$prefix-h$1"; }        # I -> namespace (and hostname) of host I
host_ip() { echo "$subnet.$(($1 + 1))"; } # I -> its address

# Every namespace this script made, switch last, whatever K was.
our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-(h|probe)[0-9]+\$" | sort -V || true
  ip netns list 2>/dev/null | awk '{print $1}' | grep -Fx "$switch_ns" || true
}

# ---- input ---------------------------------------------------------------------------------
check_hosts() {
  if ! [[ "$1" =~ ^[0-9]+$ ]] || ((10#$1 < 1 || 10#$1 > max_hosts)); then
    die "the number of hosts must be a whole number from 1 to $max_hosts, not '$1'"
  fi
}

# R -> bits per second, or die. tc's units: bit kbit mbit gbit tbit, and bps kbps mbps gbps
# (bytes); k, m, g are powers of 1000 as in tc.
rate_bits() {
  local r="${1,,}" num unit
  [[ "$r" =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$ ]] ||
    die "--rate must be a number with a unit of tc's, like 100mbit, 1gbit or 10gbit, not '$1'"
  num="${BASH_REMATCH[1]}" unit="${BASH_REMATCH[3]}"
  awk -v n="$num" -v u="$unit" -v r="$1" 'BEGIN {
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["tbit"] = 1e12
    m["bps"] = 8; m["kbps"] = 8e3; m["mbps"] = 8e6; m["gbps"] = 8e9
    b = n * m[u]
    if (b < 1e6 || b > 1e11) {
      printf "cluster.sh: --rate %s is outside 1mbit to 100gbit\n", r > "/dev/stderr"; exit 2
    }
    printf "%.0f\n", b }'
}

need_root() {
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    die "ip and tc are missing (Debian package iproute2)"
  fi
  [[ $(id -u) -eq 0 ]] || die "making network namespaces needs root (CAP_NET_ADMIN); run as root"
}

# ---- check ---------------------------------------------------------------------------------
# Can namespaces, veths and tbf be made here? Exit 0, or say why and exit 77 (a test's skip).
cmd_check() {
  local why="" out probe="$prefix-probe$$"
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    why="ip and tc are missing (Debian package iproute2)"
  elif [[ $(id -u) -ne 0 ]]; then
    why="network namespaces need root (CAP_NET_ADMIN), and this is uid $(id -u)"
  elif ! command -v mpirun >/dev/null; then
    why="mpirun is missing (Debian package openmpi-bin)"
  elif ! command -v unshare >/dev/null; then
    why="unshare is missing (Debian package util-linux)"
  elif ! out=$(ip netns add "$probe" 2>&1); then
    why="'ip netns add' is not permitted here: $out"
  else
    if ! out=$(ip link add "$prefix-pa" netns "$probe" type veth peer name "$prefix-pb" netns "$probe" 2>&1); then
      why="veth pairs cannot be made here: $out"
    elif ! out=$(tc -n "$probe" qdisc add dev "$prefix-pa" root tbf rate 1gbit burst 128kb latency 50ms 2>&1); then
      why="the tbf qdisc is not available here: $out"
    fi
    ip netns del "$probe" 2>/dev/null || true
  fi
  if [[ -n "$why" ]]; then
    echo "cluster.sh: cannot make a cluster here: $why"
    exit 77
  fi
  echo "cluster.sh: network namespaces, veth pairs and tbf are available"
}

# ---- up ------------------------------------------------------------------------------------
# tbf on DEV in NS at BITS per second: a bucket of 1 ms at the rate (at least 10 frames, so one
# GSO burst is not split needlessly) and at most 50 ms of queue.
shape() {
  local ns="$1" dev="$2" rate="$3" bits="$4" burst
  burst=$((bits / 8 / 1000))
  ((burst < 15140)) && burst=15140
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
}

# No IPv6 in NS: no router solicitations or address checks on the wire, only our traffic.
no_ipv6() {
  ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}

cmd_up() {
  local hosts="" rate="$default_rate"
  while (($#)); do
    case "$1" in
      --rate) (($# >= 2)) || die "--rate needs a value, as in --rate 1gbit"; rate="$2"; shift 2 ;;
      -h | --help) usage; exit 0 ;;
      -*) die "unknown option '$1' (up takes K and --rate R)" ;;
      *) [[ -z "$hosts" ]] || die "up takes one number of hosts, not '$hosts' and '$1'"; hosts="$1"; shift ;;
    esac
  done
  [[ -n "$hosts" ]] || die "up needs a number of hosts, as in: scripts/cluster.sh up 4 --rate 1gbit"
  check_hosts "$hosts"
  hosts=$((10#$hosts))
  local bits
  bits=$(rate_bits "$rate") || exit 2
  need_root
  [[ -z "$(our_namespaces)" ]] ||
    die "a cluster is already up ($(our_namespaces | tr '\n' ' ')); scripts/cluster.sh down removes it"

  # The switch: a namespace with the bridge, no address. Making it is the lock: of two
  # cluster.sh that start at once, the one whose `ip netns add` fails owns nothing, removes
  # nothing.
  ip netns add "$switch_ns" 2>/dev/null ||
    die "a cluster is already up (namespace $switch_ns exists); scripts/cluster.sh down removes it"
  owned=1 making=1
  no_ipv6 "$switch_ns"
  ip -n "$switch_ns" link set lo up
  ip -n "$switch_ns" link add "$bridge" type bridge
  ip -n "$switch_ns" link set "$bridge" up
  local hosts_file
  hosts_file=$(printf '127.0.0.1 localhost\n'; for ((i = 0; i < hosts; i++)); do
    printf '%s %s\n' "$(host_ip "$i")" "$(host_ns "$i")"; done)
  for ((i = 0; i < hosts; i++)); do
    local ns eth port
    ns=$(host_ns "$i") eth="$(host_ns "$i")-eth" port="$(host_ns "$i")-sw"
    ip netns add "$ns"
    no_ipv6 "$ns"
    ip -n "$ns" link set lo up
    # Both ends are born in their namespaces: the root namespace never holds either.
    ip link add "$eth" netns "$ns" type veth peer name "$port" netns "$switch_ns"
    ip -n "$switch_ns" link set "$port" master "$bridge" up
    ip -n "$ns" addr add "$(host_ip "$i")/24" dev "$eth"
    ip -n "$ns" link set "$eth" up
    shape "$ns" "$eth" "$rate" "$bits"
    shape "$switch_ns" "$port" "$rate" "$bits"
    mkdir -p "/etc/netns/$ns"
    echo "$hosts_file" >"/etc/netns/$ns/hosts"
    echo "# distlab cluster: no DNS server inside the namespaces" >"/etc/netns/$ns/resolv.conf"
  done
  making=0
  echo "cluster.sh: up: $hosts hosts ($(host_ns 0) .. $(host_ns $((hosts - 1))), $cidr) on bridge $bridge in $switch_ns, every link shaped to $rate each way"
}

# A standalone `up` that fails or is interrupted half way removes what it made.
owned=0  # 1 once this process made the switch namespace: the cluster is its to remove
making=0
up_cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if ((making)); then
    echo "cluster.sh: up did not finish; removing what it made" >&2
    cmd_down >&2 || true
    ((rc)) || rc=1
  fi
  exit "$rc"
}

# ---- down ----------------------------------------------------------------------------------
# Stop every process inside NAMESPACES (TERM, up to 3 s, then KILL).
stop_processes() {
  local ns pids=() left
  for ns in "$@"; do
    # shellcheck disable=SC2207
    pids+=($(ip netns pids "$ns" 2>/dev/null || true))
  done
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for ((t = 0; t < 30; t++)); do
    left=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left=1; done
    ((left)) || return 0
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  sleep 0.2
}

cmd_down() {
  (($# == 0)) || die "down takes no arguments"
  need_root
  local namespaces=()
  mapfile -t namespaces < <(our_namespaces)
  stop_processes "${namespaces[@]}"
  for ns in "${namespaces[@]}"; do ip netns del "$ns"; done
  rm -rf /etc/netns/"$prefix"-* "${TMPDIR:-/tmp}"/ompi."$prefix"-h*
  rmdir /etc/netns 2>/dev/null || true
  if ((${#namespaces[@]})); then
    echo "cluster.sh: down: removed ${namespaces[*]}"
  else
    echo "cluster.sh: down: nothing to remove"
  fi
}

# ---- status --------------------------------------------------------------------------------
cmd_status() {
  local namespaces=() leftovers
  mapfile -t namespaces < <(our_namespaces)
  if ((${#namespaces[@]} == 0)); then
    echo "no namespace named $prefix-*"
  fi
  for ns in "${namespaces[@]}"; do
    echo "== $ns"
    ip -n "$ns" -br addr show | grep -v '^lo ' | sed 's/^/   /'
    tc -n "$ns" qdisc show | grep tbf | sed 's/^/   /'
    for dev in $(ip netns exec "$ns" ls /sys/class/net); do
      [[ "$dev" == lo ]] && continue
      printf '   %-12s rx %s B, tx %s B\n' "$dev" \
        "$(ip netns exec "$ns" cat "/sys/class/net/$dev/statistics/rx_bytes")" \
        "$(ip netns exec "$ns" cat "/sys/class/net/$dev/statistics/tx_bytes")"
    done
  done
  leftovers=$(ip -o link show | awk -F': ' '{print $2}' | grep "^$prefix-" || true)
  [[ -z "$leftovers" ]] || echo "links in the root namespace named $prefix-*: $leftovers"
  find /etc/netns -maxdepth 1 -name "$prefix-*" 2>/dev/null | sed 's/^/files: /' || true
}

# What each host sent and received through its switch port: TCP, IP and Ethernet headers
# included, so a little more than the ranks' payload.
traffic() {
  local ns port rx tx line=""
  while read -r ns; do
    port="$ns-sw"
    rx=$(ip netns exec "$switch_ns" cat "/sys/class/net/$port/statistics/rx_bytes" 2>/dev/null) || continue
    tx=$(ip netns exec "$switch_ns" cat "/sys/class/net/$port/statistics/tx_bytes")
    line+=$(printf '  %s %s out, %s in' "$ns" "$(human "$rx")" "$(human "$tx")")
  done < <(our_namespaces | grep -v -Fx "$switch_ns")
  [[ -z "$line" ]] || echo "cluster.sh: bytes on the wire:$line"
}

human() {  # BYTES -> 12.3 MB
  awk -v b="$1" 'BEGIN { split("B kB MB GB TB", u); i = 1; while (b >= 1000 && i < 5) { b /= 1000; i++ }
    printf (i == 1 ? "%d %s" : "%.1f %s"), b, u[i] }'
}

# ---- agent ---------------------------------------------------------------------------------
# Open MPI's rsh launcher calls this as `cluster.sh agent HOST COMMAND...` where it would call
# `ssh HOST COMMAND...`. Like ssh, it joins COMMAND into one line for a shell, which runs in
# the host's namespace with the host's name, and with clocks I x DISTLAB_CLUSTER_SKEW seconds
# ahead for host I.
cmd_agent() {
  local skew="${DISTLAB_CLUSTER_SKEW:-0}" host="$1"
  shift
  [[ "$host" =~ ^$prefix-h([0-9]+)$ ]] || die "agent: '$host' is not a host of this cluster"
  local ahead=$((BASH_REMATCH[1] * skew)) clock=()
  # A time namespace holds the first child of unshare, not unshare itself: --fork.
  ((ahead > 0)) && clock=(--time --fork --kill-child --monotonic "$ahead" --boottime "$ahead")
  # shellcheck disable=SC2016  # $0 and $1 are the inner shell's
  exec ip netns exec "$host" unshare --uts "${clock[@]}" sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
}

# distlab's launcher calls this as `cluster.sh gloo-agent I COMMAND...` for rank I: the command
# runs on host I, as cmd_agent runs mpirun's daemons, with DISTLAB_HOST its address (Gloo binds
# its pairs there).
cmd_gloo_agent() {
  local rank="$1"
  shift
  [[ "$rank" =~ ^[0-9]+$ ]] || die "gloo-agent: '$rank' is not a rank"
  local host skew="${DISTLAB_CLUSTER_SKEW:-0}" clock=()
  host=$(host_ns "$rank")
  local ahead=$((rank * skew))
  ((ahead > 0)) && clock=(--time --fork --kill-child --monotonic "$ahead" --boottime "$ahead")
  # shellcheck disable=SC2016  # $0 is the inner shell's
  DISTLAB_HOST=$(host_ip "$rank") exec ip netns exec "$host" unshare --uts "${clock[@]}" \
    sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

# S -> S, or 0 (with a note) where the kernel has no time namespaces.
usable_skew() {
  if (($1 > 0)) && ! unshare --time --fork --monotonic 1 true 2>/dev/null; then
    echo "cluster.sh: this kernel has no time namespaces: every host keeps this machine's clock" >&2
    echo 0
    return 0
  fi
  echo "$1"
}

# ---- run -----------------------------------------------------------------------------------
run_pid=""
run_dir=""
run_rc=0
run_cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [[ -n "$run_pid" ]] && kill -0 "$run_pid" 2>/dev/null; then
    # mpirun passes TERM to its ranks and daemons; down kills whatever is left.
    kill -TERM "$run_pid" 2>/dev/null || true
    for ((t = 0; t < 50; t++)); do kill -0 "$run_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  [[ -n "$run_dir" ]] && rm -rf "$run_dir"
  if ((owned)); then
    traffic >&2 || true
    cmd_down >&2 || true
  fi
  exit "$rc"
}
run_interrupted() {  # SIGNAL NUMBER
  echo "cluster.sh: run: interrupted by SIG$1, removing the cluster" >&2
  run_rc=$((128 + $2))
  exit "$run_rc"
}

cmd_run() {
  local hosts="" rate="$default_rate" skew="$default_skew" gloo=0
  while (($#)); do
    case "$1" in
      --gloo) gloo=1; shift ;;
      --rate) (($# >= 2)) || die "--rate needs a value, as in --rate 1gbit"; rate="$2"; shift 2 ;;
      --skew)
        if ! [[ "${2:-}" =~ ^[0-9]+$ ]] || ((10#$2 > 100000)); then
          die "--skew must be a whole number of seconds from 0 to 100000, not '${2:-}'"
        fi
        skew=$((10#$2))
        shift 2
        ;;
      --) shift; break ;;
      -h | --help) usage; exit 0 ;;
      -*) die "unknown option '$1' (run takes K, --rate R, --skew S, then -- COMMAND)" ;;
      *) [[ -z "$hosts" ]] || die "run takes one number of hosts, then -- COMMAND; '$1' is extra"; hosts="$1"; shift ;;
    esac
  done
  [[ -n "$hosts" ]] || die "run needs a number of hosts, as in: scripts/cluster.sh run 4 -- ./program"
  (($#)) || die "run needs a command after --, as in: scripts/cluster.sh run 4 -- ./program"
  check_hosts "$hosts"
  hosts=$((10#$hosts))
  rate_bits "$rate" >/dev/null || exit 2
  need_root
  ((gloo)) || command -v mpirun >/dev/null || die "mpirun is missing (./distlab deps installs Open MPI)"
  [[ -z "$(our_namespaces)" ]] ||
    die "a cluster is already up ($(our_namespaces | tr '\n' ' ')); scripts/cluster.sh down removes it"

  trap run_cleanup EXIT
  trap 'run_interrupted INT 2' INT
  trap 'run_interrupted TERM 15' TERM
  trap 'run_interrupted HUP 1' HUP
  skew=$(usable_skew "$skew")
  cmd_up "$hosts" --rate "$rate"
  export DISTLAB_CLUSTER_SKEW="$skew"
  if ((gloo)); then
    local clocks="one clock"
    ((skew > 0)) && clocks="host I's clocks I x $skew s ahead of host 0's"
    echo "cluster.sh: run: distlab's launcher, $hosts processes (one rank per host, Gloo over TCP on $cidr at $rate, $clocks) $*" >&2
    DISTLAB_PROCS_AGENT="$self gloo-agent" bash "$(dirname "$self")/procs.sh" "$hosts" "$@" &
    run_pid=$!
    wait "$run_pid" || run_rc=$?
    run_pid=""
    exit "$run_rc"
  fi
  run_dir=$(mktemp -d "${TMPDIR:-/tmp}/$prefix-run.XXXXXX")
  for ((i = 0; i < hosts; i++)); do echo "$(host_ns "$i") slots=1"; done >"$run_dir/hostfile"
  # shellcheck disable=SC2054  # tcp,self is one argument
  local flags=(--hostfile "$run_dir/hostfile" -np "$hosts" --map-by node --bind-to none
    --mca plm_rsh_agent "$self agent" --mca plm_rsh_no_tree_spawn 1
    --mca pml ob1 --mca btl tcp,self --mca osc ^ucx
    --mca btl_tcp_if_include "$cidr" --mca oob_tcp_if_include "$cidr"
    --mca mpi_yield_when_idle 1)
  [[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
  local clocks="one clock"
  ((skew > 0)) && clocks="host I's clocks I x $skew s ahead of host 0's"
  echo "cluster.sh: run: mpirun -np $hosts (one rank per host, TCP over $cidr at $rate, $clocks) $*" >&2
  # In the background so that a signal reaches the trap at once (bash runs traps between
  # commands, and `wait` returns on a signal); a background job ignores SIGINT, so Ctrl-C
  # stops the run through the trap, which stops mpirun.
  # The agent reads the skew from mpirun's environment (Open MPI drops numbers from the agent's
  # own command line): DISTLAB_CLUSTER_SKEW, exported above.
  # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
  ip netns exec "$(host_ns 0)" unshare --uts sh -c 'hostname "$0" && exec mpirun "$@"' \
    "$(host_ns 0)" "${flags[@]}" "$@" &
  run_pid=$!
  wait "$run_pid" || run_rc=$?
  run_pid=""
  exit "$run_rc"
}

case "${1:-help}" in
  up)
    shift
    trap up_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    cmd_up "$@"
    ;;
  down) shift; cmd_down "$@" ;;
  status) shift; cmd_status "$@" ;;
  run) shift; cmd_run "$@" ;;
  check) shift; cmd_check "$@" ;;
  agent) shift; (($# >= 2)) || die "agent needs a host and a command"; cmd_agent "$@" ;;
  gloo-agent) shift; (($# >= 2)) || die "gloo-agent needs a rank and a command"; cmd_gloo_agent "$@" ;;
  help | -h | --help) usage ;;
  *) usage >&2; die "unknown command '$1'" ;;
esac
