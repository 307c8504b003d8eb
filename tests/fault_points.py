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
import subprocess

HANG = 300  # seconds: a bound on hangs, never a measurement


def read_line(fd):
    """One notification from the run's pipe (blocking, bounded by HANG); "" at its end."""
    ready, _, _ = select.select([fd], [], [], HANG)
    return os.read(fd, 4096).decode() if ready else ""


def paused_at(tfckpt, args, point, env=None, stdout=subprocess.PIPE, keep_pipe=False):
    """Starts `tfckpt ARGS` with the fault hook at POINT (or POINT#N) and returns the process
    once it is paused there (with keep_pipe, also the pipe's read end, for what the hook says
    next; the caller closes it). Fails, with what the run printed, when it ends without
    getting there."""
    read_end, write_end = os.pipe()
    full_env = {**os.environ, **(env or {}), "TFCKPT_FAULT_PAUSE_AT": point, "TFCKPT_FAULT_NOTIFY_FD": str(write_end)}
    p = subprocess.Popen([tfckpt, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, env=full_env,
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
