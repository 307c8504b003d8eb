#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (meson test) twice:
# on the release build, then on a build with AddressSanitizer + UndefinedBehaviorSanitizer
# (build-asan/); then every libFuzzer target for a short time (scripts/fuzz.sh, FUZZ_SECONDS,
# default 10 here). Ends with one summary line "tests: N passed, N failed, N skipped"
# (each fuzz target counts as one test).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
status=0
meson test -C build --print-errorlogs || status=$?
BUILD_DIR=build-asan scripts/build.sh -Db_sanitize=address,undefined -Dbuildtype=debugoptimized -Db_lundef=false
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  meson test -C build-asan --print-errorlogs --timeout-multiplier 4 || status=$?
FUZZ_SECONDS=${FUZZ_SECONDS:-10} scripts/fuzz.sh || status=$?
python3 - build/meson-logs/testlog.json build-asan/meson-logs/testlog.json build-fuzz/fuzz-results.txt <<'PY'
import json, os, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
fuzz = sys.argv[-1]
if os.path.exists(fuzz):
    for line in open(fuzz):
        counts["passed" if line.split()[1] == "ok" else "failed"] += 1
else:
    counts["failed"] += 1
for path in sys.argv[1:-1]:
    for line in open(path):
        r = json.loads(line)["result"]
        key = "passed" if r in ("OK", "EXPECTEDFAIL") else "skipped" if r == "SKIP" else "failed"
        counts[key] += 1
print(f"tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
exit $status
