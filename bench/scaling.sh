#!/usr/bin/env bash
# Issue 26: every command at the copy engine's speed, on any number of cores.
#
# Generates a checkpoint of GIB GiB (16 float32 tables, each in 4 row slices over 4 data
# files: `gen_checkpoint tables`), puts input and outputs in DIR (default /dev/shm, a tmpfs:
# the disk out of the picture) and times each command at -j 1 and at one thread per core,
# ROUNDS times each (interleaved; the best kept), as ratios to `reshard --partition fixed:8`
# at the same -j and to `cp` run one process per data file, with peak RSS from
# /usr/bin/time -v (which counts file-backed pages). Checks the issue's targets and that every
# command stays within 256 MiB; prints a markdown table (docs/PERFORMANCE.md).
#
# Usage: bench/scaling.sh [GIB] [DIR]      (ROUNDS=N, default 3; JOBS="1 N" overrides the -j values)
# Needs GIB * 3 GiB free in DIR (input, a safetensors copy of it, one output at a time).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
gib=${1:-4}
base=${2:-/dev/shm}
rounds=${ROUNDS:-3}
cores=$(nproc)
jobs_list=${JOBS:-"1 $cores"}
scripts/build.sh >/dev/null
tfckpt=$PWD/build/src/tfckpt
work_dir "$(mktemp -d "$base/tfckpt-scaling-XXXXXX")"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/Mem/ {print $2}') GiB, ${base} ($(df -T "$base" | awk 'NR == 2 {print $2}'))"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

build/bench/gen_checkpoint tables "$work/in" $((gib * 1024 / 16)) 16 4 >/dev/null
# The second checkpoint of `merge --average`: the same data files under another prefix (hard
# links: no more memory; the averaging work is the same whatever the values).
for f in "$work"/in.data-*; do ln "$f" "${f/\/in./\/in2.}"; done
cp "$work/in.index" "$work/in2.index"
bytes=$(cat "$work"/in.data-* | wc -c)
echo "# checkpoint: $bytes bytes, 16 tables of $((gib * 1024 / 16)) MiB float32 in 4 row slices over 4 data files; ROUNDS=$rounds"

# One timed run of the rest of the arguments: "SECONDS PEAK_RSS_KIB CPU_SECONDS" (user +
# system, all threads: on a machine shared with other work the wall time says how much of
# the cores this run got, the CPU time what it needed). Outputs go to
# $work/out, emptied before (outside the timing).
measure() {
  rm -rf "$work/out" && mkdir -p "$work/out"
  local t0 t1
  t0=$(date +%s.%N)
  if ! /usr/bin/time -v -o "$work/time" "$@" >/dev/null 2>"$work/err"; then
    echo "failed: $*" >&2
    cat "$work/err" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  local cpu
  cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {printf "%.2f", s}' "$work/time")
  echo "$(python3 -c "print(f'{$t1 - $t0:.3f}')") $(awk -F': ' '/Maximum resident/ {print $2}' "$work/time") $cpu"
}

st_input() {  # the safetensors input of `convert safetensors -> TF`, made once
  [ -f "$work/in.safetensors" ] || "$tfckpt" convert "$work/in" -o "$work/in.safetensors" -q --no-verify >/dev/null
}

# Every command, by label; $J is its -j.
labels=("cp" "reshard fixed:8" "validate" "inspect --stats" "validate --against --report" "convert -> safetensors"
        "convert -> safetensors --max-file-size" "convert safetensors -> TF" "convert -> npz"
        "convert --cast float32=bfloat16" "merge --average")
run_one() {
  local label=$1 J=$2 in=$work/in out=$work/out
  case $label in
    cp) measure sh -c "for f in $in.data-*; do cp \"\$f\" $out/ & done; wait" ;;
    "reshard fixed:8") measure "$tfckpt" reshard "$in" -o "$out/r" --partition fixed:8 -j "$J" -q ;;
    validate) measure "$tfckpt" validate "$in" -j "$J" ;;
    "inspect --stats") measure "$tfckpt" inspect "$in" --stats -j "$J" ;;
    "validate --against --report") measure "$tfckpt" validate "$work/in2" --against "$in" --report -j "$J" ;;
    "convert -> safetensors") measure "$tfckpt" convert "$in" -o "$out/m.safetensors" -j "$J" -q ;;
    "convert -> safetensors --max-file-size")
      measure "$tfckpt" convert "$in" -o "$out/m.safetensors" --max-file-size "$((gib * 1024 / 4))M" -j "$J" -q ;;
    "convert safetensors -> TF") st_input && measure "$tfckpt" convert "$work/in.safetensors" -o "$out/t" -j "$J" -q ;;
    "convert -> npz") measure "$tfckpt" convert "$in" -o "$out/m.npz" -j "$J" -q ;;
    "convert --cast float32=bfloat16") measure "$tfckpt" convert "$in" -o "$out/bf" --cast float32=bfloat16 -j "$J" -q ;;
    "merge --average") measure "$tfckpt" merge "$in" "$work/in2" -o "$out/avg" --average -j "$J" -q ;;
  esac
}

declare -A best rss cpu
for ((r = 0; r < rounds; r++)); do
  for J in $jobs_list; do
    for label in "${labels[@]}"; do
      [ "$label" = cp ] && [ "$J" != "${jobs_list%% *}" ] && continue  # (cp has no -j)
      read -r t m c <<<"$(run_one "$label" "$J")"
      key="$label|$J"
      if [ -z "${best[$key]:-}" ] || python3 -c "import sys; sys.exit(0 if $t < ${best[$key]} else 1)"; then
        best[$key]=$t
      fi
      if [ -z "${cpu[$key]:-}" ] || python3 -c "import sys; sys.exit(0 if $c < ${cpu[$key]} else 1)"; then
        cpu[$key]=$c
      fi
      if [ -z "${rss[$key]:-}" ] || [ "$m" -gt "${rss[$key]}" ]; then rss[$key]=$m; fi
    done
  done
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# The table, and the targets of issue 26 (ratios at one thread per core; scaling 1 -> N).
cp_key="cp|${jobs_list%% *}"
export BEST RSS CPU
BEST=$(for k in "${!best[@]}"; do echo "$k=${best[$k]}"; done)
RSS=$(for k in "${!rss[@]}"; do echo "$k=${rss[$k]}"; done)
CPU=$(for k in "${!cpu[@]}"; do echo "$k=${cpu[$k]}"; done)
python3 - "$jobs_list" "$cp_key" "${labels[@]}" <<'PY'
import os, sys
jobs = sys.argv[1].split()
cp_key = sys.argv[2]
labels = sys.argv[3:]
best = dict(l.rsplit("=", 1) for l in os.environ["BEST"].splitlines())
rss = dict(l.rsplit("=", 1) for l in os.environ["RSS"].splitlines())
best = {k: float(v) for k, v in best.items()}
rss = {k: int(v) for k, v in rss.items()}
cpu = {k: float(v) for k, v in (l.rsplit("=", 1) for l in os.environ["CPU"].splitlines())}
lo, hi = jobs[0], jobs[-1]
cp = best[cp_key]
head = ("| command | " + " | ".join(f"-j {j}: wall (÷ reshard, ÷ cp)" for j in jobs) + " | -j 1 → -j %s | " % hi +
        " | ".join(f"CPU -j {j} (÷ reshard)" for j in jobs) + " | peak RSS |")
print(head)
print("|" + "---|" * (2 * len(jobs) + 3))
for label in labels:
    cells = []
    for j in jobs:
        k = f"{label}|{j}"
        if label == "cp":
            k = cp_key
        t = best[k]
        cells.append(f"{t:.2f} s ({t / best[f'reshard fixed:8|{j}']:.2f}×, {t / cp:.2f}×)")
    speed = "—" if label == "cp" else f"{best[f'{label}|{lo}'] / best[f'{label}|{hi}']:.2f}×"
    m = max(v for k, v in rss.items() if k.split("|")[0] == label)
    cpus = []
    for j in jobs:
        k = cp_key if label == "cp" else f"{label}|{j}"
        cpus.append(f"{cpu[k]:.2f} s ({cpu[k] / cpu[f'reshard fixed:8|{j}']:.2f}×)")
    print(f"| {label} | " + " | ".join(cells) + f" | {speed} | " + " | ".join(cpus) + f" | {m / 1024:.0f} MiB |")
print()
targets = [("convert -> safetensors", "reshard fixed:8", 1.15), ("convert -> safetensors --max-file-size", "reshard fixed:8", 1.15),
           ("convert safetensors -> TF", "reshard fixed:8", 1.15), ("convert -> npz", "reshard fixed:8", 1.5),
           ("merge --average", "reshard fixed:8", 1.6), ("inspect --stats", "validate", 1.3)]
for label, ref, limit in targets:
    ratio = best[f"{label}|{hi}"] / best[f"{ref}|{hi}"]
    scale = best[f"{label}|{lo}"] / best[f"{label}|{hi}"]
    ok = ratio <= limit and (lo == hi or scale >= 1.6)
    print(f"{'met ' if ok else 'MISS'}  {label}: {ratio:.2f}× {ref} at -j {hi} (target ≤ {limit}×); -j {lo} → -j {hi} {scale:.2f}× (target ≥ 1.6×)")
over = [l for l in labels if max(v for k, v in rss.items() if k.split("|")[0] == l) > 256 * 1024]
print(("MISS  peak RSS over 256 MiB: " + ", ".join(over)) if over else "met   peak RSS ≤ 256 MiB for every command")
PY
