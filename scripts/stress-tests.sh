#!/usr/bin/env bash
# Proof under load: runs the whole release suite, and the sanitizer build's interrupt and
# object store suites, N times in a row while the machine is kept busy (stress-ng from
# Debian: a CPU-bound worker per core and a disk writer), and reports every failure with its
# round and test name. A test that passes only on an idle machine fails here.
#
#   scripts/stress-tests.sh [N]        N rounds (default 3); exit 1 when any test failed
#
# Builds build/ and build-asan/ when missing (scripts/build.sh, scripts/build-asan.sh) and
# installs stress-ng when missing (root, as the other scripts). Each round's meson logs are
# kept in build-stress/round-I-{release,asan}.txt. CI does not run this (one run of
# scripts/check.sh, under its time limit); run it before saying a change holds under load.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
case "$rounds" in '' | *[!0-9]*) echo "usage: scripts/stress-tests.sh [N]" >&2; exit 2 ;; esac
out=build-stress
rm -rf "$out"
mkdir -p "$out"

scripts/build.sh || { echo "stress: the release build failed" >&2; exit 1; }
[ -f build-asan/build.ninja ] || scripts/build-asan.sh || { echo "stress: the sanitizer build failed" >&2; exit 1; }
meson compile -C build-asan >/dev/null || { echo "stress: the sanitizer build failed" >&2; exit 1; }
if ! command -v stress-ng >/dev/null; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends stress-ng >/dev/null ||
    { echo "stress: cannot install stress-ng" >&2; exit 1; }
fi

# The load, for the whole run: one CPU-bound worker per core, and a disk writer in a
# directory of its own (stress-ng removes its files when stopped).
mkdir -p "$out/disk"
stress-ng --cpu 0 --cpu-method matrixprod --hdd 1 --hdd-bytes 256M --temp-path "$out/disk" --timeout 0 \
  >"$out/stress-ng.log" 2>&1 &
load=$!
trap 'kill "$load" 2>/dev/null; wait "$load" 2>/dev/null' EXIT

# The suites of the sanitizer build that interrupt runs or talk to an object store.
asan_suites=(crash_safety s3_client cli_s3 cli_s3_write python)

failures=()
# collect ROUND BUILD LOGNAME: the failed tests of BUILD's last run, and sanitizer reports.
collect() {
  local round=$1 build=$2 name=$3
  cp "$build/meson-logs/testlog.txt" "$out/round-$round-$name.txt"
  while IFS= read -r t; do
    [ -n "$t" ] && failures+=("round $round, $name: $t")
  done < <(python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["result"] not in ("OK", "EXPECTEDFAIL", "SKIP"):
        print(f'{r["name"]} ({r["result"]})')
PY
)
  if grep -q "ERROR: \(LeakSanitizer\|AddressSanitizer\)\|runtime error:" "$out/round-$round-$name.txt"; then
    failures+=("round $round, $name: a sanitizer report (see $out/round-$round-$name.txt)")
  fi
}

# The release suite as CI runs it: the corruption sweep at every 4th index offset (a
# different quarter each round; `meson test corruption_sweep` alone does all of them).
start=$SECONDS
for round in $(seq 1 "$rounds"); do
  echo "== round $round of $rounds: release suite (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  TFCKPT_SWEEP_STRIDE=4 TFCKPT_SWEEP_PHASE=$((round % 4)) meson test -C build --print-errorlogs >/dev/null 2>&1
  collect "$round" build release
  echo "== round $round of $rounds: sanitizer build, ${asan_suites[*]}"
  scripts/test-asan.sh --print-errorlogs "${asan_suites[@]}" >/dev/null 2>&1
  collect "$round" build-asan asan
done

echo "stress: $rounds round(s) in $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s under load, ${#failures[@]} failure(s)"
for f in "${failures[@]}"; do echo "  FAIL $f"; done
[ "${#failures[@]}" -eq 0 ]
