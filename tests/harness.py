"""The small test runner shared by the Python test files (cli_*_test.py, crash_safety_test.py,
python_test.py): a registry (@test), the real test data, and a runner that prints one line
per test and 'LABEL: N passed, N failed, N skipped'; and the helpers more than one of them
uses (raises, readme_example, work_dir, tree_digest)."""
import atexit
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import traceback

# The tests signal their runs (SIGINT, SIGTERM, SIGHUP), so those signals must reach them. A
# shell starts background jobs with SIGINT ignored (and nohup ignores SIGHUP); an ignored
# signal stays ignored across exec, and tfckpt, like other tools, keeps it so: every SIGINT
# case would then wait out HANG. A handled signal is reset to its default at exec, so the
# runs this process starts get the default whatever this process was started with.
for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, signal.default_int_handler if _sig == signal.SIGINT else signal.SIG_DFL)

# ../shared/testdata/tf, as meson passes it; tests that need it are skipped when it is
# missing, except under CI=true, where that is a failure.
TESTDATA = os.environ.get("TFCKPT_TESTDATA", "")
HAVE_DATA = os.path.isdir(TESTDATA)
TESTS = []


def test(needs_data=False):
    """Registers a test function (run in definition order by main)."""
    def wrap(fn):
        TESTS.append((fn, needs_data))
        return fn
    return wrap


def main(label):
    """Runs every registered test; the process exit code."""
    if not HAVE_DATA and os.environ.get("CI") == "true":
        print("FAIL: ../shared/testdata/tf is missing under CI=true")
        return 1
    return run_tests(TESTS, label, HAVE_DATA)


def run_tests(tests, label, have_data=True):
    """Runs (fn, needs_data) pairs; prints ok/FAIL/SKIP per test and a summary line.
    Returns the process exit code (1 when any test failed). TESTS_ONLY=name1,name2 in the
    environment runs only the tests of those names (for working on one of them)."""
    only = set(filter(None, os.environ.get("TESTS_ONLY", "").split(",")))
    passed = failed = skipped = 0
    for fn, needs_data in tests:
        if only and fn.__name__ not in only:
            continue
        if needs_data and not have_data:
            skipped += 1
            print(f"SKIP {fn.__name__} (no testdata)")
            continue
        try:
            fn()
            passed += 1
            print(f"ok   {fn.__name__}")
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}")
            traceback.print_exc()
    print(f"{label}: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


def torch_or_skip():
    """torch (Debian's python3-torch), or None after printing SKIP; missing under CI=true is
    a failure."""
    try:
        import torch
        return torch
    except ImportError:
        if os.environ.get("CI") == "true":
            raise AssertionError("python3-torch is missing under CI=true (scripts/install-deps.sh installs it)")
        print("SKIP: torch is not installed (apt-get install python3-torch)")
        return None


def raises(exc, fn, *needles):
    """fn() raises exc, whose message holds every needle; the exception."""
    try:
        fn()
    except exc as e:
        for n in needles:
            assert n in str(e), f"{n!r} not in {e!r}"
        return e
    raise AssertionError(f"no {exc.__name__} raised")


def readme_example(make_example, d):
    """The README's example checkpoint (written by make_example at d/model.ckpt): an embedding
    [1000, 16] in 4 slices over 2 files, dense layers, bfloat16, int64 and string tensors.
    Its prefix."""
    prefix = os.path.join(d, "model.ckpt")
    subprocess.run([make_example, prefix], check=True, capture_output=True)
    return prefix


def tree_digest(d):
    """{path relative to d: sha256} of every file under d."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def work_dir(prefix):
    """A new temporary directory (its name starting with prefix), removed when the test
    process exits."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d
