#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan+UBSan, build-fuzz/) and runs each
# for a fixed time. Seeds: fuzz/seeds/TARGET, tests/fuzz_regressions/TARGET and files
# derived from ../shared/testdata/tf; what a run learns stays in build-fuzz/corpus/.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 60 (env FUZZ_SECONDS also works); CI uses 10
#   TARGET              table bundle read slice_key specs state_file v1 safetensors payload
#                       s3_xml url aws_config credential_json merge npz
# A crash stops with exit 1 and names the reproducer under build-fuzz/artifacts/; copy
# it into tests/fuzz_regressions/TARGET/ (the normal test suite replays that folder).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${FUZZ_SECONDS:-60}}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(table bundle read slice_key specs state_file v1 safetensors payload s3_xml url aws_config credential_json merge npz)
fi

scripts/install-deps.sh
build=build-fuzz
if [ ! -f "$build/build.ninja" ]; then
  # -O1 with line tables: what libFuzzer's documentation builds with, and quicker to compile
  # than -O2 -g (the fuzzers run a fixed time; CI builds them beside the sanitizer suite).
  CXX=clang++ meson setup "$build" -Dfuzz=true -Dtests=false -Dpython=disabled -Db_sanitize=address,undefined \
    -Db_lundef=false -Dbuildtype=plain -Doptimization=1 -Dcpp_args=-gline-tables-only >/dev/null
fi
# Only the fuzz targets and what they link (the library): not the command line, its CLI11
# parsing, the examples or the benchmarks, which no target runs.
meson compile -C "$build" $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null

# Seeds from the real checkpoints, made fresh each run (never copied into the repository).
testdata=../shared/testdata/tf
seeds=$build/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{table,bundle,read,v1,state_file,safetensors,merge}
if [ -d "$testdata" ]; then
  python3 - "$testdata" "$seeds" <<'PY'
import glob, os, struct, sys
src, out = sys.argv[1], sys.argv[2]
n = 0
merge_inputs = []  # (name, index bytes, data file count) of every index up to 1 MiB
for root, _, files in os.walk(src):
    for f in files:
        p = os.path.join(root, f)
        size = os.path.getsize(p)
        name = p[len(src) + 1:].replace("/", "_")
        blob = open(p, "rb").read() if size <= (1 << 20) else None
        if f == "checkpoint":
            open(os.path.join(out, "state_file", name), "wb").write(blob)
        if blob is not None and blob[-8:] == bytes.fromhex("57fb808b247547db"):
            kind = "table" if f.endswith(".index") else "v1"
            open(os.path.join(out, kind, name), "wb").write(blob)
            if kind == "v1":
                open(os.path.join(out, "read", name + ".v1"), "wb").write(b"\x03" + blob)
                open(os.path.join(out, "table", name), "wb").write(blob)
        if f.endswith(".index") and blob is not None:
            data = p[:-len(".index")] + ".data-00000-of-00001"
            if not os.path.exists(data):
                data = p[:-len(".index")] + ".data-00000-of-00002"
            payload = open(data, "rb").read() if os.path.exists(data) and os.path.getsize(data) <= (1 << 20) else b""
            open(os.path.join(out, "bundle", name), "wb").write(struct.pack("<I", len(blob)) + blob + payload)
            # fuzz_read: the same bundle after its format byte (0: V2).
            open(os.path.join(out, "read", name), "wb").write(b"\x00" + struct.pack("<I", len(blob)) + blob + payload)
            shards = glob.glob(glob.escape(p[:-len(".index")]) + ".data-?????-of-?????")
            merge_inputs.append((name, blob, int(shards[0][-5:]) if shards else 1))
        n += 1
# fuzz_merge: each index alone, and each with the next one (flags byte, data-file counts
# byte, then each index with its 4-byte length; fuzz/fuzz_merge.cc).
merge_inputs.sort()
for i, (name, blob, shards) in enumerate(merge_inputs):
    count = min(shards, 4) - 1
    open(os.path.join(out, "merge", name), "wb").write(bytes([0, count]) + struct.pack("<I", len(blob)) + blob)
    if i + 1 < len(merge_inputs):
        name2, blob2, shards2 = merge_inputs[i + 1]
        counts = count | (min(shards2, 4) - 1) << 4
        open(os.path.join(out, "merge", name + "+" + name2), "wb").write(
            bytes([1, counts]) + struct.pack("<I", len(blob)) + blob + struct.pack("<I", len(blob2)) + blob2)
PY
elif [ "${CI:-}" = "true" ]; then
  echo "fuzz: $testdata is missing (CI=true: failure)" >&2
  exit 1
fi
# fuzz_npz: the real checkpoints of up to 64 KiB of data (-max_len below) converted by our
# own `convert -o X.npz`, with the release build's binary (scripts/build.sh; CI builds it
# before this runs). The hand-made edge cases are committed (fuzz/make_npz_seeds.py).
mkdir -p "$seeds/npz"
tfckpt=build/src/tfckpt
if [[ " ${targets[*]} " == *" npz "* ]] && [ -d "$testdata" ]; then
  if [ -x "$tfckpt" ]; then
    while IFS= read -r -d '' index; do
      prefix=${index%.index}
      data=$({ cat "$prefix".data-?????-of-????? 2>/dev/null || true; } | wc -c)
      [ "$data" -gt 0 ] && [ "$data" -le 65536 ] || continue
      name=${prefix#"$testdata"/}
      out="$seeds/npz/${name//\//_}.npz"
      "$tfckpt" convert "$prefix" -o "$out" >/dev/null 2>&1 || continue
      if [ "$(wc -c <"$out")" -gt 65536 ]; then rm -f "$out"; fi
    done < <(find "$testdata" -name '*.index' -print0 | sort -z)
  elif [ "${CI:-}" = "true" ]; then
    echo "fuzz: $tfckpt is missing for the npz seeds (CI=true: failure)" >&2
    exit 1
  else
    echo "fuzz: no npz seeds from the real checkpoints ($tfckpt is missing: scripts/build.sh makes it)" >&2
  fi
fi
# A service account file with a real RSA key, made fresh each run (no private key is ever
# committed): the JWT signing path behind the JSON.
mkdir -p "$seeds/credential_json"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 2>/dev/null | python3 -c '
import json, sys
print(json.dumps({"type": "service_account", "client_email": "fuzz@p.iam.gserviceaccount.com",
                  "private_key_id": "k1", "private_key": sys.stdin.read(), "token_uri": "http://127.0.0.1:1/token"}))
' >"$seeds/credential_json/service_account"

status=0
mkdir -p "$build/artifacts"
results=$build/fuzz-results.txt  # "TARGET ok|FAILED" per line, for scripts/check.sh
: >"$results"
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  mkdir -p "$corpus"
  dirs=("$corpus")
  for extra in fuzz/seeds/"$t" "$seeds/$t" tests/fuzz_regressions/"$t"; do
    if [ -d "$extra" ]; then dirs+=("$extra"); fi
  done
  log=$build/fuzz-$t.log
  echo "fuzz: $t for ${seconds}s"
  # Limits: the guarantee of docs/RELIABILITY.md (untrusted input): no input of up to 64 KiB
  # may make us allocate over 256 MiB at once (a count the input merely claims), grow past
  # 512 MiB resident (ASan's quarantine kept at 64 MiB inside that) or take over 10 s.
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0:quarantine_size_mb=64 \
      UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      "$build/fuzz/fuzz_$t" "${dirs[@]}" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
      -malloc_limit_mb=256 -rss_limit_mb=512 -artifact_prefix="$build/artifacts/$t-" -print_final_stats=1 \
      >"$log" 2>&1; then
    echo "fuzz: $t FAILED; see $log and $build/artifacts/$t-*" >&2
    grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5 >&2 || true
    echo "$t FAILED" >>"$results"
    status=1
  else
    grep -E "^Done" "$log" | sed 's/^/fuzz:   /'
    echo "$t ok" >>"$results"
  fi
done
exit $status
