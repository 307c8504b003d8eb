#!/usr/bin/python3
"""TensorFlow's reader beside tfckpt on hostile input (issue 39, item 5): the crafted
checkpoints of the untrusted-input suite (tests/hostile_inputs.py; the --policy file: cases,
whose checkpoint is a good one, left out) go through TensorFlow's CheckpointReader and
through tfckpt.

Usage (tests/meson.build, the test tf_hostile): tf_hostile_test.py VENV_PYTHON TFCKPT PACKAGE_DIR
  VENV_PYTHON, TFCKPT, PACKAGE_DIR as for tests/tf_oracle_test.py: the oracle's venv python
  (skipped, exit 77, when it is missing, except under CI=true, where that is a failure), the
  tfckpt binary and the built Python package. TF_HOSTILE_ONLY=case1,case2 runs only those.

TensorFlow (the venv's python, role `--tf CASES.json OUT.json`) is imported once; each case
then runs in a child forked from that process (no second import): tf.train.load_checkpoint
(CKPT), get_variable_to_shape_map(), get_variable_to_dtype_map(), and get_tensor() of every
listed key (an exception of one key does not stop the others). The child runs under
RLIMIT_AS = 8 GiB (the parent's ~1 GiB of address space included), RLIMIT_CPU = 10 s and a
wall-clock bound of 30 s, one child at a time. Its outcome is classified:
  ok       every call returned;
  error    a Python exception (the first one's type and line is kept; "n/m keys" when the
           listing succeeded and some reads raised);
  crash    ended by a signal it raised itself (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, ...);
  limit    stopped by a limit: SIGXCPU (the CPU bound), an allocation refused under RLIMIT_AS
           (std::bad_alloc or a failed allocation on stderr, MemoryError), or a peak RSS
           growth of more than 1 GiB (a balloon, even if it returned);
  timeout  killed at the wall-clock bound.
TensorFlow's outcomes are recorded, not judged: one line a case, then a summary table (the
counts and every crash, limit and timeout case with its signal), which docs/RELIABILITY.md
("TensorFlow's reader on the same inputs") quotes.

tfckpt is judged on the same inputs (in the driver, Debian's python3): `tfckpt validate CKPT`
(RLIMIT_AS 4 GiB, RLIMIT_CPU 10 s, wall 60 s) must exit 0, 1 or 3, never by a signal or the
bound; tfckpt.load(CKPT) (a child forked from the driver after `import tfckpt`, RLIMIT_AS
8 GiB) must return or raise a tfckpt.Error (for a state-file directory ValueError too, as
TensorFlow's load_checkpoint raises), never another exception, a signal or the bound. One
line per check; the last line is "tf_hostile: N cases, ...".
"""

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 1 << 30
TF_AS_LIMIT = 8 * GiB
TF_CPU_S = 10
TF_WALL_S = 30
TF_BALLOON_KIB = 1 << 20  # 1 GiB of peak RSS growth
CLI_AS_LIMIT = 4 * GiB
PY_AS_LIMIT = 8 * GiB
CPU_S = 10
WALL_S = 60
ALLOC_FAILURES = ("bad_alloc", "Cannot allocate memory", "failed to allocate", "Failed to allocate",
                  "OOM", "Out of memory", "out of memory", "MemoryError")


def set_limits(as_limit, cpu_s):
    resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def wait_bounded(pid, wall_s):
    """Waits for pid, SIGKILLing it at wall_s; returns (status, rusage, timed_out)."""
    deadline = time.monotonic() + wall_s
    delay = 0.002
    while True:
        got, status, ru = os.wait4(pid, os.WNOHANG)
        if got == pid:
            return status, ru, False
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status, ru = os.wait4(pid, 0)
            return status, ru, True
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def vm_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


# --------------------------------------------------------------------------------------------
# The TensorFlow side (the venv's python).


def tf_child(tf, case, result_path):
    """Runs in the forked child: TF's reader on the case; writes what happened."""
    out = {"steps": [], "keys": 0, "key_errors": 0, "rss0_kib": vm_kib("VmRSS")}

    def note(exc):
        if "error" not in out:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            out["error"] = f"{type(exc).__name__}: {first[:200]}"

    def save():
        out["hwm_kib"] = vm_kib("VmHWM")
        with open(result_path, "w") as f:
            json.dump(out, f)
    def step(what):
        out["steps"].append(what)
        save()  # (a crash leaves the step it happened in)
    try:
        step("load_checkpoint")
        reader = tf.train.load_checkpoint(case["ckpt"])
        step("get_variable_to_shape_map")
        shapes = reader.get_variable_to_shape_map()
        step("get_variable_to_dtype_map")
        reader.get_variable_to_dtype_map()
        out["keys"] = len(shapes)
        for k in sorted(shapes):
            step(f"get_tensor {k[:40]!r}")
            try:
                reader.get_tensor(k)
            except Exception as e:  # noqa: BLE001 (TF raises its OpErrors, ValueError, ...)
                out["key_errors"] += 1
                note(e)
        out["steps"].append("done")
    except BaseException as e:  # noqa: BLE001 (MemoryError included: classified as a limit)
        note(e)
    save()


def tf_role(cases_path, out_path):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import warnings
    warnings.filterwarnings("ignore")
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")
    # TF's reader needs nothing lazily made beyond this; the fork happens with no worker threads.
    tf.train.list_variables  # noqa: B018
    with open(cases_path) as f:
        cases = json.load(f)
    work = os.path.dirname(os.path.abspath(out_path))
    results = {"tf_version": tf.__version__, "cases": {}}
    for case in cases:
        result_path = os.path.join(work, f"tf-{case['name']}.json")
        log_path = os.path.join(work, f"tf-{case['name']}.log")
        sys.stdout.flush()
        sys.stderr.flush()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                set_limits(TF_AS_LIMIT, TF_CPU_S)
                tf_child(tf, case, result_path)
            finally:
                os._exit(0)
        status, ru, timed_out = wait_bounded(pid, TF_WALL_S)
        wall = time.monotonic() - start
        got = {}
        if os.path.exists(result_path):
            with open(result_path) as f:
                got = json.load(f)
        with open(log_path, "rb") as f:
            log = f.read().decode("utf-8", "replace")
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        growth = max(0, got.get("hwm_kib", 0) - got.get("rss0_kib", 0))
        alloc_failed = any(s in log for s in ALLOC_FAILURES) or (got.get("error", "").startswith("MemoryError"))
        if timed_out:
            outcome, detail = "timeout", f"killed after {TF_WALL_S} s"
        elif sig == signal.SIGXCPU:
            outcome, detail = "limit", f"SIGXCPU (CPU {TF_CPU_S} s)"
        elif sig is not None and alloc_failed:
            outcome, detail = "limit", f"{signal.Signals(sig).name} after an allocation failed (RLIMIT_AS 8 GiB)"
        elif sig is not None:
            outcome, detail = "crash", signal.Signals(sig).name
        elif alloc_failed:
            outcome, detail = "limit", f"allocation refused (RLIMIT_AS 8 GiB): {got.get('error', '')}"
        elif growth > TF_BALLOON_KIB:
            outcome, detail = "limit", f"peak RSS grew {growth >> 10} MiB" + (
                f", then {got['error']}" if "error" in got else "")
        elif "error" in got:
            outcome = "error"
            detail = got["error"]
            if got["keys"] and any(st.startswith("get_tensor") for st in got["steps"]):
                detail = f"{got['key_errors']}/{got['keys']} keys: {detail}"
        elif "steps" not in got or os.WEXITSTATUS(status) != 0:
            outcome, detail = "crash", f"exit {os.WEXITSTATUS(status)} without a result"
        else:
            outcome, detail = "ok", f"{got['keys']} keys read"
        last = (got.get("steps") or ["(before load_checkpoint)"])[-1]
        lines = [ln for ln in log.strip().splitlines() if ln.strip()]
        # The line that says why (a CHECK's "Check failed", a fatal log line, terminate's
        # what()), else the last one.
        why = [ln for ln in lines if "Check failed" in ln or "what():" in ln or ln[:1] == "F" and ln[1:5].isdigit()]
        tail = (why or lines)[:1] if why else lines[-1:]
        results["cases"][case["name"]] = {
            "outcome": outcome, "detail": detail, "last_step": last, "log_tail": tail[0][:300] if tail else "",
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "wall_s": round(wall, 2), "rss_growth_mib": growth >> 10}
    with open(out_path, "w") as f:
        json.dump(results, f)


# --------------------------------------------------------------------------------------------
# The driver (Debian's python3 with numpy and the tfckpt package).


def tfckpt_load_child(tfckpt, case):
    """Forked from the driver: tfckpt.load; exit 0 returned, 3 a tfckpt.Error (or ValueError
    on a state-file directory), 4 any other exception."""
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    code = 4
    try:
        set_limits(PY_AS_LIMIT, CPU_S)
        tfckpt.load(case["ckpt"])
        code = 0
    except tfckpt.Error:
        code = 3
    except ValueError:
        code = 3 if case["fmt"] == "state" else 4
    except BaseException:  # noqa: BLE001
        code = 4
    finally:
        os._exit(code)


def describe(status, timed_out):
    if timed_out:
        return "killed at the wall-clock bound"
    if os.WIFSIGNALED(status):
        return f"ended by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.WEXITSTATUS(status)}"


def driver(venv_python, tfckpt_bin, package_dir):
    sys.path.insert(0, HERE)
    from tf_oracle_test import oracle_python  # (the same venv, found and missed the same way)
    venv_python, missing = oracle_python(venv_python)
    if missing is not None:
        return missing
    sys.path.insert(0, package_dir)
    import hostile_inputs
    import tfckpt

    t0 = time.time()
    only = set(filter(None, os.environ.get("TF_HOSTILE_ONLY", "").split(",")))
    checks = []  # (case, check, ok)

    def check(case, name, ok, detail=""):
        checks.append((case, name, ok))
        print(f"{'ok  ' if ok else 'FAIL'} {case}: {name}" + (f"\n     {detail}" if not ok and detail else ""),
              flush=True)

    with tempfile.TemporaryDirectory(prefix="tf_hostile.") as work:
        cases = [{"name": c.name, "ckpt": c.ckpt, "fmt": c.fmt, "key": c.key, "desc": c.desc}
                 for c in hostile_inputs.cases(os.path.join(work, "in"))
                 if c.fmt != "policy" and (not only or c.name in only)]
        with open(os.path.join(work, "cases.json"), "w") as f:
            json.dump(cases, f)
        t_tf = time.time()
        p = subprocess.run([venv_python, os.path.abspath(__file__), "--tf", os.path.join(work, "cases.json"),
                            os.path.join(work, "tf.json")], capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            print(f"FAIL: the TensorFlow role failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}")
            return 1
        with open(os.path.join(work, "tf.json")) as f:
            tf = json.load(f)
        t_tf = time.time() - t_tf
        print(f"TensorFlow {tf['tf_version']} read {len(cases)} hostile inputs in {t_tf:.1f} s", flush=True)

        for case in cases:
            name = case["name"]
            r = tf["cases"][name]
            where = "" if r["last_step"] == "done" else f"; in {r['last_step']}"
            print(f"TF   {name}: {r['outcome']} ({r['detail']}{where}; "
                  f"{r['cpu_s']} s CPU)", flush=True)

            # tfckpt validate: 0, 1 or 3, never a signal or the bound.
            out_dir = os.path.join(work, "cli", name)
            os.makedirs(out_dir)
            with open(os.path.join(out_dir, "stdout"), "wb") as o, open(os.path.join(out_dir, "stderr"), "wb") as e:
                q = subprocess.Popen([tfckpt_bin, "validate", case["ckpt"]], stdin=subprocess.DEVNULL, stdout=o,
                                     stderr=e, preexec_fn=lambda: set_limits(CLI_AS_LIMIT, CPU_S))
            status, _, timed_out = wait_bounded(q.pid, WALL_S)
            q.returncode = os.waitstatus_to_exitcode(status)
            ok = not timed_out and os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 1, 3)
            with open(os.path.join(out_dir, "stderr"), "rb") as e:
                err = e.read().decode("utf-8", "replace").strip()[:300]
            check(name, f"tfckpt validate ends by itself, exit 0/1/3 (TF: {r['outcome']})", ok,
                  f"{describe(status, timed_out)}: {err}")

            # tfckpt.load: returns or raises tfckpt.Error.
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                tfckpt_load_child(tfckpt, case)
            status, _, timed_out = wait_bounded(pid, WALL_S)
            ok = not timed_out and os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 3)
            check(name, f"tfckpt.load returns or raises tfckpt.Error (TF: {r['outcome']})", ok,
                  describe(status, timed_out) + (" (an exception other than tfckpt.Error)"
                                                 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 4 else ""))

        # The summary: TF's outcomes.
        counts = {}
        for case in cases:
            counts.setdefault(tf["cases"][case["name"]]["outcome"], []).append(case)
        print(f"\nTensorFlow {tf['tf_version']}'s reader on {len(cases)} hostile inputs:")
        print(f"  {'outcome':8} {'cases':>5}")
        for outcome in ("ok", "error", "crash", "limit", "timeout"):
            print(f"  {outcome:8} {len(counts.get(outcome, [])):5}")
        for outcome in ("crash", "limit", "timeout"):
            for case in counts.get(outcome, []):
                r = tf["cases"][case["name"]]
                where = "returned" if r["last_step"] == "done" else f"in {r['last_step']}"
                print(f"  {outcome:8} {case['name']:32} {r['detail']} ({where}; input: {case['desc']})"
                      + (f"\n           TF's last line: {r['log_tail']}" if r["log_tail"] else ""))
        print(f"  tfckpt on the same inputs: validate and tfckpt.load ended by themselves on all {len(cases)}"
              if all(ok for _, _, ok in checks) else "  tfckpt: see the FAIL lines above")

    failed = [c for c in checks if not c[2]]
    print(f"tf_hostile: {len(cases)} cases, {len(checks)} checks: {len(checks) - len(failed)} passed, "
          f"{len(failed)} failed ({time.time() - t0:.0f} s; TensorFlow {tf['tf_version']})")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--tf":
        tf_role(sys.argv[2], sys.argv[3])
        sys.stdout.flush()
        os._exit(0)
    sys.exit(driver(*sys.argv[1:4]))
