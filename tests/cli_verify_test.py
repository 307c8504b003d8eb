#!/usr/bin/env python3
"""One verification policy (issue 15 item 5): every command that writes a checkpoint reads its
output back and compares it with its input (verify.h); an output that fails is removed with one
error line naming the file and the tensor, exit 1, JSON id output.mismatch.
Usage: cli_verify_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE"""

import json
import os
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
def merge_removes_an_output_that_does_not_verify():
    with tempfile.TemporaryDirectory() as d:
        src = damaged(d)
        out = os.path.join(d, "o", "m")
        line = one_error_line(run("merge", src, "-o", out, code=1), out + ".data-00001-of-00002", '"' + EMB + '"',
                              "data.crc", "removed the output")
        assert "does not validate" not in line, line
        assert not os.path.exists(os.path.dirname(out)), os.listdir(os.path.dirname(out))
        j = json.loads(run("merge", src, "-o", out, "--json", code=1).stdout)
        assert j["error"]["id"] == "output.mismatch" and j["error"]["key"] == EMB, j
        assert not os.path.exists(os.path.dirname(out))
        # --no-verify writes it (the copy does not read the bytes it moves).
        run("merge", src, "-o", out, "--no-verify", code=0)
        assert os.path.exists(out + ".index")


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
