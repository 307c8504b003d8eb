#!/usr/bin/env bash
# Runs a command against a real S3 server: OpenStack Swift with its s3api middleware, one
# node on 127.0.0.1 only, set up from Debian's packages in a private directory, plus the
# fault-injecting proxy (s3_fault_proxy.py) in front of it. Installs
# swift-proxy swift-account swift-container swift-object memcached when missing (needs
# root). Every port is a free one picked at start, so several runs can share a machine.
# The daemons it started are stopped by pid when the command ends.
#
# Usage: tests/s3_server.sh COMMAND [ARGS…]
# COMMAND runs with:
#   S3_TEST_ENDPOINT        http://127.0.0.1:PORT (Swift's proxy server)
#   S3_TEST_PROXY_ENDPOINT  http://127.0.0.1:PORT (the fault proxy in front of it)
#   S3_TEST_FAULTS          the proxy's faults file (one fault a line, see the proxy)
#   S3_TEST_PROXY_LOG       the proxy's request log
#   S3_TEST_ACCESS_KEY=test:tester S3_TEST_SECRET=testing S3_TEST_REGION=auto (path-style;
#                           for gs:// too: GS_ACCESS_KEY_ID, TFCKPT_GS_ENDPOINT_URL)
# Exit: COMMAND's exit status; 77 skipped (cannot install the packages: not root, no
# apt); under CI=true that is a failure (1) instead.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
server_name=s3_server
# shellcheck source=tests/server_lib.sh
. "$here/server_lib.sh"

packages=(swift-proxy swift-account swift-container swift-object memcached)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || skip "needs root to install ${missing[*]}"
  echo "s3_server: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } ||
    skip "apt-get could not install ${missing[*]}"
fi
[ "$(id -u)" -eq 0 ] || skip "needs root (Swift's servers switch to user swift)"
# The servers read the cluster's hash prefix/suffix from this fixed path (the package ships it).
[ -f /etc/swift/swift.conf ] || skip "/etc/swift/swift.conf is missing (reinstall swift)"

work=$(mktemp -d /tmp/tfckpt-s3-XXXXXX)
chmod 755 "$work"
pidfiles=()
stop_servers() {
  local f pids=()
  for f in "${pidfiles[@]}"; do pids+=("$(cat "$f")"); done
  kill_and_wait "${pids[@]}"
  pidfiles=()
  rm -rf "$work/etc" "$work/node" "$work/log" "$work"/*.pid "$work/fault_proxy.port" "$work/listening.log"
}
trap stop_all EXIT  # (server_lib.sh)

# Starts the servers on free ports picked now; fails when one of them does not listen on its
# own port within 60 s (the caller then stops what was started and tries again). (The body
# is not indented: it holds here-documents.)
start_servers() {
# Free ports: proxy server, account, container, object, memcached.
read -r proxy_port account_port container_port object_port memcached_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(5)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

mkdir -p "$work/etc" "$work/node/d1" "$work/log"
for server in account:$account_port container:$container_port object:$object_port; do
  name=${server%%:*}
  port=${server##*:}
  (
    cd "$work/etc"
    swift-ring-builder "$name.builder" create 8 1 1
    swift-ring-builder "$name.builder" add "r1z1-127.0.0.1:$port/d1" 100
    swift-ring-builder "$name.builder" rebalance || true  # exit 1 is a warning for a one-device ring
  ) >/dev/null
  cat >"$work/etc/$name-server.conf" <<CONF
[DEFAULT]
devices = $work/node
mount_check = false
bind_ip = 127.0.0.1
bind_port = $port
workers = 1
swift_dir = $work/etc
[pipeline:main]
pipeline = $name-server
[app:$name-server]
use = egg:swift#$name
# Generous timeouts (the defaults are 0.5 s to connect, 3 s per answer): in CI this server
# shares two cores with sanitizer-built tests, a fuzzer and a package build, and a missed
# timeout here is a 503 the tests would count against their own retry budget.
conn_timeout = 10
node_timeout = 60
CONF
  # An object server waits 1 s by default for the container server to list a PUT or DELETE
  # (container_update_timeout), then answers and lets the listing catch up in the
  # background: under load a listing made just after a DELETE still shows the object (an
  # aborted upload's marker, in ListMultipartUploads). The tests expect what S3 and moto
  # give, a listing that reflects every answered request: the object server waits for it.
  [ "$name" != object ] || echo "container_update_timeout = 60" >>"$work/etc/$name-server.conf"
done

cat >"$work/etc/proxy-server.conf" <<CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $proxy_port
workers = 1
swift_dir = $work/etc
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
# As above: under load the proxy's default 0.5 s connect timeout to the one object server
# turns a slow accept into "503 Please reduce your request rate".
conn_timeout = 10
node_timeout = 60
recoverable_node_timeout = 60
client_timeout = 120
[filter:s3api]
use = egg:swift#s3api
# The region signatures must name: "auto", as Cloud Storage's XML API takes with HMAC keys
# (and S3-compatible stores such as R2), so that gs:// URLs signed as for Cloud Storage
# work here as well as s3:// ones (the tests set AWS_REGION to it).
location = auto
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$memcached_port
[filter:proxy-logging]
use = egg:swift#proxy_logging
CONF
for f in catch_errors gatekeeper healthcheck listing_formats copy slo dlo; do
  printf '[filter:%s]\nuse = egg:swift#%s\n' "$f" "$f" >>"$work/etc/proxy-server.conf"
done
chown -R swift:swift "$work/node"  # the servers drop privileges to user swift

# tempauth keeps its tokens in memcached.
memcached -u nobody -l 127.0.0.1 -p "$memcached_port" -m 64 >"$work/log/memcached.log" 2>&1 &
echo $! >"$work/memcached.pid"
pidfiles+=("$work/memcached.pid")
for name in account container object proxy; do
  "/usr/bin/swift-$name-server" "$work/etc/$name-server.conf" -v >"$work/log/$name.log" 2>&1 &
  echo $! >"$work/$name.pid"
  pidfiles+=("$work/$name.pid")
done

touch "$work/faults" "$work/proxy.log"
python3 "$here/s3_fault_proxy.py" "$proxy_port" "$work/faults" "$work/proxy.log" "$work/fault_proxy.port" \
  >"$work/log/fault_proxy.log" 2>&1 &
echo $! >"$work/fault_proxy.pid"
pidfiles+=("$work/fault_proxy.pid")

# Up when every server listens on its own port, the fault proxy has its port and the
# proxy server answers /healthcheck.
local pairs=()
for name in account:$account_port container:$container_port object:$object_port proxy:$proxy_port \
    memcached:$memcached_port; do
  pairs+=("$(cat "$work/${name%%:*}.pid"):${name##*:}")
done
wait_until_up 120 "http://127.0.0.1:$proxy_port/healthcheck" "$work/fault_proxy.port" "${pairs[@]}"
}
show_logs() {
  local log
  for log in "$work"/log/*.log "$work/listening.log"; do [ -f "$log" ] && { echo "--- $log"; tail -5 "$log"; }; done
  return 0
}

start_with_retries "the servers did not all come up on their own ports within 60 s"
echo "s3_server: Swift s3api on http://127.0.0.1:$proxy_port, fault proxy on port $(cat "$work/fault_proxy.port")"

export S3_TEST_ENDPOINT="http://127.0.0.1:$proxy_port"
export S3_TEST_PROXY_ENDPOINT="http://127.0.0.1:$(cat "$work/fault_proxy.port")"
export S3_TEST_FAULTS="$work/faults" S3_TEST_PROXY_LOG="$work/proxy.log"
export S3_TEST_ACCESS_KEY="test:tester" S3_TEST_SECRET="testing" S3_TEST_REGION="auto"
rc=0
"$@" || rc=$?
if [ $rc -ne 0 ]; then
  echo "--- proxy-server log (tail)"
  tail -30 "$work/log/proxy.log"
  echo "--- errors and timeouts in the Swift servers' logs"
  grep -hiE 'error|timeout|trying to|503' "$work"/log/{account,container,object,proxy}.log | tail -40 || true
fi
exit $rc
