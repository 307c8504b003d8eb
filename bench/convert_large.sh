#!/usr/bin/env bash
# Benchmark: convert the >= 4 GiB reshard benchmark checkpoint (8 embedding tables of
# 512 MiB float32, each in 4 row slices over 4 data files, plus dense layers) to
# safetensors, to .npz, and cast it to bfloat16 (TF -> TF), timed in one run against `cp`
# of its data files to the same disk. Peak RSS from /usr/bin/time -v. Page cache warm for
# the input; outputs written to disk (removed between runs).
# Targets: safetensors <= 1.1x cp, RSS <= 256 MiB; npz and cast are recorded.
# Usage: bench/convert_large.sh [MIB_PER_TABLE] [TABLES] [WORK_DIR]   (ROUNDS=N, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
mib=${1:-512}
tables=${2:-8}
prelude "${3:-}"
tables_input "$mib" "$tables"  # $work/in, $bytes, $warm (common.sh)
echo "checkpoint: $bytes bytes in 4 data files"
rounds=${ROUNDS:-2}
declare -A best rss
labels=("cp" "safetensors" "npz" "cast-bf16")
command_of() {
  case $1 in
    cp) cmd=(sh -c "cp $work/in.data-* $work/out/") ;;
    safetensors) cmd=(build/src/tfckpt convert "$work/in" -o "$work/out/m.safetensors" -q) ;;
    npz) cmd=(build/src/tfckpt convert "$work/in" -o "$work/out/m.npz" -q) ;;
    cast-bf16) cmd=(build/src/tfckpt convert "$work/in" -o "$work/out/bf" --cast float32=bfloat16 -q) ;;
  esac
}
rounds "$rounds" "${labels[@]}"  # (common.sh)
for label in "${labels[@]}"; do
  python3 -c "print(f'{\"$label\":>12}: best {${best[$label]}:.2f} s = {${best[$label]} / ${best[cp]}:.2f} x cp, {$bytes / ${best[$label]} / 1e9:.2f} GB/s of input, peak RSS ${rss[$label]} MiB')"
done
