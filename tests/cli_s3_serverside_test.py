#!/usr/bin/env python3
"""Copies inside the object store (issue 29): reshard, merge --recover and convert from s3:// to
s3:// with --server-side auto|never|always, against two S3 implementations, Swift + s3api
(tests/s3_server.sh) and moto (tests/moto_server.sh), each behind its fault proxy.
Usage: s3_server.sh moto_server.sh python3 cli_s3_serverside_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE S3_PUT
       GEN_CHECKPOINT

Every output is compared byte for byte with the same command's output on local files. The
bytes a run moved are read twice: from its --json report ("transfer": copied_in_store,
uploaded, downloaded) and from the fault proxy's own counts (tests/s3_fault_proxy.py,
/__proxy__/counts), which see every request. The checkpoints have pieces larger than S3's
smallest part (5 MiB), so that what moves unchanged can be copied by the store; the real
checkpoint's pieces are all smaller (client-side, still the same bytes)."""

import json
import os
import re
import signal
import subprocess
import sys
import urllib.parse
import http.client

from cli_common import *
from fault_points import HANG, paused_at
import s3_common
from s3_common import *

MIB = 1 << 20
PART_MIN = 5 * MIB  # S3's smallest part but the last
BUCKET = f"tfckpt-serverside-{os.getpid()}"
ROOT = f"s3://{BUCKET}"
RUN_TIMEOUT = 600  # a bound on hangs (42 MiB through a Python proxy on two busy cores), never a measurement

# The two stores, each through its fault proxy (every tfckpt run below goes through it).
# (tests/s3_put, which sets up and reads back, goes to the store directly: `direct`.)
STORES = {
    "swift": {"env": PROXY, "direct": DIRECT, "faults": os.environ["S3_TEST_FAULTS"],
              "log": os.environ["S3_TEST_PROXY_LOG"], "proxy": os.environ["S3_TEST_PROXY_ENDPOINT"]},
    "moto": {"env": {**MOTO_KEYS, "AWS_ENDPOINT_URL": os.environ["MOTO_PROXY_ENDPOINT"]},
             "direct": {**MOTO_KEYS, "AWS_ENDPOINT_URL": os.environ["MOTO_ENDPOINT"]},
             "faults": os.environ["MOTO_FAULTS"], "log": os.environ["MOTO_PROXY_LOG"],
             "proxy": os.environ["MOTO_PROXY_ENDPOINT"]},
}
for _name, _store in STORES.items():
    _store["name"] = _name


# ---------------------------------------------------------------------------------------------
# The stores: objects, uploads, the proxy's controls.

# s3_common's readers of the store, against `store` (directly).
def put(store, *args):
    return s3_put(*args, env=store["direct"])


def listing(store, prefix):
    return s3_common.listing(prefix, env=store["direct"])


def uploads(store, prefix):
    return s3_common.uploads(prefix, env=store["direct"])


def get(store, url):
    return s3_common.get(url, env=store["direct"])


def same_bytes(store, remote_prefix, local_prefix):
    s3_common.same_bytes(remote_prefix, local_prefix, env=store["direct"])


def control(store, what):
    """GET /__proxy__/WHAT of the store's fault proxy: (status, body)."""
    url = urllib.parse.urlsplit(store["proxy"])
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=HANG)
    try:
        c.request("GET", f"/__proxy__/{what}")
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def faults(store, *lines):
    """The proxy's next faults (s3_fault_proxy.py); those that fired before are forgotten."""
    assert control(store, "reset")[0] == 200
    with open(store["faults"], "w") as f:
        f.write("".join(line + "\n" for line in lines))


def proxy_counts(store, clear=True):
    """The bytes the store's proxy saw since the last call (uploaded, downloaded, copied, copies)."""
    status, body = control(store, "counts?clear=1" if clear else "counts")
    assert status == 200, body
    return json.loads(body)


def copies_with(store, fault):
    """The copy requests in the store's proxy log whose fault was `fault` ("status 503", ...)."""
    return [l for l in log_of(store) if re.search(r" copy-source=\S", l) and f" fault={fault}" in l]


def requests(store):
    """The proxy log's requests, shortly (for a failure's message): METHOD TARGET and the fault."""
    return [l.split(" conn=")[0][:100] + " " + l.split(" copy-source=")[1] for l in log_of(store)]


def log_of(store):
    return proxy_log(store["log"])


def clear_log(store):
    clear_proxy_log(store["log"])


def run_in(store, *args, code=None, env=None):
    """tfckpt ARGS against `store` (through its proxy)."""
    return run(*args, code=code, timeout=RUN_TIMEOUT, env={**store["env"], **(env or {})})


# ---------------------------------------------------------------------------------------------
# The checkpoints: made once on local files, uploaded once to each store.

def table():
    """One float32 table [86016, 128], 42 MiB, partitioned in 2 row slices over 2 data files of 4
    slices (fixed:4, 10.5 MiB each): fixed:8 cuts pieces of 5.25 MiB, above S3's smallest part."""
    prefix = os.path.join(WORK, "table", "m")
    if not os.path.exists(prefix + ".index"):
        run("reshard", generated("gen/one", "one-file", "1", "86016", "128", "2"), "-o", prefix, "--partition", "fixed:4",
            "--policy", "shards:2", code=0, timeout=RUN_TIMEOUT)
    return prefix


def save():
    """A distributed save TensorFlow left unmerged (no shared file system): the directory of
    ckpt-1_temp/part-0000N-of-00002, each part one table [24576, 128] float32 (12 MiB) in its
    own data file; (the directory, the prefix to recover)."""
    d = os.path.join(WORK, "save")
    if not os.path.isdir(d):
        src = generated("gen/small", "one-file", "1", "24576", "128", "1")
        parts = os.path.join(d, "ckpt-1_temp")
        run("merge", src, "-o", os.path.join(parts, "part-00000-of-00002"), code=0, timeout=RUN_TIMEOUT)
        run("merge", src, "-o", os.path.join(parts, "part-00001-of-00002"), "--rename", "^embedding_0/=embedding_1/",
            code=0, timeout=RUN_TIMEOUT)
    return d, os.path.join(d, "ckpt-1")


def recovered():
    """save() merged on local files: two whole-slice tables of 12 MiB (convert's input)."""
    prefix = os.path.join(WORK, "recovered", "ckpt-1")
    if not os.path.exists(prefix + ".index"):
        run("merge", "--recover", save()[1], "-o", prefix, code=0, timeout=RUN_TIMEOUT)
    return prefix


def uploaded(store, name, local_prefix):
    """The checkpoint at local_prefix uploaded as it is to ROOT/NAME/ (once per store): its
    prefix there and the bytes of its objects (index and data)."""
    done = store.setdefault("uploaded", {})
    if name not in done:
        put(store, "mb", ROOT)
        d, stem = os.path.split(local_prefix)
        for f in sorted(os.listdir(d)):
            if f.startswith(stem + "."):
                put(store, "put", os.path.join(d, f), f"{ROOT}/{name}/{f}")
        remote = f"{ROOT}/{name}/{stem}"
        done[name] = (remote, sum(listing(store, remote + ".").values()))
    return done[name]


def remote_save(store):
    """save() in the store (once): the prefix to recover and the bytes of the parts."""
    done = store.setdefault("uploaded", {})
    if "save" not in done:
        put(store, "mb", ROOT)
        d, _ = save()
        put(store, "tree", d, f"{ROOT}/save/")
        done["save"] = (f"{ROOT}/save/ckpt-1", sum(listing(store, f"{ROOT}/save/ckpt-1_temp/").values()))
    return done["save"]


LOCAL_RUNS = {}


def local_run(*args):
    """tfckpt ARGS with its output (after -o) made a fresh local path; run once per ARGS. The
    output path. Local runs move nothing through a store: their counters are all 0."""
    key = tuple(args)
    if key not in LOCAL_RUNS:
        args = list(args)
        i = args.index("-o")
        out = os.path.join(WORK, "local", str(len(LOCAL_RUNS)), args[i + 1])
        args[i + 1] = out
        p = run(*args, "--json", code=0, timeout=RUN_TIMEOUT)
        LOCAL_RUNS[key] = out
        assert transfer(p) == {"copied_in_store": 0, "uploaded": 0, "downloaded": 0}, p.stdout[-500:]
    return LOCAL_RUNS[key]


def fetched(store, *args):
    """tfckpt ARGS from `store` (the input a URL) to a fresh local output, once per store and ARGS:
    the reference where the output names its input (a safetensors header's "source"). The
    output path. Nothing was copied inside the store nor uploaded."""
    runs = store.setdefault("fetched", {})
    if args not in runs:
        i = args.index("-o")
        out = os.path.join(WORK, "fetched", store["name"], str(len(runs)), args[i + 1])
        runs[args] = out
        p = run_in(store, *args[:i + 1], out, *args[i + 2:], "--json", code=0)
        t = transfer(p)
        assert t["copied_in_store"] == 0 and t["uploaded"] == 0 and t["downloaded"] > 0, t
    return runs[args]


# ---------------------------------------------------------------------------------------------
# What is checked of every run.

def transfer(p):
    """The "transfer" counters of a --json report."""
    doc = json.loads(p.stdout)
    assert "transfer" in doc, f"no \"transfer\" in the --json report (issue 29's counters): {p.stdout[:300]}"
    t = doc["transfer"]
    assert set(t) >= {"copied_in_store", "uploaded", "downloaded"}, t
    return {k: t[k] for k in ("copied_in_store", "uploaded", "downloaded")}


def notes_of(p):
    return json.dumps(json.loads(p.stdout).get("notes", []))


def same_files(store, remote_dir, local_dir):
    """Every object under REMOTE_DIR/ is the file of its name in LOCAL_DIR, and the other way round."""
    objects = listing(store, remote_dir + "/")
    names = sorted(os.listdir(local_dir))
    assert sorted(k.rsplit("/", 1)[1] for k in objects) == names, (objects, names)
    for f in names:
        with open(os.path.join(local_dir, f), "rb") as h:
            assert get(store, f"{remote_dir}/{f}") == h.read(), f
    assert uploads(store, remote_dir + "/") == [], uploads(store, remote_dir + "/")


def nothing_left(store, prefix):
    """No object and no multipart upload under `prefix`."""
    assert listing(store, prefix) == {}, listing(store, prefix)
    assert uploads(store, prefix) == [], uploads(store, prefix)


def check_counters(store, p, seen, ckpt, written, allowance=0, verified=True, cuts=False):
    """The counters of a server-side run of `ckpt` input bytes that wrote `written` bytes of
    index (and other small files) and needs `allowance` more bytes uploaded (headers that go
    before copied bytes, with what S3's 5 MiB part minimum pulls in): copies were made; uploaded
    <= 1 % of the checkpoint + written + allowance; downloaded <= 1.05x the checkpoint (+ the
    allowance, fetched to be sent) verified, and without verification no more than 1 % beyond what the planning reads (`written`
    stands for the input's index there) -- unless the run `cuts` stored pieces: the new
    pieces' CRC-32C (in the output's index) is then computed from their bytes, as the store
    gives no checksum of a copied part here (of a piece cut in k, k - 1 must be read; the
    last one's CRC follows from the stored one), so <= 1.05x. The proxy's counts `seen` agree
    with the report (to 1 % of the checkpoint: a few error bodies may count on one side)."""
    t = transfer(p)
    assert t["copied_in_store"] > 0, (store["name"], t)
    assert t["uploaded"] <= 0.01 * ckpt + written + allowance, (store["name"], t, ckpt, written, allowance)
    if verified or cuts:
        # (The bytes a part pulls in beside a header are fetched to be sent, and the
        # verification reads them back with the rest: `allowance` twice over, which a
        # checkpoint of a few MiB feels and one of GiBs does not.)
        assert t["downloaded"] <= 1.05 * ckpt + allowance, (store["name"], t, ckpt, f"{t['downloaded'] / ckpt:.2f}x")
    else:
        assert t["downloaded"] <= 0.01 * ckpt + written, (store["name"], t, ckpt, written)
    for mine, proxy in (("copied_in_store", "copied"), ("uploaded", "uploaded"), ("downloaded", "downloaded")):
        assert abs(t[mine] - seen[proxy]) <= 0.01 * ckpt, (store["name"], mine, t, seen)
    assert seen["copies"] > 0, seen
    return t


def check_client_side(store, p, seen):
    """Nothing was copied inside the store, by the report and by the proxy."""
    t = transfer(p)
    assert t["copied_in_store"] == 0, (store["name"], t)
    assert seen["copies"] == 0 and seen["copied"] == 0, (store["name"], seen)
    return t


def each_store(fn):
    """Registers fn(store) once per store, as FN_on_swift and FN_on_moto."""
    for name, store in STORES.items():
        def one(store=store):
            fn(store)
        one.__name__ = f"{fn.__name__}_on_{name}"
        test(needs_data=True)(one)
    return fn


# The reshards of the table: axis-0 cuts into 5.25 MiB pieces spread over 3 objects (each
# stored piece cut in 2); the partitions joined into one tensor; the pieces moved between
# data objects by a policy.
RESHARDS = (["--partition", "fixed:8", "--policy", "shards:3"],
            ["--partition", "none", "--policy", "single"],
            ["--policy", "shards:3"])
CUT = RESHARDS[0]


@each_store
def reshards_copy_inside_the_store_byte_identical_to_local_runs(store):
    src, ckpt = uploaded(store, "table", table())
    index_in = listing(store, src + ".index")[key_of(src) + ".index"]
    missed = []  # (every case is run: the counters each one missed, together at the end)
    for i, args in enumerate(RESHARDS):
        local = local_run("reshard", table(), "-o", "m", *args)
        for verify in ([], ["--no-verify"]):
            out = f"{ROOT}/reshard{i}{'n' if verify else ''}/m"
            proxy_counts(store)
            p = run_in(store, "reshard", src, "-o", out, *args, *verify, "--json", code=0)
            seen = proxy_counts(store)
            same_bytes(store, out, local)
            assert json.loads(p.stdout)["verified"] is (not verify), p.stdout[-300:]
            index_out = listing(store, out + ".index")[key_of(out) + ".index"]
            try:
                check_counters(store, p, seen, ckpt, index_out if not verify else index_in + index_out,
                               verified=not verify, cuts=args is CUT)
            except AssertionError as e:
                missed.append((" ".join(args + verify), str(e)))
    # Without --json: one line says what moved; none for a local run.
    p = run_in(store, "reshard", src, "-o", f"{ROOT}/reshard-text/m", *CUT, code=0)
    assert re.search(r"transfer: .+ copied inside the store, .+ uploaded, .+ downloaded", p.stdout + p.stderr), \
        (p.stdout, p.stderr)
    p = run("reshard", table(), "-o", os.path.join(WORK, "text", store["name"], "m"), *CUT, code=0, timeout=RUN_TIMEOUT)
    assert "copied inside the store" not in p.stdout + p.stderr, (p.stdout, p.stderr)
    assert not missed, "\n".join(f"{case}: {why}" for case, why in missed)


def written_by_tfckpt(store, name, local_prefix):
    """The checkpoint at local_prefix written into the store by `tfckpt reshard` (no rules: the
    same pieces in the same data files), once per store: its data objects are multipart
    uploads, as most objects in buckets are (the ETag of such an object is not an MD5 of its
    bytes). (its prefix, the bytes of its objects, the same checkpoint on local files)"""
    done = store.setdefault("written", {})
    if name not in done:
        put(store, "mb", ROOT)
        remote = f"{ROOT}/{name}/m"
        clear_log(store)
        run_in(store, "reshard", local_prefix, "-o", remote, code=0)
        begun, _ = uploads_begun_and_unfinished(log_of(store))
        assert len(begun) == 2, requests(store)  # both data objects (21 MiB) are multipart uploads
        done[name] = (remote, sum(listing(store, remote + ".").values()), local_run("reshard", local_prefix, "-o", "m"))
    return done[name]


@each_store
def a_source_uploaded_in_parts_is_copied_too(store):
    src, ckpt, local_src = written_by_tfckpt(store, "multipart", table())
    out = f"{ROOT}/from-multipart/m"
    proxy_counts(store)
    p = run_in(store, "reshard", src, "-o", out, *CUT, "--json", code=0)
    seen = proxy_counts(store)
    same_bytes(store, out, local_run("reshard", local_src, "-o", "m", *CUT))
    check_counters(store, p, seen, ckpt, listing(store, out + ".index")[key_of(out) + ".index"])


@each_store
def server_side_never_copies_through_this_machine(store):
    src, ckpt = uploaded(store, "table", table())
    out = f"{ROOT}/never/m"
    proxy_counts(store)
    p = run_in(store, "reshard", src, "-o", out, *CUT, "--server-side", "never", "--json", code=0)
    seen = proxy_counts(store)
    same_bytes(store, out, local_run("reshard", table(), "-o", "m", *CUT))
    t = check_client_side(store, p, seen)
    data = sum(size for key, size in listing(store, out + ".data-").items())
    assert t["uploaded"] >= data and seen["uploaded"] >= data, (t, seen, data)


@each_store
def a_real_checkpoint_of_small_pieces_is_copied_by_the_client_and_identical(store):
    src, _ = uploaded(store, "t2t", data(T2T))
    out = f"{ROOT}/t2t-out/m"
    p = run_in(store, "reshard", src, "-o", out, "--policy", "shards:3", "--json", code=0)
    transfer(p)
    same_bytes(store, out, local_run("reshard", data(T2T), "-o", "m", "--policy", "shards:3"))
    out = f"{ROOT}/t2t-conv/m.safetensors"
    run_in(store, "convert", src, "-o", out, code=0)
    with open(fetched(store, "convert", src, "-o", "m.safetensors"), "rb") as f:
        assert get(store, out) == f.read()


@each_store
def scale_out_tasks_copy_inside_the_store(store):
    # reshard --plan / --execute / --finalize with everything in the store: each task copies
    # what moves unchanged inside it (the plan records --server-side), and the result is the
    # local reshard's, byte for byte. Moved pieces (--policy shards:3) are not read by the
    # tasks at all; cut ones (fixed:8) are read once for their new CRC, never uploaded.
    src, ckpt = uploaded(store, "table", table())
    for i, args in enumerate((["--policy", "shards:3"], CUT)):
        local = local_run("reshard", table(), "-o", "m", *args)
        for mode in ("auto", "never"):
            plan = f"{ROOT}/scale{i}{mode}/plan.json"
            out = f"{ROOT}/scale{i}{mode}/m"
            run_in(store, "reshard", src, "-o", out, *args, "--plan", plan, "--server-side", mode, code=0)
            total = {"copied_in_store": 0, "uploaded": 0, "downloaded": 0}
            proxy_counts(store)
            for task in range(3):
                p = run_in(store, "reshard", "--execute", plan, "--task", str(task), "--json", code=0)
                for k, v in transfer(p).items():
                    total[k] += v
            seen = proxy_counts(store)
            # (What else the tasks move: the plan, the source's index and the parts' indexes,
            # each read or written once per task: far below 1 % of the table.)
            if mode == "never":
                assert total["copied_in_store"] == 0 and seen["copies"] == 0, (store["name"], args, total, seen)
                assert total["uploaded"] >= ckpt, (store["name"], args, total)
            else:
                assert total["copied_in_store"] > 0 and seen["copies"] > 0, (store["name"], args, total, seen)
                assert total["uploaded"] <= 0.01 * ckpt, (store["name"], args, total, ckpt)
                bound = 1.05 * ckpt if args is CUT else 0.01 * ckpt
                assert total["downloaded"] <= bound, (store["name"], args, total, ckpt)
                for mine, proxy in (("copied_in_store", "copied"), ("uploaded", "uploaded"),
                                    ("downloaded", "downloaded")):
                    assert abs(total[mine] - seen[proxy]) <= 0.01 * ckpt, (store["name"], mine, total, seen)
            p = run_in(store, "reshard", "--finalize", plan, "--json", code=0)
            assert json.loads(p.stdout)["verified"] is True, p.stdout
            same_bytes(store, out, local)


@each_store
def merge_recover_of_a_save_left_in_the_store(store):
    prefix, ckpt = remote_save(store)
    local = local_run("merge", "--recover", save()[1], "-o", "ckpt-1")
    # In place (the output is PREFIX), as TensorFlow would have merged it.
    proxy_counts(store)
    p = run_in(store, "merge", "--recover", prefix, "--json", code=0)
    seen = proxy_counts(store)
    same_bytes(store, prefix, local)
    index_out = listing(store, prefix + ".index")[key_of(prefix) + ".index"]
    check_counters(store, p, seen, ckpt, index_out)
    # Client-side: the same bytes, nothing copied by the store.
    out = f"{ROOT}/recover-never/ckpt-1"
    proxy_counts(store)
    p = run_in(store, "merge", "--recover", prefix, "-o", out, "--server-side", "never", "--json", code=0)
    check_client_side(store, p, proxy_counts(store))
    same_bytes(store, out, local)


@each_store
def merge_recover_move_copies_inside_the_store_then_deletes_the_parts(store):
    # --move on a store (no rename): the parts' data objects are copied inside the store, the
    # output verified and committed, and the parts deleted only then. A copy of the save of
    # its own: the parts go.
    d, _ = save()
    where = f"{ROOT}/move/"
    local = local_run("merge", "--recover", save()[1], "-o", "ckpt-1")
    # Interrupted after a copied part: the parts whole, nothing of the output.
    put(store, "tree", d, where)
    parts = listing(store, where + "ckpt-1_temp/")
    clear_log(store)
    proc = paused_at(TFCKPT, ["merge", "--recover", where + "ckpt-1", "--move"], "part-copied#1", env=store["env"])
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
    assert listing(store, where + "ckpt-1_temp/") == parts
    nothing_left(store, where + "ckpt-1.")
    uploads_aborted(store, where + "ckpt-1")
    # Finished: the output as a local merge --recover writes it, copied inside the store, and
    # nothing of the parts left.
    proxy_counts(store)
    p = run_in(store, "merge", "--recover", where + "ckpt-1", "--move", "--json", code=0)
    seen = proxy_counts(store)
    assert json.loads(p.stdout)["verified"] is True, p.stdout
    same_bytes(store, where + "ckpt-1", local)
    assert listing(store, where + "ckpt-1_temp/") == {}, listing(store, where)
    index_out = listing(store, where + "ckpt-1.index")[key_of(where + "ckpt-1") + ".index"]
    check_counters(store, p, seen, sum(parts.values()), index_out)


def safetensors_allowance(paths):
    """What a safetensors file must upload at least beside its copied tensors: its header (the
    8-byte length and the JSON), and, since a part but the last holds 5 MiB or more, as many
    bytes of the first tensor as make up that first part."""
    total = 0
    for path in paths:
        if path.endswith(".safetensors"):
            with open(path, "rb") as f:
                total += 8 + int.from_bytes(f.read(8), "little") + PART_MIN
        else:  # the index of a sharded set
            total += os.path.getsize(path)
    return total


@each_store
def convert_to_safetensors_inside_the_store(store):
    src, ckpt = uploaded(store, "recovered", recovered())
    # The reference is the same command with a local output: the header names the input (its
    # "source"), a URL here. One file:
    local = fetched(store, "convert", src, "-o", "m.safetensors")
    out = f"{ROOT}/conv1/m.safetensors"
    proxy_counts(store)
    p = run_in(store, "convert", src, "-o", out, "--json", code=0)
    seen = proxy_counts(store)
    with open(local, "rb") as f:
        assert get(store, out) == f.read()
    assert uploads(store, out) == []
    missed = []  # (every case is run: the counters each one missed, together at the end)
    try:
        check_counters(store, p, seen, ckpt, 0, safetensors_allowance([local]))
    except AssertionError as e:
        missed.append(("one file", str(e)))
    # A sharded set (a file per table, and the index of the set).
    local = fetched(store, "convert", src, "-o", "m.safetensors", "--max-file-size", "16M")
    local_dir = os.path.dirname(local)
    assert len(os.listdir(local_dir)) == 3, os.listdir(local_dir)
    proxy_counts(store)
    p = run_in(store, "convert", src, "-o", f"{ROOT}/conv2/m.safetensors", "--max-file-size", "16M", "--json", code=0)
    seen = proxy_counts(store)
    same_files(store, f"{ROOT}/conv2", local_dir)
    try:
        check_counters(store, p, seen, ckpt, 0,
                       safetensors_allowance([os.path.join(local_dir, f) for f in os.listdir(local_dir)]))
    except AssertionError as e:
        missed.append(("a set", str(e)))
    # Client-side: the same set.
    proxy_counts(store)
    p = run_in(store, "convert", src, "-o", f"{ROOT}/conv3/m.safetensors", "--max-file-size", "16M",
               "--server-side", "never", "--json", code=0)
    check_client_side(store, p, proxy_counts(store))
    same_files(store, f"{ROOT}/conv3", local_dir)
    assert not missed, "\n".join(f"{case}: {why}" for case, why in missed)


REFUSALS = (("501", "NotImplemented"), ("403", "AccessDenied"))


@each_store
def a_store_that_refuses_copies_gets_the_bytes_through_this_machine(store):
    src, _ = uploaded(store, "table", table())
    local = local_run("reshard", table(), "-o", "m", *CUT)
    for status, code in REFUSALS:
        out = f"{ROOT}/refused{status}/m"
        faults(store, f"always COPY * status {status} {code}")
        try:
            clear_log(store)
            proxy_counts(store)
            p = run_in(store, "reshard", src, "-o", out, *CUT, "--json", code=0)
            seen = proxy_counts(store)
        finally:
            faults(store)
        assert copies_with(store, f"status {status}"), ("no copy was asked for (the proxy refuses them)", requests(store))
        same_bytes(store, out, local)
        check_client_side(store, p, seen)
        notes = notes_of(p)
        assert "server-side copy" in notes and status in notes, notes
    # The note in the human output too; and merge --recover falls back the same way.
    prefix, _ = remote_save(store)
    faults(store, "always COPY * status 501 NotImplemented")
    try:
        p = run_in(store, "reshard", src, "-o", f"{ROOT}/refused-text/m", *CUT, code=0)
        assert "server-side copy" in p.stdout + p.stderr and "501" in p.stdout + p.stderr, (p.stdout, p.stderr)
        out = f"{ROOT}/refused-recover/ckpt-1"
        proxy_counts(store)
        p = run_in(store, "merge", "--recover", prefix, "-o", out, "--json", code=0)
        check_client_side(store, p, proxy_counts(store))
        assert "server-side copy" in notes_of(p), notes_of(p)
        same_bytes(store, out, local_run("merge", "--recover", save()[1], "-o", "ckpt-1"))
        # --server-side always: the refusal is an error, and nothing is left.
        out = f"{ROOT}/refused-always/m"
        p = run_in(store, "reshard", src, "-o", out, *CUT, "--server-side", "always", code=3)
    finally:
        faults(store)
    one_error_line(p, out, "501")
    nothing_left(store, out + ".")


@each_store
def a_copy_part_retried_then_refused_for_good(store):
    src, _ = uploaded(store, "table", table())
    local = local_run("reshard", table(), "-o", "m", *CUT)
    # A 503 on the first copy: retried, the same bytes.
    out = f"{ROOT}/copy503/m"
    faults(store, "when COPY uploadId= status 503 SlowDown")
    try:
        clear_log(store)
        run_in(store, "reshard", src, "-o", out, *CUT, code=0)
    finally:
        faults(store)
    assert copies_with(store, "status 503"), ("no copy was asked for", requests(store))
    same_bytes(store, out, local)
    # A 500 on the second copy part of an upload, every time: the retries run out. Exit 3, one
    # line naming the object; nothing under the output's names, no upload left.
    out = f"{ROOT}/copy500/m"
    # (partNumber=2 whatever the order of the query's parameters: the objects here have fewer
    # than 10 parts)
    faults(store, "always COPY partNumber=2 status 500 InternalError")
    try:
        clear_log(store)
        p = run_in(store, "reshard", src, "-o", out, *CUT, code=3, env={"TFCKPT_S3_MAX_RETRIES": "2"})
    finally:
        faults(store)
    assert len(copies_with(store, "status 500")) >= 3, requests(store)  # the first attempt and 2 retries
    one_error_line(p, f"{out}.data-", "500")
    nothing_left(store, out + ".")


def uploads_aborted(store, out):
    """Every upload the run began (the proxy's log since it was cleared) was aborted or
    completed (its object deleted: the caller checks the listing), and none is left."""
    log = log_of(store)
    begun, unfinished = uploads_begun_and_unfinished(log)
    assert begun, log
    assert not unfinished, (unfinished, log)
    assert uploads(store, out) == [], uploads(store, out)


@each_store
def an_interrupt_after_a_copied_part_leaves_nothing(store):
    src, _ = uploaded(store, "table", table())
    out = f"{ROOT}/interrupted/m"
    clear_log(store)
    proc = paused_at(TFCKPT, ["reshard", src, "-o", out, *CUT], "part-copied#2", env=store["env"])
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
    nothing_left(store, out + ".")
    uploads_aborted(store, out)


@each_store
def a_corrupt_input_piece_is_caught_though_the_copy_does_not_read_it(store):
    # One byte of a data object flipped in the store, inside a 10.5 MiB piece the store copies.
    src, _ = uploaded(store, "corrupt", table())
    victim = src + ".data-00000-of-00002"
    if not store.get("flipped"):
        path = os.path.join(WORK, "victim")
        put(store, "get", victim, path)
        flip(path, os.path.getsize(path) // 3)
        put(store, "put", path, victim)
        store["flipped"] = True
    # Client-side, the piece's checksum does not match (the premise: exit 1, "tensor checksum
    # mismatch ... nothing was written", as before issue 29); server-side, where no byte of it
    # passes through this machine, the verification must catch it the same way: the same exit
    # status, one line, nothing left.
    codes = {}
    for mode in ("never", "auto"):
        out = f"{ROOT}/corrupt-{mode}/m"
        p = run_in(store, "reshard", src, "-o", out, *CUT, "--server-side", mode)
        codes[mode] = p.returncode
        assert p.returncode in (1, 3), (mode, p.returncode, p.stderr)
        one_error_line(p, *(["checksum mismatch"] if mode == "never" else []))
        nothing_left(store, out + ".")
    assert codes["auto"] == codes["never"], codes


@test(needs_data=True)
def always_is_refused_where_the_store_cannot_copy():
    store = STORES["swift"]
    src, _ = uploaded(store, "t2t", data(T2T))
    gs = {**GS_KEYS, "TFCKPT_GS_ENDPOINT_URL": store["proxy"]}
    groot = f"gs://{BUCKET}"
    gsrc = "gs://" + src[len("s3://"):]
    local_out = os.path.join(WORK, "always-local")
    always = ["--server-side", "always"]
    # Where the store can copy, `always` does (the cases below are refused for their reason,
    # not for the option), and an unknown mode is a usage error.
    table_src, _ = uploaded(store, "table", table())
    out = f"{ROOT}/always-ok/m"
    p = run_in(store, "reshard", table_src, "-o", out, *CUT, *always, "--json", code=0)
    assert transfer(p)["copied_in_store"] > 0, p.stdout[-300:]
    same_bytes(store, out, local_run("reshard", table(), "-o", "m", *CUT))
    one_error_line(run_in(store, "reshard", table_src, "-o", f"{ROOT}/always/bad", "--server-side", "sometimes",
                          code=2), "sometimes")
    cases = [  # (args, env, what the line names)
        (["reshard", src, "-o", os.path.join(local_out, "r")], {}, None),  # a local output
        (["merge", src, "-o", os.path.join(local_out, "m")], {}, None),
        (["convert", src, "-o", os.path.join(local_out, "c.safetensors")], {}, None),
        (["reshard", data(T2T), "-o", f"{ROOT}/always/r"], {}, None),  # a local input
        (["reshard", src, "-o", f"{groot}/always/g"], gs, None),  # two stores
        (["reshard", gsrc, "-o", f"{groot}/always/gg"], gs, "gs://"),  # no ranged part copy
        (["merge", gsrc, "-o", f"{groot}/always/gm"], gs, "gs://"),
        (["convert", gsrc, "-o", f"{groot}/always/gc.safetensors"], gs, "gs://"),
    ]
    for args, env, needle in cases:
        p = run_in(store, *args, *always, code=2, env=env)
        one_error_line(p, *([needle] if needle else []))
    assert not os.path.exists(local_out), os.listdir(local_out)
    nothing_left(store, f"{ROOT}/always/")
    # gs:// under auto: through this machine, the same bytes.
    out = f"{groot}/gs-auto/m"
    proxy_counts(store)
    p = run_in(store, "reshard", gsrc, "-o", out, "--policy", "shards:3", "--json", code=0, env=gs)
    check_client_side(store, p, proxy_counts(store))
    same_bytes(store, f"{ROOT}/gs-auto/m", local_run("reshard", data(T2T), "-o", "m", "--policy", "shards:3"))


if __name__ == "__main__":
    sys.exit(main("cli_s3_serverside"))
