#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (meson test) twice:
# on the release build, then on a build with AddressSanitizer + UndefinedBehaviorSanitizer
# (build-asan/). Ends with one summary line "tests: N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
status=0
meson test -C build --print-errorlogs || status=$?
BUILD_DIR=build-asan scripts/build.sh -Db_sanitize=address,undefined -Dbuildtype=debugoptimized -Db_lundef=false
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  meson test -C build-asan --print-errorlogs --timeout-multiplier 4 || status=$?
python3 - build/meson-logs/testlog.json build-asan/meson-logs/testlog.json <<'PY'
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)["result"]
        key = "passed" if r in ("OK", "EXPECTEDFAIL") else "skipped" if r == "SKIP" else "failed"
        counts[key] += 1
print(f"tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
exit $status
