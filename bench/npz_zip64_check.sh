#!/usr/bin/env bash
# Checks ZIP64 in `convert -o X.npz`: a 4.4 GB float32 table (one member over 4 GiB, an
# archive over 4 GiB) must load in numpy with the right shape and last value. Needs about
# 9 GB of free disk in WORK_DIR. Usage: bench/npz_zip64_check.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
prelude "${1:-}"
build/bench/gen_checkpoint tables "$work/in" 4200 1 4 >/dev/null
last=$(build/src/tfckpt inspect "$work/in" --tensor embedding_0/embeddings | tail -1 | sed 's/.* \([^ ]*\)]]$/\1/')
build/src/tfckpt convert "$work/in" -o "$work/m.npz" -q
/usr/bin/python3 - "$work/m.npz" "$last" <<'PY'
import sys, zipfile, numpy as np
path, last = sys.argv[1], float(sys.argv[2])
big = [i.file_size for i in zipfile.ZipFile(path).infolist() if i.file_size > 2**32]
a = np.load(path)["embedding_0/embeddings"]
assert big and a.shape == (17203200, 64) and a.dtype == np.float32, (big, a.shape, a.dtype)
assert np.float32(a[-1, -1]) == np.float32(last), (a[-1, -1], last)
print(f"zip64 ok: member of {big[0]} bytes, shape {a.shape}, last value {a[-1, -1]}")
PY
