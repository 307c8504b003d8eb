# Helpers for the benchmark scripts (sourced).

# best_of N CMD...: the best wall time of N runs, in seconds.
best_of() {
  local n=$1
  shift
  python3 - "$n" "$@" <<'PY'
import subprocess, sys, time
n, cmd = int(sys.argv[1]), sys.argv[2:]
best = None
for _ in range(n):
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    d = time.perf_counter() - t
    best = d if best is None or d < best else best
print(f"{best:.3f}")
PY
}

# peak_rss_kib CMD...: the peak resident set of one run.
peak_rss_kib() {
  { /usr/bin/time -v "$@" >/dev/null; } 2>&1 | awk '/Maximum resident/ {print $6}'
}
