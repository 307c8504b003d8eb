#!/usr/bin/env python3
"""Output paths and failed runs: convert --to whatever the name, -o in the forms CKPT takes,
merge --recover --move --force after a plain --recover (issue 14, B2-B4). Interrupts and
full disks are in crash_safety_test.py. Usage: cli_failpaths_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE"""

import json
import os
import subprocess
import sys
import tempfile

from cli_common import *


def listing(d):
    """Every path under d, relative, directories with a trailing '/'."""
    out = []
    for root, dirs, files in os.walk(d):
        out += [os.path.relpath(os.path.join(root, x), d) + "/" for x in dirs]
        out += [os.path.relpath(os.path.join(root, x), d) for x in files]
    return sorted(out)


@test()
def convert_to_decides_the_format_whatever_the_name():
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        # A name without a known extension: --to safetensors writes safetensors and its
        # own verification reads it back as such.
        st = os.path.join(d, "y.st")
        p = run("convert", src, "-o", st, "--to", "safetensors", "--quiet", code=0)
        assert "verified" in p.stdout, p.stdout
        assert open(st, "rb").read(9)[8:9] == b"{", "not a safetensors file"
        run("inspect", st + ".safetensors", code=3)  # nothing else was written
        npz = os.path.join(d, "weights")
        run("convert", src, "-o", npz, "--to", "npz", "--cast", "bfloat16=float32", "--quiet", code=0)
        assert open(npz, "rb").read(2) == b"PK"
        # A name that says another format than --to: usage error, nothing written.
        for name, to in [("y.safetensors", "npz"), ("y.npz", "safetensors"), ("y.safetensors", "tf"),
                         ("y.npz", "tf"), ("y.index", "npz")]:
            out = os.path.join(d, "bad", name)
            line = one_error_line(run("convert", src, "-o", out, "--to", to, code=2), "--to", to, out)
            assert "the name says" in line, line
            assert not os.path.exists(os.path.join(d, "bad")), listing(d)
        # A safetensors set may be named by its index, as SRC may.
        run("convert", src, "-o", os.path.join(d, "set", "m.safetensors.index.json"), "--max-file-size", "20K",
            "--quiet", code=0)
        files = listing(os.path.join(d, "set"))
        assert "m.safetensors.index.json" in files and any(f.startswith("m-00001-of-") for f in files), files


@test()
def output_forms_index_directory_and_new_parents():
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        # OUT.index names the prefix OUT, for every command writing TF output.
        cases = [["reshard", src, "--partition", "none", "--quiet"], ["merge", src], ["convert", src, "--quiet"],
                 ["merge", src, "--drop-optimizer", "--quiet"]]
        for i, args in enumerate(cases):
            out = os.path.join(d, f"ox{i}", "model")
            run(*args, "-o", out + ".index", code=0)
            assert os.path.exists(out + ".index") and not os.path.exists(out + ".index.index"), listing(d)
            run("validate", out, code=0)
        # A bare directory is refused with a message (no hidden DIR/.index), existing or not.
        os.makedirs(os.path.join(d, "dd"))
        for args in [["reshard", src, "--quiet"], ["merge", src], ["convert", src, "--quiet"],
                     ["convert", src, "--to", "npz", "--quiet"]]:
            for out in [os.path.join(d, "dd") + "/", os.path.join(d, "dd"), os.path.join(d, "new") + "/"]:
                line = one_error_line(run(*args, "-o", out, code=2), "is a directory", "model")
                assert out in line, line
        one_error_line(run("reshard", src, "-o", os.path.join(d, "p", "m"), "--plan", os.path.join(d, "dd"),
                           code=2), "--plan", "is a directory")
        assert listing(os.path.join(d, "dd")) == [] and not os.path.exists(os.path.join(d, "new"))
        # Parent directories are created for every output format.
        for name, extra in [("a/b/x.npz", ["--cast", "bfloat16=float32"]), ("c/d/x.safetensors", []),
                            ("e/f/x", [])]:
            out = os.path.join(d, "made", name)
            run("convert", src, "-o", out, *extra, "--quiet", code=0)
            assert os.path.exists(out if "." in name else out + ".index"), listing(d)
        run("reshard", src, "-o", os.path.join(d, "p", "m"), "--plan", os.path.join(d, "plans", "a", "plan.json"),
            code=0)
        assert os.path.exists(os.path.join(d, "plans", "a", "plan.json"))
        # A failed run leaves no directory it created: npz of bfloat16 without a cast fails
        # after the output was planned.
        one_error_line(run("convert", src, "-o", os.path.join(d, "gone", "x", "y.npz"), code=2), "bfloat16")
        assert not os.path.exists(os.path.join(d, "gone")), listing(d)


@test()
def a_run_failing_mid_write_leaves_nothing_and_no_directory_it_made():
    """Damaged input data found while copying: the run fails after it created the output's
    directories and files; none of them stays."""
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        data_files = sorted(f for f in os.listdir(os.path.dirname(src)) if ".data-" in f)
        for f in data_files:
            flip(os.path.join(os.path.dirname(src), f), 0)
        for args in [["reshard", src, "--partition", "none", "--quiet"], ["convert", src, "--quiet"],
                     ["convert", src, "--to", "safetensors", "--quiet"],
                     ["convert", src, "--to", "npz", "--cast", "bfloat16=float32", "--quiet"],
                     ["merge", src, "--drop-optimizer", "--quiet"]]:
            p = run(*args, "-o", os.path.join(d, "new", "deep", "out"), code=3)
            one_error_line(p, "checksum mismatch")
            assert not os.path.exists(os.path.join(d, "new")), (args, listing(d))


@test()
def merge_recover_move_force_after_a_plain_recover_leaves_no_orphans():
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "model.ckpt-7")
        subprocess.run([MAKE_FIXTURE, "distributed", prefix], check=True)
        run("merge", "--recover", prefix, code=0)
        # The output's data files are hard links to the parts'; --move --force must not
        # leave the parts' names behind (rename() of a name onto its own link does nothing).
        run("merge", "--recover", prefix, "--move", "--force", code=0)
        assert not os.path.exists(prefix + "_temp"), listing(prefix + "_temp")
        run("validate", prefix, "--against", prefix + "_single", code=0)
        # Nothing is left for a later run to clean: no parts found.
        one_error_line(run("merge", "--recover", prefix, code=3), "no parts")



@test()
def elements_in_no_stored_slice_are_an_error_not_zeros():
    """A partitioned tensor whose slices leave a gap: every command that copies its values
    refuses (slice.gap), instead of writing made-up zeros for the missing elements."""
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "gap")
        subprocess.run([MAKE_FIXTURE, "family", "gap", prefix], check=True)
        for args in (["convert", prefix, "-o", os.path.join(d, "x.npz")],
                     ["convert", prefix, "-o", os.path.join(d, "x.safetensors")],
                     ["reshard", prefix, "-o", os.path.join(d, "r", "m"), "--partition", "none"]):
            line = one_error_line(run(*args, code=3), "in no stored slice")
            assert "model/part" in line, line
            assert not [f for f in os.listdir(d) if f.startswith("x.")] and not os.path.exists(os.path.join(d, "r"))



@test()
def a_name_safetensors_cannot_hold_is_a_usage_error():
    """safetensors headers are JSON (UTF-8); a TF name that is not UTF-8 is refused with a
    line naming it (this aborted with an uncaught exception before)."""
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "n")
        subprocess.run([MAKE_FIXTURE, "non_utf8", prefix], check=True)
        out = os.path.join(d, "x.safetensors")
        one_error_line(run("convert", prefix, "-o", out, code=2), "not UTF-8", "--rename")
        assert not os.path.exists(out)
        p = run("convert", prefix, "-o", out, "--json", code=2)
        assert json.loads(p.stdout)["error"]["id"] == "usage", p.stdout



@test(needs_data=True)
def plain_merge_takes_every_form_of_ckpt():
    """A plain merge's inputs are resolved like every CKPT: a directory with a state file,
    PREFIX.index, a V1 checkpoint (before, only a literal V2 prefix worked)."""
    with tempfile.TemporaryDirectory() as d:
        keras = data("keras_tf2_adam_2shards")
        for k, src in enumerate([keras, os.path.join(keras, "model.ckpt.index"), data("v1_traffic_signs_3mb")]):
            out = os.path.join(d, f"m{k}", "m")
            run("merge", src, "-o", out, code=0)
            run("validate", out, "--against", src, code=0)


@test()
def merge_again_over_its_own_linked_output_leaves_no_temporaries():
    # A plain merge links the input's data files as the output's; merging the same input
    # again with --force links them once more, and rename() of two links to one file
    # succeeds doing nothing: the temporaries must not stay behind.
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        out = os.path.join(d, "out", "m")
        run("merge", src, "-o", out, code=0)
        run("merge", src, "-o", out, "--force", code=0)
        left = [n for n in os.listdir(os.path.dirname(out)) if ".tmp-tfckpt-" in n]
        assert left == [], left
        run("validate", out, "--against", src, code=0)


@test()
def an_unreachable_object_store_output_fails_before_any_work():
    # -o s3://... asks the store once before reading the input: an endpoint that refuses
    # connections is exit 3 at once, naming the URL (it used to copy everything first).
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        env = dict(os.environ, AWS_ENDPOINT_URL="http://127.0.0.1:9", TFCKPT_S3_MAX_RETRIES="0",
                   AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s3cr3t-value", AWS_REGION="us-east-1")
        for args in (["reshard", src, "-o", "s3://bucket/run/m"], ["merge", src, "-o", "gs://bucket/m"],
                     ["convert", src, "-o", "s3://bucket/m.safetensors"],
                     ["reshard", src, "-o", os.path.join(d, "o"), "--plan", "s3://bucket/plan.json"]):
            p = subprocess.run([TFCKPT, *args], capture_output=True, text=True, timeout=30, env=env)
            assert p.returncode == 3, (args, p.returncode, p.stderr)
            one_error_line(p, args[-1])
            assert "s3cr3t-value" not in p.stderr, p.stderr
            j = subprocess.run([TFCKPT, *args, "--json"], capture_output=True, text=True, timeout=30, env=env)
            assert j.returncode == 3 and json.loads(j.stdout)["ok"] is False, j.stdout


if __name__ == "__main__":
    sys.exit(main("cli_failpaths"))
