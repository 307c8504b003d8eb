#!/usr/bin/env python3
"""Whether each PID:PORT pair names a process that itself (or a process below it) listens on
127.0.0.1:PORT (TCP), read from /proc: `listening.py PID:PORT...` exits 0 when all do, 1
when one does not yet, 2 when one of the processes is gone.

The test servers' scripts (s3_server.sh, moto_server.sh) pick free ports by binding to port 0
and closing, then start their servers on them; on a busy machine another process can take
such a port in between, and a server that answers on it may then be someone else's. A port
counts as up only when the listener is the server this script started."""

import os
import sys

from fault_points import descendants


def listening_inodes(port):
    """Inodes of the TCP sockets listening on 127.0.0.1:port (or on any address)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local, state, inode = f[1], f[3], f[9]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port and addr in ("0100007F", "00000000", "0" * 32):
                found.add(inode)
    return found


def socket_inodes(pids):
    inodes = set()
    for p in pids:
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    return inodes


def main(pairs):
    up = True
    for pair in pairs:
        pid, port = (int(x) for x in pair.split(":"))
        if not os.path.exists(f"/proc/{pid}"):
            print(f"listening: process {pid} (port {port}) is gone", file=sys.stderr)
            return 2
        if not listening_inodes(port) & socket_inodes([pid, *descendants(pid)]):
            up = False
    return 0 if up else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
