#!/usr/bin/env bash
# Checks that the front ends, the command line (src/cli/) and the Python module (python/),
# use the library through its public API only (include/tfckpt/, docs/LIBRARY.md): what
# they include from the project is a public header ("tfckpt/…") or a file of their own
# folder ("common.h"), never one of the library's internal headers ("run/run.h",
# "copy/copy.h", the generated "tensor_bundle.pb.h", …). Third-party and system headers are not this lint's business.
#
#   scripts/lint-public-api.sh [ROOT]    ROOT: the source tree to check (default: this one)
#
# Prints one line per violation (FILE:LINE: the include) and exits 1 when there is any,
# else exits 0.
set -euo pipefail
root=${1:-"$(dirname "$0")/.."}
cd "$root"

# The library's internal folders: every folder of src/ but the command line's own.
internal=$(find src -mindepth 1 -maxdepth 1 -type d ! -name cli -printf '%f\n' 2>/dev/null | sort | paste -sd'|' -)
[ -n "$internal" ] || { echo "lint-public-api: no src/ folders under $root" >&2; exit 2; }
# (and the library's generated protobuf headers, "tensor_bundle.pb.h": formats' internals)
pattern="^[[:space:]]*#[[:space:]]*include[[:space:]]*([\"<](${internal})/|\"[^\"]*\\.pb\\.h\")"

status=0
while IFS= read -r -d '' file; do
  hits=$(grep -nE "$pattern" "$file" || true)
  if [ -n "$hits" ]; then
    while IFS= read -r hit; do
      echo "$file:$hit"
    done <<<"$hits"
    status=1
  fi
done < <(find src/cli python -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cpp' \) -print0 2>/dev/null | sort -z)

if [ "$status" -ne 0 ]; then
  echo "lint-public-api: internal headers in a front end: give the public API (include/tfckpt/) what it needs" >&2
fi
exit "$status"
