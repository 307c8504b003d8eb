#!/usr/bin/env python3
"""reshard from s3:// to s3:// with bytes copied inside the store (issue 29: UploadPartCopy),
against the real S3 server tests/s3_server.sh starts (Swift + s3api, and the fault proxy).
Usage: s3_server.sh python3 cli_s3_copy_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE S3_PUT GEN_CHECKPOINT

Every output is compared byte for byte with the same command's output on local files, and its
"transfer" report with the sizes involved: what crosses this machine's link is the index and
the bytes around the copied ranges."""

import json
import os
import signal
import subprocess
import sys

from cli_common import *
from fault_points import HANG, paused_at
from s3_common import *

BUCKET = f"tfckpt-copy-{os.getpid()}"
ROOT = f"s3://{BUCKET}"
s3_put("mb", ROOT)


def tables():
    """An 84 MiB checkpoint in 4 data files, partitioned tables (gen_checkpoint tables)."""
    return generated("tables", "tables", "40", "2", "4")


def big_tables():
    """A 256 MiB checkpoint of two [65536, 512] float32 tables, unpartitioned, in one data file."""
    return generated("big", "one-file", "2", "65536", "512", "1", stem="d")


def files_of(prefix):
    d, stem = os.path.split(prefix)
    return sorted(f for f in os.listdir(d) if f.startswith(stem + "."))


def total_size(prefix):
    d = os.path.dirname(prefix)
    return sum(os.path.getsize(os.path.join(d, f)) for f in files_of(prefix))


def reshard_json(*args, code=0, env=None):
    p = run("reshard", *args, "--json", code=code, env=env, timeout=600)
    return json.loads(p.stdout)


@test()
def an_axis0_reshard_uploads_at_most_1_percent_of_the_checkpoint_plus_the_index():
    src = big_tables()
    remote = tree_uploaded(src, f"{ROOT}/big")
    whole = total_size(src)
    args = ["--partition", "embedding=fixed:3", "--policy", "shards:3"]
    local = os.path.join(WORK, "dlocal", "r")
    run("reshard", src, "-o", local, *args, code=0, timeout=600)
    out = f"{ROOT}/dout/r"
    doc = reshard_json(remote, "-o", out, *args)
    assert doc["verified"] is True, doc
    same_bytes(out, local)
    t = doc["transfer"]
    assert t["uploaded"] <= whole // 100 + os.path.getsize(local + ".index"), (t, whole)
    assert t["copied_in_store"] >= whole * 99 // 100, (t, whole)
    # (read: the input once, for the output's CRCs and its own; the verification by CRCs reads nothing)
    assert t["downloaded"] <= whole + whole // 20, (t, whole)


@test()
def axis0_reshards_unpartitioning_and_policies_copy_inside_the_store_byte_identical():
    src = tables()
    remote = tree_uploaded(src, f"{ROOT}/in")
    whole = total_size(src)
    for n, args in enumerate((["--partition", "fixed:3", "--policy", "shards:3"],
                              ["--partition", "none", "--policy", "single"],
                              ["--policy", "shards:2"])):
        local = os.path.join(WORK, f"local{n}", "r")
        run("reshard", src, "-o", local, *args, code=0, timeout=600)
        out = f"{ROOT}/out{n}/r"
        doc = reshard_json(remote, "-o", out, *args)
        assert doc["verified"] is True, doc
        same_bytes(out, local)
        t = doc["transfer"]
        # --server-side never: today's path, the same bytes, nothing copied inside the store.
        out_never = f"{ROOT}/never{n}/r"
        never = reshard_json(remote, "-o", out_never, *args, "--server-side", "never")["transfer"]
        same_bytes(out_never, local)
        assert never["copied_in_store"] == 0 and never["uploaded"] >= whole * 9 // 10, never
        # Copied inside the store: most of it. (This layout's cuts fall between the stored
        # slices: a run under 5 MiB, S3's smallest part, goes up from here with 5 MiB of
        # its neighbour; the 1 % case is the test above.)
        assert t["copied_in_store"] >= whole // 2 and t["uploaded"] <= never["uploaded"] // 2, (args, t, never)
        assert t["copied_in_store"] + t["uploaded"] >= whole * 9 // 10, (args, t)
    # The human output says it in one line.
    p = run("reshard", remote, "-o", f"{ROOT}/human/r", "--partition", "fixed:2", code=0, timeout=600)
    lines = [l for l in p.stdout.splitlines() if l.startswith("transfer: ")]
    assert len(lines) == 1 and "copied inside the store" in lines[0] and "uploaded" in lines[0], p.stdout


@test()
def local_runs_report_no_transfer_and_always_needs_one_store():
    src = tables()
    doc = reshard_json(src, "-o", os.path.join(WORK, "loc", "r"), "--partition", "fixed:2")
    assert doc["transfer"] == {"copied_in_store": 0, "uploaded": 0, "downloaded": 0}, doc
    p = run("reshard", src, "-o", os.path.join(WORK, "loc2", "r"), code=0)
    assert "transfer:" not in p.stdout, p.stdout
    # always: a run that cannot copy inside the store is a usage error, one line saying why.
    remote = tree_uploaded(src, f"{ROOT}/in")
    one_error_line(run("reshard", remote, "-o", os.path.join(WORK, "loc3", "r"), "--server-side", "always", code=2),
                   "--server-side always", "not in an object store")
    one_error_line(run("reshard", src, "-o", f"{ROOT}/always/r", "--server-side", "always", code=2),
                   "--server-side always", src)
    one_error_line(run("reshard", remote, "-o", "gs://b/r", "--server-side", "always", code=2),
                   "gs://b/r", "XML API")
    assert listing(f"{ROOT}/always/") == {}
    # and where it can, it does
    doc = reshard_json(remote, "-o", f"{ROOT}/always/r", "--partition", "fixed:3", "--server-side", "always")
    assert doc["transfer"]["copied_in_store"] > 0, doc
    one_error_line(run("reshard", src, "-o", "x", "--server-side", "sometimes", code=2), "--server-side")


@test()
def a_corrupt_input_piece_copied_inside_the_store_fails_the_run_and_leaves_nothing():
    src = big_tables()
    bad_dir = os.path.join(WORK, "bad")
    os.makedirs(bad_dir, exist_ok=True)
    bad = copy_ckpt(src, bad_dir)
    # One bit in the middle of the first table, within the second of its three pieces: a
    # range the store copies, whose bytes the copy reads only for the output's checksum
    # (not the whole stored piece: its checksum is the verification's to check).
    data0 = bad + ".data-00000-of-00001"
    flip(data0, 64 << 20)
    args = ["--partition", "embedding=fixed:3", "--policy", "shards:3"]
    # (Locally the verification's mismatch of a checksum: exit 1, nothing written.)
    local = run("reshard", bad, "-o", os.path.join(WORK, "badlocal", "r"), *args, timeout=600)
    assert local.returncode in (1, 3), (local.returncode, local.stderr)
    remote = tree_uploaded(bad, f"{ROOT}/badin")
    out = f"{ROOT}/badout/r"
    p = run("reshard", remote, "-o", out, *args, timeout=600)
    assert p.returncode == local.returncode, (p.returncode, local.returncode, p.stderr)
    one_error_line(p, "embedding_0/embeddings", "checksum mismatch")
    assert listing(f"{ROOT}/badout/") == {} and uploads(f"{ROOT}/badout/") == [], listing(f"{ROOT}/badout/")
    # --no-verify skips that check (and so does not see it), as on local files.
    doc = reshard_json(remote, "-o", f"{ROOT}/badout2/r", *args, "--no-verify")
    assert doc["verified"] is False and doc["transfer"]["copied_in_store"] > 0, doc


@test()
def interrupted_after_a_part_was_copied_leaves_nothing():
    src = tables()
    remote = tree_uploaded(src, f"{ROOT}/in")
    out = f"{ROOT}/intr/r"
    proc = paused_at(TFCKPT, ["reshard", remote, "-o", out, "--partition", "fixed:3"], "part-copied#2")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
    assert listing(out + ".") == {} and uploads(out) == [], (listing(out + "."), uploads(out))


if __name__ == "__main__":
    sys.exit(main("cli_s3_copy"))
