#!/usr/bin/env bash
# Prints the path of a CPython 3.MINOR that runs: python3.MINOR on PATH, else pyenv's newest
# 3.MINOR (a pyenv shim of a version that is not selected fails to run, so pyenv's own
# interpreter is taken then). Prints nothing, and exits 1, when there is none.
# Usage: scripts/find-python.sh MINOR      (used by scripts/build-wheel.sh, scripts/oracle-venv.sh, tests/wheel_smoke.sh)
set -uo pipefail
minor=${1:?usage: scripts/find-python.sh MINOR}
if "python3.$minor" -c '' 2>/dev/null; then
  command -v "python3.$minor"
  exit 0
fi
found=
pyenv_root=$(pyenv root 2>/dev/null || true)
for p in ${pyenv_root:+"$pyenv_root"/versions/3.$minor.*/bin/python3.$minor}; do
  if "$p" -c '' 2>/dev/null; then
    found=$p
  fi
done
[ -n "$found" ] || exit 1
echo "$found"
