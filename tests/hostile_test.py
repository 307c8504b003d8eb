#!/usr/bin/env python3
"""The hostile-input suite of issue 37: every command and every Python read on crafted inputs
(tests/hostile_inputs.py), each in a child process of its own, measured.

Usage: hostile_test.py TFCKPT [PYTHON_PACKAGE_DIR [PYTHON]]
  PYTHON_PACKAGE_DIR: the build's python/ directory (the tfckpt module); "" or absent skips
  the Python calls (the sanitizer build has no module). PYTHON: the interpreter that has
  numpy (default /usr/bin/python3). HOSTILE_ONLY=case1,case2 runs only those cases;
  HOSTILE_JOBS=N the number of children run at once (default 2); HOSTILE_KEEP=1 keeps the
  generated inputs (their directory is printed).

What runs on each case (CKPT and KEY from the case):
  tfckpt inspect CKPT; inspect --json CKPT; inspect --tensor KEY CKPT; inspect --stats CKPT;
  inspect --stats -j 1 CKPT; validate CKPT; validate --json CKPT; validate CKPT --against
  CKPT; reshard CKPT -o OUT --partition none; merge CKPT -o OUT; convert CKPT -o
  x.safetensors; convert CKPT -o x.npz; convert CKPT -o OUTPREFIX (TensorFlow);
  and in a child /usr/bin/python3 with the built module: tfckpt.open(CKPT)[KEY],
  tfckpt.open(CKPT).get_slice(KEY)[0:1], tfckpt.load(CKPT),
  tfckpt.train.load_variable(CKPT, KEY), tfckpt.train.list_variables(CKPT).
The --policy file: cases run only `reshard GOOD -o OUT --policy file:SHARDS.json` (GOOD a
well-formed bundle), where exit 2 (a refused policy) or 3 is expected.

What each child must do (a violation is reported otherwise):
  * end by itself within the wall-clock bound (60 s; a hang is a failure), not by a signal;
  * CLI exit status: 3, except
      - `inspect` and `inspect --json` (plain listings, which describe the index and read
        no payload; payload defects are invisible to them): 0 is accepted too;
      - `validate` (all three forms): 1 (findings) is accepted too;
      - `inspect --stats` (both) on a case whose tensor is not numeric (string, variant,
        resource, unknown dtype): 0 is accepted too, since --stats reads numeric tensors only;
      - `convert -o x.safetensors` / `-o x.npz` on a case whose only tensor has a dtype the
        format cannot hold (string and variant for safetensors; variant for .npz; unknown
        dtypes for both): 2 ("nothing to write") is accepted too — the tensor is skipped
        unread, as convert documents;
      - cases marked benign (well-formed after all: a non-UTF-8 Dim.name, a zero-element
        tensor with huge later dimensions): 0 (and 1 for validate) is accepted for every
        command;
  * CLI stderr: exactly one line when the exit status is neither 0 nor 1, at most one line
    otherwise (validate prints its findings on stdout), and never "libprotobuf" (nor a
    sanitizer report);
  * with --json: stdout is one JSON document, whatever the exit status;
  * Python: the call returns (accepted for list_variables, a listing; for load when the
    tensor's dtype is one numpy cannot hold, such as variant, which load documents it leaves
    out with a warning; and for benign cases)
    or raises a tfckpt.Error (CorruptInputError for damage; UsageError/DTypeError are
    Error subclasses too); never MemoryError or any other exception. tfckpt.train on a
    directory whose state file names no checkpoint raises ValueError, as TensorFlow's
    load_checkpoint does, which is accepted for the state-file cases. The interpreter's
    stderr must not contain "libprotobuf";
  * peak RSS (wait4's ru_maxrss, which also counts the pages a child inherits at fork:
    children are forked from small forkserver workers, about 15 MiB) <= 256 MiB (1 GiB in the sanitizer build, whose shadow
    memory and quarantine inflate RSS);
  * CPU time (ru_utime + ru_stime) <= 5 s (20 s in the sanitizer build: the x4 of
    scripts/test-asan.sh) — a bound against balloons and spins, not a performance
    assertion; RLIMIT_CPU stops a child at twice that (SIGXCPU);
  * stdout and stderr each at most 64 MiB.
Every child gets RLIMIT_AS = 4 GiB (8 GiB for the Python interpreter, whose numpy/BLAS
reserve address space), so that a balloon fails fast instead of taking the machine; the
sanitizer build (detected by HOSTILE_SANITIZED=1, which tests/meson.build sets there, or a
TFCKPT path under a directory named *asan*) gets no RLIMIT_AS (its shadow reservation is
terabytes) but ASAN_OPTIONS hard_rss_limit_mb=2048 and max_allocation_size_mb=2048 with
allocator_may_return_null=0 (a huge allocation is then an ASan report: a violation).

Runtime: about 1840 children (106 cases x 18 commands, 4 policy cases x 1). They run 2 at a
time (HOSTILE_JOBS) from a forkserver pool; on the release build every case x command pair
is run (no combinations dropped). The sanitizer build, which CI runs beside the fuzzers and
the Debian packages on the same 2 cores, runs a rotating third of them (case i, command j
where (i + j) % 3 == 0): every case meets 6 commands, every command a third of the cases
(5.4 minutes for all 1330 pairs there, about 2 for a third). Measured on a 2-core machine busy with compiles (load 4-8): inputs
written in 6-10 s; each tfckpt child ~0.02 s CPU, each Python child ~0.12 s (numpy's
import); 407 s on the code of issue 37's filing, of which ~270 s are the two cases that
still spin until RLIMIT_CPU (v1_slices_listed_1e6, num_shards_2e20) — about 2.5 minutes once
every child is fast. Prints one line per violation, then 'N passed, N failed'
counting (case, command) pairs; exits 1 when any failed."""

import json
import multiprocessing
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402,F401  (resets inherited SIG_IGN dispositions)
import hostile_inputs  # noqa: E402

MiB = 1 << 20
TFCKPT = os.path.abspath(sys.argv[1])
PACKAGE_DIR = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else ""
PYTHON = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else "/usr/bin/python3"
SANITIZED = os.environ.get("HOSTILE_SANITIZED") == "1" or "asan" in TFCKPT.lower()
RSS_LIMIT_KIB = (1024 if SANITIZED else 256) * 1024
CPU_LIMIT_S = 20.0 if SANITIZED else 5.0
WALL_LIMIT_S = 60.0
AS_LIMIT = 4 << 30
AS_LIMIT_PYTHON = 8 << 30
STDOUT_CAP = 64 * MiB  # more output than this is a violation (and is not kept)
JOBS = int(os.environ.get("HOSTILE_JOBS", "2"))
ONLY = set(filter(None, os.environ.get("HOSTILE_ONLY", "").split(",")))

# Commands: (label, argument builder (case, out dir) -> argv, kind). Kinds decide the
# accepted exit statuses (see the docstring).
CLI = [
    ("inspect", lambda c, o: ["inspect", c.ckpt], "listing"),
    ("inspect --json", lambda c, o: ["inspect", "--json", c.ckpt], "listing"),
    ("inspect --tensor", lambda c, o: ["inspect", "--tensor", c.key, c.ckpt], "read"),
    ("inspect --stats", lambda c, o: ["inspect", "--stats", c.ckpt], "read"),
    ("inspect --stats -j 1", lambda c, o: ["inspect", "--stats", "-j", "1", c.ckpt], "read"),
    ("validate", lambda c, o: ["validate", c.ckpt], "validate"),
    ("validate --json", lambda c, o: ["validate", "--json", c.ckpt], "validate"),
    ("validate --against", lambda c, o: ["validate", c.ckpt, "--against", c.ckpt], "validate"),
    ("reshard --partition none", lambda c, o: ["reshard", c.ckpt, "-o", os.path.join(o, "out"),
                                               "--partition", "none"], "write"),
    ("merge", lambda c, o: ["merge", c.ckpt, "-o", os.path.join(o, "out")], "write"),
    ("convert -o x.safetensors", lambda c, o: ["convert", c.ckpt, "-o", os.path.join(o, "x.safetensors")], "write"),
    ("convert -o x.npz", lambda c, o: ["convert", c.ckpt, "-o", os.path.join(o, "x.npz")], "write"),
    ("convert -o PREFIX", lambda c, o: ["convert", c.ckpt, "-o", os.path.join(o, "out")], "write"),
]
POLICY_CLI = [
    ("reshard --policy file:", lambda c, o: ["reshard", c.ckpt, "-o", os.path.join(o, "out"),
                                             "--policy", "file:" + c.policy], "policy"),
]
PY = ["ckpt[KEY]", "get_slice(KEY)[0:1]", "load", "train.load_variable", "train.list_variables"]

PY_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
op, ckpt, key = sys.argv[2:5]
import tfckpt, tfckpt.train
try:
    if op == "ckpt[KEY]":
        with tfckpt.open(ckpt) as c:
            c[key]
    elif op == "get_slice(KEY)[0:1]":
        with tfckpt.open(ckpt) as c:
            c.get_slice(key)[0:1]
    elif op == "load":
        tfckpt.load(ckpt)
    elif op == "train.load_variable":
        tfckpt.train.load_variable(ckpt, key)
    elif op == "train.list_variables":
        tfckpt.train.list_variables(ckpt)
    out = {"ok": True}
except BaseException as e:
    out = {"exc": type(e).__name__, "error": isinstance(e, tfckpt.Error), "msg": str(e)[:300]}
print("HOSTILE-RESULT " + json.dumps(out))
"""


def _limits(as_limit):
    def apply():
        if as_limit:
            resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
        # A spinning child is stopped (SIGXCPU) at twice the CPU bound, not at the wall bound.
        cpu = int(2 * CPU_LIMIT_S)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def launch(argv, cwd, env, as_limit):
    """Runs argv in cwd, stdout and stderr to cwd/stdout and cwd/stderr; returns
    dict(status, signal, timed_out, rss_kib, cpu_s, wall_s). Runs in a worker of a forkserver
    pool: a child's ru_maxrss includes the resident pages it inherited at fork (Linux records
    the old image's high-water mark at exec), so children are forked from those small
    workers (about 15 MiB), never from the main process, which reads the outputs."""
    with open(os.path.join(cwd, "stdout"), "wb") as out, open(os.path.join(cwd, "stderr"), "wb") as err:
        start = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=cwd, env=env,
                             preexec_fn=_limits(as_limit))
    timed_out = []

    def kill():
        timed_out.append(True)
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    timer = threading.Timer(WALL_LIMIT_S, kill)
    timer.start()
    try:
        _, status, ru = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    wall = time.monotonic() - start
    p.returncode = os.waitstatus_to_exitcode(status)  # (Popen must not wait for it again)
    return {
        "status": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "timed_out": bool(timed_out),
        "rss_kib": ru.ru_maxrss,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "wall_s": wall,
    }


def read_outputs(cwd, r):
    """Adds the child's stdout and stderr (up to STDOUT_CAP + 1 bytes each) to r."""
    for stream in ("stdout", "stderr"):
        with open(os.path.join(cwd, stream), "rb") as f:
            r[stream] = f.read(STDOUT_CAP + 1).decode("utf-8", "replace")
    return r


def _short(text, n=200):
    text = " | ".join(l for l in text.strip().splitlines()[:3])
    return text if len(text) <= n else text[:n] + "..."


def _common(r, problems):
    if r["timed_out"]:
        problems.append(f"hung: killed after {WALL_LIMIT_S:.0f} s")
    elif r["signal"] is not None:
        problems.append(f"signal {r['signal']} ({signal.Signals(r['signal']).name}); stderr: {_short(r['stderr'])}")
    if r["rss_kib"] > RSS_LIMIT_KIB:
        problems.append(f"peak RSS {r['rss_kib'] // 1024} MiB > {RSS_LIMIT_KIB // 1024} MiB")
    if r["cpu_s"] > CPU_LIMIT_S:
        problems.append(f"CPU time {r['cpu_s']:.1f} s > {CPU_LIMIT_S:.0f} s")
    for stream in ("stdout", "stderr"):
        if len(r[stream]) > STDOUT_CAP:
            problems.append(f"{stream} over {STDOUT_CAP // MiB} MiB")
    # (Sanitizer reports first: one may list libprotobuf's mapping.)
    for bad in ("AddressSanitizer", "LeakSanitizer", "runtime error:", "libprotobuf"):
        if bad in r["stderr"]:
            problems.append(f"stderr has {bad!r}: {_short(r['stderr'])}")
            break


# DataTypes (docs/FORMAT.md §b.6) of fixed size, with a safetensors name (§j.3), with a
# NumPy type in convert's .npz (§k.2).
NUMERIC = set(range(1, 7)) | set(range(8, 20)) | set(range(22, 34))
SAFETENSORS = {1, 2, 3, 4, 5, 6, 8, 9, 10, 14, 17, 19, 22, 23, 24, 25}
NPZ = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 17, 18, 19, 22, 23}


def check_cli(case, kind, label, r):
    problems = []
    _common(r, problems)
    if r["timed_out"] or r["signal"] is not None:
        return problems
    codes = {"listing": {0, 3}, "read": {3}, "validate": {1, 3}, "write": {3}, "policy": {2, 3}}[kind]
    if label.startswith("inspect --stats") and case.dtype not in NUMERIC:
        codes = codes | {0}
    if (label == "convert -o x.safetensors" and case.dtype not in SAFETENSORS) or \
            (label == "convert -o x.npz" and case.dtype not in NPZ):
        codes = codes | {2}
    if case.benign:
        codes = codes | {0} | ({1} if kind == "validate" else set())
    code = r["status"]
    lines = [l for l in r["stderr"].splitlines() if l.strip()]
    if code not in codes:
        problems.append(f"exit {code}, wanted {' or '.join(map(str, sorted(codes)))}; stderr: {_short(r['stderr'])}")
    if code not in (0, 1) and len(lines) != 1:
        problems.append(f"stderr has {len(lines)} lines, wanted 1: {_short(r['stderr'], 300)}")
    elif code in (0, 1) and len(lines) > 1:
        problems.append(f"stderr has {len(lines)} lines, wanted at most 1: {_short(r['stderr'], 300)}")
    if "--json" in label and len(r["stdout"]) <= STDOUT_CAP:
        try:
            json.loads(r["stdout"])
        except ValueError as e:
            problems.append(f"stdout is not one JSON document ({e}): {_short(r['stdout'])}")
    return problems


def check_py(case, op, r):
    problems = []
    _common(r, problems)
    if r["timed_out"] or r["signal"] is not None:
        return problems
    result = None
    for line in r["stdout"].splitlines():
        if line.startswith("HOSTILE-RESULT "):
            result = json.loads(line[len("HOSTILE-RESULT "):])
    if result is None:
        problems.append(f"no result (exit {r['status']}); stderr: {_short(r['stderr'], 300)}")
        return problems
    if result.get("ok"):
        skipped = op == "load" and case.dtype not in NPZ  # (load leaves out what numpy cannot hold)
        if not (case.benign or skipped or op == "train.list_variables"):
            problems.append("returned, wanted tfckpt.CorruptInputError")
    elif not result["error"]:
        accepted = case.fmt == "state" and op.startswith("train.") and result["exc"] == "ValueError"
        if not accepted:
            problems.append(f"raised {result['exc']}: {_short(result['msg'])}")
    return problems


def main():
    if not os.access(TFCKPT, os.X_OK):
        print(f"FAIL: {TFCKPT} is not an executable")
        return 1
    python_ok = bool(PACKAGE_DIR) and os.path.isdir(PACKAGE_DIR) and os.access(PYTHON, os.X_OK)
    if PACKAGE_DIR and not python_ok:
        print(f"FAIL: no Python package at {PACKAGE_DIR!r} or no interpreter {PYTHON!r}")
        return 1
    root = tempfile.mkdtemp(prefix="tfckpt-hostile-")
    keep = os.environ.get("HOSTILE_KEEP") == "1"
    t0 = time.monotonic()
    try:
        # (Written by another process, as the outputs are: see launch.)
        gen = subprocess.run([sys.executable, hostile_inputs.__file__, os.path.join(root, "in"), "--json"],
                             capture_output=True, text=True)
        if gen.returncode != 0:
            print(f"FAIL: hostile_inputs.py: {gen.stderr}")
            return 1
        cases = [hostile_inputs.Case(**c) for c in json.loads(gen.stdout)]
        del gen
        if ONLY:
            unknown = ONLY - {c.name for c in cases}
            if unknown:
                print(f"FAIL: unknown cases {sorted(unknown)}")
                return 1
            cases = [c for c in cases if c.name in ONLY]
        gen_s = time.monotonic() - t0
        env = dict(os.environ)
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", LC_ALL="C.UTF-8")
        env.pop("TFCKPT_S3_CONNECTIONS", None)
        if SANITIZED:
            extra = "hard_rss_limit_mb=2048:max_allocation_size_mb=2048:allocator_may_return_null=0"
            env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS", ""), extra]))
        jobs = []
        for i, case in enumerate(cases):
            forms = POLICY_CLI if case.fmt == "policy" else CLI
            for j, (label, build, kind) in enumerate(forms):
                # (the sanitizer build: a third of the commands of each case, a different
                # third for the next case, so that every command meets a third of the cases
                # and every case three commands or more; CI's budget, see the docstring)
                if not SANITIZED or len(forms) == 1 or (i + j) % 3 == 0:
                    jobs.append((case, label, "cli", build, kind))
            if python_ok and case.fmt != "policy":
                for j, op in enumerate(PY):
                    if not SANITIZED or (i + j) % 3 == 0:
                        jobs.append((case, op, "py", None, None))
        work = os.path.join(root, "work")
        os.makedirs(work)
        as_limit = None if SANITIZED else AS_LIMIT

        def argv_of(n, job):
            case, label, how, build, _ = job
            d = os.path.join(work, str(n))
            os.makedirs(d)
            if how == "cli":
                return [TFCKPT, *build(case, d)], d, env, as_limit
            return [PYTHON, "-c", PY_CHILD, PACKAGE_DIR, label, case.ckpt, case.key], d, env, AS_LIMIT_PYTHON

        runs = [argv_of(n, job) for n, job in enumerate(jobs)]
        results = []
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(max_workers=max(1, JOBS), mp_context=context) as pool:
            futures = [pool.submit(launch, *run) for run in runs]
            for job, run, future in zip(jobs, runs, futures):
                case, label, how, _, kind = job
                d = run[1]
                try:
                    r = read_outputs(d, future.result())
                    problems = check_cli(case, kind, label, r) if how == "cli" else check_py(case, label, r)
                except Exception as e:  # (a child that could not start: a violation, not the end of the run)
                    r = {"status": None, "signal": None, "rss_kib": 0, "cpu_s": 0.0, "wall_s": 0.0}
                    problems = [f"could not run: {type(e).__name__}: {e}"]
                shutil.rmtree(d, ignore_errors=True)
                r = {k: r[k] for k in ("status", "signal", "rss_kib", "cpu_s", "wall_s")}
                results.append((case, label, r, problems))
                mark = "FAIL" if problems else "ok  "
                print(f"{mark} {case.name:32} {label:26} exit={r['status'] if r['signal'] is None else 'sig%d' % r['signal']}"
                      f" rss={r['rss_kib'] // 1024}MiB cpu={r['cpu_s']:.2f}s wall={r['wall_s']:.2f}s", flush=True)
        failed = [(c, l, p) for c, l, _, p in results if p]
        print()
        print(f"{len(cases)} cases generated in {gen_s:.1f} s; {len(jobs)} children; "
              f"total {time.monotonic() - t0:.1f} s; bounds: RSS {RSS_LIMIT_KIB // 1024} MiB, CPU {CPU_LIMIT_S:.0f} s, "
              f"wall {WALL_LIMIT_S:.0f} s{' (sanitizer build)' if SANITIZED else ''}"
              f"{'' if python_ok else '; Python calls skipped (no package)'}")
        if failed:
            print(f"\nViolations ({len(failed)}):")
            for case, label, problems in failed:
                for p in problems:
                    print(f"VIOLATION {case.name} | {label} | {p}")
        print(f"\nhostile: {len(results) - len(failed)} passed, {len(failed)} failed")
        return 1 if failed else 0
    finally:
        if keep:
            print(f"inputs kept in {root}/in")
            shutil.rmtree(os.path.join(root, "work"), ignore_errors=True)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
