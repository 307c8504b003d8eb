#!/usr/bin/env bash
# Benchmark: scale-out planning and one task (docs/SCALE_OUT.md, results in
# docs/PERFORMANCE.md).
#  1. The plan for a checkpoint whose index describes 1 TiB of tensors (2000 float32
#     tables in 16 row slices over 16 sparse data files: metadata only, nothing to read),
#     resliced fixed:32 into 64 tasks. Targets: <= 10 s, <= 1 GiB peak RSS.
#  2. One task of a real 2 GiB checkpoint (8 tables of 256 MiB, fixed:3@1 into 4 files):
#     its time and peak RSS (bounded like reshard's: it is the same copier).
# Usage: bench/plan_scale.sh [GIB] [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
gib=${1:-1024}
prelude "${2:-}"
mkdir -p "$work/big" "$work/real"
build/bench/gen_checkpoint index-only "$work/big/model" "$gib" 2000 16
build/src/tfckpt inspect "$work/big/model" | awk "NR == 1"
r=$(timed build/src/tfckpt reshard "$work/big/model" -o "$work/out/model" --partition fixed:32 --policy shards:64 \
  --plan "$work/plan.json")
echo "plan of ${gib} GiB into 64 tasks: ${r% *} s, peak RSS ${r#* } MiB, plan $(stat -c %s "$work/plan.json") bytes"
build/bench/gen_checkpoint tables "$work/real/model" 256 8 4
build/src/tfckpt reshard "$work/real/model" -o "$work/real_out/model" --partition fixed:3@1 --policy shards:4 \
  --plan "$work/real.json" >/dev/null
cat "$work"/real/model.data-* >/dev/null
r=$(timed build/src/tfckpt reshard --execute "$work/real.json" --task 0)
echo "one task of 4 over a 2 GiB checkpoint (fixed:3@1): ${r% *} s, peak RSS ${r#* } MiB"
