"""CLI tests of output a person reads: values printed as numpy prints them, --stats, plurals,
progress phases, table alignment of wide names, shell completion."""

import json
import os
import re
import shutil
import subprocess
import tempfile

from cli_common import *

# Writes one .safetensors file per case (a tensor "t") and prints numpy's own text for it.
NUMPY_CASES = r'''
import json, struct, sys
import numpy as np
out = sys.argv[1]
rng = np.random.default_rng(7)
f32 = lambda *a: np.array(a, dtype=np.float32)
cases = {
    "f16_scalar_max": np.array(65504, dtype=np.float16),
    "f16_mixed": np.array([65504, 1.5, -0.3333], dtype=np.float16),
    "f16_fractions": np.array([0.1, 0.2, 0.3333, 1.0], dtype=np.float16),
    "f16_specials": np.array([np.nan, -np.inf, 2.5, 0.0], dtype=np.float16),
    "f32_integral": f32(1.0, 2.0, 3.0, 65504.0),
    "f32_wide_wraps": rng.standard_normal(40).astype(np.float32),
    "f32_2d": (rng.standard_normal((5, 17)) * 10).astype(np.float32),
    "f32_3d": np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8,
    "f32_exp": f32(1e-5, 3.0, 250000.0, -0.5),
    "f32_big": f32(1e9, 1.0),
    "f32_nan_only": f32(np.nan, np.inf),
    "f32_summarised": np.linspace(-1, 1, 2000, dtype=np.float32),
    "f32_summarised_2d": (rng.standard_normal((40, 40))).astype(np.float32),
    "f64_mixed": np.array([0.1, 1e300, -2.0]),
    "f64_thirds": np.array([1 / 3, 2 / 3, 0.00012345678]),
    "f64_long_digits": np.array([123.456789012345, 0.5]),
    "f64_scalar": np.array(0.1),
    "i32": np.array([-5, 100, 7], dtype=np.int32),
    "i64_summarised": np.arange(2000, dtype=np.int64),
    "i64_3d": np.arange(2000, dtype=np.int64).reshape(2, 10, 100) - 1000,
    "u8_2d": np.arange(60, dtype=np.uint8).reshape(3, 20),
    "bool": np.array([True, False, True]),
    "bool_scalar": np.array(True),
}
# bfloat16: values bfloat16 holds exactly, printed as numpy prints them as float32.
bf16 = f32(1.5, -2.25, 0.125, 288.0, 0.0078125, 1024.0)
codes = {np.float16: "F16", np.float32: "F32", np.float64: "F64", np.int32: "I32", np.int64: "I64",
         np.uint8: "U8", np.bool_: "BOOL"}
want = {}
def write(name, code, shape, payload):
    header = json.dumps({"t": {"dtype": code, "shape": list(shape), "data_offsets": [0, len(payload)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(f"{out}/{name}.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + payload)
for name, a in cases.items():
    write(name, codes[a.dtype.type], a.shape, a.tobytes())
    want[name] = np.array2string(a)
write("bf16", "BF16", bf16.shape, (bf16.view(np.uint32) >> 16).astype(np.uint16).tobytes())
want["bf16"] = np.array2string(bf16)
print(json.dumps(want))
'''


def printed(path, name="t", *extra):
    """The value text `inspect --tensor` prints (without its header line)."""
    out = run("inspect", path, "--tensor", name, *extra, code=0).stdout
    return out.split("\n", 1)[1].rstrip("\n")


@test()
def values_print_as_numpy_array2string():
    with tempfile.TemporaryDirectory() as d:
        want = json.loads(subprocess.run([numpy_python(), "-c", NUMPY_CASES, d], check=True,
                                         capture_output=True, text=True).stdout)
        bad = []
        for name, text in want.items():
            got = printed(os.path.join(d, name + ".safetensors"))
            if got != text:
                bad.append(f"{name}:\n--- numpy\n{text}\n--- tfckpt\n{got}")
        assert not bad, "\n".join(bad)


def write_safetensors(path, tensors):
    """tensors: {name: (dtype code, shape, payload bytes)} -> a .safetensors file."""
    header, blob = {}, b""
    for name, (code, shape, payload) in tensors.items():
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [len(blob), len(blob) + len(payload)]}
        blob += payload
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + blob)


def floats(*values):
    import struct
    return struct.pack("<%df" % len(values), *values)


def counting_tensors(d, *sizes):
    """d/src.safetensors with float32 tensors a, b, ... holding 0, 1, 2, ... of these sizes."""
    src = os.path.join(d, "src.safetensors")
    write_safetensors(src, {chr(ord("a") + i): ("F32", [n], floats(*range(n))) for i, n in enumerate(sizes)})
    return src


@test()
def stats_min_max_are_over_finite_values_in_text_and_json():
    with tempfile.TemporaryDirectory() as d:
        st = os.path.join(d, "s.safetensors")
        inf, nan = float("inf"), float("nan")
        write_safetensors(st, {"mixed": ("F32", [6], floats(-inf, 2.5, nan, -1.5, inf, 0.0)),
                               "nonfinite": ("F32", [2], floats(inf, nan))})
        j = json.loads(run("inspect", st, "--stats", "--json", code=0).stdout)
        stats = {t["name"]: t["stats"] for t in j["tensors"]}
        assert (stats["mixed"]["min"], stats["mixed"]["max"]) == (-1.5, 2.5), stats
        assert (stats["mixed"]["inf"], stats["mixed"]["nan"]) == (2, 1), stats
        assert (stats["nonfinite"]["min"], stats["nonfinite"]["max"]) == (None, None), stats
        rows = {l.split()[0]: l.split() for l in run("inspect", st, "--stats", code=0).stdout.splitlines()[1:]}
        assert rows["mixed"][1:3] == ["-1.5", "2.5"], rows
        assert rows["nonfinite"][1:3] == ["nan", "nan"], rows


@test()
def counts_are_singular_for_one():
    with tempfile.TemporaryDirectory() as d:
        st = os.path.join(d, "one.safetensors")
        write_safetensors(st, {"w": ("F32", [2], floats(1.0, 2.0))})
        assert ", 1 tensor, " in run("inspect", st, code=0).stdout.splitlines()[0]
        assert ": 1 tensor, " in run("validate", st, code=0).stdout
        prefix = os.path.join(d, "tf")
        p = run("convert", st, "-o", prefix, code=0)
        assert ": 1 tensor, " in p.stdout, p.stdout
        p = run("reshard", prefix, "-o", os.path.join(d, "re"), "--policy", "single", code=0)
        assert ", 1 tensor (" in p.stdout, p.stdout
        p = run("merge", prefix, "-o", os.path.join(d, "m"), code=0)
        assert "merged 1 input into " in p.stdout and ": 1 data file, 1 entry, " in p.stdout, p.stdout
        p = run("merge", prefix, "-o", os.path.join(d, "m2"), "--drop-optimizer", code=0)
        assert ": 1 tensor (" in p.stdout and "from 1 input" in p.stdout, p.stdout
        # A message with a count of one: the two-tensor plural stays.
        write_safetensors(st, {"w": ("F32", [2], floats(1.0, 2.0)), "v": ("F32", [1], floats(3.0))})
        assert ", 2 tensors, " in run("inspect", st, code=0).stdout.splitlines()[0]


@test()
def sharded_safetensors_write_names_its_index_and_files():
    with tempfile.TemporaryDirectory() as d:
        src = counting_tensors(d, 1024, 1024)
        out = os.path.join(d, "out.safetensors")
        p = run("convert", src, "-o", out, "--max-file-size", "5K", code=0)
        line = p.stdout.strip()
        index = os.path.join(d, "out.safetensors.index.json")
        shards = [os.path.join(d, "out-0000%d-of-00002.safetensors" % i) for i in (1, 2)]
        assert os.path.exists(index) and all(os.path.exists(s) for s in shards), os.listdir(d)
        assert not os.path.exists(out)
        assert line.startswith("wrote " + index + " (safetensors index of 2 files: " + shards[0] + ", " + shards[1]
                               + "): 2 tensors, "), line


@test()
def progress_bar_names_its_phase():
    with tempfile.TemporaryDirectory() as d:
        src = counting_tensors(d, 4096, 8)
        prefix = os.path.join(d, "tf")
        run("convert", src, "-o", prefix, code=0)
        env = dict(os.environ, TFCKPT_PROGRESS_DELAY_MS="0")
        # (named: a rule without REGEX= cuts only partitioned tensors, and says so when none is)
        code, err = run_with_tty_stderr(["reshard", prefix, "-o", os.path.join(d, "r"), "--partition", "^[ab]$=fixed:2"],
                                        env)
        lines = [l.strip() for l in err.replace("\r", "\n").splitlines() if l.strip()]
        assert code == 0 and lines, repr(err)
        # Each line starts with its phase; copying comes first, verifying after it.
        phases = [l.split()[0] for l in lines]
        assert set(phases) == {"copying", "verifying"}, lines
        assert phases.index("verifying") > max(i for i, p in enumerate(phases) if p == "copying"), lines
        assert all("ETA" in l for l in lines), lines
        code, err = run_with_tty_stderr(["merge", prefix, "-o", os.path.join(d, "m"), "--drop-optimizer"], env)
        # Merging with edits verifies too (before publishing its output), with its own phase.
        assert code == 0 and err.index("copying") < err.index("verifying"), repr(err)
        # A safetensors or .npz output is verified after it is written (issue 28 A8): its own
        # phase too, every byte of the output counted.
        for out in ("c.safetensors", "c.npz"):
            code, err = run_with_tty_stderr(["convert", prefix, "-o", os.path.join(d, out)], env)
            assert code == 0 and "writing" in err and err.rindex("writing") < err.index("verifying"), repr(err)
            last = err.replace("\r", "\n").split("verifying")[-1]
            assert re.match(r" +\[#{30}\] (\S+ \S+) / \1 ", last), repr(err)


def display_width(text):
    """Terminal columns by Unicode's East Asian Width and combining classes."""
    import unicodedata
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


@test()
def table_columns_align_with_wide_and_combining_names():
    with tempfile.TemporaryDirectory() as d:
        st = os.path.join(d, "u.safetensors")
        names = ["嵌入/权重", "cafe\u0301/bias", "emoji\U0001F642", "plain/kernel"]
        write_safetensors(st, {n: ("F32", [1], floats(float(i))) for i, n in enumerate(names)})
        for extra, edge in (((), "start"), (("--stats",), "end")):
            lines = run("inspect", st, *extra, code=0).stdout.splitlines()
            table = lines[1:] if not extra else lines  # the listing has a summary line first

            def second_cell(line, name):
                """Display columns up to where the cell after the name starts (or ends)."""
                rest = line[len(name):]
                gap = len(rest) - len(rest.lstrip(" "))
                cell = rest[gap:].split(" ")[0]
                return display_width(name) + gap + (len(cell) if edge == "end" else 0)
            want = second_cell(table[0], "NAME")
            assert len(table) == 1 + len(names), table
            for line in table[1:]:
                name = next(n for n in names if line.startswith(n))
                assert second_cell(line, name) == want, (extra, table)


COMMANDS = ["inspect", "validate", "reshard", "merge", "convert", "completion"]


def help_options(command):
    """Every option name `tfckpt COMMAND --help` lists."""
    text = run(command, "--help", code=0).stdout
    names = set()
    for line in text.splitlines():
        if line.startswith("  -"):  # "  -o,--output TEXT ...", "  --json"
            names |= set(line.split()[0].split(","))
    assert names, text
    return names


def bash_complete(script, words, cwd=None):
    """COMPREPLY of the bash completion function for `words` (the last one being completed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    code = (f"source '{script}'\ncomplete -p tfckpt\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
            "_tfckpt\nprintf '%s\\n' \"${COMPREPLY[@]}\"")
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", code], capture_output=True, text=True, cwd=cwd)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "complete -F _tfckpt tfckpt", lines
    return set(filter(None, lines[1:]))


@test()
def completion_scripts_cover_every_option_of_every_command():
    with tempfile.TemporaryDirectory() as d:
        scripts = {}
        for shell in ("bash", "zsh", "fish"):
            scripts[shell] = run("completion", shell, code=0).stdout
            assert scripts[shell].strip(), shell
        import re
        for command in COMMANDS:
            for name in help_options(command):
                for shell, text in scripts.items():
                    if shell == "fish":  # -s o / -l output
                        flag = ("-s " + name[1:]) if not name.startswith("--") else ("-l " + name[2:])
                        hit = re.search(r"__fish_seen_subcommand_from %s'.* %s( |$)" % (command, re.escape(flag)),
                                        text, re.M)
                    else:
                        hit = re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(name), text)
                    assert hit, f"{shell}: {command} {name}"
        # The shells themselves accept the scripts.
        for shell in ("bash", "zsh", "fish"):
            path = os.path.join(d, "tfckpt." + shell)
            with open(path, "w") as f:
                f.write(scripts[shell])
            if shutil.which(shell):
                p = subprocess.run([shell, "-n", path], capture_output=True, text=True)
                assert p.returncode == 0, (shell, p.stderr)
        # fish, for real: what it offers after "--to ".
        if shutil.which("fish"):
            p = subprocess.run(["fish", "--no-config", "-c", f"source {os.path.join(d, 'tfckpt.fish')}; "
                                "complete -C 'tfckpt convert x --to '"], capture_output=True, text=True)
            assert {l.split("\t")[0] for l in p.stdout.splitlines()} == {"tf", "safetensors", "npz"}, p
        # zsh, for real: an interactive zsh on a pty (zpty) lists the values of --to.
        if shutil.which("zsh"):
            os.rename(os.path.join(d, "tfckpt.zsh"), os.path.join(d, "_tfckpt"))
            setup = (f'PS1="> "; fpath=({d} $fpath); autoload -Uz compinit; compinit -u -d {d}/dump; '
                     'zstyle ":completion:*" menu no')
            driver = (f"zmodload zsh/zpty\nzpty z zsh -f -i\nzpty -w z '{setup}'\n"
                      "zpty -w z $'tfckpt convert x --to \\t'\nzpty -r z out '*npz*safetensors*tf*'\n"
                      "print listed\nzpty -d z\n")
            p = subprocess.run(["zsh", "-f", "-c", driver], capture_output=True, text=True, timeout=60)
            assert p.stdout.strip().endswith("listed"), (p.stdout[-2000:], p.stderr)


@test()
def bash_completion_completes_commands_options_values_and_checkpoints():
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "tfckpt.bash")
        with open(script, "w") as f:
            f.write(run("completion", "bash", code=0).stdout)
        assert bash_complete(script, ["tfckpt", ""]) >= set(COMMANDS) | {"--help", "--version"}
        assert bash_complete(script, ["tfckpt", "conv"]) == {"convert"}
        assert bash_complete(script, ["tfckpt", "convert", "m", "--to", ""]) == {"tf", "safetensors", "npz"}
        assert bash_complete(script, ["tfckpt", "reshard", "m", "--policy", "s"]) == {"shards:", "single"}
        # The parsers' own words (reshard/partition.cc): sharding_specs: was accepted, never offered.
        assert bash_complete(script, ["tfckpt", "reshard", "m", "--partition", "s"]) == {"sharding_specs:"}
        assert bash_complete(script, ["tfckpt", "convert", "m", "--partition", "m"]) == {"min-size", "min-size:", "max-size:"}
        assert bash_complete(script, ["tfckpt", "merge", "--on-conflict", ""]) == {"error", "first", "last"}
        assert bash_complete(script, ["tfckpt", "inspect", "m", "--st"]) == {"--stats"}
        assert bash_complete(script, ["tfckpt", "completion", ""]) == {"bash", "zsh", "fish"}
        assert bash_complete(script, ["tfckpt", "validate", "-j", ""]) == set()
        # Checkpoint paths: the prefix of each .index, the .index itself; not the data files.
        os.mkdir(os.path.join(d, "run"))
        for name in ("model.ckpt-5.index", "model.ckpt-5.data-00000-of-00001", "checkpoint"):
            open(os.path.join(d, "run", name), "w").close()
        got = bash_complete(script, ["tfckpt", "inspect", "run/mo"], cwd=d)
        assert got == {"run/model.ckpt-5", "run/model.ckpt-5.index"}, got
        got = bash_complete(script, ["tfckpt", "reshard", "run/model.ckpt-5", "-o", "run/c"], cwd=d)
        assert got == {"run/checkpoint"}, got

# Reads every member of an .npz with numpy (np.load) and the tensors of a safetensors file
# by its header; prints "same N" when each member equals the tensor of its name.
NPZ_EQUALS_SAFETENSORS = r"""
import json, struct, sys
import numpy as np
npz, st = sys.argv[1], sys.argv[2]
raw = open(st, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
codes = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "F16": "<f2", "BOOL": "|b1"}
f = np.load(npz)
count = 0
for name, e in header.items():
    if name == "__metadata__":
        continue
    b, end = e["data_offsets"]
    want = np.frombuffer(raw[8 + n + b:8 + n + end], dtype=codes[e["dtype"]]).reshape(e["shape"])
    got = f[name]
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
    assert got.tobytes() == want.tobytes(), name
    count += 1
print("same", count)
"""


@test()
def every_output_has_the_same_bytes_whatever_the_number_of_threads():
    # Issue 26: outputs laid out before they are written, filled by -j threads.
    with tempfile.TemporaryDirectory() as d:
        src = example(d)
        resliced = os.path.join(d, "resliced", "m")
        run("reshard", src, "-o", resliced, "--partition", "fixed:3", "--policy", "shards:3", "-q", code=0)
        got = {}
        for j in ("1", "4"):
            o = lambda name: os.path.join(d, "j" + j, name)
            for args in (["convert", src, "-o", o("m.safetensors"), "--cast", "bfloat16=float32"],
                         ["convert", src, "-o", o("set.safetensors"), "--cast", "bfloat16=float32",
                          "--max-file-size", "20K"],
                         ["convert", src, "-o", o("m.npz"), "--cast", "bfloat16=float32"],
                         ["convert", src, "-o", o("bf16"), "--cast", "float32=bfloat16"],
                         ["convert", src, "-o", o("v2"), "--rename", "^wide_deep/=wd/"],
                         ["merge", src, resliced, "-o", o("avg"), "--average", "--on-conflict", "last"],
                         ["reshard", src, "-o", o("r"), "--partition", "fixed:3", "--policy", "shards:2"]):
                run(*args, "-j", j, "-q", code=0)
            run("convert", o("m.safetensors"), "-o", o("back"), "-j", j, "-q", code=0)
            got[j] = tree_bytes(os.path.join(d, "j" + j))
        assert len(got["1"]) > 15 and got["1"].keys() == got["4"].keys(), sorted(got["1"])
        for name in got["1"]:
            assert got["1"][name] == got["4"][name], name
        check = subprocess.run([numpy_python(), "-c", NPZ_EQUALS_SAFETENSORS, os.path.join(d, "j4", "m.npz"),
                                os.path.join(d, "j4", "m.safetensors")], capture_output=True, text=True)
        assert check.returncode == 0 and check.stdout.startswith("same "), check.stderr


if __name__ == "__main__":
    sys.exit(main("cli_output"))
