#!/usr/bin/env bash
# debian-root.sh — run a command in a minimal root of another Debian release, with this checkout
# bound in read-only at /src: how CI builds and tests distlab on Debian 13 from a Debian 12 host.
#
#   scripts/debian-root.sh RELEASE [--fresh] -- COMMAND [ARGS...]
#
#   RELEASE   a Debian codename debootstrap knows (trixie, bookworm)
#   --fresh   make the root anew even when a kept one is there
#
# The root is made once with `debootstrap --variant=minbase RELEASE` from the mirror this
# machine's apt uses, with git and ca-certificates added, and kept in
# ${DISTLAB_ROOTS:-/var/cache/distlab}/RELEASE for the next run (the packages a run installs in it
# stay too). COMMAND runs as root in it with /proc, /sys, /dev, a /dev/shm of its own and the
# host's network (package downloads, loopback); everything is unmounted on every way out.
# Needs root and debootstrap (apt-get install debootstrap).
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; }
die() {
  echo "debian-root.sh: $*" >&2
  exit 2
}

release="${1:-}"
[[ "$release" =~ ^[a-z]+$ ]] || { usage >&2; die "name a release, e.g. trixie"; }
shift
fresh=0
[[ "${1:-}" == "--fresh" ]] && { fresh=1; shift; }
[[ "${1:-}" == "--" ]] || { usage >&2; die "the command comes after --"; }
shift
(($#)) || die "no command after --"
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot and mounts)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
roots="${DISTLAB_ROOTS:-/var/cache/distlab}"
root="$roots/$release"

# The mirror this machine's apt reads Debian from (deb822 sources or the one-line form).
mirror() {
  local uri
  uri=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' |
    grep -v security | head -n 1 || true)
  [[ -n "$uri" ]] || uri=$(grep -hsE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' |
    grep -v security | head -n 1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mount_in() {  # TARGET(inside the root) MOUNT ARGS...
  local target="$root$1"
  shift
  mkdir -p "$target"
  mount "$@" "$target"
  mounted+=("$target")
}

# One run at a time in a root: a second would take the first's mounts for stale ones.
mkdir -p "$roots"
exec {lock}>"$roots/$release.lock"
flock -n "$lock" || die "another run is using $root (its lock: $roots/$release.lock)"

# Mounts under the root that a killed run left behind: unmounted before anything is removed (a
# bind of this checkout would otherwise be removed with the root).
stale_mounts() { awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r; }
for m in $(stale_mounts); do umount -l "$m" || true; done
[[ -z "$(stale_mounts)" ]] || die "mounts under $root remain: $(stale_mounts | tr '\n' ' ')"

if ((fresh)) || [[ ! -f "$root/.distlab-ready" ]]; then
  rm -rf --one-file-system "$root"
  mkdir -p "$roots"
  echo "debian-root.sh: debootstrap --variant=minbase $release $root $(mirror)" >&2
  debootstrap --variant=minbase "$release" "$root" "$(mirror)" >"$roots/$release.debootstrap.log" 2>&1 ||
    { tail -n 20 "$roots/$release.debootstrap.log" >&2; die "debootstrap failed (its log: $roots/$release.debootstrap.log)"; }
fi
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

mount_in /proc -t proc proc
mount_in /sys --bind /sys
mount_in /dev --bind /dev
mount_in /dev/pts --bind /dev/pts
mount_in /dev/shm -t tmpfs -o size=4g tmpfs
mount_in /src --bind "$src"
mount -o remount,bind,ro "$root/src"

if [[ ! -f "$root/.distlab-ready" ]]; then
  chroot "$root" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git ca-certificates >/dev/null'
  touch "$root/.distlab-ready"
fi

# A clean environment: the host's PATH and variables are not the root's (CI's DISTLAB_WERROR and
# DISTLAB_JOBS pass).
set +e
chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 CI="${CI:-}" \
  DISTLAB_WERROR="${DISTLAB_WERROR:-}" DISTLAB_JOBS="${DISTLAB_JOBS:-}" \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
rc=$?
set -e
exit "$rc"
