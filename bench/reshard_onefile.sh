#!/usr/bin/env bash
# Benchmark: reshard a 1 GiB checkpoint held in ONE data file (8 float32 tables
# [16384, 2048], each in 4 row slices), re-sliced '.=fixed:8' with the default policy,
# timed against `cp` of the same data file to the same disk; every command's output is
# synced inside the timing. The reshard runs twice per round: output verified (the default)
# and with --no-verify. Paired runs: each round runs cp, then both reshards, and each
# reshard's time is divided by the same round's cp; the median of those ratios is the
# figure (the disk's speed drifts between rounds, a ratio within a round much less).
# Peak RSS from /usr/bin/time -v. Target: median <= 0.9x cp, RSS <= 256 MiB.
# Usage: bench/reshard_onefile.sh [ROUNDS] [WORK_DIR]
#   extra reshard flags: EXTRA=...; another partition: PARTITION=... (default .=fixed:8); another binary: TFCKPT=...
#   another checkpoint: GEN="tables 512 8 4" (gen_checkpoint's arguments after the prefix: the
#   4 GiB checkpoint of reshard_large.sh, for its shapes as paired runs, e.g. PARTITION=none)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
rounds=${1:-8}
work_dir "${2:-}"
# Two jobs at most: the machine's 2 cores are shared.
if [ -f build/build.ninja ]; then meson compile -C build -j 2 >/dev/null; else scripts/build.sh >/dev/null; fi
gen=${GEN:-one-file 8 16384 2048 4}
# shellcheck disable=SC2086  # GEN is a list of arguments
build/bench/gen_checkpoint ${gen%% *} "$work/in" ${gen#* }
bytes=$(cat "$work"/in.data-* | wc -c)
files=$(ls "$work"/in.data-* | wc -l)
partition=${PARTITION:-.=fixed:8}
echo "checkpoint ($gen): $bytes bytes in $files data file(s); --partition $partition ${EXTRA:-}; $rounds paired rounds"
warm="$work/in.data-*"  # read again before every timed command (common.sh: timed)
tfckpt=${TFCKPT:-build/src/tfckpt}  # TFCKPT=another build's binary, to compare
declare -a t_cp t_ver t_nov
for ((i = 0; i < rounds; i++)); do
  r=$(timed sh -c "cp $work/in.data-* $work/out/")
  t_cp+=("${r% *}")
  r=$(timed "$tfckpt" reshard "$work/in" -o "$work/out/r" --partition "$partition" -q ${EXTRA:-})
  t_ver+=("${r% *}")
  rss_ver=${r#* }
  r=$(timed "$tfckpt" reshard "$work/in" -o "$work/out/r" --partition "$partition" -q --no-verify ${EXTRA:-})
  t_nov+=("${r% *}")
  rss_nov=${r#* }
  echo "round $((i + 1)): cp ${t_cp[i]} s, verified ${t_ver[i]} s, --no-verify ${t_nov[i]} s"
done
# The output of the last run, checked once more outside the timing.
"$tfckpt" validate "$work/out/r" --against "$work/in" >/dev/null
python3 - "${t_cp[*]}" "${t_ver[*]}" "${t_nov[*]}" "$rss_ver" "$rss_nov" <<'PY'
import statistics, sys
cp, ver, nov = ([float(x) for x in a.split()] for a in sys.argv[1:4])
print(f"{'cp':>12}: median {statistics.median(cp):.2f} s")
for label, ts, rss in (("verified", ver, sys.argv[4]), ("--no-verify", nov, sys.argv[5])):
    ratios = sorted(t / c for t, c in zip(ts, cp))
    print(f"{label:>12}: median {statistics.median(ts):.2f} s, paired ratio median "
          f"{statistics.median(ratios):.2f} x cp (range {ratios[0]:.2f}-{ratios[-1]:.2f}), peak RSS {rss} MiB")
PY
