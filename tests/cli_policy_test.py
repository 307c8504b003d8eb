"""CLI tests of issue 27: the user's own shards (--policy file:SHARDS.json) checked by every rule
of TensorFlow's validate_shards with TF's wording, TF's AllInOnePolicy example, the --dry-run
--json round trip, edited scale-out plans; and TensorFlow's own behaviour on real checkpoints
(max-shard-size per task, dtypes GetSliceValue cannot assemble, partitioner edge cases,
DTensor's _dev-D-of-N parts, by-device). Expectations are computed from TF's sources, named
in each test. Usage: cli_policy_test.py TFCKPT MAKE_EXAMPLE MAKE_FIXTURE"""

from cli_common import *

AFTER = "After executing the checkpoint sharding callback, "


def dry_json(*args):
    return json.loads(run("reshard", *args, "--dry-run", "--json", code=0).stdout)


def shards_of(plan):
    """The SHARDS.json a --dry-run --json plan describes: file N's pieces are shard N."""
    shards = [[] for _ in plan["files"]]
    for t in plan["tensors"]:
        for n in t["new"]:
            shards[n["file"]].append({"key": t["name"], "slice": n["spec"]})
    return shards


def write_shards(d, name, shards, description):
    path = os.path.join(d, name + ".json")
    with open(path, "w") as f:
        json.dump({"description": description, "shards": shards}, f)
    return path


def refused(base, out, shards_path, *needles):
    return one_error_line(run("reshard", base, "-o", out, "--policy", "file:" + shards_path, code=2), *needles)


@test(needs_data=True)
def all_in_one_policy_example():
    # sharding_util.ShardingCallback's docstring example: AllInOnePolicy, description "Place
    # all tensors in a single shard.", returns one shard holding every key and slice. On a
    # one-task (one data file) checkpoint that is one shard.
    with tempfile.TemporaryDirectory() as d:
        src = data("savedmodel_keras_tfx_slots/variables/variables")
        plan = dry_json(src, "-o", os.path.join(d, "x"))
        every = [e for shard in shards_of(plan) for e in shard]
        assert len(every) == 28, len(every)
        path = write_shards(d, "allinone", [every], "Place all tensors in a single shard.")
        out = os.path.join(d, "one")
        j = json.loads(run("reshard", src, "-o", out, "--policy", "file:" + path, "--json", code=0).stdout)
        assert j["verified"] and j["num_files"] == 1 and j["policy"] == "file:" + path
        validate_json(out, "--against", src)


def validate_json(*args):
    return json.loads(run("validate", *args, "--json", code=0).stdout)


@test()
def each_validate_shards_rule_through_the_file():
    # sharding_util.validate_shards, rule by rule (the cases of sharding_util_test.py), one
    # error line each with TF's wording: description, key, slice, original and new values.
    with tempfile.TemporaryDirectory() as d:
        base = fixture(d, "base", "family", "base")  # 2 data files: model/part's slices in both
        out = os.path.join(d, "out")
        shards = shards_of(dry_json(base, "-o", out))
        part = "model/part/.ATTRIBUTES/VARIABLE_VALUE"
        step = "model/step/.ATTRIBUTES/VARIABLE_VALUE"
        first = shards[0][0]

        def variant(name, description, change):
            s = json.loads(json.dumps(shards))
            change(s)
            return write_shards(d, name, s, description)

        refused(base, out, variant("dup", "duplicate tensor callback", lambda s: s[1].append(dict(first))),
                AFTER + "multiple tensors with the same checkpoint key and slice spec were found: "
                "callback_description: duplicate tensor callback; checkpoint_key: " + first["key"])
        refused(base, out, variant("added", "added tensor callback",
                                   lambda s: s[0].append({"key": "ADDED_TENSOR_ABC123", "slice": ""})),
                AFTER + "a tensor not originally in the object graph was found in the checkpoint shards: "
                "callback_description: added tensor callback; checkpoint_key: ADDED_TENSOR_ABC123; slice_spec: ")

        def set_field(key, field, value):
            def change(s):
                for shard in s:
                    for e in shard:
                        if e["key"] == key:
                            e[field] = value
                            return
            return change

        refused(base, out, variant("shape", "shape change callback", set_field(step, "shape", [1])),
                AFTER + "a tensor was found with an altered shape: callback_description: shape change callback; "
                "checkpoint_key: " + step + "; slice_spec: ; original tensor_shape: (); new tensor_shape: (1,)")
        refused(base, out, variant("dtype", "dtype change callback", set_field(step, "dtype", "int32")),
                "original tensor_dtype: <dtype: 'int64'>; new tensor_dtype: <dtype: 'int32'>")
        refused(base, out, variant("task", "task change callback",
                                   set_field(step, "device", "/job:worker/task:0/device:CPU:0")),
                "a tensor was found with an altered task: callback_description: task change callback; "
                "checkpoint_key: " + step, "original tensor_task: 1; new tensor_task: 0")
        refused(base, out, variant("tasks", "different tasks callback", lambda s: s.__setitem__(0, s[0] + s.pop(1))),
                AFTER + "tensors with different tasks were found in the same shard: callback_description: "
                "different tasks callback; tensor #1:")
        refused(base, out, variant("removed", "tensor removal callback", lambda s: s.__setitem__(1, [])),
                AFTER + "tensors in the object graph were not found in the checkpoint shards: "
                "callback_description: tensor removal callback; tensor: checkpoint_key: ", part)
        # New slices must tile the tensor; a bad file is a usage error naming it.
        refused(base, out, variant("overlap", "o", lambda s: s[0].append({"key": part, "slice": "0,2:0,3"})),
                "overlapping slices of one tensor were found")
        bad = os.path.join(d, "bad.json")
        open(bad, "w").write('{"shards": [[{"key": "x", "slcie": ""}]]}')
        refused(base, out, bad, bad, "slcie")
        assert not [n for n in os.listdir(d) if n.startswith("out")], os.listdir(d)


@test()
def dry_run_json_round_trips_through_a_shards_file():
    # The plan --dry-run --json prints, turned into SHARDS.json (file N = shard N), gives the
    # same plan back, and writes the same bytes as the policy it came from. A shard may cut a
    # tensor anew (MaxShardSizePolicy's slices): two column halves of a row slice.
    with tempfile.TemporaryDirectory() as d:
        base = fixture(d, "base", "family", "base")
        args = ["--partition", "part=fixed:3"]
        plan = dry_json(base, "-o", os.path.join(d, "a"), *args)
        path = write_shards(d, "same", shards_of(plan), "round trip")
        back = dry_json(base, "-o", os.path.join(d, "a"), *args, "--policy", "file:" + path)
        # (The same but for "task", which only policy by-task gives.)
        untasked = [{**t, "new": [{k: v for k, v in n.items() if k != "task"} for n in t["new"]]}
                    for t in plan["tensors"]]
        assert back["tensors"] == untasked and back["files"] == plan["files"], (back, plan)
        run("reshard", base, "-o", os.path.join(d, "a"), *args, code=0)
        run("reshard", base, "-o", os.path.join(d, "b"), *args, "--policy", "file:" + path, code=0)
        for suffix in (".index", ".data-00000-of-00002", ".data-00001-of-00002"):
            assert open(os.path.join(d, "a" + suffix), "rb").read() == open(os.path.join(d, "b" + suffix), "rb").read()
        shards = shards_of(plan)
        piece = [e for e in shards[0] if e["slice"] == "0,4:0,3"][0]
        shards[0].remove(piece)
        shards[0].append({"key": piece["key"], "slice": "10 3 0,4:0,2"})  # TF's spec form
        shards[0].append({"key": piece["key"], "slice": "0,4:2,1"})
        cut = write_shards(d, "cut", shards, "cut anew")
        j = json.loads(run("reshard", base, "-o", os.path.join(d, "c"), *args, "--policy", "file:" + cut, "--json",
                           code=0).stdout)
        assert j["verified"]
        t = [t for t in j["tensors"] if t["name"] == piece["key"]][0]
        assert [n["spec"] for n in t["new"]] == ["0,4:0,2", "0,4:2,1", "4,3:0,3", "7,3:0,3"], t["new"]


@test()
def dry_run_json_gives_each_piece_its_task_under_by_task():
    # Policy by-task places pieces as TF's round-robin device setter places variable
    # partitions: a piece stored as it is keeps its data file's task (shard modulo the tasks),
    # the pieces of a re-sliced tensor go to the tasks in turn. "task" is what a sharding
    # callback sees as the piece's device (Python's reshard(policy=callback) takes it from
    # here); it differs from "file" where by-task fills an empty file.
    with tempfile.TemporaryDirectory() as d:
        base = fixture(d, "base", "family", "base")
        out = os.path.join(d, "a")

        def pieces(plan):
            return {t["name"].split("/")[-3] if "/" in t["name"] else t["name"]:
                    [(n["spec"], n["file"], n.get("task")) for n in t["new"]] for t in plan["tensors"]}

        two = pieces(dry_json(base, "-o", out, "--partition", "part=fixed:3"))
        assert two == {"_CHECKPOINTABLE_OBJECT_GRAPH": [("", 0, 0)],
                       "part": [("0,4:0,3", 0, 0), ("4,3:0,3", 1, 1), ("7,3:0,3", 0, 0)],
                       "step": [("", 1, 1)], "words": [("", 1, 1)]}, two
        four = pieces(dry_json(base, "-o", out, "--partition", "part=fixed:3", "--policy", "by-task:4"))
        assert four["part"] == [("0,4:0,3", 0, 0), ("4,3:0,3", 3, 1), ("7,3:0,3", 2, 2)], four
        assert four["step"] == [("", 1, 1)] and four["words"] == [("", 1, 1)], four
        other = dry_json(base, "-o", out, "--partition", "part=fixed:3", "--policy", "shards:2")
        assert all("task" not in n for t in other["tensors"] for n in t["new"]), other


@test()
def edited_scale_out_plans_are_checked():
    # An edited --plan gets validate_shards' checks for dtype, shape and task (each entry
    # records the input data file its bytes come from), with TF's wording; exit 2. So does
    # an output.server_side that is not a --server-side word.
    with tempfile.TemporaryDirectory() as d:
        base = fixture(d, "base", "family", "base")
        plan_path = os.path.join(d, "plan.json")
        run("reshard", base, "-o", os.path.join(d, "so"), "--partition", "fixed:3", "--plan", plan_path, code=0)
        plan = json.load(open(plan_path))
        step = [e for t in plan["tasks"] for e in t["entries"] if e["name"].startswith("model/step")][0]
        assert step["task"] == 1 and step["dtype"] == "int64", step
        for field, value, needle in (("dtype", "int32", "original tensor_dtype: <dtype: 'int64'>; new tensor_dtype: "
                                                        "<dtype: 'int32'>"),
                                     ("shape", [2], "original tensor_shape: (); new tensor_shape: (2,)"),
                                     ("task", 0, "original tensor_task: 1; new tensor_task: 0")):
            edited = json.loads(json.dumps(plan))
            for t in edited["tasks"]:
                for e in t["entries"]:
                    if e["name"] == step["name"]:
                        e[field] = value
            path = os.path.join(d, field + ".json")
            json.dump(edited, open(path, "w"))
            one_error_line(run("reshard", "--execute", path, "--task", "0", code=2), "callback_description: reshard plan "
                           + path, "checkpoint_key: " + step["name"], needle)
        # A dropped entry: the tensor is not found.
        edited = json.loads(json.dumps(plan))
        edited["tasks"][0]["entries"].pop()
        path = os.path.join(d, "dropped.json")
        json.dump(edited, open(path, "w"))
        one_error_line(run("reshard", "--execute", path, "--task", "1", code=2),
                       "tensors in the object graph were not found in the checkpoint shards")
        # output.server_side: one of --server-side's words (a plan without it means auto).
        assert plan["output"]["server_side"] == "auto", plan["output"]
        edited = json.loads(json.dumps(plan))
        edited["output"]["server_side"] = "sometimes"
        path = os.path.join(d, "server_side.json")
        json.dump(edited, open(path, "w"))
        one_error_line(run("reshard", "--execute", path, "--task", "0", code=2),
                       path + ': output.server_side "sometimes": not auto, never or always')
        run("reshard", "--execute", plan_path, "--task", "0", code=0)


@test(needs_data=True)
def max_shard_size_runs_once_per_task_on_real_checkpoints():
    # MultiDeviceSaver._get_shards_by_task calls MaxShardSizePolicy once per task and takes
    # the shards of task 0 first: with 1 GiB every task is one shard, so each of these
    # two-file checkpoints stays two files, every tensor in its own file.
    with tempfile.TemporaryDirectory() as d:
        for case in ("estimator_dnn_adam_2shards/model.ckpt-1000", "estimator_linear_ftrl_2shards/model.ckpt-5000",
                     "keras_tf2_adam_2shards/model.ckpt", "t2t_transformer_2shards/model.ckpt-1"):
            j = dry_json(data(case), "-o", os.path.join(d, "o"), "--policy", "max-shard-size:1G")
            assert j["num_files"] == 2, (case, j["num_files"])
            for t in j["tensors"]:
                assert [n["file"] for n in t["new"]] == [o["shard"] for o in t["old"]], (case, t)


@test()
def dtypes_tf_cannot_assemble_are_refused_unless_allowed():
    # BundleReader::GetSliceValue's HANDLE_COPY list has no float16 ("Dtype half not
    # supported."), no uint16/32/64, no string.
    with tempfile.TemporaryDirectory() as d:
        kinds = fixture(d, "kinds", "kinds")
        names = {t["name"]: t["dtype"] for t in json.loads(run("inspect", kinds, "--json", code=0).stdout)["tensors"]}
        half = [n for n, dt in names.items() if dt == "float16" and n][0]
        out = os.path.join(d, "o")
        one_error_line(run("reshard", kinds, "-o", out, "--partition", "^%s$=fixed:2" % half, code=2),
                       '"%s": a float16 tensor cut into 2 slices' % half, '("Dtype half not supported.")',
                       "--allow-any-dtype")
        assert not os.path.exists(out + ".index")
        run("reshard", kinds, "-o", out, "--partition", "^%s$=fixed:2" % half, "--allow-any-dtype", code=0)


@test()
def partitioner_edge_cases_as_tf():
    with tempfile.TemporaryDirectory() as d:
        base = fixture(d, "base", "family", "base")
        # fixed_size_partitioner(3, axis=-1): partitions_list[-1], the last axis (3 columns).
        j = dry_json(base, "-o", os.path.join(d, "o"), "--partition", "part=fixed:3@-1")
        t = [t for t in j["tensors"] if t["name"].startswith("model/part")][0]
        assert [n["spec"] for n in t["new"]] == ["0,10:0,1", "0,10:1,1", "0,10:2,1"], t["new"]
        # min_max_variable_partitioner's ValueError for an axis beyond the rank, exit 2.
        one_error_line(run("reshard", base, "-o", os.path.join(d, "o"), "--partition", "part=min-size:4,2@2",
                           code=2), "Can not partition variable along axis 2 when shape is only (10, 3)")
        # A scalar keeps its note (_true_getter never partitions a scalar).
        j = dry_json(base, "-o", os.path.join(d, "o"), "--partition", "step=fixed:2")
        assert [t["note"] for t in j["tensors"] if t["name"].startswith("model/step")] == ["scalar: left whole"]


@test(needs_data=True)
def tf1_slots_follow_their_partitioned_primary():
    # estimator_linear_ftrl_2shards keys a one-partition variable PRIMARY and its Ftrl slots
    # PRIMARY/part_0/Ftrl, PRIMARY/part_0/Ftrl_1. Cut into 2 partitions, TF1 keys each slot
    # full_name + "/" + real_slot_name (slot_creator._create_slot_var), sliced like the
    # primary: PRIMARY/Ftrl, PRIMARY/Ftrl_1. [1, 1] variables (min(2, 1) = 1 partition) keep
    # theirs. Back to one partition the slots are whole, still PRIMARY/SLOT.
    with tempfile.TemporaryDirectory() as d:
        src = data("estimator_linear_ftrl_2shards/model.ckpt-5000")
        out = os.path.join(d, "two")
        run("reshard", src, "-o", out, "--partition", "weights$=fixed:2", code=0)
        t = {t["name"]: t for t in json.loads(run("inspect", out, "--json", code=0).stdout)["tensors"]}
        country = "linear/linear_model/Country_indicator/weights"
        for slot in ("Ftrl", "Ftrl_1"):
            assert [s["spec"] for s in t[country + "/" + slot]["slices"]] == \
                [s["spec"] for s in t[country]["slices"]] == ["0,21:0,1", "21,21:0,1"], t[country + "/" + slot]
            assert country + "/part_0/" + slot not in t
        assert "linear/linear_model/Age/weights/part_0/Ftrl" in t and "linear/linear_model/Age/weights/Ftrl" not in t
        assert len(t) == 40
        one = os.path.join(d, "one")
        run("reshard", out, "-o", one, "--partition", "weights$=none", code=0)
        t = {t["name"]: t for t in json.loads(run("inspect", one, "--json", code=0).stdout)["tensors"]}
        assert "slices" not in t[country + "/Ftrl"] and "slices" not in t[country], t[country + "/Ftrl"]


@test()
def recover_finds_older_dtensor_parts():
    # save_restore_util.cc DeviceSuffix: "_dev-%0*d-of-%d" (the device padded to the count's
    # width). A 3-task save renamed into DTensor's older form: _dev-0-of-3 .. _dev-2-of-3.
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "ckpt")
        subprocess.run([MAKE_FIXTURE, "distributed", prefix], check=True)
        temp = prefix + "_temp"
        for i in range(3):
            for name in os.listdir(temp):
                if name.startswith("part-%05d-of-00003" % i):
                    os.rename(os.path.join(temp, name),
                              prefix + "_dev-%d-of-3" % i + name[len("part-00000-of-00003"):])
        os.rmdir(temp)
        p = run("merge", "--recover", prefix, code=0)
        assert "found 3 parts" in p.stdout, p.stdout
        validate_json(prefix, "--against", prefix + "_single")


@test()
def by_device_places_pieces_as_dtensor_saves_them():
    # BuildSliceSpecDeviceMap saves each slice on the lowest device holding it; devices are
    # row-major over the mesh (Mesh::device_location): on x=2,y=2, rows 5.. live on devices
    # 2 and 3 and are saved by 2. Data files: devices 0 and 2, in device order.
    with tempfile.TemporaryDirectory() as d:
        base = fixture(d, "base", "family", "base")
        out = os.path.join(d, "bd")
        j = json.loads(run("reshard", base, "-o", out, "--partition", "part=layout:x,unsharded@x=2,y=2",
                           "--policy", "by-device", "--json", code=0).stdout)
        assert j["num_files"] == 2 and j["verified"]
        t = [t for t in j["tensors"] if t["name"].startswith("model/part")][0]
        assert [(n["spec"], n["file"]) for n in t["new"]] == [("0,5:-", 0), ("5,5:-", 1)], t["new"]
        assert all(n["file"] == 0 for t in j["tensors"] if not t["name"].startswith("model/part") for n in t["new"])


if __name__ == "__main__":
    sys.exit(main("cli_policy"))
