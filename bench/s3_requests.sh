#!/usr/bin/env bash
# Requests per `tfckpt inspect` on an object store, by the form of its CKPT argument (issue
# 41: every probe of a resolution is a request there): the real checkpoints of
# ../shared/testdata/tf in the loopback Swift + s3api server of tests/s3_server.sh (the
# script runs itself under it), each inspect once through its fault proxy, whose request log
# is counted. A markdown table: the form, requests, then how many of each kind.
# Usage: bench/s3_requests.sh   (TFCKPT=PATH runs another build's binary)
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
. bench/common.sh
under_s3_server bench/s3_requests.sh "$@"
build=${BUILD_DIR:-build}
tfckpt=${TFCKPT:-$build/src/tfckpt}
s3_put=$build/tests/s3_put
data=${TFCKPT_TESTDATA:-../shared/testdata/tf}
[ -d "$data" ] || { echo "s3_requests: $data is missing" >&2; exit 1; }

s3_server_env  # the server directly, no AWS files (common.sh)
url=s3://tfckpt-requests
"$s3_put" mb "$url" >/dev/null
"$s3_put" tree "$data/keras_tf2_adam_2shards" "$url/keras/" >/dev/null
"$s3_put" tree "$data/savedmodel_tf2_snappy_index" "$url/savedmodel/" >/dev/null
"$s3_put" tree "$data/v1_session_bundle_sharded_name" "$url/v1/" >/dev/null

export AWS_ENDPOINT_URL=$S3_TEST_PROXY_ENDPOINT
echo "| inspect CKPT | requests | of which |"
echo "|---|---:|---|"
for form in "keras/model.ckpt:a V2 prefix" "keras/model.ckpt.index:its .index" \
            "keras:a directory with a state file" "keras/:the same, with a slash" \
            "savedmodel:a SavedModel (variables/variables)" "v1/export-00000-of-00001:a V1 table" \
            "v1:a directory holding a V1 table" "missing:nothing there"; do
  arg=$url/${form%%:*}
  : >"$S3_TEST_PROXY_LOG"
  "$tfckpt" inspect "$arg" >/dev/null 2>&1 || true
  kinds=$(awk '{m = $1; t = $2; k = (index(t, "?") ? (t ~ /uploads/ ? "uploads" : "LIST") : m); n[k]++}
               END {for (k in n) printf "%s%d %s", (s++ ? ", " : ""), n[k], k}' "$S3_TEST_PROXY_LOG")
  echo "| \`${form%%:*}\` (${form#*:}) | $(wc -l <"$S3_TEST_PROXY_LOG") | $kinds |"
done
