#!/usr/bin/python3
"""TensorFlow as the judge (issue 39): checkpoints TensorFlow itself writes go through tfckpt,
and TensorFlow restores what tfckpt wrote.

Usage (tests/meson.build): tf_oracle_test.py VENV_PYTHON TFCKPT PACKAGE_DIR
  VENV_PYTHON  the python of the oracle's virtual environment (scripts/oracle-venv.sh, pinned
               tests/requirements-oracle.txt; $TFCKPT_ORACLE_VENV/bin/python when that is set);
               when it is missing the test is skipped (exit 77), except under CI=true, where
               that is a failure.
  TFCKPT       the tfckpt binary; PACKAGE_DIR the built Python package (import tfckpt).

This file runs in several roles. The driver (Debian's /usr/bin/python3, as meson runs it) starts
the venv's python with this same file: `--random-cases N SEED` (hypothesis draws the random
cases, below), then `--tf-write DIR` (TensorFlow, on CPU, writes every case and what its own
reader answers: tf.train.list_variables, the dtypes, tf.train.load_variable of every tensor)
and, after tfckpt has resharded them, `--tf-restore DIR` (TensorFlow restores every output into
variables built under the new partitioning, re-saves them, and reports what it restored).
TensorFlow is imported twice in all (each import costs seconds); all tfckpt runs happen in the
driver. Only when a random case fails: `--shrink JOB` (the venv's python) shrinks it, running
each smaller case through `--check-one JOB` (the driver over one case). Each check of each
case prints one line; known differences between TensorFlow and tfckpt are expected failures
(EXPECTED below, each naming the difference), and one that starts passing is a failure too, so
the list stays true. The last line is "oracle: N cases, ...".

tfckpt.train against tf.train on every case: the TF role also writes a `checkpoint` state file
beside each case's checkpoint (as CheckpointManager does: relative paths in even cases, absolute
in odd ones, an older checkpoint listed, timestamps) and records what tf.train answers
(train_answers): load_checkpoint's get_variable_to_shape_map, get_variable_to_dtype_map,
has_tensor of every key and of probes (a missing name, the header's empty key, "KEY:0"),
get_tensor of a missing key, debug_string; list_variables; and on the case's directory and on
one without a state file, latest_checkpoint, get_checkpoint_state (its fields),
checkpoints_iterator(DIR, timeout=0) (the paths it yields before it stops) and load_checkpoint
(DIR). The driver asks tfckpt.train the same (compare_train), with get_tensor of every key
against the reference values. tfckpt.train.DType is compared with tf.DType and numpy's types in
the TF role itself (both directions of ==; the venv's python imports the package: the same
CPython; a line SKIP where it cannot). The real checkpoints of TFCKPT_TESTDATA (every V2 index
and V1 file, their directories with state files) go through the same comparison, values and
refusals included (an index without its data file, a missing shard, a truncated data file: TF's
reader refuses the same tensors).

Besides the cases written out below, random TF1 cases are drawn by hypothesis strategies
(case_strategy: 1-4 variables of rank 1-3, nine dtypes, the three partitioners or none along any
axis, optimizer slots, a rule and a policy, the values' seed) from a pinned seed, in the venv's
python (its hypothesis is pinned too: the same seed draws the same cases everywhere;
`--random-cases N SEED` prints them), and go through the same batch: TFCKPT_ORACLE_CASES of
them (default 200, the CI budget: the whole test in about 2 minutes on two busy cores),
TFCKPT_ORACLE_SEED (default 39). Long mode, for an overnight run:
`TFCKPT_ORACLE_CASES=5000 meson test -C build tf_oracle --timeout-multiplier 0` (another seed
searches elsewhere). Every file of tests/oracle_regressions/ is a case too (regression_NAME):
random cases that failed once, shrunk.

A random case that fails is shrunk (shrink_role, in the venv's python: TensorFlow imported once):
hypothesis replays the draws of the seed up to that case and its shrinker tries smaller ones
(fewer variables, fewer and smaller dimensions, simpler dtypes, no partitioner, rule none,
by-task), each through the whole oracle (TF writes it, the driver's checks in Debian's python,
TF restores it); a smaller case counts when it fails a check of the same kind. The minimal one
is printed and written to tests/oracle_regressions/SEED_INDEX.json ("found" says where from),
which the oracle runs from then on: it fails until the difference is fixed or named in
EXPECTED. TFCKPT_ORACLE_SHRINK: how many failing cases (each failing its own way) are shrunk
(default 1; 0: none); TFCKPT_ORACLE_SHRINK_SECONDS: the time for tries (default 240);
TFCKPT_ORACLE_REGRESSIONS: another directory to write to. The shrinker shown at work:
`TFCKPT_ORACLE_PLANT=float16-rank2 TFCKPT_ORACLE_CASES=20` plants a failure of the values check
for every float16 variable of rank 2 or more and runs the random cases alone; it passes when the
first failing case shrinks to one float16 [1, 1] variable stored whole, rule none, by-task
(written to a temporary directory, removed after). Meson runs it with TFCKPT_ORACLE_CASES=8 as
the test tf_oracle_shrink (about 20 s).

The real estimator_linear_ftrl_2shards of ../shared/testdata/tf (TFCKPT_TESTDATA) adds one case
when present.

The TF2 forms include DTensor on four logical CPU devices (its per-device parts of a save
whose merge is made to fail, finished by `merge --recover` and `merge PARTS` and compared with
tf.raw_ops.MergeV2Checkpoints of the same parts) and the sharding callbacks of
tf.train.CheckpointOptions, compared with reshard's --policy. Forms TF 2.21 cannot write on CPU
are listed in CANNOT_WRITE and printed as "n/a" lines.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

# --------------------------------------------------------------------------------------------
# The cases: one description read by all three roles.
#
# A partitioner is ("fixed", num_shards, axis) = tf.compat.v1.fixed_size_partitioner,
# ("minmax", max_partitions, axis, min_slice_size) = min_max_variable_partitioner,
# ("axis", max_shard_bytes, axis, max_shards) = variable_axis_size_partitioner, or None (whole).
# A reshard is (label, tfckpt arguments, the partitioner TensorFlow restores its output under:
# a partitioner for every variable that is partitioned in the input, or {name: partitioner}).


def V(name, shape, dtype, part=None, device=0, opt=None, special=False):
    return {"name": name, "shape": shape, "dtype": dtype, "part": part, "device": device, "opt": opt,
            "special": special}


def tfckpt_rule(p):
    """The --partition SPEC of a partitioner."""
    if p is None:
        return "none"
    if p[0] == "fixed":
        return f"fixed:{p[1]}@{p[2]}"
    if p[0] == "minmax":
        return f"min-size:{p[3]},{p[1]}@{p[2]}"
    return f"max-size:{p[1]},{p[3] or 0}@{p[2]}"


def R(label, args, new_part=None, resave=True):
    return {"label": label, "args": args, "new_part": new_part, "resave": resave}


# A round trip through safetensors (`convert CKPT -o X.safetensors`, then `convert X.safetensors
# -o OUT`): whole tensors, which TF restores into the original partitioning.
VIA_SAFETENSORS = {"label": "via safetensors", "args": None, "new_part": "same", "resave": False,
                   "convert": True}


def rule(p):
    return R(tfckpt_rule(p), ["--partition", tfckpt_rule(p)], p)


FIXED2, FIXED3, NONE = ("fixed", 2, 0), ("fixed", 3, 0), None
CASES = [
    # Every dtype TF assembles from slices, partitioned along axis 0 and 1, uneven rows;
    # specials (NaN, -0.0, inf) in a whole tensor.
    {"name": "tf1_fixed_dtypes", "kind": "tf1", "vars": [
        V("emb", [7, 3], "float32", ("fixed", 3, 0)),
        V("d64", [4, 5], "float64", ("fixed", 2, 1)),
        V("bf", [5, 4], "bfloat16", ("fixed", 3, 0)),
        V("i32", [6], "int32", ("fixed", 4, 0)),
        V("i64", [3, 2], "int64", ("fixed", 2, 0)),
        V("flags", [9], "bool", ("fixed", 5, 0)),
        V("whole", [2, 3], "float32", None, special=True),
        V("step", [], "int64", None)],
     "reshards": [rule(FIXED2), R("none single", ["--partition", "none", "--policy", "single"], NONE),
                  VIA_SAFETENSORS]},
    # The dtypes beyond the common ones: TF 2.21 assembles sliced int4/uint4 (and int8,
    # complex64), refuses sliced uint16 and float8.
    {"name": "tf1_more_dtypes", "kind": "tf1", "vars": [
        V("i4", [7, 2], "int4", ("fixed", 3, 0)),
        V("u4", [5], "uint4", ("fixed", 2, 0)),
        V("i8", [6, 2], "int8", ("fixed", 2, 1)),
        V("u16", [5], "uint16", ("fixed", 2, 0)),
        V("c64", [4, 2], "complex64", ("fixed", 2, 0)),
        V("f8", [6], "float8_e4m3fn", ("fixed", 3, 0))],
     "reshards": [R("fixed:2 any-dtype", ["--partition", "fixed:2", "--allow-any-dtype"], FIXED2),
                  R("[iu]4$=fixed:2", ["--partition", "^[iu]4$=fixed:2"], {"i4": FIXED2, "u4": FIXED2}),
                  R("none single", ["--partition", "none", "--policy", "single"], NONE)]},
    # More shards than rows: TF makes min(shards, rows) parts.
    {"name": "tf1_more_shards_than_rows", "kind": "tf1", "vars": [
        V("a", [2, 6], "float32", ("fixed", 5, 0)),
        V("b", [3, 2], "float64", ("fixed", 4, 1)),
        V("c", [1, 4], "int64", ("fixed", 3, 0))],
     "reshards": [rule(("fixed", 4, 1)), rule(("minmax", 8, 0, 16))]},
    {"name": "tf1_min_max", "kind": "tf1", "vars": [
        V("a", [10, 8], "float32", ("minmax", 4, 0, 64)),
        V("b", [6, 3], "float64", ("minmax", 3, 1, 32)),
        V("c", [4, 4], "int32", ("minmax", 1, 0, 262144))],
     "reshards": [rule(("minmax", 3, 0, 100)), rule(("axis", 64, 0, None))]},
    {"name": "tf1_axis_size", "kind": "tf1", "vars": [
        V("a", [9, 3], "float32", ("axis", 40, 0, None)),
        V("b", [4, 10], "float32", ("axis", 50, 1, None)),
        V("c", [13, 2], "bfloat16", ("axis", 12, 0, 3))],
     "reshards": [rule(("axis", 30, 1, 5)), rule(FIXED3)]},
    # float16 and strings: TF's reader assembles neither from slices; Saver restores them slice
    # for slice, so reshard needs --allow-any-dtype to cut them.
    {"name": "tf1_half_string", "kind": "tf1", "vars": [
        V("h", [6, 2], "float16", ("fixed", 3, 0)),
        V("s", [5], "string", ("fixed", 2, 0)),
        V("s2", [3, 2], "string", None)],
     "reshards": [R("fixed:2 any-dtype", ["--partition", "fixed:2", "--allow-any-dtype"], FIXED2),
                  R("none single", ["--partition", "none", "--policy", "single"], NONE)]},
    # Optimizer slots of partitioned variables (Adam, Adagrad, Momentum, Ftrl).
    {"name": "tf1_slots", "kind": "tf1", "vars": [
        V("a", [11, 4], "float32", ("fixed", 3, 0), opt="adam"),
        V("b", [7, 3], "float32", ("fixed", 2, 0), opt="adagrad"),
        V("c", [5, 2], "float32", ("minmax", 2, 0, 8), opt="momentum"),
        V("d", [6, 3], "float32", ("fixed", 4, 0), opt="ftrl"),
        V("dense", [4, 4], "float32", None, opt="adam")],
     "reshards": [rule(FIXED2),
                  R("fixed:5 by-task:2", ["--partition", "fixed:5", "--policy", "by-task:2"], ("fixed", 5, 0)),
                  R("a$=fixed:2", ["--partition", "^a$=fixed:2"], {"a": FIXED2}),
                  R("none single", ["--partition", "none", "--policy", "single"], NONE), VIA_SAFETENSORS]},
    # ExponentialMovingAverage of a partitioned variable: its shadow is a slot ("a/ExponentialMovingAverage").
    {"name": "tf1_ema", "kind": "tf1", "ema": True, "vars": [
        V("a", [8, 3], "float32", ("fixed", 3, 0), opt="sgd"),
        V("b", [3], "float32", None, opt="sgd")],
     "reshards": [rule(FIXED2), R("a$=fixed:2", ["--partition", "^a$=fixed:2"], {"a": FIXED2})]},
    # A sharded save over three devices (Saver(sharded=True): one data file per device, merged).
    # Parameter-server device strings ("/job:ps/task:K") would need an in-process gRPC cluster:
    # a local session refuses them even with soft placement (the variables' colocation
    # constraints); three logical CPU devices give the same files.
    {"name": "tf1_sharded_devices", "kind": "tf1", "devices": 3, "sharded": True, "vars": [
        V("a", [9, 4], "float32", ("fixed", 3, 0), device=0, opt="adam"),
        V("b", [6, 2], "float64", ("fixed", 2, 0), device=1, opt="adam"),
        V("c", [5], "int32", None, device=2)],
     "reshards": [rule(FIXED2), R("single", ["--policy", "single"], "same"),
                  R("none shards:2", ["--partition", "none", "--policy", "shards:2"], NONE)]},
    # The V1 format (Saver(write_version=V1)): one table file holding index and data. TF's V1
    # writer refuses bfloat16 ("Saving data type bfloat16 not yet supported").
    {"name": "tf1_v1", "kind": "tf1", "write_version": "V1", "vars": [
        V("a", [7, 2], "float32", ("fixed", 3, 0)),
        V("b", [4], "int64", None),
        V("c", [3, 3], "float64", ("fixed", 2, 0)),
        V("s", [2], "string", None)],
     "reshards": [rule(FIXED2), R("none single", ["--partition", "none", "--policy", "single"], NONE)]},
    # TF2: tf-keras models with optimizers, written by tf.train.Checkpoint.
    {"name": "tf2_keras_adam", "kind": "keras", "opt": "adam",
     "reshards": [R("single", ["--policy", "single"], "same"), R("shards:2", ["--policy", "shards:2"], "same")]},
    {"name": "tf2_keras_legacy_adagrad", "kind": "keras", "opt": "legacy_adagrad",
     "reshards": [R("single", ["--policy", "single"], "same")]},
    # TF2 ParameterServerStrategy on an in-process cluster (a worker and two ps tasks, gRPC on
    # localhost) with FixedShardsPartitioner(2): a ShardedVariable and its legacy-Adam slots
    # (.OPTIMIZER_SLOT keys, stored in the variable's slices), trained by a ClusterCoordinator.
    {"name": "tf2_ps_strategy", "kind": "ps", "shards": 2, "shape": [7, 3],
     "reshards": [R("fixed:3@0", ["--partition", "fixed:3"], 3),
                  R("emb$=fixed:3", ["--partition", r"^emb/\.ATTRIBUTES/VARIABLE_VALUE$=fixed:3"], 3)]},
    # TF2 ShardedVariable, made directly (tf.distribute's sharded_variable.ShardedVariable over
    # component variables), of two dtypes.
    {"name": "tf2_sharded_variable", "kind": "sharded", "vars": [
        V("sv", [7, 3], "float32", ("fixed", 3, 0)),
        V("si", [5], "int64", ("fixed", 2, 0))],
     "reshards": [rule(FIXED2), R("none single", ["--partition", "none", "--policy", "single"], NONE)]},
    # TF2 DTensor on a CPU mesh x=2,y=2 (four logical CPU devices): DVariables sharded over
    # one or both mesh dimensions and replicated ones, written by tf.train.Checkpoint. TF 2.21
    # saves each device's pieces under P_temp/part-IIIII-of-NNNNN_dev-D-of-4 and merges
    # them device by device (a device's parts in part order). The same objects are saved once
    # more with the merge made to fail ("killed between the two"): the per-device parts
    # without the merged index, which `merge --recover` and `merge PARTS` finish, compared
    # byte for byte with tf.raw_ops.MergeV2Checkpoints of the same parts. TF restores with
    # DTensor onto other layouts on a mesh x=4, and re-saves there: tfckpt's `layout:` rules
    # with --policy by-device are compared with that save.
    {"name": "tf2_dtensor", "kind": "dtensor", "mesh": [["x", 2], ["y", 2]], "other_mesh": [["x", 4]], "vars": [
        dict(V("a", [8, 4], "float32"), layout=["x", "y"], other=["unsharded", "x"]),
        dict(V("b", [4], "float64"), layout=["unsharded"], other=["x"]),
        dict(V("c", [8, 6], "float32", special=True), layout=["unsharded", "x"], other=["x", "unsharded"]),
        dict(V("i", [6, 4], "int64"), layout=["y", "unsharded"], other=["unsharded", "unsharded"]),
        dict(V("step", [], "int64"), layout=[], other=[])],
     "reshards": [R("layout@x=4 by-device", [
         *(a for n, sp in [("a", "unsharded,x"), ("b", "x"), ("c", "x,unsharded"), ("i", "unsharded,unsharded")]
           for a in ("--partition", rf"^{n}/\.ATTRIBUTES/VARIABLE_VALUE$=layout:{sp}@x=4")),
         "--policy", "by-device"], "other")]},
    # TF2 sharding callbacks (tf.train.CheckpointOptions(experimental_sharding_callback=...)):
    # TF's ShardByTaskPolicy, MaxShardSizePolicy for three sizes and a user callback each
    # write the same objects; tfckpt reshards a single-file save of them with the matching
    # --policy (the callback's shards as a SHARDS.json), and the files are compared.
    {"name": "tf2_sharding_policies", "kind": "policies", "vars": [
        V("emb", [40, 8], "float32"), V("w", [16, 4], "float64"), V("bf", [6, 5], "bfloat16"),
        V("step", [], "int64"), V("s", [3], "string")],
     "policies": [("by-task", ["--policy", "by-task"], ("task",)),
                  ("max-shard-size:300", ["--policy", "max-shard-size:300"], ("max", 300)),
                  ("max-shard-size:1000", ["--policy", "max-shard-size:1000"], ("max", 1000)),
                  ("max-shard-size:4096", ["--policy", "max-shard-size:4096"], ("max", 4096)),
                  # A user callback: one shard per listed group of keys (the object graph too).
                  ("user callback", None, ("user", [["w", "step"], ["emb", "_CHECKPOINTABLE_OBJECT_GRAPH"],
                                                    ["bf", "s"]]))]},
]

for _c in CASES:
    if _c["kind"] == "policies":
        _c["reshards"] = [R(label, args or ["--policy", "file:SHARDS.json"], "same") for label, args, _ in _c["policies"]]

# Forms TensorFlow 2.21 cannot write on CPU (the driver prints a line for each):
# - A variable on a ParallelDevice (parallel_component_K attributes): tf.train.Checkpoint's
#   save function fails outside the device ("Ops must be placed on the parallel device
#   explicitly") and inside it ("Got a non-parallel tensor ... as input to a parallel
#   operation"); TF's own parallel_device_test skips its checkpointing test. The synthetic
#   `make_fixture parallel` checkpoints of cli_test stay the only ones.
# - TPU replicas NAME/0..NAME/K-1: TF1's TPU rewrite needs a TPU system; on CPU
#   MirroredStrategy saves one copy under the plain name. `make_fixture replicas` of cli_test
#   stays the only such checkpoint.
CANNOT_WRITE = [
    ("ParallelDevice parallel_component_K", "tf.train.Checkpoint cannot save a ParallelDevice variable "
     "(\"Ops must be placed on the parallel device explicitly\"); synthetic: make_fixture parallel (cli_test)"),
    ("replicated NAME/i keys", "TPU replicas need a TPU system; MirroredStrategy on CPU saves one copy under "
     "the plain name; synthetic: make_fixture replicas (cli_test)"),
]



# Regression cases: random cases that failed once, shrunk to a minimal reproduction (see
# shrink_role) and kept as JSON, one case a file ({"case": ..., "found": ...}); the oracle always
# runs them, named regression_FILE.
REGRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle_regressions")


def regression_cases(d=REGRESSIONS):
    out = []
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if f.endswith(".json"):
            with open(os.path.join(d, f)) as fh:
                case = json.load(fh)["case"]
            out.append({**case, "name": "regression_" + f[:-len(".json")]})
    return out


# --------------------------------------------------------------------------------------------
# The random TF1 cases: hypothesis strategies, drawn in the venv's python (its pinned
# hypothesis: the same seed gives the same cases on every machine) by `--random-cases N SEED`.

RANDOM_DTYPES = ["float32", "float64", "bfloat16", "float16", "int32", "int64", "int8", "bool", "string"]
RANDOM_POLICIES = ["by-task", "single", "shards:2", "shards:3"]


def case_strategy():
    """One random TF1 case: 1-4 variables of rank 1-3 (dimensions 1-12), a dtype, a
    partitioner (or none) along a random axis, optimizer slots (Adam, Adagrad, Momentum) on
    some float32 ones; one rule (a partitioner along an axis every partitioned variable has, or
    none) and one policy; the seed of its values. Each part shrinks towards the simplest: one
    variable, rank 1, dimension 1, float32, whole, no slots, rule none, by-task."""
    from hypothesis import strategies as st

    def partitioner(axis):
        return st.one_of(
            st.tuples(st.just("fixed"), st.integers(1, 5), st.just(axis)),
            st.tuples(st.just("minmax"), st.integers(1, 5), st.just(axis), st.sampled_from([4, 16, 64, 256])),
            st.tuples(st.just("axis"), st.sampled_from([8, 16, 40, 100]), st.just(axis),
                      st.sampled_from([None, 2, 3])))

    @st.composite
    def var(draw):
        shape = draw(st.lists(st.integers(1, 12), min_size=1, max_size=3))  # shrinks by dropping dimensions
        rank = len(shape)
        dtype = draw(st.sampled_from(RANDOM_DTYPES))
        part = None
        if draw(st.integers(0, 4)):  # partitioned 4 times in 5, as before
            part = draw(partitioner(draw(st.integers(0, rank - 1))))
        opt = draw(st.sampled_from([None, None, "adam", "adagrad", "momentum"])) if dtype == "float32" else None
        return V("", shape, dtype, part, opt=opt)

    @st.composite
    def case(draw):
        # A list: the shrinker deletes any variable, not only the last.
        vs = [{**v, "name": f"v{j}"} for j, v in enumerate(draw(st.lists(var(), min_size=1, max_size=4)))]
        ranks = [len(v["shape"]) for v in vs if v["part"]] or [1]
        new = None
        if draw(st.integers(0, 4)):
            new = draw(partitioner(draw(st.integers(0, min(ranks) - 1))))
        policy = draw(st.sampled_from(RANDOM_POLICIES))
        seed = draw(st.integers(0, 2 ** 16))
        return {"kind": "tf1", "vars": vs, "seed": seed, "reshards": [
            R(f"{tfckpt_rule(new)} {policy}", ["--partition", tfckpt_rule(new), "--policy", policy, "--allow-any-dtype"],
              {"sliced": new})]}
    return case()


def hypothesis_run(n, seed, body, shrink=False):
    """Runs `body` on the cases hypothesis draws from `seed` (derandomized by @seed, no
    example database): n of them, then, where body fails, hypothesis's shrinker."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    return hseed(seed)(settings(max_examples=n, database=None, deadline=None, phases=phases, print_blob=False,
                                report_multiple_bugs=False, suppress_health_check=list(HealthCheck))(
        given(case_strategy())(body)))()


def random_cases(n, seed):
    """The random TF1 cases (TFCKPT_ORACLE_CASES, TFCKPT_ORACLE_SEED), in hypothesis's order,
    each once: random_SEED_I. Variables TF's partitioner leaves in one part are stored whole,
    and a rule without a REGEX leaves them so (see EXPECTED): TF restores here under the new
    partitioner only the variables stored in slices."""
    seen, out = set(), []
    if n <= 0:
        return []

    def collect(case):
        key = json.dumps(case, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(case)
    hypothesis_run(n, seed, collect)
    return [{"name": f"random_{seed}_{i}", **c} for i, c in enumerate(out)]


def bare(case):
    """A case without its name (what hypothesis draws; what a regression file keeps)."""
    return {k: v for k, v in case.items() if k != "name"}


# A real TF1 checkpoint of an older TF (../shared/testdata/tf, when present): its slots are keyed
# NAME/part_0/Ftrl, which TF 2.21 no longer writes (it keys them NAME/Ftrl).
REAL_CASE = "estimator_linear_ftrl_2shards"
REAL_VAR = "linear/linear_model/Country_indicator/weights"

# Known differences between TensorFlow and tfckpt: (case, check) -> the difference. Each is an
# expected failure; one that passes fails the test (update this list).
HALF_STRING = ("tfckpt.train assembles a sliced {} tensor; tf.train.load_variable refuses it "
               "(BundleReader::GetSliceValue: \"Dtype {} not supported.\")")
V1_SLICED = ("tfckpt.train assembles a sliced V1 tensor; tf.train.load_variable refuses it "
             "(\"Sliced checkpoints are not supported\")")
# Found by the random cases (seed 7; tests/oracle_regressions/7_45.json, one float64 [11] under
# variable_axis_size_partitioner(8): 11 slices): TF1's Saver saves a partitioned variable's parts
# in the order of their names, NAME/part_0, NAME/part_10, NAME/part_1, ..., and its index lists
# the slices in that order; tfckpt lists them by offset (a pass-through reshard keeps TF's data
# file, its index differs) and a reshard writes the pieces by offset (the data file differs from
# TF's re-save too). Expected wherever a tensor has more than 10 slices (the driver counts them).
ELEVEN_SLICES = ("a tensor of 11+ slices: TF's Saver writes and lists its slices in the order of the parts' names "
                 "(part_0, part_10, part_1, ...), tfckpt by offset")
EMPTY_PREFIX = ("tfckpt reads the bundle DIR/.index of a checkpoint whose prefix is its directory; TF's reader "
                "opens DIR/. as a V1 file (DataLossError)")
EXPECTED = {
    # (Issue 39, difference 1, fixed: validate --against pairs PRIMARY/part_0/SLOT with the
    # PRIMARY/SLOT reshard renames it to: against.renamed.)
    # (Difference 2, fixed: reshard lays TF2 tensors out in the object graph's order, the graph
    # last, as TF2 writes them: WritePlan::order.)
    # (Differences 3 and 4, fixed: a slot's new pieces go to its primary's files, and every
    # slot_creator slot -- ExponentialMovingAverage's shadow, a custom optimizer's, a
    # prefix-shaped one, a ShardedVariable's .OPTIMIZER_SLOT -- is cut as its primary.)
    # Found here: TF 2.21's DTensor save writes each device's file in an order of its own
    # (not the object graph's, which reshard follows for TF2 saves): the same files, the
    # same sizes, two or more tensors in another order in data files 0 and 2.
    ("tf2_dtensor", "pass-through reshard is byte-identical"):
        "a DTensor save's per-device files are not in the object graph's order, which reshard lays TF2 tensors out in",
    # (Found here and fixed: TF 2.21's DTensor save leaves its per-device parts as
    # P_temp/part-IIIII-of-NNNNN_dev-D-of-N, which merge --recover now finds and merges in
    # TF's order, byte-identical to MergeV2Checkpoints.)
    # Found here: TF 2.21's DTensor save puts the object graph (no layout: a shard of its own
    # task) in a part of its own, P_temp/part-00001-of-00002_dev-0-of-4, merged right after
    # device 0's part: N devices give N + 1 data files, the object graph alone in data file 1.
    # by-device writes one file per device, the object graph in device 0's.
    ("tf2_dtensor", "reshard layout@x=4 by-device: byte-identical to TF's save"):
        "by-device writes 4 files (object graph in device 0's); TF's DTensor save 5 (object graph alone in file 1)",
    # Difference 5: sliced float16 (and string) assembled where TF's reader refuses.
    ("tf1_half_string", "tfckpt.train.load_variable refuses h as TF does"): HALF_STRING.format("float16", "half"),
    ("tf1_half_string", "tfckpt.train.load_variable refuses s as TF does"): HALF_STRING.format("string", "string"),
    ("tf1_v1", "tfckpt.train.load_variable refuses a as TF does"): V1_SLICED,
    ("tf1_v1", "tfckpt.train.load_variable refuses c as TF does"): V1_SLICED,
    # Difference 5, the other half: TF 2.21's GetSliceValue assembles int4/uint4, which TF's
    # reader returns as ml_dtypes arrays (reshard cuts them now, as TF assembles them).
    ("tf1_more_dtypes", "tfckpt.train.load_variable == tf.train.load_variable"):
        "tfckpt.train refuses int4/uint4 (\"numpy cannot represent\"); tf.train.load_variable returns ml_dtypes arrays",
    ("tf1_more_dtypes", "tfckpt.train.load_variable refuses u16 as TF does"): HALF_STRING.format("uint16", "uint16"),
    # Found here: TF1's sharded save writes each variable, with its slots, into the file of the
    # device it was placed on (here a on cpu:0, b on cpu:1, c on cpu:2). The checkpoint does not
    # record devices; by-task deals the new pieces round robin over the input's files (as
    # replica_device_setter deals partitions over ps tasks), so the files differ from TF's.
    ("tf1_sharded_devices", "reshard fixed:2@0: byte-identical to TF's save"):
        "by-task deals pieces round robin over the files; TF's sharded save groups them by the variable's device",
    # Found here: TF's writer stores a variable its partitioner left in one part whole
    # (BundleWriter::AddSlice of a full slice is Add), so the checkpoint cannot tell it was
    # partitioned; a rule without a REGEX applies only to tensors stored in slices and leaves it
    # whole, where TF's graph under the new partitioner cuts it (c [1, 4] under fixed:4@1). TF
    # still restores it exactly; a REGEX rule naming it cuts it.
    ("tf1_more_shards_than_rows", "reshard fixed:4@1: slices as TF's Saver cuts them"):
        "a bare --partition rule leaves a one-part (stored whole) partitioned variable whole",
    # Found by the tfckpt.train comparison: a checkpoint whose prefix is its directory (files
    # `.index`, `.data-*`; state `model_checkpoint_path: "."`). TF's load_checkpoint("DIR/")
    # takes DIR for a directory, its latest checkpoint DIR/. for a V1 file (the directory
    # "exists"), and fails to open it as a table; tfckpt.open reads the bundle DIR/.index.
    ("empty_prefix_keras", "tfckpt.train.load_checkpoint refuses it as TF's does"): EMPTY_PREFIX,
    ("empty_prefix_keras", "tfckpt.train.list_variables == TF's"): EMPTY_PREFIX,
    ("empty_prefix_keras", "tfckpt.train.load_checkpoint(DIR): keys == TF's on empty_prefix_keras"): EMPTY_PREFIX,
}

# --------------------------------------------------------------------------------------------
# The TensorFlow side (the venv's python).


TF = []


def import_tf():
    """numpy and TensorFlow, imported once a process (the shrinker runs many cases)."""
    if TF:
        return TF[0]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import warnings
    warnings.filterwarnings("ignore")
    import numpy as np
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")
    # Four logical CPU devices for DTensor's meshes (before anything starts the eager context;
    # TF1's sessions count their own devices).
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * DTENSOR_DEVICES)
    TF.append((np, tf))
    return np, tf


DTENSOR_DEVICES = 4


ML_DTYPES = ("bfloat16", "int4", "uint4", "float8_e4m3fn", "float8_e5m2")


def np_dtype(np, dtype):
    if dtype in ML_DTYPES:
        import ml_dtypes
        return getattr(ml_dtypes, dtype)
    return object if dtype == "string" else np.dtype(dtype)


def bits(np, x, dtype):
    """The bits of an array whose dtype numpy lacks (ml_dtypes' are 1 or 2 bytes an element)."""
    if dtype == "bfloat16":
        return np.asarray(x).view(np.uint16)
    if dtype in ("int4", "uint4"):  # their values (tfckpt prints them; numpy has no such type)
        return np.asarray(x).astype(np.int8 if dtype == "int4" else np.uint8)
    if dtype in ML_DTYPES:
        return np.asarray(x).view(np.uint8)
    return x


def values_for(np, spec, rng):
    """Random values of a variable (the case's seed), specials where asked."""
    shape, dtype = spec["shape"], spec["dtype"]
    n = int(np.prod(shape)) if shape else 1
    if dtype == "string":
        alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789 -_", dtype=np.uint8)
        flat = [bytes(rng.choice(alphabet, rng.integers(0, 9))) for _ in range(n)]
        return np.array(flat, dtype=object).reshape(shape)
    if dtype == "bool":
        return (rng.random(n) < 0.5).reshape(shape)
    if dtype in ("int4", "uint4"):
        lo = -8 if dtype == "int4" else 0
        return rng.integers(lo, lo + 16, n).astype(np_dtype(np, dtype)).reshape(shape)
    if dtype == "complex64":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64).reshape(shape)
    if dtype.startswith("int") or dtype.startswith("uint"):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True).reshape(shape)
    x = rng.standard_normal(n) * 10
    if spec["special"]:
        x[:4] = [np.nan, -0.0, np.inf, -np.inf][:n]
    return x.astype(np_dtype(np, dtype)).reshape(shape)


def poison_for(np, spec):
    """What TF's variables hold before a restore: never a saved value."""
    dtype = spec["dtype"]
    if dtype == "string":
        return np.full(spec["shape"], b"poison", dtype=object)
    if dtype == "bool":
        return np.zeros(spec["shape"], dtype=bool)  # with 9+ random bits one differs
    return np.full(spec["shape"], 3, dtype=np_dtype(np, dtype))


def tf_partitioner(tf, p):
    tf1 = tf.compat.v1
    if p is None:
        return None
    if p[0] == "fixed":
        return tf1.fixed_size_partitioner(p[1], axis=p[2])
    if p[0] == "minmax":
        return tf1.min_max_variable_partitioner(max_partitions=p[1], axis=p[2], min_slice_size=p[3])
    return tf1.variable_axis_size_partitioner(p[1], axis=p[2], max_shards=p[3])


def build_tf1(np, tf, case, values, parts):
    """The case's graph: its variables (initialized from `values`: {name: full array}) under
    `parts` ({name: partitioner}), their optimizers and EMA. Returns the train op (or None)."""
    tf1 = tf.compat.v1
    made = {}
    for spec in case["vars"]:
        full = values[spec["name"]]

        def init(shape, dtype=None, partition_info=None, full=full):
            if partition_info is None:
                return tf.constant(full)
            sl = tuple(slice(o, o + s) for o, s in zip(partition_info.var_offset, shape))
            return tf.constant(full[sl])
        device = spec["device"] if isinstance(spec["device"], str) else f"/cpu:{spec['device']}"
        with tf1.device(device):
            dtype = tf.as_dtype(spec["dtype"])
            made[spec["name"]] = tf1.get_variable(spec["name"], shape=spec["shape"], dtype=dtype, initializer=init,
                                                  partitioner=tf_partitioner(tf, parts[spec["name"]]),
                                                  trainable=spec["opt"] is not None)
    ops = []
    optimizers = {"adam": lambda: tf1.train.AdamOptimizer(0.05), "adagrad": lambda: tf1.train.AdagradOptimizer(0.1),
                  "momentum": lambda: tf1.train.MomentumOptimizer(0.1, 0.9), "ftrl": lambda: tf1.train.FtrlOptimizer(0.1),
                  "sgd": lambda: tf1.train.GradientDescentOptimizer(0.1)}
    by_opt = {}
    for spec in case["vars"]:
        if spec["opt"]:
            by_opt.setdefault(spec["opt"], []).append(made[spec["name"]])
    for name, vs in by_opt.items():
        parts_list = [p for v in vs for p in (list(v) if hasattr(v, "_get_variable_list") else [v])]
        loss = tf.add_n([tf.cast(tf.reduce_sum(tf.square(p - 1)), tf.float32) for p in parts_list])
        ops.append(optimizers[name]().minimize(loss, var_list=parts_list))
    if case.get("ema"):
        with tf1.control_dependencies(ops):
            trained = [p for v in made.values() if v.dtype == tf.float32
                       for p in (list(v) if hasattr(v, "_get_variable_list") else [v])]
            ops = [tf1.train.ExponentialMovingAverage(0.5).apply(trained)]
    train = tf.group(*ops) if ops else None
    # The variables TF stores in slices: a partitioner's single part is stored whole.
    sliced = [n for n, v in made.items() if hasattr(v, "_get_variable_list") and len(list(v)) > 1]
    return train, sliced


def full_values_tf1(np, sess, tf):
    """{checkpoint key: full value} of every global variable, partitions assembled."""
    tf1 = tf.compat.v1
    out = {}
    vs = tf1.global_variables()
    got = sess.run(vs)
    for v, x in zip(vs, got):
        info = v._get_save_slice_info() if hasattr(v, "_get_save_slice_info") else None
        if info is None:
            out[v.op.name] = x
            continue
        full = out.setdefault(info.full_name, np.empty(info.full_shape, dtype=x.dtype))
        full[tuple(slice(o, o + s) for o, s in zip(info.var_offset, x.shape))] = x
    return out


def session_config(tf, case):
    return tf.compat.v1.ConfigProto(device_count={"CPU": case.get("devices", 1)}, allow_soft_placement=True,
                                    inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)


def write_tf1(np, tf, case, prefix, rng):
    tf1 = tf.compat.v1
    values = {spec["name"]: values_for(np, spec, rng) for spec in case["vars"]}
    with tf.Graph().as_default() as g:
        train, sliced = build_tf1(np, tf, case, values, {s["name"]: s["part"] for s in case["vars"]})
        version = tf1.train.SaverDef.V1 if case.get("write_version") == "V1" else tf1.train.SaverDef.V2
        saver = tf1.train.Saver(sharded=case.get("sharded", False), write_version=version)
        with tf1.Session(graph=g, config=session_config(tf, case)) as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(2 if train is not None else 0):
                sess.run(train)
            session = full_values_tf1(np, sess, tf)
            saver.save(sess, prefix, write_meta_graph=False, write_state=False)
    return session, sliced


def keras_model(tf, case):
    import tf_keras as keras
    tf.keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.layers.Dense(5, input_shape=(4,)), keras.layers.Dense(3)])
    if case["opt"] == "adam":
        opt = keras.optimizers.Adam(0.01)
    else:
        opt = keras.optimizers.legacy.Adagrad(0.1)
    return m, opt


def keras_checkpoint(np, tf, case, extra):
    m, opt = keras_model(tf, case)
    return m, opt, tf.train.Checkpoint(model=m, optimizer=opt, **extra)


def write_keras(np, tf, case, prefix, rng):
    import ml_dtypes
    extra = {"step": tf.Variable(np.int64(rng.integers(1, 1 << 40))),
             "tag": tf.Variable(b"oracle-" + bytes(str(rng.integers(1000)), "ascii")),
             "bf": tf.Variable(rng.standard_normal((3, 2)).astype(ml_dtypes.bfloat16))}
    m, opt, ckpt = keras_checkpoint(np, tf, case, extra)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(m(x) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables), m.trainable_variables))
    ckpt.write(prefix)
    return {}, []


def shard_rows(n, k):
    """TF's partition sizes: min(k, n) parts, the first n % parts one longer."""
    k = min(k, n)
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def sharded_checkpoint(np, tf, case, parts, values):
    from tensorflow.python.distribute import sharded_variable
    objs = {}
    for spec in case["vars"]:
        p = parts[spec["name"]]
        rows = shard_rows(spec["shape"][0], p[1]) if p else [spec["shape"][0]]
        full = values[spec["name"]]
        comps, at = [], 0
        for i, r in enumerate(rows):
            comps.append(tf.Variable(full[at:at + r], name=f"{spec['name']}/part_{i}"))
            at += r
        objs[spec["name"]] = sharded_variable.ShardedVariable(comps, name=spec["name"])
    return objs, tf.train.Checkpoint(**objs)


def write_sharded(np, tf, case, prefix, rng):
    values = {spec["name"]: values_for(np, spec, rng) for spec in case["vars"]}
    _, ckpt = sharded_checkpoint(np, tf, case, {s["name"]: s["part"] for s in case["vars"]}, values)
    ckpt.write(prefix)
    return {}, []


PS = {}


def ps_strategy(tf, shards):
    """A ParameterServerStrategy over an in-process cluster (started once per process; one
    strategy per process, which is all a phase needs) cutting variables in `shards`."""
    import socket
    if "strategy" in PS:
        assert PS["shards"] == shards, "one ParameterServerStrategy per process"
        return PS["strategy"]

    def port():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    spec = {"worker": [f"localhost:{port()}"], "ps": [f"localhost:{port()}", f"localhost:{port()}"]}
    cluster = tf.train.ClusterSpec(spec)
    PS["servers"] = [tf.distribute.Server(cluster, job_name=j, task_index=i, protocol="grpc", start=True)
                     for j in spec for i in range(len(spec[j]))]
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc")
    PS["strategy"] = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(shards))
    PS["shards"] = shards
    return PS["strategy"]


def ps_objects(tf, st, values):
    import tf_keras as keras
    with st.scope():
        emb = tf.Variable(values, name="emb")
        opt = keras.optimizers.legacy.Adam(0.1)
    return emb, opt, tf.train.Checkpoint(emb=emb, opt=opt)


def write_ps(np, tf, case, prefix, rng):
    st = ps_strategy(tf, case["shards"])
    emb, opt, ckpt = ps_objects(tf, st, rng.standard_normal(case["shape"]).astype(np.float32))
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(st)

    @tf.function
    def step():
        def fn():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(tf.convert_to_tensor(emb) - 1))
            grads = tape.gradient(loss, emb.variables)
            opt.apply_gradients(zip(grads, emb.variables))
            return loss
        return st.run(fn)
    for _ in range(2):
        coordinator.schedule(step)
    coordinator.join()
    ckpt.write(prefix)
    return {}, []


def restore_ps(np, tf, case, r, prefix, resave):
    """The primary restored by TF into a ShardedVariable of the new shard count; the slots and
    the optimizer's other values as TF's reader reads them from tfckpt's output (restoring the
    legacy optimizer's slots of a ShardedVariable outside training is not done here). The
    re-save carries TF's own slicing of the variable and its slots."""
    st = ps_strategy(tf, r["new_part"])
    emb, opt, ckpt = ps_objects(tf, st, np.full(case["shape"], 77, dtype=np.float32))
    ckpt.read(prefix)
    with st.scope():
        opt._create_all_weights(emb.variables)
    ckpt.write(resave)
    got = {n: tf.train.load_variable(prefix, n) for n, _ in tf.train.list_variables(prefix)
           if n != "_CHECKPOINTABLE_OBJECT_GRAPH"}
    got["emb/.ATTRIBUTES/VARIABLE_VALUE"] = np.concatenate([v.numpy() for v in emb.variables])
    return got


def dtensor_objects(tf, case, values, other):
    """A tf.train.Checkpoint of the case's DVariables holding `values`, laid out on the case's
    mesh (or, with `other`, on its other mesh)."""
    from tensorflow.experimental import dtensor
    mesh = dtensor.create_mesh([tuple(d) for d in case["other_mesh" if other else "mesh"]], device_type="CPU")
    objs = {}
    for spec in case["vars"]:
        x = values[spec["name"]]
        layout = dtensor.Layout(spec["other" if other else "layout"], mesh)
        t = dtensor.relayout(dtensor.copy_to_mesh(x, dtensor.Layout.replicated(mesh, len(spec["shape"]))), layout)
        objs[spec["name"]] = dtensor.DVariable(t, name=spec["name"])
    return objs, tf.train.Checkpoint(**objs)


DTENSOR_KILLS = []  # (case, values, prefix): saves whose merge fails, made last (see tf_write)


def write_dtensor(np, tf, case, prefix, rng):
    values = {spec["name"]: values_for(np, spec, rng) for spec in case["vars"]}
    _, ckpt = dtensor_objects(tf, case, values, False)
    ckpt.write(prefix)
    DTENSOR_KILLS.append((case, values, os.path.join(os.path.dirname(os.path.dirname(prefix)), "killed", "ckpt")))
    return {}, []


def dtensor_killed_save(np, tf, case, values, prefix):
    """The case's objects saved by a fresh tf.train.Checkpoint whose MergeV2Checkpoints fails:
    the save function's merge is pointed at a destination under a regular file, so TF renames
    nothing and deletes nothing: the per-device parts stay as the save wrote them. Returns the
    parts' prefixes in the order TF 2.21's DTensor merge takes them (device by device, a
    device's parts in part order: seen in its renames of data files). The failed function
    leaves the eager context failing every later op, so this runs last in its process."""
    import re
    from tensorflow.python.eager import context
    from tensorflow.python.ops import gen_io_ops
    d = os.path.dirname(prefix)
    os.makedirs(d)
    blocker = os.path.join(os.path.dirname(d), "merge-blocker")
    open(blocker, "w").close()
    merge = gen_io_ops.merge_v2_checkpoints

    def failing_merge(prefixes, destination_prefix, delete_old_dirs=True, name=None):
        return merge(prefixes, os.path.join(blocker, "ckpt"), delete_old_dirs=delete_old_dirs, name=name)
    _, ckpt = dtensor_objects(tf, case, values, False)
    gen_io_ops.merge_v2_checkpoints = failing_merge
    try:
        ckpt.write(prefix)
        context.context().executor.wait()
    except Exception:  # noqa: BLE001 (the planned failure)
        pass
    finally:
        gen_io_ops.merge_v2_checkpoints = merge
    temp = prefix + "_temp"
    parts = []
    for n in os.listdir(temp):
        m = re.fullmatch(r"part-(\d{5})-of-\d{5}_dev-(\d+)-of-\d+\.index", n)
        if m:
            parts.append(((int(m[2]), int(m[1])), os.path.join(temp, n[:-len(".index")])))
    return [p for _, p in sorted(parts)]


def kill_dtensor_saves(np, tf, manifest):
    for case, values, prefix in DTENSOR_KILLS:
        manifest["cases"][case["name"]]["killed"] = {"prefix": prefix,
                                                     "parts": dtensor_killed_save(np, tf, case, values, prefix)}


def restore_dtensor(np, tf, case, prefix, resave):
    """TF restores PREFIX with DTensor onto the case's other layouts (mesh x=4) and re-saves
    there: its own files for those layouts."""
    poison = {s["name"]: poison_for(np, s) for s in case["vars"]}
    _, ckpt = dtensor_objects(tf, case, poison, True)
    ckpt.read(prefix).assert_existing_objects_matched()
    # The values as TF's reader reads TF's re-save (gathering a sharded DTensor through
    # relayout turns -0.0 into 0.0).
    ckpt.write(resave)
    return {n: tf.train.load_variable(resave, n) for n, _ in tf.train.list_variables(resave)
            if n != "_CHECKPOINTABLE_OBJECT_GRAPH"}


class UserShards:
    """A user sharding callback (tf.train.experimental.ShardingCallback): one shard per group
    of object names, in the given order."""

    def __init__(self, tf, groups):
        self.groups = groups
        base = tf.train.experimental.ShardingCallback
        owner = self

        class Callback(base):
            @property
            def description(self):
                return "oracle: one shard per group of objects"

            def __call__(self, shardable_tensors):
                return owner.shards(shardable_tensors)
        self.callback = Callback()

    def shards(self, shardable_tensors):
        out = [{} for _ in self.groups]
        where = {k: i for i, g in enumerate(self.groups) for k in g}
        for t in shardable_tensors:
            obj = t.checkpoint_key.split("/")[0]
            out[where[obj]].setdefault(t.checkpoint_key, {})[t.slice_spec] = t.tensor
        return out


def user_shards_json(groups):
    """The same shards for tfckpt: SHARDS.json (whole tensors)."""
    def key(obj):
        return obj if obj.startswith("_") else f"{obj}/.ATTRIBUTES/VARIABLE_VALUE"
    return {"description": "oracle: one shard per group of objects",
            "shards": [[{"key": key(o), "slice": ""} for o in g] for g in groups]}


def policy_objects(tf, case, values):
    objs = {spec["name"]: tf.Variable(values[spec["name"]], name=spec["name"]) for spec in case["vars"]}
    return objs, tf.train.Checkpoint(**objs)


def write_policies(np, tf, case, prefix, rng):
    """A single-file save (the case's input), then one save per sharding callback under
    ../tfpolicy-<label>/ckpt."""
    values = {spec["name"]: values_for(np, spec, rng) for spec in case["vars"]}
    _, ckpt = policy_objects(tf, case, values)
    ckpt.write(prefix)
    pol = tf.train.experimental
    for label, _, how in case["policies"]:
        if how[0] == "task":
            cb = pol.ShardByTaskPolicy()
        elif how[0] == "max":
            cb = pol.MaxShardSizePolicy(max_shard_size=how[1])
        else:
            cb = UserShards(tf, how[1]).callback
        out = os.path.join(os.path.dirname(os.path.dirname(prefix)), "tfpolicy-" + slug(label), "ckpt")
        ckpt.write(out, options=tf.train.CheckpointOptions(experimental_sharding_callback=cb))
    return {}, []


def restore_policies(np, tf, case, prefix):
    poison = {s["name"]: poison_for(np, s) for s in case["vars"]}
    objs, ckpt = policy_objects(tf, case, poison)
    ckpt.read(prefix).assert_existing_objects_matched()
    return {f"{n}/.ATTRIBUTES/VARIABLE_VALUE": v.numpy() for n, v in objs.items()}


def save_reference(np, tf, prefix, session, path):
    """What TF's reader answers on PREFIX: names, shapes, dtypes, and every value
    (tf.train.load_variable; where TF refuses a sliced float16 or string tensor, the value the
    session held, marked so). bfloat16 is kept as its uint16 bits, strings as bytes."""
    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception as e:  # noqa: BLE001 (a real checkpoint TF cannot open)
        np.savez(path)
        return {"list": [], "dtypes": {}, "refused": {}, "strings": {}, "unreadable": f"{type(e).__name__}: {e}"}
    dtypes = {k: v.name for k, v in reader.get_variable_to_dtype_map().items()}
    listed = [[n, list(s)] for n, s in tf.train.list_variables(prefix)]
    arrays, refused = {}, {}
    for name, _ in listed:
        if name == "_CHECKPOINTABLE_OBJECT_GRAPH":
            continue
        try:
            x = tf.train.load_variable(prefix, name)
        except Exception as e:  # noqa: BLE001 (TF raises ValueError/InvalidArgumentError)
            refused[name] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
            if name not in session:  # (a real checkpoint: no session holds its value)
                continue
            x = session[name]
        x = bits(np, np.asarray(x), dtypes[name])
        if dtypes[name] == "string":
            x = np.array([bytes(b) for b in x.reshape(-1)], dtype=object).reshape(x.shape)
            arrays[name] = ("string", [b.hex() for b in x.reshape(-1)], list(x.shape))
            continue
        arrays[name] = x
    np.savez(path, **{k: v for k, v in arrays.items() if not isinstance(v, tuple)})
    strings = {k: v for k, v in arrays.items() if isinstance(v, tuple)}
    return {"list": listed, "dtypes": dtypes, "refused": refused, "strings": strings}


# Probes of has_tensor beyond the stored keys: a missing name, the header's empty key, a
# name with ":0" (load_variable strips it; has_tensor does not).
PROBES = ["no/such/tensor", ""]


def attempt(fn):
    """{"value": fn()} or {"raises": exception type name, "msg": its first line}."""
    try:
        return {"value": fn()}
    except Exception as e:  # noqa: BLE001
        return {"raises": type(e).__name__, "msg": (str(e).strip().splitlines() or [""])[0][:300]}


def write_state(tf, prefix, i):
    """A `checkpoint` state file beside the case's checkpoint, as tf.train.CheckpointManager
    writes one: relative paths for even cases, absolute for odd ones, an older checkpoint
    (gone) listed first, timestamps."""
    from tensorflow.python.checkpoint import checkpoint_management as cm
    d = os.path.dirname(prefix)
    cm.update_checkpoint_state_internal(d, prefix, all_model_checkpoint_paths=[prefix + "-old", prefix],
                                        save_relative_paths=i % 2 == 0,
                                        all_model_checkpoint_timestamps=[1000.0 + i, 2000.5 + i],
                                        last_preserved_timestamp=500.25 + i)


def state_fields(st):
    if st is None:
        return None
    return {"model_checkpoint_path": st.model_checkpoint_path,
            "all_model_checkpoint_paths": list(st.all_model_checkpoint_paths),
            "all_model_checkpoint_timestamps": list(st.all_model_checkpoint_timestamps),
            "last_preserved_timestamp": st.last_preserved_timestamp}


def dir_answers(tf, d):
    """tf.train's answers on a directory: latest_checkpoint, get_checkpoint_state (its fields),
    checkpoints_iterator with timeout=0 (the paths it yields before it stops), and the keys
    load_checkpoint(DIR) lists."""
    return {"latest_checkpoint": attempt(lambda: tf.train.latest_checkpoint(d)),
            "get_checkpoint_state": attempt(lambda: state_fields(tf.train.get_checkpoint_state(d))),
            "checkpoints_iterator": attempt(lambda: list(tf.train.checkpoints_iterator(d, timeout=0))),
            "load_checkpoint": attempt(lambda: sorted(tf.train.load_checkpoint(d).get_variable_to_shape_map()))}


def dtype_equality(np, tf, dtypes):
    """tfckpt.train.DType of each dtype name against TF's tf.DType and numpy's type, compared
    here, where both are at hand (the venv's python imports the package from
    TFCKPT_PACKAGE_DIR): the failed comparisons, or None when the package cannot be imported
    into this interpreter."""
    try:
        sys.path.insert(0, os.environ["TFCKPT_PACKAGE_DIR"])
        import tfckpt.train as ttrain
    except Exception:  # noqa: BLE001 (another CPython's extension)
        return None
    bad = []
    for name in sorted(set(dtypes.values())):
        ours, theirs = ttrain.DType(name), tf.as_dtype(name)
        pairs = [("tfckpt == tf", ours == theirs), ("tf == tfckpt", theirs == ours), ("tfckpt == name", ours == name),
                 ("tfckpt != tf.int8 as tf != tf.int8", (ours != tf.int8) == (theirs != tf.int8))]
        try:
            nt = theirs.as_numpy_dtype
        except (TypeError, KeyError):  # (variant, resource: no numpy type)
            nt = None
        if nt is not None:
            pairs += [("tfckpt == np type", (ours == nt) == (theirs == nt)),
                      ("tfckpt == np.dtype", (ours == np.dtype(nt)) == (theirs == np.dtype(nt)))]
        bad += [f"{name}: {what}" for what, ok in pairs if not ok]
    return bad


def train_answers(np, tf, prefix, dirs):
    """What tf.train answers on PREFIX beyond save_reference's values: the reader's shape and
    dtype maps, has_tensor of every key and of PROBES, debug_string (hex: its bytes are not
    always UTF-8), get_tensor of a missing key, list_variables; dir_answers of each of
    `dirs`; the dtype comparisons."""
    out = {"list_variables": attempt(lambda: [[n, list(s)] for n, s in tf.train.list_variables(prefix)]),
           "dirs": {d: dir_answers(tf, d) for d in dirs}}
    r = attempt(lambda: tf.train.load_checkpoint(prefix))
    if "raises" in r:
        out["load_checkpoint"] = r
        return out
    reader = r["value"]
    shapes = {k: list(v) for k, v in reader.get_variable_to_shape_map().items()}
    dtypes = {k: v.name for k, v in reader.get_variable_to_dtype_map().items()}
    probes = sorted(shapes) + PROBES + ([sorted(shapes)[0] + ":0"] if shapes else [])
    out.update(shape_map=shapes, dtype_map=dtypes, debug_string=reader.debug_string().hex(),
               has_tensor=[[k, bool(reader.has_tensor(k))] for k in probes],
               missing=attempt(lambda: reader.get_tensor("no/such/tensor")).get("raises"),
               dtype_equality=dtype_equality(np, tf, dtypes))
    return out


# The real checkpoints of ../shared/testdata/tf (TFCKPT_TESTDATA): every V2 index and V1 file,
# with the directories holding a `checkpoint` state file.
REAL_V1 = {"v1_abs_path_state": ["export"], "v1_session_bundle_sharded_name": ["export-00000-of-00001"],
           "v1_traffic_signs_3mb": ["model.ckpt"], "v1_vocal_autoencoder_multiblock": ["model.ckpt"]}


def real_checkpoints(testdata):
    """[(label, prefix, [directories])] of the testdata's checkpoints."""
    out = []
    if not os.path.isdir(testdata):
        return out
    for case in sorted(os.listdir(testdata)):
        top = os.path.join(testdata, case)
        if not os.path.isdir(top):
            continue
        prefixes = [os.path.join(top, n) for n in REAL_V1.get(case, [])]
        for root, _, files in sorted(os.walk(top)):
            prefixes += [os.path.join(root, n[:-len(".index")]) for n in sorted(files) if n.endswith(".index")]
        for prefix in prefixes:
            d = os.path.dirname(prefix)
            dirs = [d] if os.path.exists(os.path.join(d, "checkpoint")) else []
            out.append((os.path.relpath(prefix, testdata), prefix, dirs))
    return out


def load_cases(workdir):
    """The cases of a run: the driver writes them (fixed, regression and random) to
    WORKDIR/cases.json for the TF roles."""
    with open(os.path.join(workdir, "cases.json")) as f:
        return json.load(f)


def tf_write(workdir):
    np, tf = import_tf()
    cases = load_cases(workdir)
    manifest = {"tf_version": tf.__version__, "cases": {}}
    # ParameterServerStrategy's cases last: connecting to its cluster renames the local devices
    # (DTensor's meshes then find no CPU:0); DTensor's killed saves just before them.
    order = [i for i, c in enumerate(cases) if c["kind"] != "ps"] + [None] + \
        [i for i, c in enumerate(cases) if c["kind"] == "ps"]
    for i in order:
        if i is None:
            kill_dtensor_saves(np, tf, manifest)
            continue
        case = cases[i]
        d = os.path.join(workdir, case["name"])
        os.makedirs(os.path.join(d, "in"))
        prefix = os.path.join(d, "in", "ckpt")
        rng = np.random.default_rng(case.get("seed", 1000 + i))
        writer = {"tf1": write_tf1, "keras": write_keras, "sharded": write_sharded, "ps": write_ps,
                  "dtensor": write_dtensor, "policies": write_policies}[case["kind"]]
        session, sliced = writer(np, tf, case, prefix, rng)
        ref = save_reference(np, tf, prefix, session, os.path.join(d, "ref.npz"))
        write_state(tf, prefix, i)
        manifest["cases"][case["name"]] = {"prefix": prefix, "sliced": sliced, **ref,
                                           "train": train_answers(np, tf, prefix, [os.path.dirname(prefix), d])}
    manifest["real"] = {}
    for label, prefix, dirs in real_checkpoints(os.environ.get("TFCKPT_TESTDATA", "")):
        d = os.path.join(workdir, "real", slug(label))
        os.makedirs(d)
        ref = save_reference(np, tf, prefix, {}, os.path.join(d, "ref.npz"))
        manifest["real"][label] = {"prefix": prefix, "dir": d, **ref, "train": train_answers(np, tf, prefix, dirs)}
    with open(os.path.join(workdir, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def same_bits(np, a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == object or b.dtype == object:
        return a.shape == b.shape and [bytes(x) for x in a.reshape(-1)] == [bytes(x) for x in b.reshape(-1)]
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def load_reference(np, workdir, name, manifest):
    return load_ref(np, os.path.join(workdir, name, "ref.npz"), manifest["cases"][name]["strings"])


def load_ref(np, path, strings):
    ref = dict(np.load(path))
    for k, (_, hexes, shape) in strings.items():
        ref[k] = np.array([bytes.fromhex(h) for h in hexes], dtype=object).reshape(shape)
    return ref


def compare_to_reference(np, ref, dtypes, got):
    """Mismatches between the reference and `got` ({key: value}, bfloat16 as TF holds it)."""
    bad = []
    for k, want in ref.items():
        if k not in got:
            bad.append(f"{k}: not restored")
            continue
        x = bits(np, np.asarray(got[k]), dtypes.get(k))
        if not same_bits(np, want, x):
            bad.append(f"{k}: differs")
    return bad


def restore_tf1(np, tf, case, r, prefix, resave, sliced):
    tf1 = tf.compat.v1
    parts = {}
    for s in case["vars"]:
        if r["new_part"] == "same" or s["part"] is None:
            parts[s["name"]] = s["part"]
        elif isinstance(r["new_part"], dict) and "sliced" in r["new_part"]:
            parts[s["name"]] = r["new_part"]["sliced"] if s["name"] in sliced else s["part"]
        elif isinstance(r["new_part"], dict):
            parts[s["name"]] = r["new_part"].get(s["name"], s["part"])
        else:
            parts[s["name"]] = tuple(r["new_part"]) if r["new_part"] else None
    poison = {s["name"]: poison_for(np, s) for s in case["vars"]}
    with tf.Graph().as_default() as g:
        build_tf1(np, tf, case, poison, parts)
        saver = tf1.train.Saver(sharded=case.get("sharded", False))
        with tf1.Session(graph=g, config=session_config(tf, case)) as sess:
            saver.restore(sess, prefix)
            got = full_values_tf1(np, sess, tf)
            if resave:
                saver.save(sess, resave, write_meta_graph=False, write_state=False)
    return got


def restore_keras(np, tf, case, prefix, resave):
    import ml_dtypes
    extra = {"step": tf.Variable(np.int64(0)), "tag": tf.Variable(b""),
             "bf": tf.Variable(np.zeros((3, 2), dtype=ml_dtypes.bfloat16))}
    m, opt, ckpt = keras_checkpoint(np, tf, case, extra)
    m.build((None, 4))
    for v in m.variables:
        v.assign(tf.fill(v.shape, 77.0))
    if case["opt"] == "adam":
        opt.build(m.trainable_variables)
    else:
        opt._create_all_weights(m.trainable_variables)
    ckpt.read(prefix).assert_existing_objects_matched()
    ckpt.write(resave)
    return {n: tf.train.load_variable(resave, n) for n, _ in tf.train.list_variables(resave)
            if n != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def restore_sharded(np, tf, case, r, prefix):
    parts = {}
    for s in case["vars"]:
        p = r["new_part"]
        # TF restores into a ShardedVariable of any shard count; a whole output goes into one
        # of the input's shard count.
        parts[s["name"]] = tuple(p) if p and p != "same" else s["part"]
    poison = {s["name"]: poison_for(np, s) for s in case["vars"]}
    objs, ckpt = sharded_checkpoint(np, tf, case, parts, poison)
    ckpt.read(prefix).assert_existing_objects_matched()
    return {f"{n}/.ATTRIBUTES/VARIABLE_VALUE": tf.concat(sv.variables, 0).numpy() for n, sv in objs.items()}


def tf_restore(workdir):
    np, tf = import_tf()
    cases = load_cases(workdir)
    with open(os.path.join(workdir, "manifest.json")) as f:
        manifest = json.load(f)
    results = {}
    # TF's own MergeV2Checkpoints of the killed DTensor saves' parts (a copy the driver made).
    for case in cases:
        killed = manifest["cases"][case["name"]].get("killed")
        copy = os.path.join(workdir, case["name"], "killed-tf")
        if killed and os.path.isdir(copy):
            parts = [os.path.join(copy, os.path.relpath(p, os.path.dirname(killed["prefix"]))) for p in killed["parts"]]
            try:
                tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=parts, destination_prefix=os.path.join(
                    workdir, case["name"], "merged-tf", "ckpt"), delete_old_dirs=True)
            except Exception as e:  # noqa: BLE001
                results[f"{case['name']}:MergeV2"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
    # ParameterServerStrategy's cases last (see tf_write).
    for case in sorted(cases, key=lambda c: c["kind"] == "ps"):
        entry = manifest["cases"][case["name"]]
        ref = load_reference(np, workdir, case["name"], manifest)
        for r in case["reshards"]:
            out = os.path.join(workdir, case["name"], "out-" + slug(r["label"]), "ckpt")
            key = f"{case['name']}:{r['label']}"
            if not os.path.exists(out + ".index"):
                results[key] = {"error": "no output"}
                continue
            resave = os.path.join(workdir, case["name"], "tf-" + slug(r["label"]), "ckpt")
            os.makedirs(os.path.dirname(resave))
            try:
                if case["kind"] == "tf1":
                    got = restore_tf1(np, tf, case, r, out, resave if r["resave"] else None, entry["sliced"])
                elif case["kind"] == "keras":
                    got = restore_keras(np, tf, case, out, resave)
                elif case["kind"] == "ps":
                    got = restore_ps(np, tf, case, r, out, resave)
                elif case["kind"] == "dtensor":
                    got = restore_dtensor(np, tf, case, out, resave)
                elif case["kind"] == "policies":
                    got = restore_policies(np, tf, case, out)
                    resave = None
                else:
                    got = restore_sharded(np, tf, case, r, out)
                    resave = None
                results[key] = {"mismatches": compare_to_reference(np, ref, entry["dtypes"], got),
                                "resave": resave if case["kind"] in ("tf1", "ps", "dtensor") and r["resave"] else None}
            except Exception as e:  # noqa: BLE001
                results[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    real = os.path.join(workdir, "real_ftrl")
    if os.path.exists(os.path.join(real, "input.txt")):
        results["real_ftrl"] = judge_real_ftrl(np, tf, real)
    with open(os.path.join(workdir, "restored.json"), "w") as f:
        json.dump(results, f)


def judge_real_ftrl(np, tf, d):
    """The real estimator_linear_ftrl_2shards (older TF1: slots keyed NAME/part_0/Ftrl) after
    tfckpt resharded one variable: TF reads every output tensor as the input's, the renamed
    slots under the key TF 2.21 gives a partitioned variable's slot (NAME/Ftrl)."""
    with open(os.path.join(d, "input.txt")) as f:
        src = f.read().strip()
    out = os.path.join(d, "out", "ckpt")
    have = dict(tf.train.list_variables(src))
    bad = []
    for k, shape in tf.train.list_variables(out):
        old = k if k in have else k.replace(REAL_VAR + "/", REAL_VAR + "/part_0/")
        if old not in have:
            bad.append(f"{k}: no such input tensor")
        elif not same_bits(np, tf.train.load_variable(out, k), tf.train.load_variable(src, old)):
            bad.append(f"{k}: differs from the input's {old}")
    return {"mismatches": bad}


def slug(label):
    return "".join(c if c.isalnum() else "_" for c in label)


# --------------------------------------------------------------------------------------------
# The driver (Debian's python3 with numpy and the tfckpt package).


class Checks:
    def __init__(self):
        self.results = []  # (case, check, ok, detail)

    def check(self, case, name, ok, detail="", expected=None):
        """expected: a known difference of this case found by the driver (see ELEVEN_SLICES)."""
        key = (case, name)
        want = EXPECTED.get(key) or expected
        if want is None and case.startswith(("random_", "regression_")) and name.startswith("tfckpt.train.load_variable refuses"):
            want = "tfckpt.train assembles a sliced float16/string tensor that TF's reader refuses (difference 5)"
        if want is None:
            status = "ok  " if ok else "FAIL"
        else:
            status = "XPASS" if ok else "xfail"
        self.results.append((case, name, status))
        line = f"{status} {case}: {name}"
        if status == "xfail":
            line += f"  (expected: {want})"
        if status in ("FAIL", "XPASS") and detail:
            line += "\n     " + detail.replace("\n", "\n     ")
        elif status == "xfail" and detail:
            line += f"\n     seen: {detail.splitlines()[0][:300]}"
        print(line, flush=True)

    def failed(self):
        return [r for r in self.results if r[2] in ("FAIL", "XPASS")]


PLANT = os.environ.get("TFCKPT_ORACLE_PLANT", "")
PLANTS = {
    # A fake failure of the values check for every float16 variable of rank 2 or more: it
    # shrinks to one variable float16 [1, 1], stored whole, rule none, by-task, value seed 0.
    "float16-rank2": (lambda v: v["dtype"] == "float16" and len(v["shape"]) >= 2,
                      {"kind": "tf1", "vars": [V("v0", [1, 1], "float16")], "seed": 0, "reshards": [
                          R("none by-task", ["--partition", "none", "--policy", "by-task", "--allow-any-dtype"],
                            {"sliced": None})]}),
}


def planted(case):
    """The variables of a case that TFCKPT_ORACLE_PLANT makes fail."""
    if not PLANT:
        return []
    return [v["name"] for v in case.get("vars", []) if PLANTS[PLANT][0](v)]


def env_int(name, default):
    return int(os.environ.get(name) or default)


def oracle_python(venv_python):
    """(the python of the oracle's venv, None): $TFCKPT_ORACLE_VENV/bin/python when that is
    set, else `venv_python`; or (None, the exit code) when it is missing: 77 (skipped), but 1
    under CI=true, where the oracle must run -- the one line saying why is printed."""
    if os.environ.get("TFCKPT_ORACLE_VENV"):
        venv_python = os.path.join(os.environ["TFCKPT_ORACLE_VENV"], "bin", "python")
    if venv_python and os.path.exists(venv_python):
        return venv_python, None
    why = f"the oracle's venv python {venv_python!r} is missing (scripts/oracle-venv.sh creates it)"
    if os.environ.get("CI") == "true":
        print(f"FAIL: {why}; under CI=true the oracle must run")
        return None, 1
    print(f"SKIP: {why}")
    return None, 77


def driver(venv_python, tfckpt_bin, package_dir, cases=None, tf_phase=None, checks=None):
    """The oracle over `cases` (default: CASES, the regressions and the random cases); a
    random case that fails is shrunk (shrink_role). With tf_phase (the shrinker's: TF in its
    own process) and checks given, it runs the cases only."""
    sys.path.insert(0, package_dir)
    venv_python, missing = oracle_python(venv_python)
    import numpy as np
    import tfckpt

    if missing is not None:
        return missing
    t0 = time.time()
    shrinking = checks is not None
    checks = checks or Checks()
    n_random, seed = env_int("TFCKPT_ORACLE_CASES", 200), env_int("TFCKPT_ORACLE_SEED", 39)
    if PLANT:
        if PLANT not in PLANTS:
            print(f"FAIL: TFCKPT_ORACLE_PLANT={PLANT!r}: one of {sorted(PLANTS)}")
            return 1
        os.environ["TFCKPT_TESTDATA"] = ""  # the random cases alone
    if cases is None:
        p = subprocess.run([venv_python, os.path.abspath(__file__), "--random-cases", str(n_random), str(seed)],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(f"FAIL: --random-cases (exit {p.returncode}):\n{p.stderr[-4000:]}")
            return 1
        randoms = json.loads(p.stdout)
        cases = (CASES + regression_cases() if not PLANT else []) + randoms
        print(f"{len(randoms)} random cases (TFCKPT_ORACLE_CASES={n_random}, TFCKPT_ORACLE_SEED={seed}, "
              f"hypothesis in the venv), {len(cases) - len(randoms)} fixed and regression cases", flush=True)

    def subprocess_tf_phase(flag, workdir):
        p = subprocess.run([venv_python, os.path.abspath(__file__), flag, workdir], capture_output=True, text=True,
                           timeout=900 + 2 * len(cases), env={**os.environ, "TFCKPT_PACKAGE_DIR": os.path.abspath(package_dir)})
        if p.returncode != 0:
            raise AssertionError(f"{flag} failed (exit {p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-6000:]}")
    tf_phase = tf_phase or subprocess_tf_phase

    def run(*args):
        return subprocess.run([tfckpt_bin, *args], capture_output=True, text=True, timeout=300)

    def err(p):
        return f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[:1500]}"

    with tempfile.TemporaryDirectory(prefix="tf_oracle.") as work:
        with open(os.path.join(work, "cases.json"), "w") as f:
            json.dump(cases, f)
        tf_phase("--tf-write", work)
        t_write = time.time() - t0
        with open(os.path.join(work, "manifest.json")) as f:
            manifest = json.load(f)
        print(f"TensorFlow {manifest['tf_version']} wrote {len(cases)} checkpoints in {t_write:.1f} s", flush=True)

        for case in cases:
            name = case["name"]
            m = manifest["cases"][name]
            prefix, dtypes = m["prefix"], m["dtypes"]
            tf_list = {n: s for n, s in m["list"]}
            ref = load_reference(np, work, name, manifest)

            p = run("inspect", prefix, "--json")
            ok = p.returncode == 0
            checks.check(name, "inspect --json", ok, err(p))
            listing = {}
            if ok:
                doc = json.loads(p.stdout)
                listing = {t["name"]: t for t in doc["tensors"]}
            p = run("validate", prefix)
            checks.check(name, "validate", p.returncode == 0, err(p))
            got = {n: t["shape"] for n, t in listing.items()}
            checks.check(name, "tensors == tf.train.list_variables", got == tf_list,
                         f"tfckpt only: {sorted(set(got) - set(tf_list))}, TF only: {sorted(set(tf_list) - set(got))}, "
                         f"shapes differ: {sorted(k for k in got if k in tf_list and got[k] != tf_list[k])}")
            got_dt = {n: t["dtype"] for n, t in listing.items()}
            want_dt = {n: d for n, d in dtypes.items()}
            checks.check(name, "dtypes == get_variable_to_dtype_map", got_dt == want_dt,
                         str({k: (got_dt.get(k), want_dt.get(k)) for k in set(got_dt) | set(want_dt)
                              if got_dt.get(k) != want_dt.get(k)}))
            tl = sorted([n, list(s)] for n, s in tfckpt.train.list_variables(prefix))
            checks.check(name, "tfckpt.train.list_variables == tf.train.list_variables", tl == sorted(m["list"]),
                         f"{tl} != {sorted(m['list'])}")

            def same_value(x, want, dtype):
                return same_value_np(np, x, want, dtype)

            reader = tfckpt.train.load_checkpoint(prefix)
            got = {k: getattr(v, "name", str(v)) for k, v in reader.get_variable_to_dtype_map().items()}
            shapes = {k: list(v) for k, v in reader.get_variable_to_shape_map().items()}
            checks.check(name, "tfckpt.train.load_checkpoint: dtype and shape maps == TF's",
                         got == dtypes and shapes == tf_list and all(reader.has_tensor(k) for k in tf_list),
                         f"dtypes {got} vs {dtypes}; shapes {shapes} vs {tf_list}")

            # Every value, bit for bit: tfckpt's .npz; the dtypes an .npz cannot hold (int4,
            # uint4: `inspect --tensor --json`; float8: the package's raw bits).
            npz = os.path.join(work, name, "tfckpt.npz")
            p = run("convert", prefix, "-o", npz, "--cast", "bfloat16=float32")
            bad = [] if p.returncode == 0 else [err(p)]
            if p.returncode == 0:
                with np.load(npz, allow_pickle=False) as z, tfckpt.open(prefix) as c:
                    for k, want in ref.items():
                        if k in z.files:
                            x = z[k]
                        elif dtypes[k] in ("int4", "uint4"):
                            q = run("inspect", prefix, "--tensor", k, "--json")
                            x = np.array(json.loads(q.stdout)["tensors"][0]["values"],
                                         dtype=np.int8 if dtypes[k] == "int4" else np.uint8)
                        elif dtypes[k].startswith("float8"):
                            try:
                                x = c.read(k, raw=True)
                            except Exception as e:  # noqa: BLE001 (a failure of this check, not the run)
                                bad.append(f"{k}: {e}")
                                continue
                        else:
                            bad.append(f"{k}: missing from the .npz")
                            continue
                        if not same_value(x, want, dtypes[k]):
                            bad.append(f"{k}: differs ({x.dtype} {x.shape})")
                    bad += [f"{k}: planted failure (TFCKPT_ORACLE_PLANT={PLANT})" for k in planted(case)]
            checks.check(name, "values == tf.train.load_variable (convert .npz)", not bad, "\n".join(bad))

            # The package's tf.train look-alike on every tensor TF's reader reads.
            bad = []
            for k, want in ref.items():
                if k in m["refused"]:
                    continue
                try:
                    x = tfckpt.train.load_variable(prefix, k)
                except Exception as e:  # noqa: BLE001
                    bad.append(f"{k} ({dtypes[k]}): {e}")
                    continue
                if not same_value(x, want, dtypes[k]):
                    bad.append(f"{k}: differs ({np.asarray(x).dtype} {np.shape(x)})")
            checks.check(name, "tfckpt.train.load_variable == tf.train.load_variable", not bad, "\n".join(bad))

            # Where TF's reader refuses (a sliced float16 or string tensor), tfckpt.train should too.
            for k, why in sorted(m["refused"].items()):
                try:
                    tfckpt.train.load_variable(prefix, k)
                    refused, seen = False, f"tfckpt.train.load_variable returned a value; TF: {why}"
                except Exception as e:  # noqa: BLE001
                    refused, seen = True, str(e)
                checks.check(name, f"tfckpt.train.load_variable refuses {k} as TF does", refused, seen)

            # (The tensors TF's reader refuses are checked just above: load_variable is
            # load_checkpoint().get_tensor in both.)
            compare_train(checks, np, tfckpt, name, prefix, os.path.join(work, name), m["train"],
                          {k: v for k, v in ref.items() if k not in m["refused"]}, {}, dtypes)

            # A pass-through reshard (no rule, default policy) of a V2 checkpoint: TF's own bytes.
            if case.get("write_version") != "V1":
                out = os.path.join(work, name, "same", "ckpt")
                p = run("reshard", prefix, "-o", out)
                same = p.returncode == 0 and files_of(prefix) == files_of(out)
                checks.check(name, "pass-through reshard is byte-identical", same,
                             err(p) if p.returncode else describe_difference(prefix, out),
                             expected=ELEVEN_SLICES if max([len(t.get("slices") or []) for t in listing.values()]
                                                           + [0]) > 10 else None)

            for r in case["reshards"]:
                out = os.path.join(work, name, "out-" + slug(r["label"]), "ckpt")
                verb = "convert" if r.get("convert") else "reshard"
                if r.get("convert"):
                    st = os.path.join(work, name, "model.safetensors")
                    p = run("convert", prefix, "-o", st)
                    if p.returncode == 0:
                        p = run("convert", st, "-o", out)
                else:
                    args = list(r["args"])
                    if "file:SHARDS.json" in args:
                        groups = next(how[1] for label, _, how in case["policies"] if label == r["label"])
                        shards = os.path.join(work, name, "shards-" + slug(r["label"]) + ".json")
                        with open(shards, "w") as f:
                            json.dump(user_shards_json(groups), f)
                        args[args.index("file:SHARDS.json")] = "file:" + shards
                    p = run("reshard", prefix, "-o", out, "--json", *args)
                ok = p.returncode == 0
                checks.check(name, f"{verb} {r['label']}", ok, err(p))
                if not ok:
                    continue
                plan = None if r.get("convert") else json.loads(p.stdout)
                p = run("validate", out, "--against", prefix)
                checks.check(name, f"{verb} {r['label']}: validate --against IN", p.returncode == 0, err(p))
                if case["kind"] == "tf1" and "by-task" in " ".join(r["args"] or []):
                    bad = slots_apart(plan, tf_list)
                    checks.check(name, f"reshard {r['label']}: slot partitions in their primary's files", not bad,
                                 "\n".join(bad))
                if case["kind"] == "policies":
                    theirs = os.path.join(work, name, "tfpolicy-" + slug(r["label"]), "ckpt")
                    q = run("validate", theirs, "--against", prefix)
                    checks.check(name, f"TF's {r['label']} save: validate --against the single-file save",
                                 q.returncode == 0, err(q))
                    bad = layout_difference(run, out, theirs)
                    checks.check(name, f"reshard {r['label']}: slices as TF's sharding callback cuts them", not bad,
                                 "\n".join(bad))
                    ours, tfs = files_of(out), files_of(theirs)
                    checks.check(name, f"reshard {r['label']}: byte-identical to TF's save", ours == tfs,
                                 describe_difference(out, theirs))

            if m.get("killed"):
                dtensor_merges(checks, run, err, work, name, m["killed"])

        testdata = os.environ.get("TFCKPT_TESTDATA", "")
        # tfckpt.train on the real checkpoints TF reads (and those it cannot: the same refusal).
        for label, r in sorted(manifest["real"].items()):
            ref = load_ref(np, os.path.join(r["dir"], "ref.npz"), r["strings"])
            compare_train(checks, np, tfckpt, label, r["prefix"], testdata, r["train"], ref, r["refused"], r["dtypes"],
                          list_too=True)
        real_in = os.path.join(testdata, REAL_CASE, "model.ckpt-5000")
        if os.path.exists(real_in + ".index"):
            d = os.path.join(work, "real_ftrl")
            os.makedirs(d)
            out = os.path.join(d, "out", "ckpt")
            label = f"reshard '{REAL_VAR}$=fixed:2'"
            p = run("reshard", real_in, "-o", out, "--partition", f"{REAL_VAR}$=fixed:2")
            checks.check(REAL_CASE, label, p.returncode == 0, err(p))
            if p.returncode == 0:
                with open(os.path.join(d, "input.txt"), "w") as f:
                    f.write(real_in)
                p = run("validate", out, "--against", real_in)
                checks.check(REAL_CASE, f"{label}: validate --against IN", p.returncode == 0, err(p))
        else:
            print(f"SKIP {REAL_CASE} (no testdata)")

        tf_phase("--tf-restore", work)
        with open(os.path.join(work, "restored.json")) as f:
            restored = json.load(f)
        for case in cases:
            for r in case["reshards"]:
                res = restored.get(f"{case['name']}:{r['label']}")
                if res is None or res.get("error") == "no output":
                    continue
                ok = "error" not in res and not res["mismatches"]
                verb = "convert" if r.get("convert") else "reshard"
                checks.check(case["name"], f"{verb} {r['label']}: TF restores it exactly", ok,
                             res.get("error") or "\n".join(res["mismatches"]))
                if res.get("resave"):
                    out = os.path.join(work, case["name"], "out-" + slug(r["label"]), "ckpt")
                    bad = layout_difference(run, out, res["resave"])
                    checks.check(case["name"], f"reshard {r['label']}: slices as TF's Saver cuts them", not bad,
                                 "\n".join(bad))
                    # Where TF1's save has as many data files, the same bytes. (The ps case's
                    # re-save creates the slots outside training, placed elsewhere than TF's
                    # training places them: its files are no reference.)
                    ours, theirs = files_of(out), files_of(res["resave"])
                    if case["kind"] == "dtensor":  # TF's DTensor save of the same layouts
                        checks.check(case["name"], f"reshard {r['label']}: byte-identical to TF's save",
                                     ours == theirs, describe_difference(out, res["resave"]))
                    elif not bad and sorted(ours) == sorted(theirs) and case["kind"] == "tf1":
                        checks.check(case["name"], f"reshard {r['label']}: byte-identical to TF's save", ours == theirs,
                                     describe_difference(out, res["resave"]),
                                     expected=ELEVEN_SLICES if max_slices(run, out) > 10 else None)

        for case in cases:
            killed = manifest["cases"][case["name"]].get("killed")
            if not killed:
                continue
            name = case["name"]
            res = restored.get(f"{name}:MergeV2")
            theirs = os.path.join(work, name, "merged-tf", "ckpt")
            if res or not os.path.exists(theirs + ".index"):
                checks.check(name, "tf.raw_ops.MergeV2Checkpoints of the killed save's parts", False,
                             (res or {}).get("error", "no output"))
                continue
            for label, ours in (("merge --recover", "recovered"), ("merge PARTS", "merged")):
                out = os.path.join(work, name, ours, "ckpt")
                checks.check(name, f"{label} of the killed save: byte-identical to TF's MergeV2Checkpoints",
                             files_of(out) == files_of(theirs) if os.path.exists(out + ".index") else False,
                             describe_difference(out, theirs) if os.path.exists(out + ".index") else "no output")
            p = run("validate", theirs, "--against", m_prefix(manifest, name))
            checks.check(name, "TF's MergeV2Checkpoints of the killed save: validate --against TF's save",
                         p.returncode == 0, err(p))

        if "real_ftrl" in restored:
            bad = restored["real_ftrl"]["mismatches"]
            checks.check(REAL_CASE, f"reshard '{REAL_VAR}$=fixed:2': TF reads it as the input", not bad, "\n".join(bad))

    if shrinking:
        return None
    for form, why in CANNOT_WRITE:
        print(f"n/a  TensorFlow {manifest['tf_version']} cannot write on CPU: {form}: {why}")
    failed = checks.failed()
    xfail = sum(1 for r in checks.results if r[2] == "xfail")
    shrunk = shrink_failures(venv_python, tfckpt_bin, package_dir, cases, failed, n_random, seed)
    print(f"oracle: {len(cases)} cases, {len(checks.results)} checks: {len(checks.results) - len(failed) - xfail} "
          f"passed, {xfail} expected failures, {len(failed)} failed ({time.time() - t0:.0f} s; "
          f"TensorFlow {manifest['tf_version']})")
    if PLANT:
        want = json.dumps(PLANTS[PLANT][1], sort_keys=True)
        ok = bool(shrunk) and json.dumps(shrunk[0], sort_keys=True) == want
        print(f"{'ok  ' if ok else 'FAIL'} TFCKPT_ORACLE_PLANT={PLANT}: the first failing random case shrinks to "
              f"{want}" + ("" if ok else f"; got {json.dumps(shrunk[0], sort_keys=True) if shrunk else None}"))
        return 0 if ok else 1
    return 1 if failed else 0


def failure_kinds(case, names):
    """The failed checks of a case, its rule's label and variable names left out: a smaller
    case fails "the same way" when it fails a check of the same kind."""
    out = set()
    for n in names:
        for r in case["reshards"]:
            n = n.replace(r["label"], "RULE")
        out.add(re.sub(r"\bv\d+\b", "V", n))
    return out


def shrink_failures(venv_python, tfckpt_bin, package_dir, cases, failed, n_random, seed):
    """Shrinks the first failing random cases (TFCKPT_ORACLE_SHRINK of them, default 1, each a
    way of failing of its own; 0: none) in the venv's python (shrink_role); returns the minimal
    cases."""
    by_name = {c["name"]: c for c in cases}
    names = {}
    for case, check, _ in failed:
        if case.startswith("random_"):
            names.setdefault(case, []).append(check)
    todo, kinds = [], []
    for name, checks in names.items():
        k = failure_kinds(by_name[name], checks)
        if k not in kinds and len(todo) < env_int("TFCKPT_ORACLE_SHRINK", 1):
            kinds.append(k)
            todo.append((name, checks))
    out_dir = os.environ.get("TFCKPT_ORACLE_REGRESSIONS") or (
        tempfile.mkdtemp(prefix="tf_oracle_plant.") if PLANT else REGRESSIONS)
    if PLANT and not os.environ.get("TFCKPT_ORACLE_REGRESSIONS"):
        import atexit
        import shutil
        atexit.register(shutil.rmtree, out_dir, True)
        print(f"(TFCKPT_ORACLE_PLANT: {out_dir} is removed at the end; TFCKPT_ORACLE_REGRESSIONS=DIR keeps the file)")
    shrunk = []
    for name, checks in todo:
        job = {"case": bare(by_name[name]), "name": name, "driver_python": sys.executable, "failed": checks, "n": n_random, "seed": seed,
               "tfckpt": os.path.abspath(tfckpt_bin), "package": os.path.abspath(package_dir), "out": out_dir}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(job, f)
        print(f"shrinking {name} (failed: {'; '.join(checks)[:300]}) with hypothesis's shrinker", flush=True)
        p = subprocess.run([venv_python, os.path.abspath(__file__), "--shrink", f.name], text=True, timeout=900,
                           stderr=subprocess.PIPE, env={**os.environ, "TFCKPT_PACKAGE_DIR": os.path.abspath(package_dir)})
        os.unlink(f.name)
        result = f.name + ".out"
        if p.returncode == 0 and os.path.exists(result):
            with open(result) as g:
                shrunk.append(json.load(g))
            os.unlink(result)
        else:
            print(f"FAIL shrinking {name}: exit {p.returncode}\n{p.stderr[-4000:]}")
    return shrunk


def check_one_role(path):
    """Debian's python (the package is built for its numpy): the driver over the one case of
    PATH for shrink_role, whose TensorFlow writes and restores it: each TF phase is a request
    (a JSON line on stdout), done when "ok" comes back on stdin; the last line is the failed
    checks."""
    import io
    with open(path) as f:
        job = json.load(f)
    proto, sys.stdout = sys.stdout, io.StringIO()

    def tf_phase(flag, workdir):
        proto.write(json.dumps([flag, workdir]) + "\n")
        proto.flush()
        reply = sys.stdin.readline().strip()
        if reply != "ok":
            raise AssertionError(f"{flag}: {reply}")
    checks = Checks()
    driver(job["venv_python"], job["tfckpt"], job["package"], cases=[job["case"]], tf_phase=tf_phase, checks=checks)
    proto.write(json.dumps({"failed": [n for _, n, _ in checks.failed()]}) + "\n")
    proto.flush()
    return 0


def run_one(job, case):
    """One case through the oracle for shrink_role: the driver's checks in Debian's python
    (check_one_role), TensorFlow's phases here. Returns the failed checks."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"case": {**case, "name": "random_shrink"}, "venv_python": sys.executable, "tfckpt": job["tfckpt"],
                   "package": job["package"]}, f)
    try:
        p = subprocess.Popen([job["driver_python"], os.path.abspath(__file__), "--check-one", f.name], text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        result = None
        for line in p.stdout:
            msg = json.loads(line)
            if isinstance(msg, dict):
                result = msg["failed"]
                continue
            try:
                (tf_write if msg[0] == "--tf-write" else tf_restore)(msg[1])
                reply = "ok"
            except Exception as e:  # noqa: BLE001 (the driver reports it)
                reply = f"{type(e).__name__}: {e}".replace("\n", " ")
            p.stdin.write(reply + "\n")
            p.stdin.flush()
        p.wait()
        return result if result is not None else [f"run: exit {p.returncode}"]
    finally:
        os.unlink(f.name)


def regression_json(found, case):
    """A regression file: one line for `found`, one a variable, one a reshard."""
    head = {k: v for k, v in case.items() if k not in ("vars", "reshards")}
    lines = [f'{{"found": {json.dumps(found)},', f' "case": {json.dumps(head)[:-1]},', '  "vars": [']
    lines += [f"   {json.dumps(v)}," for v in case["vars"]]
    lines[-1] = lines[-1][:-1]
    lines.append('  ], "reshards": [')
    lines += [f"   {json.dumps(r)}," for r in case["reshards"]]
    lines[-1] = lines[-1][:-1]
    lines.append("  ]}}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == {"found": found, "case": case}
    return text


def shrink_role(path):
    """The venv's python, TensorFlow imported once: hypothesis replays the random cases of
    (n, seed) up to the failing one (the same draws as --random-cases) and shrinks it; each
    smaller case it tries runs through the whole oracle (TF writes it here, the driver's checks
    in Debian's python: run_one; TF restores it here) and counts as failing when it fails a check of a kind the
    original failed. The minimal failing case is written to OUT/SEED_INDEX.json (a regression
    case from then on) and, for the driver, to PATH.out. Stops trying new cases after
    TFCKPT_ORACLE_SHRINK_SECONDS (default 240)."""
    with open(path) as f:
        job = json.load(f)
    key = lambda c: json.dumps(c, sort_keys=True)  # noqa: E731 (hypothesis draws tuples, JSON lists)
    target, kinds = key(job["case"]), failure_kinds(job["case"], job["failed"])
    limit, t0 = env_int("TFCKPT_ORACLE_SHRINK_SECONDS", 240), time.time()
    os.environ["TFCKPT_TESTDATA"] = ""
    tried = {}

    def fails(case):
        k = key(case)
        if k not in tried:
            if time.time() - t0 > limit:
                return False  # out of time: no smaller case counts
            why = run_one(job, json.loads(k))
            tried[k] = bool(failure_kinds(case, why) & kinds)
            n = len(case["vars"])
            print(f"  try {len(tried)}: {n} variable{'s' * (n > 1)} "
                  f"{', '.join(v['dtype'] + str(v['shape']) + ('/' + tfckpt_rule(v['part']) if v['part'] else '') for v in case['vars'])}"
                  f"; {case['reshards'][0]['label']}: {'fails' if tried[k] else 'passes'}", flush=True)
        return tried[k]

    class Found(Exception):
        pass
    last = [None]

    def body(case):
        case = json.loads(key(case))
        if last[0] is None and key(case) != target:
            return  # the cases before the failing one: passed in the batch
        if last[0] is None or fails(case):  # the failing one itself: known to fail
            last[0] = case
            raise Found()
    try:
        hypothesis_run(job["n"], job["seed"], body, shrink=True)
    except Found:
        pass
    if last[0] is None:
        print(f"FAIL: hypothesis did not draw {job['name']} again from seed {job['seed']}")
        return 1
    minimal = last[0]
    os.makedirs(job["out"], exist_ok=True)
    out = os.path.join(job["out"], f"{job['name'][len('random_'):]}.json")
    import hypothesis
    found = {"case": job["name"], "cases": job["n"], "seed": job["seed"], "failed": job["failed"],
             "hypothesis": hypothesis.__version__, "tries": len(tried), "seconds": round(time.time() - t0)}
    if PLANT:
        found["planted"] = f"TFCKPT_ORACLE_PLANT={PLANT}"
    with open(out, "w") as f:
        f.write(regression_json(found, minimal))
    with open(path + ".out", "w") as f:
        json.dump(minimal, f)
    print(f"shrunk {job['name']} in {len(tried)} tries ({time.time() - t0:.0f} s) to {key(minimal)}")
    print(f"written to {out} (a regression case: the oracle runs it from now on)", flush=True)
    return 0


def max_slices(run, prefix):
    """The most slices a tensor of the checkpoint has (inspect --json)."""
    p = run("inspect", prefix, "--json")
    if p.returncode != 0:
        return 0
    return max([len(t.get("slices") or []) for t in json.loads(p.stdout)["tensors"]] + [0])


def m_prefix(manifest, name):
    return manifest["cases"][name]["prefix"]


def dtensor_merges(checks, run, err, work, name, killed):
    """The per-device parts of a DTensor save killed before its merge: each part is a
    checkpoint; `merge --recover` and `merge PARTS` (in TF's merge order) finish the save. A
    copy goes to the TF phase, which merges it with tf.raw_ops.MergeV2Checkpoints (compared
    after that phase)."""
    import shutil
    parts = killed["parts"]
    checks.check(name, "killed save: per-device parts left (P_temp/part-*_dev-D-of-N)", len(parts) >= 2,
                 f"parts: {parts}")
    # Each part is a bundle of its own, but not a whole checkpoint (a device's slices, the
    # object graph alone): validate would rightly report gaps and missing keys.
    bad = []
    for part in parts:
        p = run("inspect", part)
        if p.returncode != 0:
            bad.append(f"inspect {os.path.basename(part)}: {err(p)}")
    checks.check(name, f"killed save: inspect each of the {len(parts)} per-device parts", not bad, "\n".join(bad))
    shutil.copytree(os.path.dirname(killed["prefix"]), os.path.join(work, name, "killed-tf"))
    p = run("merge", "--recover", killed["prefix"], "-o", os.path.join(work, name, "recovered", "ckpt"))
    checks.check(name, "merge --recover of the killed save", p.returncode == 0, err(p))
    p = run("merge", *parts, "-o", os.path.join(work, name, "merged", "ckpt"))
    checks.check(name, "merge PARTS of the killed save (TF's merge order)", p.returncode == 0, err(p))


def same_value_np(np, x, want, dtype):
    """tfckpt's value x (bfloat16 widened exactly to float32 where ml_dtypes is missing,
    strings as bytes) has the reference's bits."""
    x = np.asarray(x)
    if dtype == "bfloat16":
        if x.dtype.name == "bfloat16":
            x = x.view(np.uint16).astype(np.uint32) << 16
        b = x.view(np.uint32)
        return x.dtype in (np.float32, np.uint32) and not (b & 0xFFFF).any() and \
            np.array_equal((b >> 16).astype(np.uint16), want)
    if dtype == "string":
        return x.dtype.kind in "SO" and x.shape == want.shape and \
            [bytes(b) for b in x.reshape(-1)] == [bytes(b) for b in want.reshape(-1)]
    return same_bits(np, want, x)


def same_answer(ours, theirs):
    """Two attempt() results agree: equal values, or exceptions of the same type name."""
    if "raises" in ours or "raises" in theirs:
        return ours.get("raises") == theirs.get("raises")
    return ours["value"] == theirs["value"]


def brief(r):
    return f"raises {r['raises']}: {r['msg']}" if "raises" in r else repr(r["value"])[:600]


def compare_train(checks, np, tfckpt, label, prefix, base, ans, ref, refused, dtypes, list_too=False):
    """tfckpt.train against what tf.train answered on PREFIX (train_answers): load_checkpoint
    and the reader's get_variable_to_shape_map, get_variable_to_dtype_map, has_tensor,
    get_tensor (every value; a refusal where TF refuses), debug_string; the DType comparisons
    made in the venv; list_variables when `list_too` (the generated cases check it above);
    latest_checkpoint, get_checkpoint_state, checkpoints_iterator(timeout=0) and
    load_checkpoint on each directory TF was asked about (named relative to `base`)."""
    t = tfckpt.train
    r = attempt(lambda: t.load_checkpoint(prefix))
    if "load_checkpoint" in ans:
        checks.check(label, "tfckpt.train.load_checkpoint refuses it as TF's does", same_answer(r, ans["load_checkpoint"]),
                     f"tfckpt: {brief(r)}; TF: {brief(ans['load_checkpoint'])}")
    elif "raises" in r:
        checks.check(label, "tfckpt.train.load_checkpoint opens it as TF's does", False, brief(r))
    else:
        reader = r["value"]
        shapes = {k: list(v) for k, v in reader.get_variable_to_shape_map().items()}
        checks.check(label, "tfckpt.train: get_variable_to_shape_map == TF's", shapes == ans["shape_map"],
                     str({k: (shapes.get(k), ans["shape_map"].get(k)) for k in set(shapes) | set(ans["shape_map"])
                          if shapes.get(k) != ans["shape_map"].get(k)}))
        got = {k: v.name for k, v in reader.get_variable_to_dtype_map().items()}
        equal = all(v == ans["dtype_map"].get(k) for k, v in reader.get_variable_to_dtype_map().items())
        checks.check(label, "tfckpt.train: get_variable_to_dtype_map == TF's", got == ans["dtype_map"] and equal,
                     str({k: (got.get(k), ans["dtype_map"].get(k)) for k in set(got) | set(ans["dtype_map"])
                          if got.get(k) != ans["dtype_map"].get(k)}))
        has = [[k, bool(reader.has_tensor(k))] for k, _ in ans["has_tensor"]]
        checks.check(label, "tfckpt.train: has_tensor == TF's (every key and probes)", has == ans["has_tensor"],
                     str([(k, h, w) for (k, h), (_, w) in zip(has, ans["has_tensor"]) if h != w]))
        bad = []
        for k in sorted(ans["shape_map"]):
            g = attempt(lambda k=k: reader.get_tensor(k))
            if k in refused:
                if "raises" not in g:
                    bad.append(f"{k}: TF refuses ({refused[k][:200]}); tfckpt.train returns a value")
            elif k in ref:
                if "raises" in g and "numpy cannot represent" in g["msg"] and dtypes.get(k) in ("int4", "uint4"):
                    continue  # (difference 5: the load_variable check above expects it)
                if "raises" in g:
                    bad.append(f"{k} ({dtypes.get(k)}): {brief(g)}")
                elif not same_value_np(np, g["value"], ref[k], dtypes.get(k)):
                    bad.append(f"{k}: differs ({np.asarray(g['value']).dtype} {np.shape(g['value'])})")
        checks.check(label, "tfckpt.train: get_tensor == TF's (every value; refused where TF refuses)", not bad,
                     "\n".join(bad))
        m = attempt(lambda: reader.get_tensor("no/such/tensor"))
        checks.check(label, "tfckpt.train: get_tensor of a missing key raises as TF's", m.get("raises") == ans["missing"],
                     f"tfckpt: {brief(m)}; TF raises {ans['missing']}")
        ds = attempt(lambda: reader.debug_string())
        want = bytes.fromhex(ans["debug_string"])
        got = ds.get("value")
        if not os.path.exists(prefix + ".index") and isinstance(got, bytes):
            # A V1 file: TF lists its tensors in its hash map's order; the lines as a set.
            got, want = sorted(got.splitlines()), sorted(want.splitlines())
        checks.check(label, "tfckpt.train: debug_string == TF's", got == want,
                     f"tfckpt: {brief(ds)}\nTF:     {want!r}"[:1500])
        if ans["dtype_equality"] is None:
            print(f"SKIP {label}: tfckpt.train.DType against tf.DType (the package does not import into the venv)")
        else:
            checks.check(label, "tfckpt.train.DType == tf.DType, numpy's type, as TF's compare",
                         not ans["dtype_equality"], "\n".join(ans["dtype_equality"]))
    if list_too:
        lv = attempt(lambda: [[n, list(s)] for n, s in t.list_variables(prefix)])
        checks.check(label, "tfckpt.train.list_variables == TF's", same_answer(lv, ans["list_variables"]),
                     f"tfckpt: {brief(lv)}; TF: {brief(ans['list_variables'])}")
    for d, theirs in sorted(ans["dirs"].items()):
        where = os.path.relpath(d, base)
        where = "a directory without a state file" if where == "." else where
        ours = {"latest_checkpoint": attempt(lambda: t.latest_checkpoint(d)),
                "get_checkpoint_state": attempt(lambda: state_fields(t.get_checkpoint_state(d))),
                "checkpoints_iterator": attempt(lambda: list(t.checkpoints_iterator(d, timeout=0))),
                "load_checkpoint": attempt(lambda: sorted(t.load_checkpoint(d).get_variable_to_shape_map()))}
        for api, got in ours.items():
            what = "(DIR, timeout=0)" if api == "checkpoints_iterator" else "(DIR)"
            what += ": keys" if api == "load_checkpoint" else ""
            checks.check(label, f"tfckpt.train.{api}{what} == TF's on {where}", same_answer(got, theirs[api]),
                         f"tfckpt: {brief(got)}\nTF:     {brief(theirs[api])}")


def files_of(prefix):
    d, base = os.path.dirname(prefix), os.path.basename(prefix)
    out = {}
    for n in sorted(os.listdir(d)):
        if n.startswith(base + ".index") or n.startswith(base + ".data-"):
            with open(os.path.join(d, n), "rb") as f:
                out[n[len(base):]] = f.read()
    return out


def describe_difference(a, b):
    fa, fb = files_of(a), files_of(b)
    if set(fa) != set(fb):
        return f"files {sorted(fa)} != {sorted(fb)}"
    diff = [f"{n}: {len(fa[n])} vs {len(fb[n])} bytes" for n in fa if fa[n] != fb[n]]
    return "differ: " + ", ".join(diff)


def slots_apart(plan, names):
    """TF1 slot pieces whose data file is not their primary's piece's (TF saves each slot
    partition beside its primary: slot_creator colocates it)."""
    pieces = {t["name"]: [(tuple(map(str, p.get("shape", []))), p.get("spec"), p.get("file")) for p in t["new"]]
              for t in plan["tensors"]}
    bad = []
    for name, ps in pieces.items():
        primary = name.rsplit("/", 1)[0]
        if "/" not in name or primary not in pieces or len(ps) < 2:
            continue
        want = {spec: f for _, spec, f in pieces[primary]}
        apart = [spec for _, spec, f in ps if spec in want and want[spec] != f]
        if apart:
            bad.append(f"{name}: files {[f for _, _, f in ps]}, primary {primary}: {[f for _, _, f in pieces[primary]]}")
    return bad


def layout_difference(run, ours, theirs):
    """Keys whose stored slices differ between tfckpt's output and TF's own save of the same
    variables under the new partitioner."""
    got = {}
    for prefix in (ours, theirs):
        p = run("inspect", prefix, "--json")
        if p.returncode != 0:
            return [f"inspect {prefix}: exit {p.returncode}"]
        got[prefix] = {t["name"]: sorted(pc["spec"] for pc in t.get("slices", [])) for t in json.loads(p.stdout)["tensors"]}
    a, b = got[ours], got[theirs]
    return [f"{k}: tfckpt {a.get(k)} TF {b.get(k)}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--random-cases":
        json.dump(random_cases(int(sys.argv[2]), int(sys.argv[3])), sys.stdout)
    elif len(sys.argv) == 3 and sys.argv[1] == "--check-one":
        sys.exit(check_one_role(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "--shrink":
        code = shrink_role(sys.argv[2])
        sys.stdout.flush()
        os._exit(code)
    elif len(sys.argv) == 3 and sys.argv[1] in ("--tf-write", "--tf-restore"):
        (tf_write if sys.argv[1] == "--tf-write" else tf_restore)(sys.argv[2])
        # The in-process gRPC servers of the ParameterServerStrategy cases never stop.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    else:
        sys.exit(driver(*sys.argv[1:4]))
