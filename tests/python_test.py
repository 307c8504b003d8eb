#!/usr/bin/python3
"""Tests of the Python package (import tfckpt), run with Debian's /usr/bin/python3 (numpy).
Usage: python_test.py PACKAGE_DIR TFCKPT MAKE_EXAMPLE GEN_CHECKPOINT

Values read through the package are compared element for element with what the command
line writes for the same checkpoint (`convert -o X.npz`, read back by numpy), on every real
TensorFlow checkpoint of ../shared/testdata/tf (skipped when missing, except under CI=true)."""

import os
import random
import subprocess
import sys
import tempfile
import threading

PACKAGE_DIR, TFCKPT, MAKE_EXAMPLE, GEN_CHECKPOINT = sys.argv[1:5]
sys.path.insert(0, PACKAGE_DIR)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import tfckpt  # noqa: E402
from harness import TESTDATA, main, raises, readme_example, test, torch_or_skip  # noqa: E402


def cli(*args, code=0):
    p = subprocess.run([TFCKPT, *args], capture_output=True, text=True)
    assert p.returncode == code, f"tfckpt {' '.join(args)}: exit {p.returncode}: {p.stderr}"
    return p


def _np_int(v):
    return np.int64(v)


def example(d):
    """The README's example checkpoint at d/model.ckpt (harness.readme_example)."""
    return readme_example(MAKE_EXAMPLE, d)


# Real cases the package must read whole (the malformed ones are tested for their errors).
READABLE = ["empty_prefix_keras", "estimator_dnn_adam_2shards", "estimator_linear_ftrl_2shards",
            "estimator_tfx_adagrad_ftrl", "keras_tf2_adam_2shards", "keras_tuner_prefix_named_checkpoint",
            "savedmodel_keras_tfx_slots", "savedmodel_tf1_snappy_index", "savedmodel_tf2_snappy_index",
            "savedmodel_tfdf_bool_snappy", "savedmodel_tfjs_int64", "t2t_transformer_2shards",
            "tf2_float64_variant_pinn", "tf2_iterator_variant_int32", "v1_abs_path_state",
            "v1_session_bundle_sharded_name", "v1_traffic_signs_3mb", "v1_vocal_autoencoder_multiblock"]


def case_path(name):
    """The CKPT argument for a real case: its directory (the command line resolves it)."""
    return os.path.join(TESTDATA, name)


@test(needs_data=True)
def every_real_checkpoint_equals_the_command_lines_npz():
    for name in READABLE:
        with tempfile.TemporaryDirectory() as d:
            npz = os.path.join(d, "x.npz")
            # bfloat16 has no numpy dtype: the command line casts it, the package widens it.
            p = subprocess.run([TFCKPT, "convert", case_path(name), "-o", npz, "--cast", "bfloat16=float32"],
                               capture_output=True, text=True)
            assert p.returncode == 0, f"{name}: {p.stderr}"
            want = np.load(npz, allow_pickle=False)
            with tfckpt.open(case_path(name)) as c:
                checked = 0
                for t in c.tensors():
                    if t.dtype == "variant" or t.name == "_CHECKPOINTABLE_OBJECT_GRAPH":
                        continue
                    got = c[t.name]
                    assert got.shape == t.shape, (name, t.name, got.shape, t.shape)
                    if t.dtype == "string":
                        assert got.dtype == object and all(isinstance(x, bytes) for x in got.flat)
                        continue
                    key = t.name if t.name in want.files else None
                    assert key is not None, f"{name}: {t.name} not in the npz ({want.files[:5]})"
                    ref = want[key]
                    assert got.dtype == ref.dtype, (name, t.name, got.dtype, ref.dtype)
                    assert np.array_equal(got, ref, equal_nan=got.dtype.kind in "fc"), (name, t.name)
                    checked += 1
                assert checked > 0, name


@test(needs_data=True)
def strings_match_inspect():
    name = "estimator_dnn_adam_2shards"
    with tfckpt.open(case_path(name)) as c:
        strings = [t for t in c.tensors() if t.dtype == "string"]
        ints = [t for t in c.tensors() if t.dtype == "int64" and t.shape == ()]
        assert ints, "the case has a global_step"
        for t in ints:
            out = cli("inspect", case_path(name), "--tensor", t.name).stdout
            assert str(int(c[t.name])) in out, (t.name, out)
        for t in strings:
            assert c[t.name].dtype == object


@test()
def partitioned_and_resharded_read_the_same():
    with tempfile.TemporaryDirectory() as d:
        prefix = example(d)
        with tfckpt.open(prefix) as c:
            emb = "wide_deep/embedding/embedding_weights"
            info = c.info(emb)
            assert info.partitioned and len(info.slices) == 4, info
            assert [s.spec for s in info.slices][0].endswith(":0,16") or info.slices[0].spec.endswith(":-")
            whole = c[emb]
            assert whole.shape == (1000, 16) and whole.dtype == np.float32
            before = {k: c[k] for k in c.keys()}
        out = os.path.join(d, "r3", "model.ckpt")
        doc = tfckpt.reshard(prefix, out, partition=["fixed:3"])
        assert doc.get("verified") is True, doc
        with tfckpt.open(out) as r:
            assert len(r.info(emb).slices) == 3
            for k, v in before.items():
                got = r[k]
                assert got.dtype == v.dtype and np.array_equal(got, v), k
        # bfloat16: float32 by default, the bit pattern with raw=True.
        with tfckpt.open(prefix) as c:
            bf = [t.name for t in c.tensors() if t.dtype == "bfloat16"]
            assert bf
            wide, bits = c[bf[0]], c.read(bf[0], raw=True)
            assert wide.dtype == np.float32 and bits.dtype == np.uint16
            assert np.array_equal((wide.view(np.uint32) >> 16).astype(np.uint16), bits)


@test()
def get_slice_matches_numpy_indexing():
    rng = random.Random(1234)
    with tempfile.TemporaryDirectory() as d:
        prefix = example(d)
        with tfckpt.open(prefix) as c:
            for name in c.keys():
                t = c.info(name)
                if t.dtype in ("variant",) or name == "_CHECKPOINTABLE_OBJECT_GRAPH" or not t.shape:
                    continue
                whole = c[name]
                view = c.get_slice(name)
                for _ in range(40):
                    key = []
                    for n in t.shape:
                        kind = rng.randrange(4)
                        if kind == 0:
                            key.append(rng.randrange(-n, n))
                        elif kind == 1:
                            a, b = sorted(rng.randrange(-n - 2, n + 3) for _ in range(2))
                            key.append(slice(a, b, rng.choice([None, 1, 2, 3, 7])))
                        elif kind == 2:
                            key.append(slice(None))
                        else:
                            key.append(slice(rng.randrange(n + 1), None))
                    key = tuple(key[:rng.randrange(1, len(key) + 1)])
                    got, want = view[key], whole[key]
                    assert np.shape(got) == np.shape(want), (name, key, np.shape(got), np.shape(want))
                    assert type(got) is type(want), (name, key, type(got), type(want))
                    assert np.array_equal(got, want), (name, key)
                assert np.array_equal(view[...], whole)
                assert np.array_equal(view[..., 0] if len(t.shape) > 1 else view[0], whole[..., 0] if len(t.shape) > 1 else whole[0])


@test()
def get_slice_reads_only_the_rows_it_needs():
    """One row of a 1 GiB table (its data file sparse: no disk used): the bytes read from
    the data files stay under 1 MiB."""
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "big")
        subprocess.run([GEN_CHECKPOINT, "index-only", prefix, "1", "1", "1"], check=True, capture_output=True)
        with tfckpt.open(prefix) as c:
            table = max(c.tensors(), key=lambda t: t.bytes)
            assert table.bytes >= 1 << 30, table
            def read_bytes():
                for line in open("/proc/self/io"):
                    if line.startswith("rchar:"):
                        return int(line.split()[1])
            before = read_bytes()
            row = c.get_slice(table.name)[12345]
            used = read_bytes() - before
            assert row.shape == table.shape[1:], row.shape
            assert used < 1 << 20, f"read {used} bytes for one row"
            # Rows far apart are read one by one, not as the box around them.
            before = read_bytes()
            rows = c.get_slice(table.name)[::100000, 5:9]
            used = read_bytes() - before
            assert rows.shape == ((table.shape[0] + 99999) // 100000, 4), rows.shape
            assert used < 1 << 20, f"read {used} bytes for {rows.shape[0]} rows"
            # The same row through a full read (unchecked: the sparse file's zeros do not
            # match the CRC the index was written with).
            assert np.array_equal(row, c.read(table.name, verify=False)[12345])


@test()
def zero_copy_arrays_are_copy_on_write_and_outlive_the_handle():
    """mmap=True (the opt-in): copy-on-write mappings of the file, writable."""
    with tempfile.TemporaryDirectory() as d:
        prefix = example(d)
        c = tfckpt.open(prefix, mmap=True)
        name = next(t.name for t in c.tensors() if not t.partitioned and t.dtype == "float32" and t.shape)
        a = c[name]
        assert a.flags.writeable and not a.flags.owndata
        copy = np.array(a)
        a[(0,) * a.ndim] += 1.0
        assert np.array_equal(c[name], copy)  # (the write stays in `a`)
        c.close()
        del c
        copy[(0,) * a.ndim] += 1.0
        assert np.array_equal(a, copy)


@test()
def errors_are_exceptions_like_numpys():
    with tempfile.TemporaryDirectory() as d:
        prefix = example(d)
        e = raises(tfckpt.CorruptInputError, lambda: tfckpt.open(os.path.join(d, "missing")), "missing")
        assert isinstance(e, tfckpt.Error)
        raises(TypeError, lambda: tfckpt.open(42))
        with tfckpt.open(prefix) as c:
            raises(KeyError, lambda: c["no/such/tensor"])
            raises(TypeError, lambda: c[3])
            emb = c.get_slice("wide_deep/embedding/embedding_weights")
            raises(IndexError, lambda: emb[1000], "out of bounds")
            raises(IndexError, lambda: emb[0, 0, 0], "too many indices")
            assert np.array_equal(emb[::-1], c["wide_deep/embedding/embedding_weights"][::-1])  # as numpy
            # numpy: IndexError for indices of other types; 0-d arrays, numpy integers, None
            # and `...` as numpy takes them.
            raises(IndexError, lambda: emb["a"], "valid indices")
            raises(IndexError, lambda: emb[0.5], "valid indices")
            whole = c["wide_deep/embedding/embedding_weights"]
            for key in [(_np_int(7), 3), (np.array(5), slice(None)), (None, 3), (2, None, slice(1, 4)),
                        (5, 3, Ellipsis), (Ellipsis, None), (slice(None, None, 250), 0)]:
                got, want = emb[key], whole[key]
                assert type(got) is type(want) and np.shape(got) == np.shape(want), (key, got, want)
                assert np.array_equal(got, want), key
            raises(IndexError, lambda: emb[..., ..., 0], "ellipsis")
        closed = tfckpt.open(prefix)
        closed.close()
        raises(ValueError, lambda: closed["wide_deep/vocabulary"], "closed")
        # A damaged byte: the CRC check names the tensor, the file and the check id.
        with tfckpt.open(prefix) as c:
            t = c.info("wide_deep/dnn/logits/kernel")
        data = t.slices[0].data_file
        # Flip a byte inside this tensor's bytes: find its offset through the CLI's JSON.
        import json
        listing = json.loads(cli("inspect", prefix, "--json").stdout)
        entry = next(x for x in listing["tensors"] if x["name"] == t.name)
        offset = entry["slices"][0]["offset"] if "slices" in entry and "offset" in entry["slices"][0] else entry.get("offset")
        assert offset is not None, entry
        with open(data, "r+b") as f:
            f.seek(offset)
            b = f.read(1)
            f.seek(offset)
            f.write(bytes([b[0] ^ 0x10]))
        with tfckpt.open(prefix) as c:
            e = raises(tfckpt.CorruptInputError, lambda: c[t.name])
            assert e.check_id == "data.crc" and e.file == data and e.key == t.name, vars(e)
            c.read(t.name, verify=False)  # the caller may skip the check


@test()
def reads_from_several_threads():
    with tempfile.TemporaryDirectory() as d:
        prefix = example(d)
        with tfckpt.open(prefix) as c:
            names = [n for n in c.keys() if c.info(n).dtype not in ("variant",)]
            want = {n: c[n] for n in names}
            failures = []

            def worker(seed):
                rng = random.Random(seed)
                for _ in range(200):
                    n = rng.choice(names)
                    got = c[n]
                    if got.dtype == object:
                        ok = list(got.flat) == list(want[n].flat)
                    else:
                        ok = np.array_equal(got, want[n])
                    if not ok:
                        failures.append(n)
            threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            assert not failures, failures


@test()
def load_selects_renames_and_casts_like_the_command_line():
    with tempfile.TemporaryDirectory() as d:
        prefix = example(d)
        everything = tfckpt.load(prefix)
        assert "_CHECKPOINTABLE_OBJECT_GRAPH" not in everything
        with tfckpt.open(prefix) as c:
            assert set(everything) == set(c.keys()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
        dnn = tfckpt.load(prefix, include="dnn/", exclude="bias")
        assert len(dnn) == 4 and all("dnn/" in k and "bias" not in k for k in dnn), list(dnn)
        renamed = tfckpt.load(prefix, include="^wide_deep/dnn", rename=r"^wide_deep/(.*)=model.$1")
        assert renamed and all(k.startswith("model.") for k in renamed), list(renamed)
        cast = tfckpt.load(prefix, cast={"float32": "float64"})
        assert all(v.dtype != np.float32 for v in cast.values())
        raises(tfckpt.UsageError, lambda: tfckpt.load(prefix, rename=".*=same"))
        raises(tfckpt.UsageError, lambda: tfckpt.load(prefix, include="("))


@test(needs_data=True)
def load_drops_optimizer_state_like_merge():
    name = "keras_tf2_adam_2shards"
    kept = tfckpt.load(case_path(name), drop_optimizer=True)
    assert kept and not any("OPTIMIZER_SLOT" in k or k.startswith("optimizer/") for k in kept), list(kept)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "m")
        doc = tfckpt.merge(case_path(name), out, drop_optimizer=True)
        assert doc, doc
        with tfckpt.open(out) as m:
            assert set(kept) == set(m.keys()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}


@test()
def commands_return_their_json_and_raise_on_failure():
    with tempfile.TemporaryDirectory() as d:
        prefix = example(d)
        report = tfckpt.validate(prefix)
        assert isinstance(report, dict) and report, report
        st = os.path.join(d, "m.safetensors")
        doc = tfckpt.convert(prefix, st, cast="bfloat16=float32", exclude="vocabulary")
        assert os.path.exists(st) and isinstance(doc, dict)
        e = raises(tfckpt.CorruptInputError, lambda: tfckpt.validate(os.path.join(d, "missing")))
        assert "missing" in str(e)
        raises(tfckpt.UsageError, lambda: tfckpt.reshard(prefix, prefix, partition=["fixed:3"]))
        # validate --against a changed checkpoint fails its check.
        other = os.path.join(d, "o", "model.ckpt")
        tfckpt.reshard(prefix, other, partition=["fixed:2"])
        assert tfckpt.validate(other, against=prefix)
        e = raises(tfckpt.CheckFailedError, lambda: tfckpt.validate(st, against=prefix))
        assert isinstance(e, tfckpt.Error)


def run_python(script, env=None, point=None):
    """/usr/bin/python3 (this interpreter) running `script` with the package on its path;
    with `point`, stopped at that fault point (fault_points.py): (process, None)."""
    full_env = {**os.environ, "PYTHONPATH": PACKAGE_DIR, **(env or {})}
    args = [sys.executable, "-c", script]
    if point is None:
        return subprocess.Popen(args, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    from fault_points import paused_at
    return paused_at(args[0], args[1:], point, env=full_env)


@test()
def ctrl_c_stops_a_command_leaves_nothing_and_the_interpreter_goes_on():
    """Ctrl-C in Python during reshard, merge and convert, at named points of the run: the
    call stops (KeyboardInterrupt), leaves nothing at the output, and the interpreter
    carries on (the same script prints after catching it)."""
    from fault_points import HANG
    import signal
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in", "model")
        subprocess.run([GEN_CHECKPOINT, "tables", src, "4", "4", "4"], check=True, capture_output=True)
        out_dir = os.path.join(d, "out")
        calls = [
            (f"tfckpt.reshard({src!r}, {out_dir + '/m'!r}, partition=['fixed:3'], policy='shards:3')", "piece-written#2"),
            (f"tfckpt.reshard({src!r}, {out_dir + '/m'!r}, partition=['fixed:3'])", "verifying"),
            (f"tfckpt.merge({src!r}, {out_dir + '/m'!r}, drop_optimizer=True)", "piece-written#2"),
            (f"tfckpt.merge({src!r}, {out_dir + '/m'!r})", "data-committed"),
            (f"tfckpt.convert({src!r}, {out_dir + '/m.safetensors'!r})", "piece-written#2"),
            (f"tfckpt.convert({src!r}, {out_dir + '/m.npz'!r})", "npz-written"),
            (f"tfckpt.convert({src!r}, {out_dir + '/m'!r}, cast='float32=bfloat16')", "verifying"),
        ]
        for call, point in calls:
            script = ("import tfckpt\n"
                      f"try:\n    {call}\n    print('finished')\n"
                      "except KeyboardInterrupt:\n    print('interrupted')\n"
                      "print('alive', sum(range(10)))\n")
            p = run_python(script, point=point)
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=HANG)
            assert p.returncode == 0 and out == "interrupted\nalive 45\n", (call, point, p.returncode, out, err)
            assert not os.path.exists(out_dir), (call, point, os.listdir(out_dir))
        # Past the point of no return the call finishes (the output is there, complete), says
        # so, and raises KeyboardInterrupt all the same.
        script = ("import tfckpt\n"
                  f"try:\n    tfckpt.reshard({src!r}, {out_dir + '/m'!r}, partition=['fixed:3'])\n"
                  "except KeyboardInterrupt:\n    print('interrupted')\n")
        p = run_python(script, point="index-committed")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=HANG)
        assert out == "interrupted\n" and "the call was finished instead" in err, (out, err)
        assert tfckpt.validate(out_dir + "/m", against=src)["ok"]


@test()
def two_threads_run_commands_at_once():
    """Two threads validating (and resharding) different checkpoints at once: both reports
    are those each would give alone; nothing is shared between the calls."""
    with tempfile.TemporaryDirectory() as d:
        a = os.path.join(d, "a", "model")
        b = os.path.join(d, "b", "model")
        subprocess.run([GEN_CHECKPOINT, "tables", a, "8", "3", "3"], check=True, capture_output=True)
        subprocess.run([GEN_CHECKPOINT, "tables", b, "4", "5", "2"], check=True, capture_output=True)
        alone = {p: tfckpt.validate(p, jobs=2) for p in (a, b)}
        results, errors = {}, []

        def work(p, k):
            try:
                results[(p, k)] = tfckpt.validate(p, jobs=2)
                out = os.path.join(d, f"out{k}", "m")
                tfckpt.reshard(p, out, partition=["fixed:2"])
                results[(p, k, "reshard")] = tfckpt.validate(out, against=p)["ok"]
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(p, k)) for k, p in enumerate((a, b, a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for k, p in enumerate((a, b, a, b)):
            assert results[(p, k)] == alone[p], (p, results[(p, k)], alone[p])
            assert results[(p, k, "reshard")] is True


@test(needs_data=True)
def object_graph_as_python_data():
    with tfckpt.open(case_path("keras_tf2_adam_2shards")) as c:
        g = c.object_graph()
        assert g["layer-1/kernel"]["VARIABLE_VALUE"] == "layer-1/kernel/.ATTRIBUTES/VARIABLE_VALUE"
        assert any(".OPTIMIZER_SLOT" in path for path in g), list(g)
        for attrs in g.values():
            for key in attrs.values():
                assert key in c or any(k.startswith(key) for k in c.keys()), key
    with tfckpt.open(case_path("estimator_dnn_adam_2shards")) as c:
        assert c.object_graph() is None


@test(needs_data=True)
def review_cases_errors_names_and_dtypes():
    """Errors carry the command line's ids; gaps are errors; names and paths need not be
    UTF-8; load leaves out what numpy cannot hold; casts as convert takes them;
    safetensors reads zero-copy and names its file."""
    import warnings
    make_fixture = os.path.join(os.path.dirname(MAKE_EXAMPLE), "..", "tests", "make_fixture")
    with tempfile.TemporaryDirectory() as d:
        gap = os.path.join(d, "gap")
        subprocess.run([make_fixture, "family", "gap", gap], check=True, capture_output=True)
        with tfckpt.open(gap) as c:
            e = raises(tfckpt.CorruptInputError, lambda: c["model/part/.ATTRIBUTES/VARIABLE_VALUE"], "no stored slice")
            assert e.check_id == "slice.gap" and e.key == "model/part/.ATTRIBUTES/VARIABLE_VALUE", vars(e)
        e = raises(tfckpt.CheckFailedError, lambda: tfckpt.validate(gap))
        assert e.check_id and e.file and e.report["ok"] is False, vars(e)
        e = raises(tfckpt.CorruptInputError, lambda: tfckpt.open(os.path.join(d, "missing")))
        assert e.check_id == "not-found", vars(e)
        # A directory whose name is not UTF-8, and a tensor name that is not either.
        odd = os.path.join(os.fsencode(d), b"dir\xff")
        os.makedirs(odd)
        nu = os.path.join(odd, b"n")
        subprocess.run([make_fixture, "non_utf8", nu], check=True, capture_output=True)
        with tfckpt.open(nu) as c:
            names = c.keys()
            assert any("\udcff" in n for n in names), names
            for n in names:
                c.read(n)
        assert tfckpt.validate(nu)["ok"] is True
        e = raises(tfckpt.UsageError, lambda: tfckpt.convert(nu, os.path.join(d, "x.safetensors")), "UTF-8")
        assert e.check_id == "usage", vars(e)
        print("     the interpreter goes on after a refused command")
        # Variants are left out of load with a warning, like convert leaves them out.
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = tfckpt.load(case_path("tf2_iterator_variant_int32"))
        assert got and any("variant" in str(x.message) for x in w), [str(x.message) for x in w]
        # Casts by the stored dtype, in convert's form too.
        prefix = example(d)
        bf = tfckpt.load(prefix, cast="bfloat16=float16")["wide_deep/dnn/projection_bf16"]
        assert bf.dtype == np.float16
        assert tfckpt.load(prefix, cast=["float32=float64"])["wide_deep/dnn/logits/kernel"].dtype == np.float64
        raises(tfckpt.UsageError, lambda: tfckpt.load(prefix, cast="float32"))
        st = os.path.join(d, "m.safetensors")
        tfckpt.convert(prefix, st, cast={"bfloat16": "float32"}, exclude="vocabulary")
        with tfckpt.open(st, mmap=True) as c:
            t = c.info("wide_deep/dnn/logits/kernel")
            assert t.slices[0].data_file == st, t
            assert not c[t.name].flags.owndata  # a mapping of the file (mmap=True)
        with tfckpt.open(st) as c:
            assert c[t.name].flags.writeable  # the caller's own


@test()
def pytorch_model_from_a_tf_checkpoint():
    """A torch.nn model whose parameters come from a TF checkpoint: load_state_dict(strict=True)
    takes them, and its forward pass equals the same network computed with numpy."""
    torch = torch_or_skip()
    if torch is None:
        return
    with tempfile.TemporaryDirectory() as d:
        prefix = example(d)
        state = tfckpt.load(prefix, include=r"^wide_deep/dnn/(hiddenlayer_\d+|logits)/",
                            rename=[r"^wide_deep/dnn/hiddenlayer_(\d+)/kernel=hidden.$1.weight",
                                    r"^wide_deep/dnn/hiddenlayer_(\d+)/bias=hidden.$1.bias",
                                    r"^wide_deep/dnn/logits/kernel=logits.weight",
                                    r"^wide_deep/dnn/logits/bias=logits.bias"])
        shapes = {k: v.shape for k, v in state.items()}
        assert set(shapes) == {"hidden.0.weight", "hidden.0.bias", "hidden.1.weight", "hidden.1.bias",
                               "logits.weight", "logits.bias"}, shapes

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                # TF Dense kernels are [in, out]; torch.nn.Linear weights [out, in].
                k0, k1, kl = shapes["hidden.0.weight"], shapes["hidden.1.weight"], shapes["logits.weight"]
                self.hidden = torch.nn.ModuleList([torch.nn.Linear(*k0), torch.nn.Linear(*k1)])
                self.logits = torch.nn.Linear(*kl)

            def forward(self, x):
                for layer in self.hidden:
                    x = torch.relu(layer(x))
                return self.logits(x)

        net = Net()
        params = {k: torch.from_numpy(np.ascontiguousarray(v.T) if k.endswith("weight") else np.array(v))
                  for k, v in state.items()}
        result = net.load_state_dict(params, strict=True)
        assert not result.missing_keys and not result.unexpected_keys
        x = np.random.default_rng(7).standard_normal((5, shapes["hidden.0.weight"][0])).astype(np.float32)
        with torch.no_grad():
            got = net(torch.from_numpy(x)).numpy()
        h = x
        for i in range(2):
            h = np.maximum(h @ state[f"hidden.{i}.weight"] + state[f"hidden.{i}.bias"], 0)
        want = h @ state["logits.weight"] + state["logits.bias"]
        assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5), np.abs(got - want).max()


@test()
def help_and_stubs():
    assert "CKPT" in tfckpt.open.__doc__ and "numpy" in tfckpt.load.__doc__
    stub = os.path.join(os.path.dirname(tfckpt.__file__), "__init__.pyi")
    text = open(stub).read()
    for public in tfckpt.__all__:
        assert public in text, public



# Issue 25's API (owned arrays, torch, tfckpt.train, nested=True, Ctrl-C in reads, stubs and
# man pages against the runtime) and issue 28 A7: registered here, run with the above.
import python_api_test  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main("python"))
