# Helpers for the benchmark scripts (sourced from the repository's root).

# work_dir [DIR]: sets $work to DIR, or to a new temporary directory when DIR is empty or
# not given, and removes it when the script exits (DIR too).
work_dir() {
  work=${1:-$(mktemp -d)}
  trap 'rm -rf "$work"' EXIT
}

# prelude [DIR]: what most benchmarks start with: work_dir DIR, then a build (scripts/build.sh).
prelude() {
  work_dir "${1:-}"
  scripts/build.sh >/dev/null
}

# tables_input MIB TABLES: gen_checkpoint's `tables` checkpoint at $work/in (TABLES embedding
# tables of MIB MiB float32, each in 4 row slices over 4 data files, plus dense layers); sets
# $bytes (the size of its data files) and $warm (read again before every timed command).
tables_input() {
  build/bench/gen_checkpoint tables "$work/in" "$1" "$2" 4
  bytes=$(cat "$work"/in.data-* | wc -c)
  warm="$work/in.data-*"
}

# under_s3_server SCRIPT ARGS...: for the scripts on an object store. Unless already under
# tests/s3_server.sh (S3_TEST_ENDPOINT set), builds and runs SCRIPT ARGS again under it (and
# does not return).
under_s3_server() {
  if [ -z "${S3_TEST_ENDPOINT:-}" ]; then
    scripts/build.sh >/dev/null
    exec tests/s3_server.sh "$@"
  fi
}

# s3_server_env: tfckpt's environment as a user would set it (as tests/s3_common.py does),
# the server of tests/s3_server.sh directly, with its keys; none of the user's AWS files and
# no EC2 metadata service.
s3_server_env() {
  export AWS_ENDPOINT_URL=$S3_TEST_ENDPOINT AWS_ACCESS_KEY_ID=$S3_TEST_ACCESS_KEY
  export AWS_SECRET_ACCESS_KEY=$S3_TEST_SECRET AWS_REGION=$S3_TEST_REGION
  unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3 AWS_DEFAULT_REGION
  export AWS_CONFIG_FILE=/nonexistent AWS_SHARED_CREDENTIALS_FILE=/nonexistent AWS_EC2_METADATA_DISABLED=true
}

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

# timed CMD...: one run with a fresh $work/out (the caller sets $work): prints "SECONDS
# PEAK_RSS_MIB", the time including a sync of what the command wrote. When the caller sets
# $warm (a glob of input files), they are read first, outside the timing: this machine's
# DAMON pageout scheme drops file pages left untouched for about 30 s, so without it an
# input counted as cached is partly read from disk, differently for each command.
timed() {
  rm -rf "$work/out" && mkdir -p "$work/out" && sync
  if [ -n "${warm:-}" ]; then
    # shellcheck disable=SC2086  # $warm is a glob
    cat $warm >/dev/null
  fi
  local t0 t1 rss
  t0=$(date +%s.%N)
  rss=$(peak_rss_kib "$@")
  sync
  t1=$(date +%s.%N)
  python3 -c "print(f'{$t1 - $t0:.2f} {int($rss) // 1024}')"
}

# keep_best LABEL "SECONDS RSS": records the best time and the last peak RSS of LABEL in
# the caller's associative arrays `best` and `rss`.
keep_best() {
  local label=$1 t=${2% *} m=${2#* }
  if [ -z "${best[$label]:-}" ] || python3 -c "import sys; sys.exit(0 if $t < ${best[$label]} else 1)"; then
    best[$label]=$t
  fi
  rss[$label]=$m
}

# rounds N LABEL...: N interleaved rounds of one `timed` run per LABEL, of the command the
# caller's function `command_of LABEL` puts in the array `cmd`; the best of each kept in the
# caller's `best` and `rss` (keep_best).
rounds() {
  local n=$1 i label r
  shift
  for ((i = 0; i < n; i++)); do
    for label in "$@"; do
      command_of "$label"
      r=$(timed "${cmd[@]}")
      keep_best "$label" "$r"
    done
  done
}
