"""The documentation cannot drift from the command line: every option of a command's --help
is in its man page (built from man/tfckpt-COMMAND.1.in and the option table), its entry
beginning with the sentence --help shows, and every option the man page describes is in
--help; the version --version prints is meson.build's, and so is every man page's.
Usage: cli_docs_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE"""

import re

from cli_common import *

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
COMMANDS = ["inspect", "validate", "reshard", "merge", "convert"]


def help_sentences(command):
    """The options --help lists for `command` (long names, --foo, and short ones, -f), each
    with the sentence it shows."""
    text = run(command, "--help", code=0).stdout
    options = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\s{2}((?:-\w,)?--[\w-]+)(?:(?: \S+)*?\s{2,}(\S.*))?", line)
        if m:
            # (CLI11 puts the sentence on the next line after a long option column.)
            sentence = m.group(2) or (lines[i + 1] if i + 1 < len(lines) else "")
            for name in m.group(1).split(","):
                options[name] = sentence.strip()
    options.pop("-h", None)
    options.pop("--help", None)
    return options


def help_options(command):
    return set(help_sentences(command))


# The built man pages (man/meson.build generates their OPTIONS from the option table).
MAN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(TFCKPT))), "man")


def man_entries(page):
    """The .TP entries of a man page: (options named on the tag line, the next line)."""
    with open(os.path.join(MAN, page)) as f:
        text = f.read()
    section = text[text.index(".SH OPTIONS"):]
    lines = section[:section.find("\n.SH", 1) % (len(section) + 1)].splitlines()
    entries = []
    for i, line in enumerate(lines[:-2]):
        if line.strip() != ".TP":
            continue
        tag = lines[i + 1].replace("\\-", "-")
        names = re.findall(r"(?<![\w-])(--[a-z][\w-]*|-[a-zA-Z])(?![\w-])", tag)
        entries.append((names, lines[i + 2].replace("\\-", "-").replace("\\e", "\\")))
    return entries


def man_options(page):
    """The options a man page describes: those named on the tag line of each .TP entry."""
    return {name for names, _ in man_entries(page) for name in names}


@test()
def every_option_of_help_is_in_the_man_page_and_back():
    problems = []
    for command in COMMANDS:
        in_help = help_options(command)
        in_man = man_options(f"tfckpt-{command}.1")
        if in_help - in_man:
            problems.append(f"man tfckpt-{command} lacks {sorted(in_help - in_man)}")
        if in_man - in_help:
            problems.append(f"man tfckpt-{command} describes {sorted(in_man - in_help)}, which --help does not list")
        # Each option's entry begins with the sentence --help shows (both from the table).
        sentences = help_sentences(command)
        for names, first in man_entries(f"tfckpt-{command}.1"):
            option = [n for n in names if n.startswith("--")]
            if option and option[0] in sentences and not first.startswith(sentences[option[0]]):
                problems.append(f"man tfckpt-{command}: {option[0]} begins {first[:60]!r}, --help says "
                                f"{sentences[option[0]][:60]!r}")
    assert not problems, "\n".join(problems)


@test()
def every_example_url_names_a_bucket_tfckpt_accepts():
    """Bucket names are 3 to 63 characters (tfckpt refuses others): an example that a user
    copies must run. Man pages, README, docs and every command's --help."""
    texts = {}
    for d in ("man", "docs"):
        for name in sorted(os.listdir(os.path.join(ROOT, d))):
            with open(os.path.join(ROOT, d, name)) as f:
                texts[f"{d}/{name}"] = f.read().replace("\\-", "-")
    with open(os.path.join(ROOT, "README.md")) as f:
        texts["README.md"] = f.read()
    for c in COMMANDS:
        texts[f"{c} --help"] = run(c, "--help", code=0).stdout
    bad = []
    for where, text in texts.items():
        for bucket in re.findall(r"\b(?:s3|gs)://([A-Za-z0-9._-]+)", text):
            if not 3 <= len(bucket) <= 63 and bucket.isascii() and bucket.upper() != bucket:
                bad.append((where, bucket))
    assert not bad, bad


@test()
def the_version_is_meson_builds_everywhere():
    with open(os.path.join(ROOT, "meson.build")) as f:
        version = re.search(r"version : '([^']+)'", f.read()).group(1)
    assert run("--version", code=0).stdout.strip() == f"tfckpt {version}"
    # Man pages take it from meson.build when they are built (their source says @VERSION@).
    for page in os.listdir(os.path.join(ROOT, "man")):
        if page.endswith(".1.in"):
            with open(os.path.join(ROOT, "man", page)) as f:
                first = f.readline()
            assert '"tfckpt @VERSION@"' in first, (page, first)
    built = os.path.join(os.path.dirname(TFCKPT), "..", "man", "tfckpt.1")
    with open(built) as f:
        assert f'"tfckpt {version}"' in f.readline()
    # Nothing else in the sources writes it.
    written = subprocess.run(["git", "-C", ROOT, "grep", "-l", "-F", version, "--", ".", ":!meson.build",
                              ":!docs/", ":!tests/fuzz_regressions/", ":!subprojects/"],
                             capture_output=True, text=True).stdout.split()
    assert written == [], written


if __name__ == "__main__":
    sys.exit(main("cli_docs"))
