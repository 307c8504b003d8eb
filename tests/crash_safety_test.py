#!/usr/bin/env python3
"""Crash-safe outputs (docs/RELIABILITY.md): SIGKILL during a multi-file reshard, an
interrupted commit, a full disk, and outputs that would overwrite inputs.

Usage: crash_safety_test.py TFCKPT GEN_CHECKPOINT
"""
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import types

from fault_points import HANG, paused_at, read_line
from harness import TESTS, run_tests, test, tree_digest

TFCKPT, GEN = sys.argv[1], sys.argv[2]
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
    return types.SimpleNamespace(src=src, prefix=os.path.join(src, "model"), before=tree_digest(src), out_dir=out_dir,
                                 out=os.path.join(out_dir, "model"))


RESHARD = ["--partition", "fixed:3", "--policy", "shards:3", "-j", "2", "--quiet"]


def check_destination(out_dir, prefix, src_prefix):
    """The destination is absent (no index) or complete and equal to the input."""
    if not os.path.exists(prefix + ".index"):
        return "absent"
    run("validate", prefix, "--against", src_prefix, code=0)
    return "complete"


# Where a kill leaves the output (docs/RELIABILITY.md): before the data files are in place,
# nothing (its temporaries, which the next run removes); between them and the index, data
# files without an index (the next run recognises the interrupted commit and completes);
# after the index, a complete checkpoint (the next run is refused: it exists).
KILL_POINTS = [("temporary-created", "absent"), ("piece-written#1", "absent"), ("piece-written#6", "absent"),
               ("verifying", "absent"), ("before-commit", "absent"), ("data-committed", "absent"),
               ("index-committed", "complete")]


@test()
def sigkill_at_every_point_of_a_multi_file_reshard():
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=16)
        src, src_prefix, before, out_dir, prefix = i.src, i.prefix, i.before, i.out_dir, i.out
        for point, want in KILL_POINTS:
            p = paused_at(TFCKPT, ["reshard", src_prefix, "-o", prefix, *RESHARD], point)
            p.send_signal(signal.SIGKILL)
            p.communicate(timeout=HANG)
            assert p.returncode == -signal.SIGKILL, (point, p.returncode)
            assert check_destination(out_dir, prefix, src_prefix) == want, point
            assert tree_digest(src) == before, "the input changed"
            # The next run completes (cleaning up what the killed one left), or is refused
            # because the killed run had finished.
            again = run("reshard", src_prefix, "-o", prefix, *RESHARD)
            if want == "absent":
                assert again.returncode == 0, (point, again.stderr)
            else:
                assert again.returncode == 2 and "exists" in again.stderr, (point, again.stderr)
            run("validate", prefix, "--against", src_prefix, code=0)
            assert temporaries(out_dir) == [], (point, temporaries(out_dir))
            shutil.rmtree(out_dir)


@test()
def a_commit_killed_between_data_and_index_is_cleaned_up():
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=2)
        src, src_prefix, before, out_dir, prefix = i.src, i.prefix, i.before, i.out_dir, i.out
        p = paused_at(TFCKPT, ["reshard", src_prefix, "-o", prefix, *RESHARD], "data-committed")
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=HANG)
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
        assert tree_digest(src) == before


@test()
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


@test()
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


@test()
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
        assert tree_digest(src) == before


# Interrupts: SIGINT / SIGTERM / SIGHUP at several points of reshard, merge and convert.

def stage_files(d):
    """Every file under d (absent: none)."""
    out = []
    for root, _, files in os.walk(d):
        out += [os.path.join(root, f) for f in files]
    return out


def temporaries_under(d):
    return [f for f in stage_files(d) if ".tmp-tfckpt-" in f or ".npz." in os.path.basename(f)]


def interrupted_at(args, out_dir, point, sig, stdout=None):
    """Runs tfckpt ARGS up to POINT, sends SIG there, and checks that the run stopped: exit
    128 + SIG, one 'interrupted' line, nothing left under out_dir. With a list as `stdout`,
    the run's standard output is appended to it."""
    p = paused_at(TFCKPT, args, point)
    p.send_signal(sig)
    out, err = p.communicate(timeout=HANG)
    if stdout is not None:
        stdout.append(out)
    assert p.returncode == 128 + sig, (args, point, sig, p.returncode, err)
    assert err.strip() == f"tfckpt {args[0]}: interrupted", (args, point, err)
    assert not os.path.exists(out_dir), (args, point, sig, stage_files(out_dir))


def finished_despite(args, point, sig):
    """Runs tfckpt ARGS up to POINT, past the run's point of no return, sends SIG there, and
    checks that the run finished instead: exit 0 and the warning that says so. The caller
    checks the output."""
    p = paused_at(TFCKPT, args, point)
    p.send_signal(sig)
    out, err = p.communicate(timeout=HANG)
    assert p.returncode == 0, (args, point, p.returncode, err)
    assert "interrupted after the output began to be published: the run was finished instead" in err, err
    return out


SIGS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@test()
def a_signal_at_any_point_leaves_no_temporaries_and_nothing_under_the_final_name():
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=16, tables=4, slices=4)
        src_prefix, out_dir, out = i.prefix, i.out_dir, i.out
        reshard = ["reshard", src_prefix, "-o", out, *RESHARD]
        combine = ["merge", src_prefix, "-o", out, "--drop-optimizer", "-j", "2", "--quiet"]
        convert = ["convert", src_prefix, "-o", out, "--quiet"]
        st = ["convert", src_prefix, "-o", os.path.join(out_dir, "m.safetensors"), "--quiet"]
        npz = ["convert", src_prefix, "-o", os.path.join(out_dir, "m.npz"), "--quiet"]
        cases = [
            (reshard, "temporary-created"), (reshard, "piece-written#1"), (reshard, "piece-written#6"),
            (reshard, "verifying"), (reshard, "before-commit"), (reshard, "data-committed"),
            (["merge", src_prefix, "-o", out], "inputs-read"), (["merge", src_prefix, "-o", out], "verifying"),
            (["merge", src_prefix, "-o", out], "data-committed"),
            (combine, "piece-written#3"), (combine, "verifying"),
            (convert, "piece-written#3"), (convert, "verifying"),
            (st, "temporary-created"), (st, "piece-written#3"), (st, "verifying"),
            (npz, "piece-written#3"), (npz, "npz-written"), (npz, "verifying"),
            # The parallel writers (-j 2): parts of one output written by two threads.
            ([*npz, "-j", "2"], "piece-written#3"),
            ([*st[:-1], "--max-file-size", "40M", "-j", "2", "--quiet"], "piece-written#3"),
            (["merge", src_prefix, src_prefix, "-o", out, "--average", "--on-conflict", "last", "-j", "2", "--quiet"],
             "piece-written#3"),
        ]
        for k, (args, point) in enumerate(cases):
            interrupted_at(args, out_dir, point, SIGS[k % 3])
            assert tree_digest(i.src) == i.before, "the input changed"
        # Past the point of no return (the new index committed; with --force, the old index
        # removed) the run finishes: a complete, verified output.
        for k, (args, point) in enumerate([(reshard, "index-committed"), ([*reshard, "--force"], "old-index-removed"),
                                           (["merge", src_prefix, "-o", out, "--force"], "old-index-removed")]):
            finished_despite(args, point, SIGS[k % 3])
            run("validate", out, "--against", src_prefix, code=0)
            assert temporaries_under(out_dir) == [], temporaries_under(out_dir)
        shutil.rmtree(out_dir)


@test()
def an_interrupted_move_either_finishes_or_leaves_the_inputs_whole():
    """merge --move and --recover --move rename the inputs' data files: a signal before the
    first rename stops the run with the inputs whole and nothing at the output (exit 128 +
    SIG); from the first rename on, it is held until the merge is done (exit 0, complete
    output, and a warning) -- never a half-moved checkpoint."""
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=4, tables=4, slices=4)
        cases = [("inputs-read", "stopped"), ("input-moved#1", "finished"), ("input-moved#3", "finished"),
                 ("temporary-created", "finished"), ("index-committed", "finished")]
        for k, (point, want) in enumerate(cases * 2):
            sig = SIGS[k % 3]
            work = os.path.join(d, f"w{k}")
            shutil.copytree(i.src, os.path.join(work, "in"))
            recover = k >= len(cases)
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
            before = tree_digest(inputs)
            if want == "finished":
                finished_despite(args, point, sig)
                run("validate", out, "--against", i.prefix, code=0)
            else:
                p = paused_at(TFCKPT, args, point)
                p.send_signal(sig)
                _, err = p.communicate(timeout=HANG)
                assert p.returncode == 128 + sig, (args, point, p.returncode, err)
                assert not os.path.exists(out + ".index") and not [f for f in stage_files(work) if
                                                                   os.path.basename(f).startswith(
                                                                       os.path.basename(out) + ".data")], \
                    (args, point, stage_files(work))
                assert tree_digest(inputs) == before, (args, point, "the inputs were touched")
            assert not temporaries_under(work), temporaries_under(work)


@test()
def an_interrupted_finalize_either_finishes_or_can_be_run_again():
    """reshard --finalize renames the tasks' data files into place: a signal before the first
    rename stops it with every part still there (a second --finalize completes); from the
    first rename on it waits until it is done (exit 0, complete output)."""
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=4, tables=4, slices=4)
        for k, (point, want) in enumerate([("inputs-read", "stopped"), ("input-moved#1", "finished"),
                                           ("input-moved#3", "finished"), ("index-committed", "finished")]):
            sig = SIGS[k % 2]
            out = os.path.join(d, f"o{k}", "m")
            plan = os.path.join(d, f"plan{k}.json")
            run("reshard", i.prefix, "-o", out, *RESHARD, "--plan", plan, code=0)
            for t in range(3):
                run("reshard", "--execute", plan, "--task", str(t), code=0)
            if want == "finished":
                finished_despite(["reshard", "--finalize", plan], point, sig)
            else:
                p = paused_at(TFCKPT, ["reshard", "--finalize", plan], point)
                p.send_signal(sig)
                _, err = p.communicate(timeout=HANG)
                assert p.returncode == 128 + sig, (point, p.returncode, err)
                assert not os.path.exists(out + ".index"), (point, stage_files(os.path.dirname(out)))
                run("reshard", "--finalize", plan, code=0)  # the parts were left whole
            run("validate", out, "--against", i.prefix, code=0)
            assert not temporaries_under(os.path.dirname(out))


@test()
def an_interrupted_json_run_prints_the_error_document():
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=16, tables=4, slices=4)
        for k, (args, sig) in enumerate([(["reshard", i.prefix, "-o", i.out, *RESHARD], signal.SIGINT),
                                         (["convert", i.prefix, "-o", i.out, "--quiet"], signal.SIGTERM)]):
            out = []
            interrupted_at([*args, "--json"], i.out_dir, "piece-written#3", sig, out)
            doc = json.loads(out[0])
            assert doc == {"ok": False, "error": {"id": "interrupted", "message": "interrupted", "file": None,
                                                  "key": None, "offset": None}}, doc


@test()
def a_second_signal_ends_the_run_at_once():
    """The first signal asks the run to stop; a second one, while the run is still unwinding
    (held here in the fault hook, which ignores the first), ends the process at once with
    128 + the first signal. The temporaries it leaves, the next run removes."""
    with tempfile.TemporaryDirectory() as d:
        i = make_input(d, mib=4, tables=2, slices=2)
        args = ["reshard", i.prefix, "-o", i.out, *RESHARD]
        p, notes = paused_at(TFCKPT, args, "piece-written#2", env={"TFCKPT_FAULT_PAUSE_UNTIL": "exit"},
                             keep_pipe=True)
        p.send_signal(signal.SIGTERM)
        assert read_line(notes) == "stop requested\n"  # (the first signal is taken)
        os.close(notes)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=HANG)
        assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err)
        assert err.strip() == "tfckpt reshard: interrupted again: exiting at once", err
        assert temporaries(i.out_dir), "the run was stopped where it had temporaries"
        run(*args, code=0)
        run("validate", i.out, "--against", i.prefix, code=0)
        assert temporaries(i.out_dir) == []


def main():
    return run_tests(TESTS, "crash_safety")

if __name__ == "__main__":
    sys.exit(main())
