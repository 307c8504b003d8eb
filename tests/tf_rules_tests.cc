// TensorFlow's own behaviour where tfckpt differed (issue 27, B1-B7), each case computed
// from TF's source logic, named in a comment: partitioner edge cases, slices TF cannot
// read back, MaxShardSizePolicy per task, DTensor's per-device parts and saving devices,
// ParallelVariable's save_counter, ReplicatedVariable's names, ShardedVariable's axis 0.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/tensor_encoding.h"
#include "test_util.h"
#include "format/bundle/bundle_writer.h"
#include "merge/combine.h"
#include "tfckpt/dtype.h"
#include "copy/copy.h"
#include "merge/merge.h"
#include "tfckpt/open.h"
#include "reshard/partition.h"
#include "reshard/reshard.h"
#include "verify/verify.h"

using tfckpt::Region;
using tfckpt::Shape;
using tfckpt::testing::TempDir;

namespace {

constexpr int32_t kFloat = 1;

tfckpt::PartitionRule Rule(const std::string& text) {
  auto r = tfckpt::ParsePartitionRule(text);
  REQUIRE(r.ok());
  return *r;
}

std::string Refused(const tfckpt::PartitionRule& rule, const Shape& shape) {
  std::string note;
  auto r = tfckpt::ApplyRule(rule, shape, 4, &note);
  REQUIRE_FALSE(r.ok());
  CHECK(absl::IsInvalidArgument(r.status()));
  return std::string(r.status().message());
}

// Writes `tensors` (name, dtype, shape, file) with zero bytes (strings: one byte each)
// over `files` data files; returns the prefix.
struct T {
  std::string name;
  int32_t dtype;
  Shape shape;
  int32_t file = 0;
};
std::string Write(const TempDir& dir, const std::string& name, const std::vector<T>& tensors, int files = 1) {
  const std::string prefix = dir / name;
  tfckpt::BundleWriterOptions o;
  o.num_shards = files;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
  REQUIRE(w.ok());
  for (const T& t : tensors) {
    const int64_t n = *tfckpt::NumElements(t.shape);
    std::string payload;
    if (t.dtype == 7) {
      std::vector<std::string> s(static_cast<size_t>(n), "x");
      std::vector<std::string_view> v(s.begin(), s.end());
      tfckpt::EncodeStrings(v, &payload);
    } else {
      payload.assign(static_cast<size_t>(n * tfckpt::LookupDType(t.dtype)->element_size), '\0');
    }
    REQUIRE((*w)->Add(t.name, t.dtype, t.shape, payload, t.file).ok());
  }
  REQUIRE((*w)->Finish().ok());
  return prefix;
}

absl::StatusOr<tfckpt::ReshardPlan> Plan(const tfckpt::Checkpoint& c, const std::vector<std::string>& rules,
                                         const std::string& policy = "by-task", bool allow_any_dtype = false) {
  tfckpt::ReshardOptions o;
  for (const auto& r : rules) o.rules.push_back(Rule(r));
  o.policy = *tfckpt::ParsePolicy(policy);
  o.allow_any_dtype = allow_any_dtype;
  return tfckpt::PlanReshard(c, o);
}

const tfckpt::TensorPlan& Of(const tfckpt::ReshardPlan& plan, const std::string& name) {
  auto it = std::find_if(plan.tensors.begin(), plan.tensors.end(),
                         [&](const tfckpt::TensorPlan& tp) { return tp.source->name == name; });
  REQUIRE(it != plan.tensors.end());
  return *it;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// B1: BundleReader::GetSliceValue (tensor_bundle.cc) assembles slices only of the 16
// dtypes of its HANDLE_COPY list (TF 2.21: int4 and uint4 too, which tf_oracle checks
// against TF itself); others fail with "Dtype <name> not supported.".

TEST_CASE("B1: the dtypes TF assembles from slices; cutting others is refused unless allowed") {
  const std::vector<int32_t> tf = {1, 2, 3, 4, 5, 6, 8, 18, 9, 10, 13, 12, 11, 14, 29, 30};  // HANDLE_COPY's list
  for (int32_t d = 0; d <= 33; ++d) {
    CAPTURE(d);
    CHECK(tfckpt::TfAssemblesSlices(d) == (std::find(tf.begin(), tf.end(), d) != tf.end()));
  }
  TempDir dir;
  auto c = tfckpt::OpenCheckpoint(Write(dir, "d", {{"h", 19, {4}}, {"u16", 17, {4}}, {"u32", 22, {4}},
                                                   {"u64", 23, {4}}, {"s", 7, {4}}, {"f", 1, {4}}}));
  REQUIRE(c.ok());
  // DataTypeString names: half for float16; the Python name otherwise.
  const std::map<std::string, std::string> cpp = {
      {"h", "float16 tensor cut into 2 slices"}, {"u16", "Dtype uint16 not supported."},
      {"u32", "Dtype uint32 not supported."}, {"u64", "Dtype uint64 not supported."}, {"s", "Dtype string not supported."}};
  for (const auto& [name, want] : cpp) {
    CAPTURE(name);
    auto p = Plan(**c, {"^" + name + "$=fixed:2"});
    REQUIRE(absl::IsInvalidArgument(p.status()));
    const std::string m(p.status().message());
    CHECK(m.find("\"" + name + "\": a ") == 0);
    CHECK(m.find(want) != std::string::npos);
    CHECK(m.find("--allow-any-dtype") != std::string::npos);
    CHECK(Plan(**c, {"^" + name + "$=fixed:2"}, "by-task", /*allow_any_dtype=*/true).ok());
    CHECK(Plan(**c, {"^" + name + "$=none"}).ok());  // whole: nothing to assemble
  }
  CHECK(std::string(Plan(**c, {"^h$=fixed:2"}).status().message()).find("(\"Dtype half not supported.\")") !=
        std::string::npos);
  CHECK(Plan(**c, {"^f$=fixed:2"}).ok());
  // max-shard-size cuts too: the same rule.
  CHECK(absl::IsInvalidArgument(Plan(**c, {}, "max-shard-size:4").status()));
}

// ---------------------------------------------------------------------------------------
// B2: MaxShardSizePolicy as MultiDeviceSaver runs it.

TEST_CASE("B2: max-shard-size per task, the object graph last, uncut slices with explicit extents") {
  TempDir dir;
  const std::string prefix = dir / "m";
  {
    tfckpt::BundleWriterOptions o;
    o.num_shards = 2;
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
    REQUIRE(w.ok());
    std::string graph;
    tfckpt::EncodeStrings({std::string_view("graph bytes")}, &graph);
    REQUIRE((*w)->Add("_CHECKPOINTABLE_OBJECT_GRAPH", 7, {}, graph, 0).ok());
    REQUIRE((*w)->Add("a", kFloat, {4}, std::string(16, '\0'), 0).ok());
    REQUIRE((*w)->Add("c", kFloat, {2}, std::string(8, '\0'), 0).ok());
    REQUIRE((*w)->Add("b", kFloat, {4}, std::string(16, '\0'), 1).ok());
    // A partitioned tensor stored with DTensor's "-" extents.
    const tfckpt::SliceExtents e0{{0, 0}, {2, -1}}, e1{{2, 0}, {2, -1}};
    REQUIRE((*w)->AddSlice("p", kFloat, {4, 2}, Region{{0, 0}, {2, 2}}, std::string(16, '\0'), 1, &e0).ok());
    REQUIRE((*w)->AddSlice("p", kFloat, {4, 2}, Region{{2, 0}, {2, 2}}, std::string(16, '\0'), 1, &e1).ok());
    REQUIRE((*w)->Finish().ok());
  }
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  // MaxShardSizePartitioner.get_shards(16) on task 0 = [a (16 B), c (8 B), graph (0 B)]:
  // a fills shard 0 (remaining 0); c does not fit, _get_next_partition finds no slice
  // (slices_per_shard 0 -> part_size 0): new shard, c; the graph (size 0) joins it. Task 1
  // = [b, p's two slices]: b (16 B) fills a shard; p's slices (16 B each) one shard each.
  // Shards of task 0, then task 1 (_get_shards_by_task).
  auto plan = Plan(**c, {}, "max-shard-size:16");
  REQUIRE(plan.ok());
  CHECK(plan->num_files == 5);
  auto file = [&](const std::string& name) { return Of(*plan, name).pieces.at(0).file; };
  CHECK(file("a") == 0);
  CHECK(file("c") == 1);
  CHECK(file("_CHECKPOINTABLE_OBJECT_GRAPH") == 1);
  CHECK(file("b") == 2);
  const auto& p = Of(*plan, "p");
  REQUIRE(p.pieces.size() == 2);
  CHECK(p.pieces[0].file == 3);
  CHECK(p.pieces[1].file == 4);
  // TF rewrites each slice's spec as SaveSliceInfo(...).spec: explicit extents.
  CHECK(tfckpt::StoredSpec(*p.source, p.pieces[0]) == "0,2:0,2");
  CHECK(tfckpt::StoredSpec(*p.source, p.pieces[1]) == "2,2:0,2");
  // 1 GiB: one shard per task, every tensor in its own task's file.
  auto big = Plan(**c, {}, "max-shard-size:1G");
  REQUIRE(big.ok());
  CHECK(big->num_files == 2);
  for (const auto& tp : big->tensors) {
    for (size_t i = 0; i < tp.pieces.size(); ++i) CHECK(tp.pieces[i].file == tp.source->slices[i].data.shard);
  }
}

// ---------------------------------------------------------------------------------------
// B3: the partitioners' edge cases (partitioned_variables.py, variable_scope.py).

TEST_CASE("B3: partitioner edge cases as TensorFlow computes (or refuses) them") {
  std::string note;
  // fixed_size_partitioner(5) on [44, 0, 4, 11]: min(5, 44) = 5 parts of
  // _iter_slices (44 // 5 = 8, the first 44 % 5 = 4 one row more).
  auto empty = tfckpt::ApplyRule(Rule("fixed:5"), {44, 0, 4, 11}, 4, &note);
  REQUIRE(empty.ok());
  REQUIRE(empty->has_value());
  std::vector<int64_t> rows;
  for (const Region& r : **empty) rows.push_back(r.shape[0]);
  CHECK(rows == std::vector<int64_t>{9, 9, 9, 9, 8});
  // ... which TF's SaveV2 cannot store: TensorSlice::Parse wants a positive length.
  TempDir dir;
  auto c = tfckpt::OpenCheckpoint(Write(dir, "z", {{"z", kFloat, {44, 0, 4, 11}}, {"w", kFloat, {10, 3}}}));
  REQUIRE(c.ok());
  auto p = Plan(**c, {"^z$=fixed:5"});
  REQUIRE(absl::IsInvalidArgument(p.status()));
  CHECK(std::string(p.status().message()) ==
        "\"z\": the slice 0,9:0,0:0,4:0,11 of [44, 0, 4, 11] is empty, which TensorFlow cannot store or restore "
        "(TensorSlice::Parse: \"Expected non-negative start and positive length but got start = 0, length = 0: "
        "string = 0,9:0,0:0,4:0,11\")");
  // min_max_variable_partitioner: max(1, min(dim, max, ceil(0 / min_slice))) = 1: whole.
  CHECK(Plan(**c, {"^z$=min-size:4,8"}).ok());
  // fixed:3@-1: partitions_list[-1], the last axis.
  auto last = tfckpt::ApplyRule(Rule("fixed:3@-1"), {10, 3}, 4, &note);
  REQUIRE(last.ok());
  REQUIRE((*last)->size() == 3);
  CHECK((**last)[2] == Region{{0, 2}, {10, 1}});
  CHECK(Rule("min-size:4,2@-2").axis == -2);
  // Zero partitions: _get_partitioned_variable raises.
  CHECK(Refused(Rule("fixed:2@1"), {4, 0}) ==
        "TensorFlow raises \"Partitioner returned zero partitions for some axes: [1, 0]\" (axis 1 of [4, 0] is empty)");
  // variable_axis_size_partitioner divides by zero: 0 / 0, then x / 0.0.
  CHECK(Refused(Rule("max-size:16"), {0, 3}).find("ZeroDivisionError (division by zero)") != std::string::npos);
  CHECK(Refused(Rule("max-size:16"), {3, 0}).find("ZeroDivisionError (float division by zero)") != std::string::npos);
  // An axis outside the tensor: min_max_variable_partitioner's ValueError, IndexError else.
  CHECK(Refused(Rule("min-size:4@2"), {3, 4}) ==
        "TensorFlow's min_max_variable_partitioner raises: \"Can not partition variable along axis 2 when shape is "
        "only (3, 4)\"");
  CHECK(Refused(Rule("fixed:2@-3"), {3, 4}).find("IndexError") != std::string::npos);
  CHECK(std::string(Plan(**c, {"^w$=fixed:2@2"}).status().message()).find("\"w\": axis 2 is outside rank 2") == 0);
  // A scalar is never partitioned (_true_getter's is_scalar): left whole with a note.
  auto scalar = tfckpt::ApplyRule(Rule("fixed:2"), {}, 4, &note);
  REQUIRE(scalar.ok());
  CHECK_FALSE(scalar->has_value());
  CHECK(note == "scalar: left whole");
  // fixed:0 is TF's zero partitions too.
  CHECK(tfckpt::ParsePartitionRule("fixed:0").status().message().find("zero partitions") != std::string::npos);
}

// ---------------------------------------------------------------------------------------
// B4: TF1's slots of partitioned variables (slot_creator._create_slot_var,
// variable_scope._get_partitioned_variable, saveable_object_util.op_list_to_dict).

TEST_CASE("B4: a TF1 primary cut into slices takes its slots along, keyed PRIMARY/SLOT") {
  TempDir dir;
  // As estimator_linear_ftrl_2shards stores a one-partition variable: the primary under its
  // full name, its slots under the partition's name.
  auto c = tfckpt::OpenCheckpoint(Write(dir, "lin", {{"lin/w", kFloat, {4, 1}},
                                                     {"lin/w/part_0/Ftrl", kFloat, {4, 1}},
                                                     {"lin/w/part_0/Ftrl_1", kFloat, {4, 1}},
                                                     {"lin/w/part_0/not_a_slot", kFloat, {4, 1}},
                                                     {"lin/b", kFloat, {1}},
                                                     {"lin/b/part_0/Ftrl", kFloat, {1}}}));
  REQUIRE(c.ok());
  // Two partitions: each part's slot gets SaveSliceInfo(full_name + "/Ftrl", the part's
  // offset and shape): keys lin/w/Ftrl, lin/w/Ftrl_1 in the primary's two slices. lin/b
  // ([1]: min(2, 1) = 1 partition) stays whole, its slot as it was.
  auto plan = Plan(**c, {"(w|b)$=fixed:2"});
  REQUIRE(plan.ok());
  const auto& w = Of(*plan, "lin/w");
  for (const char* slot : {"lin/w/part_0/Ftrl", "lin/w/part_0/Ftrl_1"}) {
    CAPTURE(slot);
    const auto& s = Of(*plan, slot);
    CHECK(s.out_name() == std::string("lin/w/") + (std::string(slot).back() == '1' ? "Ftrl_1" : "Ftrl"));
    REQUIRE(s.pieces.size() == 2);
    CHECK(s.pieces[1].region == w.pieces[1].region);
  }
  CHECK(Of(*plan, "lin/w/part_0/not_a_slot").out_name() == "lin/w/part_0/not_a_slot");
  CHECK(Of(*plan, "lin/w/part_0/not_a_slot").pieces.size() == 1);
  CHECK(Of(*plan, "lin/b/part_0/Ftrl").out_name() == "lin/b/part_0/Ftrl");
  // Written and verified under the new names.
  tfckpt::ExecuteOptions eo;
  eo.before_commit = [&](const tfckpt::WrittenOutput& written) {
    tfckpt::VerifyOptions vo;
    vo.written = &written;
    return tfckpt::VerifyWritten(dir / "out", tfckpt::ReshardSources(**c, *plan), vo).status();
  };
  REQUIRE(tfckpt::ExecutePlan(**c, *plan, dir / "out", eo).ok());
  auto out = tfckpt::OpenCheckpoint(dir / "out");
  REQUIRE(out.ok());
  REQUIRE((*out)->Find("lin/w/Ftrl") != nullptr);
  CHECK((*out)->Find("lin/w/Ftrl")->slices.size() == 2);
  CHECK((*out)->Find("lin/w/part_0/Ftrl") == nullptr);
  // Back to one partition: the slots follow the primary, whole, keyed PRIMARY/SLOT (a full
  // slice is stored whole under the same key).
  auto back = Plan(**out, {"w$=none"});
  REQUIRE(back.ok());
  CHECK(Of(*back, "lin/w/Ftrl").pieces.size() == 1);
  CHECK(Of(*back, "lin/w/Ftrl").out_name() == "lin/w/Ftrl");
}

// ---------------------------------------------------------------------------------------
// B5: DTensor's per-device parts and the saving device of each slice.

TEST_CASE("B5: older DTensor parts PREFIX_dev-D-of-N (DeviceSuffix) are found, in device order, gaps allowed") {
  TempDir dir;
  auto touch = [](const std::string& p) { tfckpt::testing::WriteFile(p + ".index", ""); };
  const std::string a = dir / "a";
  // DeviceSuffix(device_id, total_devices) = "_dev-%0*d-of-%d", the width of the count:
  // "_dev-0-of-4", "_dev-02-of-16". DTensorShardedPrefix skips devices with nothing to
  // save, so devices 1 and 3 may have no part.
  touch(a + "_dev-2-of-4");
  touch(a + "_dev-0-of-4");
  auto parts = tfckpt::FindSaveParts(a, nullptr);
  REQUIRE(parts.ok());
  CHECK(*parts == std::vector<std::string>{a + "_dev-0-of-4", a + "_dev-2-of-4"});
  const std::string b = dir / "b";
  for (const char* d : {"_dev-00-of-16", "_dev-15-of-16", "_dev-08-of-16"}) touch(b + d);
  parts = tfckpt::FindSaveParts(b, nullptr);
  REQUIRE(parts.ok());
  CHECK(*parts == std::vector<std::string>{b + "_dev-00-of-16", b + "_dev-08-of-16", b + "_dev-15-of-16"});
  // Device 0 always saves (the replicated tensors, the first slice of each sharded one).
  const std::string m = dir / "m";
  touch(m + "_dev-1-of-2");
  auto missing = tfckpt::FindSaveParts(m, nullptr);
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(std::string(missing.status().message()).find(m + "_dev-0-of-2: DTensor save part of device 0 is missing") == 0);
  touch(m + "_dev-0-of-3");  // two device counts: two sets
  CHECK(absl::IsInvalidArgument(tfckpt::FindSaveParts(m, nullptr).status()));
}

TEST_CASE("B5: TF 2.21's DTensor parts PREFIX_temp/part-I-of-N_dev-D-of-M, device by device, each in part order") {
  // What TF 2.21's DTensor save leaves before its merge (tf_oracle: tf2_dtensor, whose
  // MergeV2Checkpoints takes them in this order): each TF2 task part saved per device; the
  // object graph is a part of its own, saved by device 0 alone.
  TempDir dir;
  auto touch = [](const std::string& p) { tfckpt::testing::WriteFile(p + ".index", ""); };
  const std::string a = dir / "a";
  const std::string t = a + "_temp/part-";
  std::filesystem::create_directories(a + "_temp");
  for (const char* p : {"00000-of-00002_dev-3-of-4", "00001-of-00002_dev-0-of-4", "00000-of-00002_dev-0-of-4",
                        "00000-of-00002_dev-1-of-4", "00000-of-00002_dev-2-of-4"}) {
    touch(t + p);
  }
  auto parts = tfckpt::FindSaveParts(a, nullptr);
  REQUIRE(parts.ok());
  CHECK(*parts == std::vector<std::string>{t + "00000-of-00002_dev-0-of-4", t + "00001-of-00002_dev-0-of-4",
                                           t + "00000-of-00002_dev-1-of-4", t + "00000-of-00002_dev-2-of-4",
                                           t + "00000-of-00002_dev-3-of-4"});
  // Device 0 saves every part: one missing there is a save that did not finish.
  const std::string m = dir / "m";
  std::filesystem::create_directories(m + "_temp");
  touch(m + "_temp/part-00000-of-00002_dev-0-of-4");
  touch(m + "_temp/part-00001-of-00002_dev-1-of-4");
  auto missing = tfckpt::FindSaveParts(m, nullptr);
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(std::string(missing.status().message()).find("_temp/part-00001-of-00002_dev-0-of-4: DTensor save part of device 0 is missing") !=
        std::string::npos);
}

TEST_CASE("B5: by-device puts each piece in the file of the device DTensor saves it from") {
  // Mesh x=2, y=2: device ids row-major (Mesh::device_location): (x, y) = (1, 0) is 2.
  auto l = tfckpt::ParseLayout("x,unsharded@x=2,y=2");
  REQUIRE(l.ok());
  CHECK(tfckpt::SavingDevice(*l, {10, 3}, Region{{0, 0}, {5, 3}}) == 0);
  CHECK(tfckpt::SavingDevice(*l, {10, 3}, Region{{5, 0}, {5, 3}}) == 2);
  auto ly = tfckpt::ParseLayout("unsharded,y@x=2,y=2");
  CHECK(tfckpt::SavingDevice(*ly, {4, 4}, Region{{0, 2}, {4, 2}}) == 1);
  TempDir dir;
  auto c = tfckpt::OpenCheckpoint(Write(dir, "d", {{"k", kFloat, {10, 3}, 1}, {"q", kFloat, {4, 4}, 0}}, 2));
  REQUIRE(c.ok());
  // k's halves on devices 0 and 2, q's columns on devices 0 and 1: files for 0, 1, 2.
  auto plan = Plan(**c, {"^k$=layout:x,unsharded@x=2,y=2", "^q$=layout:unsharded,y@x=2,y=2"}, "by-device");
  REQUIRE(plan.ok());
  CHECK(plan->num_files == 3);
  CHECK(Of(*plan, "k").pieces[1].file == 2);
  CHECK(Of(*plan, "q").pieces[1].file == 1);
  // Two meshes cannot be one DTensor save.
  auto two = Plan(**c, {"^k$=layout:x,unsharded@x=2", "^q$=layout:unsharded,y@x=2,y=2"}, "by-device");
  CHECK(std::string(two.status().message()).find("one DTensor mesh") != std::string::npos);
}

// ---------------------------------------------------------------------------------------
// B6: ParallelVariable and ReplicatedVariable.

TEST_CASE("B6: --expand-parallel leaves save_counter alone; replicas as TF1's Saver names them") {
  TempDir dir;
  // Checkpoint._maybe_create_save_counter makes save_counter under ops.device("/cpu:0"),
  // never on the parallel device, so saving.py never wraps it.
  const std::string par = Write(dir, "par", {{"dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", kFloat, {2}},
                                             {"save_counter/.ATTRIBUTES/VARIABLE_VALUE", 9, {}}});
  tfckpt::CombineOptions o;
  o.expand_parallel = 3;
  o.dry_run = true;
  auto r = tfckpt::CombineCheckpoints({par}, dir / "out", o);
  REQUIRE(r.ok());
  std::vector<std::string> names;
  for (const auto& t : r->tensors) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"dense/kernel/.ATTRIBUTES/VARIABLE_VALUE",
                                          "dense/kernel/.ATTRIBUTES/parallel_component_1",
                                          "dense/kernel/.ATTRIBUTES/parallel_component_2",
                                          "save_counter/.ATTRIBUTES/VARIABLE_VALUE"});
  // A ReplicatedVariable "w" saved by TF1's default Saver: op_list_to_dict keys it by replica
  // 0's variable, "w/0"; its slots under primary.op.name "w/0": "w/0/Adam" (or replicated
  // themselves, "w/0/Adam_1/0").
  const std::string rep = Write(dir, "rep", {{"w/0", kFloat, {2}}, {"w/0/Adam", kFloat, {2}},
                                             {"w/0/Adam_1/0", kFloat, {2}}, {"step", 9, {}}});
  tfckpt::CombineOptions co;
  co.collapse_replicas = true;
  co.dry_run = true;
  auto c = tfckpt::CombineCheckpoints({rep}, dir / "out2", co);
  REQUIRE(c.ok());
  names.clear();
  for (const auto& t : c->tensors) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"step", "w", "w/Adam", "w/Adam_1"});
}

// ---------------------------------------------------------------------------------------
// B7: ShardedVariable is cut on axis 0 only.

TEST_CASE("B7: a note when a rule cuts another axis of what looks like a ShardedVariable") {
  TempDir dir;
  const std::string prefix = dir / "sv";
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
    REQUIRE(w.ok());
    // ShardedVariable._serialize_to_tensors: slices of the full variable on axis 0.
    const std::string key = "emb/.ATTRIBUTES/VARIABLE_VALUE";
    REQUIRE((*w)->AddSlice(key, kFloat, {4, 2}, Region{{0, 0}, {2, 2}}, std::string(16, '\0')).ok());
    REQUIRE((*w)->AddSlice(key, kFloat, {4, 2}, Region{{2, 0}, {2, 2}}, std::string(16, '\0')).ok());
    REQUIRE((*w)->Finish().ok());
  }
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  auto cols = Plan(**c, {"fixed:2@1"});
  REQUIRE(cols.ok());
  CHECK(cols->tensors[0].note.find("a ShardedVariable (ParameterServerStrategy) is partitioned on axis 0 only") !=
        std::string::npos);
  auto rows = Plan(**c, {"fixed:4"});
  REQUIRE(rows.ok());
  CHECK(rows->tensors[0].note.empty());
}
