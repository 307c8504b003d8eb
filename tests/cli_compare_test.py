#!/usr/bin/env python3
"""CLI tests of comparisons: validate --against (cross-dtype with a tolerance, --report),
merge's parallel-component and replica collapsing (TF's names, any slicing), --expand-parallel
limits, and validate --strict on data files nothing uses.
Usage: cli_compare_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE"""

from cli_common import *  # noqa: F401,F403


def validate_doc(*args, code):
    return json.loads(run("validate", *args, "--json", code=code).stdout)


def tensor_names(prefix):
    return {t["name"] for t in json.loads(run("inspect", prefix, "--json", code=0).stdout)["tensors"]}


def bfloat16_copy(d):
    """The real float32 checkpoint T2T and its copy cast to bfloat16 in `d`."""
    src = data(T2T)
    bf = os.path.join(d, "bf")
    run("convert", src, "-o", bf, "--cast", "float32=bfloat16", code=0)
    return src, bf


def merge_notes(p):
    return [l for l in p.stderr.splitlines() if l.startswith("tfckpt merge: note: ")]


@test()
def expand_parallel_below_two_is_a_usage_error():
    with tempfile.TemporaryDirectory() as d:
        single = fixture(d, "single", "parallel", "single")
        for n in ("0", "1", "-3"):
            out = os.path.join(d, "out" + n)
            p = run("merge", single, "-o", out, "--expand-parallel", n, code=2)
            one_error_line(p, "--expand-parallel", "N >= 2", f"(got {n})")
            assert not os.path.exists(out + ".index"), n


@test()
def collapse_parallel_takes_tensorflows_names_only():
    # TF's ParallelVariable saves component 0 as VARIABLE_VALUE, then parallel_component_1..N-1.
    with tempfile.TemporaryDirectory() as d:
        same = fixture(d, "same", "parallel", "same")
        k = "dense/kernel/.ATTRIBUTES/"
        b = "dense/bias/.ATTRIBUTES/"
        # kernel: component 1 zero-padded (so component 2 has no 1); bias: component 2 named 0.
        odd = os.path.join(d, "odd")
        run("merge", same, "-o", odd, "--rename", f"^{k}parallel_component_1$={k}parallel_component_01",
            "--rename", f"^{b}parallel_component_2$={b}parallel_component_0", code=0)
        out = os.path.join(d, "collapsed")
        p = run("merge", odd, "-o", out, "--collapse-parallel", code=0)
        names = tensor_names(out)
        assert {k + "parallel_component_01", k + "parallel_component_2", b + "parallel_component_0"} <= names, names
        assert b + "parallel_component_1" not in names and "step/.ATTRIBUTES/parallel_component_2" not in names, names
        notes = "\n".join(merge_notes(p))
        assert f'"{k}parallel_component_01" is not a parallel component TensorFlow writes' in notes, notes
        assert f'"{b}parallel_component_0" is not a parallel component TensorFlow writes' in notes, notes
        assert f'parallel components of "{k}" left as they are: parallel_component_1 is missing' in notes, notes
        assert len(merge_notes(p)) == 3, notes
        validate_doc(out, code=0)
        # What the filters drop gets no note.
        p = run("merge", odd, "-o", os.path.join(d, "filtered"), "--collapse-parallel", "--exclude",
                "parallel_component_0$", code=0)
        assert len(merge_notes(p)) == 2 and 'parallel_component_0"' not in p.stderr, p.stderr
        # Components without a VARIABLE_VALUE are left alone with a note (not an error).
        novalue = os.path.join(d, "novalue")
        run("merge", same, "-o", novalue, "--exclude", f"^{b}VARIABLE_VALUE$", code=0)
        out2 = os.path.join(d, "collapsed2")
        p = run("merge", novalue, "-o", out2, "--collapse-parallel", code=0)
        assert {b + "parallel_component_1", b + "parallel_component_2"} <= tensor_names(out2)
        assert f'there is no component 0 "{b}VARIABLE_VALUE"' in "\n".join(merge_notes(p)), p.stderr


@test()
def collapse_replicas_takes_a_lone_replica():
    # TF1's default Saver writes a ReplicatedVariable as replica 0 alone, under its name
    # (saveable_object_util.op_list_to_dict converts it to replica 0's variable): "w/0"
    # collapses to "w", with a note.
    with tempfile.TemporaryDirectory() as d:
        same = fixture(d, "rep", "replicas", "same")
        lone = os.path.join(d, "lone")
        run("merge", same, "-o", lone, "--exclude", "^w/[12]$", code=0)
        out = os.path.join(d, "out")
        p = run("merge", lone, "-o", out, "--collapse-replicas", code=0)
        assert '"w/0" collapsed alone (TF1\'s Saver writes replica 0 only)' in p.stderr, p.stderr
        assert "w" in tensor_names(out) and "w/0" not in tensor_names(out)


@test()
def collapse_compares_values_whatever_the_slicing():
    with tempfile.TemporaryDirectory() as d:
        same = fixture(d, "same", "parallel", "same")
        single = fixture(d, "single", "parallel", "single")
        differ = fixture(d, "differ", "parallel", "differ")
        # Component 1 in 2 row slices, component 0 whole: equal values, collapsed.
        for src in (same, differ):
            run("reshard", src, "-o", src + "_r", "--partition", "parallel_component_1$=fixed:2", "--partition", "none",
                code=0)
        p = run("merge", same + "_r", "-o", os.path.join(d, "c"), "--collapse-parallel", code=0)
        assert "collapsed 10 tensors" in p.stdout, p.stdout
        validate_doc(os.path.join(d, "c"), "--against", single, code=0)
        # Component 2 of the kernel differs at [1, 2]; component 1 (resliced) does not.
        p = run("merge", differ + "_r", "-o", os.path.join(d, "c2"), "--collapse-parallel", code=1)
        assert "merge.parallel-differs" in p.stderr and "[1, 2]: 99.0 vs 1.25 (1 of 12 elements differ)" in p.stderr, \
            p.stderr
        assert "parallel_component_1" not in p.stderr, p.stderr
        assert "slicing" not in p.stderr, p.stderr
        # Replicas: w/1 in 2 slices, v/1 whole (v/0 stays in 2 slices).
        rep = fixture(d, "rep", "replicas", "same")
        run("reshard", rep, "-o", rep + "_r", "--partition", "^w/1$=fixed:2", "--partition", "^v/1$=none", code=0)
        p = run("merge", rep + "_r", "-o", os.path.join(d, "r"), "--collapse-replicas", code=0)
        names = tensor_names(os.path.join(d, "r"))
        assert {"w", "v"} <= names and not {"w/1", "v/1"} & names, names


@test(needs_data=True)
def cast_checkpoint_validates_against_its_source_with_a_tolerance():
    # The example of validate --help: a bfloat16 copy against the float32 original.
    with tempfile.TemporaryDirectory() as d:
        src, bf = bfloat16_copy(d)
        j = validate_doc(bf, "--against", src, "--tolerance", "0.01", code=0)
        assert j["errors"] == [] and j["warnings"] == [], j["errors"][:3]
        assert len(j["notes"]) == 248 and {n["check"] for n in j["notes"]} == {"against.dtype"}, j["notes"][:3]
        assert "from float32 to bfloat16" in j["notes"][0]["message"]
        validate_doc(bf, "--against", src, "--tolerance", "0.01", "--strict", code=0)  # notes never fail
        p = run("validate", bf, "--against", src, "--tolerance", "0.01", code=0)
        assert p.stdout.splitlines()[-1].endswith("OK (248 notes)"), p.stdout.splitlines()[-1]
        assert p.stdout.startswith("note    against.dtype"), p.stdout[:200]
        # The values are compared: a tolerance too small for bfloat16's rounding fails.
        j = validate_doc(bf, "--against", src, "--tolerance", "1e-6", code=1)
        assert {e["check"] for e in j["errors"]} == {"against.values"}, j["errors"][:3]
        # Without a tolerance a dtype change stays an error.
        j = validate_doc(bf, "--against", src, code=1)
        assert len(j["errors"]) == 248 and {e["check"] for e in j["errors"]} == {"against.dtype"}
        assert j["notes"] == []


@test()
def strict_flags_empty_unreferenced_data_files():
    with tempfile.TemporaryDirectory() as d:
        src = fixture(d, "whole", "family", "whole")
        n = len(tensor_names(src))
        out = os.path.join(d, "spread")
        run("reshard", src, "-o", out, "--policy", f"shards:{n + 2}", code=0)
        empty = sorted(f for f in os.listdir(d) if f.startswith("spread.data-") and
                       os.path.getsize(os.path.join(d, f)) == 0)
        assert len(empty) >= 2, os.listdir(d)
        j = validate_doc(out, code=0)
        flagged = sorted(os.path.basename(w["file"]) for w in j["warnings"] if w["check"] == "files.unreferenced-data")
        assert flagged == empty, (flagged, empty)
        j = validate_doc(out, "--strict", code=1)
        assert {e["check"] for e in j["errors"]} == {"files.unreferenced-data"}, j["errors"]


@test()
def report_lists_each_differing_tensor():
    with tempfile.TemporaryDirectory() as d:
        base = fixture(d, "base", "family", "base")
        changed = fixture(d, "changed", "family", "changed")
        p = run("validate", changed, "--against", base, "--report", code=1)
        lines = [l for l in p.stdout.splitlines() if l.startswith("differ ")]
        assert lines == ["differ  model/part/.ATTRIBUTES/VARIABLE_VALUE: 1 of 30 elements; max |new - old| 77.5 "
                         "at [7, 1] (new 99.5, old 22.0); max |new - old| / |old| 3.52273"], p.stdout
        j = validate_doc(changed, "--against", base, "--report", code=1)
        assert j["differences"] == [{
            "tensor": "model/part/.ATTRIBUTES/VARIABLE_VALUE", "elements": 30, "differing": 1,
            "first": {"index": [7, 1], "new": "99.5", "old": "22.0"},
            "max_abs_diff": 77.5, "max_rel_diff": 77.5 / 22.0,
            "max_at": {"index": [7, 1], "new": "99.5", "old": "22.0"}}], j["differences"]
        assert "differences" not in validate_doc(changed, "--against", base, code=1)
        # Equal checkpoints: an empty list. --report needs --against.
        assert validate_doc(os.path.join(d, "changed"), "--against", changed, "--report", code=0)["differences"] == []
        one_error_line(run("validate", base, "--report", code=2), "--report needs --against")


@test(needs_data=True)
def report_numbers_match_numpy():
    # Every tensor of a bfloat16 cast differs from the float32 original; the report's count,
    # largest |new - old| (and where), and largest relative difference agree with numpy's.
    with tempfile.TemporaryDirectory() as d:
        src, bf = bfloat16_copy(d)
        j = validate_doc(bf, "--against", src, "--tolerance", "0", "--report", code=1)
        by_name = {x["tensor"]: x for x in j["differences"]}
        assert len(by_name) == len({e["key"] for e in j["errors"]}) and len(by_name) > 100, len(by_name)

        def where(prefix):
            doc = json.loads(run("inspect", prefix, "--json", code=0).stdout)
            return {t["name"]: t for t in doc["tensors"]}
        new, old = where(bf), where(src)
        names = sorted(n for n in by_name if len(old[n]["shape"]) == 2)[:5]
        assert names
        script = """
import json, sys, numpy as np
out = {}
for name, nf, no, noff, ooff, shape in json.load(sys.stdin):
    a = np.fromfile(nf, dtype='<u2', count=int(np.prod(shape)), offset=noff).astype('<u4') << 16
    a = a.view('<f4').astype(np.float64).reshape(shape)
    b = np.fromfile(no, dtype='<f4', count=int(np.prod(shape)), offset=ooff).astype(np.float64).reshape(shape)
    d = np.abs(a - b)
    i = np.unravel_index(int(np.argmax(d)), d.shape)
    with np.errstate(divide='ignore', invalid='ignore'):
        rel = np.where(d == 0, 0.0, d / np.abs(b))
    out[name] = [int((d > 0).sum()), float(d.max()), [int(x) for x in i], float(rel.max())]
print(json.dumps(out))
"""
        shards = json.loads(run("inspect", bf, "--json", code=0).stdout)["num_shards"]
        args = [[n, f"{bf}.data-{new[n]['shard']:05d}-of-{shards:05d}", f"{src}.data-{old[n]['shard']:05d}-of-00002",
                 new[n]["offset"], old[n]["offset"], old[n]["shape"]] for n in names]
        p = subprocess.run([numpy_python(), "-c", script], input=json.dumps(args), capture_output=True, text=True,
                           check=True)
        want = json.loads(p.stdout)
        for n in names:
            x = by_name[n]
            count, max_abs, at, max_rel = want[n]
            assert x["differing"] == count and x["max_at"]["index"] == at, (n, x, want[n])
            assert abs(x["max_abs_diff"] - max_abs) <= 1e-12 * max_abs and abs(x["max_rel_diff"] - max_rel) <= 1e-9 * max_rel, \
                (n, x, want[n])


if __name__ == "__main__":
    sys.exit(main("cli_compare"))
