"""What the suites against the test S3 server share (tests/s3_server.sh starts it and sets
S3_TEST_*): tfckpt's environment as a user would set it (and the keys for gs:// and moto),
the suite's WORK and the checkpoints generated there, the store's objects uploaded and read
back (tree_uploaded, get, listing, uploads, same_bytes; env= names another store), and the
fault proxy's controls and log.
Importing this removes the AWS and Google variables that would change them from os.environ
(cloud_common.AWS_VARIABLES), then sets AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY and AWS_REGION there (the server directly)."""
import http.client
import json
import os
import subprocess
import sys
import urllib.parse

from cloud_common import AWS_VARIABLES
from harness import work_dir

S3_PUT = sys.argv[4]
# bench/gen_checkpoint, for the suites meson gives it (their fifth argument).
GEN = sys.argv[5] if len(sys.argv) > 5 else None
DIRECT = {
    "AWS_ENDPOINT_URL": os.environ["S3_TEST_ENDPOINT"],
    "AWS_ACCESS_KEY_ID": os.environ["S3_TEST_ACCESS_KEY"],
    "AWS_SECRET_ACCESS_KEY": os.environ["S3_TEST_SECRET"],
    "AWS_REGION": os.environ["S3_TEST_REGION"],
}
# Through the fault proxy.
PROXY = {**DIRECT, "AWS_ENDPOINT_URL": os.environ["S3_TEST_PROXY_ENDPOINT"]}
# The server's keys as Cloud Storage HMAC keys (gs:// URLs; the caller names the endpoint).
GS_KEYS = {"GS_ACCESS_KEY_ID": os.environ["S3_TEST_ACCESS_KEY"], "GS_SECRET_ACCESS_KEY": os.environ["S3_TEST_SECRET"]}
# moto's keys (tests/moto_server.sh; moto takes any), for the suites that run against it too.
MOTO_KEYS = {"AWS_ACCESS_KEY_ID": "moto-key", "AWS_SECRET_ACCESS_KEY": "moto-secret", "AWS_REGION": "us-east-1"}
# None of the variables that change how credentials, regions and endpoints resolve but these
# (the list the credential tests start without, tests/cloud_common.py).
for name in AWS_VARIABLES:
    os.environ.pop(name, None)
os.environ.update(DIRECT)
# Hermetic: none of the user's files, and never a metadata service off loopback (a test that
# wants one names its own).
os.environ.update({"AWS_CONFIG_FILE": "/nonexistent/tfckpt-test/aws-config",
                   "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/tfckpt-test/aws-credentials",
                   "AWS_EC2_METADATA_DISABLED": "true", "CLOUDSDK_CONFIG": "/nonexistent/tfckpt-test/gcloud"})


# The suite's scratch directory (removed when it exits).
WORK = work_dir("tfckpt-s3-")


def s3_put(*args, env=None):
    """tests/s3_put ARGS (the library's client), with `env` over os.environ (another store's
    endpoint and keys); its standard output."""
    return subprocess.run([S3_PUT, *args], check=True, timeout=300, capture_output=True, text=True,
                          env={**os.environ, **env} if env else None).stdout


def get(url, path=None, env=None):
    """The bytes of the object at url (tests/s3_put get), downloaded to path (by default
    WORK/got, overwritten by the next get)."""
    if path is None:
        path = os.path.join(WORK, "got")
    s3_put("get", url, path, env=env)
    with open(path, "rb") as f:
        return f.read()


def generated(name, kind, *args, stem="m"):
    """gen_checkpoint KIND WORK/NAME/STEM ARGS..., once; its prefix."""
    prefix = os.path.join(WORK, name, stem)
    if not os.path.exists(prefix + ".index"):
        subprocess.run([GEN, kind, prefix, *args], check=True, timeout=300, capture_output=True)
    return prefix


def tree_uploaded(local_prefix, remote_dir):
    """The directory of local_prefix uploaded as it is to remote_dir/ (once: when nothing is
    there yet); the checkpoint's prefix there."""
    if not listing(remote_dir + "/"):
        s3_put("tree", os.path.dirname(local_prefix), remote_dir + "/")
    return remote_dir + "/" + os.path.basename(local_prefix)


def key_of(url):
    """The object key of an s3:// (or gs://) URL."""
    return url.split("/", 3)[3]


def proxy_control(what, timeout=600):
    """A control request to the fault proxy (tests/s3_fault_proxy.py): GET /__proxy__/WHAT;
    its status. `timeout` bounds a hang, it measures nothing."""
    url = urllib.parse.urlsplit(os.environ["S3_TEST_PROXY_ENDPOINT"])
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    try:
        c.request("GET", f"/__proxy__/{what}")
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def proxy_counts(clear=False):
    """The bytes through the fault proxy since the last clear (its counts control: "uploaded",
    "downloaded", "copied", "copies"); zeroed after reading with `clear`."""
    url = urllib.parse.urlsplit(os.environ["S3_TEST_PROXY_ENDPOINT"])
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    try:
        c.request("GET", "/__proxy__/counts" + ("?clear=1" if clear else ""))
        r = c.getresponse()
        assert r.status == 200, r.status
        return json.loads(r.read())
    finally:
        c.close()


def faults(*lines):
    """The proxy's next faults, one a line (tests/s3_fault_proxy.py); the faults that fired
    before are forgotten and requests it held are let go (the proxy clears the old faults
    first)."""
    proxy_control("reset")
    with open(os.environ["S3_TEST_FAULTS"], "w") as f:
        f.write("".join(line + "\n" for line in lines))


def wait_for_fault(kind, count=1):
    """Returns once `count` faults of `kind` (hold, stall, status, reset, ...) have fired since
    faults() set them: the moment a test acts, without polling."""
    assert proxy_control(f"wait?fault={kind}&count={count}") == 200, f"the proxy's {kind} fault never fired"


def release_held():
    proxy_control("release")


def proxy_log(path=None):
    """The lines of a fault proxy's request log (by default S3_TEST_PROXY_LOG's)."""
    with open(path or os.environ["S3_TEST_PROXY_LOG"]) as f:
        return f.read().splitlines()


def clear_proxy_log(path=None):
    open(path or os.environ["S3_TEST_PROXY_LOG"], "w").close()


def uploads_begun_and_unfinished(log):
    """(the objects whose multipart uploads the proxy log's lines begin, those of them whose
    upload the log shows neither aborted nor completed)."""
    target = lambda l: l.split()[1].split("?")[0]
    begun = {target(l) for l in log if l.startswith("POST ") and "?uploads" in l}
    aborted = {target(l) for l in log if l.startswith("DELETE ") and "uploadId=" in l}
    completed = {target(l) for l in log if l.startswith("POST ") and "uploadId=" in l}
    return begun, sorted(begun - aborted - completed)


def listing(prefix, env=None):
    """{key: size} of the objects under the URL prefix (tests/s3_put ls)."""
    out = {}
    for line in s3_put("ls", prefix, env=env).splitlines():
        key, size = line.rsplit(" ", 1)
        out[key] = int(size)
    return out


def uploads(prefix, env=None):
    """The keys of the multipart uploads in progress under the URL prefix."""
    return s3_put("uploads", prefix, env=env).split()


def same_bytes(remote_prefix, local_prefix, env=None):
    """The objects REMOTE_PREFIX.* are the files LOCAL_PREFIX.*, byte for byte (and no other
    object is there, no upload is in progress)."""
    local_dir, stem = os.path.split(local_prefix)
    local = sorted(f for f in os.listdir(local_dir) if f.startswith(stem + "."))
    objects = listing(remote_prefix + ".", env=env)
    remote_stem = key_of(remote_prefix)
    assert sorted(k[len(remote_stem):] for k in objects) == [f[len(stem):] for f in local], (objects, local)
    for f in local:
        with open(os.path.join(local_dir, f), "rb") as h:
            assert get(remote_prefix + f[len(stem):], env=env) == h.read(), f
    assert uploads(remote_prefix, env=env) == [], uploads(remote_prefix, env=env)
