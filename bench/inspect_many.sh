#!/usr/bin/env bash
# Benchmark: `tfckpt inspect --json` on an index of N tensors (default 100000).
# Prints wall time (best of 5) and peak RSS. Usage: bench/inspect_many.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
scripts/build.sh >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build/bench/gen_checkpoint many "$work/many" "$n"
echo "index: $(stat -c %s "$work/many.index") bytes, $n tensors"
best=$(python3 - "$work/many" <<'PY'
import subprocess, sys, time
times = []
for _ in range(5):
    t = time.perf_counter()
    subprocess.run(["build/src/tfckpt", "inspect", sys.argv[1], "--json"], stdout=subprocess.DEVNULL, check=True)
    times.append(time.perf_counter() - t)
print(f"{min(times):.3f}")
PY
)
rss=$( { /usr/bin/time -v build/src/tfckpt inspect "$work/many" --json >/dev/null; } 2>&1 | awk '/Maximum resident/ {print $6}')
echo "inspect --json: best of 5 = ${best} s, peak RSS = ${rss} KiB"
