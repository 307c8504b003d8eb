#!/usr/bin/env python3
"""CLI tests: run the built tfckpt binary on real and generated checkpoints and check its
output and exit codes. Usage: cli_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE"""

import re

from cli_common import *  # noqa: F401,F403  (run, data, test, TESTS, ... shared by every CLI test file)
from harness import tree_digest


@test()
def help_has_examples_and_usage_errors_exit_2():
    p = run("--help", code=0)
    assert "Examples:" in p.stdout and "inspect" in p.stdout
    p = run("inspect", "--help", code=0)
    assert "Examples:" in p.stdout and "--json" in p.stdout and "--stats" in p.stdout
    p = run("validate", "--help", code=0)
    assert "Examples:" in p.stdout and "--against" in p.stdout and "--strict" in p.stdout
    p = run("reshard", "--help", code=0)
    assert "Examples:" in p.stdout and "--partition" in p.stdout and "--policy" in p.stdout
    p = run("merge", "--help", code=0)
    assert "Examples:" in p.stdout and "--recover" in p.stdout and "--move" in p.stdout
    assert "--drop-optimizer" in p.stdout and "--average" in p.stdout and "--collapse-replicas" in p.stdout
    p = run("convert", "--help", code=0)
    assert "Examples:" in p.stdout and "--cast" in p.stdout and "--max-file-size" in p.stdout
    run(code=2)
    run("inspect", code=2)
    run("inspect", "x", "--no-such-flag", code=2)
    run("frobnicate", code=2)


@test(needs_data=True)
def a_repeatable_option_takes_one_value_and_leaves_the_positional():
    """--partition, --include, --tensor, ... take one value per occurrence: the word after it
    is the positional CKPT again (`reshard -o OUT --partition none CKPT` used to fail, exit 2,
    "CKPT and -o OUT are required": --partition had taken CKPT as a second rule)."""
    with tempfile.TemporaryDirectory() as d:
        src = data("estimator_dnn_adam_2shards/model.ckpt-1000")
        out = os.path.join(d, "r", "m")
        run("reshard", "-o", out, "--partition", "kernel=fixed:2", "--partition", "bias=none", src, "-q", code=0)
        doc = json.loads(run("inspect", out, "--json", code=0).stdout)
        sliced = {t["name"] for t in doc["tensors"] if t.get("slices")}
        assert sliced and all("kernel" in n for n in sliced), sliced
        run("validate", out, "--against", src, code=0)
        p = run("inspect", "--tensor", "global_step", src, code=0)
        assert "global_step" in p.stdout, p.stdout
        p = run("convert", "--include", "^global_step$", src, "-o", os.path.join(d, "g.safetensors"), code=0)
        # Two values after one --tensor: the second is a second positional, a usage error.
        one_error_line(run("inspect", "--tensor", "a", "b", src, code=2), "not expected")


@test()
def j1_means_one_worker_in_every_command():
    """-j 1 is one worker: every command runs its work on the main thread, and the only
    thread it starts is the command line's signal thread (src/cli/interrupts.cc). Counted
    with strace (each clone of the run), not by sampling. BundleWriter took its read-back and
    file-closing threads from the core count (Jobs(0)), whatever -j said (issue 41 item 4)."""
    strace = shutil.which("strace")
    if strace is None:
        assert os.environ.get("CI") != "true", "strace is missing (scripts/install-deps.sh installs it)"
        print("  (no strace: not checked)")
        return
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in", "model")
        subprocess.run([MAKE_EXAMPLE, src], check=True, capture_output=True)
        out = os.path.join(d, "o")
        commands = [["inspect", src, "--stats"], ["validate", src], ["validate", src, "--against", src],
                    ["reshard", src, "-o", out + "/r", "--partition", "fixed:3"], ["merge", src, "-o", out + "/m"],
                    ["merge", src, "-o", out + "/e", "--exclude", "vocabulary"], ["convert", src, "-o", out + "/c"],
                    ["convert", src, "-o", out + "/x.safetensors", "--exclude", "vocabulary"],
                    ["convert", src, "-o", out + "/x.npz", "--cast", "bfloat16=float32"], ["convert", src, "-o", out + "/b", "--cast", "float32=bfloat16"]]
        # (Under ASan: LeakSanitizer cannot work under ptrace, and would start a thread of its own.)
        env = {**os.environ, "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"), "detect_leaks=0"]))}
        for args in commands:
            trace = os.path.join(d, "trace")
            p = subprocess.run([strace, "-f", "-qq", "-e", "trace=clone,clone3", "-o", trace, TFCKPT, *args, "-j", "1"],
                               capture_output=True, text=True, env=env)
            assert p.returncode == 0, (args, p.stderr[-2000:])
            clones = [l for l in open(trace) if re.search(r"\bclone3?\(", l)]
            assert len(clones) == 1, (args[0], args[2:], len(clones), clones)
        # With -j 3 a command starts more (what is counted can exceed one).
        p = subprocess.run([strace, "-f", "-qq", "-e", "trace=clone,clone3", "-o", trace, TFCKPT, "convert", src,
                            "-o", out + "/c3", "-j", "3"], capture_output=True, text=True, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        assert len([l for l in open(trace) if re.search(r"\bclone3?\(", l)]) > 1


@test(needs_data=True)
def every_real_case_lists_and_json_matches():
    for case, count in COUNTS.items():
        path = data(case)
        if case == "v1_session_bundle_sharded_name":
            path = data(case + "/export-00000-of-00001")
        if case == "truncated_data_resnet_savedmodel":
            path = data(case + "/variables")
        # Data missing or short: the listing is printed, then one error line, exit 3;
        # --index-only lists from the index alone.
        bad = case in MALFORMED
        p = run("inspect", path, code=3 if bad else 0)
        header = p.stdout.splitlines()[0]
        assert f"{count} tensors" in header, (case, header)
        if bad:
            one_error_line(p, "--index-only")
            run("inspect", path, "--index-only", code=0)
        j = json.loads(run("inspect", path, "--json", code=3 if bad else 0).stdout)
        assert len(j["tensors"]) == count, case
        assert ("data_file_problems" in j) == bad, case
        assert j["format"] in ("v1", "v2")
        assert j["endianness"] == "little"
        assert j["total_bytes"] == sum(t["bytes"] for t in j["tensors"]), case
        for t in j["tensors"]:
            assert not t["name"].startswith("\x00")
            assert isinstance(t["shape"], list)


@test(needs_data=True)
def json_fields_for_a_v2_checkpoint():
    j = json.loads(run("inspect", data("estimator_linear_ftrl_2shards"), "--json", code=0).stdout)
    assert j["path"].endswith("model.ckpt-5000")
    assert j["format"] == "v2" and j["num_shards"] == 2
    gs = [t for t in j["tensors"] if t["name"] == "global_step"][0]
    assert gs == {"name": "global_step", "dtype": "int64", "shape": [], "bytes": 8, "shard": 0, "offset": 0,
                  "size": 8, "crc32c": gs["crc32c"]}
    assert isinstance(gs["crc32c"], int)


@test(needs_data=True)
def values_of_scalars_strings_and_filters():
    p = run("inspect", data("estimator_dnn_adam_2shards"), "--tensor", "global_step", code=0)
    assert p.stdout.splitlines()[-1] == "1000"
    p = run("inspect", data("savedmodel_tf1_snappy_index/variables"), "--tensor", "a", "--tensor", "b", code=0)
    assert "a float32 []\n0.5\n" in p.stdout and "b float32 []\n2.\n" in p.stdout, p.stdout
    p = run("inspect", data("keras_tf2_adam_2shards"), "--tensor", "_CHECKPOINTABLE_OBJECT_GRAPH", code=0)
    assert p.stdout.splitlines()[1].startswith("b'")
    p = run("inspect", data("estimator_dnn_adam_2shards"), "--filter", "^dnn/logits/", code=0)
    names = [l.split()[0] for l in p.stdout.splitlines()[2:]]
    assert names and all(n.startswith("dnn/logits/") for n in names), names
    p = run("inspect", data("estimator_dnn_adam_2shards"), "--filter", "([", code=2)
    one_error_line(p, "--filter")
    p = run("inspect", data("estimator_dnn_adam_2shards"), "--tensor", "no/such", code=2)
    one_error_line(p, "no/such")


@test(needs_data=True)
def large_tensor_values_are_summarised_like_numpy():
    p = run("inspect", data("v1_traffic_signs_3mb"), "--tensor", "Variable_2", code=0)
    body = p.stdout.splitlines()[1:]
    assert body[0].startswith("[[") and "..." in body[0], body[0]
    assert any(l.strip() == "..." for l in body), body
    rows = [l for l in body if l.startswith(("[[", " ["))]
    assert len(rows) == 6 and len(body) == 13, body  # 3 rows, "...", 3 rows; each wraps at 75 columns
    assert max(len(l) for l in body) <= 75, body
    full = run("inspect", data("v1_traffic_signs_3mb"), "--tensor", "Variable_9", "--all-values", code=0)
    assert "..." not in full.stdout


@test(needs_data=True)
def stats_and_tree():
    p = run("inspect", data("estimator_tfx_adagrad_ftrl"), "--stats", "--filter", "global_step", code=0)
    row = p.stdout.splitlines()[-1].split()
    assert row[0] == "global_step" and row[1] == "1000" and row[2] == "1000", row
    j = json.loads(run("inspect", data("estimator_tfx_adagrad_ftrl"), "--stats", "--json", "--filter",
                       "global_step", code=0).stdout)
    assert j["tensors"][0]["stats"]["min"] == 1000
    p = run("inspect", data("keras_tf2_adam_2shards"), "--tree", code=0)
    assert p.stdout.startswith("(root)\n")
    assert "slot m (optimizer)" in p.stdout and "(not in checkpoint)" not in p.stdout
    p = run("inspect", data("estimator_tfx_adagrad_ftrl"), "--tree", code=0)
    assert "no object graph" in p.stdout
    j = json.loads(run("inspect", data("tf2_iterator_variant_int32"), "--tree", "--json", code=0).stdout)
    assert j["object_graph"][0]["id"] == 0
    assert any(n["path"] == "net/l1/kernel" for n in j["object_graph"])


@test()
def example_checkpoint_partitioned_listing():
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "example", "model.ckpt")
        subprocess.run([MAKE_EXAMPLE, prefix], check=True, capture_output=True)
        p = run("inspect", prefix, code=0)
        lines = p.stdout.splitlines()
        assert "2 data files, 11 tensors" in lines[0], lines[0]
        emb = [l for l in lines if l.startswith("wide_deep/embedding/embedding_weights")]
        assert len(emb) == 1 and emb[0].split()[-1] == "4", emb
        assert "\\x00" not in p.stdout
        j = json.loads(run("inspect", prefix, "--json", code=0).stdout)
        e = [t for t in j["tensors"] if t["name"] == "wide_deep/embedding/embedding_weights"][0]
        assert e["shape"] == [1000, 16] and e["bytes"] == 64000
        # Listed as TF's MergeV2 lists them: by data file, then slice key.
        # The slice strings as stored (explicit extents, as TF's Python savers write them).
        assert [s["spec"] for s in e["slices"]] == ["0,250:0,16", "500,250:0,16", "250,250:0,16", "750,250:0,16"]
        assert [s["shard"] for s in e["slices"]] == [0, 0, 1, 1]
        dt = {t["name"]: t["dtype"] for t in j["tensors"]}
        assert dt["wide_deep/dnn/projection_bf16"] == "bfloat16" and dt["global_step"] == "int64"
        assert dt["wide_deep/vocabulary"] == "string"
        p = run("inspect", prefix, "--tensor", "wide_deep/vocabulary", code=0)
        assert p.stdout.splitlines()[1] == "[b'<unk>' b'the' b'of' b'and' b'to' b'in' b'a' b'is']"
        # Refuses to overwrite.
        r = subprocess.run([MAKE_EXAMPLE, prefix], capture_output=True, text=True)
        assert r.returncode != 0 and "exists" in r.stderr


@test()
def partitioned_values_reassembled():
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "p")
        subprocess.run([MAKE_FIXTURE, "partitioned", prefix], check=True)
        p = run("inspect", prefix, "--tensor", "part", code=0)
        want = ("part float32 [10, 3]\n[[ 0.  1.  2.]\n [ 3.  4.  5.]\n [ 6.  7.  8.]\n [ 9. 10. 11.]\n"
                " [12. 13. 14.]\n [15. 16. 17.]\n [18. 19. 20.]\n [21. 22. 23.]\n [24. 25. 26.]\n"
                " [27. 28. 29.]]\n")
        assert p.stdout.endswith(want), p.stdout
        p = run("inspect", prefix, "--stats", code=0)
        row = p.stdout.splitlines()[-1].split()
        assert row[:5] == ["part", "0", "29", "14.5", "8.65544"], row


@test()
def value_kinds_and_stats_specials():
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "k")
        subprocess.run([MAKE_FIXTURE, "kinds", prefix], check=True)
        out = lambda name: run("inspect", prefix, "--tensor", name, code=0).stdout.splitlines()[1]
        assert out("half") == "[ 1.     -2.      0.3333]", out("half")
        assert out("bf16") == "[1.       3.140625]", out("bf16")
        assert out("flags") == "[ True False  True]"
        assert out("cplx") == "[(1.0+-2.0j)]"
        assert out("specials") == "[nan inf  0.  1.  3.]", out("specials")
        assert out("words") == "[b'plain' b'tab\\x09here\\x01' b'']", out("words")
        assert out("big") == "[   0    1    2 ... 1997 1998 1999]", out("big")
        j = json.loads(run("inspect", prefix, "--stats", "--json", "--filter", "^specials$", code=0).stdout)
        s = j["tensors"][0]["stats"]
        assert (s["nan"], s["inf"], s["zeros"], s["count"]) == (1, 1, 1, 5), s
        assert (s["min"], s["max"]) == (0, 3), s  # finite values only (man tfckpt-inspect)
        assert abs(s["mean"] - 4 / 3) < 1e-12


@test()
def non_utf8_names_keep_json_valid():
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "n")
        subprocess.run([MAKE_FIXTURE, "non_utf8", prefix], check=True)
        p = run("inspect", prefix, "--json", code=0)
        j = json.loads(p.stdout)
        bad = [t for t in j["tensors"] if "name_hex" in t]
        assert len(bad) == 1 and bad[0]["name_hex"] == b"bad\xff\xfe name".hex(), bad
        assert "\ufffd" in bad[0]["name"]
        good = [t for t in j["tensors"] if t["name"] == "good"][0]
        assert "name_hex" not in good
        assert any(t["name"] == 'quote"back\\slash\nnewline\ttab' for t in j["tensors"]), j["tensors"]
        # The text listing escapes control characters instead of breaking lines.
        listing = run("inspect", prefix, code=0).stdout
        assert 'quote\\"back\\\\slash\\x0anewline\\x09tab' in listing, listing


@test(needs_data=True)
def error_missing_data_file():
    p = run("inspect", data("t5x_mtf_bfloat16_missing_shard"), code=3)
    assert "105 tensors" in p.stdout
    one_error_line(p, "data-00001-of-00002: data file missing", "--index-only")
    p = run("inspect", data("t5x_mtf_bfloat16_missing_shard"), "--tensor",
            "decoder/block_000/layer_000/SelfAttention/k", code=3)
    one_error_line(p, "model.ckpt-0.data-00001-of-00002", "missing")
    p = run("inspect", data("index_only_minigo_snappy"), "--stats", code=3)
    one_error_line(p, "minigo.data-00000-of-00001")


@test(needs_data=True)
def error_truncated_data():
    p = run("inspect", data("truncated_data_resnet_savedmodel/variables"), "--tensor", "global_step", code=3)
    one_error_line(p, "variables.data-00000-of-00001", 'key "global_step"', "offset", "past the end")


@test(needs_data=True)
def error_damaged_index_files():
    src = data("savedmodel_tfjs_int64/variables/variables")
    with tempfile.TemporaryDirectory() as d:
        prefix = copy_ckpt(src, d)
        index = prefix + ".index"
        good = open(index, "rb").read()
        # Bad magic.
        flip(index, len(good) - 1)
        one_error_line(run("inspect", prefix, code=3), "variables.index", "magic")
        # Truncated index, at several lengths.
        for n in (0, 10, 47, len(good) // 2, len(good) - 1):
            open(index, "wb").write(good[:n])
            one_error_line(run("inspect", prefix, code=3), "variables.index")
        # Bad block CRC: a byte inside the data block.
        open(index, "wb").write(good)
        flip(index, 20)
        one_error_line(run("inspect", prefix, code=3), "variables.index", "offset 0", "checksum")
        # Every single-byte change is caught or harmless; none crashes or hangs.
        for at in range(len(good)):
            b = bytearray(good)
            b[at] ^= 0xFF
            open(index, "wb").write(b)
            p = run("inspect", prefix, "--json", timeout=20)
            assert p.returncode in (0, 3), (at, p.returncode, p.stderr)
            if p.returncode == 3:
                one_error_line(p)


@test(needs_data=True)
def error_tensor_crc_mismatch_on_read():
    src = data("estimator_linear_ftrl_2shards/model.ckpt-5000")
    with tempfile.TemporaryDirectory() as d:
        prefix = copy_ckpt(src, d)
        j = json.loads(run("inspect", prefix, "--json", code=0).stdout)
        t = [t for t in j["tensors"] if t["name"] == "linear/linear_model/bias_weights"][0]
        datafile = prefix + ".data-%05d-of-00002" % t["shard"]
        flip(datafile, t["offset"] + 1, 0x10)
        p = run("inspect", prefix, "--tensor", t["name"], code=3)
        one_error_line(p, "data-00001-of-00002", 'key "linear/linear_model/bias_weights"',
                       "offset %d" % t["offset"], "checksum mismatch")
        # Listing still works: it does not read values.
        run("inspect", prefix, code=0)


@test()
def error_nonexistent_and_not_a_checkpoint():
    with tempfile.TemporaryDirectory() as d:
        one_error_line(run("inspect", os.path.join(d, "nope"), code=3), "nope")
        one_error_line(run("inspect", d, code=3), "no checkpoint")
        junk = os.path.join(d, "junk")
        open(junk, "wb").write(b"not a table at all" * 10)
        one_error_line(run("inspect", junk, code=3), "junk")
        bad_state = os.path.join(d, "s")
        os.mkdir(bad_state)
        open(os.path.join(bad_state, "checkpoint"), "w").write("model_checkpoint_path: \n")
        one_error_line(run("inspect", bad_state, code=3), "checkpoint")


# ---------------------------------------------------------------------------------------
# validate

MALFORMED = {"index_only_lingvo_snappy": "files.missing-data", "index_only_minigo_snappy": "files.missing-data",
             "t5x_mtf_bfloat16_missing_shard": "files.missing-data",
             "truncated_data_resnet_savedmodel": "entry.bounds"}


def validate_json(*args, code):
    p = run("validate", *args, "--json", code=code)
    j = json.loads(p.stdout)
    assert set(j) >= {"ok", "path", "tensors", "bytes_checked", "errors", "warnings"}, j.keys()
    for f in j["errors"] + j["warnings"]:
        assert set(f) == {"check", "file", "key", "offset", "message"}, f
    assert j["ok"] == (code == 0)
    return j


def checks(j):
    return {e["check"] for e in j["errors"]}


def family(d, variant):
    prefix = os.path.join(d, variant)
    subprocess.run([MAKE_FIXTURE, "family", variant, prefix], check=True)
    return prefix


def mutate(d, mode, src):
    dst = os.path.join(d, "m-" + mode)
    subprocess.run([MAKE_FIXTURE, "mutate", mode, src, dst], check=True)
    return dst


@test(needs_data=True)
def validate_real_cases():
    for case in COUNTS:
        path = data(case + "/variables") if case == "truncated_data_resnet_savedmodel" else data(case)
        if case in MALFORMED:
            j = validate_json(path, code=1)
            assert checks(j) == {MALFORMED[case]}, (case, j["errors"][:3])
        else:
            j = validate_json(path, code=0)
            assert j["errors"] == [], (case, j["errors"])
            assert j["tensors"] == COUNTS[case]
            assert j["bytes_checked"] > 0
    # Text mode: one summary line at the end.
    p = run("validate", data("estimator_dnn_adam_2shards"), code=0)
    assert p.stdout.splitlines()[-1].endswith("66 tensors, 22228 bytes checked: OK"), p.stdout
    # Stale state-file entries are warnings; --strict makes them fail.
    p = run("validate", data("tf2_float64_variant_pinn"), code=0)
    assert "state.stale-entry" in p.stdout
    j = validate_json(data("tf2_float64_variant_pinn"), "--strict", code=1)
    assert checks(j) == {"state.stale-entry"} and j["warnings"] == []
    # --quick reads no data.
    j = validate_json(data("t2t_transformer_2shards"), "--quick", code=0)
    assert j["bytes_checked"] == 0


@test()
def validate_planted_data_defects():
    with tempfile.TemporaryDirectory() as d:
        base = family(d, "base")
        j = validate_json(base, "-j", "2", code=0)
        assert j["errors"] == [] and j["warnings"] == []
        listing = json.loads(run("inspect", base, "--json", code=0).stdout)
        by_name = {t["name"]: t for t in listing["tensors"]}
        part = by_name["model/part/.ATTRIBUTES/VARIABLE_VALUE"]
        step = by_name["model/step/.ATTRIBUTES/VARIABLE_VALUE"]
        words = by_name["model/words/.ATTRIBUTES/VARIABLE_VALUE"]
        second = [x for x in part["slices"] if x["spec"] == "3,3:0,3"][0]
        cases = [
            ("float", second["shard"], second["offset"] + 5, "data.crc",
             "model/part/.ATTRIBUTES/VARIABLE_VALUE", "slice 3,3:-"),
            ("int64", step["shard"], step["offset"] + 7, "data.crc", "model/step/.ATTRIBUTES/VARIABLE_VALUE", ""),
            ("string bytes", words["shard"], words["offset"] + words["size"] - 1, "data.crc",
             "model/words/.ATTRIBUTES/VARIABLE_VALUE", ""),
            ("string lengths", words["shard"], words["offset"], "data.string-lengths",
             "model/words/.ATTRIBUTES/VARIABLE_VALUE", ""),
        ]
        for what, shard, offset, check, key, label in cases:
            with tempfile.TemporaryDirectory() as e:
                prefix = copy_ckpt(base, e)
                flip(prefix + ".data-%05d-of-00002" % shard, offset)
                j = validate_json(prefix, code=1)
                assert checks(j) == {check}, (what, j["errors"])
                err = j["errors"][0]
                assert err["key"] == key and err["file"].endswith(".data-%05d-of-00002" % shard), (what, err)
                assert label in err["message"], (what, err)
                # --quick skips data and passes.
                validate_json(prefix, "--quick", code=0)
        # A truncated data file, a missing data file.
        with tempfile.TemporaryDirectory() as e:
            prefix = copy_ckpt(base, e)
            f = prefix + ".data-00001-of-00002"
            os.truncate(f, os.path.getsize(f) // 2)
            assert checks(validate_json(prefix, code=1)) == {"entry.bounds"}
            os.remove(f)
            j = validate_json(prefix, code=1)
            assert checks(j) == {"files.missing-data"}, j["errors"]
            one_error_line(run("validate", prefix, "--tensor", code=2))  # usage: unknown option
        # A flipped byte in the index's data block.
        with tempfile.TemporaryDirectory() as e:
            prefix = copy_ckpt(base, e)
            flip(prefix + ".index", 30)
            j = validate_json(prefix, code=1)
            assert "table.block-crc" in checks(j), j["errors"]
            assert any(x["offset"] == 0 and x["file"].endswith(".index") for x in j["errors"])


def run_measured(*args):
    """Runs tfckpt; returns (exit code or -signal, stderr, peak RSS in KiB of that child)."""
    p = subprocess.Popen([TFCKPT, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, err, usage.ru_maxrss


@test()
def untrusted_sizes_give_errors_not_allocations():
    """Element counts that overflow, billions of elements behind 8 bytes, a slice list of
    two million entries: every command answers at once with small memory."""
    with tempfile.TemporaryDirectory() as d:
        base = family(d, "base")
        for mode in ("huge-shape", "billions", "many-slices"):
            bad = mutate(d, mode, base)
            for args in (["inspect", bad, "--json"], ["validate", bad],
                         ["inspect", bad, "--tensor", "model/part/.ATTRIBUTES/VARIABLE_VALUE"],
                         ["reshard", bad, "-o", os.path.join(d, "o-" + mode), "--partition", "fixed:2"],
                         ["merge", bad, "-o", os.path.join(d, "mo-" + mode), "--drop-optimizer"],
                         ["convert", bad, "-o", os.path.join(d, mode + ".npz")]):
                code, err, rss_kib = run_measured(*args)
                assert code in (0, 1, 3), (mode, args, code, err)
                assert rss_kib < 512 * 1024, (mode, args, rss_kib)
                if code == 3:
                    assert len(err.strip().splitlines()) == 1, (mode, args, err)
                if args[0] in ("reshard", "merge", "convert"):
                    assert code == 3, (mode, args, code, err)
            j = validate_json(bad, code=1)
            assert checks(j) & {"entry.shape", "entry.size", "entry.slices"}, (mode, j["errors"][:2])


@test()
def a_damaged_num_shards_is_refused_the_same_way_everywhere():
    """A header counting 2^31 - 1 or -1 data files, or an entry naming the file past the
    header's count: every command refuses it with the bundle reader's check and message
    (merge reads its inputs through the reader too), in one line, at once."""
    with tempfile.TemporaryDirectory() as d:
        base = family(d, "base")
        other = os.path.join(d, "kinds")  # other names than base's: merged with it, no conflict
        subprocess.run([MAKE_FIXTURE, "kinds", other], check=True)

        def refused(args, code=3):
            p = run(*args, code=code, timeout=60)
            assert len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
            return p.stderr.strip().split(": error: ", 1)[1]

        def replace_index(prefix, mode):
            """prefix.index becomes its `mode` mutation (make_fixture mutate)."""
            subprocess.run([MAKE_FIXTURE, "mutate", mode, prefix, prefix + "-mutated"], check=True)
            os.replace(prefix + "-mutated.index", prefix + ".index")

        def nothing_written():
            assert not [n for n in os.listdir(d) if n.startswith(("r.", "m."))], os.listdir(d)

        reshard = ["--partition", "none", "--policy", "single"]
        for mode, count in (("huge-num-shards", 2147483647), ("negative-num-shards", -1)):
            bad = mutate(d, mode, base)
            want = "%s.index: offset 0: header has implausible num_shards %d" % (bad, count)
            assert refused(["inspect", bad]) == want
            assert refused(["reshard", bad, "-o", os.path.join(d, "r"), *reshard]) == want
            assert refused(["merge", other, bad, "-o", os.path.join(d, "m")]) == want
            assert refused(["merge", bad, "-o", os.path.join(d, "m"), "--no-verify"]) == want
            e = validate_json(bad, code=1)["errors"][0]
            assert (e["check"], e["file"], e["offset"]) == ("header.num-shards", bad + ".index", 0), e
            assert want.endswith(": " + e["message"]), e
            nothing_written()
            # An unmerged save with such a part (merge --recover), a scale-out task's part (--finalize).
            saved = os.path.join(d, "saved-" + mode)
            subprocess.run([MAKE_FIXTURE, "distributed", saved], check=True)
            part = os.path.join(saved + "_temp", "part-00001-of-00003")
            replace_index(part, mode)
            assert refused(["merge", "--recover", saved]) == want.replace(bad, part)
            assert not os.path.exists(saved + ".index")
            out, plan = os.path.join(d, "so-" + mode), os.path.join(d, "plan-%s.json" % mode)
            run("reshard", base, "-o", out, "--partition", "fixed:3", "--policy", "shards:3", "--plan", plan, code=0)
            for task in range(3):
                run("reshard", "--execute", plan, "--task", str(task), code=0)
            part = json.load(open(plan))["tasks"][1]["part"]
            replace_index(part, mode)
            assert refused(["reshard", "--finalize", plan]) == want.replace(bad, part)
            assert not os.path.exists(out + ".index")

        bad = mutate(d, "shard-past", base)
        name = "model/part/.ATTRIBUTES/VARIABLE_VALUE"
        what = 'entry "%s slice 0,3:-" names data file 2 but the header has 2' % name
        want = '%s.index: key "%s": %s' % (bad, name, what)
        assert refused(["inspect", bad, "--tensor", name]) == want
        assert refused(["merge", other, bad, "-o", os.path.join(d, "m")]) == want
        assert refused(["merge", bad, "-o", os.path.join(d, "m"), "--no-verify"]) == want
        assert refused(["reshard", bad, "-o", os.path.join(d, "r"), *reshard]) == \
            '%s: key "%s": %s (run tfckpt validate)' % (bad, name, what)
        j = validate_json(bad, code=1)
        assert [(e["check"], e["file"], e["key"], e["message"]) for e in j["errors"]] == [
            ("entry.shard", bad + ".index", name, what)], j["errors"]
        nothing_written()


@test()
def a_listing_names_each_tensor_that_cannot_be_read():
    """Plain inspect reads no payload and exits 0, but says once, on stderr, which tensors
    cannot be read and why (as --json says in "defect"); a clean listing says nothing."""
    with tempfile.TemporaryDirectory() as d:
        base = family(d, "base")
        p = run("inspect", base)
        assert p.stderr == "", p.stderr
        bad = mutate(d, "size", base)
        p = run("inspect", bad, code=0)
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith('tfckpt inspect: note: tensor "'), p.stderr
        assert "cannot be read" in lines[0] and "(entry.size; run tfckpt validate)" in lines[0], lines
        defective = [t for t in json.loads(run("inspect", bad, "--json").stdout)["tensors"] if t.get("defect")]
        assert len(defective) == 1 and '"%s"' % defective[0]["name"] in lines[0], (defective, lines)


@test()
def validate_planted_index_and_layout_defects():
    with tempfile.TemporaryDirectory() as d:
        base = family(d, "base")
        for prefix, want in [
            (mutate(d, "drop-slice", base), {"slice.missing-entry", "slice.gap"}),
            (mutate(d, "size", base), {"entry.size"}),
            (mutate(d, "dtype", base), {"entry.dtype"}),
            (mutate(d, "num-shards", base), {"header.num-shards", "files.missing-data"}),
            (family(d, "overlap"), {"slice.overlap"}),
            (family(d, "gap"), {"slice.gap"}),
            (family(d, "badgraph"), {"graph.missing-key"}),
        ]:
            j = validate_json(prefix, code=1)
            assert checks(j) == want, (prefix, j["errors"])
        # Two entries sharing bytes: a warning (TF never writes that), values still check.
        j = validate_json(mutate(d, "alias", base), code=0)
        assert [w["check"] for w in j["warnings"]] == ["entry.overlap"], j["warnings"]
        assert "slice 3,3:-" in j["warnings"][0]["message"]
        j = validate_json(os.path.join(d, "gap"), code=1)
        assert "[3, 0]" in j["errors"][0]["message"], j["errors"]
        j = validate_json(os.path.join(d, "badgraph"), code=1)
        assert j["errors"][0]["key"] == "model/missing/.ATTRIBUTES/VARIABLE_VALUE"
        assert [w["check"] for w in j["warnings"]] == ["graph.unreferenced"]
        # Debris of interrupted saves is a warning.
        open(base + ".data-00000-of-00001.tempstate123", "wb").close()
        os.makedirs(base + "_temp")
        open(os.path.join(base + "_temp", "part-00000-of-00001.index"), "wb").close()
        j = validate_json(base, code=0)
        assert [w["check"] for w in j["warnings"]] == ["files.debris", "files.debris"], j["warnings"]
        validate_json(base, "--strict", code=1)


@test()
def validate_against():
    with tempfile.TemporaryDirectory() as d:
        base = family(d, "base")
        for v in ("resliced", "whole"):
            j = validate_json(family(d, v), "--against", base, code=0)
            assert j["errors"] == [] and j["bytes_checked"] > 0
        validate_json(base, "--against", os.path.join(d, "resliced"), code=0)
        want = {
            "changed": ("against.values", "model/part/.ATTRIBUTES/VARIABLE_VALUE",
                        "1 of 30 elements differ; first at [7, 1]: new 99.5, old 22.0"),
            "removed": ("against.removed", "model/words/.ATTRIBUTES/VARIABLE_VALUE", "is missing"),
            "added": ("against.added", "model/extra/.ATTRIBUTES/VARIABLE_VALUE", "not in the old checkpoint"),
            "dtype": ("against.dtype", "model/step/.ATTRIBUTES/VARIABLE_VALUE", "from int64 to int32"),
            "shape": ("against.shape", "model/words/.ATTRIBUTES/VARIABLE_VALUE", "from [3] to [1, 3]"),
            "overlap": ("slice.overlap", "model/part/.ATTRIBUTES/VARIABLE_VALUE", "overlap"),
        }
        for v, (check, key, text) in want.items():
            j = validate_json(family(d, v), "--against", base, code=1)
            assert [e["check"] for e in j["errors"]] == [check], (v, j["errors"])
            assert j["errors"][0]["key"] == key and text in j["errors"][0]["message"], (v, j["errors"])
        changed = os.path.join(d, "changed")
        validate_json(changed, "--against", base, "--tolerance", "100", code=0)
        validate_json(changed, "--against", base, "--tolerance", "1", code=1)
        one_error_line(run("validate", base, "--tolerance", "1", code=2), "--against")
        p = run("validate", changed, "--against", base, code=1)
        assert "against.values" in p.stdout and p.stdout.splitlines()[-1].endswith("FAILED (1 error)")
        # A damaged byte on either side is a checksum error (CRCs are computed on the bytes
        # the comparison reads), not a value difference.
        for side in ("new", "old"):
            new, old = family(d, "n-" + side), family(d, "o-" + side)
            victim = new if side == "new" else old
            t = next(t for t in inspect_json(victim)["tensors"] if t["name"] == "model/part/.ATTRIBUTES/VARIABLE_VALUE")
            s = t["slices"][-1]
            flip(victim + ".data-%05d-of-00002" % s["shard"], s["offset"] + 2)
            j = validate_json(new, "--against", old, code=1)
            assert [e["check"] for e in j["errors"]] == ["data.crc"], (side, j["errors"])
            assert j["errors"][0]["key"] == "model/part/.ATTRIBUTES/VARIABLE_VALUE", (side, j["errors"])


@test(needs_data=True)
def validate_against_real_and_unreadable():
    # A real checkpoint against itself (by another path), and against another step.
    validate_json(data("estimator_dnn_adam_2shards/model.ckpt-1000"), "--against",
                  data("estimator_dnn_adam_2shards"), code=0)
    j = validate_json(data("estimator_dnn_adam_2shards/model.ckpt-0"), "--against",
                      data("estimator_dnn_adam_2shards/model.ckpt-1000"), code=1)
    assert checks(j) == {"against.values"}
    one_error_line(run("validate", "/nonexistent/ckpt", code=3), "/nonexistent/ckpt")
    one_error_line(run("validate", data("keras_tf2_adam_2shards"), "--against", "/nonexistent/x", code=3))


# ---------------------------------------------------------------------------------------
# reshard


@test()
def reshard_round_trip_dry_run_and_json():
    with tempfile.TemporaryDirectory() as d:
        base = family(d, "base")
        out = os.path.join(d, "out", "f3")
        p = run("reshard", base, "-o", out, "--partition", "fixed:3", "--dry-run", code=0)
        assert "0,3:- 3,3:- 6,2:- 8,2:- -> 0,4:- 4,3:- 7,3:-" in p.stdout, p.stdout
        assert not os.path.exists(out + ".index")  # a dry run writes nothing
        j = json.loads(run("reshard", base, "-o", out, "--partition", "fixed:3", "--dry-run", "--json",
                           code=0).stdout)
        part = [t for t in j["tensors"] if t["name"] == "model/part/.ATTRIBUTES/VARIABLE_VALUE"][0]
        assert [n["spec"] for n in part["new"]] == ["0,4:0,3", "4,3:0,3", "7,3:0,3"]
        assert [n["file"] for n in part["new"]] == [0, 1, 0]
        assert part["resliced"] and part["rule"] == "fixed:3"
        assert j["num_files"] == 2 and len(j["files"]) == 2
        p = run("reshard", base, "-o", out, "--partition", "fixed:3", code=0)
        assert "verified against the input" in p.stdout
        assert p.stderr == ""  # no progress bar when stderr is not a terminal
        t = [t for t in json.loads(run("inspect", out, "--json", code=0).stdout)["tensors"]
             if t["name"].startswith("model/part")][0]
        # Listed as TF's MergeV2 lists them: by data file, then slice key.
        assert [(s["spec"], s["shard"]) for s in t["slices"]] == [("0,4:0,3", 0), ("7,3:0,3", 0), ("4,3:0,3", 1)], t
        # Columns, then back to one whole tensor in one file: equal to the start.
        cols = os.path.join(d, "cols")
        run("reshard", out, "-o", cols, "--partition", "part=fixed:3@1", "--policy", "shards:3", code=0)
        whole = os.path.join(d, "whole")
        j = json.loads(run("reshard", cols, "-o", whole, "--partition", "none", "--policy", "single", "--json",
                           code=0).stdout)
        assert j["verified"] and j["num_files"] == 1
        validate_json(whole, "--against", base, code=0)
        # DTensor layout by TF's layout string; max-shard-size policy.
        lay = os.path.join(d, "lay")
        run("reshard", base, "-o", lay, "--partition",
            "part=sharding_specs:x,unsharded, mesh:|x=2,y=2|0,1,2,3|0,1,2,3|/job:localhost/task:0/device:CPU:0",
            code=0)
        t = [t for t in json.loads(run("inspect", lay, "--json", code=0).stdout)["tensors"]
             if t["name"].startswith("model/part")][0]
        assert [s["spec"] for s in t["slices"]] == ["0,5:-", "5,5:-"]  # DTensor's "-" for the unsharded axis
        small = os.path.join(d, "small")
        j = json.loads(run("reshard", base, "-o", small, "--policy", "max-shard-size:64", "--json", code=0).stdout)
        # Fixed-size pieces stay within 64 bytes a file (TF counts the object graph, and we
        # count strings, by their string bytes only).
        per_file = {}
        for t in j["tensors"]:
            if t["dtype"] in ("string", "variant"):
                continue
            for n in t["new"]:
                per_file[n["file"]] = per_file.get(n["file"], 0) + n["bytes"]
        assert j["num_files"] > 2 and max(per_file.values()) <= 64, (per_file, j["files"])
        validate_json(small, "--against", base, code=0)


@test()
def reshard_refusals():
    with tempfile.TemporaryDirectory() as d:
        base = family(d, "base")
        out = os.path.join(d, "out")
        run("reshard", base, "-o", out, "--partition", "fixed:2", code=0)
        # An existing output without --force.
        one_error_line(run("reshard", base, "-o", out, "--partition", "fixed:3", code=2), "exists", "--force")
        run("reshard", base, "-o", out, "--partition", "fixed:3", "--force", code=0)
        assert len([f for f in os.listdir(d) if f.startswith("out.data-")]) == 2
        # OUT equal to the input, by the same or another spelling, even with --force.
        one_error_line(run("reshard", base, "-o", base, "--force", code=2), "input")
        one_error_line(run("reshard", base, "-o", os.path.join(d, ".", "base"), "--force", code=2), "input")
        # An indivisible DTensor layout names the tensor.
        one_error_line(run("reshard", base, "-o", os.path.join(d, "l"), "--partition", "layout:x,unsharded@x=3",
                           code=2), "model/part/.ATTRIBUTES/VARIABLE_VALUE", "cannot be cut into 3")
        # A policy that cannot fit an element.
        one_error_line(run("reshard", base, "-o", os.path.join(d, "m"), "--policy", "max-shard-size:2", code=2),
                       "max-shard-size:2")
        # A REGEX that matches nothing; bad specs and policies.
        one_error_line(run("reshard", base, "-o", os.path.join(d, "r"), "--partition", "nomatch=fixed:2", code=2),
                       "matches no tensor")
        one_error_line(run("reshard", base, "-o", os.path.join(d, "r"), "--partition", "fixed:0", code=2))
        one_error_line(run("reshard", base, "-o", os.path.join(d, "r"), "--policy", "shards:0", code=2))
        # Nothing was left behind by the refusals.
        assert not any(n.startswith(("l.", "m.", "r.")) or ".tmp-tfckpt-" in n for n in os.listdir(d)), os.listdir(d)


@test()
def reshard_checks_source_crcs_while_copying():
    # Even with --no-verify, bytes read from a damaged stored piece are caught by the CRC
    # computed as they are copied: cuts on axis 1 (all pieces of a tensor gathered in one
    # pass), on axis 0, and unpartitioning; exit 3, one line, nothing left.
    with tempfile.TemporaryDirectory() as d:
        o = lambda name: os.path.join(d, name)
        src = o("partitioned")
        subprocess.run([MAKE_FIXTURE, "partitioned", src], check=True)
        for spec in ("fixed:3@1", "fixed:3", "none"):
            run("reshard", src, "-o", o("ok" + spec), "--partition", spec, "--no-verify", code=0)
            validate_json(o("ok" + spec), "--against", src, code=0)
        flip(src + ".data-00001-of-00002", 10)
        for spec in ("fixed:3@1", "fixed:3", "none"):
            p = run("reshard", src, "-o", o("bad"), "--partition", spec, "--no-verify", code=3)
            one_error_line(p, "checksum mismatch", "part")
            assert not [n for n in os.listdir(d) if n.startswith("bad")], os.listdir(d)


@test()
def reshard_scale_out_plan_execute_finalize():
    with tempfile.TemporaryDirectory() as d:
        base = family(d, "base")
        opts = ["--partition", "fixed:3", "--policy", "shards:3"]
        run("reshard", base, "-o", os.path.join(d, "single"), *opts, "-q", code=0)
        out = os.path.join(d, "so")
        plan = os.path.join(d, "plan.json")
        p = run("reshard", base, "-o", out, *opts, "--plan", plan, code=0)
        assert "3 tasks" in p.stdout and not os.path.exists(out + ".index")
        doc = json.load(open(plan))
        assert doc["num_tasks"] == 3 and len(doc["tasks"]) == 3
        assert doc["source"]["index"]["crc32c"] > 0
        e = doc["tasks"][0]["entries"][0]
        assert set(e) >= {"name", "slice", "dtype", "shape", "offset", "size", "copies"}
        assert {"src_file", "src_offset", "region", "range"} <= set(e["copies"][0])
        # Deterministic: the same inputs give the same bytes.
        run("reshard", base, "-o", out, *opts, "--plan", plan + "2", code=0)
        assert open(plan, "rb").read() == open(plan + "2", "rb").read()
        # Usage: --task needs --execute and vice versa; a task out of range.
        one_error_line(run("reshard", "--task", "0", code=2), "--task goes with --execute")
        one_error_line(run("reshard", "--execute", plan, code=2), "--task")
        one_error_line(run("reshard", "--execute", plan, "--task", "3", code=2), "out of range")
        env = {k: v for k, v in os.environ.items()
               if k not in ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "TASK_INDEX")}
        one_error_line(subprocess.run([TFCKPT, "reshard", "--execute", plan, "--task", "auto"], env=env,
                                      capture_output=True, text=True), "SLURM_ARRAY_TASK_ID")
        # Task 0 by number; --task auto: SLURM_ARRAY_TASK_ID first, then JOB_COMPLETION_INDEX.
        run("reshard", "--execute", plan, "--task", "0", code=0)
        p = subprocess.run([TFCKPT, "reshard", "--execute", plan, "--task", "auto", "--json"],
                           env=dict(env, SLURM_ARRAY_TASK_ID="2", TASK_INDEX="0"), capture_output=True, text=True)
        assert p.returncode == 0 and json.loads(p.stdout)["task"] == 2, p.stderr
        # A missing task: finalize refuses and names it.
        one_error_line(run("reshard", "--finalize", plan, code=2), "tasks have not finished: 1 (")
        p = subprocess.run([TFCKPT, "reshard", "--execute", plan, "--task", "auto"],
                           env=dict(env, JOB_COMPLETION_INDEX="1"), capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        # Re-running a task gives the same bytes (idempotent).
        part = doc["tasks"][1]["part"]
        first = open(part + ".data-00000-of-00001", "rb").read()
        run("reshard", "--execute", plan, "--task", "1", code=0)
        assert open(part + ".data-00000-of-00001", "rb").read() == first
        run("reshard", "--finalize", plan, code=0)
        assert not os.path.exists(out + "_temp")
        for suffix in [".index"] + [".data-%05d-of-00003" % i for i in range(3)]:
            assert open(out + suffix, "rb").read() == open(os.path.join(d, "single") + suffix, "rb").read(), suffix
        # A source changed since planning: execute refuses.
        plan2 = os.path.join(d, "plan2.json")
        run("reshard", base, "-o", os.path.join(d, "so2"), *opts, "--plan", plan2, code=0)
        os.utime(base + ".data-00000-of-00002", ns=(0, 0))
        one_error_line(run("reshard", "--execute", plan2, "--task", "0", code=2), "source changed since planning",
                       "data-00000-of-00002")


@test()
def reshard_progress_bar_only_on_a_terminal():
    with tempfile.TemporaryDirectory() as d:
        base = family(d, "base")
        env = dict(os.environ, TFCKPT_PROGRESS_DELAY_MS="0")
        code, err = run_with_tty_stderr(["reshard", base, "-o", os.path.join(d, "a"), "--partition", "fixed:3"], env)
        assert code == 0 and "ETA" in err and "[" in err and "/s" in err, repr(err)
        code, err = run_with_tty_stderr(["reshard", base, "-o", os.path.join(d, "b"), "--partition", "fixed:3", "-q"],
                                        env)
        assert code == 0 and err == "", repr(err)
        # Work shorter than the bar's delay shows nothing (an hour here: on a loaded machine
        # the default second may pass).
        code, err = run_with_tty_stderr(["reshard", base, "-o", os.path.join(d, "c"), "--partition", "fixed:3"],
                                        dict(os.environ, TFCKPT_PROGRESS_DELAY_MS="3600000"))
        assert code == 0 and err == "", repr(err)


@test(needs_data=True)
def reshard_real_checkpoints():
    with tempfile.TemporaryDirectory() as d:
        for case in ("t2t_transformer_2shards", "tf2_float64_variant_pinn", "v1_traffic_signs_3mb"):
            out = os.path.join(d, case)
            p = run("reshard", data(case), "-o", out, "--partition", ".*=fixed:3", "--policy", "shards:3",
                    "-j", "2", code=0)
            assert "verified against the input" in p.stdout, p.stdout
            validate_json(out, code=0)
            validate_json(out, "--against", data(case), code=0)


# ---------------------------------------------------------------------------------------
# merge


@test()
def merge_recover_distributed_save():
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "model.ckpt-7")
        subprocess.run([MAKE_FIXTURE, "distributed", prefix], check=True)
        open(os.path.join(d, "model.ckpt-7_temp", "part-00001-of-00003.data-00000-of-00001.tempstate99"), "wb").close()
        before = tree_digest(d)
        p = run("merge", "--recover", prefix, code=0)
        assert "found 3 parts" in p.stdout and "validated" in p.stdout, p.stdout
        validate_json(prefix, "--against", prefix + "_single", code=0)
        j = json.loads(run("inspect", prefix, "--json", code=0).stdout)
        assert j["num_shards"] == 3
        shard = {t["name"]: t.get("shard") for t in j["tensors"]}
        assert shard["global_step"] == 0 and shard["bias_0"] == 0 and shard["bias_1"] == 1 and shard["bias_2"] == 2
        emb = [t for t in j["tensors"] if t["name"] == "emb"][0]
        assert [(s["spec"], s["shard"]) for s in emb["slices"]] == [("0,3:0,2", 0), ("3,3:0,2", 1), ("6,3:0,2", 2)]
        # Inputs untouched without --move; validate calls the parts merged (not "unmerged ...
        # can finish it") and says how to be rid of them.
        debris = [f for f in validate_json(prefix, code=0)["warnings"] if f["check"] == "files.debris" and "part-" in f["file"]]
        assert len(debris) >= 3 and all("merged into" in f["message"] and "--move" in f["message"] and
                                        "unmerged" not in f["message"] for f in debris), debris
        after = tree_digest(d)
        assert {k: v for k, v in after.items() if k in before} == before
        # With --move: TensorFlow's behaviour, the temporary directory goes away.
        prefix2 = os.path.join(d, "again")
        subprocess.run([MAKE_FIXTURE, "distributed", prefix2], check=True)
        run("merge", "--recover", prefix2, "--move", code=0)
        assert not os.path.exists(prefix2 + "_temp"), os.listdir(prefix2 + "_temp")
        validate_json(prefix2, "--against", prefix2 + "_single", code=0)


@test()
def merge_refusals_and_options():
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "m")
        subprocess.run([MAKE_FIXTURE, "distributed", prefix], check=True)
        parts = [os.path.join(d, "m_temp", "part-%05d-of-00003" % i) for i in range(3)]
        # A missing part is named; a missing input without --allow-missing is an error.
        os.rename(parts[1] + ".index", parts[1] + ".index.away")
        one_error_line(run("merge", "--recover", prefix, code=3), "part 00001-of-00003", "missing")
        one_error_line(run("merge", *parts, "-o", os.path.join(d, "x"), code=3), "part-00001-of-00003.index")
        # Skipping it leaves a gap in "emb": the output does not validate (exit 1).
        p = run("merge", *parts, "-o", os.path.join(d, "x"), "--allow-missing", code=1)
        assert "slice.gap" in p.stderr, p.stderr
        os.rename(parts[1] + ".index.away", parts[1] + ".index")
        nope = os.path.join(d, "nope")
        j = json.loads(run("merge", *parts, nope, "-o", os.path.join(d, "z"), "--allow-missing", "--json",
                           code=0).stdout)
        assert j["skipped"] == [nope] and j["num_files"] == 3 and j["verified"], j
        # The same unpartitioned tensor in two inputs names both.
        one_error_line(run("merge", parts[0], parts[0], "-o", os.path.join(d, "dup"), code=2),
                       'slice 0,3:0,2 of tensor "emb" is in both', parts[0])
        # An existing output; an output equal to an input.
        run("merge", *parts, "-o", os.path.join(d, "y"), code=0)
        one_error_line(run("merge", *parts, "-o", os.path.join(d, "y"), code=2), "exists", "--force")
        run("merge", *parts, "-o", os.path.join(d, "y"), "--force", code=0)
        one_error_line(run("merge", *parts, "-o", parts[2], code=2), "one of the inputs")
        # Nothing to recover.
        one_error_line(run("merge", "--recover", os.path.join(d, "nothing"), code=3), "no parts")


def inspect_json(prefix):
    return json.loads(run("inspect", prefix, "--json", code=0).stdout)


def names_of(prefix):
    return {t["name"] for t in inspect_json(prefix)["tensors"]}


def values_text(prefix, name):
    p = run("inspect", prefix, "--tensor", name, "--all-values", code=0)
    return p.stdout.split("\n", 1)[1].strip()


# Independent of the implementation's rule: words that only optimizer state carries in
# these checkpoints.
OPTIMIZER_WORDS = ("OPTIMIZER_SLOT", "/Adam", "Ftrl", "Adagrad", "beta1_power", "beta2_power")


def is_optimizer_name(n):
    return n.startswith("optimizer/") or any(w in n for w in OPTIMIZER_WORDS)


@test(needs_data=True)
def merge_drop_optimizer_on_real_checkpoints():
    cases = ["keras_tf2_adam_2shards/model.ckpt", "empty_prefix_keras", "savedmodel_keras_tfx_slots/variables",
             "estimator_dnn_adam_2shards/model.ckpt-1000", "estimator_linear_ftrl_2shards/model.ckpt-5000",
             "estimator_tfx_adagrad_ftrl/model.ckpt-1000", "t2t_transformer_2shards/model.ckpt-1",
             "v1_vocal_autoencoder_multiblock/model.ckpt", "tf2_iterator_variant_int32/ckpt-40"]
    with tempfile.TemporaryDirectory() as d:
        for i, case in enumerate(cases):
            src = data(case)
            out = os.path.join(d, "o%d" % i)
            before = names_of(src)
            p = run("merge", src, "-o", out, "--drop-optimizer", code=0)
            after = names_of(out)
            dropped = before - after
            assert dropped and all(is_optimizer_name(n) for n in dropped), (case, sorted(dropped))
            kept_optimizer = [n for n in after if is_optimizer_name(n)]
            assert not kept_optimizer, (case, kept_optimizer)
            assert "dropped %d optimizer tensors" % len(dropped) in p.stdout, p.stdout
            # Valid, object graph included (no graph.* finding at all), and everything
            # else identical to the input.
            v = validate_json(out, code=0)
            assert not [f for f in v["errors"] + v["warnings"] if f["check"].startswith("graph.")], (case, v)
            j = validate_json(out, "--against", src, code=1)
            removed = {e["key"] for e in j["errors"] if e["check"] == "against.removed"}
            assert removed == dropped, (case, removed ^ dropped)
            others = [e for e in j["errors"] if e["check"] != "against.removed" and
                      e["key"] != "_CHECKPOINTABLE_OBJECT_GRAPH"]
            assert not others, (case, others)
        # The Keras case in detail: slots and optimizer objects gone, the graph has no
        # slot references left, and the optimizer's nodes keep no attributes.
        j = json.loads(run("merge", data(cases[0]), "-o", os.path.join(d, "k"), "--drop-optimizer", "--json",
                           code=0).stdout)
        assert j["dropped"]["optimizer"] == 13 and j["dropped"]["optimizer_bytes"] > 0, j["dropped"]
        assert j["object_graph"]["attributes_removed"] == 13 and j["object_graph"]["slot_references_removed"] == 8, j
        tree = run("inspect", os.path.join(d, "k"), "--tree", code=0).stdout
        assert "slot" not in tree and "layer-1/kernel/.ATTRIBUTES/VARIABLE_VALUE" in tree, tree


@test()
def merge_conflicts_filters_renames():
    with tempfile.TemporaryDirectory() as d:
        base, changed = family(d, "base"), family(d, "changed")
        o = lambda name: os.path.join(d, name)
        one_error_line(run("merge", base, changed, "-o", o("x"), "--on-conflict", "error", code=2),
                       'tensor "model/part/.ATTRIBUTES/VARIABLE_VALUE" is in both', base, changed)
        assert not os.path.exists(o("x.index"))
        run("merge", base, changed, "-o", o("first"), "--on-conflict", "first", code=0)
        validate_json(o("first"), "--against", base, code=0)
        run("merge", base, changed, "-o", o("last"), "--on-conflict", "last", code=0)
        validate_json(o("last"), "--against", changed, code=0)
        # Filters: the graph follows (attributes of dropped tensors removed, still valid).
        j = json.loads(run("merge", base, "-o", o("inc"), "--include", "part", "--json", code=0).stdout)
        assert j["dropped"]["filtered"] == 2 and j["object_graph"]["attributes_removed"] == 2, j
        assert names_of(o("inc")) == {"_CHECKPOINTABLE_OBJECT_GRAPH", "model/part/.ATTRIBUTES/VARIABLE_VALUE"}
        v = validate_json(o("inc"), code=0)
        assert not v["warnings"], v
        run("merge", base, "-o", o("exc"), "--exclude", "words", "--exclude", "^model/step", code=0)
        assert names_of(o("exc")) == names_of(o("inc"))
        # Renames apply in order and update the graph; partitioned tensors keep their slices.
        run("merge", base, "-o", o("ren"), "--rename", "^model/=net/", "--rename", "net/(p)art=net/$1iece", code=0)
        names = names_of(o("ren"))
        assert "net/piece/.ATTRIBUTES/VARIABLE_VALUE" in names and "net/step/.ATTRIBUTES/VARIABLE_VALUE" in names, names
        v = validate_json(o("ren"), code=0)
        assert not v["warnings"], v
        tree = run("inspect", o("ren"), "--tree", code=0).stdout
        assert "key net/piece/.ATTRIBUTES/VARIABLE_VALUE" in tree, tree
        part = [t for t in inspect_json(o("ren"))["tensors"] if t["name"].startswith("net/piece")][0]
        assert len(part["slices"]) == 4, part
        assert values_text(o("ren"), "net/piece/.ATTRIBUTES/VARIABLE_VALUE") == \
            values_text(base, "model/part/.ATTRIBUTES/VARIABLE_VALUE")
        # Collisions, bad regexes, bad rename syntax: usage errors, nothing written.
        one_error_line(run("merge", base, "-o", o("col"), "--rename", "(part|step)=x", code=2), "both")
        one_error_line(run("merge", base, "-o", o("col"), "--include", "(", code=2), "--include", "not a valid regular expression")
        one_error_line(run("merge", base, "-o", o("col"), "--rename", "noequals", code=2), "REGEX=REPLACEMENT")
        one_error_line(run("merge", base, "-o", o("col"), "--include", "nomatch", code=2), "nothing to write")
        assert not [n for n in os.listdir(d) if n.startswith("col")], os.listdir(d)
        # Dry run: describes, writes nothing.
        j = json.loads(run("merge", base, changed, "-o", o("dry"), "--on-conflict", "last", "--dry-run", "--json",
                           code=0).stdout)
        assert j["dry_run"] and not j["verified"] and len(j["tensors"]) == 4, j
        assert {t["from"] for t in j["tensors"]} == {changed, "object graph of " + changed}, j["tensors"]
        assert not [n for n in os.listdir(d) if n.startswith("dry")]
        p = run("merge", base, "-o", o("dry"), "--rename", "^model/=m/", "--dry-run", code=0)
        assert "would write 4 tensors" in p.stdout and 'from %s "model/step' % base in p.stdout, p.stdout
        # Existing output; output equal to an input; --move is for plain merges only.
        one_error_line(run("merge", base, "-o", o("first"), "--on-conflict", "first", code=2), "exists", "--force")
        run("merge", base, "-o", o("first"), "--on-conflict", "first", "--force", code=0)
        one_error_line(run("merge", base, "-o", base, "--include", "x", code=2), "one of the inputs")
        one_error_line(run("merge", base, "-o", o("mv"), "--include", "x", "--move", code=2), "--move")
        # A damaged input: the copy checks the stored CRC, exit 3, nothing written.
        bad_dir = o("bad")
        os.mkdir(bad_dir)
        bad = copy_ckpt(base, bad_dir)
        for name in os.listdir(bad_dir):
            if ".data-" in name:
                flip(os.path.join(bad_dir, name), 1)
        p = run("merge", bad, "-o", o("fromBad"), "--include", ".", code=3)
        one_error_line(p, "checksum mismatch")
        assert not [n for n in os.listdir(d) if n.startswith("fromBad")], os.listdir(d)
        # Progress bar on a terminal, as in reshard.
        env = dict(os.environ, TFCKPT_PROGRESS_DELAY_MS="0")
        code, err = run_with_tty_stderr(["merge", base, "-o", o("tty"), "--include", "part"], env)
        assert code == 0 and "ETA" in err, repr(err)


@test()
def merge_average_of_three():
    with tempfile.TemporaryDirectory() as d:
        ins = []
        for k in (1, 2, 3):
            ins.append(os.path.join(d, "a%d" % k))
            subprocess.run([MAKE_FIXTURE, "avg", str(k), ins[-1]], check=True)
        out = os.path.join(d, "avg")
        p = run("merge", *ins, "-o", out, "--average", code=0)
        assert "averaged 5 tensors" in p.stdout, p.stdout
        assert values_text(out, "a") == "[ 0.  2.  4.  6.  8. 10.]"
        assert values_text(out, "h") == "[ 2. -1.]"       # float16 (1+2+3)/3, (-0.5-1-1.5)/3
        assert values_text(out, "bf") == "[2.  0.5]"       # bfloat16
        assert values_text(out, "d") == "[ 2.e-001  1.e+300 -2.e+000]"  # float64, no overflow in the sum
        assert values_text(out, "p") == "[[2. 3.]\n [4. 5.]\n [6. 7.]\n [8. 9.]]"  # partitioned
        assert values_text(out, "step") == "300"           # int64: from the last input
        assert values_text(out, "only_k") == "7."         # only in one input: kept
        p_json = [t for t in inspect_json(out)["tensors"] if t["name"] == "p"][0]
        assert len(p_json["slices"]) == 2, p_json
        validate_json(out, code=0)


@test()
def merge_parallel_components_and_replicas():
    with tempfile.TemporaryDirectory() as d:
        o = lambda name: os.path.join(d, name)
        for v in ("same", "differ", "single"):
            subprocess.run([MAKE_FIXTURE, "parallel", v, o("par_" + v)], check=True)
        # Collapse (checked): equals the single-device checkpoint, graph included.
        p = run("merge", o("par_same"), "-o", o("c1"), "--collapse-parallel", code=0)
        assert "collapsed 10 tensors" in p.stdout, p.stdout
        validate_json(o("c1"), "--against", o("par_single"), code=0)
        # A planted difference: reported with the element, nothing written, exit 1.
        p = run("merge", o("par_differ"), "-o", o("c2"), "--collapse-parallel=check", code=1)
        assert "dense/kernel/.ATTRIBUTES/parallel_component_2" in p.stderr and "[1, 2]: 99.0 vs 1.25" in p.stderr, \
            p.stderr
        assert not os.path.exists(o("c2.index"))
        run("merge", o("par_differ"), "-o", o("c3"), "--collapse-parallel=first", code=0)
        validate_json(o("c3"), "--against", o("par_single"), code=0)
        # Expand: the single-device checkpoint becomes the 3-device one (graph included).
        p = run("merge", o("par_single"), "-o", o("e1"), "--expand-parallel", "3", code=0)
        assert "added 10 parallel components" in p.stdout, p.stdout
        validate_json(o("e1"), "--against", o("par_same"), code=0)
        one_error_line(run("merge", o("par_single"), "-o", o("e2"), "--expand-parallel", "1", code=2), "N >= 2")
        # Replicas: equal ones collapse (partitioned too); non-consecutive ones are left.
        for v in ("same", "differ"):
            subprocess.run([MAKE_FIXTURE, "replicas", v, o("rep_" + v)], check=True)
        p = run("merge", o("rep_same"), "-o", o("r1"), "--collapse-replicas", code=0)
        assert "not consecutive" in p.stderr, p.stderr
        assert names_of(o("r1")) == {"w", "v", "b/0", "b/2", "step"}, names_of(o("r1"))
        assert values_text(o("r1"), "v") == "[[1. 2.]\n [3. 4.]]"
        assert values_text(o("r1"), "w") == "[0. 1. 2. 3. 4.]"
        p = run("merge", o("rep_differ"), "-o", o("r2"), "--collapse-replicas", code=1)
        assert '"w/2" differs from replica 0 "w/0": first at [3]: -1.0 vs 3.0' in p.stderr, p.stderr
        assert not os.path.exists(o("r2.index"))
        run("merge", o("rep_differ"), "-o", o("r3"), "--collapse-replicas", "--no-check", code=0)
        assert values_text(o("r3"), "w") == "[0. 1. 2. 3. 4.]"


@test()
def validate_relative_prefix_without_directory():
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([MAKE_FIXTURE, "partitioned", os.path.join(d, "p")], check=True)
        p = subprocess.run([TFCKPT, "validate", "p", "--json"], capture_output=True, text=True, cwd=d)
        j = json.loads(p.stdout)
        assert p.returncode == 0 and not j["warnings"], j


# ---------------------------------------------------------------------------------------
# convert

ST_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
            "F64": 8, "I64": 8, "U64": 8, "F8_E5M2": 1, "F8_E4M3": 1, "C64": 8}
TF_TO_ST = {"float32": "F32", "float64": "F64", "int64": "I64", "int32": "I32", "bool": "BOOL", "bfloat16": "BF16",
            "float16": "F16", "uint8": "U8", "int8": "I8", "complex64": "C64"}


def parse_safetensors(path):
    """An independent reader (json + struct only): returns (header, {name: bytes})."""
    import struct
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert 8 + n <= len(raw) and (8 + n) % 8 == 0, (path, n)
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    spans = []
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            assert all(isinstance(v, str) for v in info.values()), info
            continue
        assert set(info) == {"dtype", "shape", "data_offsets"}, info
        b, e = info["data_offsets"]
        count = 1
        for d in info["shape"]:
            count *= d
        assert e - b == count * ST_SIZES[info["dtype"]], (name, info)
        spans.append((b, e))
        out[name] = data[b:e]
    spans.sort()
    at = 0
    for b, e in spans:
        assert b == at, (path, spans)
        at = e
    assert at == len(data), (path, at, len(data))
    return header, out




NPZ_CHECK = r"""
import json, sys, numpy as np
npz, ref = sys.argv[1], json.load(open(sys.argv[2]))
f = np.load(npz)
assert sorted(f.files) == sorted(ref), (sorted(f.files), sorted(ref))
for name, (dtype, shape, hexbytes) in ref.items():
    a = f[name]
    assert list(a.shape) == shape, (name, a.shape, shape)
    assert a.dtype.str == dtype, (name, a.dtype.str, dtype)
    if hexbytes is not None:
        assert a.tobytes() == bytes.fromhex(hexbytes), name
print("npz ok", len(ref))
"""

NPY_DESCR = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "BOOL": "|b1", "F16": "<f2", "U8": "|u1",
             "I8": "|i1", "C64": "<c8"}


@test(needs_data=True)
def convert_real_cases_round_trips():
    with tempfile.TemporaryDirectory() as d:
        for case in COUNTS:
            prefix = data(case + "/variables") if case == "truncated_data_resnet_savedmodel" else data(case)
            st = os.path.join(d, case + ".safetensors")
            if case in MALFORMED:
                one_error_line(run("convert", prefix, "-o", st, code=3))
                assert not os.path.exists(st)
                continue
            p = run("convert", prefix, "-o", st, "--json", code=0)
            j = json.loads(p.stdout)
            names = names_of(prefix)
            kinds = {t["name"]: t["dtype"] for t in inspect_json(prefix)["tensors"]}
            not_held = {n for n, k in kinds.items() if k in ("string", "variant")}
            assert {s.split(":")[0] for s in j["skipped"]} == not_held, (case, j["skipped"])
            header, blobs = parse_safetensors(st)
            assert set(blobs) == names - not_held, case
            assert header["__metadata__"]["source_format"] in ("tensorflow-v2", "tensorflow-v1"), header
            for n, b in blobs.items():
                assert header[n]["dtype"] == TF_TO_ST[kinds[n]], (case, n)
            # Back to TF: the same values; only what safetensors cannot hold is missing.
            back = os.path.join(d, case + "-back")
            run("convert", st, "-o", back, code=0)
            v = validate_json(back, "--against", prefix, code=1 if not_held else 0)
            assert {e["key"] for e in v["errors"]} == not_held and checks(v) <= {"against.removed"}, (case, v["errors"])
            # npz: loads in numpy with the same bytes as the safetensors file.
            npz = os.path.join(d, case + ".npz")
            has_bf16 = any(k == "bfloat16" for k in kinds.values())
            if has_bf16:
                one_error_line(run("convert", prefix, "-o", npz, code=2), "bfloat16", "--cast bfloat16=float32")
                continue
            run("convert", prefix, "-o", npz, code=0)
            ref = {}
            for n in names:
                if kinds[n] == "variant" or n == "_CHECKPOINTABLE_OBJECT_GRAPH":
                    continue
                if kinds[n] == "string":
                    shape = [t["shape"] for t in inspect_json(prefix)["tensors"] if t["name"] == n][0]
                    ref[n] = ["|S", shape, None]
                    continue
                ref[n] = [NPY_DESCR[header[n]["dtype"]], header[n]["shape"], blobs[n].hex()]
            refs = os.path.join(d, case + ".json")
            json.dump(ref, open(refs, "w"))
            check = subprocess.run([numpy_python(), "-c", NPZ_CHECK.replace("a.dtype.str == dtype",
                                    "a.dtype.str == dtype or (dtype == '|S' and a.dtype.kind == 'S')"), npz, refs],
                                   capture_output=True, text=True)
            assert check.returncode == 0 and "npz ok" in check.stdout, (case, check.stderr)
            # V1 -> V2: validates clean and holds the same values.
            if case.startswith("v1_"):
                v2 = os.path.join(d, case + "-v2")
                run("convert", prefix, "-o", v2, code=0)
                validate_json(v2, code=0)
                validate_json(v2, "--against", prefix, code=0)
                assert inspect_json(v2)["format"] == "v2"


@test()
def convert_safetensors_sharded_casts_and_refusals():
    with tempfile.TemporaryDirectory() as d:
        o = lambda name: os.path.join(d, name)
        subprocess.run([MAKE_FIXTURE, "partitioned", o("part")], check=True)
        subprocess.run([MAKE_FIXTURE, "kinds", o("kinds")], check=True)
        # Partitioned tensors are assembled.
        run("convert", o("part"), "-o", o("part.safetensors"), code=0)
        header, blobs = parse_safetensors(o("part.safetensors"))
        import struct
        assert list(struct.unpack("<30f", blobs["part"])) == [float(i) for i in range(30)]
        assert header["part"]["shape"] == [10, 3]
        # Sharded output, read back as a set (index) into TF.
        p = run("convert", o("kinds"), "-o", o("k.safetensors"), "--max-file-size", "4K", "--json", code=0)
        j = json.loads(p.stdout)
        shards = [f for f in j["files"] if f.endswith(".safetensors")]
        assert len(shards) >= 2 and j["files"][-1] == o("k.safetensors.index.json"), j["files"]
        assert not os.path.exists(o("k.safetensors"))
        index = json.load(open(o("k.safetensors.index.json")))
        seen = {}
        for f in shards:
            assert os.path.basename(f).startswith("k-0000") and "-of-0000" in f, f
            h, b = parse_safetensors(f)
            for n in b:
                seen[n] = os.path.basename(f)
        assert index["weight_map"] == seen, (index, seen)
        run("convert", o("k.safetensors.index.json"), "-o", o("kback"), code=0)
        v = validate_json(o("kback"), "--against", o("kinds"), code=1)
        assert {e["key"] for e in v["errors"]} == {"words"}, v["errors"]  # the string tensor
        assert "words" in p.stdout or j["skipped"] == ["words: string tensor"], j
        one_error_line(run("convert", o("kinds"), "-o", o("strict.safetensors"), "--strict", code=2), "--strict", "words")
        # Casts, bit for bit: bfloat16 and float16 to float32 and back.
        run("convert", o("kinds"), "-o", o("c32"), "--cast", "bfloat16=float32", "--cast", "float16=float32", code=0)
        assert values_text(o("c32"), "bf16") == "[1.       3.140625]" and values_text(o("c32"), "half") == \
            "[ 1.         -2.          0.33325195]", (values_text(o("c32"), "bf16"), values_text(o("c32"), "half"))
        kinds = {t["name"]: t["dtype"] for t in inspect_json(o("c32"))["tensors"]}
        assert kinds["bf16"] == "float32" and kinds["half"] == "float32" and kinds["specials"] == "float32"
        run("convert", o("c32"), "-o", o("c16"), "--cast", "float32=bfloat16", code=0)
        h, b = None, None
        run("convert", o("c16"), "-o", o("c16.safetensors"), code=0)
        h, b = parse_safetensors(o("c16.safetensors"))
        assert h["specials"]["dtype"] == "BF16"
        # NaN stays NaN, Inf stays Inf, 0, 1, 3 exact: 7fc0 7f80 0000 3f80 4040.
        assert b["specials"].hex() == "c07f807f0000803f4040", b["specials"].hex()
        one_error_line(run("convert", o("kinds"), "-o", o("x"), "--cast", "int32=float32", code=2), "not offered")
        one_error_line(run("convert", o("kinds"), "-o", o("x"), "--cast", "float32", code=2), "FROM=TO")
        # npz: bfloat16 refused without a cast; with it, numpy reads the values.
        one_error_line(run("convert", o("kinds"), "-o", o("k.npz"), code=2), "--cast bfloat16=float32")
        run("convert", o("kinds"), "-o", o("k.npz"), "--cast", "bfloat16=float32", code=0)
        out = subprocess.run([numpy_python(), "-c",
                              "import numpy as np,sys; f=np.load(sys.argv[1]); "
                              "print(f['bf16'].tolist(), f['half'].dtype.str, f['words'].tolist(), f['flags'].tolist(),"
                              " f['cplx'].tolist(), f['big'].shape)", o("k.npz")],
                             capture_output=True, text=True)
        assert out.stdout.strip() == "[1.0, 3.140625] <f2 [b'plain', b'tab\\there\\x01', b''] [True, False, True] " \
                                     "[(1-2j)] (2000,)", out
        # Renames and filters, existing outputs.
        run("convert", o("kinds"), "-o", o("r.safetensors"), "--include", "^b", "--rename", "^b=B", code=0)
        h, b = parse_safetensors(o("r.safetensors"))
        assert set(b) == {"Bf16", "Big"}, set(b)
        one_error_line(run("convert", o("kinds"), "-o", o("r.safetensors"), code=2), "exists", "--force")
        run("convert", o("kinds"), "-o", o("r.safetensors"), "--force", code=0)
        one_error_line(run("convert", o("kinds"), "-o", o("m.npz"), "--max-file-size", "1K", code=2), "safetensors")
        # safetensors -> TF partitioned with reshard's rules.
        run("convert", o("part.safetensors"), "-o", o("p4"), "--partition", "part=fixed:4", code=0)
        part = [t for t in inspect_json(o("p4"))["tensors"] if t["name"] == "part"][0]
        assert [s["spec"] for s in part["slices"]] == ["0,3:0,3", "3,3:0,3", "6,2:0,3", "8,2:0,3"], part
        validate_json(o("p4"), "--against", o("part"), code=0)


@test()
def convert_checks_source_crcs():
    with tempfile.TemporaryDirectory() as d:
        o = lambda name: os.path.join(d, name)
        for mode in ("bigpart", "partitioned"):
            src = o(mode)
            subprocess.run([MAKE_FIXTURE, mode, src], check=True)
            run("convert", src, "-o", o(mode + ".safetensors"), code=0)
            h, b = parse_safetensors(o(mode + ".safetensors"))
            validate_json(o(mode + ".safetensors"), "--against", src, code=0)
            # One flipped bit in the second data file: every writer refuses, nothing left.
            flip(src + ".data-00001-of-00002", 10)
            for out, extra in (("bad.safetensors", []), ("bad.npz", []), ("badtf", ["--cast", "float32=float64"])):
                p = run("convert", src, "-o", o(mode + out), *extra, code=3)
                one_error_line(p, "checksum mismatch", "big" if mode == "bigpart" else "part")
                assert not [n for n in os.listdir(d) if n.startswith(mode + out)], os.listdir(d)
            p = run("merge", src, "-o", o(mode + "m"), "--include", ".", code=3)
            one_error_line(p, "checksum mismatch")


def write_safetensors(path, header, data, header_len=None, raw_header=None):
    import struct
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    n = header_len if header_len is not None else len(text)
    open(path, "wb").write(struct.pack("<Q", n) + text + data)


@test()
def convert_rejects_malformed_safetensors():
    good = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]}}
    cases = {
        "overlap": ({"a": good["a"], "b": {"dtype": "I64", "shape": [1], "data_offsets": [4, 12]}}, 16, "overlap"),
        "hole": ({"a": good["a"], "b": {"dtype": "I64", "shape": [1], "data_offsets": [12, 20]}}, 20, "hole"),
        "out_of_range": (good, 12, "past the end"),
        "wrong_size": ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, 8, "does not match"),
        "unknown_dtype": ({"a": {"dtype": "F17", "shape": [2], "data_offsets": [0, 8]}}, 8, "unknown dtype"),
        "trailing": (good, 20, "no tensor uses"),
        "negative_dim": ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, 8, "non-negative"),
        "extra_field": ({"a": dict(good["a"], foo=1)}, 8, "unknown field"),
        "not_object": ([1, 2], 0, "not a JSON object"),
        "bad_metadata": ({"__metadata__": {"k": 1}, **good}, 16, "must be strings"),
    }
    with tempfile.TemporaryDirectory() as d:
        ok = os.path.join(d, "ok.safetensors")
        write_safetensors(ok, good, bytes(16))
        run("inspect", ok, code=0)
        validate_json(ok, code=0)
        for name, (header, size, needle) in cases.items():
            path = os.path.join(d, name + ".safetensors")
            write_safetensors(path, header, bytes(size))
            one_error_line(run("inspect", path, code=3), needle, path)
            one_error_line(run("convert", path, "-o", os.path.join(d, name + "-tf"), code=3), needle)
        raw = {"bad_json": (b'{"a": {', None, "not valid JSON"),
               "duplicate": (b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "a": '
                             b'{"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', None, "twice"),
               "header_beyond_file": (b'{}', 4096, "past the end of the file"),
               "header_too_large": (b'{}', 200_000_000, "100 MB")}
        for name, (text, n, needle) in raw.items():
            path = os.path.join(d, name + ".safetensors")
            write_safetensors(path, None, bytes(8), header_len=n, raw_header=text)
            one_error_line(run("inspect", path, code=3), needle)
        short = os.path.join(d, "short.safetensors")
        open(short, "wb").write(b"\x01\x02")
        one_error_line(run("inspect", short, code=3), "shorter")



if __name__ == "__main__":
    sys.exit(main("cli"))
