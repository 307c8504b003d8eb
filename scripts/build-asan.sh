#!/usr/bin/env bash
# Builds tfckpt with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/ (what
# scripts/check.sh and scripts/stress-tests.sh test): -O1 and line tables only (-g1), so the
# reports keep file:line stacks and the build takes far less than debugoptimized's -O2 -g.
# Extra arguments go to `meson setup` (check.sh passes -Dsweep_phase).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build-asan exec scripts/build.sh -Db_sanitize=address,undefined -Dbuildtype=plain -Doptimization=1 \
  -Dcpp_args=-g1 -Dc_args=-g1 -Db_lundef=false "$@"
