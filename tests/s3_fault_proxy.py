#!/usr/bin/env python3
"""A fault-injecting HTTP proxy on loopback, in front of the test S3 server (stdlib only).

Usage: s3_fault_proxy.py UPSTREAM_PORT FAULTS_FILE LOG_FILE PORT_FILE [CERT KEY]

Listens on 127.0.0.1 (a free port, written to PORT_FILE; with CERT and KEY, PEM files, it
speaks https with that certificate) and forwards every request,
headers untouched (the Host header is part of the SigV4 signature), to
127.0.0.1:UPSTREAM_PORT. Before each request it takes the first line of FAULTS_FILE (the
test writes it) and applies it instead of, or to, that request:

  status CODE [S3CODE]  answer CODE with an S3 <Error> body, do not forward
  reset                 close the connection at once (RST), no answer
  reset-mid-body        forward, send the headers and half the body, then RST
  stall SECONDS         forward, send the headers and half the body (no body: half the
                        headers), wait, then close
  hold                  do not forward, do not answer: keep the request waiting until the
                        test releases it (then close the connection) or the client gives up
  delay SECONDS         wait, then forward and answer as usual (a slow server, no failure)
  deny-missing          forward; an answer 404 becomes 403 AccessDenied (what S3 answers
                        for a missing key to a caller without s3:ListBucket)
  forward-reset         forward (the server carries the request out), then close the
                        connection at once (RST) without answering: a lost answer
  forward-status CODE [S3CODE]  forward (the server carries the request out), then answer
                        CODE with an S3 <Error> body instead of the server's answer
  short-body            forward; a 2xx answer's body cut to its first half, Content-Length
                        saying so, Content-Range (if any) left as the server sent it: a body
                        shorter than the range it claims
  short-range           forward; a 2xx answer's body cut to its first half, Content-Length
                        and Content-Range both saying so (the total left as it was): an
                        answer consistent in itself, shorter than the range asked for
  long-body             forward; a 2xx answer's body followed by as many bytes again (0xEE),
                        Content-Length saying so, Content-Range left as the server sent it
  region REGION [301|quiet]  a request signed for another region than REGION is answered
                        as S3 answers one sent to the wrong region, not forwarded: 400
                        AuthorizationHeaderMalformed with <Region>REGION</Region> (a HEAD:
                        400, no body), header x-amz-bucket-region: REGION; with 301, 301
                        PermanentRedirect instead; with quiet, neither the header nor
                        <Region> except to a HEAD of the bucket itself (a client must ask
                        it). Requests signed for REGION are forwarded (an
                        x-amz-bucket-region in the answer says REGION). Meant for "always"
  when METHOD TEXT FAULT…  FAULT for the first METHOD request whose target holds TEXT;
                        other requests pass untouched and leave the line in place
  always METHOD TEXT FAULT…  FAULT for every METHOD request whose target holds TEXT (TEXT
                        "*": every one), for good: the line stays, and the lines after it
                        apply to the other requests (a policy: e.g. no listing allowed);
                        "always" lines go first in the file
  METHOD COPY           a PUT with an x-amz-copy-source header (UploadPartCopy, CopyObject:
                        the store copies, no body is sent); METHOD PUT then means the other
                        PUTs alone (part uploads, objects), so that a rule for uploads does
                        not fire on copies nor the other way round. TEXT is looked for in the
                        target, then in " copy-source=SOURCE copy-range=bytes=A-B" (e.g.
                        "when COPY partNumber=2 status 500", "always COPY * status 501
                        NotImplemented")
  METHOD REMOVE         a DELETE of an object (DeleteObject: no uploadId= in its target),
                        not an AbortMultipartUpload; METHOD DELETE still means both (e.g.
                        "always REMOVE * status 403 AccessDenied": credentials without
                        s3:DeleteObject that may still abort their uploads)

Controls for the tests (requests to the proxy itself, never forwarded or logged):
  GET /__proxy__/reset           clear the faults file, forget the faults that fired and release
                                 every held request
  GET /__proxy__/wait?fault=KIND&count=N
                                 answers once N faults of KIND (status, reset, stall, hold,
                                 ...) have fired since the last reset (blocking: a test acts
                                 at the moment a fault is in place, without polling)
  GET /__proxy__/release         releases the held requests
  GET /__proxy__/counts[?clear=1]
                                 a JSON object of the bytes that went through since the
                                 last clear (never cleared by reset): "uploaded", the bodies
                                 of PUTs forwarded (not copies); "downloaded", the bodies of
                                 GETs answered 2xx; "copied", the ranges of copies answered
                                 2xx (the source's size for a copy without a range, when
                                 known: 0 else); "copies", their number. With clear=1, the
                                 counts are zeroed after being read

It also answers the GCE metadata server's token request with a fixed token (with the
fault `metadata-odd`, its expires_in is a string). Every request
is logged to LOG_FILE as one line: METHOD PATH?QUERY conn=N (which client connection)
time=T (when it came in: seconds since 1970) range=… if-match=… if-none-match=…
token=… auth=… (a bearer token whole, SigV4 only by its signed headers) region=… (the
region SigV4 signed for) copy-source=…
copy-range=… (a copy's x-amz-copy-source and x-amz-copy-source-range) fault=….
"""
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time
import http.client
import itertools

UPSTREAM_PORT = int(sys.argv[1])
FAULTS_FILE, LOG_FILE, PORT_FILE = sys.argv[2], sys.argv[3], sys.argv[4]
TLS = sys.argv[5:7] if len(sys.argv) >= 7 else None
METADATA_TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
lock = threading.Lock()
connection_ids = itertools.count(1)
# Faults that fired since the last reset, by kind; held requests wait on `released`.
fired_lock = threading.Condition()
fired = {}
released = threading.Event()
# Bytes through the proxy since the last counts?clear=1 (see the docstring).
counts_lock = threading.Lock()
counts = {"uploaded": 0, "downloaded": 0, "copied": 0, "copies": 0}


def note_fired(kind):
    with fired_lock:
        fired[kind] = fired.get(kind, 0) + 1
        fired_lock.notify_all()


def control(target):
    """Answers a test's control request (path /__proxy__/...): (status, body)."""
    path, _, query = target.partition("?")
    args = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
    if path == "/__proxy__/reset":
        global released
        # The faults go first: a held request the client asks again the moment it is let go
        # must not meet an old "always ... hold" and be held for good. Both under `lock`, the
        # lock next_fault decides a hold and takes its gate under: a request given "hold"
        # before the reset waits on the gate set here, one after it is not held at all (its
        # gate taken later, after the decision, could be the new one, never set: a request
        # held for good, and its client with it, under load).
        with lock:
            with open(FAULTS_FILE, "w"):
                pass
            with fired_lock:
                fired.clear()
                released.set()  # (requests held so far go)
                released = threading.Event()
        return 200, b"reset"
    if path == "/__proxy__/release":
        released.set()
        return 200, b"released"
    if path == "/__proxy__/counts":
        with counts_lock:
            body = json.dumps(counts).encode()
            if args.get("clear") == "1":
                for k in counts:
                    counts[k] = 0
        return 200, body
    if path == "/__proxy__/wait":
        kind, count = args.get("fault", ""), int(args.get("count", "1"))
        with fired_lock:
            ok = fired_lock.wait_for(lambda: fired.get(kind, 0) >= count, timeout=600)
        return (200, b"fired") if ok else (504, b"not fired")
    return 404, b"no such control"


def next_fault(method, target):
    """(the fault for a request, the gate a held request waits on): `method` is the rules'
    METHOD (COPY for a copy), `target` the text their TEXT is looked for in. A DELETE of an
    object (no uploadId) is matched by rules for REMOVE as well as DELETE."""
    with lock:
        return next_fault_locked(method, target), released


def next_fault_locked(method, target):
    methods = (method, "REMOVE") if method == "DELETE" and "uploadId=" not in target else (method,)
    try:
        with open(FAULTS_FILE) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    rules = 0  # the "always" lines at the top: they stay
    while rules < len(lines) and lines[rules].startswith("always "):
        rules += 1
    for line in lines[:rules]:
        words = line.split()
        if len(words) >= 4 and (words[1] in methods or words[1] == "*") and (words[2] == "*" or words[2] in target):
            return words[3:]
    rest = lines[rules:]
    if not rest:
        return []
    words = rest[0].split()
    when = bool(words) and words[0] == "when"
    if when and (len(words) < 4 or words[1] not in methods or words[2] not in target):
        return []
    with open(FAULTS_FILE, "w") as f:
        f.write("".join(line + "\n" for line in lines[:rules] + rest[1:]))
    return words[3:] if when else words


def log(line):
    with lock:
        with open(LOG_FILE, "a") as f:
            f.write(line + "\n")


def read_request(conn, buf):
    """(method, target, headers list, body, rest of buf) or None at EOF."""
    while b"\r\n\r\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:] if ":" in line]
    length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
    while len(buf) < length:
        chunk = conn.recv(1 << 20)
        if not chunk:
            return None
        buf += chunk
    return method, target, headers, buf[:length], buf[length:]


def header(headers, name):
    return next((v for k, v in headers if k.lower() == name), "")


def copy_length(copy_range, data):
    """The bytes a copy answered 2xx moved: its range's length (bytes=A-B), else 0 (a whole
    object's copy: its size is not in the answer)."""
    if copy_range.startswith("bytes=") and "-" in copy_range:
        first, last = copy_range[len("bytes="):].split("-", 1)
        if first.isdigit() and last.isdigit():
            return int(last) - int(first) + 1
    return 0


def count(method, is_copy, copy_range, body, status, data):
    with counts_lock:
        if is_copy:
            if 200 <= status < 300:
                counts["copies"] += 1
                counts["copied"] += copy_length(copy_range, data)
        elif method == "PUT":
            counts["uploaded"] += len(body)
        elif method == "GET" and 200 <= status < 300:
            counts["downloaded"] += len(data)


def rst(conn):
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def response_bytes(status, reason, headers, body, head_only):
    out = [f"HTTP/1.1 {status} {reason}"]
    for k, v in headers:
        if k.lower() not in ("connection", "transfer-encoding", "content-length", "keep-alive"):
            out.append(f"{k}: {v}")
    length = header(headers, "content-length") if head_only else str(len(body))
    out.append(f"Content-Length: {length or 0}")
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1"), (b"" if head_only else body)


def short_range(content_range, length):
    """A Content-Range "bytes A-B/T" that says `length` bytes from A were sent."""
    unit, _, rest = content_range.partition(" ")
    span, _, total = rest.partition("/")
    first = int(span.split("-")[0])
    return f"{unit} {first}-{first + length - 1}/{total}"


def forward(method, target, headers, body):
    up = http.client.HTTPConnection("127.0.0.1", UPSTREAM_PORT, timeout=60)
    up.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
    for k, v in headers:
        up.putheader(k, v)
    up.endheaders(body if body else None)
    r = up.getresponse()
    data = r.read()
    up.close()
    return r.status, r.reason, r.getheaders(), data


def signed_region(headers):
    """The region a SigV4 Authorization header signs for ("" for none)."""
    raw = header(headers, "authorization")
    return raw.split("Credential=", 1)[1].split("/")[2] if "Credential=" in raw else ""


def serve(conn_id, method, target, headers, body):
    """(head bytes, body bytes, action) where action is None, 'reset-mid-body', a stall or
    a hold."""
    if target.startswith("/__proxy__/"):
        status, data = control(target)
        return response_bytes(status, "Control", [("Content-Type", "text/plain")], data, False) + (None,)
    copy_source, copy_range = header(headers, "x-amz-copy-source"), header(headers, "x-amz-copy-source-range")
    is_copy = method == "PUT" and bool(copy_source)
    copy_fields = f"copy-source={copy_source} copy-range={copy_range}"
    fault, gate = next_fault("COPY" if is_copy else method, f"{target} {copy_fields}" if is_copy else target)
    auth = header(headers, "authorization")
    if auth.startswith("AWS4-HMAC-SHA256"):  # the scheme and what it signs, not the signature
        auth = "AWS4-HMAC-SHA256 " + next((p.strip() for p in auth.split(",") if "SignedHeaders=" in p), "")
    log(f"{method} {target} conn={conn_id} time={time.time():.3f} range={header(headers, 'range')} if-match={header(headers, 'if-match')} "
        f"if-none-match={header(headers, 'if-none-match')} if-generation-match={header(headers, 'x-goog-if-generation-match')} token={header(headers, 'x-amz-security-token')} "
        f"auth={auth} region={signed_region(headers)} {copy_fields} fault={' '.join(fault)}")
    if target == METADATA_TOKEN_PATH and header(headers, "metadata-flavor") == "Google":
        expires_in = "soon" if fault == ["metadata-odd"] else 3600
        data = json.dumps({"access_token": "test-metadata-token", "expires_in": expires_in}).encode()
        return response_bytes(200, "OK", [("Content-Type", "application/json")], data, False) + (None,)
    bucket_region = None
    if fault and fault[0] == "region":
        signed_for = signed_region(headers)
        if signed_for != fault[1]:
            note_fired("region")
            variant = fault[2] if len(fault) > 2 else ""
            bucket_head = method == "HEAD" and target.split("?")[0].strip("/").count("/") == 0
            tell = variant != "quiet" or bucket_head
            rheaders = [("Content-Type", "application/xml")] + ([("x-amz-bucket-region", fault[1])] if tell else [])
            if variant == "301":
                code, s3code, status = 301, "PermanentRedirect", "Moved Permanently"
            else:
                code, s3code, status = 400, "AuthorizationHeaderMalformed", "Bad Request"
            region = f"<Region>{fault[1]}</Region>" if tell else ""
            data = (f"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>{s3code}</Code><Message>the region "
                    f"'{signed_for}' is wrong</Message>{region}</Error>").encode()
            return response_bytes(code, status, rheaders, b"" if method == "HEAD" else data, method == "HEAD") + (None,)
        bucket_region, fault = fault[1], None
    if fault and fault[0] == "status":
        note_fired("status")
        code = int(fault[1])
        s3code = fault[2] if len(fault) > 2 else "InjectedFault"
        data = f"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>{s3code}</Code><Message>injected</Message></Error>"
        return response_bytes(code, "Injected", [("Content-Type", "application/xml")], data.encode(), False) + (None,)
    if fault and fault[0] == "reset":
        note_fired("reset")
        return None, None, "reset"
    if fault and fault[0] == "hold":
        return None, None, ("hold", gate)
    if fault and fault[0] == "delay":
        note_fired("delay")
        time.sleep(float(fault[1]))
        fault = None
    status, reason, rheaders, data = forward(method, target, headers, body)
    if bucket_region:  # (the server's own region is not the one the fault plays)
        rheaders = [(k, bucket_region if k.lower() == "x-amz-bucket-region" else v) for k, v in rheaders]
    count(method, is_copy, copy_range, body, status, data)
    if fault and fault[0] == "forward-reset":
        note_fired("forward-reset")
        return None, None, "reset"
    if fault and fault[0] == "forward-status":
        note_fired("forward-status")
        s3code = fault[2] if len(fault) > 2 else "InjectedFault"
        data = f"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>{s3code}</Code><Message>injected after the request was carried out</Message></Error>"
        return response_bytes(int(fault[1]), "Injected", [("Content-Type", "application/xml")], data.encode(), False) + (None,)
    if fault and fault[0] in ("short-body", "short-range", "long-body") and 200 <= status < 300 and method == "GET":
        note_fired(fault[0])
        if fault[0] == "long-body":
            data = data + b"\xee" * len(data)
        else:
            data = data[: len(data) // 2]
            if fault[0] == "short-range":
                rheaders = [(k, short_range(v, len(data)) if k.lower() == "content-range" else v) for k, v in rheaders]
        fault = None
    if fault and fault[0] == "deny-missing":
        fault = None
        if status == 404:
            note_fired("deny-missing")
            data = b"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
            status, reason, rheaders = 403, "Forbidden", [("Content-Type", "application/xml")]
    return response_bytes(status, reason, rheaders, data, method == "HEAD") + (fault or None,)


def handle(conn):
    conn_id = next(connection_ids)
    buf = b""
    try:
        if TLS:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(TLS[0], TLS[1])
            conn = ctx.wrap_socket(conn, server_side=True)
        while True:
            req = read_request(conn, buf)
            if req is None:
                conn.close()
                return
            method, target, headers, body, buf = req
            head, data, action = serve(conn_id, method, target, headers, body)
            if action == "reset":
                rst(conn)
                return
            if action and action[0] == "hold":
                note_fired("hold")
                action[1].wait(timeout=600)
                conn.close()
                return
            if action and action[0] in ("reset-mid-body", "stall"):
                # (an answer without a body, a part's PUT say: half its headers, so that it
                # is unfinished too)
                conn.sendall(head + data[: len(data) // 2] if data else head[: len(head) // 2])
                note_fired(action[0])
                if action[0] == "stall":
                    time.sleep(float(action[1]))
                    conn.close()
                else:
                    rst(conn)
                return
            conn.sendall(head + data)
    except (ConnectionError, OSError):
        conn.close()


def main():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(srv.getsockname()[1]))
    os.rename(PORT_FILE + ".tmp", PORT_FILE)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
