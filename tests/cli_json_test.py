"""CLI tests of issue 14 items 5 and 6: one JSON document on stdout for every --json run,
failures included; conflicting options as usage errors; -j and byte counts the same in
every command; help and mistyped commands. Usage: cli_json_test.py TFCKPT MAKE_EXAMPLE
MAKE_FIXTURE"""

import glob

from cli_common import *

ERROR_KEYS = ["id", "message", "file", "key", "offset"]


def json_failure(*args, code, id=None):
    """Runs tfckpt ARGS --json expecting exit `code`: one error line on stderr and one
    parseable document {"ok": false, "error": {...}} on stdout. Returns the document."""
    p = run(*args, "--json", code=code)
    one_error_line(p)
    doc = json.loads(p.stdout)
    assert doc["ok"] is False, doc
    assert list(doc["error"].keys()) == ERROR_KEYS, doc
    assert doc["error"]["message"] and doc["error"]["message"] in p.stderr, (doc, p.stderr)
    if id is not None:
        assert doc["error"]["id"] == id, doc
    return doc


def json_ok(*args, code=0):
    doc = json.loads(run(*args, "--json", code=code).stdout)
    assert doc["ok"] is True and "error" not in doc, doc
    return doc


@test()
def json_document_on_every_failure():
    with tempfile.TemporaryDirectory() as d:
        missing = os.path.join(d, "missing")
        # Missing input, every command (validate printed nothing before).
        doc = json_failure("validate", missing, code=3, id="not-found")
        assert missing in doc["error"]["message"], doc
        json_failure("inspect", missing, code=3, id="not-found")
        json_failure("reshard", missing, "-o", os.path.join(d, "o"), code=3, id="not-found")
        json_failure("merge", missing, "-o", os.path.join(d, "o"), code=3)
        json_failure("convert", missing, "-o", os.path.join(d, "o.safetensors"), code=3, id="not-found")
        json_failure("reshard", "--execute", os.path.join(d, "plan.json"), "--task", "0", code=3)
        # Usage errors, from the parser and from the commands.
        doc = json_failure("inspect", missing, "--bogus", code=2, id="usage")
        assert "tfckpt inspect --help" in doc["error"]["message"], doc
        json_failure("validate", missing, "--tolerance", "0.1", code=2, id="usage")
        json_failure("merge", missing, code=2, id="usage")  # no -o
        # Corrupt input: the check id and location of the library's error.
        prefix = fixture(d, "p", "partitioned")
        size = os.path.getsize(prefix + ".index")
        with open(prefix + ".index", "r+b") as f:
            f.seek(size - 8)
            f.write(b"\0" * 8)  # the table magic
        doc = json_failure("inspect", prefix, code=3)
        assert doc["error"]["id"].startswith("table."), doc
        assert doc["error"]["file"] == prefix + ".index", doc
        # A check that fails while combining (replicas differ): exit 1, with the check id.
        rep = fixture(d, "rep", "replicas", "differ")
        doc = json_failure("merge", rep, "-o", os.path.join(d, "cr"), "--collapse-replicas", code=1)
        assert doc["error"]["key"] and doc["error"]["id"] != "usage", doc


@test()
def json_document_when_the_disk_is_full():
    # A file-size limit makes writes fail like a full disk (EFBIG, reported as no space).
    import resource
    with tempfile.TemporaryDirectory() as d:
        prefix = fixture(d, "big", "bigpart")
        out = os.path.join(d, "out.safetensors")
        limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        p = subprocess.run([TFCKPT, "convert", prefix, "-o", out, "-q", "--json"], capture_output=True, text=True,
                           preexec_fn=limit, timeout=120)
        assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
        one_error_line(p, "no space")
        doc = json.loads(p.stdout)
        assert doc["ok"] is False and doc["error"]["id"] == "no-space", doc
        assert [n for n in os.listdir(d) if n.startswith("out")] == [], os.listdir(d)


@test()
def json_success_documents_say_ok():
    with tempfile.TemporaryDirectory() as d:
        prefix = fixture(d, "p", "partitioned")
        doc = json_ok("inspect", prefix)
        assert len(doc["tensors"]) == 1, doc
        doc = json_ok("validate", prefix)
        assert doc["errors"] == [], doc
        json_ok("reshard", prefix, "-o", os.path.join(d, "r"), "--partition", "fixed:2", "--dry-run")
        json_ok("reshard", prefix, "-o", os.path.join(d, "r"), "--partition", "fixed:2", "-q")
        json_ok("convert", prefix, "-o", os.path.join(d, "p.safetensors"), "-q")
        json_ok("merge", prefix, "-o", os.path.join(d, "m"))


@test(needs_data=True)
def json_listing_with_missing_data_file():
    # The listing is printed and the exit code is 3: the one document says both.
    p = run("inspect", data("t5x_mtf_bfloat16_missing_shard"), "--json", code=3)
    one_error_line(p, "data file missing")
    doc = json.loads(p.stdout)
    # (missing, not damaged: the check id validate, reshard and convert give it, naming the file)
    assert doc["ok"] is False and doc["error"]["id"] == "files.missing-data" and len(doc["tensors"]) == 105, doc["error"]
    assert ".data-" in doc["error"]["file"], doc["error"]


def as_nobody(*args):
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", TFCKPT, *args],
                          capture_output=True, text=True, errors="replace", timeout=120)


@test()
def unreadable_input_is_permission_denied():
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        print("  (skipped: needs root and setpriv to run tfckpt as a user that files can refuse)")
        return
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)
        prefix = fixture(d, "p", "partitioned")
        for f in glob.glob(prefix + ".*"):
            os.chmod(f, 0o644)
        datafiles = glob.glob(prefix + ".data-*")
        assert len(datafiles) == 2, datafiles
        for f in datafiles:
            os.chmod(f, 0o600)
        # Validate: one error (not one per tensor), exit 3, a documented id and the file.
        p = as_nobody("validate", prefix, "--json")
        assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
        one_error_line(p, "Permission denied")
        doc = json.loads(p.stdout)
        assert doc["error"]["id"] == "permission-denied" and doc["error"]["file"] in datafiles, doc
        p = as_nobody("validate", prefix, "--against", prefix, "--json")
        assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
        one_error_line(p, "Permission denied")
        p = as_nobody("inspect", prefix, "--tensor", "part")
        assert p.returncode == 3, (p.returncode, p.stderr)
        one_error_line(p, "Permission denied")
        # A directory that cannot be read, and one that cannot be searched.
        closed = os.path.join(d, "closed")
        os.mkdir(closed, 0o700)
        copy_ckpt(prefix, closed)
        for args in (["inspect", closed], ["validate", closed], ["inspect", os.path.join(closed, "p")]):
            p = as_nobody(*args, "--json")
            assert p.returncode == 3, (args, p.returncode, p.stderr)
            one_error_line(p, "Permission denied")
            assert json.loads(p.stdout)["error"]["id"] == "permission-denied", p.stdout


@test()
def conflicting_options_are_usage_errors():
    with tempfile.TemporaryDirectory() as d:
        prefix = fixture(d, "p", "partitioned")
        rep = fixture(d, "rep", "replicas", "same")
        o = os.path.join(d, "o")
        cases = [
            (["inspect", prefix, "--tree", "--stats"], "--stats"),
            (["inspect", prefix, "--tree", "--tensor", "part"], "--tensor"),
            (["inspect", prefix, "--all-values"], "--tensor"),
            (["merge", rep, "-o", o, "--no-check"], "--collapse-replicas"),
            (["merge", rep, "-o", o, "--average"], "--average"),
            (["reshard", prefix, "-o", o, "--dry-run", "--plan", os.path.join(d, "plan.json")], "--plan"),
        ]
        for args, needle in cases:
            one_error_line(run(*args, code=2), needle)
            json_failure(*args, code=2, id="usage")
        assert not os.path.exists(os.path.join(d, "plan.json")), os.listdir(d)
        assert not glob.glob(o + "*"), os.listdir(d)


@test()
def jobs_and_numbers_validated_alike():
    with tempfile.TemporaryDirectory() as d:
        prefix = fixture(d, "p", "partitioned")
        o = os.path.join(d, "o")
        commands = [["validate", prefix], ["reshard", prefix, "-o", o], ["merge", prefix, "-o", o],
                    ["convert", prefix, "-o", o]]
        for cmd in commands:
            for bad in ("-1", "abc", "100000"):
                line = one_error_line(run(*cmd, "-j", bad, code=2))
                assert "%s: not a whole number from 0 to 1024" % bad in line, line
        assert not glob.glob(o + "*"), os.listdir(d)
        # Out-of-range numbers read plainly (no "0.000000 to 1797693...").
        line = one_error_line(run("reshard", prefix, "-o", o, "--bytes-per-string", "0", code=2))
        assert "0: not a whole number >= 1" in line and "179769" not in line, line
        # Still accepted: -j 0 and -j N.
        run("validate", prefix, "-j", "0", code=0)
        run("validate", prefix, "--jobs", "3", code=0)


@test()
def byte_counts_take_suffixes_everywhere():
    with tempfile.TemporaryDirectory() as d:
        prefix = fixture(d, "big", "bigpart")
        o = os.path.join(d, "o")
        plain = json_ok("reshard", prefix, "-o", o, "--policy", "max-shard-size:262144", "--dry-run")
        for text in ("256K", "256KiB", "0.25M", "256kb"):
            doc = json_ok("reshard", prefix, "-o", o, "--policy", "max-shard-size:" + text, "--dry-run")
            assert doc["num_files"] == plain["num_files"] and doc["num_files"] >= 4, (text, doc["num_files"])
        for bad in ("max-shard-size:0", "max-shard-size:1Q", "max-shard-size:"):
            one_error_line(run("reshard", prefix, "-o", o, "--policy", bad, "--dry-run", code=2), "--policy")
        # The partitioners' BYTES too.
        for kind in ("max-size", "min-size"):
            plain = json_ok("reshard", prefix, "-o", o, "--partition", f"{kind}:65536", "--dry-run")
            for text in ("64K", "64KiB", "0.0625M"):
                doc = json_ok("reshard", prefix, "-o", o, "--partition", f"{kind}:{text},4", "--dry-run")
                want = json_ok("reshard", prefix, "-o", o, "--partition", f"{kind}:65536,4", "--dry-run")
                assert [t["new"] for t in doc["tensors"]] == [t["new"] for t in want["tensors"]], (kind, text)
            assert plain["tensors"], plain
            for bad in (f"{kind}:1Q", f"{kind}:0K", f"{kind}:-5"):
                one_error_line(run("reshard", prefix, "-o", o, "--partition", bad, "--dry-run", code=2), kind)


@test()
def help_command_and_suggestions():
    p = run("help", "inspect", code=0)
    assert "--all-values" in p.stdout and "--tree" in p.stdout, p.stdout
    p = run("help", code=0)
    assert "inspect" in p.stdout and "convert" in p.stdout, p.stdout
    line = one_error_line(run("inspec", "P", code=2))
    assert "did you mean inspect?" in line, line
    doc = json_failure("valdate", "P", code=2, id="usage")
    assert "did you mean validate?" in doc["error"]["message"], doc
    line = one_error_line(run("frobnicate", code=2))
    assert "did you mean" not in line and "commands: inspect" in line, line
    line = one_error_line(run("reshard", "P", "--wat", code=2))
    assert "(see tfckpt reshard --help)" in line, line
    line = one_error_line(run("--wat", code=2))
    assert "(see tfckpt --help)" in line, line


@test()
def merge_json_one_schema():
    with tempfile.TemporaryDirectory() as d:
        base = fixture(d, "base", "family", "base")
        plain = json_ok("merge", base, "-o", os.path.join(d, "plain"))
        edited = json_ok("merge", base, "-o", os.path.join(d, "edited"), "--exclude", "/step/", "-q")
        dry = json_ok("merge", base, "-o", os.path.join(d, "dry"), "--exclude", "/step/", "--dry-run")
        assert list(plain.keys()) == list(edited.keys()) == list(dry.keys()), (plain.keys(), edited.keys())
        assert "entries" not in plain, plain
        names = {t["name"] for t in plain["tensors"]}
        var = "model/%s/.ATTRIBUTES/VARIABLE_VALUE"
        assert names == {var % "part", var % "step", var % "words", "_CHECKPOINTABLE_OBJECT_GRAPH"}, names
        assert {t["name"] for t in edited["tensors"]} == names - {var % "step"}, edited["tensors"]
        for t in plain["tensors"] + edited["tensors"]:
            assert list(t.keys()) == ["name", "dtype", "shape", "file", "bytes", "from"], t
        part = [t for t in plain["tensors"] if t["name"] == var % "part"][0]
        assert part["shape"] == [10, 3] and part["dtype"] == "float32" and part["from"] is None, part
        assert plain["inputs"] == [base] and plain["skipped"] == [] and plain["verified"], plain
        assert plain["bytes"] == sum(t["bytes"] for t in plain["tensors"]), plain


@test()
def inspect_tensor_values_as_json_arrays():
    with tempfile.TemporaryDirectory() as d:
        prefix = fixture(d, "k", "kinds")

        def values(name, *extra):
            doc = json_ok("inspect", prefix, "--tensor", name, *extra)
            return doc["tensors"][0]["values"]

        assert values("half") == [1.0, -2.0, 0.3333], values("half")
        assert values("bf16") == [1.0, 3.14], values("bf16")
        assert values("flags") == [True, False, True]
        assert values("cplx") == [[1.0, -2.0]]
        assert values("specials") == ["nan", "inf", 0.0, 1.0, 3.0]
        assert values("words") == ["plain", "tab\there\x01", ""], values("words")
        assert values("big") == [0, 1, 2, "...", 1997, 1998, 1999], values("big")
        assert values("big", "--all-values") == list(range(2000))
        part = fixture(d, "p", "partitioned")
        doc = json_ok("inspect", part, "--tensor", "part")
        assert doc["tensors"][0]["values"] == [[3 * r + c for c in range(3)] for r in range(10)], doc


@test()
def json_document_for_output_and_option_refusals():
    """The refusals of convert --to, -o naming a directory, reshard's layout checks,
    validate --report and completion's shells each print one error document."""
    with tempfile.TemporaryDirectory() as d:
        prefix = fixture(d, "p", "partitioned")
        doc = json_failure("convert", prefix, "-o", os.path.join(d, "y.npz"), "--to", "safetensors", code=2,
                           id="usage")
        assert "the name says" in doc["error"]["message"], doc
        os.makedirs(os.path.join(d, "dd"))
        for args in [["reshard", prefix, "-q"], ["merge", prefix], ["convert", prefix, "-q"]]:
            for out in [os.path.join(d, "dd"), os.path.join(d, "new") + "/"]:
                doc = json_failure(*args, "-o", out, code=2, id="usage")
                assert "is a directory" in doc["error"]["message"], doc
        json_failure("reshard", prefix, "-o", os.path.join(d, "r"), "--plan", os.path.join(d, "dd"), code=2,
                     id="usage")
        json_failure("reshard", prefix, "-o", os.path.join(d, "r"), "--partition", "layout:x,x@x=2", code=2,
                     id="usage")
        json_failure("validate", prefix, "--report", code=2, id="usage")
        json_failure("completion", "tcsh", code=2, id="usage")
        assert sorted(os.listdir(d)) == ["dd", "p.data-00000-of-00002", "p.data-00001-of-00002", "p.index"], \
            os.listdir(d)


if __name__ == "__main__":
    sys.exit(main("cli_json"))
