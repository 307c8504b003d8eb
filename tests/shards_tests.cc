// The user's own sharding: ValidateShards against each rule of TensorFlow's
// validate_shards (tensorflow/python/checkpoint/sharding/sharding_util.py), the cases of
// TF's sharding_util_test.py (test_validate_shards_*) with the messages TF's f-strings
// produce; SHARDS.json files; the policies built on them.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "test_util.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/open.h"
#include "reshard/reshard.h"

using tfckpt::Region;
using tfckpt::Shape;
using tfckpt::ShardableTensor;
using tfckpt::ShardEntry;
using tfckpt::testing::TempDir;

namespace {

constexpr int32_t kFloat = 1, kInt32 = 3;
const std::string v0 = "v0/.ATTRIBUTES/VARIABLE_VALUE", v1 = "v1/.ATTRIBUTES/VARIABLE_VALUE";

// A whole tensor as MultiDeviceSaver hands it to a callback (slice_spec "").
ShardableTensor Whole(const std::string& key, const Shape& shape, int64_t task, int32_t dtype = kFloat) {
  ShardableTensor t;
  t.checkpoint_key = key;
  t.shape = t.full_shape = shape;
  t.dtype = dtype;
  t.task = task;
  t.region = Region::Full(shape);
  t.extents = tfckpt::ExtentsOf(t.region, shape);
  return t;
}

// The error ValidateShards gives, or "" when it accepts the shards.
std::string Refusal(const std::vector<ShardableTensor>& tensors, const std::vector<tfckpt::Shard>& shards,
                    const std::string& description) {
  auto r = tfckpt::ValidateShards(tensors, shards, description);
  if (r.ok()) return "";
  CHECK(absl::IsInvalidArgument(r.status()));
  return std::string(r.status().message());
}

const std::string kAfter = "After executing the checkpoint sharding callback, ";

}  // namespace

TEST_CASE("ValidateShards: TF's test_validate_shards_correct (ShardByTaskPolicy's shards)") {
  const std::vector<ShardableTensor> t = {Whole(v0, {}, 0), Whole(v1, {}, 0)};
  auto r = tfckpt::ValidateShards(t, {{{v0, ""}, {v1, ""}}}, "Split tensors into shards based on their device spec task.");
  REQUIRE(r.ok());
  REQUIRE(r->size() == 1);
  CHECK((*r)[0].size() == 2);
  CHECK((*r)[0][1].tensor == 1);
}

TEST_CASE("ValidateShards: each rule refused with TF's wording") {
  // The messages are sharding_util.validate_shards' f-strings, their lines joined by "; ".
  SUBCASE("a key and slice twice (test_validate_shards_duplicate_tensor)") {
    CHECK(Refusal({Whole(v0, {}, 0), Whole(v1, {}, 1)}, {{{v0, ""}}, {{v0, ""}}}, "duplicate tensor callback") ==
          kAfter + "multiple tensors with the same checkpoint key and slice spec were found: callback_description: "
                   "duplicate tensor callback; checkpoint_key: " + v0 + "; slice_spec: ");
  }
  SUBCASE("a tensor added (test_validate_shards_added_tensor)") {
    CHECK(Refusal({Whole(v0, {}, 0)}, {{{"ADDED_TENSOR_ABC123", ""}}}, "added tensor callback") ==
          kAfter + "a tensor not originally in the object graph was found in the checkpoint shards: "
                   "callback_description: added tensor callback; checkpoint_key: ADDED_TENSOR_ABC123; slice_spec: ");
  }
  SUBCASE("an altered shape (test_validate_shards_shape_change: [[0.0, 1.0]] transposed)") {
    ShardEntry e{v0, ""};
    e.shape = Shape{2, 1};
    CHECK(Refusal({Whole(v0, {1, 2}, 0)}, {{e}}, "shape change callback") ==
          kAfter + "a tensor was found with an altered shape: callback_description: shape change callback; "
                   "checkpoint_key: " + v0 + "; slice_spec: ; original tensor_shape: (1, 2); new tensor_shape: (2, 1)");
  }
  SUBCASE("an altered dtype (test_validate_shards_dtype_change: cast to int32)") {
    ShardEntry e{v0, ""};
    e.dtype = kInt32;
    CHECK(Refusal({Whole(v0, {}, 0)}, {{e}}, "dtype change callback") ==
          kAfter + "a tensor was found with an altered dtype: callback_description: dtype change callback; "
                   "checkpoint_key: " + v0 + "; slice_spec: ; original tensor_dtype: <dtype: 'float32'>; "
                   "new tensor_dtype: <dtype: 'int32'>");
  }
  SUBCASE("an altered task (test_validate_shards_task_change: v0 moved to task 1)") {
    ShardEntry e{v0, ""};
    e.device = "/job:worker/task:1/cpu:0";
    CHECK(Refusal({Whole(v0, {}, 0), Whole(v1, {}, 1)}, {{e}, {{v1, ""}}}, "task change callback") ==
          kAfter + "a tensor was found with an altered task: callback_description: task change callback; "
                   "checkpoint_key: " + v0 + "; slice_spec: ; original tensor_task: 0; new tensor_task: 1");
    // A device without a task is None, which differs from 0 as well.
    e.device = "/cpu:0";
    CHECK(Refusal({Whole(v0, {}, 0)}, {{e}}, "d").find("original tensor_task: 0; new tensor_task: None") !=
          std::string::npos);
  }
  SUBCASE("tasks mixed in one shard (test_validate_shards_different_tasks)") {
    CHECK(Refusal({Whole(v0, {}, 0), Whole(v1, {}, 1)}, {{{v0, ""}, {v1, ""}}}, "different tasks callback") ==
          kAfter + "tensors with different tasks were found in the same shard: callback_description: different "
                   "tasks callback; tensor #1: checkpoint_key: " + v0 + "; slice_spec: ; task: 0; tensor #2: "
                   "checkpoint_key: " + v1 + "; slice_spec: ; task: 1");
    // Plans whose files mix input files (by-task:1) skip this rule.
    CHECK(tfckpt::ValidateShards({Whole(v0, {}, 0), Whole(v1, {}, 1)}, {{{v0, ""}, {v1, ""}}}, "d",
                                 {.one_task_per_shard = false})
              .ok());
  }
  SUBCASE("a tensor removed (test_validate_shards_tensor_removal: no shards)") {
    CHECK(Refusal({Whole(v0, {}, 0)}, {}, "tensor removal callback") ==
          kAfter + "tensors in the object graph were not found in the checkpoint shards: callback_description: "
                   "tensor removal callback; tensor: checkpoint_key: " + v0 + "; slice_spec: ");
  }
}

TEST_CASE("ValidateShards: a callback may cut a tensor anew (MaxShardSizePolicy's slices); they must tile it") {
  // [3, 2] int32 cut as TF's MaxShardSizePolicy cuts it at 12 bytes (sharding_policies_test):
  // two [3, 1] columns, given in TF's spec form and as stored extents.
  const std::vector<ShardableTensor> t = {Whole("w", {3, 2}, 0, kInt32)};
  auto r = tfckpt::ValidateShards(t, {{{"w", "3 2 0,3:0,1"}}, {{"w", "0,3:1,1"}}}, "Split tensors into shards with a max shard size.");
  REQUIRE(r.ok());
  CHECK((*r)[0][0].region == Region{{0, 0}, {3, 1}});
  CHECK((*r)[1][0].region == Region{{0, 1}, {3, 1}});
  CHECK_FALSE((*r)[1][0].extents.has_value());  // a new slice: explicit extents, as SaveSliceInfo.spec
  // The same slice twice, however spelled, is a duplicate.
  CHECK(Refusal(t, {{{"w", "0,3:0,1"}}, {{"w", "3 2 0,3:0,1"}}}, "c").find("multiple tensors with the same") !=
        std::string::npos);
  CHECK(Refusal(t, {{{"w", "0,3:-"}}, {{"w", "0,2:0,1"}}}, "c") ==
        kAfter + "overlapping slices of one tensor were found: callback_description: c; checkpoint_key: w; "
                 "slice_spec: 0,3:-; slice_spec: 0,2:0,1");
  CHECK(Refusal(t, {{{"w", "0,3:0,1"}}}, "c") ==
        kAfter + "tensors in the object graph were not found in the checkpoint shards: callback_description: c; "
                 "tensor: checkpoint_key: w; slice_spec: ");
  CHECK(Refusal(t, {{{"w", "4 2 0,3:0,1"}}}, "c").find("names no slice of its tensor") != std::string::npos);
  CHECK(Refusal(t, {{{"w", "0,4:0,1"}}}, "c").find("lies outside dimension 0") != std::string::npos);
  // A slice stating its shape must state the slice's.
  ShardEntry e{"w", "0,3:0,1"};
  e.shape = Shape{3, 2};
  CHECK(Refusal(t, {{e, {"w", "0,3:1,1"}}}, "c").find("original tensor_shape: (3, 1); new tensor_shape: (3, 2)") !=
        std::string::npos);
}

TEST_CASE("TaskOfDevice: DeviceSpec.from_string(...).task") {
  CHECK(tfckpt::TaskOfDevice("/job:worker/replica:0/task:3/device:CPU:0") == 3);
  CHECK(tfckpt::TaskOfDevice("/job:worker/task:1") == 1);
  CHECK_FALSE(tfckpt::TaskOfDevice("/cpu:0").has_value());
  CHECK(Whole("x", {}, 2).device() == "/job:worker/task:2");
}

namespace {

// Two data files: "a" [4] float32 and the object graph in file 0, "b" [2, 2] float32 in
// file 1, "h" [4] float16 in file 1.
std::string TwoTasks(const TempDir& dir) {
  const std::string prefix = dir / "two";
  tfckpt::BundleWriterOptions o;
  o.num_shards = 2;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
  REQUIRE(w.ok());
  REQUIRE((*w)->Add("a", kFloat, {4}, std::string(16, '\1'), 0).ok());
  REQUIRE((*w)->Add("b", kFloat, {2, 2}, std::string(16, '\2'), 1).ok());
  REQUIRE((*w)->Add("h", 19, {4}, std::string(8, '\3'), 1).ok());
  REQUIRE((*w)->Finish().ok());
  return prefix;
}

}  // namespace

TEST_CASE("ShardableTensors: TF's fields; a callback is called per task, its shards validated, one file each") {
  TempDir dir;
  auto c = tfckpt::OpenCheckpoint(TwoTasks(dir));
  REQUIRE(c.ok());
  tfckpt::ReshardOptions o;
  o.rules.push_back(*tfckpt::ParsePartitionRule("b=fixed:2"));
  auto st = tfckpt::ShardableTensors(**c, o);
  REQUIRE(st.ok());
  REQUIRE(st->size() == 4);  // a, b in 2 pieces, h
  CHECK((*st)[1].checkpoint_key == "b");
  CHECK((*st)[1].slice_spec == "2 2 0,1:0,2");  // SaveSliceInfo.spec
  CHECK((*st)[1].shape == Shape{1, 2});
  CHECK((*st)[1].task == 0);  // new pieces go to the tasks in turn, as by-task places them
  CHECK((*st)[2].task == 1);
  CHECK((*st)[3].device() == "/job:worker/task:1");
  // TF's AllInOnePolicy, called once per task: one shard per task.
  std::vector<size_t> calls;
  o.policy.kind = tfckpt::Policy::Kind::kCallback;
  o.policy.callback.description = "Place all tensors in a single shard.";
  o.policy.callback.shards = [&](const std::vector<ShardableTensor>& ts) -> absl::StatusOr<std::vector<tfckpt::Shard>> {
    calls.push_back(ts.size());
    tfckpt::Shard s;
    for (const auto& t : ts) s.push_back({t.checkpoint_key, t.slice_spec});
    return std::vector<tfckpt::Shard>{s};
  };
  auto plan = tfckpt::PlanReshard(**c, o);
  REQUIRE(plan.ok());
  CHECK(calls == std::vector<size_t>{2, 2});
  CHECK(plan->num_files == 2);
  // Once with everything: TF's rules refuse tasks mixed in one shard.
  o.policy.callback.per_task = false;
  auto mixed = tfckpt::PlanReshard(**c, o);
  CHECK(std::string(mixed.status().message()).find("tensors with different tasks were found in the same shard") !=
        std::string::npos);
}

TEST_CASE("ShardsFromFile: SHARDS.json, and what it refuses") {
  TempDir dir;
  const std::string good = dir / "good.json";
  tfckpt::testing::WriteFile(good, R"({"description": "mine", "shards": [[{"key": "a", "slice": "", "shape": [4],
      "dtype": "float32", "device": "/job:worker/task:0"}], []]})");
  auto cb = tfckpt::ShardsFromFile(good);
  REQUIRE(cb.ok());
  CHECK(cb->description == "mine");
  CHECK_FALSE(cb->per_task);
  auto shards = cb->shards({});
  REQUIRE(shards.ok());
  REQUIRE(shards->size() == 2);
  CHECK((*shards)[0][0].shape == Shape{4});
  CHECK((*shards)[0][0].dtype == kFloat);
  const std::string bare = dir / "bare.json";
  tfckpt::testing::WriteFile(bare, R"([[{"key": "a"}]])");
  auto b = tfckpt::ShardsFromFile(bare);
  REQUIRE(b.ok());
  CHECK(b->description == "shards of " + bare);
  for (const char* bad : {"{", R"({"shards": {}})", R"({"shard": []})", R"([[{"key": "a", "slcie": ""}]])",
                          R"([[{"slice": ""}]])", R"([[{"key": "a", "dtype": "float33"}]])", R"([{"key": "a"}])"}) {
    CAPTURE(bad);
    tfckpt::testing::WriteFile(bare, bad);
    CHECK(absl::IsInvalidArgument(tfckpt::ShardsFromFile(bare).status()));
  }
  CHECK(absl::IsNotFound(tfckpt::ShardsFromFile(dir / "missing.json").status()));
}
