// Partitioners, layouts, policies (TensorFlow's documented examples), and a property test:
// random tensors, random source and target slicings, the output always equals the input.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>

#include "test_util.h"
#include "model/tensor_encoding.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "copy/copy.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "reshard/partition.h"
#include "reshard/reshard.h"
#include "reshard/scale_out.h"
#include "validate/compare.h"
#include "validate/validate.h"
#include "verify/verify.h"

using tfckpt::Region;
using tfckpt::Shape;
using tfckpt::testing::TempDir;

namespace {

std::vector<int64_t> Rows(const std::vector<Region>& regions, int axis = 0) {
  std::vector<int64_t> out;
  for (const auto& r : regions) out.push_back(r.shape[axis]);
  return out;
}

tfckpt::PartitionRule Rule(const std::string& text) {
  auto r = tfckpt::ParsePartitionRule(text);
  REQUIRE(r.ok());
  return *r;
}

// Runs `plan` as scale-out tasks into dir/so and checks the finalized files are the
// single-process output `single` byte for byte; the plan document is deterministic.
void CheckScaleOutEqualsSingleProcess(const tfckpt::Checkpoint& c, const tfckpt::ReshardPlan& plan, const TempDir& dir,
                                      const std::string& single) {
  tfckpt::TaskPlanOptions po;
  po.out = dir / "so";
  po.policy = "any";
  auto doc = tfckpt::MakeTaskPlan(c, plan, po);
  REQUIRE(doc.ok());
  auto again = tfckpt::MakeTaskPlan(c, plan, po);
  REQUIRE(again.ok());
  CHECK(*doc == *again);
  const std::string plan_path = dir / "plan.json";
  tfckpt::testing::WriteFile(plan_path, *doc);
  for (int t = plan.num_files - 1; t >= 0; --t) {
    auto r = tfckpt::ExecuteTask(plan_path, t, nullptr);
    CAPTURE(r.status().ToString());
    REQUIRE(r.ok());
  }
  auto f = tfckpt::FinalizeTasks(plan_path);
  CAPTURE(f.status().ToString());
  REQUIRE(f.ok());
  CHECK(f->verified);
  CHECK(tfckpt::testing::ReadFile(dir / "so.index") == tfckpt::testing::ReadFile(single + ".index"));
  for (int i = 0; i < plan.num_files; ++i) {
    CHECK(tfckpt::testing::ReadFile(tfckpt::DataFileName(dir / "so", i, plan.num_files)) ==
          tfckpt::testing::ReadFile(tfckpt::DataFileName(single, i, plan.num_files)));
  }
  CHECK_FALSE(std::filesystem::exists(dir / "so_temp"));
}

}  // namespace

TEST_CASE("partition counts: TensorFlow's documented examples") {
  CHECK(tfckpt::FixedShardsParts({10, 3}, 0, 2) == 2);
  CHECK(tfckpt::FixedShardsParts({10, 3}, 1, 5) == 3);  // min(N, dim)
  CHECK(tfckpt::MinSizeParts({6, 1}, 0, 4, 4, 2) == 2);
  CHECK(tfckpt::MinSizeParts({6, 1}, 0, 4, 4, 10) == 6);
  CHECK(tfckpt::MinSizeParts({6, 1}, 0, 4, 1 << 20, 10) == 1);
  CHECK(tfckpt::MaxSizeParts({6, 1}, 0, 4, 4, 0) == 6);
  CHECK(tfckpt::MaxSizeParts({6, 1}, 0, 4, 4, 2) == 2);
  CHECK(tfckpt::MaxSizeParts({6, 1}, 0, 4, 1024, 0) == 1);
  CHECK(Rows(tfckpt::CutAlongAxis({10, 3}, 0, 4)) == std::vector<int64_t>{3, 3, 2, 2});
  auto cut = tfckpt::CutAlongAxis({10, 3}, 0, 4);
  CHECK(cut[2].start == Shape{6, 0});
  CHECK(cut[3].start == Shape{8, 0});
}

TEST_CASE("partition rules: parsing, REGEX=SPEC, application") {
  auto r = Rule("fixed:3@1");
  CHECK(r.kind == tfckpt::PartitionRule::Kind::kFixed);
  CHECK(r.n == 3);
  CHECK(r.axis == 1);
  CHECK_FALSE(r.pattern.has_value());
  auto m = Rule("emb.*=min-size:4");
  CHECK(*m.pattern == "emb.*");
  CHECK(m.max_shards == 1);
  auto l = Rule("dense=layout:x,unsharded@x=2,y=4");  // '=' inside the spec too
  CHECK(*l.pattern == "dense");
  CHECK(l.layout.specs == std::vector<std::string>{"x", ""});
  auto tf = Rule("sharding_specs:unsharded,y, mesh:|x=2,y=4|0,1,2,3,4,5,6,7|0,1,2,3,4,5,6,7|/job:localhost/task:0/device:CPU:0");
  CHECK(tf.layout.specs == std::vector<std::string>{"", "y"});
  CHECK(tf.layout.mesh.size() == 2);
  CHECK_FALSE(tfckpt::ParsePartitionRule("fixed:0").ok());
  CHECK_FALSE(tfckpt::ParsePartitionRule("bogus").ok());
  CHECK_FALSE(tfckpt::ParsePartitionRule("layout:x,x@x=2").ok());  // a mesh dim shards two axes
  CHECK_FALSE(tfckpt::ParsePartitionRule("layout:z@x=2").ok());
  // DTensor's checks, each named (not "unknown partition spec"), with or without REGEX=.
  auto refused = [](const std::string& text) {
    auto r = tfckpt::ParsePartitionRule(text);
    REQUIRE_FALSE(r.ok());
    return std::string(r.status().message());
  };
  CHECK(refused("layout:x,unsharded@x=2,x=4").find("repeated mesh dimension \"x\"") != std::string::npos);
  CHECK(refused("emb=layout:x,x@x=2").find("both sharded over mesh dimension \"x\"") != std::string::npos);
  CHECK(refused("layout:x@x=2,any=2").find("\"any\" is reserved") != std::string::npos);
  // TF's partitioner defaults: min-size alone is min_max_variable_partitioner(); a falsy
  // max_shards of variable_axis_size_partitioner is no limit.
  auto min_default = Rule("min-size");
  CHECK(min_default.kind == tfckpt::PartitionRule::Kind::kMinSize);
  CHECK(min_default.n == 256 << 10);
  CHECK(min_default.max_shards == 1);
  CHECK(Rule("min-size@1").axis == 1);
  auto unlimited = Rule("max-size:4,0");
  CHECK(unlimited.max_shards == 0);
  std::string unused;
  auto cuts = tfckpt::ApplyRule(unlimited, {6, 1}, 4, &unused);
  REQUIRE(cuts.ok());
  CHECK((*cuts)->size() == 6);
  CHECK_FALSE(tfckpt::ParsePartitionRule("max-size:4,-1").ok());
  CHECK_FALSE(tfckpt::ParsePartitionRule("max-size").ok());
  CHECK_FALSE(tfckpt::ParsePartitionRule("([=fixed:2").ok());
  std::string note;
  auto scalar = tfckpt::ApplyRule(r, {}, 4, &note);
  REQUIRE(scalar.ok());
  CHECK_FALSE(scalar->has_value());
  CHECK(note.find("scalar") != std::string::npos);
  // An axis beyond the rank: TF's partitioners raise (IndexError), and so does the rule.
  auto beyond = tfckpt::ApplyRule(r, {5}, 4, &note);
  REQUIRE_FALSE(beyond.ok());
  CHECK(std::string(beyond.status().message()).find("axis 1 is outside rank 1") != std::string::npos);
}

TEST_CASE("DTensor layouts: equal cuts, products of cuts, divisibility") {
  auto l = tfckpt::ParseLayout("x,y@x=2,y=4");
  REQUIRE(l.ok());
  auto regions = tfckpt::LayoutRegions({4, 8}, *l);
  REQUIRE(regions.ok());
  CHECK(regions->size() == 8);
  CHECK((*regions)[7] == Region{{2, 6}, {2, 2}});
  auto rep = tfckpt::ParseLayout("unsharded,x@x=2,y=4");
  auto r2 = tfckpt::LayoutRegions({3, 4}, *rep);
  REQUIRE(r2.ok());
  CHECK(r2->size() == 2);
  // DTensor's SliceSpecOnDevice: start,length on sharded axes, "-" on unsharded ones.
  CHECK(tfckpt::ExtentsString(tfckpt::LayoutExtents((*r2)[1], *rep)) == "-:2,2");
  CHECK(tfckpt::ExtentsString(tfckpt::LayoutExtents((*regions)[7], *l)) == "2,2:6,2");
  tfckpt::SliceExtents parsed;
  REQUIRE(tfckpt::ParseSliceString("-:2,2", {3, 4}, &parsed).ok());
  CHECK(parsed == tfckpt::LayoutExtents((*r2)[1], *rep));
  CHECK_FALSE(tfckpt::LayoutRegions({3, 8}, *l).ok());  // 3 rows over x=2
  CHECK_FALSE(tfckpt::LayoutRegions({4}, *l).ok());     // rank
}

TEST_CASE("max-shard-size: TensorFlow's test expectations") {
  auto int32_sizes = [](size_t, const Region& r) { return std::pair<int64_t, int64_t>{r.num_elements() * 4, 4}; };
  auto name = [](size_t i) { return "v" + std::to_string(i); };
  // [3, 2] int32 with 12 bytes: two [3, 1] pieces.
  auto one = tfckpt::MaxShardSizeShards({{0, Region::Full({3, 2}), {3, 2}}}, 12, int32_sizes, name);
  REQUIRE(one.ok());
  REQUIRE(one->size() == 2);
  CHECK((*one)[0] == std::vector<std::pair<size_t, Region>>{{0, Region{{0, 0}, {3, 1}}}});
  CHECK((*one)[1] == std::vector<std::pair<size_t, Region>>{{0, Region{{0, 1}, {3, 1}}}});
  // Two [3, 2] int32 with 16 bytes: {v0[0:2]}, {v0[2:3], v1[0:1]}, {v1[1:3]}.
  auto two = tfckpt::MaxShardSizeShards({{0, Region::Full({3, 2}), {3, 2}}, {1, Region::Full({3, 2}), {3, 2}}}, 16,
                                        int32_sizes, name);
  REQUIRE(two.ok());
  REQUIRE(two->size() == 3);
  CHECK((*two)[0] == std::vector<std::pair<size_t, Region>>{{0, Region{{0, 0}, {2, 2}}}});
  CHECK((*two)[1] == std::vector<std::pair<size_t, Region>>{{0, Region{{2, 0}, {1, 2}}}, {1, Region{{0, 0}, {1, 2}}}});
  CHECK((*two)[2] == std::vector<std::pair<size_t, Region>>{{1, Region{{1, 0}, {2, 2}}}});
  // Scalars larger than the limit get files of their own, after the others.
  auto big = tfckpt::MaxShardSizeShards({{0, Region::Full({}), {}}, {1, Region::Full({2}), {2}}}, 6,
                                        [](size_t i, const Region& r) {
                                          return i == 0 ? std::pair<int64_t, int64_t>{100, 100}
                                                        : std::pair<int64_t, int64_t>{r.num_elements() * 2, 2};
                                        },
                                        name);
  REQUIRE(big.ok());
  REQUIRE(big->size() == 2);
  CHECK((*big)[0][0].first == 1);
  CHECK((*big)[1][0].first == 0);
  // One element larger than the limit: TF loops forever; we refuse.
  auto stuck = tfckpt::MaxShardSizeShards({{0, Region::Full({4}), {4}}}, 6,
                                          [](size_t, const Region& r) {
                                            return std::pair<int64_t, int64_t>{r.num_elements() * 8, 8};
                                          },
                                          name);
  CHECK(absl::IsInvalidArgument(stuck.status()));
  CHECK(std::string(stuck.status().message()).find("any piece of \"v0\": one element is 8 bytes") != std::string::npos);
  // Every one-axis slab too large (TF cuts one axis at a time): refused as well.
  auto slabs = tfckpt::MaxShardSizeShards({{0, Region::Full({16, 16, 1}), {16, 16, 1}}}, 64,
                                          [](size_t, const Region& r) {
                                            return std::pair<int64_t, int64_t>{r.num_elements() * 8, 8};
                                          },
                                          name);
  CHECK(absl::IsInvalidArgument(slabs.status()));
  CHECK(std::string(slabs.status().message()).find("smallest slab along one axis is 128 bytes") != std::string::npos);
}

namespace {

// A random checkpoint: tensors of random rank 1-4 and dtype, each stored in a random
// slicing (along a random axis, or a DTensor-style grid) over several files.
struct Built {
  std::string prefix;
};

std::vector<Region> RandomSlicing(const Shape& shape, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 3);
  const int mode = pick(rng);
  const int axis = std::uniform_int_distribution<int>(0, static_cast<int>(shape.size()) - 1)(rng);
  if (mode == 0 || shape[axis] == 0) return {Region::Full(shape)};
  if (mode == 1 || mode == 2) {
    const int64_t parts = std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(1, shape[axis]))(rng);
    return tfckpt::CutAlongAxis(shape, axis, parts);
  }
  // A grid over every axis with 2 cuts where possible.
  std::vector<Region> out = {Region::Full(shape)};
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 2) continue;
    std::vector<Region> next;
    for (const Region& r : out) {
      for (const Region& c : tfckpt::CutAlongAxis(r.shape, static_cast<int>(d), 2)) {
        Region x = r;
        x.start[d] = r.start[d] + c.start[d];
        x.shape[d] = c.shape[d];
        next.push_back(x);
      }
    }
    out = std::move(next);
  }
  return out;
}

std::string Payload(int32_t dtype, const Region& r, const Shape& full, const std::vector<std::string>& all_strings,
                    const std::string& all_bytes, int esize) {
  std::vector<std::string_view> elems;
  std::string out;
  const auto strides = tfckpt::Strides(full);
  Region whole = Region::Full(full);
  tfckpt::ForEachRun(r, {&whole}, [&](const int64_t* off, int64_t n) {
    if (dtype == 7) {
      for (int64_t i = 0; i < n; ++i) elems.push_back(all_strings[off[0] + i]);
    } else {
      out.append(all_bytes, off[0] * esize, n * esize);
    }
  });
  if (dtype == 7) tfckpt::EncodeStrings(elems, &out);
  return out;
}

}  // namespace

TEST_CASE("property: random tensors, source and target slicings, layouts; output equals input") {
  std::mt19937 rng(20261122);
  const int32_t dtypes[] = {1, 2, 3, 4, 7, 9, 10, 14, 18, 19};
  const char* targets[] = {"fixed:3", "fixed:2@1", "fixed:5@2", "none", "min-size:16,4", "max-size:24,5@1",
                           "layout:x,unsharded@x=2", "layout:unsharded,y@y=2", "fixed:7@3"};
  const char* policies[] = {"by-task", "by-task:3", "shards:2", "single", "max-shard-size:64", "max-shard-size:500"};
  for (int round = 0; round < 100; ++round) {
    CAPTURE(round);
    TempDir dir;
    const std::string src = dir / "src";
    std::vector<std::string> names;
    std::vector<Shape> shapes;
    {
      tfckpt::BundleWriterOptions o;
      o.num_shards = 3;
      auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(src), o);
      REQUIRE(w.ok());
      const int count = std::uniform_int_distribution<int>(1, 4)(rng);
      for (int k = 0; k < count; ++k) {
        const int rank = std::uniform_int_distribution<int>(1, 4)(rng);
        Shape shape;
        for (int d = 0; d < rank; ++d) shape.push_back(std::uniform_int_distribution<int64_t>(1, 6)(rng));
        if (round % 13 == 5 && k == 0) shape[0] = 0;  // an empty tensor now and then
        const int32_t dtype = dtypes[std::uniform_int_distribution<int>(0, 9)(rng)];
        const int esize = dtype == 7 ? 1 : tfckpt::LookupDType(dtype)->element_size;
        const int64_t n = *tfckpt::NumElements(shape);
        std::string bytes(static_cast<size_t>(n * esize), '\0');
        for (auto& ch : bytes) ch = static_cast<char>(rng() % (dtype == 10 ? 2 : 256));
        std::vector<std::string> strings;
        for (int64_t i = 0; i < n; ++i) strings.push_back(std::string(rng() % 5, static_cast<char>('a' + i % 26)));
        const std::string name = "t" + std::to_string(k);
        names.push_back(name);
        shapes.push_back(shape);
        int file = 0;
        for (const Region& r : RandomSlicing(shape, rng)) {
          const std::string payload = Payload(dtype, r, shape, strings, bytes, esize);
          if (r.Covers(shape)) {
            REQUIRE((*w)->Add(name, dtype, shape, payload, file++ % 3).ok());
          } else {
            REQUIRE((*w)->AddSlice(name, dtype, shape, r, payload, file++ % 3).ok());
          }
        }
      }
      REQUIRE((*w)->Finish().ok());
    }
    auto c = tfckpt::OpenCheckpoint(src);
    REQUIRE(c.ok());
    tfckpt::ReshardOptions options;
    const std::string target = targets[std::uniform_int_distribution<int>(0, 8)(rng)];
    const std::string policy = policies[std::uniform_int_distribution<int>(0, 5)(rng)];
    CAPTURE(target);
    CAPTURE(policy);
    // One rule per tensor, its axis within the tensor's rank (TF's partitioners raise for
    // an axis beyond it); any dtype may be cut (the output is read back by us).
    for (size_t k = 0; k < names.size(); ++k) {
      std::string rule = target;
      const size_t at = rule.rfind('@');
      if (at != std::string::npos && rule.rfind("layout:", 0) != 0) {
        const int axis = std::min(std::stoi(rule.substr(at + 1)), static_cast<int>(shapes[k].size()) - 1);
        rule = rule.substr(0, at + 1) + std::to_string(axis == static_cast<int>(shapes[k].size()) - 1 ? -1 : axis);
      }
      options.rules.push_back(Rule("^" + names[k] + "$=" + rule));
    }
    options.allow_any_dtype = true;
    options.policy = *tfckpt::ParsePolicy(policy);
    auto plan = tfckpt::PlanReshard(**c, options);
    CAPTURE(plan.status().ToString());
    if (!plan.ok()) {
      // Only layouts (an axis not divisible by the mesh), max-shard-size (no piece fits a
      // file) and what TF refuses for a tensor with no elements (zero partitions, a
      // division by zero, empty slices SaveV2 cannot store) may refuse.
      const std::string m(plan.status().message());
      CHECK((target.rfind("layout:", 0) == 0 || policy.rfind("max-shard-size:", 0) == 0 ||
             m.find("zero partitions") != std::string::npos || m.find("ZeroDivisionError") != std::string::npos ||
             m.find("cannot store or restore") != std::string::npos));
      CHECK(absl::IsInvalidArgument(plan.status()));
      continue;
    }
    const std::string out = dir / "out";
    tfckpt::ExecuteOptions eo;
    eo.jobs = 2;
    // Read back as reshard does, and verified before the commit the way it is: the CRC-only
    // proof must hold for every random cut, and the read-back must name exactly the pieces
    // of tensors cut on axis 0 only on both sides.
    eo.read_back = true;
    bool verified = false;
    eo.before_commit = [&](const tfckpt::WrittenOutput& written) -> absl::Status {
      auto w = tfckpt::OpenResolved({.format = tfckpt::Format::kV2, .prefix = out}, nullptr, &written.open);
      REQUIRE(w.ok());
      const auto rows = [](const tfckpt::TensorEntry& t) {
        for (const tfckpt::StoredSlice& s : t.slices) {
          for (size_t d = 1; d < s.region.rank(); ++d) {
            if (s.region.start[d] != 0 || s.region.shape[d] != t.shape[d]) return false;
          }
        }
        return true;
      };
      for (const tfckpt::TensorEntry& t : (*w)->tensors()) {
        const tfckpt::TensorEntry* in = (*c)->Find(t.name);
        REQUIRE(in != nullptr);
        const bool expected = tfckpt::LookupDType(t.dtype)->element_size > 0 && rows(t) && rows(*in);
        for (const tfckpt::StoredSlice& s : t.slices) {
          CAPTURE(t.name);
          CAPTURE(s.data.size);
          CHECK(written.read_back(s.data.shard, s.data.offset, s.data.size) == (expected && s.data.size > 0));
        }
      }
      tfckpt::VerifyOptions vo;
      vo.written = &written;
      auto v = tfckpt::VerifyWritten(out, {{c->get()}}, vo);
      CAPTURE(v.status().ToString());
      CHECK(v.ok());
      verified = v.ok();
      return absl::OkStatus();
    };
    absl::Status st = tfckpt::ExecutePlan(**c, *plan, out, eo);
    CAPTURE(st.ToString());
    REQUIRE(st.ok());
    CHECK(verified);
    auto report = tfckpt::Compare(out, src, {});
    REQUIRE(report.ok());
    for (const auto& f : report->findings) CAPTURE(f.message);
    CHECK(report->findings.empty());
    auto v = tfckpt::Validate(out, {});
    REQUIRE(v.ok());
    CHECK(v->errors() == 0);
    // Scale-out on the same plan: a deterministic plan, tasks run in any order, and
    // finalize gives exactly the bytes of the single-process run.
    CheckScaleOutEqualsSingleProcess(**c, *plan, dir, out);
  }
}

TEST_CASE("scale-out: a changed source, a missing task, a bad task number are refused") {
  TempDir dir;
  const std::string src = dir / "src";
  {
    tfckpt::BundleWriterOptions o;
    o.num_shards = 2;
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(src), o);
    REQUIRE(w.ok());
    std::string rows(6 * 4 * 4, '\x01');
    REQUIRE((*w)->AddSlice("emb", 1, {6, 4}, Region{{0, 0}, {3, 4}}, rows.substr(0, 48), 0).ok());
    REQUIRE((*w)->AddSlice("emb", 1, {6, 4}, Region{{3, 0}, {3, 4}}, rows.substr(48), 1).ok());
    REQUIRE((*w)->Finish().ok());
  }
  auto c = tfckpt::OpenCheckpoint(src);
  REQUIRE(c.ok());
  tfckpt::ReshardOptions options;
  options.rules.push_back(Rule("fixed:3"));
  options.policy = *tfckpt::ParsePolicy("shards:3");
  auto plan = tfckpt::PlanReshard(**c, options);
  REQUIRE(plan.ok());
  tfckpt::TaskPlanOptions po;
  po.out = dir / "out";
  auto doc = tfckpt::MakeTaskPlan(**c, *plan, po);
  REQUIRE(doc.ok());
  const std::string plan_path = dir / "plan.json";
  tfckpt::testing::WriteFile(plan_path, *doc);

  auto bad = tfckpt::ExecuteTask(plan_path, 3, nullptr);
  CHECK(absl::IsInvalidArgument(bad.status()));
  CHECK(std::string(bad.status().message()).find("task 3 out of range (0..2)") != std::string::npos);
  REQUIRE(tfckpt::ExecuteTask(plan_path, 0, nullptr).ok());
  REQUIRE(tfckpt::ExecuteTask(plan_path, 2, nullptr).ok());
  auto missing = tfckpt::FinalizeTasks(plan_path);
  CHECK(absl::IsInvalidArgument(missing.status()));
  CHECK(std::string(missing.status().message()).find("tasks have not finished: 1 (") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "out.index"));

  // A source data file rewritten since planning (same size, new bytes and mtime).
  const std::string data1 = src + ".data-00001-of-00002";
  std::string bytes = tfckpt::testing::ReadFile(data1);
  bytes[0] ^= 1;
  std::filesystem::last_write_time(data1, std::filesystem::last_write_time(data1) + std::chrono::seconds(5));
  tfckpt::testing::WriteFile(data1, bytes);
  auto changed = tfckpt::ExecuteTask(plan_path, 1, nullptr);
  CHECK(absl::IsInvalidArgument(changed.status()));
  CHECK(std::string(changed.status().message()).find("source changed since planning") != std::string::npos);
  CHECK(std::string(changed.status().message()).find(data1) != std::string::npos);

  tfckpt::testing::WriteFile(plan_path, "{\"format\": \"something else\"}");
  CHECK(absl::IsInvalidArgument(tfckpt::ExecuteTask(plan_path, 0, nullptr).status()));
  CHECK(absl::IsInvalidArgument(tfckpt::FinalizeTasks(plan_path).status()));
}
