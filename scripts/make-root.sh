#!/usr/bin/env bash
# Makes a minimal root file system of a Debian release with debootstrap: CPython with pip and
# venv, CA certificates, `file`, and nothing to build with (no compiler, no -dev package). The
# wheel's distribution test (tests/wheel_distros.sh) installs the wheel there as a user would on
# a machine of that release. Needs root and the Debian mirror.
# Usage: scripts/make-root.sh RELEASE      (bookworm = Debian 12, trixie = Debian 13, ...)
# Prints the root's path. Each root is made once under $TFCKPT_VENV_CACHE (default
# ~/.cache/tfckpt) as root-RELEASE, and reused while this script's package list is unchanged;
# runs that start together wait for each other (flock). A failed debootstrap leaves no root.
set -euo pipefail
release=${1:?usage: scripts/make-root.sh RELEASE}
packages=python3,python3-venv,python3-pip,ca-certificates,file
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${TFCKPT_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfckpt}
dir=$cache/root-$release
stamp="$release $packages"

log() { echo "make-root: $*" >&2; }
mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
if [ -x "$dir/usr/bin/python3" ] && [ "$(cat "$dir/.tfckpt-root" 2>/dev/null)" = "$stamp" ]; then
  echo "$dir"
  exit 0
fi
command -v debootstrap >/dev/null || { log "needs debootstrap (scripts/install-deps.sh installs it)"; exit 1; }
[ "$(id -u)" -eq 0 ] || { log "debootstrap needs root"; exit 1; }
rm -rf "$dir" "$dir.new"
log "creating a $release root in $dir (debootstrap, $packages)"
t0=$SECONDS
if ! debootstrap --variant=minbase --include="$packages" "$release" "$dir.new" "$mirror" >"$dir.log" 2>&1; then
  tail -20 "$dir.log" >&2
  rm -rf "$dir.new"
  log "debootstrap of $release failed (the whole log: $dir.log)"
  exit 1
fi
rm -rf "$dir.new"/var/cache/apt/archives/*.deb
echo "$stamp" >"$dir.new/.tfckpt-root"
mv "$dir.new" "$dir"
log "$release root made in $((SECONDS - t0)) s ($(du -sh "$dir" | cut -f1))"
echo "$dir"
