#!/usr/bin/env bash
# The wheels on other Linux distributions, as a user without build tools installs them: each
# given wheel goes into a clean root file system of the Debian release whose python3 is the
# wheel's CPython (scripts/make-root.sh: python3 with venv and pip, CA certificates, `file`; no
# compiler, no -dev package), and tests/wheel_smoke.sh runs there, in a chroot, on the real
# TensorFlow checkpoints: pip installs the wheel and numpy from PyPI into a fresh venv, then the
# installed `tfckpt` (inspect, validate, convert) and `import tfckpt` reads.
#   cp311 → Debian 12 (bookworm), with numpy 1.26 (the oldest numpy the wheel declares)
#   cp313 → Debian 13 (trixie), with the newest numpy 2.x
# Usage: tests/wheel_distros.sh WHEEL...       (a wheel of another CPython is an error)
#   TFCKPT_TESTDATA   the real checkpoints (default: ../shared/testdata/tf beside the checkout)
# Needs root (debootstrap, chroot, mounts in a private mount namespace: nothing stays mounted),
# the Debian mirror and PyPI. Exit status 0 when every wheel passed on its release.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ $# -gt 0 ] || { echo "usage: tests/wheel_distros.sh WHEEL..." >&2; exit 2; }
testdata=${TFCKPT_TESTDATA:-$root/../shared/testdata/tf}
[ -d "$testdata" ] || { echo "wheel_distros: no test data at $testdata (TFCKPT_TESTDATA)" >&2; exit 1; }
testdata=$(cd "$testdata" && pwd)

failed=0
for wheel in "$@"; do
  case $wheel in /*) ;; *) wheel=$root/$wheel ;; esac
  tag=$(basename "$wheel" | cut -d- -f3)
  case $tag in
    cp311) release=bookworm numpy='numpy==1.26.4' ;;
    cp313) release=trixie numpy='numpy>=2' ;;
    *) echo "wheel_distros: no Debian release here has the python3 of $tag ($(basename "$wheel"))" >&2; exit 2 ;;
  esac
  echo "=== $(basename "$wheel") on Debian $release"
  dir=$(scripts/make-root.sh "$release")
  # PyPI (for numpy) as this machine reaches it: its name server and its CA bundle (which holds
  # the CA of a TLS-inspecting proxy where there is one; pip's own bundle would not).
  cp /etc/resolv.conf "$dir/etc/resolv.conf"
  cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$dir/etc/host-ca-bundle.crt"
  set +e
  unshare --mount --propagation private /bin/bash -euo pipefail -s "$dir" "$root" "$testdata" "$wheel" "$numpy" <<'EOF'
dir=$1 src=$2 testdata=$3 wheel=$4 numpy=$5
bind_ro() { mkdir -p "$2"; mount --bind "$1" "$2"; mount -o remount,bind,ro "$2"; }
bind_ro "$src" "$dir/src"
bind_ro "$testdata" "$dir/testdata"
bind_ro "$(dirname "$wheel")" "$dir/wheels"
mount -t proc proc "$dir/proc"
mount --rbind /dev "$dir/dev"
exec chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 PIP_CERT=/etc/host-ca-bundle.crt \
  TFCKPT_TESTDATA=/testdata WHEEL_SMOKE_NUMPY="$numpy" /bin/bash -euo pipefail -c '
    . /etc/os-release
    echo "$PRETTY_NAME, $(/usr/bin/python3 --version)"
    # A user of the wheel has no build tools: were any here, the test would not show that.
    for c in cc gcc g++ c++ clang; do
      if command -v "$c" >/dev/null; then echo "$c is installed in the root"; exit 1; fi
    done
    if ls /usr/include/python3* >/dev/null 2>&1; then echo "Python headers are installed in the root"; exit 1; fi
    echo "ok: no compiler, no Python headers"
    /src/tests/wheel_smoke.sh "/wheels/$0" /usr/bin/python3' "$(basename "$wheel")"
EOF
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then
    echo "FAILED: $(basename "$wheel") on Debian $release (exit $rc)"
    failed=1
  fi
done
[ "$failed" = 0 ] && echo "wheel_distros: all passed ($# wheel(s))"
exit "$failed"
