#!/usr/bin/env bash
# Benchmark: `tfckpt inspect --json` on an index of N tensors (default 100000).
# Prints wall time (best of 5) and peak RSS. Target: <= 0.3 s. Usage: bench/inspect_many.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
n=${1:-100000}
prelude
build/bench/gen_checkpoint many "$work/many" "$n"
echo "index: $(stat -c %s "$work/many.index") bytes, $n tensors"
best=$(best_of 5 build/src/tfckpt inspect "$work/many" --json)
rss=$(peak_rss_kib build/src/tfckpt inspect "$work/many" --json)
echo "inspect --json: best of 5 = ${best} s, peak RSS = ${rss} KiB"
