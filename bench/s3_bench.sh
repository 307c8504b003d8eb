#!/usr/bin/env bash
# Benchmark: tfckpt on an object store, the loopback Swift + s3api server of
# tests/s3_server.sh (the script runs itself under it), on a checkpoint of TOTAL_MIB (4
# embedding tables of TOTAL_MIB/4 MiB float32, each in 4 row slices over 4 data objects,
# plus dense layers), compared in the same run with curl doing the same transfers through
# Swift's own API (tempauth token: curl 7.88's --aws-sigv4 cannot sign for this server):
#   validate   `tfckpt validate s3://…` vs N ranged GETs at once of the data objects to
#              /dev/null (N = --connections, passed to both).           Target: >= 0.8x curl.
#   reshard    `tfckpt reshard s3://… -o s3://… --partition fixed:2` (axis 0) vs curl's
#              GETs of the input's data objects plus PUTs of as many bytes, N at once, one
#              after the other (also shown: each range piped from a GET into a PUT, the two
#              overlapping as reshard's do).                             Target: <= 1.2x.
#   requests   `inspect`, `validate` and `reshard` once each through the fault proxy, its
#              request log counted (and how many times the data bytes were fetched).
#              Target (inspect): 1 GET of the index, <= 1 HEAD per data object.
#   RSS        peak resident set of every tfckpt run (/usr/bin/time).  Target: <= 256 MiB.
# Times are the best of ROUNDS interleaved rounds (default 3): the machine is shared, the
# server (Python) is on the same cores, and one round is noisy. Targets missed are reported,
# not an exit status: exit 0 unless something failed to run.
# Usage: bench/s3_bench.sh [TOTAL_MIB (1024)] [CONNECTIONS (8, tfckpt's default)]
#   (JOBS=N passes -j N to validate and reshard; default: tfckpt's, one thread per core)
#
# bench/s3_bench.sh serverside [GIB (4)]: copies inside the store (issue 29), on a checkpoint
# of GIB GiB (the same layout; GIB may be a fraction for a quick look) in the bucket:
#   `reshard s3→s3 --partition fixed:8`, `merge --recover` of a save left in the bucket (2 parts
#   made from it) and `convert s3→s3` to one .safetensors, each with `--server-side auto` (the
#   default) and `--server-side never`: wall time (best of ROUNDS, default 3, interleaved),
#   the bytes of the --json report's "transfer" (copied inside the store, uploaded,
#   downloaded), and the same bytes as the fault proxy counted them (one more run each through
#   the proxy, not timed; PROXY_COUNTS=0 skips it), as a markdown table.
#   Targets (auto): uploaded <= 1 % of the input + the output's index; downloaded <= 1.05x the
#   input; wall time <= 0.5x `never`. Fails at once on a tfckpt without --server-side.
#   The inputs are written into the bucket by tfckpt (multipart objects); INPUT=put writes them
#   with one PUT an object instead (an object's ETag is then its MD5). VERIFY=0 runs every
#   command with --no-verify (what the copies cost without the verification's read-back).
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(…) ends the run too
cd "$(dirname "$0")/.."
. bench/common.sh
under_s3_server bench/s3_bench.sh "$@"
rounds=${ROUNDS:-3}
jobs=()  # for validate and reshard (inspect has no -j)
[ -z "${JOBS:-}" ] || jobs=(-j "$JOBS")
build=${BUILD_DIR:-build}
tfckpt=$build/src/tfckpt
s3_put=$build/tests/s3_put
work_dir

s3_server_env  # the server directly (common.sh)
unset TFCKPT_S3_CONNECTIONS TFCKPT_S3_READ_AHEAD_KIB
bucket="tfckpt-bench"
url=s3://$bucket

# The sum of the sizes of the objects under a URL prefix.
prefix_bytes() { "$s3_put" ls "$1" | awk '{s += $2} END {printf "%.0f\n", s}'; }

# bench/s3_bench.sh serverside [GIB]: issue 29 (see the usage above).
serverside_bench() {
  local gib=${1:-4} mib
  local help
  help=$("$tfckpt" reshard --help 2>&1)  # (not piped into grep -q: its early exit, with pipefail, fails the test)
  if ! grep -q -- '--server-side' <<<"$help"; then
    echo "s3_bench: $tfckpt has no --server-side: copies inside the store (issue 29) are not in this build" >&2
    exit 1
  fi
  mib=$(python3 -c "print(max(4, int(float('$gib') * 1024)))")
  # ss_s3 remove PREFIX: deletes the objects under the URL prefix (the outputs would otherwise
  # fill the disk the server shares), not timed. ss_s3 put DIR PREFIX: uploads every file of
  # DIR (and below) as PREFIX/PATH, one PUT an object. Through the S3 API with boto3 (the
  # python3 that runs the tests has it), which deletes a multipart object's segments with it.
  ss_s3() {
    python3 - "$bucket" "$url" "$@" <<'PY'
import os, sys
import boto3
from botocore.config import Config
bucket, url, action, *args = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name=os.environ["AWS_REGION"],
                  aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                  aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"], config=Config(s3={"addressing_style": "path"}))
key = lambda u: u[len(url) + 1:]
if action == "remove":
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key(args[0])):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=o["Key"])
else:  # put DIR PREFIX
    for root, _, files in os.walk(args[0]):
        for f in files:
            path = os.path.join(root, f)
            with open(path, "rb") as body:
                s3.put_object(Bucket=bucket, Key="/".join(filter(None, (key(args[1]), os.path.relpath(path, args[0])))),
                              Body=body)
PY
  }
  # The input and a distributed save left unmerged (two parts made of the input's tensors),
  # made on local files and written into the bucket by tfckpt (multipart objects, as most
  # objects in buckets are) or, with INPUT=put, one PUT an object; then the local files are
  # removed (less on the disk the server shares).
  "$build/bench/gen_checkpoint" tables "$work/in/big" $((mib / 4)) 4 4 >/dev/null
  "$tfckpt" merge "$work/in/big" -o "$work/in/save/ckpt_temp/part-00000-of-00002" --include '^embedding_[01]/' -q
  "$tfckpt" merge "$work/in/big" -o "$work/in/save/ckpt_temp/part-00001-of-00002" --exclude '^embedding_[01]/' -q
  "$s3_put" mb "$url"
  if [ "${INPUT:-tfckpt}" = put ]; then
    ss_s3 put "$work/in" "$url"
  else
    "$tfckpt" reshard "$work/in/big" -o "$url/big" -q
    local part
    for part in 00000 00001; do
      "$tfckpt" reshard "$work/in/save/ckpt_temp/part-$part-of-00002" -o "$url/save/ckpt_temp/part-$part-of-00002" -q
    done
  fi
  rm -rf "$work/in"
  local ckpt save
  ckpt=$(prefix_bytes "$url/big.")
  save=$(prefix_bytes "$url/save/ckpt_temp/")
  echo "checkpoint: $ckpt bytes ($(prefix_bytes "$url/big.data-") of data in 4 objects); the save's parts: $save bytes; written by ${INPUT:-tfckpt}; $rounds rounds; $(nproc) cores$([ "${VERIFY:-1}" != 0 ] || echo "; --no-verify")"

  # ss_args COMMAND OUT: `args`, the command line of one benchmark run writing under OUT (a URL
  # prefix); `index`, its index's name.
  ss_args() {
    case $1 in
      reshard) args=(reshard "$url/big" -o "$2/m" --partition fixed:8) index=$2/m.index ;;
      recover) args=(merge --recover "$url/save/ckpt" -o "$2/ckpt") index=$2/ckpt.index ;;
      convert) args=(convert "$url/big" -o "$2/m.safetensors") index="" ;;
    esac
  }
  # ss_input COMMAND: the bytes of its input.
  ss_input() { if [ "$1" = recover ]; then echo "$save"; else echo "$ckpt"; fi; }
  # ss_run ENDPOINT COMMAND MODE OUT: one run; prints "SECONDS COPIED UPLOADED DOWNLOADED OUTPUT_INDEX_BYTES".
  ss_run() {
    local endpoint=$1 cmd=$2 mode=$3 out=$4 t0 t1 report args index index_bytes=0
    ss_args "$cmd" "$out"
    t0=$(date +%s.%N)
    [ "${VERIFY:-1}" != 0 ] || args+=(--no-verify)
    report=$(AWS_ENDPOINT_URL=$endpoint "$tfckpt" "${args[@]}" --server-side "$mode" --json -q) ||
      { echo "s3_bench: tfckpt ${args[*]} --server-side $mode failed: $report" >&2; exit 1; }
    t1=$(date +%s.%N)
    [ -z "$index" ] || index_bytes=$(prefix_bytes "$index")
    python3 -c '
import json, sys
t = json.loads(sys.argv[3]).get("transfer")
if t is None:
    sys.exit("s3_bench: the --json report has no \"transfer\" (issue 29): " + sys.argv[3][:300])
print(f"{float(sys.argv[2]) - float(sys.argv[1]):.2f}", t["copied_in_store"], t["uploaded"], t["downloaded"], sys.argv[4])
' "$t0" "$t1" "$report" "$index_bytes"
    ss_s3 remove "$out/"
  }
  # proxy_counts: the fault proxy's byte counts since the last call (and zeroes them).
  proxy_counts() { curl -sS -f "$S3_TEST_PROXY_ENDPOINT/__proxy__/counts?clear=1"; }

  local i cmd mode r results=$work/serverside
  : >"$results"
  for ((i = 0; i < rounds; i++)); do
    for cmd in reshard recover convert; do
      for mode in auto never; do
        r=$(ss_run "$S3_TEST_ENDPOINT" "$cmd" "$mode" "$url/ss-$cmd-$mode-$i")
        echo "$cmd $mode time $r" >>"$results"
      done
    done
  done
  if [ "${PROXY_COUNTS:-1}" != 0 ]; then
    for cmd in reshard recover convert; do
      for mode in auto never; do
        proxy_counts >/dev/null
        r=$(ss_run "$S3_TEST_PROXY_ENDPOINT" "$cmd" "$mode" "$url/ss-$cmd-$mode-proxy")
        echo "$cmd $mode proxy $r $(proxy_counts | tr -d ' \n')" >>"$results"
      done
    done
  fi
  python3 - "$results" "$(ss_input reshard)" "$(ss_input recover)" <<'PY'
import json, sys
results, ckpt, save = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
best, report, proxy = {}, {}, {}
for line in open(results):
    w = line.split()
    key = (w[0], w[1])
    seconds, copied, up, down, index = float(w[3]), int(w[4]), int(w[5]), int(w[6]), int(w[7])
    if w[2] == "time":
        if key not in best or seconds < best[key]:
            best[key] = seconds
        report[key] = (copied, up, down, index)
    else:
        proxy[key] = json.loads(w[8])
def mib(b):  # (named for the usual case; small counts in their own unit)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b} B"
print("| command | --server-side | wall (best) | copied in store | uploaded | downloaded | proxy: copied / uploaded / downloaded |")
print("|---|---|---|---|---|---|---|")
for cmd, what in (("reshard", "reshard s3→s3 --partition fixed:8"), ("recover", "merge --recover"),
                  ("convert", "convert → safetensors")):
    for mode in ("auto", "never"):
        copied, up, down, _ = report[(cmd, mode)]
        p = proxy.get((cmd, mode))
        seen = f"{mib(p['copied'])} / {mib(p['uploaded'])} / {mib(p['downloaded'])}" if p else "not counted"
        print(f"| {what} | {mode} | {best[(cmd, mode)]:.2f} s | {mib(copied)} | {mib(up)} | {mib(down)} | {seen} |")
print()
for cmd in ("reshard", "recover", "convert"):
    size = save if cmd == "recover" else ckpt
    copied, up, down, index = report[(cmd, "auto")]
    ratio = best[(cmd, "auto")] / best[(cmd, "never")]
    ok = lambda c: "ok" if c else "MISSED"
    print(f"{cmd}: uploaded {up / size * 100:.2f} % of the input (+ index {index} B; target <= 1 % + index: "
          f"{ok(up <= 0.01 * size + index)}); downloaded {down / size:.3f}x (target <= 1.05: {ok(down <= 1.05 * size)}); "
          f"wall {ratio:.2f}x never (target <= 0.5: {ok(ratio <= 0.5)})")
PY
}

if [ "${1:-}" = serverside ]; then
  shift
  serverside_bench "$@"
  exit 0
fi

total_mib=${1:-1024}
# tfckpt's default is 8 (TFCKPT_S3_CONNECTIONS, s3_storage.h); passed explicitly anyway so
# that both sides of each comparison use the same N whatever the environment says.
n=${2:-8}

# The checkpoint, uploaded object by object as it is (same slices and data files as on disk).
"$build/bench/gen_checkpoint" tables "$work/big" $((total_mib / 4)) 4 4 >/dev/null
"$s3_put" mb "$url"
for f in "$work"/big.*; do
  "$s3_put" put "$f" "$url/${f#"$work"/}"
done
# KEY SIZE of each data object.
"$s3_put" ls "$url/big.data-" >"$work/objects"
objects=$(wc -l <"$work/objects")
bytes=$(awk '{s += $2} END {printf "%.0f\n", s}' "$work/objects")
echo "checkpoint: $bytes bytes in $objects data objects; N = $n connections; $rounds rounds; $(nproc) cores; -j ${JOBS:-default}"

# Swift's native API: a tempauth token and the account's storage URL.
auth=$(curl -sS -f -i -H "X-Auth-User: $S3_TEST_ACCESS_KEY" -H "X-Auth-Key: $S3_TEST_SECRET" \
  "$S3_TEST_ENDPOINT/auth/v1.0" | tr -d '\r')
storage_url=$(awk -F': ' 'tolower($1) == "x-storage-url" {print $2}' <<<"$auth")
token=$(awk -F': ' 'tolower($1) == "x-auth-token" {print $2}' <<<"$auth")
if [ -z "$storage_url" ] || [ -z "$token" ]; then
  echo "s3_bench: tempauth gave no storage URL or token"
  exit 1
fi
export storage_url token bucket

# The ranges curl transfers, "KEY FIRST LAST", each object cut in ceil(N / objects) so that
# N transfers run at once (xargs -P N), as tfckpt's N connections would.
per_object=$(((n + objects - 1) / objects))
awk -v k="$per_object" '{
  step = int(($2 + k - 1) / k)
  for (a = 0; a < $2; a += step) { b = a + step - 1; if (b >= $2) b = $2 - 1; print $1, a, b }
}' "$work/objects" >"$work/ranges"

# curl_get KEY FIRST LAST: one ranged GET to /dev/null; prints the bytes received.
curl_get() {
  curl -sS -f -o /dev/null -w '%{size_download}\n' -H "X-Auth-Token: $token" \
    -H "Range: bytes=$2-$3" "$storage_url/$bucket/$1"
}
# put_stdin NAME LENGTH: PUTs LENGTH bytes of standard input as the object NAME through
# Swift's API; prints the bytes sent. With their length given, not chunked, and without
# "Expect: 100-continue" (a round trip more), as tfckpt's client sends its parts.
put_stdin() {
  curl -sS -f -o /dev/null -w '%{size_upload}\n' -T - -H "Content-Length: $2" -H "Transfer-Encoding:" \
    -H "Expect:" -H "X-Auth-Token: $token" "$storage_url/$bucket/$1"
}
# curl_put KEY FIRST LAST: those bytes of the local file $work/KEY, PUT as curl-put/KEY.FIRST.
curl_put() {
  dd if="$work/$1" bs=1M skip="$2" count=$(($3 - $2 + 1)) iflag=skip_bytes,count_bytes status=none |
    put_stdin "curl-put/$1.$2" $(($3 - $2 + 1))
}
# curl_copy KEY FIRST LAST: a ranged GET piped into a PUT as curl-copy/KEY.FIRST.
curl_copy() {
  curl -sS -f -H "X-Auth-Token: $token" -H "Range: bytes=$2-$3" "$storage_url/$bucket/$1" |
    put_stdin "curl-copy/$1.$2" $(($3 - $2 + 1))
}
export -f curl_get put_stdin curl_put curl_copy
export work

# curl_all FUNCTION: FUNCTION on every range, N at once: "SECONDS" of the whole, after
# checking that every byte went through.
curl_all() {
  local t0 t1 moved
  t0=$(date +%s.%N)
  moved=$(xargs -P "$n" -L 1 bash -c "$1 \"\$@\"" _ <"$work/ranges" | awk '{s += $1} END {printf "%.0f\n", s}')
  t1=$(date +%s.%N)
  [ "$moved" = "$bytes" ] || { echo "s3_bench: $1 moved $moved bytes, not $bytes" >&2; exit 1; }
  python3 -c "print(f'{$t1 - $t0:.2f}')"
}

# tfckpt_run ARGS…: one tfckpt run: "SECONDS PEAK_RSS_MIB CPU_SECONDS" (user + system: on
# this machine the client's CPU is taken from the server's, which runs on the same cores).
tfckpt_run() {
  local out
  out=$({ /usr/bin/time -f 'TIME %e %M %U %S' "$tfckpt" "$@" >/dev/null; } 2>&1) ||
    { echo "s3_bench: tfckpt $* failed: $out" >&2; exit 1; }
  awk '/^TIME / {printf "%s %d %.2f\n", $2, $3 / 1024, $4 + $5}' <<<"$out"
}

# keep_tfckpt LABEL "SECONDS RSS CPU": keep_best, and the CPU time of the best run in `cpu`.
keep_tfckpt() {
  keep_best "$1" "${2% *}"
  [ "${best[$1]}" != "${2%% *}" ] || cpu[$1]=${2##* }
}

# The local data files are the bytes curl_put sends: in the page cache before any timing.
cat "$work"/big.data-* >/dev/null
curl_all curl_get >/dev/null  # the server's copy too (cold files would count against the first)

declare -A best rss cpu
for ((i = 0; i < rounds; i++)); do
  get=$(curl_all curl_get)
  keep_best "curl get" "$get 0"
  r=$(tfckpt_run validate "$url/big" --connections "$n" "${jobs[@]}")
  keep_tfckpt "validate" "$r"
  put=$(curl_all curl_put)
  keep_best "curl get+put" "$(python3 -c "print(f'{$get + $put:.2f}')") 0"
  r=$(tfckpt_run reshard "$url/big" -o "$url/out$i" --partition fixed:2 --connections "$n" -q "${jobs[@]}")
  keep_tfckpt "reshard" "$r"
  r=$(curl_all curl_copy)
  keep_best "curl get|put" "$r 0"
done
out_bytes=$(prefix_bytes "$url/out0.data-")
echo "reshard output: $out_bytes bytes in $("$s3_put" ls "$url/out0.data-" | wc -l) data objects"

# verdict OK: "ok" or "MISSED".
verdict() { if [ "$1" = 1 ]; then echo ok; else echo MISSED; fi; }
mb_s() { python3 -c "print(f'{$bytes / $1 / 1e6:.0f}')"; }
ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
le() { python3 -c "print(int($1 <= $2))"; }

r=$(ratio "${best[curl get]}" "${best[validate]}")
echo "validate: ${best[validate]} s (cpu ${cpu[validate]} s, $(mb_s "${best[validate]}") MB/s); curl get: ${best[curl get]} s ($(mb_s "${best[curl get]}") MB/s); throughput ${r}x curl (target >= 0.8: $(verdict "$(le 0.8 "$r")"))"
r=$(ratio "${best[reshard]}" "${best[curl get+put]}")
r2=$(ratio "${best[reshard]}" "${best[curl get|put]}")
echo "reshard fixed:2: ${best[reshard]} s (cpu ${cpu[reshard]} s); curl get+put: ${best[curl get+put]} s; ratio ${r}x (target <= 1.2: $(verdict "$(le "$r" 1.2)")); curl get|put piped: ${best[curl get|put]} s, ratio ${r2}x"

# Requests, counted in the fault proxy's log: one run each through the proxy.
# count_requests NAME ARGS…: runs tfckpt ARGS through the proxy; prints NAME's counts, then
# "1" when the inspect target holds, then the run's peak RSS in MiB.
count_requests() {
  local name=$1 r
  shift
  : >"$S3_TEST_PROXY_LOG"
  r=$(AWS_ENDPOINT_URL=$S3_TEST_PROXY_ENDPOINT tfckpt_run "$@")
  python3 - "$S3_TEST_PROXY_LOG" "/$bucket/big" "$name" "$work/objects" <<'PY'
import collections, sys
log, prefix, name, objects = sys.argv[1:]
size = {"/" + prefix.split("/")[1] + "/" + k: int(n) for k, n in (l.split() for l in open(objects))}
count = collections.Counter()  # (method, object) -> requests
read = 0  # bytes of GETs of the data objects
other = collections.Counter()  # requests of anything else, by kind
for line in open(log):
    words = line.split()
    method, target = words[:2]
    path, _, query = target.partition("?")
    if path == prefix + ".index" or path in size:
        count[method, path] += 1
        if method == "GET" and path in size:
            r = next((w[len("range=bytes="):] for w in words if w.startswith("range=bytes=")), None)
            first, last = map(int, r.split("-")) if r else (0, size[path] - 1)
            read += last - first + 1
    else:  # listings, uploads, outputs
        params = {p.split("=")[0] for p in query.split("&")}
        kind = ("list" if "list-type" in params else "list-uploads" if method == "GET" and "uploads" in params
                else "write" if method in ("PUT", "POST", "DELETE") else f"{method} of others")
        other[kind] += 1
heads = [count["HEAD", p] for p in size]
gets = [count["GET", p] for p in size]
kinds = ", ".join(f"{k} {n}" for k, n in sorted(other.items()))
print(f"{name} requests: index GET {count['GET', prefix + '.index']}, HEAD {count['HEAD', prefix + '.index']}; "
      f"{len(size)} data objects: HEAD {sum(heads)} (max {max(heads)} per object), GET {sum(gets)} "
      f"reading {read / sum(size.values()):.2f}x their bytes; other {sum(other.values())} ({kinds}); "
      f"total {sum(count.values()) + sum(other.values())}")
print(int(count["GET", prefix + ".index"] == 1 and max(heads) <= 1))
PY
  r=${r#* }
  echo "${r% *}"
}
out=$(count_requests inspect inspect "$url/big")
echo "$(sed -n 1p <<<"$out") (target 1 index GET, <= 1 HEAD per data object: $(verdict "$(sed -n 2p <<<"$out")"))"
rss[inspect]=$(sed -n 3p <<<"$out")
out=$(count_requests validate validate "$url/big" --connections "$n" "${jobs[@]}")
sed -n 1p <<<"$out"
out=$(count_requests reshard reshard "$url/big" -o "$url/out-proxy" --partition fixed:2 --connections "$n" -q "${jobs[@]}")
sed -n 1p <<<"$out"

for label in validate reshard inspect; do
  m=${rss[$label]}
  echo "peak RSS $label: $m MiB (target <= 256: $(verdict "$(le "$m" 256)"))"
done
