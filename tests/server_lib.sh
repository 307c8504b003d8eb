# shellcheck shell=bash disable=SC2154  # (server_name, here and work: set by the sourcing script)
# What the test servers' scripts (s3_server.sh, moto_server.sh) share: sourced by them,
# never run. They set, before sourcing:
#   server_name   the prefix of their messages ("s3_server")
#   here          the tests/ directory (listening.py)
#   work          their private directory (listening.log goes there)
# and define start_servers (0: every server up; 1: try again on other ports),
# stop_servers and show_logs (the tails worth seeing after a failed attempt).

# Ends the run as skipped (exit 77), or under CI=true as failed (1): CI must run every test.
skip() {
  echo "$server_name: SKIP: $*"
  [ "${CI:-}" = "true" ] && { echo "$server_name: CI=true, so this is a failure"; exit 1; }
  exit 77
}

# stop_servers, then removes $work: the scripts' EXIT trap.
stop_all() {
  stop_servers
  rm -rf "$work"
}

# Stops the processes PID...: SIGTERM, up to 5 s for them to exit, then SIGKILL; reaps them.
kill_and_wait() {
  local p _ alive
  for p in "$@"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  for p in "$@"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

# Waits until each PID:PORT listens on its own port (listening.py: a port taken by another
# process between its pick and the server's bind would otherwise look up), the fault proxy
# has written its port to PORT_FILE and URL answers; every 0.5 s, at most TRIES times.
# 0: all up; 1: not in time, or a server exited (its port was taken).
# Usage: wait_until_up TRIES URL PORT_FILE PID:PORT...
wait_until_up() {
  local tries=$1 url=$2 port_file=$3 _ state
  shift 3
  for _ in $(seq 1 "$tries"); do
    state=0
    python3 "$here/listening.py" "$@" 2>>"$work/listening.log" || state=$?
    [ $state -eq 2 ] && return 1
    if [ $state -eq 0 ] && [ -s "$port_file" ] &&
       python3 -c "import urllib.request; urllib.request.urlopen('$url', timeout=2)" 2>/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  return 1
}

# start_servers, at most three attempts, each on ports of its own; after a failed one,
# show_logs and stop_servers. Exits 1 when none succeeds.
# Usage: start_with_retries WHAT_FAILED   (e.g. "moto did not come up")
start_with_retries() {
  local attempt
  for attempt in 1 2 3; do
    start_servers && return 0
    echo "$server_name: attempt $attempt of 3: $1"
    show_logs
    stop_servers
  done
  echo "$server_name: FAIL: $1, in 3 attempts (each on ports of its own)"
  exit 1
}
