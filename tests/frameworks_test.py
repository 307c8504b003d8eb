#!/usr/bin/python3
"""tfckpt's Python module with the frameworks users move weights into, as they come from PyPI
(issue 40, item 5): PyTorch 2.13 (CPU), JAX 0.10 with ml_dtypes, and the real `safetensors`
package, all pinned in tests/requirements-oracle.txt (the test venv scripts/oracle-venv.sh makes,
build-venv/oracle). The checkpoints are real: TensorFlow 2.21 in the same venv writes one with
float32, float16, bfloat16, int64 and string variables, and the real checkpoints of
../shared/testdata are read too.

Run by meson as: frameworks_test.py VENV_PYTHON TFCKPT_BIN PACKAGE_DIR. The driver (Debian's
python3) finds the venv (skip, 77, when it is missing; a failure under CI=true) and runs this file
again in it, where `import tfckpt` is the build's package (PACKAGE_DIR: the extension module is
CPython 3.11's, as the venv's python is)."""
import os
import shutil
import subprocess
import sys
import tempfile

from harness import raises  # (tests/: the script's directory, on sys.path in the venv too)

HERE = os.path.dirname(os.path.abspath(__file__))


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}")


def write_tf_checkpoint(prefix):
    """A TF2 checkpoint written by TensorFlow itself: the dtypes frameworks care about."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(40)
    values = {
        "dense/kernel": rng.standard_normal((6, 5)).astype(np.float32),
        "dense/bias": rng.standard_normal(5).astype(np.float32),
        "half": rng.standard_normal((3, 4)).astype(np.float16),
        "steps": np.arange(7, dtype=np.int64),
        "words": np.array([b"alpha", b"beta"]),
    }
    variables = {k.replace("/", "_"): tf.Variable(v) for k, v in values.items()}
    brain = tf.Variable(tf.cast(rng.standard_normal((4, 3)).astype(np.float32), tf.bfloat16))
    ckpt = tf.train.Checkpoint(brain=brain, **variables)
    path = ckpt.write(prefix)
    reader = tf.train.load_checkpoint(path)
    stored = {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
              if k != "_CHECKPOINTABLE_OBJECT_GRAPH"}
    return path, stored


def in_venv(tfckpt_bin, testdata):
    import jax
    import numpy as np
    import safetensors
    import torch

    import tfckpt

    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, jax {jax.__version__}, "
          f"safetensors {safetensors.__version__}, numpy {np.__version__}, tfckpt from {os.path.dirname(tfckpt.__file__)}")
    work = tempfile.mkdtemp(prefix="tfckpt-frameworks-")
    try:
        return checks(tfckpt_bin, testdata, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def checks(tfckpt_bin, testdata, work):
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np
    import safetensors
    import safetensors.numpy
    import safetensors.torch
    import torch

    import tfckpt

    path, stored = write_tf_checkpoint(os.path.join(work, "tf", "ckpt"))
    bf16 = [k for k, v in stored.items() if v.dtype == ml_dtypes.bfloat16]
    check(len(bf16) == 1, f"TF wrote a bfloat16 variable ({bf16})")
    bf16 = bf16[0]

    # --- PyTorch 2.13 (framework="pt") ---
    pt = tfckpt.load(path, framework="pt", exclude="words")
    check(all(isinstance(v, torch.Tensor) for v in pt.values()), f"load(framework='pt'): {len(pt)} torch.Tensors")
    check(pt[bf16].dtype == torch.bfloat16, "bfloat16 arrives as torch.bfloat16")
    for k, v in stored.items():
        if v.dtype.kind in "SO":
            continue
        want = torch.from_numpy(np.asarray(v).view(np.int16)).view(torch.bfloat16) if k == bf16 else torch.from_numpy(v)
        check(pt[k].dtype == want.dtype and torch.equal(pt[k], want), f"torch: {k} equals TF's, bit for bit ({pt[k].dtype})")
    # A module's state dict: load_state_dict takes what load() gives (names mapped by rename).
    model = torch.nn.Linear(6, 5)
    sd = tfckpt.load(path, framework="pt", include=r"^dense_(kernel|bias)/",
                     rename=[r"^dense_kernel/.*$=weight", r"^dense_bias/.*$=bias"])
    sd["weight"] = sd["weight"].T.contiguous()  # (TF's kernel is [in, out]; torch's [out, in])
    model.load_state_dict(sd, strict=True)
    x = torch.ones(1, 6)
    want = torch.from_numpy(np.ones((1, 6), np.float32) @ stored[[k for k in stored if k.startswith("dense_kernel")][0]]
                            + stored[[k for k in stored if k.startswith("dense_bias")][0]])
    check(torch.allclose(model(x), want), "torch.nn.Linear.load_state_dict(strict=True) from tfckpt.load, same output as TF's weights")
    # The safetensors habit with torch: keys() and get_tensor() over everything, the object
    # graph and strings not in the way.
    with tfckpt.open(path, framework="pt") as f:
        names = list(f.keys())
        got = {}
        for k in names:
            try:
                got[k] = f.get_tensor(k)
            except tfckpt.DTypeError as e:  # strings: torch has no type for them
                check("string" in str(e), f"get_tensor({k!r}) with torch: DTypeError naming the dtype")
    check("_CHECKPOINTABLE_OBJECT_GRAPH" not in names and len(got) == len(stored) - 1,
          f"open(framework='pt'): `for k in f.keys(): f.get_tensor(k)` read {len(got)} tensors")
    # mmap=True arrays are the caller's: writing them neither crashes nor changes the file.
    mm = tfckpt.load(path, framework="pt", exclude="words", mmap=True)
    for t in mm.values():
        if t.dtype.is_floating_point:
            t.add_(1)
    again = tfckpt.load(path, framework="pt", exclude="words")
    check(all(torch.equal(again[k], pt[k]) for k in pt), "mmap=True then add_(1) on every float tensor: no crash, the files unchanged")

    # --- JAX (nested=True, ml_dtypes) ---
    tree = tfckpt.load(path, nested=True, exclude="words", cast={"bfloat16": "bfloat16"})
    leaves = jax.tree_util.tree_leaves(tree)
    check(len(leaves) == len(stored) - 1, f"nested=True is a JAX pytree of {len(leaves)} leaves")
    jtree = jax.tree_util.tree_map(jnp.asarray, tree)
    flat = tfckpt.load(path, exclude="words", cast={"bfloat16": "bfloat16"})
    node = tree
    for part in bf16.replace("/.ATTRIBUTES/VARIABLE_VALUE", "").split("/"):
        node = node[part]
    check(node.dtype == ml_dtypes.bfloat16 and flat[bf16].dtype == ml_dtypes.bfloat16,
          "cast={'bfloat16': 'bfloat16'}: ml_dtypes.bfloat16 arrays")
    check(np.array_equal(flat[bf16].view(np.uint16), stored[bf16].view(np.uint16)), "ml_dtypes.bfloat16 equals TF's bits")
    jnode = jtree
    for part in bf16.replace("/.ATTRIBUTES/VARIABLE_VALUE", "").split("/"):
        jnode = jnode[part]
    check(jnode.dtype == jnp.bfloat16, "jnp.asarray keeps it jnp.bfloat16")
    total = jax.jit(lambda t: sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree_util.tree_leaves(t)))(jtree)
    want = sum(np.sum(np.asarray(v, np.float32)) for k, v in stored.items() if v.dtype.kind not in "SO")
    check(np.isclose(float(total), float(want), rtol=1e-5), f"a jitted function over the tree agrees with TF's values ({float(total):.4f})")
    plain = tfckpt.load(path, exclude="words")
    check(plain[bf16].dtype == np.float32 and np.array_equal(plain[bf16], stored[bf16].astype(np.float32)),
          "without cast, bfloat16 still reads as float32 (exactly)")
    # A real checkpoint as a Flax-style parameter tree.
    keras = tfckpt.load(os.path.join(testdata, "keras_tf2_adam_2shards"), nested=True, drop_optimizer=True)
    n = len(jax.tree_util.tree_leaves(jax.tree_util.tree_map(jnp.asarray, keras)))
    check(n > 0 and n == len(tfckpt.load(os.path.join(testdata, "keras_tf2_adam_2shards"), drop_optimizer=True)),
          f"keras_tf2_adam_2shards, drop_optimizer=True, nested=True: {n} JAX leaves")

    # --- the real safetensors package ---
    st = os.path.join(work, "model.safetensors")
    subprocess.run([tfckpt_bin, "convert", path, "-o", st, "--exclude", "words"], check=True, capture_output=True)
    with safetensors.safe_open(st, framework="np") as f:
        keys = list(f.keys())
        for k in keys:
            v = f.get_tensor(k)
            want = stored[k]
            check(v.dtype == want.dtype and np.array_equal(v.view(np.uint8), np.ascontiguousarray(want).view(np.uint8)),
                  f"safetensors.safe_open reads {k} of tfckpt's output ({v.dtype})")
    check(sorted(keys) == sorted(k for k in stored if stored[k].dtype.kind not in "SO"), "safe_open lists every tensor")
    tl = safetensors.torch.load_file(st)
    check(tl[bf16].dtype == torch.bfloat16 and torch.equal(tl[bf16], pt[bf16]),
          "safetensors.torch.load_file: the bfloat16 tensor is tfckpt.load(framework='pt')'s")
    # What safetensors writes, tfckpt reads, metadata included; convert keeps the metadata.
    theirs = os.path.join(work, "theirs.safetensors")
    arrays = {"emb": np.arange(12, dtype=np.float32).reshape(3, 4), "ids": np.arange(5, dtype=np.int64),
              "bf": np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16)}
    safetensors.numpy.save_file(arrays, theirs, metadata={"format": "np", "step": "40"})
    mine = tfckpt.load(theirs, cast={"bfloat16": "bfloat16"})
    check(all(mine[k].dtype == v.dtype and np.array_equal(mine[k], v) for k, v in arrays.items()),
          "tfckpt.load reads what safetensors.numpy.save_file wrote (bfloat16 as ml_dtypes.bfloat16)")
    with tfckpt.open(theirs) as f:
        check(f.metadata() == {"format": "np", "step": "40"}, f"tfckpt.open(...).metadata() is safetensors' ({f.metadata()})")
    copy = os.path.join(work, "copy.safetensors")
    subprocess.run([tfckpt_bin, "convert", theirs, "-o", copy], check=True, capture_output=True)
    with safetensors.safe_open(copy, framework="np") as f:
        m = f.metadata()
        check({k: m.get(k) for k in ("format", "step")} == {"format": "np", "step": "40"} and m["converted_by"] == "tfckpt",
              f"convert safetensors -> safetensors keeps the metadata, adding its own ({m})")
        check(all(np.array_equal(f.get_tensor(k), v) for k, v in arrays.items()), "and every tensor")
    e = raises(tfckpt.UsageError, lambda: tfckpt.load(path, cast={"bfloat16": "no-such-type"}))
    print(f"ok: an unknown cast target ({type(e).__name__}: {str(e)[:100]})")
    print("frameworks: all passed")
    return 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--in-venv":
        return in_venv(sys.argv[2], sys.argv[3])
    venv_python, tfckpt_bin, package_dir = sys.argv[1:4]
    sys.path.insert(0, HERE)
    from tf_oracle_test import oracle_python

    venv_python, missing = oracle_python(venv_python)
    if missing is not None:
        return missing
    testdata = os.environ.get("TFCKPT_TESTDATA") or os.path.join(HERE, "..", "..", "shared", "testdata", "tf")
    env = dict(os.environ, PYTHONPATH=package_dir, TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu")
    return subprocess.run([venv_python, os.path.abspath(__file__), "--in-venv", tfckpt_bin, testdata], env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
