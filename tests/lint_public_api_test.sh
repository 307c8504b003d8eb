#!/usr/bin/env bash
# scripts/lint-public-api.sh must fail on an internal header planted in a front end (the
# command line's or Python's), name its file and line, and pass public headers, the front
# end's own files, third-party headers and internal includes inside the library.
set -euo pipefail
lint=$1
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/src/cli" "$tree/src/run" "$tree/src/copy" "$tree/src/kvstore/s3" "$tree/python/tfckpt"
cat >"$tree/src/cli/clean.cc" <<'CC'
#include "common.h"
#include "tfckpt/commands.h"
#include <tfckpt/run.h>
#include "absl/strings/str_cat.h"
#include "CLI/CLI.hpp"
#include <pybind11/pybind11.h>
// #include "run/run.h" is only a comment here
CC
cp "$tree/src/cli/clean.cc" "$tree/python/tfckpt/_core.cc"
printf '#include "run/run.h"\n#include "tensor_bundle.pb.h"\n' >"$tree/src/copy/copy.cc"
"$lint" "$tree" || { echo "FAIL: lint rejected a clean tree"; exit 1; }

fail() { echo "FAIL: $*"; exit 1; }
for file in src/cli/inspect.cc python/tfckpt/_core.cc src/cli/common.h; do
  for planted in '#include "run/run.h"' '#include "copy/copy.h"' '  #  include <kvstore/s3/client.h>' \
                 '#include "tensor_bundle.pb.h"'; do
    cp "$tree/src/cli/clean.cc" "$tree/src/cli/inspect.cc"
    cp "$tree/src/cli/clean.cc" "$tree/src/cli/common.h"
    cp "$tree/src/cli/clean.cc" "$tree/python/tfckpt/_core.cc"
    printf 'int x;\n%s\n' "$planted" >"$tree/$file"
    if out=$("$lint" "$tree" 2>/dev/null); then fail "lint passed $file with: $planted"; fi
    [[ $out == "$file:2:"* ]] || fail "lint did not name the file and line of '$planted' in $file: $out"
  done
done
echo "1 passed, 0 failed"
