#!/usr/bin/env bash
# Creates (or reuses) the virtual environment of the TensorFlow oracle test (tests/tf_oracle_test.py)
# from the pinned tests/requirements-oracle.txt, and prints its python's path.
# Usage: scripts/oracle-venv.sh [VENV_DIR]   (default: $TFCKPT_ORACLE_VENV, else build-venv/oracle,
# a link to the cache below)
#
# The environment is reused when the SHA-256 of the requirements file and the interpreter's
# version, recorded in VENV_DIR/requirements.sha256 after a complete install, match; otherwise it
# is removed and created again. Runs that start at the same time wait for each other (flock).
# The default VENV_DIR is a link to a cache outside the checkout ($TFCKPT_VENV_CACHE, else
# ~/.cache/tfckpt/oracle-STAMP), so that fresh clones on one machine (CI's) reuse one
# environment instead of installing TensorFlow each time.
# The interpreter is $ORACLE_PYTHON, else python3.11, else python3 (TF 2.21's wheels need
# CPython 3.10-3.13). A line of the requirements file ending in `# --no-deps` is installed
# without its dependencies.
#
# When it cannot be created, the script says why on stderr and exits 1 under CI=true (where the
# oracle must run); elsewhere it exits 0 without printing a path (the test then skips).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${1:-${TFCKPT_ORACLE_VENV:-}}
link=
if [ -z "$venv" ]; then
  link=$root/build-venv/oracle  # (where tests/meson.build looks)
fi
case $venv in /* | '') ;; *) venv=$root/$venv ;; esac
reqs=$root/tests/requirements-oracle.txt

fail() {
  echo "oracle-venv: $*" >&2
  if [ "${CI:-}" = true ]; then
    exit 1
  fi
  echo "oracle-venv: the tf_oracle test will be skipped" >&2
  exit 0
}

python=${ORACLE_PYTHON:-}
if [ -z "$python" ]; then
  python=$(scripts/find-python.sh 11 || command -v python3 || true)
fi
[ -n "$python" ] || fail "no python3 on PATH"
version=$("$python" -c 'import sys; print(sys.version.split()[0])') || fail "$python does not run"
stamp=$( (cat "$reqs"; echo "python $version") | sha256sum | cut -d' ' -f1)
if [ -n "$link" ]; then
  venv=${TFCKPT_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfckpt}/oracle-${stamp:0:16}
  mkdir -p "$(dirname "$link")"
  ln -sfn "$venv" "$link"
fi

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/requirements.sha256" 2>/dev/null)" = "$stamp" ]; then
  echo "$venv/bin/python"
  exit 0
fi

echo "oracle-venv: creating $venv ($python $version, $(basename "$reqs"))" >&2
t0=$SECONDS
rm -rf "$venv"
"$python" -m venv "$venv" >&2 || fail "python -m venv $venv failed"
deps=$(mktemp) nodeps=$(mktemp)
trap 'rm -f "$deps" "$nodeps"' EXIT
grep -v -- '--no-deps' "$reqs" >"$deps" || true
{ grep -- '--no-deps' "$reqs" || true; } | sed 's/#.*//' >"$nodeps"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input)
"${pip[@]}" -r "$deps" >&2 || fail "pip install -r $reqs failed"
if [ -s "$nodeps" ]; then
  "${pip[@]}" --no-deps -r "$nodeps" >&2 || fail "pip install --no-deps failed"
fi
echo "$stamp" >"$venv/requirements.sha256"
echo "oracle-venv: created $venv in $((SECONDS - t0)) s" >&2
echo "$venv/bin/python"
