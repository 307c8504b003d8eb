#!/usr/bin/env bash
# The main job on a small example: builds tfckpt, writes an example checkpoint with the
# library (an embedding in 4 slices over 2 data files, dense layers, bfloat16, int64,
# strings) and lists it with `tfckpt inspect`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
example=build/example/model.ckpt
build/examples/make_example "$example" --force
build/src/tfckpt inspect "$example"
