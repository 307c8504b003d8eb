"""What the CLI test files share: the binaries under test, running tfckpt, the real test data,
and the test registry. Every cli_*_test.py is run as FILE TFCKPT MAKE_EXAMPLE MAKE_FIXTURE.

Tests that need ../shared/testdata/tf (TFCKPT_TESTDATA) are skipped when it is missing,
except under CI=true, where that is a failure. Each file prints 'N passed, N failed' at the end."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

from harness import HAVE_DATA, TESTDATA, TESTS, main, test  # noqa: F401 (re-exported to the test files)

TFCKPT, MAKE_EXAMPLE, MAKE_FIXTURE = sys.argv[1:4]
# A real checkpoint of the test data (TFCKPT_TESTDATA): float32, 2 data files.
T2T = "t2t_transformer_2shards/model.ckpt-1"


def run(*args, code=None, timeout=120, env=None):
    """tfckpt ARGS (with `env` added to the environment when given)."""
    p = subprocess.run([TFCKPT, *args], capture_output=True, text=True, timeout=timeout,
                       errors="replace", env=None if env is None else {**os.environ, **env})
    if code is not None and p.returncode != code:
        raise AssertionError(f"tfckpt {' '.join(args)}: exit {p.returncode}, wanted {code}\n"
                             f"stdout: {p.stdout[:2000]}\nstderr: {p.stderr[:2000]}")
    return p


def data(rel):
    return os.path.join(TESTDATA, rel)


def one_error_line(p, *needles):
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    errors = [l for l in lines if ": error: " in l]
    assert len(errors) == 1, f"want one error line, got: {p.stderr!r}"
    for n in needles:
        assert n in errors[0], f"{n!r} not in {errors[0]!r}"
    return errors[0]


def example(d):
    """Writes the example checkpoint (MAKE_EXAMPLE) at d/in/model; returns its prefix."""
    prefix = os.path.join(d, "in", "model")
    os.makedirs(os.path.dirname(prefix))
    subprocess.run([MAKE_EXAMPLE, prefix], check=True, capture_output=True)
    return prefix


def fixture(d, name, *kind):
    """make_fixture KIND... D/NAME; returns the prefix."""
    prefix = os.path.join(d, name)
    subprocess.run([MAKE_FIXTURE, *kind, prefix], check=True)
    return prefix


def copy_ckpt(src_prefix, dst_dir):
    """Copies PREFIX.index and PREFIX.data-* into dst_dir; returns the new prefix."""
    base = os.path.basename(src_prefix)
    d = os.path.dirname(src_prefix)
    for name in os.listdir(d):
        if name.startswith(base + ".index") or name.startswith(base + ".data-"):
            shutil.copy(os.path.join(d, name), dst_dir)
            os.chmod(os.path.join(dst_dir, name), 0o644)
    return os.path.join(dst_dir, base)


def tree_bytes(d):
    """{path relative to d: bytes} of every file under d."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out[os.path.relpath(os.path.join(root, f), d)] = fh.read()
    return out


def flip(path, offset, mask=0x01):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def run_with_tty_stderr(args, env):
    """Runs tfckpt with stderr on a pseudo-terminal; returns (exit code, what stderr got)."""
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen([TFCKPT, *args], stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    return p.wait(timeout=60), got.decode(errors="replace")



# Expected tensor counts per real case (MANIFEST.md).
COUNTS = {
    "empty_prefix_keras": 12, "estimator_dnn_adam_2shards": 66, "estimator_linear_ftrl_2shards": 40,
    "estimator_tfx_adagrad_ftrl": 60, "index_only_lingvo_snappy": 23, "index_only_minigo_snappy": 333,
    "keras_tf2_adam_2shards": 18, "keras_tuner_prefix_named_checkpoint": 18,
    "savedmodel_keras_tfx_slots": 28, "savedmodel_tf1_snappy_index": 5, "savedmodel_tf2_snappy_index": 4,
    "savedmodel_tfdf_bool_snappy": 6, "savedmodel_tfjs_int64": 3, "t2t_transformer_2shards": 250,
    "t5x_mtf_bfloat16_missing_shard": 105, "tf2_float64_variant_pinn": 45, "tf2_iterator_variant_int32": 15,
    "truncated_data_resnet_savedmodel": 252, "v1_abs_path_state": 2, "v1_session_bundle_sharded_name": 2,
    "v1_traffic_signs_3mb": 10, "v1_vocal_autoencoder_multiblock": 39,
}


NUMPY_PYTHON = None


def numpy_python():
    """An interpreter that has numpy (Debian's python3-numpy lives in /usr/bin/python3)."""
    global NUMPY_PYTHON
    if NUMPY_PYTHON is None:
        for exe in ("/usr/bin/python3", sys.executable, "python3"):
            if subprocess.run([exe, "-c", "import numpy"], capture_output=True).returncode == 0:
                NUMPY_PYTHON = exe
                break
        else:
            raise AssertionError("no python3 with numpy (scripts/install-deps.sh installs python3-numpy)")
    return NUMPY_PYTHON

