#!/usr/bin/env bash
# Runs a command against moto's server (python3 -m moto.server: S3, STS, the EC2 instance
# metadata paths) on 127.0.0.1 only, a second S3 implementation beside Swift
# (tests/s3_server.sh), plus the fault proxy (s3_fault_proxy.py) in front of it. moto comes
# with the python3 on PATH (it is not installed here); every port is a free one picked at
# start; the servers it started are stopped by pid when the command ends.
#
# Usage: tests/moto_server.sh COMMAND [ARGS…]   (nests: s3_server.sh moto_server.sh CMD)
# COMMAND runs with:
#   MOTO_ENDPOINT         http://127.0.0.1:PORT (moto; any key is accepted, nothing checked)
#   MOTO_PROXY_ENDPOINT   http://127.0.0.1:PORT (the fault proxy in front of it)
#   MOTO_FAULTS           the proxy's faults file
#   MOTO_PROXY_LOG        the proxy's request log
# Exit: COMMAND's exit status; 77 skipped (no moto on the python3 on PATH); under CI=true
# that is a failure (1) instead.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
server_name=moto_server
# shellcheck source=tests/server_lib.sh
. "$here/server_lib.sh"

python3 -c 'import moto.server, boto3' 2>/dev/null || skip "python3 has no moto/boto3 (pip install 'moto[server]' boto3)"

work=$(mktemp -d /tmp/tfckpt-moto-XXXXXX)
pids=()
stop_servers() {
  kill_and_wait "${pids[@]}"
  pids=()
}
trap stop_all EXIT  # (server_lib.sh)

# Starts moto and the fault proxy on a free port picked now; fails when moto does not answer
# on its own port within 120 s (moto imports a lot, on two busy cores), or exits (its port was
# taken between the pick and its bind: listening.py).
start_servers() {
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  python3 -m moto.server -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
  pids+=($!)
  local moto=$!
  touch "$work/faults" "$work/proxy.log"
  rm -f "$work/proxy.port"
  python3 "$here/s3_fault_proxy.py" "$port" "$work/faults" "$work/proxy.log" "$work/proxy.port" >"$work/proxy.out" 2>&1 &
  pids+=($!)
  wait_until_up 240 "http://127.0.0.1:$port/moto-api/" "$work/proxy.port" "$moto:$port"
}
show_logs() {
  tail -5 "$work/moto.log"
}

start_with_retries "moto did not come up on its own port within 120 s"
echo "moto_server: moto on http://127.0.0.1:$port, fault proxy on port $(cat "$work/proxy.port")"

export MOTO_ENDPOINT="http://127.0.0.1:$port"
export MOTO_PROXY_ENDPOINT="http://127.0.0.1:$(cat "$work/proxy.port")"
export MOTO_FAULTS="$work/faults" MOTO_PROXY_LOG="$work/proxy.log"
rc=0
"$@" || rc=$?
if [ $rc -ne 0 ]; then
  echo "--- moto log (tail)"
  tail -30 "$work/moto.log"
fi
exit $rc
