#!/usr/bin/env bash
# Runs the test suite of the sanitizer build (build-asan/, scripts/build-asan.sh): leak
# detection on, UBSan halting at its first report (any report fails the test), limits four
# times longer than the release suite's. Arguments go to `meson test` (test names, options).
set -euo pipefail
cd "$(dirname "$0")/.."
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  exec meson test -C build-asan --timeout-multiplier 4 "$@"
