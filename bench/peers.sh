#!/usr/bin/env bash
# tfckpt beside TensorFlow, safetensors and numpy on the same checkpoint, in one run (issue 42;
# bench/peers.py says what is measured and how). Builds tfckpt, makes (or reuses) the venv of
# TensorFlow, torch and safetensors (scripts/oracle-venv.sh, the pinned tests/requirements-oracle.txt)
# and runs bench/peers.py there.
# Usage: bench/peers.sh [GIB] [DIR]      (default 1 GiB in /dev/shm; ROUNDS=N, default 2)
# Needs about GIB * 6 GiB free in DIR and GIB * 4 GiB of memory (the peers hold the checkpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
gib=${1:-1}
dir=${2:-/dev/shm}
scripts/build.sh >/dev/null
python=$(scripts/oracle-venv.sh)
[ -n "$python" ] || { echo "peers: the venv of TensorFlow could not be made (scripts/oracle-venv.sh)" >&2; exit 1; }
exec "$python" bench/peers.py --tfckpt "$PWD/build/src/tfckpt" --package "$PWD/build/python" \
  --gen "$PWD/build/bench/gen_checkpoint" --gib "$gib" --dir "$dir"
