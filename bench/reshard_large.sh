#!/usr/bin/env bash
# Benchmark: reshard a >= 4 GiB checkpoint (8 embedding tables of 512 MiB float32, each in
# 4 row slices over 4 data files, plus dense layers), timed in one run against `cp` of its
# data files to the same disk. Peak RSS from /usr/bin/time -v. Page cache warm for the
# input; outputs are written to disk (each run's output removed before the next).
# Targets: axis-0 reshard <= 1.0x cp, other axes <= 1.3x, RSS <= 256 MiB.
# Usage: bench/reshard_large.sh [MIB_PER_TABLE] [TABLES] [WORK_DIR]   (extra flags: EXTRA=--no-verify)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
mib=${1:-512}
tables=${2:-8}
prelude "${3:-}"
tables_input "$mib" "$tables"  # $work/in, $bytes, $warm (common.sh)
echo "checkpoint: $bytes bytes in 4 data files; EXTRA=${EXTRA:-}"
# The disk's speed varies from run to run: ROUNDS interleaved rounds, best time of each.
rounds=${ROUNDS:-3}
declare -A best rss
labels=("cp" "fixed:8" "fixed:3@1" "none")
command_of() {
  if [ "$1" = cp ]; then
    cmd=(sh -c "cp $work/in.data-* $work/out/")
  else
    # shellcheck disable=SC2206  # EXTRA is a list of flags
    cmd=(build/src/tfckpt reshard "$work/in" -o "$work/out/r" --partition "$1" -q ${EXTRA:-})
  fi
}
rounds "$rounds" "${labels[@]}"  # (common.sh)
for label in "${labels[@]}"; do
  python3 -c "print(f'{\"$label\":>10}: best {${best[$label]}:.2f} s = {${best[$label]} / ${best[cp]}:.2f} x cp, peak RSS ${rss[$label]} MiB')"
done
