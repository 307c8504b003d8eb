"""CLI tests of issue 15 items 6 and 8: merge with edits is a plan (PlanCombine) and its
write; --dry-run prints the plan and writes nothing; a tensor in two inputs is a conflict in
the plan and the write alike; options that commands share say the same. Usage: cli_merge_plan_test.py
TFCKPT MAKE_EXAMPLE MAKE_FIXTURE"""

from cli_common import *


def written(d, name):
    return [n for n in os.listdir(d) if n.startswith(name)]


@test()
def dry_run_lists_the_plan_and_writes_nothing():
    with tempfile.TemporaryDirectory() as d:
        ins = [fixture(d, "a%d" % k, "avg", str(k)) for k in (1, 2, 3)]
        out = os.path.join(d, "out")
        args = ["merge", *ins, "-o", out, "--average", "--exclude", "^only_k$", "--rename", "^p$=rows"]
        # Text: one line per planned tensor (output name, dtype, shape, file, size, source).
        p = run(*args, "--dry-run", code=0)
        lines = {l.split()[0]: l for l in p.stdout.splitlines() if " from " in l and not l.startswith("would write")}
        assert set(lines) == {"a", "h", "bf", "d", "rows", "step"}, p.stdout
        assert "mean of 3 inputs" in lines["rows"] and "[4, 2]" in lines["rows"], lines["rows"]
        assert lines["step"].split()[1] == "int64" and lines["step"].endswith("from " + ins[2]), lines["step"]
        assert "would write 6 tensors" in p.stdout, p.stdout
        assert written(d, "out") == [], os.listdir(d)
        # JSON: the same plan, with the counters of what the rules did.
        j = json.loads(run(*args, "--dry-run", "--json", code=0).stdout)
        assert j["dry_run"] is True and j["verified"] is False, j
        assert j["averaged"] == 5 and j["dropped"]["filtered"] == 1, j
        by_name = {t["name"]: t for t in j["tensors"]}
        assert set(by_name) == set(lines), by_name.keys()
        assert by_name["rows"]["from"] == "mean of 3 inputs" and by_name["rows"]["shape"] == [4, 2]
        assert by_name["step"]["from"] == ins[2], by_name["step"]
        assert sum(t["bytes"] for t in j["tensors"]) == j["bytes"], j
        assert written(d, "out") == [], os.listdir(d)
        # The plan is what the write does.
        w = json.loads(run(*args, "--json", code=0).stdout)
        assert w["tensors"] == j["tensors"] and w["verified"] is True, (w, j)


@test()
def a_tensor_in_two_inputs_is_a_conflict_in_the_plan_and_the_write():
    with tempfile.TemporaryDirectory() as d:
        base, resliced = (fixture(d, v, "family", v) for v in ("base", "resliced"))
        # Equal values stored with other slicing are still two sources: refused by the plan,
        # so by --dry-run and the write alike, and nothing is written.
        for extra in ([], ["--dry-run"], ["--include", "part"]):
            p = run("merge", base, resliced, "-o", os.path.join(d, "x"), *extra, code=2)
            one_error_line(p, " is in both", base, resliced)
        assert written(d, "x") == [], os.listdir(d)
        # --on-conflict first takes the first input's.
        out = os.path.join(d, "first")
        j = json.loads(run("merge", base, resliced, "-o", out, "--json", "--on-conflict", "first", code=0).stdout)
        assert {t["from"] for t in j["tensors"]} == {base, "object graph of " + base}, j["tensors"]
        run("validate", out, "--against", base, code=0)


def option_help(command):
    """{option: its description} from `tfckpt COMMAND --help` (one line per option)."""
    out = {}
    for line in run(command, "--help", code=0).stdout.splitlines():
        words = line.split()
        if not words or not words[0].startswith("-"):
            continue
        for n in words[0].split(","):
            out[n] = line
    return out


@test()
def shared_options_say_the_same_in_every_command():
    helps = {c: option_help(c) for c in ("inspect", "validate", "reshard", "merge", "convert")}
    writers = ("reshard", "merge", "convert")
    same = {
        "--force": "Replace an existing output (an output that is one of the inputs is always refused)",
        "--no-verify": "Do not verify the output",
        "--quiet": "No progress bar (on a terminal it appears when the work takes more than a second",
        "--output": "; OUT.index also names a TF prefix; not a directory",
    }
    for c in writers:
        for option, sentence in same.items():
            assert sentence in helps[c].get(option, ""), (c, option, helps[c].get(option))
    for c, h in helps.items():
        assert "One JSON document on stdout (man tfckpt-%s), also on failure" % c in h["--json"], (c, h["--json"])
    for option in ("--include", "--exclude", "--rename"):
        assert helps["merge"][option].split(None, 2)[2] == helps["convert"][option].split(None, 2)[2], option
    assert "$1..$9 groups" in helps["convert"]["--rename"], helps["convert"]["--rename"]
    for c in ("reshard", "merge"):
        assert "Print the plan and write nothing" in helps[c]["--dry-run"], (c, helps[c]["--dry-run"])


if __name__ == "__main__":
    sys.exit(main("cli_merge_plan"))
