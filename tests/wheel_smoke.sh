#!/usr/bin/env bash
# Smoke test of a built wheel (scripts/build-wheel.sh): installs it into a fresh virtual
# environment for each given Python of the wheel's CPython version, and there, outside the
# source tree, runs the installed `tfckpt` (inspect, validate, convert to safetensors and .npz,
# validate --against), `python -m tfckpt`, and `import tfckpt; tfckpt.load(...)` on real
# TensorFlow checkpoints, and checks that the installed executable and extension load no shared
# library from the system but those the manylinux policy allows (glibc's, libstdc++, libgcc_s,
# zlib): the rest comes from the wheel.
# Usage: tests/wheel_smoke.sh WHEEL [PYTHON...]
#   default PYTHONs: python3.X on PATH or of pyenv (scripts/find-python.sh), and /usr/bin/python3.X,
#                    X the wheel's (cpXY tag)
#   TFCKPT_TESTDATA   the real checkpoints (default: ../shared/testdata/tf beside the checkout)
#   WHEEL_SMOKE_NUMPY a requirement for numpy installed with the wheel (e.g. numpy==1.26.4)
# Installing the wheel fetches numpy (its dependency) from the package index.
# Exit status 0 when every check passed in every environment.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
wheel=${1:?usage: tests/wheel_smoke.sh WHEEL [PYTHON...]}
shift
case $wheel in /*) ;; *) wheel=$root/$wheel ;; esac
testdata=${TFCKPT_TESTDATA:-$root/../shared/testdata/tf}
[ -d "$testdata" ] || { echo "wheel_smoke: no test data (TFCKPT_TESTDATA)" >&2; exit 1; }
tag=$(basename "$wheel" | cut -d- -f3)  # cp311
minor=${tag#cp3}

pythons=("$@")
if [ ${#pythons[@]} -eq 0 ]; then
  for p in "$(scripts/find-python.sh "$minor" || true)" "/usr/bin/python3.$minor"; do
    if [ -n "$p" ] && "$p" -c '' 2>/dev/null; then
      real=$("$p" -c 'import sys; print(sys.executable)')
      case " ${seen:-} " in *" $real "*) continue ;; esac
      seen="${seen:-} $real"
      pythons+=("$p")
    fi
  done
fi
[ ${#pythons[@]} -gt 0 ] || { echo "wheel_smoke: no python3.$minor here" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
n=0
for python in "${pythons[@]}"; do
  n=$((n + 1))
  real=$("$python" -c 'import sys; print(sys.executable, sys.version.split()[0])')
  echo "== $real"
  venv=$work/venv$n
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "$wheel" ${WHEEL_SMOKE_NUMPY:+"$WHEEL_SMOKE_NUMPY"}
  # Not as an `if` condition, where bash ignores set -e inside the subshell too.
  set +e
  (
    set -euo pipefail
    cd "$work" && rm -rf out && mkdir out && cd out
    export PATH=$venv/bin:/usr/bin:/bin
    unset PYTHONPATH LD_LIBRARY_PATH
    t=$testdata
    run() { echo "\$ $*"; "$@"; }

    # What the installed binaries load: the wheel's libraries, else only these of the system.
    exe=$(command -v tfckpt)
    [ "$exe" = "$venv/bin/tfckpt" ] || { echo "tfckpt is $exe, not the environment's"; exit 1; }
    core=$(python -c 'import tfckpt._core as c; print(c.__file__)')
    real_exe=$(python -c 'import glob, sys, sysconfig; print(([p for p in glob.glob(sysconfig.get_path("platlib") + "/*/tfckpt") if not p.endswith(".py")] or [sys.argv[1]])[0])' "$exe")
    for f in "$real_exe" "$core"; do
      if file -L "$f" | grep -q ELF; then
        bad=$(ldd "$f" | awk '/=>/ {print $3}' | grep -v "^$venv/" |
              grep -Ev '/(libc|libm|libdl|librt|libpthread|libresolv|libutil|libstdc\+\+|libgcc_s|libz)\.so' || true)
        if [ -n "$bad" ]; then
          echo "$f loads from the system: $bad"
          exit 1
        fi
        echo "ok: $(basename "$f") loads only the wheel's libraries and glibc, libstdc++, libgcc_s, zlib ($(ldd "$f" | grep -c "$venv/") from the wheel)"
      fi
    done

    run tfckpt --version
    run python -m tfckpt --version
    python -c 'from tfckpt.__main__ import find_executable as f; print("python -m tfckpt runs", f())'
    run tfckpt inspect "$t/keras_tf2_adam_2shards" >inspect.txt
    head -4 inspect.txt
    run tfckpt validate "$t/keras_tf2_adam_2shards"
    run tfckpt validate "$t/savedmodel_tf1_snappy_index/variables"   # a snappy-compressed index
    run tfckpt convert "$t/estimator_dnn_adam_2shards/model.ckpt-1000" -o model.safetensors
    run tfckpt convert "$t/estimator_dnn_adam_2shards/model.ckpt-1000" -o model.npz
    run tfckpt validate model.safetensors --against "$t/estimator_dnn_adam_2shards/model.ckpt-1000"
    run python -m tfckpt inspect model.safetensors --filter global_step
    # An unknown command is a usage error (2), through python -m tfckpt as well.
    rc=0; python -m tfckpt no-such-command >/dev/null 2>&1 || rc=$?
    [ "$rc" = 2 ] || { echo "python -m tfckpt no-such-command: exit $rc, not 2"; exit 1; }
    echo "ok: python -m tfckpt keeps the exit code (2 for a usage error)"

    run python - "$t" <<'EOF'
import os, sys
import numpy as np
import tfckpt
t = sys.argv[1]
assert not tfckpt.__file__.startswith(os.getcwd()), tfckpt.__file__
print("tfckpt", tfckpt.__version__, "from", os.path.dirname(tfckpt.__file__), "with numpy", np.__version__)
state = tfckpt.load(os.path.join(t, "estimator_dnn_adam_2shards", "model.ckpt-1000"))
npz = np.load("model.npz")
assert sorted(state) == sorted(npz.files), (len(state), len(npz.files))
for k, v in state.items():
    assert np.array_equal(v, npz[k]), k
with tfckpt.open(os.path.join(t, "keras_tf2_adam_2shards")) as ckpt:
    names = [x.name for x in ckpt.tensors()]
print(f"ok: tfckpt.load: {len(state)} tensors equal to the converted .npz; tfckpt.open: {len(names)} tensors")
EOF
  )
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then
    echo "FAILED with $real (exit $rc)"
    failed=1
  fi
done
[ "$failed" = 0 ] && echo "wheel_smoke: all passed (${#pythons[@]} environment(s))"
exit "$failed"
