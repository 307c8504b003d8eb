"""The C++ example of docs/LIBRARY.md (examples/read_checkpoint.cc) on real checkpoints: its
listing (name, dtype, shape per tensor) is the one `tfckpt inspect --json` gives, and the
value it prints is the first element of the first float32 tensor as inspect reads it.
Usage: example_test.py READ_CHECKPOINT TFCKPT"""
import json
import os
import subprocess
import sys

from harness import TESTDATA, main, test

EXAMPLE, TFCKPT = sys.argv[1], sys.argv[2]


def run(*args):
    return subprocess.run(list(args), capture_output=True)


def check(ckpt):
    path = os.path.join(TESTDATA, ckpt)
    out = run(EXAMPLE, path)
    assert out.returncode == 0, out.stderr
    assert out.stderr == b"", out.stderr
    lines = out.stdout.decode().splitlines()
    listing = json.loads(run(TFCKPT, "inspect", "--json", path).stdout)["tensors"]
    assert len(lines) == len(listing) + 1, lines
    first_float = None
    for line, t in zip(lines, listing):
        shape = "[" + ", ".join(str(d) for d in t["shape"]) + "]"
        assert line == f"{t['name']}\t{t['dtype']}\t{shape}", (line, t)
        if first_float is None and t["dtype"] == "float32" and 0 not in t["shape"]:
            first_float = t
    name, rank = first_float["name"], len(first_float["shape"])
    values = json.loads(run(TFCKPT, "inspect", "--json", "--tensor", name, path).stdout)["tensors"][0]["values"]
    for _ in range(rank):
        values = values[0]
    index = "[" + ", ".join(["0"] * rank) + "]"
    head, value = lines[-1].rsplit(" = ", 1)
    assert head == name + index, lines[-1]
    assert float(value) == values, (lines[-1], values)
    return lines


@test(needs_data=True)
def lists_and_reads_a_two_shard_keras_checkpoint():
    lines = check("keras_tf2_adam_2shards")
    assert lines[0] == "_CHECKPOINTABLE_OBJECT_GRAPH\tstring\t[]"
    assert "layer-1/kernel/.ATTRIBUTES/VARIABLE_VALUE\tfloat32\t[4, 128]" in lines


@test(needs_data=True)
def reads_a_scalar_and_a_v1_checkpoint():
    check("savedmodel_tf1_snappy_index/variables/variables")
    check("v1_traffic_signs_3mb/model.ckpt")


@test()
def an_error_is_one_line_and_exit_1():
    out = run(EXAMPLE, "/nonexistent/model.ckpt")
    assert out.returncode == 1, out
    assert out.stdout == b""
    err = out.stderr.decode()
    assert err.startswith("read_checkpoint: ") and err.endswith("\n") and err.count("\n") == 1, err
    out = run(EXAMPLE)
    assert out.returncode == 1 and out.stderr == b"usage: read_checkpoint CKPT\n", out


if __name__ == "__main__":
    sys.exit(main("example"))
