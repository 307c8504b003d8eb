"""Runs tfckpt up to a named fault point (docs/RELIABILITY.md, "Fault points"), so that a test
sends its signal there and nowhere else: no polling, nothing that depends on how fast the
machine is.

    p = paused_at(TFCKPT, ["reshard", src, "-o", out], "verifying")
    p.send_signal(signal.SIGINT)      # or SIGKILL
    out, err = p.communicate(timeout=HANG)

The run writes the point's name on a pipe when it gets there (TFCKPT_FAULT_NOTIFY_FD) and
waits until it is asked to stop; the test reads the pipe, a blocking read. The only time
limit is HANG, a generous bound against a test that would otherwise hang forever."""
import os
import select
import shutil
import subprocess

HANG = 300  # seconds: a bound on hangs, never a measurement


def read_line(fd):
    """One notification from the run's pipe (blocking, bounded by HANG); "" at its end."""
    ready, _, _ = select.select([fd], [], [], HANG)
    return os.read(fd, 4096).decode() if ready else ""


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError as e:
        return f"({e})"


def descendants(pid):
    """The processes below `pid` (from /proc: parent ids), depth first."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read(f"/proc/{entry}/stat")
            if ")" in stat:
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [], list(children.get(pid, []))
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(children.get(c, []))
    return out


def hang_report(pid):
    """What a process that outlived HANG is doing, for the failure message: its state and
    signal masks (an ignored or blocked signal shows there), each thread's kernel wait, the
    user-space stacks when gdb is installed, and the processes below it (one that holds the
    output pipes open keeps communicate() waiting after the run itself ended)."""
    lines = []
    for q in [pid, *descendants(pid)]:
        status = _read(f"/proc/{q}/status")
        keep = [l for l in status.splitlines() if l.split(":")[0] in ("Name", "State", "SigPnd", "ShdPnd", "SigBlk",
                                                                     "SigIgn", "SigCgt", "Threads")]
        lines.append(f"process {q}: {_read(f'/proc/{q}/cmdline').replace(chr(0), ' ').strip()}")
        lines += ["  " + l for l in keep]
        task_dir = f"/proc/{q}/task"
        for t in sorted(os.listdir(task_dir)) if os.path.isdir(task_dir) else []:
            lines.append(f"  thread {t}: wchan {_read(f'{task_dir}/{t}/wchan')!r} "
                         f"syscall {_read(f'{task_dir}/{t}/syscall').strip()!r}")
        if shutil.which("gdb"):
            try:
                bt = subprocess.run(["gdb", "-p", str(q), "-batch", "-ex", "thread apply all bt 30"],
                                    capture_output=True, text=True, timeout=120).stdout
                lines += ["  " + l for l in bt.splitlines() if l.startswith(("#", "Thread"))]
            except (OSError, subprocess.SubprocessError) as e:
                lines.append(f"  gdb: {e}")
    return "\n".join(lines)


class Watched(subprocess.Popen):
    """A Popen whose communicate() with a timeout, when the process outlives it, fails with
    hang_report() and the output so far instead of a bare TimeoutExpired (the process and
    everything below it killed)."""

    def communicate(self, input=None, timeout=None):
        try:
            return super().communicate(input, timeout)
        except subprocess.TimeoutExpired:
            if timeout is None:
                raise
            report = hang_report(self.pid)
            for q in [self.pid, *descendants(self.pid)]:
                try:
                    os.kill(q, 9)
                except OSError:
                    pass
            out, err = super().communicate()
            raise AssertionError(f"{' '.join(map(str, self.args))}: still running after {timeout} s "
                                 f"(exit {self.returncode} once killed)\n{report}\n"
                                 f"stdout: {(out or '')[-2000:]}\nstderr: {(err or '')[-4000:]}") from None


def paused_at(tfckpt, args, point, env=None, stdout=subprocess.PIPE, keep_pipe=False):
    """Starts `tfckpt ARGS` with the fault hook at POINT (or POINT#N) and returns the process
    once it is paused there (with keep_pipe, also the pipe's read end, for what the hook says
    next; the caller closes it). Fails, with what the run printed, when it ends without
    getting there."""
    read_end, write_end = os.pipe()
    full_env = {**os.environ, **(env or {}), "TFCKPT_FAULT_PAUSE_AT": point, "TFCKPT_FAULT_NOTIFY_FD": str(write_end)}
    p = Watched([tfckpt, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, env=full_env,
                pass_fds=(write_end,))
    os.close(write_end)
    try:
        line = read_line(read_end)
    finally:
        if not keep_pipe or not line:
            os.close(read_end)
    if not line:
        # The run ended (the pipe closed) or hung before the point.
        if p.poll() is None:
            p.kill()
        out, err = p.communicate(timeout=HANG)
        raise AssertionError(f"tfckpt {' '.join(args)}: never reached {point} (exit {p.returncode})\n"
                             f"stdout: {(out or '')[-2000:]}\nstderr: {err[-2000:]}")
    assert line.strip() == point.split("#")[0], (point, line)
    return (p, read_end) if keep_pipe else p
