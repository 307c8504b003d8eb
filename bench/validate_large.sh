#!/usr/bin/env bash
# Benchmark: `tfckpt validate` on a >= 2 GiB checkpoint (4 embedding tables of 512 MiB
# float32 in 4 slices over 4 data files, plus dense layers), warm page cache, compared in
# the same run with `cat PREFIX.data-* > /dev/null`. Targets: ratio <= 1.25, RSS <= 256 MiB.
# Usage: bench/validate_large.sh [MIB_PER_TABLE] [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
mib=${1:-512}
prelude "${2:-}"
tables_input "$mib" 4  # $work/in, $bytes (common.sh)
echo "checkpoint: $bytes bytes in $(ls "$work"/in.data-* | wc -l) data files"
cat "$work"/in.data-* >/dev/null  # warm the page cache
t_cat=$(best_of 3 sh -c "cat $work/in.data-* > /dev/null")
t_val=$(best_of 3 build/src/tfckpt validate "$work/in")
rss=$(peak_rss_kib build/src/tfckpt validate "$work/in")
ratio=$(python3 -c "print(f'{$t_val / $t_cat:.2f}')")
gbs=$(python3 -c "print(f'{$bytes / $t_val / 1e9:.2f}')")
echo "cat: ${t_cat} s; validate: ${t_val} s (${gbs} GB/s); ratio ${ratio}; validate peak RSS ${rss} KiB"
