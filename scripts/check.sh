#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (meson test) twice:
# on the release build, then on a build with AddressSanitizer + UndefinedBehaviorSanitizer
# (build-asan/); then every libFuzzer target for a short time (scripts/fuzz.sh, FUZZ_SECONDS,
# default 10 here); and builds the Debian packages, installs them into an empty root and
# runs them from there (scripts/build-debs.sh). Ends with each stage's duration and one summary line
# "tests: N passed, N failed, N skipped" (each fuzz target counts as one test).
#
# The release suite runs alone (its corruption sweep has a wall-clock limit and slows down
# badly beside a compiler); the fuzz targets and the Debian packages build and run beside
# the sanitizer suite, whose limits are four times longer. Each background stage writes its
# output to build-ci/STAGE.log, printed when the stage ends.
set -uo pipefail
cd "$(dirname "$0")/.."
ci=build-ci
rm -rf "$ci"
mkdir -p "$ci"
start_all=$SECONDS
status=0

# stage NAME CMD...: runs CMD in the foreground and records its duration and exit code.
stage() {
  local name=$1 t0=$SECONDS rc=0
  shift
  echo "== $name"
  "$@" || rc=$?
  echo "$name $((SECONDS - t0)) $rc" >>"$ci/durations"
  [ "$rc" -eq 0 ] || status=1
  return "$rc"
}

# background NAME CMD...: runs CMD in the background, output to build-ci/NAME.log;
# finish NAME waits for it, prints the log and records the duration and exit code.
background() {
  local name=$1
  shift
  (
    t0=$SECONDS rc=0
    "$@" >"$ci/$name.log" 2>&1 || rc=$?
    echo "$name $((SECONDS - t0)) $rc" >"$ci/$name.done"
  ) &
  echo $! >"$ci/$name.pid"
}
finish() {
  local name=$1 rc
  wait "$(cat "$ci/$name.pid")" || true
  echo "== $name (ran in the background)"
  cat "$ci/$name.log"
  cat "$ci/$name.done" >>"$ci/durations"
  rc=$(awk '{print $3}' "$ci/$name.done")
  [ "$rc" -eq 0 ] || status=1
}

# The sanitizer build's corruption sweep tests every 128th index offset; which ones
# follows from the commit, so that successive commits sample different offsets.
phase=$(( 0x$(git rev-parse --short=7 HEAD 2>/dev/null || echo 0) % 128 ))
asan_build() { scripts/build-asan.sh -Dsweep_phase="$phase"; }
asan_tests() { scripts/test-asan.sh --print-errorlogs; }

# The wheels (scripts/build-wheel.sh) for CPython 3.11 and 3.13, with the sdist; each installed
# from a clean venv here (tests/wheel_smoke.sh) and in a clean root of the Debian release that has
# its CPython (tests/wheel_distros.sh: Debian 12 and 13, made by debootstrap). The library's objects
# come from ccache, compiled by the release build with the same flags.
wheel_stage() {
  local dist=build-ci/dist wheels
  rm -rf "$dist"
  WHEEL_PYTHON="3.11 3.13" scripts/build-wheel.sh "$dist" || return 1
  ls "$dist"/tfckpt-*.tar.gz >/dev/null || { echo "wheel: no sdist"; return 1; }
  wheels=("$dist"/tfckpt-*-manylinux_*.whl)
  tests/wheel_smoke.sh "$dist"/tfckpt-*-cp311-cp311-*.whl || return 1
  tests/wheel_distros.sh "${wheels[@]}"
}

# Install and build first: everything else needs the packages and the release binary.
if ! stage build scripts/build.sh; then
  echo "build failed" >&2
  exit 1
fi
# The TensorFlow oracle's virtual environment (tests/tf_oracle_test.py; TF 2.21 from the pinned
# tests/requirements-oracle.txt) before the release tests: created once in a cache outside the
# checkout (build-venv/oracle links to it) and
# reused while the requirements are unchanged. Under CI=true a failure to create it fails here
# (and the tf_oracle test fails); elsewhere the test is skipped.
stage oracle-venv scripts/oracle-venv.sh
# The release build's corruption sweep tests every 4th index offset here (all of them took
# half of this stage; `meson test corruption_sweep` still does all), the phase taken from the
# commit as for the sanitizer build.
stage test-release env TFCKPT_SWEEP_STRIDE=4 TFCKPT_SWEEP_PHASE="$((phase % 4))" meson test -C build --print-errorlogs
stage asan-build asan_build
background fuzz env FUZZ_SECONDS="${FUZZ_SECONDS:-10}" scripts/fuzz.sh
background debs scripts/build-debs.sh
background wheel wheel_stage
if [ -f build-asan/build.ninja ]; then
  stage test-asan asan_tests
else
  echo "test-asan 0 1" >>"$ci/durations"
  status=1
fi
finish fuzz
finish debs
finish wheel

python3 - "$ci/durations" build/meson-logs/testlog.json build-asan/meson-logs/testlog.json \
  build-fuzz/fuzz-results.txt "$((SECONDS - start_all))" <<'PY'
import json, os, sys
durations, fuzz, total = sys.argv[1], sys.argv[-2], int(sys.argv[-1])
stages = {line.split()[0]: line.split()[2] for line in open(durations)}
print("stage durations:")
for line in open(durations):
    name, secs, rc = line.split()
    print(f"  {name:<13} {int(secs) // 60:3d}m{int(secs) % 60:02d}s{'' if rc == '0' else '  FAILED'}")
print(f"  {'total':<13} {total // 60:3d}m{total % 60:02d}s (overlapping stages run at the same time)")
slowest = []
counts = {"passed": 0, "failed": 0, "skipped": 0}
# The Debian packages' build-install-run check counts as one test, and the wheels' as one.
for stage in ("debs", "wheel"):
    counts["passed" if stages.get(stage) == "0" else "failed"] += 1
if os.path.exists(fuzz):
    for line in open(fuzz):
        counts["passed" if line.split()[1] == "ok" else "failed"] += 1
else:
    counts["failed"] += 1
for path in sys.argv[2:-2]:
    if not os.path.exists(path):
        counts["failed"] += 1
        continue
    for line in open(path):
        r = json.loads(line)
        key = "passed" if r["result"] in ("OK", "EXPECTEDFAIL") else "skipped" if r["result"] == "SKIP" else "failed"
        counts[key] += 1
        slowest.append((r.get("duration", 0), os.path.basename(os.path.dirname(os.path.dirname(path))), r["name"]))
print("slowest tests:")
for secs, build, name in sorted(slowest, reverse=True)[:8]:
    print(f"  {build:<11} {name:<26} {int(secs) // 60:3d}m{int(secs) % 60:02d}s")
print(f"tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
exit $status
