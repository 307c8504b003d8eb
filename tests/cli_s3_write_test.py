#!/usr/bin/env python3
"""Commands writing to s3:// (issue 16), against the real S3 server that tests/s3_server.sh
starts (Swift + s3api, and the fault proxy in front of it).
Usage: s3_server.sh python3 cli_s3_write_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE S3_PUT GEN_CHECKPOINT

Every output written to the store is compared byte for byte with the same command's output
on local files; the commit order (data objects, then the index last, If-None-Match) is read
off the fault proxy's request log."""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import zipfile

from cli_common import *
from fault_points import HANG, paused_at
from s3_common import *

BUCKET = f"tfckpt-write-{os.getpid()}"
ROOT = f"s3://{BUCKET}"

s3_put("mb", ROOT)


def big():
    """An 84 MiB checkpoint in 4 data files of 20-24 MiB (parts of 8 MiB: multipart uploads),
    with partitioned tables."""
    return generated("big", "tables", "40", "2", "4")


def remote_big():
    """big() uploaded as it is, once: its prefix in the store."""
    return tree_uploaded(big(), f"{ROOT}/in")


@test(needs_data=True)
def reshard_writes_remote_outputs_byte_identical_to_local_ones():
    src = big()
    args = ["--partition", "fixed:3", "--policy", "shards:3"]
    local = os.path.join(WORK, "local", "r")
    run("reshard", src, "-o", local, *args, code=0)
    # local -> s3, s3 -> s3, s3 -> local: the same bytes every time.
    out = f"{ROOT}/r1/r"
    p = run("reshard", src, "-o", out, *args, "--json", code=0)
    assert json.loads(p.stdout)["verified"] is True, p.stdout
    same_bytes(out, local)
    run("validate", out, "--against", src, code=0)
    out2 = f"{ROOT}/r2/r"
    run("reshard", remote_big(), "-o", out2, *args, code=0)
    same_bytes(out2, local)
    back = os.path.join(WORK, "back", "r")
    run("reshard", remote_big(), "-o", back, *args, code=0)
    for f in os.listdir(os.path.dirname(local)):
        with open(os.path.join(os.path.dirname(local), f), "rb") as a, open(os.path.join(os.path.dirname(back), f), "rb") as b:
            assert a.read() == b.read(), f
    # A small real checkpoint too (every object a single PUT), and a directory as -o is refused.
    run("reshard", data(T2T), "-o", f"{ROOT}/t2t/m", "--policy", "shards:3", code=0)
    run("reshard", data(T2T), "-o", os.path.join(WORK, "t2t", "m"), "--policy", "shards:3", code=0)
    same_bytes(f"{ROOT}/t2t/m", os.path.join(WORK, "t2t", "m"))
    one_error_line(run("reshard", src, "-o", f"{ROOT}/r1/", code=2), "is a directory")


@test(needs_data=True)
def the_index_goes_up_last_only_if_absent_and_force_replaces_in_that_order():
    src = big()
    out = f"{ROOT}/order/m"
    clear_proxy_log()
    run("reshard", src, "-o", out, "--policy", "shards:2", code=0, env=PROXY)
    log = [l for l in proxy_log() if "/order/" in l]
    writes = [l for l in log if l.startswith(("PUT", "POST", "DELETE"))]
    index_put = [i for i, l in enumerate(writes) if l.startswith("PUT") and "/order/m.index" in l]
    # (Swift answers 501 to If-None-Match: the client then asks with a HEAD and PUTs plainly.)
    assert index_put and index_put[-1] == len(writes) - 1, writes
    assert "if-none-match=*" in writes[index_put[0]], writes[index_put[0]]
    completes = [l for l in writes if l.startswith("POST") and "uploadId=" in l]
    assert len(completes) == 2, writes  # both data objects (> 8 MiB) were multipart uploads
    # Without --force an existing output is refused (nothing asked to change);
    one_error_line(run("reshard", src, "-o", out, code=2), out, "--force")
    # with it, the new data under names the old checkpoint does not use go up first (it
    # stays whole meanwhile), then the old index is replaced by the new one in one PUT (no
    # DELETE before it: a reader finds one or the other at every moment), and the old data
    # objects go last.
    clear_proxy_log()
    run("reshard", src, "-o", out, "--policy", "single", "--force", code=0, env=PROXY)
    writes = [l for l in proxy_log() if "/order/" in l and l.startswith(("PUT", "POST", "DELETE"))]
    # (parts go up before: invisible until their upload is completed)
    visible = [l.split()[0] + " " + l.split()[1].split("/order/")[1].split("?")[0] + ("?uploadId" if "uploadId=" in l else "")
               for l in writes if "partNumber=" not in l and "?uploads" not in l]
    assert visible[0] == "POST m.data-00000-of-00001?uploadId", visible
    assert visible[1].startswith("PUT m.index") and "DELETE m.index" not in visible, visible
    index_puts = [l for l in writes if l.startswith("PUT") and "/order/m.index" in l]
    assert index_puts and all("if-none-match= " in l for l in index_puts), index_puts  # (it replaces)
    assert sorted(visible[-2:]) == ["DELETE m.data-00000-of-00002", "DELETE m.data-00001-of-00002"], visible
    # With the same names (one data file again), the old checkpoint is first copied inside
    # the store under a backup prefix (its data object, then its index), the old index goes
    # right before the first completion that replaces one of its data objects, and once the
    # new index is up the backup goes (its index first).
    clear_proxy_log()
    run("reshard", src, "-o", out, "--policy", "single", "--force", code=0, env=PROXY)
    log = [re.sub(r"tfckpt-old-[0-9a-f]{8}", "tfckpt-old-X", l) for l in proxy_log() if "/order/" in l]
    writes = [l for l in log if l.startswith(("PUT", "POST", "DELETE"))]
    visible = [l.split()[0] + " " + l.split()[1].split("/order/")[1].split("?")[0] + ("?uploadId" if "uploadId=" in l else "")
               for l in writes if "partNumber=" not in l and "?uploads" not in l]
    visible = [v for k, v in enumerate(visible) if k == 0 or v != visible[k - 1]]  # (a PUT the client sent again)
    assert visible == ["POST m.tfckpt-old-X.data-00000-of-00001?uploadId", "PUT m.tfckpt-old-X.index", "DELETE m.index",
                       "POST m.data-00000-of-00001?uploadId", "PUT m.index", "DELETE m.tfckpt-old-X.index",
                       "DELETE m.tfckpt-old-X.data-00000-of-00001"], visible
    # (the backup's data copied inside the store: no byte of it through tfckpt)
    copies = [l for l in writes if l.startswith("PUT /") and "m.tfckpt-old-X.data-" in l and "partNumber=" in l]
    assert copies and all(re.search(r"copy-source=\S*order/m\.data-00000-of-00001 ", l) for l in copies), copies
    assert sorted(listing(out + ".")) == [key_of(out) + s for s in (".data-00000-of-00001", ".index")]
    run("validate", out, "--against", src, code=0)


@test(needs_data=True)
def a_failed_force_keeps_the_old_checkpoint_and_a_finished_one_leaves_nothing_of_it():
    src = big()
    out = f"{ROOT}/force/m"
    objects = lambda: sorted(listing(out + "."))
    names = lambda n: sorted([key_of(out) + ".index"] + [key_of(out) + f".data-{i:05d}-of-{n:05d}" for i in range(n)])
    run("reshard", data(T2T), "-o", out, "--policy", "shards:2", code=0)
    old = objects()
    assert old == names(2), old
    fail = {**PROXY, "TFCKPT_S3_MAX_RETRIES": "0"}
    # The new data objects take the old ones' names (2 data files again; multipart uploads,
    # whose completions are refused): the old index goes right before the first is replaced,
    # and comes back when none was.
    faults("always POST uploadId= status 500 InternalError")
    one_error_line(run("reshard", src, "-o", out, "--policy", "shards:2", "--force", code=3, env=fail), out, "500")
    faults()
    assert objects() == old and uploads(out) == [], (objects(), uploads(out))
    run("validate", out, "--against", data(T2T), code=0)
    # Other names (3 data files): the new data go up first, the old index stays until the new
    # one replaces it; a refused index leaves the old checkpoint whole.
    faults("when PUT force/m.index status 500 InternalError")
    one_error_line(run("reshard", src, "-o", out, "--policy", "shards:3", "--force", code=3, env=fail), out, "500")
    faults()
    assert objects() == old and uploads(out) == [], (objects(), uploads(out))
    run("validate", out, "--against", data(T2T), code=0)
    # Finished: nothing of the old checkpoint remains, with other names and with the same.
    run("reshard", src, "-o", out, "--policy", "shards:3", "--force", code=0)
    assert objects() == names(3), objects()
    run("validate", out, "--against", src, code=0)
    run("reshard", data(T2T), "-o", out, "--policy", "shards:3", "--force", code=0)
    assert objects() == names(3), objects()
    run("validate", out, "--against", data(T2T), code=0)


@test(needs_data=True)
def a_failed_merge_force_keeps_the_old_checkpoint_where_the_new_data_take_its_names():
    """merge --force onto an object store replaces an old checkpoint as reshard's does (issue
    41: merge publishes through the same owner, which now replaces in one step there too).
    Where the new data objects take the old ones' names, the old checkpoint is backed up
    inside the store first; a refused index PUT puts it back byte for byte and leaves
    nothing else (before: its index removed first and its data objects replaced by the new
    ones: a late failure left neither checkpoint)."""
    keras = data("keras_tf2_adam_2shards/model.ckpt")
    out = f"{ROOT}/mergeforce/m"
    objects = lambda: sorted(listing(out + "."))
    contents = lambda: {k: get(f"{ROOT}/{k}") for k in objects()}
    names = sorted([key_of(out) + ".index"] + [key_of(out) + f".data-{i:05d}-of-00002" for i in range(2)])
    run("merge", data(T2T), "-o", out, code=0)
    old = contents()
    assert sorted(old) == names, sorted(old)
    faults("when PUT mergeforce/m.index status 500 InternalError")
    p = run("merge", keras, "-o", out, "--force", code=3, env={**PROXY, "TFCKPT_S3_MAX_RETRIES": "0"})
    faults()
    one_error_line(p, out, "500")
    assert contents() == old and uploads(out) == [], (objects(), uploads(out))
    run("validate", out, "--against", data(T2T), code=0)
    # Finished: the new checkpoint alone under those names.
    run("merge", keras, "-o", out, "--force", code=0)
    assert objects() == names, objects()
    run("validate", out, "--against", keras, code=0)


@test(needs_data=True)
def a_force_to_other_names_keeps_an_index_at_every_point():
    """Issue 38, item 2 (where the new data files take none of the old ones' names): the old
    index is replaced by the new one in one PUT, never deleted first. A kill at
    `index-replacing` (the new data complete and verified, the index about to go up) leaves
    the old checkpoint readable and valid beside the new data objects (before: the old index
    deleted at `old-index-removed`, neither checkpoint); a stop there undoes the run (the
    old checkpoint exactly as it was)."""
    src = big()
    out = f"{ROOT}/inplace/m"
    objects = lambda: sorted(listing(out + "."))
    run("reshard", data(T2T), "-o", out, "--policy", "shards:2", code=0)
    old = objects()
    for sig in (signal.SIGINT, signal.SIGKILL):
        proc = paused_at(TFCKPT, ["reshard", src, "-o", out, "--policy", "shards:3", "--force"], "index-replacing")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=HANG)
        if sig == signal.SIGINT:
            assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
            assert objects() == old and uploads(out) == [], (objects(), uploads(out))
        else:
            assert set(old) < set(objects()), (objects(), old)
        run("validate", out, "--against", data(T2T), code=0)
    # The next --force finishes and leaves the new checkpoint alone.
    run("reshard", src, "-o", out, "--policy", "shards:3", "--force", code=0)
    assert objects() == sorted([key_of(out) + ".index"] + [key_of(out) + f".data-{i:05d}-of-00003" for i in range(3)])
    run("validate", out, "--against", src, code=0)


def small():
    """A 24 MiB checkpoint in 2 data files (reshard to 2: multipart uploads of 12 MiB)."""
    return generated("small", "tables", "24", "2", "2")


@test(needs_data=True)
def a_force_to_the_same_names_keeps_the_old_checkpoint_at_every_point():
    """Issue 38, item 2 (where the new data files take the old ones' names: the same count).
    The old checkpoint is copied inside the store under PREFIX.tfckpt-old-XXXXXXXX before its
    index goes, and put back from there on a failure or a stop before the new index is up.
    A stop at every point up to there: exit 130, the old objects byte for byte as they were,
    nothing else left. A kill at every point: no index whose data objects are missing (under
    the output's name, the old checkpoint or the new one or no index; a backup's index only
    beside its whole data), and the next --force finishes and leaves nothing else. A refused
    index PUT: exit 3, the old checkpoint kept, and the error line says so. (Before: the old
    index deleted first, and a late failure left neither checkpoint.)"""
    src = small()
    out = f"{ROOT}/same/m"
    stem = key_of(out)
    objects = lambda: sorted(listing(out + "."))
    contents = lambda: {k: get(f"{ROOT}/{k}") for k in objects()}
    names = sorted([stem + ".index"] + [stem + f".data-{i:05d}-of-00002" for i in range(2)])
    args = ["reshard", src, "-o", out, "--policy", "shards:2", "--force"]

    def start_old():
        run("reshard", data(T2T), "-o", out, "--policy", "shards:2", "--force", code=0)
        assert objects() == names and uploads(out) == [], (objects(), uploads(out))
        return contents()

    def no_index_without_its_data(what):
        """Every index under the output's stem validates: the output's (the old checkpoint
        or the new one), a backup's (the old one)."""
        keys = objects()
        for k in keys:
            if not k.endswith(".index"):
                continue
            p = run("validate", f"{ROOT}/{k[:-len('.index')]}", code=None)
            assert p.returncode == 0, (what, k, keys, p.stdout, p.stderr)
            if ".tfckpt-old-" in k:
                run("validate", f"{ROOT}/{k[:-len('.index')]}", "--against", data(T2T), code=0)
        return keys

    old = start_old()
    # A stop at each point before the new index is up. (upload-completed#4: the backup's two
    # data objects and its index were completed, then the first new data object.)
    for point in ("old-backing-up", "old-backed-up", "old-index-removed", "upload-completed#4", "data-committed"):
        proc = paused_at(TFCKPT, args, point)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=HANG)
        assert proc.returncode == 130 and "interrupted" in err, (point, proc.returncode, err)
        assert contents() == old and uploads(out) == [], (point, objects(), uploads(out))
        run("validate", out, "--against", data(T2T), code=0)
    # A refused index PUT: the old checkpoint put back whole.
    fail = {**PROXY, "TFCKPT_S3_MAX_RETRIES": "0"}
    faults("when PUT same/m.index status 500 InternalError")
    line = one_error_line(run(*args, code=3, env=fail), out, "500")
    faults()
    assert "the old checkpoint was kept" in line, line
    assert contents() == old and uploads(out) == [], (objects(), uploads(out))
    run("validate", out, "--against", data(T2T), code=0)
    # A kill at each point, the restore after that refused PUT included: never an index whose
    # data objects are missing; the next --force finishes and leaves nothing else behind.
    for point, env in (("old-backing-up", None), ("old-backed-up", None), ("old-index-removed", None),
                       ("upload-completed#4", None), ("data-committed", None), ("backup-removing", None),
                       ("old-restoring", fail)):
        if env is fail:
            faults("when PUT same/m.index status 500 InternalError")
        proc = paused_at(TFCKPT, args, point, env=env)
        proc.kill()
        proc.communicate(timeout=HANG)
        faults()
        keys = no_index_without_its_data(point)
        backups = [k for k in keys if ".tfckpt-old-" in k]
        if stem + ".index" not in keys:
            # (then the old checkpoint is whole under its backup's name)
            assert any(k.endswith(".index") for k in backups), (point, keys)
        # (the killed run's uploads in progress are its own: validate --abort-uploads, below)
        run(*args, code=0)
        assert objects() == names, (point, objects())
        run("validate", out, "--against", src, code=0)
        run("validate", out, "--abort-uploads", "--older-than", "0", code=None)
        assert uploads(out) == [], (point, uploads(out))
        old = start_old()


@test(needs_data=True)
def convert_writes_remote_outputs():
    src = big()
    for name in ("m.safetensors",):  # (.npz: convert_writes_npz_straight_to_the_store)
        local = os.path.join(WORK, "conv", name)
        run("convert", src, "-o", local, code=0)
        run("convert", src, "-o", f"{ROOT}/conv/{name}", code=0)
        with open(local, "rb") as f:
            assert get(f"{ROOT}/conv/{name}") == f.read(), name
        run("validate", f"{ROOT}/conv/{name}", "--against", src, code=0)
    # convert back to a TF checkpoint from the store into the store
    run("convert", f"{ROOT}/conv/m.safetensors", "-o", f"{ROOT}/conv/tf/m", "--to", "tf", code=0)
    run("convert", os.path.join(WORK, "conv", "m.safetensors"), "-o", os.path.join(WORK, "conv", "tf", "m"), "--to",
        "tf", code=0)
    same_bytes(f"{ROOT}/conv/tf/m", os.path.join(WORK, "conv", "tf", "m"))


@test(needs_data=True)
def convert_writes_npz_straight_to_the_store():
    src = big()
    tmp = os.path.join(WORK, "npz_tmp")  # $TMPDIR: nothing is built there (issue 26)
    os.makedirs(tmp, exist_ok=True)
    env = {"TMPDIR": tmp}
    local = os.path.join(WORK, "npz", "m.npz")
    run("convert", src, "-o", local, code=0)
    # Laid out first, written at its offsets into a multipart upload (84 MiB) from -j threads,
    # read back through the store and verified: the same bytes as the local archive.
    out = f"{ROOT}/npz/m.npz"
    p = run("convert", src, "-o", out, "--json", "-j", "4", code=0, env=env)
    assert json.loads(p.stdout)["verified"] is True and json.loads(p.stdout)["files"] == [out], p.stdout
    assert os.listdir(tmp) == [], os.listdir(tmp)
    with open(local, "rb") as f:
        assert get(out, os.path.join(WORK, "got")) == f.read()
    with zipfile.ZipFile(os.path.join(WORK, "got")) as z:  # (what get() downloaded)
        assert z.testzip() is None and len(z.namelist()) > 1, z.namelist()
    assert uploads(out) == [], uploads(out)
    # An existing output needs --force (refused before any work), which replaces it.
    one_error_line(run("convert", src, "-o", out, code=2), out, "--force")
    fewer = os.path.join(WORK, "npz", "fewer.npz")
    run("convert", src, "-o", fewer, "--exclude", "embedding_1", code=0)
    run("convert", src, "-o", out, "--force", "--exclude", "embedding_1", code=0)
    with open(fewer, "rb") as f:
        assert get(out) == f.read()
    assert os.path.getsize(fewer) < os.path.getsize(local)


@test(needs_data=True)
def a_failed_or_interrupted_npz_upload_leaves_no_object():
    src = big()
    env = {**PROXY, "TFCKPT_S3_MAX_RETRIES": "2"}
    out = f"{ROOT}/npz_failed/m.npz"
    # A part refused for good: exit 3 naming the object, no upload left.
    # ("always": every attempt at part 2 of either object, however the parts of both
    # interleave; "&": not parts 20-29, which are there too and used to take the faults)
    faults("always PUT partNumber=2& status 503 SlowDown")
    p = run("convert", src, "-o", out, code=3, env=env)
    faults()
    one_error_line(p, out, "503")
    assert listing(out) == {} and uploads(out) == [], listing(out)
    # Uploaded, then a read of the verification refused: the storage's error (not libzip's
    # "Read error"), and the object deleted again.
    # (the first GET is the check of the output's access, before any work: a byte of the key)
    faults("when GET npz_failed/m.npz delay 0", "when GET npz_failed/m.npz status 403 AccessDenied")
    p = run("convert", src, "-o", out, code=3, env=env)
    faults()
    one_error_line(p, out, "403", "removed the output")
    assert listing(out) == {} and uploads(out) == [], listing(out)
    # Interrupted in the middle of the upload (its second part stored): the upload aborted
    # before the process exits (the archive goes straight into it: no local temporary).
    clear_proxy_log()
    proc = paused_at(TFCKPT, ["convert", src, "-o", out], "part-uploaded#2", env=env)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
    assert listing(out) == {}, listing(out)
    uploads_aborted_before_exit(out)


# A role that may read and write objects but not list them (nor its uploads), as S3 answers
# it: a listing 403 AccessDenied, and so is a GET or HEAD of a missing key (S3 will not say
# what is not there to a caller who may not list).
NO_LISTING = ("always GET list-type=2 status 403 AccessDenied", "always GET uploads= status 403 AccessDenied",
              "always GET * deny-missing", "always HEAD * deny-missing")


@test(needs_data=True)
def an_exact_prefix_needs_no_listing():
    src = big()
    s3_put("tree", os.path.dirname(data(T2T)), f"{ROOT}/getonly/")
    prefix = f"{ROOT}/getonly/{os.path.basename(T2T)}"
    local = os.path.join(WORK, "getonly")
    faults(*NO_LISTING)
    try:
        run("inspect", prefix + ".index", code=0, env=PROXY)
        run("inspect", prefix, "--stats", code=0, env=PROXY)
        # (what only a listing finds is not looked for, and a note says which permission
        # would let it be)
        p = run("validate", prefix, code=0, env=PROXY)
        assert p.stdout.count("files.not-listed") == 2 and "s3:ListBucket permission" in p.stdout \
            and "s3:ListBucketMultipartUploads permission" in p.stdout, p.stdout
        run("validate", prefix, "--against", data(T2T), code=0, env=PROXY)
        # Outputs: written with PutObject (and the multipart calls) alone, byte for byte the
        # local ones; an existing one refused without --force, replaced with it.
        run("reshard", prefix, "-o", f"{ROOT}/getonly_out/r", "--policy", "shards:3", code=0, env=PROXY)
        run("reshard", src, "-o", f"{ROOT}/getonly_out/big", "--policy", "shards:2", code=0, env=PROXY)
        one_error_line(run("reshard", prefix, "-o", f"{ROOT}/getonly_out/r", code=2, env=PROXY), "--force")
        run("reshard", prefix, "-o", f"{ROOT}/getonly_out/r", "--policy", "shards:3", "--force", code=0, env=PROXY)
        run("convert", prefix, "-o", f"{ROOT}/getonly_out/m.safetensors", code=0, env=PROXY)
        run("convert", prefix, "-o", f"{ROOT}/getonly_out/m.npz", code=0, env=PROXY)
        run("convert", f"{ROOT}/getonly_out/m.safetensors", "-o", f"{ROOT}/getonly_out/tf/m", "--to", "tf", code=0,
            env=PROXY)
        run("validate", f"{ROOT}/getonly_out/r", "--against", data(T2T), code=0, env=PROXY)
        # Where only a listing will do, its refusal names the permission that is missing.
        one_error_line(run("inspect", f"{ROOT}/getonly/", code=3, env=PROXY), "s3:ListBucket")
        one_error_line(run("validate", prefix, "--abort-uploads", code=3, env=PROXY), "s3:ListBucketMultipartUploads")
        # A missing checkpoint is still one line, exit 3, naming it.
        one_error_line(run("inspect", f"{ROOT}/getonly/nothing", code=3, env=PROXY), f"{ROOT}/getonly/nothing")
    finally:
        faults()
    for name in ("r", "big"):
        run("reshard", src if name == "big" else data(T2T), "-o", os.path.join(local, name),
            "--policy", "shards:3" if name == "r" else "shards:2", code=0)
        same_bytes(f"{ROOT}/getonly_out/{name}", os.path.join(local, name))
    assert listing(f"{ROOT}/getonly_out/m.npz") and uploads(f"{ROOT}/getonly_out/") == []


@test(needs_data=True)
def gs_urls_with_hmac_keys_read_and_write_as_s3_ones():
    # gs:// signed as for Cloud Storage's XML API (HMAC keys, region "auto"), against the same
    # server: the same bucket seen through both schemes holds the same objects.
    gs = {**GS_KEYS, "TFCKPT_GS_ENDPOINT_URL": os.environ["S3_TEST_ENDPOINT"], "AWS_ACCESS_KEY_ID": "",
          "AWS_SECRET_ACCESS_KEY": ""}
    groot = f"gs://{BUCKET}"
    src = big()
    local = os.path.join(WORK, "gs-local", "m")
    run("reshard", src, "-o", local, "--policy", "shards:2", code=0)
    run("reshard", src, "-o", f"{groot}/gs/m", "--policy", "shards:2", code=0, env=gs)
    same_bytes(f"{ROOT}/gs/m", local)
    p = run("inspect", f"{groot}/gs/m", "--json", code=0, env=gs)
    assert json.loads(p.stdout)["num_shards"] == 2 and json.loads(p.stdout)["tensors"], p.stdout[:300]
    run("validate", f"{groot}/gs/m", "--against", src, code=0, env=gs)
    run("reshard", f"{groot}/gs/m", "-o", f"{groot}/gs2/m", "--policy", "shards:2", code=0, env=gs)
    local2 = os.path.join(WORK, "gs-local2", "m")
    run("reshard", local, "-o", local2, "--policy", "shards:2", code=0)
    same_bytes(f"{ROOT}/gs2/m", local2)
    run("convert", f"{groot}/gs/m", "-o", f"{groot}/gs/m.safetensors", code=0, env=gs)
    run("convert", f"{groot}/gs/m", "-o", os.path.join(WORK, "gs-local", "m.safetensors"), code=0, env=gs)
    with open(os.path.join(WORK, "gs-local", "m.safetensors"), "rb") as f:
        assert get(f"{ROOT}/gs/m.safetensors") == f.read()
    run("merge", f"{groot}/gs/m", "-o", os.path.join(WORK, "gs-back", "m"), code=0, env=gs)
    run("validate", os.path.join(WORK, "gs-back", "m"), "--against", src, code=0)
    # The index's create-only precondition on gs:// is Cloud Storage's own,
    # x-goog-if-generation-match: 0 (If-None-Match: * is none there), as the proxy sees the
    # PUT; s3:// sends only If-None-Match. (No local emulator of the XML API with
    # preconditions is on PyPI: the request is what is checked; Swift answers If-None-Match
    # with 501, and the HEAD then keeps a second run from overwriting the index.)
    for scheme_root, out, header in ((groot, "gs-cond/m", "if-generation-match=0"), (ROOT, "s3-cond/m", "if-generation-match= ")):
        clear_proxy_log()
        run("reshard", src, "-o", f"{scheme_root}/{out}", "--policy", "shards:2", code=0,
            env={**gs, "TFCKPT_GS_ENDPOINT_URL": os.environ["S3_TEST_PROXY_ENDPOINT"]} if scheme_root == groot else PROXY)
        index_puts = [l for l in proxy_log() if l.startswith(f"PUT /{BUCKET}/{out}.index ")]
        assert index_puts and all(header in l for l in index_puts), index_puts
        assert all("if-none-match=*" in l for l in index_puts[:1]), index_puts
    p = run("reshard", src, "-o", f"{groot}/gs-cond/m", "--policy", "shards:2", code=2, env=gs)
    one_error_line(p, f"{groot}/gs-cond/m")
    # Without keys for gs:// (and no token, no metadata server): one line naming the URL.
    p = run("inspect", f"{groot}/gs/m", code=3, env={**gs, "GS_ACCESS_KEY_ID": "", "GS_SECRET_ACCESS_KEY": "",
                                                    "GCE_METADATA_HOST": "127.0.0.1:9", "TFCKPT_S3_MAX_RETRIES": "0"})
    one_error_line(p, f"{groot}/gs/m")


@test(needs_data=True)
def merge_writes_remote_outputs_with_edits():
    src = big()
    # inputs local and remote, outputs remote and local; data files copied into the store
    # (a big one as a multipart upload) are verified before the index goes up.
    edits = ["--rename", "^dense_=d_", "--exclude", "table_1"]
    run("merge", data(T2T), src, "-o", os.path.join(WORK, "merged", "m"), *edits, code=0)
    s3_put("tree", data("t2t_transformer_2shards"), f"{ROOT}/t2t_in/")
    run("merge", f"{ROOT}/t2t_in/model.ckpt-1", src, "-o", f"{ROOT}/merged/m", *edits, code=0)
    same_bytes(f"{ROOT}/merged/m", os.path.join(WORK, "merged", "m"))


@test(needs_data=True)
def merge_recover_finishes_a_save_left_in_the_store():
    # An unmerged save: PREFIX_temp/part-0000N-of-00002 parts, no PREFIX.index.
    with tempfile.TemporaryDirectory() as d:
        parts = os.path.join(d, "ckpt-1_temp")
        for i, keep in enumerate(("^[^n-z]", "^[n-z]")):
            run("merge", data(T2T), "-o", os.path.join(parts, f"part-{i:05d}-of-00002"), "--exclude", keep, code=0)
        s3_put("tree", d, f"{ROOT}/rec/")
        run("merge", "--recover", os.path.join(d, "ckpt-1"), code=0)
        parts = listing(f"{ROOT}/rec/ckpt-1_temp/")
        assert parts, listing(f"{ROOT}/rec/")
        run("merge", "--recover", f"{ROOT}/rec/ckpt-1", "-o", f"{ROOT}/rec-copy/ckpt-1", code=0)
        same_bytes(f"{ROOT}/rec-copy/ckpt-1", os.path.join(d, "ckpt-1"))
        assert listing(f"{ROOT}/rec/ckpt-1_temp/") == parts  # (the parts stay: no --move)
        # TensorFlow's --move renames the parts' data files; a store has no rename: the data
        # objects are copied (inside the store), the output verified and committed, and the
        # parts deleted then -- the same output, and nothing of the parts left.
        p = run("merge", "--recover", f"{ROOT}/rec/ckpt-1", "--move", "--json", code=0)
        assert json.loads(p.stdout)["verified"] is True, p.stdout
        same_bytes(f"{ROOT}/rec/ckpt-1", os.path.join(d, "ckpt-1"))
        assert listing(f"{ROOT}/rec/ckpt-1_temp/") == {}, listing(f"{ROOT}/rec/")


def data_gets(prefix):
    """(bytes fetched, connections used) by the GETs of prefix's data objects in the proxy log."""
    fetched, conns = 0, set()
    for l in proxy_log():
        if l.startswith(f"GET /{BUCKET}/{key_of(prefix)}.data-"):
            first, last = l.split(" range=bytes=")[1].split()[0].split("-")
            fetched += int(last) - int(first) + 1
            conns.add(l.split(" conn=")[1].split()[0])
    return fetched, conns


@test(needs_data=True)
def reads_fetch_each_byte_once_whatever_the_threads_and_connections_bound_them():
    src = remote_big()
    data = sum(size for key, size in listing(src + ".data-").items())
    # Threads verifying the tables' slices side by side: each streams its own (a cache of
    # windows shared by all once fetched the bytes up to 7 times at -j 8). What is fetched
    # beyond the data is the windows of the small tensors, whole.
    for jobs in ("4", "8"):
        clear_proxy_log()
        run("validate", src, "-j", jobs, code=0, env=PROXY)
        assert data_gets(src)[0] < 1.1 * data, (jobs, data_gets(src)[0], data)
    # One thread: its stream fetches ahead over several connections, or over one with
    # --connections 1.
    clear_proxy_log()
    run("validate", src, "-j", "1", "--connections", "1", code=0, env=PROXY)
    fetched, conns = data_gets(src)
    assert fetched < 1.1 * data and len(conns) == 1, (fetched, conns)
    clear_proxy_log()
    run("validate", src, "-j", "1", "--connections", "8", code=0, env=PROXY)
    fetched, conns = data_gets(src)
    assert fetched < 1.1 * data and len(conns) > 1, (fetched, conns)


def fetched_bytes():
    """The bytes the ranged GETs in the proxy log since it was cleared asked for (every object)."""
    total = 0
    for l in proxy_log():
        if l.startswith("GET ") and " range=bytes=" in l:
            first, last = l.split(" range=bytes=")[1].split()[0].split("-")
            total += int(last) - int(first) + 1
    return total


def dense(files, rows):
    """The layout of issue 28 (A3): 10 float32 kernels [ROWS, 1000], each after its small bias
    [1000] as TF orders them, in FILES data files; uploaded once. (its prefix in the store,
    the bytes of its objects)"""
    name = f"dense{files}x{rows}"
    local = os.path.join(WORK, name, "m")
    if not os.path.exists(local + ".index"):
        subprocess.run([GEN, "dense", local, "10", str(rows), "1000", str(files)], check=True, timeout=300,
                       capture_output=True)
        s3_put("tree", os.path.dirname(local), f"{ROOT}/{name}/")
    remote = f"{ROOT}/{name}/m"
    return remote, sum(listing(remote + ".").values())


@test()
def every_stored_byte_is_fetched_once_per_command():
    # Small biases between large kernels (each bias's read-ahead window used to fetch most of
    # the next kernel, which its own stream then fetched again), at -j 1 and -j 8, one data
    # file and two: every command fetches what it needs, once (the proxy log's ranged GETs,
    # index included, against the checkpoint's bytes). Reshard's output is verified by the
    # CRCs of the bytes uploaded, the .npz by the source's stored CRCs: neither reads the
    # source again.
    for files, rows in ((1, 5000), (2, 2500)):  # 191 MiB in one data file; 95 MiB in two
        src, need = dense(files, rows)
        npz = os.path.join(WORK, f"fetch{files}.npz")
        for jobs in ("1", "8"):
            commands = [["validate", src], ["reshard", src, "-o", f"{ROOT}/fetch{files}-{jobs}/m"],
                        ["reshard", src, "-o", f"{ROOT}/fetch{files}-{jobs}n/m", "--no-verify"],
                        ["convert", src, "-o", npz, "--force"]]
            if jobs == "1":
                commands.append(["inspect", src, "--stats"])  # (no -j)
            for args in commands:
                clear_proxy_log()
                run(*args, *([] if args[0] == "inspect" else ["-j", jobs]), code=0, env=PROXY)
                got = fetched_bytes()
                assert got <= 1.05 * need, (args, jobs, got, need, f"{got / need:.2f}x")


@test(needs_data=True)
def scale_out_steps_write_their_parts_and_the_index_to_the_store():
    src = big()
    plan = f"{ROOT}/scale/plan.json"  # no shared file system: the plan is in the store too
    out = f"{ROOT}/scale/m"
    run("reshard", remote_big(), "-o", out, "--partition", "fixed:2",
        "--policy", "shards:3", "--plan", plan, code=0)
    for task in range(2):
        run("reshard", "--execute", plan, "--task", str(task), code=0)
        assert key_of(out) + ".index" not in listing(out + "."), task
    # A missing task: finalize names it and writes nothing.
    p = run("reshard", "--finalize", plan, code=2)
    assert "tasks have not finished: 2 (" in p.stderr, p.stderr
    assert key_of(out) + ".index" not in listing(out + ".")
    # A task run again (a pod retried by its Job) replaces its own objects.
    for task in (2, 0):
        run("reshard", "--execute", plan, "--task", str(task), code=0)
    # --finalize moves no data (the tasks' data objects are already under their final
    # names: no copy standing in for a rename); it writes the index and removes the parts.
    clear_proxy_log()
    run("reshard", "--finalize", plan, code=0, env=PROXY)
    writes = [l.split("?")[0].split(" conn=")[0] for l in proxy_log() if l.startswith(("PUT", "POST"))]
    assert writes == [f"PUT /{BUCKET}/scale/m.index"] * len(writes) and writes, writes
    assert listing(f"{ROOT}/scale/m_temp") == {}, listing(f"{ROOT}/scale/m_temp")
    # The checkpoint is up: a task run again under this plan (made without --force) is
    # refused before it writes, as its data object would go under a name the index uses.
    p = run("reshard", "--execute", plan, "--task", "0", code=2)
    assert "m.index: output exists (plan with --force to replace it)" in p.stderr, p.stderr
    assert key_of(out) + ".index" in listing(out + ".")
    local = os.path.join(WORK, "scale_local", "m")
    run("reshard", src, "-o", local, "--partition", "fixed:2", "--policy", "shards:3", code=0)
    same_bytes(out, local)


@test(needs_data=True)
def writes_retry_through_faults_and_fail_cleanly_when_the_budget_is_spent():
    src = big()
    local = os.path.join(WORK, "faults_local", "m")
    run("reshard", src, "-o", local, "--policy", "shards:2", code=0)
    # 503s, SlowDown and a reset on part uploads and on the index: retried, the same bytes.
    out = f"{ROOT}/faulty/m"
    faults("when PUT partNumber=2 status 503", "when PUT partNumber=1 status 503 SlowDown",
           "when PUT partNumber=3 reset", "when PUT m.index status 500 InternalError")
    run("reshard", src, "-o", out, "--policy", "shards:2", code=0, env=PROXY)
    faults()
    same_bytes(out, local)
    # Retries used up on a part: exit 3, one line naming the object and the last status; no
    # index, no data object, no upload left in progress.
    out = f"{ROOT}/failed/m"
    # ("always": every attempt at part 2 of either object, however the parts of both
    # interleave; "&": not parts 20-29, which are there too and used to take the faults)
    faults("always PUT partNumber=2& status 503 SlowDown")
    p = run("reshard", src, "-o", out, "--policy", "shards:2", code=3, env={**PROXY, "TFCKPT_S3_MAX_RETRIES": "2"})
    faults()
    one_error_line(p, f"{out}.data-0000", "503")
    assert listing(out + ".") == {} and uploads(out) == [], (listing(out + "."), uploads(out))
    # The index refused for good: the data objects (complete by then) are removed again.
    faults(*["when PUT failed/m.index status 503"] * 4)
    p = run("reshard", src, "-o", out, "--policy", "shards:2", code=3, env={**PROXY, "TFCKPT_S3_MAX_RETRIES": "2"})
    faults()
    one_error_line(p, f"{out}.index", "503")
    assert listing(out + ".") == {} and uploads(out) == [], listing(out + ".")
    p = run("reshard", src, "-o", out, "--policy", "shards:2", "--json", code=3,
            env={**PROXY, "AWS_SECRET_ACCESS_KEY": "wrong", "TFCKPT_S3_MAX_RETRIES": "0"})
    assert json.loads(p.stdout)["ok"] is False and "wrong" not in p.stdout + p.stderr, p.stdout


def uploads_aborted_before_exit(out):
    """Every upload an interrupted run began (the proxy log since it was cleared) was aborted
    before the process exited, or completed (and its object deleted: the caller checks the
    listing): a request for each in the log, and none left in progress under `out` -- at
    once, as the run waits for the answers to its aborts."""
    log = proxy_log()
    begun, unfinished = uploads_begun_and_unfinished(log)
    assert begun, log
    assert not unfinished, (unfinished, log)
    assert uploads(out) == [], uploads(out)


def stopped_reshard(src, out, sig, point, fault_lines=()):
    """A reshard to `out` through the proxy with `fault_lines`, stopped at fault point `point`
    with `sig`; (exit status, stderr, the proxy log's lines when the signal was sent)."""
    clear_proxy_log()
    faults(*fault_lines)
    try:
        proc = paused_at(TFCKPT, ["reshard", src, "-o", out, "--policy", "shards:2"], point, env=PROXY)
        at_signal = proxy_log()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=HANG)
    finally:
        faults()
    return proc.returncode, err, at_signal


@test(needs_data=True)
def a_killed_reshard_leaves_no_index_and_no_complete_object_and_validate_reports_its_uploads():
    out = f"{ROOT}/killed/m"
    assert stopped_reshard(big(), out, signal.SIGKILL, "part-uploaded#2")[0] == -signal.SIGKILL
    assert listing(out + ".") == {}, listing(out + ".")
    left = uploads(out)
    assert left, "a killed upload is still in progress"
    p = run("validate", out, "--json")
    assert "files.upload-in-progress" in p.stdout and "--abort-uploads" in p.stdout, p.stdout
    run("validate", out, "--abort-uploads", "--older-than", "0", code=None)
    assert uploads(out) == []


@test(needs_data=True)
def an_interrupted_reshard_aborts_its_uploads():
    for sig, want, point in ((signal.SIGINT, 130, "part-uploaded#2"), (signal.SIGTERM, 143, "upload-created"),
                             (signal.SIGHUP, 129, "upload-completing"), (signal.SIGINT, 130, "upload-completed")):
        out = f"{ROOT}/interrupted-{want}-{point}/m"
        code, err, _ = stopped_reshard(big(), out, sig, point)
        assert code == want and "interrupted" in err, (point, code, err)
        assert listing(out + ".") == {}, (point, listing(out + "."))
        uploads_aborted_before_exit(out)


@test(needs_data=True)
def an_interrupt_during_a_failing_completion_is_handled_without_waiting_out_the_retries():
    # Every CompleteMultipartUpload answered 503 (the budget: 10 retries, up to 32 s apart).
    # An interrupt once one was refused, as it waits to retry: no further attempt, exit 130,
    # nothing left.
    out = f"{ROOT}/interrupted-completion/m"
    completion = lambda l: l.startswith("POST ") and "uploadId=" in l
    code, err, at_signal = stopped_reshard(big(), out, signal.SIGINT, "request-retrying",
                                           ["when POST uploadId= status 503 SlowDown"] * 40)
    assert any(completion(l) for l in at_signal), at_signal
    assert code == 130 and "interrupted" in err, (code, err)
    later = [l for l in proxy_log()[len(at_signal):] if completion(l)]
    assert later == [], later
    assert listing(out + ".") == {}, listing(out + ".")
    uploads_aborted_before_exit(out)


@test(needs_data=True)
def an_interrupt_does_not_wait_for_a_request_the_store_holds():
    # A part's PUT that the store never answers (the proxy holds it until the test lets it
    # go): a signal cuts it short; the run aborts its uploads and exits. (Had it waited for
    # the request, it would wait for the proxy, which lets go only after the run ended: the
    # test would hang until HANG and fail.)
    out = f"{ROOT}/held/m"
    clear_proxy_log()
    faults("when PUT partNumber=2 hold")
    try:
        proc = subprocess.Popen([TFCKPT, "reshard", big(), "-o", out, "--policy", "shards:2"],
                                env={**os.environ, **PROXY}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_fault("hold")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=HANG)
    finally:
        release_held()
        faults()
    assert proc.returncode == 143 and "interrupted" in err, (proc.returncode, err)
    assert listing(out + ".") == {}, listing(out + ".")
    uploads_aborted_before_exit(out)


@test(needs_data=True)
def an_interrupt_does_not_wait_for_a_stalled_part_and_completes_nothing():
    # A part's PUT answered with its headers and half its body, then nothing for longer than
    # HANG (the proxy's stall): SIGINT or SIGTERM cuts it short, every upload is aborted
    # before the exit and none is completed (a completion after the signal, deleted again,
    # was seen before). Had the run waited for the stalled answer, communicate() would time
    # out and the test fail: no clock is read.
    out = f"{ROOT}/stalled/m"
    for sig in (signal.SIGINT, signal.SIGTERM):
        clear_proxy_log()
        faults(f"when PUT partNumber=2 stall {HANG * 3}")
        try:
            proc = subprocess.Popen([TFCKPT, "reshard", big(), "-o", out, "--policy", "shards:2"],
                                    env={**os.environ, **PROXY}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_for_fault("stall")
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=HANG)
        finally:
            faults()
        assert proc.returncode == 128 + sig and "interrupted" in err, (sig, proc.returncode, err)
        assert listing(out + ".") == {}, listing(out + ".")
        log = proxy_log()
        assert not [l for l in log if l.startswith("POST ") and "uploadId=" in l], log
        uploads_aborted_before_exit(out)


@test()
def bad_output_urls_credentials_and_endpoints_are_one_line_exit_3_before_any_work():
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        secret = os.environ["AWS_SECRET_ACCESS_KEY"]
        cases = [
            ("s3://Bad_Bucket!/m", {}, "malformed object URL"),
            (f"s3://no-such-bucket-{os.getpid()}/m", {}, "NoSuchBucket"),
            (f"{ROOT}/bad/m", {"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, "403"),
            # A refused endpoint that never answered: one attempt, not the retry budget.
            (f"{ROOT}/bad/m", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "not retried: the endpoint has not answered yet"),
        ]
        for url, env, why in cases:
            for args in (["reshard", src, "-o", url], ["convert", src, "-o", url + ".safetensors"],
                         ["merge", src, "-o", url]):
                p = run(*args, code=3, env=env)
                one_error_line(p, url.split("/m")[0] if "malformed" in why else url, why)
                assert secret not in p.stderr + p.stdout and "not-the-secret" not in p.stderr, p.stderr
        assert listing(f"{ROOT}/bad/") == {}


@test(needs_data=True)
def progress_on_a_terminal_shows_bytes_and_throughput_of_remote_transfers():
    src = big()
    # One connection and a stalled part answer (retried); the bar without its delay.
    faults("when PUT partNumber=2 stall 2")
    try:
        code, err = run_with_tty_stderr(["reshard", src, "-o", f"{ROOT}/progress/m", "--policy", "shards:2"],
                                        {**os.environ, **PROXY, "TFCKPT_S3_CONNECTIONS": "1",
                                         "TFCKPT_PROGRESS_DELAY_MS": "0"})
    finally:
        faults()
    assert code == 0, err
    assert "copying" in err and "MiB / 84.0 MiB" in err and "/s" in err, err[-600:]
    # An .npz for the store is written straight into its upload: one phase, to the end.
    code, err = run_with_tty_stderr(["convert", src, "-o", f"{ROOT}/progress/m.npz"],
                                    {**os.environ, "TFCKPT_PROGRESS_DELAY_MS": "0"})
    assert code == 0, err
    assert re.search(r"writing +\[#{30}\] (\S+ MiB) / \1 ", err) and "uploading" not in err, err[-600:]


@test(needs_data=True)
def every_remote_output_shows_its_verifying_phase_with_the_bytes_it_checks():
    """Issue 28 A8: outputs on a store are verified once their data objects are complete
    (convert's .npz and safetensors once the whole output is): the bar then shows
    "verifying", after the writing phase, counting the output's bytes to their total."""
    env = {**os.environ, "TFCKPT_PROGRESS_DELAY_MS": "0"}
    src = data(T2T)
    for args, first in ((["reshard", src, "-o", f"{ROOT}/verifying/r", "--policy", "shards:3"], "copying"),
                        (["merge", src, "-o", f"{ROOT}/verifying/m", "--drop-optimizer"], "copying"),
                        (["convert", src, "-o", f"{ROOT}/verifying/c.npz"], "writing"),
                        (["convert", src, "-o", f"{ROOT}/verifying/c.safetensors"], "writing")):
        code, err = run_with_tty_stderr(args, env)
        assert code == 0, (args, err[-600:])
        lines = [l.strip() for l in err.replace("\r", "\n").splitlines() if l.strip()]
        phases = [l.split()[0] for l in lines]
        assert "verifying" in phases and first in phases, (args, lines)
        assert phases.index("verifying") > max(i for i, p in enumerate(phases) if p == first), (args, lines)
        # Its last line: every byte of the output counted, and the total is not nothing.
        last = [l for l in lines if l.startswith("verifying")][-1]
        m = re.match(r"verifying +\[#{30}\] (\S+ \S+) / \1 ", last)
        assert m and m.group(1) != "0 B", (args, last)


@test(needs_data=True)
def between_the_data_and_the_index_an_interrupt_deletes_the_data_and_a_kill_leaves_them_reported():
    src = big()
    # Interrupted once the data objects are complete and before the index: they are deleted
    # (the run's outputs until it succeeds, as local files are).
    out = f"{ROOT}/window/m"
    data_objects = [key_of(out) + f".data-0000{i}-of-00002" for i in (0, 1)]
    proc = paused_at(TFCKPT, ["reshard", src, "-o", out, "--policy", "shards:2"], "data-committed")
    assert sorted(listing(out + ".")) == data_objects, listing(out + ".")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
    assert listing(out + ".") == {}, listing(out + ".")
    # Killed there: the data objects stay, with no index; validate names them.
    proc = paused_at(TFCKPT, ["reshard", src, "-o", out, "--policy", "shards:2"], "data-committed")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=HANG)
    assert sorted(listing(out + ".")) == data_objects, listing(out + ".")
    p = run("validate", out, "--json")
    errors = {(e["check"], e["file"]) for e in json.loads(p.stdout)["errors"]}
    assert ("files.no-index", f"{out}.data-00000-of-00002") in errors, p.stdout
    # and the next run refuses to take them for its own without --force
    one_error_line(run("reshard", src, "-o", out, "--policy", "shards:2", code=2), out, "--force")
    run("reshard", src, "-o", out, "--policy", "shards:2", "--force", code=0)
    run("validate", out, "--against", src, code=0)


def small_pieces():
    """6 dense layers of a float32 kernel [100, 8192] (3.2 MiB) and its bias [8192] (32 KiB)
    in one data file: pieces all small (s3_storage.h: read in groups of neighbours); uploaded
    once. (its local prefix, its prefix in the store)"""
    local = os.path.join(WORK, "small_pieces", "m")
    if not os.path.exists(local + ".index"):
        subprocess.run([GEN, "dense", local, "6", "100", "8192", "1"], check=True, timeout=300, capture_output=True)
        s3_put("tree", os.path.dirname(local), f"{ROOT}/small_pieces/")
    return local, f"{ROOT}/small_pieces/m"


@test(needs_data=True)
def an_npz_written_to_the_store_is_read_back_once_for_its_verification():
    # Issue 38: the verification read the archive back 2.25x (libzip's reads of each
    # member's header, through 16 MiB read-ahead windows, fetched the whole archive once
    # before the members were streamed again). Now: at most once, with a few small requests.
    # (The inputs are local: the proxy sees only the output's requests.) Members of 20 MiB,
    # and members of 3.2 MiB and 32 KiB (small: read in groups of neighbours), -j 1 and 8.
    for n, (src, jobs) in enumerate(((big(), "4"), (small_pieces()[0], "1"), (small_pieces()[0], "8"))):
        out = f"{ROOT}/npz_once/m{n}.npz"
        proxy_counts(clear=True)
        p = run("convert", src, "-o", out, "--json", "-j", jobs, code=0, env=PROXY)
        got = proxy_counts(clear=True)["downloaded"]
        assert json.loads(p.stdout)["verified"] is True, p.stdout
        size = listing(out)[key_of(out)]
        assert got <= 1.1 * size, (src, jobs, got, size, f"{got / size:.2f}x")


@test()
def reading_one_small_tensor_fetches_its_bytes_and_the_index_only():
    # Issue 38: a 32 KiB bias between 3.2 MiB kernels (small pieces: read in groups of
    # neighbours) fetched its whole group for one read. One tensor read: the index and its
    # bytes (and no more than twice that).
    local, remote = small_pieces()
    index = os.path.getsize(local + ".index")
    assert os.path.getsize(local + ".data-00000-of-00001") > 18 << 20
    for args in (["--tensor", "dense_3/bias"], ["--tensor", "dense_3/bias", "--all-values", "--json"]):
        proxy_counts(clear=True)
        p = run("inspect", remote, *args, code=0, env=PROXY)
        got = proxy_counts(clear=True)["downloaded"]
        assert got < 2 * (index + 32768), (args, got, index)
        assert p.stdout == run("inspect", local, *args, code=0).stdout.replace(local, remote)
    # A command reading them all (its reads announced) still fetches each byte once, in
    # groups of neighbours.
    need = sum(listing(remote + ".").values())
    for jobs in ("1", "8"):
        proxy_counts(clear=True)
        run("validate", remote, "-j", jobs, code=0, env=PROXY)
        got = proxy_counts(clear=True)["downloaded"]
        assert got <= 1.05 * need, (jobs, got, need)


@test(needs_data=True)
def a_failed_run_whose_objects_cannot_be_deleted_names_them():
    # Issue 38: credentials without s3:DeleteObject (DELETE answers 403 AccessDenied; an
    # upload can still be aborted): the data objects a failed run completed stay, and its
    # error says which, with the original failure's exit code, as text and in --json.
    src = big()
    env = {**PROXY, "TFCKPT_S3_MAX_RETRIES": "1"}
    for n, extra in enumerate(([], ["--json"])):
        out = f"{ROOT}/undeletable{n}/m"
        data_objects = [f"{out}.data-0000{i}-of-00002" for i in (0, 1)]
        # the data objects are completed, then the index is refused for good
        faults("always REMOVE * status 403 AccessDenied", "always PUT m.index status 503 SlowDown")
        p = run("reshard", src, "-o", out, "--policy", "shards:2", *extra, code=3, env=env)
        faults()
        line = one_error_line(p, f"{out}.index", "503", "left behind")
        for url in data_objects:
            assert url in line.split("left behind")[1], line
        if extra:
            error = json.loads(p.stdout)["error"]
            assert all(url in json.dumps(error) for url in data_objects), p.stdout
        assert sorted(listing(out + ".")) == [key_of(u) for u in data_objects], listing(out + ".")
        assert uploads(out) == [], uploads(out)
    # Interrupted between the data objects and the index: the same, with exit 130.
    out = f"{ROOT}/undeletable_int/m"
    faults("always REMOVE * status 403 AccessDenied")
    proc = paused_at(TFCKPT, ["reshard", src, "-o", out, "--policy", "shards:2"], "data-committed", env=PROXY)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG)
    faults()
    assert proc.returncode == 130 and "interrupted" in err and "left behind" in err, (proc.returncode, err)
    for i in (0, 1):
        assert f"{out}.data-0000{i}-of-00002" in err, err
    assert len(listing(out + ".")) == 2, listing(out + ".")
    # A DELETE that works: nothing is said, nothing is left (the same run without the rule).
    faults("always PUT m.index status 503 SlowDown")
    p = run("reshard", src, "-o", f"{ROOT}/deletable/m", "--policy", "shards:2", code=3, env=env)
    faults()
    assert "left behind" not in p.stderr and listing(f"{ROOT}/deletable/m.") == {}, p.stderr


if __name__ == "__main__":
    sys.exit(main("cli_s3_write"))
