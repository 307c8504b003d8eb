#!/usr/bin/env python3
"""Crash-safe outputs (docs/RELIABILITY.md): SIGKILL during a multi-file reshard, an
interrupted commit, a full disk, and outputs that would overwrite inputs.

Usage: crash_safety_test.py TFCKPT GEN_CHECKPOINT
"""
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types

from harness import run_tests

TFCKPT, GEN = sys.argv[1], sys.argv[2]
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def run(*args, code=None, env=None, preexec_fn=None, timeout=300):
    p = subprocess.run([TFCKPT, *args], capture_output=True, text=True, env=env, preexec_fn=preexec_fn,
                       timeout=timeout)
    if code is not None:
        assert p.returncode == code, f"{args}: exit {p.returncode}, want {code}\n{p.stdout}\n{p.stderr}"
    return p


def one_error_line(p, *needles):
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and ": error: " in lines[0], f"want one error line, got {p.stderr!r}"
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"


def digest(d):
    """sha256 of every file under d, by relative path."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def temporaries(d):
    return [f for f in os.listdir(d) if ".tmp-tfckpt-" in f]


def make_input(d, mib=24, tables=4, slices=4):
    """A synthetic checkpoint under d/in (MIB MiB per table, SLICES data files): its dir,
    prefix and digest, and an output prefix d/out/model."""
    src = os.path.join(d, "in")
    os.makedirs(src)
    subprocess.run([GEN, "tables", os.path.join(src, "model"), str(mib), str(tables), str(slices)], check=True,
                   capture_output=True)
    out_dir = os.path.join(d, "out")
    return types.SimpleNamespace(src=src, prefix=os.path.join(src, "model"), before=digest(src), out_dir=out_dir,
                                 out=os.path.join(out_dir, "model"))


RESHARD = ["--partition", "fixed:3", "--policy", "shards:3", "-j", "2", "--quiet"]


def check_destination(out_dir, prefix, src_prefix):
    """The destination is absent (no index) or complete and equal to the input."""
    if not os.path.exists(prefix + ".index"):
        return "absent"
    run("validate", prefix, "--against", src_prefix, code=0)
    return "complete"


@test
def sigkill_at_many_points_during_a_multi_file_reshard():
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=64)
        src, src_prefix, before, out_dir, prefix = i.src, i.prefix, i.before, i.out_dir, i.out
        t0 = time.monotonic()
        run("reshard", src_prefix, "-o", prefix, *RESHARD, code=0)
        full = time.monotonic() - t0
        shutil.rmtree(out_dir)
        outcomes = {}
        points = 12
        for i in range(points):
            delay = full * (i + 0.5) / points
            p = subprocess.Popen([TFCKPT, "reshard", src_prefix, "-o", prefix, *RESHARD],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            p.wait()
            state = check_destination(out_dir, prefix, src_prefix)
            outcomes[state] = outcomes.get(state, 0) + 1
            assert digest(src) == before, "the input changed"
            # The next run: completes (cleaning up what the killed one left), or is
            # refused because the killed run had already finished.
            again = run("reshard", src_prefix, "-o", prefix, *RESHARD)
            if state == "absent":
                assert again.returncode == 0, again.stderr
            else:
                assert again.returncode == 2 and "exists" in again.stderr, again.stderr
            run("validate", prefix, "--against", src_prefix, code=0)
            assert temporaries(out_dir) == [], temporaries(out_dir)
            shutil.rmtree(out_dir)
        assert outcomes.get("absent", 0) > 0, outcomes
        print(f"     kill points: {outcomes} (run takes {full:.2f} s)")


@test
def a_commit_killed_between_data_and_index_is_cleaned_up():
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=2)
        src, src_prefix, before, out_dir, prefix = i.src, i.prefix, i.before, i.out_dir, i.out
        env = dict(os.environ, TFCKPT_FAULT_KILL_AT="commit")
        p = run("reshard", src_prefix, "-o", prefix, *RESHARD, env=env)
        assert p.returncode == -signal.SIGKILL, p.returncode
        # Data files are in place, the index is not: no checkpoint there.
        assert not os.path.exists(prefix + ".index")
        assert any(".data-" in f and ".tmp-" not in f for f in os.listdir(out_dir)), os.listdir(out_dir)
        assert any(f.startswith("model.index.tmp-tfckpt-") for f in os.listdir(out_dir)), os.listdir(out_dir)
        run("validate", prefix, code=3)
        # The next run, without --force, recognises the interrupted commit and completes.
        run("reshard", src_prefix, "-o", prefix, *RESHARD, code=0)
        run("validate", prefix, "--against", src_prefix, code=0)
        assert temporaries(out_dir) == []
        assert digest(src) == before


@test
def a_failed_run_removes_its_temporaries_and_a_live_writers_are_left_alone():
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=1)
        src_prefix, out_dir, prefix = i.prefix, i.out_dir, i.out
        os.makedirs(out_dir)
        # A temporary of a writer that is still running (this test's pid) is not touched;
        # one of a dead writer is removed.
        live = os.path.join(out_dir, f"model.data-00000-of-00003.tmp-tfckpt-{os.getpid()}-0")
        finished = subprocess.Popen(["true"])
        finished.wait()
        dead_pid = finished.pid  # exited: its pid is not running (reuse this soon is unlikely)
        dead = os.path.join(out_dir, f"model.data-00001-of-00003.tmp-tfckpt-{dead_pid}-0")
        for f in (live, dead):
            open(f, "wb").write(b"x" * 10)
        run("reshard", src_prefix, "-o", prefix, *RESHARD, code=0)
        assert os.path.exists(live) and not os.path.exists(dead), os.listdir(out_dir)


def small_disk(d):
    """A 1 MiB tmpfs at d/small when we may mount; else None (use RLIMIT_FSIZE)."""
    mnt = os.path.join(d, "small")
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], capture_output=True)
    return mnt if r.returncode == 0 else None


def limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


@test
def a_full_disk_gives_no_space_exit_3_and_no_output():
    """Both ways to run out of room: a 1 MiB tmpfs (where we may mount) and a 1 MiB
    file-size limit (RLIMIT_FSIZE, always)."""
    with tempfile.TemporaryDirectory() as d:
        src_prefix = make_input(d, mib=2, tables=2, slices=2).prefix
        mnt = small_disk(d)
        modes = [("rlimit", os.path.join(d, "limited"), limit_file_size)]
        if mnt:
            modes.append(("tmpfs", mnt, None))
        else:
            print("     (cannot mount a tmpfs here: RLIMIT_FSIZE only)")
        try:
            for mode, target, pre in modes:
                os.makedirs(target, exist_ok=True)
                cases = [
                    ["reshard", src_prefix, "-o", os.path.join(target, "r"), "--partition", "fixed:3", "--quiet"],
                    ["merge", src_prefix, "-o", os.path.join(target, "m"), "--exclude", "^nothing$"],
                    ["convert", src_prefix, "-o", os.path.join(target, "c.safetensors")],
                    ["convert", src_prefix, "-o", os.path.join(target, "c.npz")],
                ]
                if mode == "tmpfs":
                    # A plain merge links data files; across file systems it copies them.
                    cases.append(["merge", src_prefix, "-o", os.path.join(target, "m")])
                for args in cases:
                    p = run(*args, preexec_fn=pre, code=3)
                    one_error_line(p)
                    assert "no space" in p.stderr.lower(), (mode, p.stderr)
                    assert os.listdir(target) == [], (mode, args, os.listdir(target))
        finally:
            if mnt:
                subprocess.run(["umount", mnt])


@test
def outputs_that_would_overwrite_inputs_are_refused():
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=1)
        src, src_prefix, before = i.src, i.prefix, i.before
        # Through a symlinked directory, even with --force.
        link = os.path.join(d, "link")
        os.symlink(src, link)
        one_error_line(run("reshard", src_prefix, "-o", os.path.join(link, "model"), "--force", code=2), "input")
        one_error_line(run("merge", src_prefix, "-o", os.path.join(link, "model"), "--drop-optimizer", "--force",
                           code=2), "input")
        # A data file of OUT that is a hard link to an input file.
        out_dir = os.path.join(d, "out")
        os.makedirs(out_dir)
        data = sorted(f for f in os.listdir(src) if ".data-" in f)
        os.link(os.path.join(src, data[0]), os.path.join(out_dir, "model.data-00000-of-00003"))
        one_error_line(run("reshard", src_prefix, "-o", os.path.join(out_dir, "model"), *RESHARD, "--force",
                           code=2), "same file")
        # A prefix whose files partly exist (data files, no index): refused without --force.
        os.unlink(os.path.join(out_dir, "model.data-00000-of-00003"))
        open(os.path.join(out_dir, "model.data-00000-of-00007"), "wb").write(b"old")
        one_error_line(run("reshard", src_prefix, "-o", os.path.join(out_dir, "model"), *RESHARD, code=2),
                       "exists", "--force")
        run("reshard", src_prefix, "-o", os.path.join(out_dir, "model"), *RESHARD, "--force", code=0)
        assert sorted(os.listdir(out_dir)) == ["model.data-00000-of-00003", "model.data-00001-of-00003",
                                               "model.data-00002-of-00003", "model.index"], os.listdir(out_dir)
        # convert onto its own input.
        st = os.path.join(d, "m.safetensors")
        run("convert", src_prefix, "-o", st, code=0)
        os.symlink(st, os.path.join(d, "alias.safetensors"))
        one_error_line(run("convert", os.path.join(d, "alias.safetensors"), "-o", st, "--force", code=2), "input")
        assert digest(src) == before


# Interrupts: SIGINT / SIGTERM / SIGHUP at several points of reshard, merge and convert.

def stage_files(d):
    """Every file under d (absent: none)."""
    out = []
    for root, _, files in os.walk(d):
        out += [os.path.join(root, f) for f in files]
    return out


def temporaries_under(d):
    return [f for f in stage_files(d) if ".tmp-tfckpt-" in f or ".npz." in os.path.basename(f)]


def temp_bytes_at_least(n):
    def cond(d):
        return sum(os.path.getsize(f) for f in temporaries_under(d) if os.path.exists(f)) >= n
    return cond


def appeared(suffix):
    return lambda d: any(f.endswith(suffix) for f in stage_files(d))


def any_temporary(d):
    return bool(temporaries_under(d))


def interrupt(args, out_dir, when, sig, stdout=None):
    """Runs tfckpt ARGS, sends SIG as soon as when(out_dir) holds (polled), and checks the
    interrupted run: exit 128 + SIG, one 'interrupted' line, nothing left under out_dir.
    Returns False when the run finished before the point was reached. With a list as
    `stdout`, the run's standard output is appended to it."""
    p = subprocess.Popen([TFCKPT, *args], stdout=subprocess.DEVNULL if stdout is None else subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    while not when(out_dir):
        if p.poll() is not None:
            break
        time.sleep(0.002)
    finished = p.poll() is not None
    if not finished:
        p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    if stdout is not None:
        stdout.append(out)
    if finished:
        assert p.returncode == 0, err
        shutil.rmtree(out_dir)
        return False
    assert p.returncode == 128 + sig, (args, sig, p.returncode, err)
    assert err.strip() == f"tfckpt {args[0]}: interrupted", (args, err)
    assert not os.path.exists(out_dir), (args, sig, stage_files(out_dir))
    return True


@test
def a_signal_at_any_point_leaves_no_temporaries_and_nothing_under_the_final_name():
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=64, tables=4, slices=4)  # 256 MiB
        src_prefix, out_dir, out = i.prefix, i.out_dir, i.out
        early, mid = any_temporary, temp_bytes_at_least(96 << 20)
        # All written, nothing published: the index's temporary exists while the output is
        # read back and verified (before the commit).
        verifying = lambda d: any(".index.tmp-tfckpt-" in f for f in stage_files(d))
        SIGS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
        reshard = ["reshard", src_prefix, "-o", out, *RESHARD]
        combine = ["merge", src_prefix, "-o", out, "--drop-optimizer", "-j", "2", "--quiet"]
        cases = [
            (reshard, early), (reshard, mid), (reshard, verifying),
            (["merge", src_prefix, "-o", out], verifying),
            (combine, mid), (combine, verifying),
            (["convert", src_prefix, "-o", out, "--quiet"], mid),
            (["convert", src_prefix, "-o", os.path.join(out_dir, "m.safetensors"), "--quiet"], early),
            (["convert", src_prefix, "-o", os.path.join(out_dir, "m.safetensors"), "--quiet"], mid),
            (["convert", src_prefix, "-o", os.path.join(out_dir, "m.npz"), "--quiet"], early),
            (["convert", src_prefix, "-o", os.path.join(out_dir, "m.npz"), "--quiet", "-j", "2"], mid),
            (["convert", src_prefix, "-o", os.path.join(out_dir, "s.safetensors"), "--max-file-size", "40M",
              "--quiet", "-j", "2"], mid),
            (["merge", src_prefix, src_prefix, "-o", out, "--average", "--on-conflict", "last", "-j", "2",
              "--quiet"], mid),
        ]
        missed = []
        for k, (args, when) in enumerate(cases):
            if not interrupt(args, out_dir, when, SIGS[k % 3]):
                missed.append(k)
            assert digest(i.src) == i.before, "the input changed"
        assert len(missed) <= 3, f"runs finished before the signal: cases {missed}"
        print(f"     {len(cases) - len(missed)} of {len(cases)} interrupt points reached")


@test
def an_interrupted_move_either_finishes_or_leaves_the_inputs_whole():
    """merge --move and --recover --move rename the inputs' data files: a signal at any
    moment either stops the run before anything moved (exit 128 + SIG, inputs whole,
    nothing at the output) or is held until the merge is done (exit 0, complete output,
    and a note) -- never a half-moved checkpoint."""
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=16, tables=4, slices=4)
        outcomes = []
        for k, delay in enumerate([0.0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16]):
            sig = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP][k % 3]
            work = os.path.join(d, f"w{k}")
            shutil.copytree(i.src, os.path.join(work, "in"))
            recover = k % 2 == 1
            if recover:  # the input as the one part of an unmerged save of work/ck
                os.makedirs(os.path.join(work, "ck_temp"))
                for f in os.listdir(os.path.join(work, "in")):
                    os.rename(os.path.join(work, "in", f), os.path.join(work, "ck_temp", f.replace(
                        "model", "part-00000-of-00001", 1)))
                args, out, inputs = ["merge", "--recover", os.path.join(work, "ck"), "--move", "-q"], \
                    os.path.join(work, "ck"), os.path.join(work, "ck_temp")
            else:
                args, out, inputs = ["merge", os.path.join(work, "in", "model"), "-o",
                                     os.path.join(work, "out", "m"), "--move"], os.path.join(work, "out", "m"), \
                    os.path.join(work, "in")
            before = digest(inputs)
            p = subprocess.Popen([TFCKPT, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(delay)
            p.send_signal(sig)
            _, err = p.communicate(timeout=120)
            if p.returncode == 0:
                run("validate", out, "--against", i.prefix, code=0)
                outcomes.append("finished")
            else:
                # -SIG: the signal came before tfckpt had started at all.
                assert p.returncode in (128 + sig, -sig), (args, delay, p.returncode, err)
                assert not os.path.exists(out + ".index") and not [f for f in stage_files(work) if
                                                                   os.path.basename(f).startswith(
                                                                       os.path.basename(out) + ".data")], \
                    (args, delay, stage_files(work))
                assert digest(inputs) == before, (args, delay, "the inputs were touched")
                outcomes.append("stopped")
            assert not temporaries_under(work), temporaries_under(work)
        print(f"     outcomes: {outcomes}")


@test
def an_interrupted_finalize_either_finishes_or_can_be_run_again():
    """reshard --finalize renames the tasks' data files into place: a signal either stops
    it with every part still there (a second --finalize completes) or waits until it is
    done (exit 0, complete output)."""
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=16, tables=4, slices=4)
        outcomes = []
        for k, delay in enumerate([0.003, 0.01, 0.03, 0.1]):
            sig = [signal.SIGINT, signal.SIGTERM][k % 2]
            out = os.path.join(d, f"o{k}", "m")
            plan = os.path.join(d, f"plan{k}.json")
            run("reshard", i.prefix, "-o", out, *RESHARD, "--plan", plan, code=0)
            for t in range(3):
                run("reshard", "--execute", plan, "--task", str(t), code=0)
            p = subprocess.Popen([TFCKPT, "reshard", "--finalize", plan], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
            time.sleep(delay)
            p.send_signal(sig)
            _, err = p.communicate(timeout=120)
            if p.returncode != 0:
                assert p.returncode in (128 + sig, -sig), (delay, p.returncode, err)
                assert not os.path.exists(out + ".index"), (delay, stage_files(os.path.dirname(out)))
                run("reshard", "--finalize", plan, code=0)  # the parts were left whole
                outcomes.append("stopped")
            else:
                outcomes.append("finished")
            run("validate", out, "--against", i.prefix, code=0)
            assert not temporaries_under(os.path.dirname(out))
        print(f"     outcomes: {outcomes}")


@test
def an_interrupted_json_run_prints_the_error_document():
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=64, tables=4, slices=4)
        for k, (args, sig) in enumerate([(["reshard", i.prefix, "-o", i.out, *RESHARD], signal.SIGINT),
                                         (["convert", i.prefix, "-o", i.out, "--quiet"], signal.SIGTERM)]):
            out = []
            assert interrupt([*args, "--json"], i.out_dir, temp_bytes_at_least(32 << 20), sig, out), \
                f"case {k} finished before the signal"
            doc = json.loads(out[0])
            assert doc == {"ok": False, "error": {"id": "interrupted", "message": "interrupted", "file": None,
                                                  "key": None, "offset": None}}, doc


def main():
    return run_tests([(fn, False) for fn in TESTS], "crash_safety")

if __name__ == "__main__":
    sys.exit(main())
