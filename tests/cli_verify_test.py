#!/usr/bin/env python3
"""One verification policy (issue 15 item 5): every command that writes a checkpoint reads its
output back and compares it with its input (verify.h); an output that fails is removed with one
error line naming the file and the tensor, exit 1, JSON id output.mismatch.
Usage: cli_verify_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE"""

import json
import os
import shutil
import sys
import tempfile

from cli_common import *

EMB = "wide_deep/embedding/embedding_weights"


def damaged(d):
    """The example with one bit flipped inside a slice of EMB in its second data file: a
    plain merge copies data files as they are, so only verification sees it."""
    src = example(d)
    flip(src + ".data-00001-of-00002", 20000)
    return src


@test()
def merge_publishes_no_output_that_does_not_verify():
    """The damage a plain merge copies is found by the verification and reported as the
    input's: exit 3 (corrupt input), naming the input's data file, never the output."""
    with tempfile.TemporaryDirectory() as d:
        src = damaged(d)
        out = os.path.join(d, "o", "m")
        line = one_error_line(run("merge", src, "-o", out, code=3), src + ".data-00001-of-00002", '"' + EMB + '"',
                              "checksum mismatch", "nothing was written")
        assert "does not validate" not in line and out not in line, line
        assert line.count("nothing was written") == 1, line
        assert not os.path.exists(os.path.dirname(out)), os.listdir(os.path.dirname(out))
        j = json.loads(run("merge", src, "-o", out, "--json", code=3).stdout)
        assert j["error"]["id"] == "data.crc" and j["error"]["key"] == EMB, j
        assert j["error"]["file"] == src + ".data-00001-of-00002", j
        assert not os.path.exists(os.path.dirname(out))
        # --no-verify writes it (the copy does not read the bytes it moves).
        run("merge", src, "-o", out, "--no-verify", code=0)
        assert os.path.exists(out + ".index")


def snapshot(prefix):
    """Every file of the checkpoint at `prefix` (and any other file in its directory), by
    name, with its bytes."""
    d = os.path.dirname(prefix)
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    return out


@test()
def a_forced_run_that_fails_verification_leaves_the_output_it_would_replace():
    # Verification reads the new files before anything is published: when it fails, --force
    # has replaced nothing (it used to verify after the commit, and then removed the output:
    # the user lost the old checkpoint and got no new one). The copy itself checks every CRC
    # it reads, so the fault is planted in the output (TFCKPT_FAULT_FLIP_OUTPUT_BYTE flips a
    # bit of its first data file once written), except for the plain merge, which links the
    # input's data files as they are: its input is damaged instead.
    with tempfile.TemporaryDirectory() as d:
        good = example(os.path.join(d, "good"))
        bad = damaged(os.path.join(d, "bad"))
        out = os.path.join(d, "out", "m")
        cases = [
            ("reshard", "--partition", "fixed:3"),
            ("reshard", "--policy", "shards:3"),
            ("convert", "--partition", "none"),
            ("convert", "--rename", "wide_deep/=wd/"),
            ("merge", "--drop-optimizer"),
            ("merge",),
        ]
        for case in cases:
            run(case[0], good, "-o", out, *case[1:], "--force", code=0)
            before = snapshot(out)
            plain_merge = case == ("merge",)
            os.environ["TFCKPT_FAULT_FLIP_OUTPUT_BYTE"] = "100"
            try:
                code = 3 if plain_merge else 1  # (a damaged input is corrupt input)
                p = run(case[0], bad if plain_merge else good, "-o", out, *case[1:], "--force", code=code)
                j = json.loads(run(case[0], bad if plain_merge else good, "-o", out, *case[1:], "--force", "--json",
                                   code=code).stdout)
            finally:
                del os.environ["TFCKPT_FAULT_FLIP_OUTPUT_BYTE"]
            line = one_error_line(p, (bad if plain_merge else out) + ".data-0000", "nothing was written")
            assert "removed" not in line, line
            assert j["error"]["id"] == ("data.crc" if plain_merge else "output.mismatch"), j
            # The key is the tensor's name (a slice is described in the message), never a raw
            # slice key.
            key = j["error"]["key"]
            assert key and key.isprintable() and "\\" not in key and "\ufffd" not in key, j
            if "--rename" not in case:
                assert key in run("inspect", good).stdout, j
            after = snapshot(out)
            assert after == before, (case, sorted(before), sorted(after))
        # A slice read back wrong is named by its tensor and described in the message.
        os.environ["TFCKPT_FAULT_FLIP_OUTPUT_BYTE"] = "20000"
        try:
            p = run("reshard", good, "-o", out + "3", "--partition", "fixed:3", code=1)
        finally:
            del os.environ["TFCKPT_FAULT_FLIP_OUTPUT_BYTE"]
        one_error_line(p, out + "3.data-00000-of-00002", 'key "' + EMB + '"', "offset 20000",
                       "slice 0,334:0,16: read back differs from what was written; nothing was written")
        assert not any(f.startswith("m3") for f in os.listdir(os.path.dirname(out)))
        # --no-verify does not read the output back: the flipped bit goes through (which is
        # what the fault plants), and the output is published.
        os.environ["TFCKPT_FAULT_FLIP_OUTPUT_BYTE"] = "100"
        try:
            run("reshard", good, "-o", out + "2", "--partition", "fixed:3", "--no-verify", code=0)
        finally:
            del os.environ["TFCKPT_FAULT_FLIP_OUTPUT_BYTE"]
        run("validate", out + "2", code=1)


@test()
def a_forced_merge_removes_the_old_outputs_extra_data_files():
    # A plain merge into an output that had more data files: the new index names 2, and the
    # third (of the old checkpoint) went with it (it used to stay, orphaned).
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        out = os.path.join(d, "out", "m")
        run("reshard", src, "-o", out, "--policy", "shards:3", code=0)
        assert len([f for f in os.listdir(os.path.dirname(out)) if ".data-" in f]) == 3
        run("merge", src, "-o", out, "--force", code=0)
        assert sorted(os.listdir(os.path.dirname(out))) == ["m.data-00000-of-00002", "m.data-00001-of-00002",
                                                            "m.index"], os.listdir(os.path.dirname(out))
        run("validate", out, "--against", src, code=0)


@test()
def merging_an_input_with_an_empty_data_file_writes_every_file_its_header_counts():
    # A policy can leave a data file without pieces (2 files, 1 tensor). TensorFlow's
    # MergeV2 names only the files entries use, so its header counted 4 files of which 3
    # were written, and the verification failed (with --force it even read the old
    # checkpoint's file of that name and said "validated").
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        bias = "hiddenlayer_0/bias$"
        one, rest = os.path.join(d, "one"), os.path.join(d, "rest")
        run("convert", src, "-o", one + "_whole", "--include", bias, "-q", code=0)
        run("reshard", one + "_whole", "-o", one, "--policy", "shards:2", "-q", code=0)
        assert os.path.getsize(one + ".data-00001-of-00002") == 0
        run("convert", src, "-o", rest, "--exclude", bias, "-q", code=0)
        out = os.path.join(d, "out", "m")
        run("reshard", src, "-o", out, "--policy", "shards:3", "-q", code=0)  # to be replaced
        for extra in ([], ["--move"]):
            run("merge", one, rest, "-o", out, "--force", *extra, code=0)
            names = sorted(os.listdir(os.path.dirname(out)))
            assert names == ["m.data-0000%d-of-00004" % i for i in range(4)] + ["m.index"], names
            run("validate", out, "--against", src, code=0)


@test()
def every_command_reports_its_output_verified():
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        o = lambda name: os.path.join(d, "out", name)
        cases = [
            ("reshard", src, "-o", o("r"), "--partition", "fixed:3"),
            ("merge", src, "-o", o("m"), "--rename", "wide_deep/=wd/"),
            ("convert", src, "-o", o("c"), "--partition", "none"),
            ("convert", src, "-o", o("cast"), "--cast", "float32=bfloat16", "--rename", "^wide_deep/=x/"),
            ("convert", src, "-o", o("s.safetensors"), "--cast", "bfloat16=float32"),
            ("convert", src, "-o", o("s2.safetensors"), "--max-file-size", "20K"),
            ("convert", src, "-o", o("w.npz"), "--cast", "bfloat16=float32"),  # read back since issue 15
        ]
        for args in cases:
            j = json.loads(run(*args, "--json", "--quiet", code=0).stdout)
            assert j["verified"] is True, (args, j)


@test()
def safetensors_and_npz_outputs_that_do_not_verify_are_removed():
    # The new writers (issue 26: laid out first, filled by -j threads) under the same policy:
    # a bit flipped in the written data (TFCKPT_FAULT_FLIP_OUTPUT_BYTE) is found by the
    # read-back, reported as output.mismatch naming the file and the tensor, and nothing is
    # left; --no-verify publishes it.
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        for name, extra, at in (("m.safetensors", [], "20000"), ("s.safetensors", ["--max-file-size", "40K"], "9000"),
                                ("m.npz", [], "20000")):
            out = os.path.join(d, "out", name)
            os.environ["TFCKPT_FAULT_FLIP_OUTPUT_BYTE"] = at  # (in the first file's data)
            try:
                p = run("convert", src, "-o", out, "--cast", "bfloat16=float32", "-j", "4", *extra, code=1)
                j = json.loads(run("convert", src, "-o", out, "--cast", "bfloat16=float32", "--json", *extra,
                                   code=1).stdout)
                run("convert", src, "-o", out, "--cast", "bfloat16=float32", "--no-verify", *extra, code=0)
            finally:
                del os.environ["TFCKPT_FAULT_FLIP_OUTPUT_BYTE"]
            index = out if not extra else out.replace(".safetensors", ".safetensors.index.json")
            line = one_error_line(p, index + ": ", "removed the output",
                                  "CRC-32 mismatch" if name.endswith(".npz") else "against.values")
            assert j["error"]["id"] == "output.mismatch" and j["error"]["key"], (name, j)
            assert j["error"]["key"] in run("inspect", src).stdout, (name, j)
            # The unverified output holds the flipped bit: it differs from the input.
            if name.endswith(".safetensors"):
                run("validate", index, "--against", src, code=1)
            shutil.rmtree(os.path.join(d, "out"))


@test()
def npz_read_back_streams_its_members():
    # One float32 tensor of 96 MiB, written as safetensors by hand, converted to .npz and
    # verified: the read-back goes through the member in windows, so the process stays far
    # below the tensor's size (reading it whole, with a copy, took twice the tensor).
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "big.safetensors")
        n = 96 << 20
        header = json.dumps({"w": {"dtype": "F32", "shape": [n // 4096, 1024], "data_offsets": [0, n]}}).encode()
        header += b" " * (-len(header) % 8)
        with open(src, "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header)
            block = bytes(range(256)) * 4096
            for _ in range(n // len(block)):
                f.write(block)
        out = os.path.join(d, "big.npz")
        p = subprocess.Popen([TFCKPT, "convert", src, "-o", out, "--to", "npz", "-q", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stdout = p.stdout.read()
        p.stderr.read()
        _, status, usage = os.wait4(p.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, stdout
        assert json.loads(stdout)["verified"] is True, stdout
        # AddressSanitizer's shadow memory and quarantine make RSS meaningless there (the
        # sanitizer suite runs with ASAN_OPTIONS set, scripts/check.sh).
        if "ASAN_OPTIONS" not in os.environ:
            assert usage.ru_maxrss < 64 << 10, "peak RSS %d KiB for a 96 MiB tensor" % usage.ru_maxrss


if __name__ == "__main__":
    sys.exit(main("cli_verify"))
