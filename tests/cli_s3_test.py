#!/usr/bin/env python3
"""Commands on s3:// checkpoints (issue 16), against the real S3 server that tests/s3_server.sh
starts (Swift + s3api, and the fault proxy in front of it).
Usage: s3_server.sh python3 cli_s3_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE S3_PUT

tfckpt gets the endpoint and credentials as a user would, from AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION; the inputs are real TensorFlow
checkpoints uploaded with s3_put (the library's client)."""

import json
import os
import subprocess
import sys
import tempfile
import time

from cli_common import *
from s3_common import *
from cloud_common import closed_endpoint  # a loopback port nobody listens on

BUCKET = f"tfckpt-cli-{os.getpid()}"
ROOT = f"s3://{BUCKET}"

T2T_DATA1 = "model.ckpt-1.data-00001-of-00002"


def uploaded():
    """Uploads the test checkpoints once (directories as they are under TFCKPT_TESTDATA)."""
    if not getattr(uploaded, "done", False):
        s3_put("mb", ROOT)
        for case in ("t2t_transformer_2shards", "estimator_dnn_adam_2shards", "empty_prefix_keras",
                     "index_only_lingvo_snappy", "tf2_float64_variant_pinn"):
            s3_put("tree", data(case), f"{ROOT}/{case}/")
        # A SavedModel directory: variables/variables and no state file.
        s3_put("tree", data("estimator_dnn_adam_2shards/variables"), f"{ROOT}/savedmodel/variables/")
        uploaded.done = True


def same_json(args_remote, args_local, remote, local):
    """The --json outputs of a command on the remote and on the local copy, equal once the
    remote prefix is written as the local one."""
    a = run(*args_remote, "--json", code=0).stdout.replace(remote, local)
    b = run(*args_local, "--json", code=0).stdout
    assert json.loads(a) == json.loads(b), (a[:2000], b[:2000])


@test(needs_data=True)
def inspect_and_validate_remote_checkpoints_like_local_ones():
    uploaded()
    for case in (T2T, "estimator_dnn_adam_2shards/model.ckpt-1000"):
        remote, local = f"{ROOT}/{case}", data(case)
        for cmd in ("inspect", "validate"):
            same_json([cmd, remote], [cmd, local], remote, local)
            text = run(cmd, remote, code=0).stdout
            assert text.replace(remote, local) == run(cmd, local, code=0).stdout, text[:2000]
    # Damage is found as it is locally: the index-only checkpoint lacks its data file.
    p = run("validate", f"{ROOT}/index_only_lingvo_snappy/lenet_test_model", code=1)
    assert f"{ROOT}/index_only_lingvo_snappy/lenet_test_model.data-00000-of-00001" in p.stdout + p.stderr, p


@test(needs_data=True)
def every_resolution_form_of_a_remote_checkpoint():
    uploaded()
    forms = {
        f"{ROOT}/{T2T}": f"{ROOT}/{T2T}",
        f"{ROOT}/{T2T}.index": f"{ROOT}/{T2T}",
        # A "directory" with a state file whose path is relative to it.
        f"{ROOT}/estimator_dnn_adam_2shards/": f"{ROOT}/estimator_dnn_adam_2shards/model.ckpt-1000",
        f"{ROOT}/estimator_dnn_adam_2shards": f"{ROOT}/estimator_dnn_adam_2shards/model.ckpt-1000",
        # model_checkpoint_path "." : the prefix is the directory itself.
        f"{ROOT}/empty_prefix_keras": f"{ROOT}/empty_prefix_keras/",
        # A SavedModel: variables/variables.
        f"{ROOT}/savedmodel": f"{ROOT}/savedmodel/variables/variables",
    }
    for spec, prefix in forms.items():
        j = json.loads(run("inspect", spec, "--json", code=0).stdout)
        assert j["path"] == prefix, (spec, j["path"])
        assert j["tensors"], spec


@test(needs_data=True)
def validate_against_compares_remote_and_local():
    uploaded()
    run("validate", f"{ROOT}/{T2T}", "--against", data(T2T), code=0)
    run("validate", data(T2T), "--against", f"{ROOT}/{T2T}", code=0)
    p = run("validate", f"{ROOT}/estimator_dnn_adam_2shards/model.ckpt-1000", "--against",
            data("estimator_dnn_adam_2shards/model.ckpt-0"), code=1)
    assert p.stdout, p


@test(needs_data=True)
def inspect_makes_one_get_for_the_index_and_at_most_one_head_per_data_object():
    uploaded()
    clear_proxy_log()
    run("inspect", f"{ROOT}/{T2T}", code=0, env=PROXY)
    log = proxy_log()
    key = f"/{BUCKET}/{T2T}"
    index_gets = [l for l in log if l.startswith(f"GET {key}.index ")]
    assert len(index_gets) == 1, log
    for shard in range(2):
        data_file = f"{key}.data-0000{shard}-of-00002"
        assert len([l for l in log if l.startswith(f"HEAD {data_file} ")]) <= 1, log
        assert not [l for l in log if l.startswith(f"GET {data_file} ")], log


@test(needs_data=True)
def a_directory_is_resolved_from_one_listing():
    # Issue 41: each probe of a resolution is a request on an object store. A directory is
    # listed once and decided from that listing (its state file, its *.index, variables/):
    # one access check, the CKPT.index probe, the listing, the state file's HEAD and GET (a
    # SavedModel: the variables/variables.index probe), then the open's index HEAD and GET
    # and one HEAD per data object -- 14 requests for the state-file case before, 9 now
    # (each counted once: a retry under load is the same request again).
    uploaded()
    for spec, data_objects, most in ((f"{ROOT}/estimator_dnn_adam_2shards", 2, 9),
                                     (f"{ROOT}/estimator_dnn_adam_2shards/", 2, 9),
                                     (f"{ROOT}/savedmodel", 2, 7)):
        clear_proxy_log()
        run("inspect", spec, code=0, env=PROXY)
        log = proxy_log()
        asked = distinct_requests(log)
        assert len([r for r in asked if r.startswith(f"GET /{BUCKET}?")]) == 1, (spec, log)
        assert len(asked) <= most, (spec, len(asked), log)
        assert len([r for r in asked if r.startswith("HEAD ") and ".data-" in r]) == data_objects, log


@test(needs_data=True)
def a_state_file_that_leads_back_to_itself_is_refused():
    # Hostile input: in a bucket "m" can be an object and the "directory" of the keys under
    # "m/" at once, and m/checkpoint may name m: resolving it used to recurse without end
    # (a crash). Now one line, exit 3, after a bounded number of requests.
    uploaded()
    with tempfile.TemporaryDirectory() as d:
        for name, text in (("m", "not a table"), ("checkpoint", f'model_checkpoint_path: "{ROOT}/cycle/m"\n')):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        s3_put("put", os.path.join(d, "m"), f"{ROOT}/cycle/m")
        s3_put("put", os.path.join(d, "checkpoint"), f"{ROOT}/cycle/m/checkpoint")
    clear_proxy_log()
    p = run("inspect", f"{ROOT}/cycle/m", code=3, env=PROXY)
    one_error_line(p, f"{ROOT}/cycle/m", "no checkpoint found", "a cycle?")
    assert len(proxy_log()) < 200, len(proxy_log())


def distinct_requests(log):
    """The requests of a proxy log as METHOD TARGET, each once (a retry under load is the
    same request again)."""
    return sorted({" ".join(l.split()[:2]) for l in log})


@test(needs_data=True)
def inspect_asks_the_data_objects_sizes_side_by_side():
    # Each data object's size is a HEAD: asked one after the other, a checkpoint of 1000
    # objects cost 1000 round trips. The proxy holds every data object's HEAD: a second one
    # arrives while the first is held only if they are asked side by side (a held HEAD is
    # not given up on, and asked again, before the test lets it go: TFCKPT_S3_STALL_SECONDS).
    uploaded()
    with tempfile.TemporaryDirectory() as d:
        run("reshard", data(T2T), "-o", os.path.join(d, "m"), "--policy", "shards:4", code=0)
        s3_put("tree", d, f"{ROOT}/four/")
    faults(f"always HEAD /{BUCKET}/four/m.data- hold")
    p = subprocess.Popen([TFCKPT, "inspect", f"{ROOT}/four/m", "--connections", "4"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **PROXY, "TFCKPT_S3_STALL_SECONDS": "600"})
    try:
        wait_for_fault("hold", count=2)
    finally:
        faults()  # (lets the held requests go: they fail, and are asked again)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0 and "4 data files" in out.splitlines()[0], (p.returncode, out, err)


@test(needs_data=True)
def validate_asks_each_object_its_size_once():
    uploaded()
    clear_proxy_log()
    run("validate", f"{ROOT}/{T2T}", code=0, env=PROXY)
    log = proxy_log()
    key = f"/{BUCKET}/{T2T}"
    heads = [l.split()[1] for l in log if l.startswith("HEAD ")]
    assert heads and len(heads) == len(set(heads)), heads  # (sizes and ETags are kept for the run)
    for shard in range(2):
        assert f"{key}.data-0000{shard}-of-00002" in heads, heads


@test(needs_data=True)
def validate_reads_through_503_bursts_and_a_reset_mid_body():
    uploaded()
    clear_proxy_log()
    data_key = f"/{BUCKET}/{T2T}".rsplit("/", 1)[0] + "/" + T2T_DATA1
    faults("status 503 SlowDown", "status 503", f"when GET {data_key} reset-mid-body",
           f"when GET {data_key} status 503 SlowDown")
    run("validate", f"{ROOT}/{T2T}", code=0, env=PROXY)
    log = proxy_log()
    assert len([l for l in log if "fault=status 503" in l]) == 3, log
    reset = [i for i, l in enumerate(log) if "fault=reset-mid-body" in l]
    assert len(reset) == 1, log
    # The retry after the reset asks only for what was missing, pinned to the ETag.
    resumed = [l for l in log[reset[0] + 1:] if l.startswith(f"GET {data_key} ") and "fault=status" not in l]
    assert resumed and "if-match=\"" in resumed[0] and "range=bytes=0-" not in resumed[0], log


@test(needs_data=True)
def short_long_and_inconsistent_bodies_are_retried_then_an_io_error_never_a_verdict():
    """Issue 38, item 3: a ranged answer whose body is shorter than asked (Content-Length
    disagreeing with Content-Range, or both saying fewer bytes), or longer, is the network's
    fault: retried with the one notice, resumed only with ranges still missing; when every
    attempt is faulty, exit 3 naming the object, error id "io" -- never a finding on the
    checkpoint (before: entry.bounds, "the object ends at byte ...", validate's exit 1)."""
    uploaded()
    remote = f"{ROOT}/{T2T}"
    data_key = f"/{BUCKET}/{T2T}".rsplit("/", 1)[0] + "/" + T2T_DATA1
    data_url = f"{ROOT}/{T2T}".rsplit("/", 1)[0] + "/" + T2T_DATA1
    for fault in ("short-body", "short-range", "long-body"):
        clear_proxy_log()
        faults(f"when GET {data_key} {fault}", f"when GET {data_key} {fault}")
        p = run("validate", remote, code=0, env=PROXY)
        gets = [l for l in proxy_log() if l.startswith(f"GET {data_key} ")]
        assert len([l for l in gets if f"fault={fault}" in l]) == 2, (fault, gets)
        for l in gets:
            first, last = l.split(" range=bytes=")[1].split(" ")[0].split("-")
            assert int(first) <= int(last), (fault, l)
        notices = [l for l in p.stderr.splitlines() if "retrying" in l]
        assert 1 <= len(notices) <= 2 and all(data_url in l for l in notices), (fault, p.stderr)
        # For good: one line naming the object, exit 3, error id "io".
        faults(f"always GET {data_key} {fault}")
        env = {**PROXY, "TFCKPT_S3_MAX_RETRIES": "2"}
        p = run("validate", remote, code=3, env=env)
        line = one_error_line(p, data_url, "(3 attempts)")
        assert "entry.bounds" not in p.stdout + p.stderr and "FAILED" not in p.stdout, (fault, p.stdout, line)
        p = run("validate", remote, "--json", code=3, env=env)
        error = json.loads(p.stdout)["error"]
        assert error["id"] == "io" and data_url in error["message"], (fault, error)
        p = run("inspect", remote, "--stats", code=3, env=env)
        one_error_line(p, data_url)
        faults()


@test(needs_data=True)
def a_data_object_replaced_during_validate_is_an_error_naming_it():
    uploaded()
    prefix = f"{ROOT}/replaced/model.ckpt-1"
    s3_put("tree", data("t2t_transformer_2shards"), f"{ROOT}/replaced/")
    data_url = f"{ROOT}/replaced/{T2T_DATA1}"
    data_key = f"/{BUCKET}/replaced/{T2T_DATA1}"
    clear_proxy_log()
    # The proxy holds the data object's first GET; meanwhile it is replaced, then the held
    # request fails and is retried (pinned to the ETag it was opened with).
    faults(f"when GET {data_key} hold")
    p = subprocess.Popen([TFCKPT, "validate", prefix], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **PROXY, "TFCKPT_S3_MAX_RETRIES": "2"})
    try:
        wait_for_fault("hold")
        s3_put("put", data("t2t_transformer_2shards/model.ckpt-1.data-00000-of-00002"), data_url)
    finally:
        release_held()
    out, err = p.communicate(timeout=300)
    assert p.returncode == 3, (p.returncode, out, err)
    line = one_error_line(subprocess.CompletedProcess([], 3, out, err), data_url, "replaced")
    assert "412" in line, line


@test(needs_data=True)
def validate_fetches_each_byte_of_a_data_object_once():
    """Small reads come from read-ahead windows; validate reads small tensors in file order,
    so no window is fetched twice (here windows of at most 64 KiB, cut at the stored pieces'
    ends: about 26 for the 1.6 MB data object, more than the 8 the cache keeps)."""
    uploaded()
    clear_proxy_log()
    run("validate", f"{ROOT}/{T2T}", "-j", "2", code=0, env={**PROXY, "TFCKPT_S3_READ_AHEAD_KIB": "64"})
    ranges = []
    for line in proxy_log():
        if line.startswith(f"GET /{BUCKET}/t2t_transformer_2shards/{T2T_DATA1} "):
            first, last = line.split("range=bytes=")[1].split()[0].split("-")
            ranges.append((int(first), int(last)))
    size = os.path.getsize(data("t2t_transformer_2shards/" + T2T_DATA1))
    assert fetched_once(ranges, size) and len(ranges) > 8 and all(b - a < 65536 for a, b in ranges), ranges


def fetched_once(ranges, size):
    """The byte ranges (first, last) of GETs cover [0, size) once: no byte twice, none left out."""
    at = 0
    for first, last in sorted(ranges):
        if first != at:
            return False
        at = last + 1
    return at == size


@test(needs_data=True)
def connections_bounds_the_concurrent_transfers():
    uploaded()
    # 2.7 MB of data read by one thread, in windows of at most 1 MiB cut at the stored
    # pieces' ends: three or four ranged GETs, which 8 connections would send at once on as
    # many connections. (--connections bounds each read:
    # -j threads may read side by side.)
    prefix = f"{ROOT}/tf2_float64_variant_pinn/ckpt-3332"
    clear_proxy_log()
    run("validate", prefix, "--connections", "1", "-j", "1", code=0,
        env={**PROXY, "TFCKPT_S3_CONNECTIONS": "8", "TFCKPT_S3_READ_AHEAD_KIB": "1024"})
    log = proxy_log()
    data_gets = [l for l in log if l.startswith(f"GET /{BUCKET}/tf2_float64_variant_pinn/ckpt-3332.data-")]
    ranges = [tuple(int(x) for x in l.split("range=bytes=")[1].split()[0].split("-")) for l in data_gets]
    size = os.path.getsize(data("tf2_float64_variant_pinn/ckpt-3332.data-00000-of-00001"))
    assert fetched_once(ranges, size) and len(data_gets) <= 4, log
    assert len({l.split(" conn=")[1].split()[0] for l in log}) == 1, log
    p = run("validate", prefix, "--connections", "0", code=2)
    one_error_line(p, "--connections", "0: not a whole number from 1 to 256")
    for var, bad, why in (("TFCKPT_S3_CONNECTIONS", "0", "from 1 to 256"), ("TFCKPT_S3_MAX_RETRIES", "x", "from 0 to 1000"),
                          ("TFCKPT_S3_READ_AHEAD_KIB", "1", "from 64 to 65536")):
        one_error_line(run("inspect", prefix, code=2, env={var: bad}), f"{var}={bad}", f"not a whole number {why}")


@test(needs_data=True)
def reshard_and_convert_read_remote_checkpoints_into_local_outputs():
    uploaded()
    with tempfile.TemporaryDirectory() as d:
        for case in (T2T, "tf2_float64_variant_pinn/ckpt-3332"):
            remote, local = f"{ROOT}/{case}", data(case)
            out = os.path.join(d, case.replace("/", "_"))
            run("reshard", remote, "-o", out, "--policy", "shards:3", code=0, env=PROXY)
            run("validate", out, "--against", local, code=0)
        # t2t holds numbers only: safetensors takes all of it.
        out = os.path.join(d, "t2t.safetensors")
        run("convert", f"{ROOT}/{T2T}", "-o", out, code=0)
        run("validate", out, "--against", data(T2T), code=0)


@test(needs_data=True)
def validate_reports_unfinished_saves_and_aborts_their_uploads():
    uploaded()
    # What a save killed before its index leaves: a data object, and an upload in progress.
    prefix = f"{ROOT}/unfinished/m"
    s3_put("put", data("t2t_transformer_2shards/" + T2T_DATA1), prefix + ".data-00000-of-00001")
    s3_put("start-upload", prefix + ".index")
    p = run("validate", prefix, "--json", code=1)
    errors = {(e["check"], e["file"]) for e in json.loads(p.stdout)["errors"]}
    assert errors == {("files.no-index", prefix + ".data-00000-of-00001"),
                      ("files.upload-in-progress", prefix + ".index")}, p.stdout
    assert "tfckpt validate --abort-uploads " + prefix in p.stdout, p.stdout
    # An upload started within the hour may be a writer still running: left alone unless
    # --older-than says otherwise.
    p = run("validate", prefix, "--abort-uploads", code=1)
    assert "aborted" not in p.stderr and "files.upload-in-progress" in p.stdout, (p.stderr, p.stdout)
    p = run("validate", prefix, "--abort-uploads", "--older-than", "2m", code=1)
    assert "aborted" not in p.stderr and "files.upload-in-progress" in p.stdout, (p.stderr, p.stdout)
    one_error_line(run("validate", prefix, "--abort-uploads", "--older-than", "soon", code=2), "--older-than", "soon")
    p = run("validate", prefix, "--abort-uploads", "--older-than", "0", code=1)
    assert "aborted the upload in progress of " + prefix + ".index" in p.stderr, p.stderr
    assert "files.upload-in-progress" not in p.stdout and "files.no-index" in p.stdout, p.stdout
    # Beside a complete checkpoint, an upload in progress under its prefix is a warning.
    complete = f"{ROOT}/complete/model.ckpt-1"
    s3_put("tree", data("t2t_transformer_2shards"), f"{ROOT}/complete/")
    s3_put("start-upload", complete + ".data-00001-of-00002")
    p = run("validate", complete, code=0)
    assert "files.upload-in-progress" in p.stdout and "1 warning" in p.stdout, p.stdout
    run("validate", complete, "--strict", code=1)
    run("validate", complete, "--abort-uploads", "--older-than", "0", code=0)
    assert "files.upload-in-progress" not in run("validate", complete, "--strict", code=0).stdout
    # A local path has no uploads: a usage error, not a silent no-op.
    one_error_line(run("validate", data(T2T), "--abort-uploads", code=2), data(T2T), "--abort-uploads")


@test(needs_data=True)
def merge_recover_reports_a_refused_or_unreachable_listing_not_no_parts():
    """merge --recover finds the parts by a listing: one refused (no s3:ListBucket) or an
    endpoint that never answers is that error (exit 3, naming the prefix), never "no parts of
    an unmerged save found beside it" (not-found)."""
    uploaded()
    prefix = f"{ROOT}/{T2T}"
    faults("always GET list-type=2 status 403 AccessDenied")
    try:
        for json_flag in ((), ("--json",)):
            p = run("merge", "--recover", prefix, *json_flag, code=3, env=PROXY)
            text = p.stdout + p.stderr
            assert "no parts" not in text and "403" in text and "AccessDenied" in text, text
            assert "s3:ListBucket" in text and prefix in text, text
            if json_flag:
                assert json.loads(p.stdout)["error"]["id"] != "not-found", p.stdout
            else:
                one_error_line(p, prefix, "403", "s3:ListBucket")
    finally:
        faults()
    p = run("merge", "--recover", prefix, "--json", code=3, env={"AWS_ENDPOINT_URL": closed_endpoint()})
    error = json.loads(p.stdout)["error"]
    assert error["id"] == "io" and "no parts" not in error["message"], error
    assert prefix in error["message"] and "cannot complete the request" in error["message"], error
    # A prefix beside which the store lists nothing is still "no parts" (not-found).
    p = run("merge", "--recover", f"{ROOT}/nothing-here/ckpt", "--json", code=3)
    assert "no parts of an unmerged save" in json.loads(p.stdout)["error"]["message"], p.stdout


@test(needs_data=True)
def bad_urls_credentials_and_endpoints_are_one_line_exit_3():
    uploaded()
    secret = os.environ["S3_TEST_SECRET"]
    cases = [
        ("s3://Bad_Bucket!/m", {}, "malformed object URL"),
        ("s3:///m", {}, "malformed object URL"),
        (f"s3://no-such-bucket-{os.getpid()}/m", {}, "NoSuchBucket"),
        (f"{ROOT}/no/such/checkpoint", {}, "no checkpoint found"),
        (f"{ROOT}/{T2T}", {"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, "403"),
        # A refused endpoint that never answered: one attempt, not the retry budget.
        (f"{ROOT}/{T2T}", {"AWS_ENDPOINT_URL": closed_endpoint()},
         "not retried: the endpoint has not answered yet"),
    ]
    for url, env, why in cases:
        for cmd in ("inspect", "validate"):
            p = run(cmd, url, code=3, env=env)
            line = one_error_line(p, url.split("/m")[0] if "malformed" in why else url, why)
            assert secret not in p.stderr + p.stdout and "not-the-secret" not in p.stderr, line
    # User information in an endpoint URL is a secret: in no error line, plain or --json
    # (a refused endpoint, whose error names it; one with a path, which is refused).
    port = closed_endpoint().rsplit(":", 1)[1]
    for endpoint, why in ((f"http://someone:Pass-Word-1@127.0.0.1:{port}", f"http://127.0.0.1:{port}"),
                          (f"http://someone:Pass-Word-1@127.0.0.1:{port}/base", "has a path")):
        for json_flag in ((), ("--json",)):
            p = run("inspect", f"{ROOT}/{T2T}", "--endpoint-url", endpoint, *json_flag, code=3 if "path" not in why else None)
            assert p.returncode in (2, 3), p
            assert "Pass-Word-1" not in p.stdout + p.stderr and "someone" not in p.stdout + p.stderr, p
            assert why in p.stdout + p.stderr, p
    # credential_process: that it failed and its exit status, never the text of its stderr.
    with tempfile.TemporaryDirectory() as d:
        config = os.path.join(d, "config")
        with open(config, "w") as f:
            f.write("[profile helper]\ncredential_process = sh -c 'echo token=Helper-Secret-2 >&2; exit 7'\n")
        for json_flag in ((), ("--json",)):
            p = run("inspect", f"{ROOT}/{T2T}", "--profile", "helper", *json_flag, code=3,
                    env={"AWS_CONFIG_FILE": config, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""})
            assert "Helper-Secret-2" not in p.stdout + p.stderr, p
            assert "exit status 7" in p.stdout + p.stderr and "1 line" in p.stdout + p.stderr, p
    # A variable of ours that is not a number is a usage error, not a default.
    p = run("inspect", f"{ROOT}/{T2T}", code=2, env={"TFCKPT_S3_MAX_RETRIES": "many"})
    one_error_line(p, "TFCKPT_S3_MAX_RETRIES=many")


if __name__ == "__main__":
    sys.exit(main("cli_s3"))
