"""The option table's generated outputs (src/options/generate.py): a throwaway row added to
the table appears in the man page's OPTIONS (its entry beginning with the sentence --help
shows), in the Python keywords, docstring source and stubs, and in the C++ table, with no
other edit; and the outputs of the real table agree with the built program.
(tests/options_tests.cc sees the same for --help, the completions and the parser.)

usage: options_test.py SOURCE_ROOT BUILD_DIR with-python|without-python (whether the build
makes the Python package: the sanitizer build does not)"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

from harness import main, test

ROOT, BUILD = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
WITH_PYTHON = sys.argv[3] == "with-python"
GENERATE = os.path.join(ROOT, "src", "options", "generate.py")
# The parsers' words as the built program printed them (ServerSideWords, ...): the man
# pages and stubs spell out a choice's words from them.
WORDS = os.path.join(BUILD, "src", "option_words.json")

EXTRA = '''
from table import Option
ROWS = [Option("--throwaway-row", ("validate", "convert"), kind="int", value="COUNT", range=(0, 9),
               help="A row only this test adds", doc="More about it, in the man page only.",
               member=None)]
'''


def generate(*args, extra=None, words=WORDS):
    cmd = [sys.executable, GENERATE] + (["--extra", extra] if extra else []) + (["--words", words] if words else [])
    cmd += list(args)
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p


def written(d, name, text):
    """`text` as the file `name` in folder `d`: its path."""
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def load(path):
    spec = importlib.util.spec_from_file_location("generated_options", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@test()
def a_throwaway_row_is_in_every_generated_output():
    with tempfile.TemporaryDirectory() as d:
        extra = written(d, "extra.py", EXTRA)
        for command in ("validate", "convert", "inspect"):
            out = os.path.join(d, f"tfckpt-{command}.1")
            generate("man", command, os.path.join(ROOT, "man", f"tfckpt-{command}.1.in"), out, "0", extra=extra)
            page = open(out).read()
            entry = '.TP\n.BI "\\-\\-throwaway\\-row " COUNT\nA row only this test adds.\n'
            assert (entry in page) == (command != "inspect"), (command, page[page.find(".SH OPTIONS"):][:400])
            if command != "inspect":
                assert "COUNT is a whole number from 0 to 9." in page
                assert "More about it, in the man page only." in page
        generate("py", os.path.join(d, "_options.py"), extra=extra)
        commands = load(os.path.join(d, "_options.py")).COMMANDS
        for command in ("validate", "convert"):
            keyword = [p for p in commands[command][1] if p["keyword"] == "throwaway_row"]
            assert keyword == [{"keyword": "throwaway_row", "name": "--throwaway-row", "kind": "int",
                                "help": "A row only this test adds", "positional": False, "required": False}]
        assert not [p for p in commands["inspect"][1] if p["keyword"] == "throwaway_row"]
        generate("pyi", os.path.join(ROOT, "python", "tfckpt", "__init__.pyi.in"), os.path.join(d, "s.pyi"),
                 extra=extra)
        stub = open(os.path.join(d, "s.pyi")).read()
        for command in ("validate", "convert"):
            line = re.search(rf"^def {command}\(.*$", stub, re.M).group(0)
            assert "throwaway_row: Optional[int] = None" in line, line
        generate("cc", os.path.join(d, "t.cc"), extra=extra)
        cc = open(os.path.join(d, "t.cc")).read()
        assert cc.count('.name = "--throwaway-row"') == 2
        assert '.lo = 0, .hi = 9' in cc


@test()
def a_contradictory_row_fails_the_build_naming_it():
    with tempfile.TemporaryDirectory() as d:
        extra = written(d, "extra.py", EXTRA.replace("member=None", "member=None, needs=('--no-such-option',)"))
        p = subprocess.run([sys.executable, GENERATE, "--extra", extra, "cc", os.path.join(d, "t.cc")],
                           capture_output=True, text=True)
        assert p.returncode != 0
        assert "--throwaway-row (validate): needs or excludes --no-such-option" in p.stderr, p.stderr


CHOICE = '''
from table import Option
ROWS = [Option("--throwaway-choice", ("merge",), kind="choice", value="WHICH", words="ThrowawayWords",
               help="A choice only this test adds", member=None)]
'''


@test()
def a_choice_has_its_parsers_words_in_every_generated_output():
    with tempfile.TemporaryDirectory() as d:
        extra = written(d, "extra.py", CHOICE)
        words = written(d, "words.json", open(WORDS).read().replace("{", '{"ThrowawayWords": ["alpha", "beta"],', 1))
        out = os.path.join(d, "tfckpt-merge.1")
        generate("man", "merge", os.path.join(ROOT, "man", "tfckpt-merge.1.in"), out, "0", extra=extra, words=words)
        page = open(out).read()
        assert '.BI "\\-\\-throwaway\\-choice " WHICH\nA choice only this test adds.\nWHICH is alpha or beta.\n' in page
        # The real rows' words too: the table names the parser, the page spells its words.
        assert "RULE is error, first or last." in page
        assert "MODE is auto, never or always." in page
        generate("pyi", os.path.join(ROOT, "python", "tfckpt", "__init__.pyi.in"), os.path.join(d, "s.pyi"),
                 extra=extra, words=words)
        line = re.search(r"^def merge\(.*$", open(os.path.join(d, "s.pyi")).read(), re.M).group(0)
        assert "throwaway_choice: Optional[Literal['alpha', 'beta']] = None" in line, line
        assert "on_conflict: Optional[Literal['error', 'first', 'last']] = None" in line, line
        generate("cc", os.path.join(d, "t.cc"), extra=extra, words=None)
        cc = open(os.path.join(d, "t.cc")).read()
        assert ".words = &ThrowawayWords" in cc and "alpha" not in cc
        generate("words-cc", os.path.join(d, "w.cc"), extra=extra, words=None)
        assert 'Print("ThrowawayWords", tfckpt::ThrowawayWords()' in open(os.path.join(d, "w.cc")).read()
        # Without the parsers' words a page or stub that spells out choices is not made.
        for args in (("man", "merge", os.path.join(ROOT, "man", "tfckpt-merge.1.in"), out, "0"),
                     ("pyi", os.path.join(ROOT, "python", "tfckpt", "__init__.pyi.in"), os.path.join(d, "s.pyi"))):
            p = subprocess.run([sys.executable, GENERATE] + list(args), capture_output=True, text=True)
            assert p.returncode != 0 and "give --words FILE" in p.stderr, (args, p.stderr)
        # A choice row that names no parser is refused, naming it.
        written(d, "extra.py", CHOICE.replace('words="ThrowawayWords",', ""))
        p = subprocess.run([sys.executable, GENERATE, "--extra", extra, "cc", os.path.join(d, "t.cc")],
                           capture_output=True, text=True)
        assert p.returncode != 0 and "--throwaway-choice (merge): a choice without words" in p.stderr, p.stderr


@test()
def the_built_outputs_are_the_tables():
    # What the build installs is what the generator makes of the table now.
    with tempfile.TemporaryDirectory() as d:
        for command in ("inspect", "validate", "reshard", "merge", "convert"):
            out = os.path.join(d, f"tfckpt-{command}.1")
            version = re.search(r"version : '([^']+)'", open(os.path.join(ROOT, "meson.build")).read()).group(1)
            generate("man", command, os.path.join(ROOT, "man", f"tfckpt-{command}.1.in"), out, version)
            assert open(out).read() == open(os.path.join(BUILD, "man", f"tfckpt-{command}.1")).read(), command
        if WITH_PYTHON:
            generate("py", os.path.join(d, "_options.py"))
            assert open(os.path.join(d, "_options.py")).read() == \
                open(os.path.join(BUILD, "python", "tfckpt", "_options.py")).read()
            generate("pyi", os.path.join(ROOT, "python", "tfckpt", "__init__.pyi.in"), os.path.join(d, "s.pyi"))
            assert open(os.path.join(d, "s.pyi")).read() == \
                open(os.path.join(BUILD, "python", "tfckpt", "__init__.pyi")).read()


if __name__ == "__main__":
    sys.exit(main("options"))
