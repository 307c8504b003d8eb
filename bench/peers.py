#!/usr/bin/env python3
"""tfckpt beside what users run today (issue 42): TensorFlow's own reader, restore and
MergeV2, the usual conversion scripts (TF's reader, then safetensors.numpy.save_file or
numpy.savez), numpy for statistics and safetensors/torch for loading, on the same checkpoint
in one run, with the wall time, CPU time (user + system, every thread) and peak RSS of each
process (/usr/bin/time -v, which counts file-backed pages).

The checkpoint: `gen_checkpoint tables` (16 float32 tables, each in 4 row slices over 4 data
files, and 4 dense layers), GIB GiB in DIR (a tmpfs by default: the disk out of the
picture). Every job runs as its own process: the peer's as a Python script in the venv of
TensorFlow, torch and safetensors (the imports counted; TensorFlow's import time is measured
apart and shown, so the ratios are given with it and without it), tfckpt's at -j 1 and at
-j (one thread per core). ROUNDS rounds (default 2), interleaved; the best time of each kept,
with the peak RSS of that run. Then the single-file write limit: N threads writing disjoint
ranges of one file (pwrite into a preallocated file; copies into a shared mapping) beside N
threads writing N files, against which tfckpt's one-file outputs are set.

Prints a markdown table of ratios (peer / tfckpt: above 1, tfckpt is faster or smaller) and
checks the issue's targets, naming each miss. Run by bench/peers.sh, which builds tfckpt and
makes the venv. Usage (what peers.sh runs):
  peers.py --tfckpt BIN --package DIR --gen GEN_CHECKPOINT [--gib 1] [--dir /dev/shm]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

PY = sys.executable  # the venv's python: TF, torch, safetensors, numpy; tfckpt via PYTHONPATH


class Runner:
    def __init__(self, work, package, warm=()):
        self.work = work
        self.warm = list(warm)  # input files read before each run, untimed (see measure)
        self._buf = bytearray(8 << 20)
        self.env = dict(os.environ, PYTHONPATH=package, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS=str(os.cpu_count()))

    def measure(self, cmd, prepare=None):
        """The run of `cmd` that follows an untimed run of it (see _once)."""
        self._once(cmd, prepare)
        return self._once(cmd, prepare)

    def _once(self, cmd, prepare=None):
        """One run of `cmd`: (wall s, cpu s, peak RSS MiB, s of it in `import tensorflow`: what
        a peer script printed as TF_IMPORT). `prepare` runs first, untimed.

        measure() times the second of two runs: on this machine (a VM) memory that another
        process has just freed is slow to fault in again, so the same tfckpt.load took 0.2 s
        after itself and 1.1 s after a TensorFlow peer that had freed 1.7 GiB (2.4 s after
        gen_checkpoint); after a run of itself, each command meets the memory it left."""
        if prepare:
            prepare()
        # The inputs read first, outside the timing, as bench/common.sh's `timed` does (this
        # machine drops file pages left untouched for a while; and the same tfckpt.load was
        # once seen taking 2.3 s instead of 0.27 s on a first read).
        for f in self.warm:
            with open(f, "rb") as fh:
                while fh.readinto(self._buf):
                    pass
        out = os.path.join(self.work, "out")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        subprocess.run(["sync"], check=True)
        tfile = os.path.join(self.work, "time.txt")
        t0 = time.perf_counter()
        p = subprocess.run(["/usr/bin/time", "-v", "-o", tfile, *cmd], env=self.env, cwd=self.work,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            sys.exit(f"failed ({p.returncode}): {' '.join(cmd)[:300]}\n{p.stderr[-3000:]}")
        cpu, rss = 0.0, 0
        for line in open(tfile):
            k, _, v = line.strip().partition(": ")
            if k in ("User time (seconds)", "System time (seconds)"):
                cpu += float(v)
            elif k == "Maximum resident set size (kbytes)":
                rss = int(v) // 1024
        tf_import = sum(float(l.split()[1]) for l in p.stdout.splitlines() if l.startswith("TF_IMPORT "))
        return wall, cpu, rss, tf_import


# Touches one byte in every 4 KiB page of every tensor in `d` (torch): what reading a mapped
# tensor costs, without a computation over it.
TOUCH_PT = "for t in d.values(): t.reshape(-1).view(torch.uint8)[::4096].sum()"


def py(code):
    return [PY, "-c", textwrap.dedent(code)]


def tf_py(code):
    """A peer script that imports TensorFlow first, timing the import (printed as TF_IMPORT)."""
    return [PY, "-c", "import time\n_t = time.perf_counter()\nimport tensorflow as tf\n"
                      "print('TF_IMPORT', time.perf_counter() - _t, flush=True)\n" + textwrap.dedent(code)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tfckpt", required=True)
    ap.add_argument("--package", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", default="/dev/shm")
    a = ap.parse_args()
    rounds = int(os.environ.get("ROUNDS", "2"))
    cores = os.cpu_count()
    jobs = [1, cores] if cores > 1 else [1]
    work = tempfile.mkdtemp(prefix="tfckpt-peers-", dir=a.dir)
    try:
        return run(a, work, rounds, cores, jobs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(a, work, rounds, cores, jobs):
    T = a.tfckpt
    fs = subprocess.run(["df", "-T", a.dir], capture_output=True, text=True).stdout.split("\n")[1].split()[1]
    cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cores} cores ({cpu_model}), {a.dir} ({fs}), "
          f"load average at start {open('/proc/loadavg').read().split()[0]}; ROUNDS={rounds}")
    mib = max(1, int(a.gib * 1024 / 16))
    ck = os.path.join(work, "in", "model")
    os.makedirs(os.path.dirname(ck))
    subprocess.run([a.gen, "tables", ck, str(mib), "16", "4"], check=True, stdout=subprocess.DEVNULL)
    data_bytes = sum(os.path.getsize(os.path.join(work, "in", f)) for f in os.listdir(os.path.join(work, "in"))
                     if ".data-" in f)
    many = os.path.join(work, "many", "many")
    os.makedirs(os.path.dirname(many))
    subprocess.run([a.gen, "many", many, "100000"], check=True, stdout=subprocess.DEVNULL)
    st = os.path.join(work, "in.safetensors")  # tfckpt's output, for the load side
    subprocess.run([T, "convert", ck, "-o", st, "-q"], check=True, stdout=subprocess.DEVNULL)
    versions = subprocess.run(py("""
        import numpy, safetensors, torch, tensorflow as tf
        print(f"TensorFlow {tf.__version__}, torch {torch.__version__}, safetensors {safetensors.__version__}, numpy {numpy.__version__}")
        """), capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).stdout.strip()
    print(f"# checkpoint: {data_bytes} bytes, 16 float32 tables of {mib} MiB in 4 row slices over 4 data files "
          f"+ 4 dense [512, 512]; Python {sys.version.split()[0]}, {versions}")

    warm = [os.path.join(work, "in", f) for f in os.listdir(os.path.join(work, "in"))] + [st] + \
        [os.path.join(work, "many", f) for f in os.listdir(os.path.join(work, "many"))]
    r = Runner(work, a.package, warm)
    out = os.path.join(work, "out")
    def tf_reader(body):  # a peer script that reads the checkpoint with TF's reader first
        return tf_py(f"r = tf.train.load_checkpoint({ck!r})\nkeys = sorted(r.get_variable_to_shape_map())\n"
                     + textwrap.dedent(body))

    # The parts of an unmerged sharded save (TF2's PREFIX_temp/part-I-of-4), remade before each
    # merge (MergeV2Checkpoints renames them away).
    merged = os.path.join(work, "m", "ckpt")
    temp = merged + "_temp"

    def make_parts():
        shutil.rmtree(os.path.dirname(merged), ignore_errors=True)
        os.makedirs(temp)
        for i in range(4):
            tables = "|".join(str(4 * i + k) for k in range(4))
            subprocess.run([T, "merge", ck, "-o", os.path.join(temp, f"part-{i:05d}-of-00004"), "-q",
                            "--include", f"^(embedding_({tables})/|dense_{i}/)"], check=True, stdout=subprocess.DEVNULL)
    parts = [os.path.join(temp, f"part-{i:05d}-of-00004") for i in range(4)]

    # (label, peer's name, peer's command, tfckpt's command for -j J, prepare)
    J = "{J}"
    cases = [
        ("read every tensor", "TF CheckpointReader.get_tensor, every key", tf_reader("""
            d = {k: r.get_tensor(k) for k in keys}
            """), [T, "validate", ck, "-j", J], None),
        ("read every tensor (Python)", "TF CheckpointReader.get_tensor, every key", None,
         py(f"import tfckpt\nd = tfckpt.load({ck!r})\n"), None),
        ("list", "tf.train.list_variables", tf_py(f"tf.train.list_variables({ck!r})\n"),
         [T, "inspect", ck, "-j", J], None),
        ("list, 100 000 tensors", "tf.train.list_variables", tf_py(f"tf.train.list_variables({many!r})\n"),
         [T, "inspect", many, "-j", J], None),
        ("TF → safetensors", "TF reader + safetensors.numpy.save_file", tf_reader(f"""
            from safetensors.numpy import save_file
            save_file({{k: r.get_tensor(k) for k in keys}}, {os.path.join(out, 'x.safetensors')!r})
            """), [T, "convert", ck, "-o", os.path.join(out, "x.safetensors"), "-q", "-j", J], None),
        ("TF → safetensors, --no-verify", "TF reader + safetensors.numpy.save_file", None,
         [T, "convert", ck, "-o", os.path.join(out, "x.safetensors"), "--no-verify", "-q", "-j", J], None),
        ("TF → safetensors, 4 files", "TF reader + safetensors.numpy.save_file", None,
         [T, "convert", ck, "-o", os.path.join(out, "x.safetensors"), "--max-file-size", f"{max(1, mib * 4)}M", "-q",
          "-j", J], None),
        ("TF → .npz", "TF reader + numpy.savez", tf_reader(f"""
            import numpy as np
            np.savez({os.path.join(out, 'x.npz')!r}, **{{k: r.get_tensor(k) for k in keys}})
            """), [T, "convert", ck, "-o", os.path.join(out, "x.npz"), "-q", "-j", J], None),
        ("TF → .npz, --no-verify", "TF reader + numpy.savez", None,
         [T, "convert", ck, "-o", os.path.join(out, "x.npz"), "--no-verify", "-q", "-j", J], None),
        ("reshard to 8 partitions", "TF1 Saver: restore into fixed_size_partitioner(8) variables, save", tf_reader(f"""
            tf.compat.v1.disable_eager_execution()
            shapes = r.get_variable_to_shape_map()
            for k in keys:
                part = tf.compat.v1.fixed_size_partitioner(8) if k.startswith("embedding") else None
                tf.compat.v1.get_variable(k, shape=shapes[k], dtype=tf.float32, partitioner=part,
                                          initializer=tf.compat.v1.zeros_initializer())
            saver = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session() as s:
                saver.restore(s, {ck!r})
                saver.save(s, {os.path.join(out, 'r')!r}, write_meta_graph=False)
            """), [T, "reshard", ck, "-o", os.path.join(out, "r"), "--partition", "embedding=fixed:8", "-q", "-j", J],
         None),
        ("merge 4 parts (copy)", "tf.raw_ops.MergeV2Checkpoints (renames the parts' files)", tf_py(f"""
            tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes={parts!r}, destination_prefix={merged!r}, delete_old_dirs=True)
            """), [T, "merge", "--recover", merged, "-q", "-j", J], make_parts),
        ("merge 4 parts (--move)", "tf.raw_ops.MergeV2Checkpoints (renames the parts' files)", None,
         [T, "merge", "--recover", merged, "--move", "-q", "-j", J], make_parts),
        ("statistics", "numpy mean/std/min/max over TF-read arrays", tf_reader("""
            for k in keys:
                a = r.get_tensor(k)
                a.mean(), a.std(), a.min(), a.max()
            """), [T, "inspect", ck, "--stats", "-j", J], None),
        # The load side. safetensors maps the file and reads a page when it is first touched,
        # so every side touches every page of every tensor it got (one byte per 4 KiB).
        ("load into torch, mapped", "safetensors.torch.load_file of tfckpt's .safetensors", py(f"""
            import torch
            from safetensors.torch import load_file
            d = load_file({st!r})
            {TOUCH_PT}
            """), py(f"import tfckpt, torch\nd = tfckpt.load({st!r}, framework='pt', mmap=True)\n{TOUCH_PT}"), None),
        ("load into torch, from the TF checkpoint", "safetensors.torch.load_file of tfckpt's .safetensors", None,
         py(f"import tfckpt, torch\nd = tfckpt.load({ck!r}, framework='pt')\n{TOUCH_PT}"), None),
        ("load into numpy, from the TF checkpoint", "safetensors safe_open + get_tensor of tfckpt's .safetensors", py(f"""
            from safetensors import safe_open
            with safe_open({st!r}, framework="np") as f:
                d = {{k: f.get_tensor(k) for k in f.keys()}}
            """), py(f"import tfckpt\nd = tfckpt.load({ck!r})\n"), None),
    ]

    results = {}  # label -> {"peer": (wall, cpu, rss), 1: ..., N: ...}

    def keep(label, key, m):
        cur = results.setdefault(label, {}).get(key)
        if cur is None or m[0] < cur[0]:
            results[label][key] = m

    for _ in range(rounds):
        last_peer = None
        for label, peer_name, peer, mine, prepare in cases:
            if peer is not None:
                last_peer = (label, peer_name)
                keep(label, "peer", r.measure(peer, prepare))
            results.setdefault(label, {})["peer_of"] = last_peer
            if J not in mine:  # (tfckpt.load has no jobs=: its reads use every core)
                m = r.measure(mine, prepare)
                for j in jobs:
                    keep(label, j, m)
                continue
            for j in jobs:
                cmd = [str(j) if x == J else x for x in mine]
                keep(label, j, r.measure(cmd, prepare))

    # The single-file write limit, for the size of the one-file safetensors output.
    size = os.path.getsize(st)
    limit = {}
    for j in jobs:
        for mode in ("pwrite", "mmap", "files"):
            best = None
            for _ in range(rounds):
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                p = subprocess.run([PY, os.path.abspath(__file__), "--write-limit", mode, str(j), str(size), out],
                                   capture_output=True, text=True, check=True)
                t = float(p.stdout.split()[0])
                best = t if best is None or t < best else best
            limit[(j, mode)] = best

    report(results, cases, jobs, limit, size)
    return 0


def ratio(a, b):
    return a / b if b > 0 else float("inf")


def report(results, cases, jobs, limit, size):
    N = jobs[-1]
    print()
    print(f"| job | peer | peer s | of it, TF's import s | peer CPU s | peer RSS MiB | tfckpt -j 1 s | tfckpt -j {N} s "
          f"| tfckpt RSS MiB | × at -j 1 (without TF's import) | × at -j {N} (without) | RSS ÷ |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    misses = []
    for label, _name, _peer, _mine, _prep in cases:
        res = results[label]
        plabel, pname = res["peer_of"]
        pw, pc, pr, tf_import = results[plabel]["peer"]
        pw_ex = pw - tf_import  # (the time of its `import tensorflow`, 0 for a peer without TF)
        w1, c1, r1, _ = res[1]
        wN, cN, rN, _ = res[N]
        x1, xN, xN_ex = ratio(pw, w1), ratio(pw, wN), ratio(pw_ex, wN)
        rss_x = ratio(pr, max(r1, rN))
        same = "" if plabel == label else f" (as above)"
        imp = f"{tf_import:.2f}" if tf_import else "-"
        print(f"| {label} | {pname}{same} | {pw:.2f} | {imp} | {pc:.2f} | {pr} | {w1:.2f} | {wN:.2f} | {max(r1, rN)} "
              f"| {x1:.1f} ({ratio(pw_ex, w1):.1f}) | {xN:.1f} ({xN_ex:.1f}) | {rss_x:.0f} |")
        if ratio(pw_ex, w1) < 1:
            misses.append(f"{label}: at -j 1 {ratio(pw_ex, w1):.2f}× the peer's speed without its import (target ≥ 1)")
        if N > 1 and min(xN, xN_ex) < 2:
            misses.append(f"{label}: at -j {N} {min(xN, xN_ex):.2f}× (target ≥ 2, TF's import excluded and included)")
        if rss_x < 10:
            misses.append(f"{label}: peak RSS {max(r1, rN)} MiB, 1/{rss_x:.1f} of the peer's {pr} MiB (target ≤ 1/10)")
    print()
    gib = size / (1 << 30)
    print(f"Single-file write limit ({size} bytes, the one-file safetensors output's size), GiB/s:")
    print()
    print("| threads | pwrite into one file | copies into one shared mapping | N files | convert → one .safetensors (--no-verify) "
          "| → one .npz (--no-verify) | ÷ the one-file limit: .safetensors, .npz, --no-verify |")
    print("|---|---|---|---|---|---|---|")
    for j in jobs:
        w = {k: results[k][j][0] for k in ("TF → safetensors", "TF → safetensors, --no-verify", "TF → .npz",
                                             "TF → .npz, --no-verify")}
        best_one = min(limit[(j, "pwrite")], limit[(j, "mmap")])  # (the faster way into one file)
        print(f"| {j} | {gib / limit[(j, 'pwrite')]:.2f} | {gib / limit[(j, 'mmap')]:.2f} | {gib / limit[(j, 'files')]:.2f} "
              f"| {gib / w['TF → safetensors']:.2f} ({gib / w['TF → safetensors, --no-verify']:.2f}) "
              f"| {gib / w['TF → .npz']:.2f} ({gib / w['TF → .npz, --no-verify']:.2f}) "
              f"| {best_one / w['TF → safetensors']:.2f}, {best_one / w['TF → .npz']:.2f}, "
              f"{best_one / w['TF → safetensors, --no-verify']:.2f}, {best_one / w['TF → .npz, --no-verify']:.2f} |")
        for k, v in w.items():
            if best_one / v < 0.9:
                misses.append(f"{k} at -j {j}: {best_one / v:.2f}× the one-file write limit (target ≥ 0.9)")
    print()
    if misses:
        print("Targets missed:")
        for m in misses:
            print(f"- {m}")
    else:
        print("Every target met.")


def write_limit(mode, threads, size, out):
    """Writes `size` bytes with `threads` threads: disjoint ranges of one preallocated file by
    pwrite, copies into one shared mapping of it, or one file per thread. Prints seconds,
    including the fsync-free close (the page cache is the limit measured, as tfckpt's is)."""
    import threading

    import numpy as np
    chunk = 8 << 20
    buf = np.random.default_rng(0).integers(0, 255, chunk, dtype=np.uint8).tobytes()
    share = -(-size // threads)
    t0 = time.perf_counter()
    if mode in ("pwrite", "mmap"):
        path = os.path.join(out, "one")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.posix_fallocate(fd, 0, size)
        mm = np.memmap(path, dtype=np.uint8, mode="r+", shape=(size,)) if mode == "mmap" else None
        src = np.frombuffer(buf, dtype=np.uint8)

        def work(i):
            at, end = i * share, min(size, (i + 1) * share)
            while at < end:
                n = min(chunk, end - at)
                if mm is not None:
                    mm[at:at + n] = src[:n]  # (numpy copies without the GIL)
                else:
                    os.pwrite(fd, buf[:n] if n < chunk else buf, at)
                at += n
        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if mm is not None:
            del mm
        os.close(fd)
    else:
        def work(i):
            n_left = min(size, (i + 1) * share) - i * share
            with open(os.path.join(out, f"f{i}"), "wb", buffering=0) as f:
                while n_left > 0:
                    n = min(chunk, n_left)
                    f.write(buf[:n] if n < chunk else buf)
                    n_left -= n
        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    print(f"{time.perf_counter() - t0:.4f}")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--write-limit":
        write_limit(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        sys.exit(0)
    sys.exit(main())
