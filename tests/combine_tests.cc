// Unit tests of PlanCombine / WriteCombined (merge with edits) on generated inputs:
// renames, conflicts decided by value whatever the slicing, averaging; and of
// FindSaveParts (merge --recover) on each of TensorFlow's part layouts.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"
#include "base/crc32c.h"
#include "format/bundle/bundle_writer.h"
#include "format/safetensors/safetensors.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/open.h"
#include "merge/combine.h"
#include "merge/merge.h"
#include "tfckpt/status.h"

namespace {

using tfckpt::CombineOptions;
using tfckpt::PlannedTensor;
using tfckpt::Region;

constexpr int32_t kFloat = 1, kInt64 = 9;

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::string Int64(int64_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }

// "x" [4, 3] float32 = scale * i (whole, or in two row slices [0, 1) and [1, 4)),
// "enc/w" [2] float32, "step" int64.
std::string Write(const tfckpt::testing::TempDir& dir, const std::string& name, float scale, bool sliced,
                  int64_t step) {
  std::vector<float> x(12);
  for (int i = 0; i < 12; ++i) x[i] = scale * static_cast<float>(i);
  const std::string prefix = dir / name;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
  REQUIRE(w.ok());
  const std::string bytes = Floats(x);
  if (sliced) {
    REQUIRE((*w)->AddSlice("x", kFloat, {4, 3}, Region{{0, 0}, {1, 3}}, bytes.substr(0, 12)).ok());
    REQUIRE((*w)->AddSlice("x", kFloat, {4, 3}, Region{{1, 0}, {3, 3}}, bytes.substr(12)).ok());
  } else {
    REQUIRE((*w)->Add("x", kFloat, {4, 3}, bytes).ok());
  }
  REQUIRE((*w)->Add("enc/w", kFloat, {2}, Floats({scale, -scale})).ok());
  REQUIRE((*w)->Add("step", kInt64, {}, Int64(step)).ok());
  REQUIRE((*w)->Finish().ok());
  return prefix;
}

const PlannedTensor& Planned(const tfckpt::CombinePlan& plan, const std::string& name) {
  auto it = std::find_if(plan.tensors.begin(), plan.tensors.end(), [&](const auto& t) { return t.name == name; });
  REQUIRE(it != plan.tensors.end());
  return *it;
}

// The float32 values of tensor `name` of the checkpoint at `prefix`, row-major, whatever
// its slicing.
std::vector<float> Values(const std::string& prefix, const std::string& name) {
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  const tfckpt::TensorEntry* t = (*c)->Find(name);
  REQUIRE(t != nullptr);
  const int64_t cols = t->shape.size() == 2 ? t->shape[1] : 1;
  std::vector<float> out(static_cast<size_t>(t->bytes / sizeof(float)));
  for (const auto& s : t->slices) {
    auto b = (*c)->Read(*t, s);
    REQUIRE(b.ok());
    REQUIRE(s.region.shape.size() == t->shape.size());
    const int64_t row0 = s.region.start.empty() ? 0 : s.region.start[0];
    REQUIRE((s.region.shape.size() < 2 || s.region.shape[1] == cols));
    std::memcpy(out.data() + row0 * cols, b->data.data(), b->data.size());
  }
  return out;
}

}  // namespace

TEST_CASE("PlanCombine: renames name the output tensors and their sources; the write follows the plan") {
  tfckpt::testing::TempDir dir;
  const std::string a = Write(dir, "a", 1, false, 7);
  CombineOptions o;
  o.renames.push_back({"^enc/", "dec/"});
  auto plan = tfckpt::PlanCombine({a}, dir / "out", o);
  REQUIRE(plan.ok());
  std::vector<std::string> names;
  for (const auto& t : plan->tensors) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"dec/w", "step", "x"});
  const PlannedTensor& w = Planned(*plan, "dec/w");
  CHECK(w.kind == PlannedTensor::Kind::kCopy);
  REQUIRE(w.sources.size() == 1);
  CHECK(w.sources[0].tensor->name == "enc/w");
  CHECK(w.origin == a + " \"enc/w\"");
  CHECK(w.files == std::vector<int32_t>{0});
  CHECK(plan->report.num_files == 1);
  CHECK(plan->report.bytes == 8 + 8 + 48);
  // Planning wrote nothing; the write makes what was planned.
  CHECK_FALSE(std::filesystem::exists(dir / "out.index"));
  REQUIRE(tfckpt::WriteCombined(*plan, dir / "out", o).ok());
  CHECK(Values(dir / "out", "dec/w") == std::vector<float>{1, -1});
  CHECK(Values(dir / "out", "x") == Values(a, "x"));
}

TEST_CASE("PlanCombine: a tensor in two inputs is a conflict unless --on-conflict chooses") {
  tfckpt::testing::TempDir dir;
  const std::string whole = Write(dir, "whole", 1, false, 7);
  const std::string rows = Write(dir, "rows", 1, true, 7);    // equal values, other slicing
  const std::string other = Write(dir, "other", 1, true, 8);  // "step" differs
  SUBCASE("equal values are still a conflict: an error naming the tensor and both inputs") {
    auto plan = tfckpt::PlanCombine({rows, whole}, dir / "out", CombineOptions{});
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.status().code() == absl::StatusCode::kInvalidArgument);
    const std::string m(plan.status().message());
    CHECK(m.find(" is in both " + rows + " and " + whole + " (--on-conflict first|last chooses)") != std::string::npos);
  }
  SUBCASE("parts holding different slices of a tensor are a conflict, not a tensor with a gap") {
    // Like the parts of a distributed save: row 0 in one input, rows 1..3 in the other.
    const std::vector<float> x = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    const std::string bytes = Floats(x);
    std::vector<std::string> parts;
    for (int k = 0; k < 2; ++k) {
      const std::string prefix = dir / ("part" + std::to_string(k));
      auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
      REQUIRE(w.ok());
      const Region r = k == 0 ? Region{{0, 0}, {1, 3}} : Region{{1, 0}, {3, 3}};
      REQUIRE((*w)->AddSlice("x", kFloat, {4, 3}, r, k == 0 ? bytes.substr(0, 12) : bytes.substr(12)).ok());
      REQUIRE((*w)->Finish().ok());
      parts.push_back(prefix);
    }
    auto plan = tfckpt::PlanCombine(parts, dir / "out", CombineOptions{});
    REQUIRE_FALSE(plan.ok());
    CHECK(std::string(plan.status().message()).find("tensor \"x\" is in both") == 0);
  }
  SUBCASE("--on-conflict first takes the first input's, with its slicing") {
    CombineOptions o;
    o.on_conflict = CombineOptions::Conflict::kFirst;
    auto plan = tfckpt::PlanCombine({rows, whole}, dir / "out", o);
    REQUIRE(plan.ok());
    const PlannedTensor& x = Planned(*plan, "x");
    REQUIRE(x.sources.size() == 1);
    CHECK(x.sources[0].input == 0);
    CHECK(x.files.size() == 2);  // the two row slices of the first input
    CHECK(x.origin == rows);
  }
  SUBCASE("--on-conflict last takes the last input's") {
    CombineOptions o;
    o.on_conflict = CombineOptions::Conflict::kLast;
    auto plan = tfckpt::PlanCombine({whole, other}, dir / "out", o);
    REQUIRE(plan.ok());
    CHECK(Planned(*plan, "step").sources[0].input == 1);
  }
}

TEST_CASE("PlanCombine: --average plans the mean of every input; the write computes it") {
  tfckpt::testing::TempDir dir;
  const std::string a = Write(dir, "a", 1, true, 1);
  const std::string b = Write(dir, "b", 3, true, 2);
  const std::string whole = Write(dir, "whole", 5, false, 3);
  CombineOptions o;
  o.average = true;
  auto plan = tfckpt::PlanCombine({a, b}, dir / "out", o);
  REQUIRE(plan.ok());
  const PlannedTensor& x = Planned(*plan, "x");
  CHECK(x.kind == PlannedTensor::Kind::kAverage);
  CHECK(x.sources.size() == 2);
  CHECK(x.origin == "mean of 2 inputs");
  CHECK(Planned(*plan, "step").kind == PlannedTensor::Kind::kCopy);  // int64: from the last
  CHECK(Planned(*plan, "step").sources[0].input == 1);
  CHECK(plan->report.averaged == 2);
  REQUIRE(tfckpt::WriteCombined(*plan, dir / "out", o).ok());
  std::vector<float> want(12);
  for (int i = 0; i < 12; ++i) want[i] = 2.0f * static_cast<float>(i);
  CHECK(Values(dir / "out", "x") == want);
  CHECK(Values(dir / "out", "enc/w") == std::vector<float>{2, -2});
  // Different slicing is not averaged: a note, and the last input's values.
  auto mixed = tfckpt::PlanCombine({a, whole}, dir / "mixed", o);
  REQUIRE(mixed.ok());
  CHECK(Planned(*mixed, "x").kind == PlannedTensor::Kind::kCopy);
  CHECK(Planned(*mixed, "x").sources[0].input == 1);
  CHECK(std::find(mixed->report.notes.begin(), mixed->report.notes.end(),
                  "\"x\" not averaged (stored with different slicing in the inputs); taken from the last input") !=
        mixed->report.notes.end());
}

TEST_CASE("PlanCombine: an existing output, or one that is an input, is refused before planning") {
  tfckpt::testing::TempDir dir;
  const std::string a = Write(dir, "a", 1, false, 7);
  auto exists = tfckpt::PlanCombine({a}, a, CombineOptions{});
  REQUIRE_FALSE(exists.ok());
  CHECK(std::string(exists.status().message()).find("one of the inputs") != std::string::npos);
  const std::string b = Write(dir, "b", 1, false, 7);
  auto over = tfckpt::PlanCombine({a}, b, CombineOptions{});
  CHECK(over.status().code() == absl::StatusCode::kAlreadyExists);
  CombineOptions dry;
  dry.dry_run = true;
  CHECK(tfckpt::PlanCombine({a}, b, dry).ok());
}

// ---------------------------------------------------------------------------------------
// FindSaveParts

namespace {

// An empty bundle's index at PREFIX.index (FindSaveParts looks at names only).
void Touch(const std::string& path) { tfckpt::testing::WriteFile(path, ""); }

std::vector<std::string> Parts(const std::string& prefix) {
  auto p = tfckpt::FindSaveParts(prefix, nullptr);
  REQUIRE(p.ok());
  return *p;
}

std::string Missing(const std::string& prefix) {
  auto p = tfckpt::FindSaveParts(prefix, nullptr);
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == absl::StatusCode::kNotFound);
  return std::string(p.status().message());
}

}  // namespace

TEST_CASE("FindSaveParts: TF2's PREFIX_temp/part-I-of-N, in part order; a missing part named") {
  tfckpt::testing::TempDir dir;
  const std::string prefix = dir / "ckpt-1";
  std::filesystem::create_directory(prefix + "_temp");
  Touch(prefix + "_temp/part-00001-of-00002.index");
  Touch(prefix + "_temp/part-00000-of-00002.index");
  Touch(prefix + "_temp/part-00000-of-00002.tempstate123.index");  // debris: ignored
  CHECK(Parts(prefix) ==
        std::vector<std::string>{prefix + "_temp/part-00000-of-00002", prefix + "_temp/part-00001-of-00002"});
  std::filesystem::remove(prefix + "_temp/part-00000-of-00002.index");
  const std::string m = Missing(prefix);
  CHECK(m.find("part 00000-of-00002 is missing") != std::string::npos);
}

TEST_CASE("FindSaveParts: TF1's PREFIX_temp_<hex>/part-*, object stores' PREFIX.part-*, PREFIX_dev-I-of-N") {
  tfckpt::testing::TempDir dir;
  SUBCASE("_temp_<hex>") {
    const std::string prefix = dir / "model.ckpt-5";
    std::filesystem::create_directory(prefix + "_temp_0a1b2c");
    Touch(prefix + "_temp_0a1b2c/part-00000-of-00001.index");
    CHECK(Parts(prefix) == std::vector<std::string>{prefix + "_temp_0a1b2c/part-00000-of-00001"});
  }
  SUBCASE(".part-") {
    const std::string prefix = dir / "m";
    Touch(prefix + ".part-00000-of-00002.index");
    Touch(prefix + ".part-00001-of-00002.index");
    CHECK(Parts(prefix) == std::vector<std::string>{prefix + ".part-00000-of-00002", prefix + ".part-00001-of-00002"});
  }
  SUBCASE("_dev-") {
    // Older DTensor's DeviceSuffix pads the device to the count's width; devices with
    // nothing to save write no part (DTensorShardedPrefix skips them), device 0 always saves.
    const std::string prefix = dir / "d";
    Touch(prefix + "_dev-00002-of-00003.index");
    CHECK(Missing(prefix).find("device 0 is missing") != std::string::npos);
    Touch(prefix + "_dev-00000-of-00003.index");
    CHECK(Parts(prefix).size() == 2);
    Touch(prefix + "_dev-00001-of-00003.index");
    CHECK(Parts(prefix).size() == 3);
  }
}

TEST_CASE("FindSaveParts: DTensor's PREFIX_device_D_save_op_K by device, then save op; gaps named") {
  tfckpt::testing::TempDir dir;
  const std::string prefix = dir / "ckpt-5";
  for (const char* p : {"_device_1_save_op_0", "_device_0_save_op_1", "_device_0_save_op_0", "_device_10_save_op_0"}) {
    Touch(prefix + p + ".index");
  }
  CHECK(Parts(prefix) == std::vector<std::string>{prefix + "_device_0_save_op_0", prefix + "_device_0_save_op_1",
                                                  prefix + "_device_1_save_op_0", prefix + "_device_10_save_op_0"});
  Touch(prefix + "_device_1_save_op_2.index");  // save op 1 of device 1 is missing
  CHECK(Missing(prefix).find(prefix + "_device_1_save_op_1: DTensor save part is missing") == 0);
}

TEST_CASE("FindSaveParts: no parts, or two sets of parts, are refused") {
  tfckpt::testing::TempDir dir;
  const std::string prefix = dir / "p";
  CHECK(Missing(prefix).find("no parts of an unmerged save") != std::string::npos);
  Touch(prefix + ".part-00000-of-00001.index");
  Touch(prefix + "_dev-00000-of-00001.index");
  auto p = tfckpt::FindSaveParts(prefix, nullptr);
  CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(p.status().message()).find("several sets of save parts") != std::string::npos);
}

TEST_CASE("WriteCombined: averages, casts and copies give the same bytes whatever the number of threads") {
  tfckpt::testing::TempDir dir;
  // Two inputs of several sliced tensors over two data files, so that units of several
  // files and sizes run at once.
  auto input = [&](const std::string& name, float scale) {
    tfckpt::BundleWriterOptions wo;
    wo.num_shards = 2;
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / name), wo);
    REQUIRE(w.ok());
    for (int k = 0; k < 5; ++k) {
      const int64_t rows = 300 + 50 * k;
      std::vector<float> v(static_cast<size_t>(rows * 4));
      for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(i) + static_cast<float>(k) / 3;
      const std::string bytes = Floats(v);
      const int64_t cut = rows / 3;
      const std::string t = "t" + std::to_string(k);
      REQUIRE((*w)->AddSlice(t, kFloat, {rows, 4}, Region{{0, 0}, {cut, 4}}, bytes.substr(0, static_cast<size_t>(cut * 16)), 0).ok());
      REQUIRE((*w)->AddSlice(t, kFloat, {rows, 4}, Region{{cut, 0}, {rows - cut, 4}}, bytes.substr(static_cast<size_t>(cut * 16)), 1).ok());
    }
    REQUIRE((*w)->Add("step", kInt64, {}, Int64(3), 1).ok());
    REQUIRE((*w)->Finish().ok());
    return dir / name;
  };
  const std::string a = input("a", 1), b = input("b", 0.5f);
  std::map<int, std::vector<std::string>> bytes;
  for (int jobs : {1, 4}) {
    const std::string j = dir / ("j" + std::to_string(jobs));
    CombineOptions avg;
    avg.average = true;
    avg.jobs = jobs;
    avg.read_back = true;
    REQUIRE(tfckpt::CombineCheckpoints({a, b}, j + "/avg", avg).ok());
    CombineOptions cast;
    cast.casts[kFloat] = 14;  // bfloat16
    cast.jobs = jobs;
    REQUIRE(tfckpt::CombineCheckpoints({a}, j + "/cast", cast).ok());
    for (const char* f : {"/avg.index", "/avg.data-00000-of-00002", "/avg.data-00001-of-00002", "/cast.index",
                          "/cast.data-00000-of-00002", "/cast.data-00001-of-00002"}) {
      bytes[jobs].push_back(tfckpt::testing::ReadFile(j + f));
    }
  }
  CHECK(bytes[1] == bytes[4]);
  const std::vector<float> t3 = Values(dir / "j4/avg", "t3"), a3 = Values(a, "t3"), b3 = Values(b, "t3");
  for (size_t i = 0; i < t3.size(); i += 97) CHECK(t3[i] == static_cast<float>((double{a3[i]} + b3[i]) / 2));
}

TEST_CASE("WriteCombined: a flipped byte in an averaged input is its data.crc error, checked on the bytes averaged") {
  tfckpt::testing::TempDir dir;
  const std::string a = Write(dir, "a", 1, true, 7), b = Write(dir, "b", 2, true, 7);
  std::string data = tfckpt::testing::ReadFile(b + ".data-00000-of-00001");
  data[20] ^= 0x40;  // inside x's second slice (x comes after enc/w's 8 bytes and its first slice's 12)
  tfckpt::testing::WriteFile(b + ".data-00000-of-00001", data);
  CombineOptions o;
  o.average = true;
  o.on_conflict = CombineOptions::Conflict::kLast;
  auto r = tfckpt::CombineCheckpoints({a, b}, dir / "out", o);
  REQUIRE_FALSE(r.ok());
  CHECK(tfckpt::ErrorInfoOf(r.status()).check == "data.crc");
  CHECK_FALSE(std::filesystem::exists(dir / "out.index"));
}

TEST_CASE("WriteCombined: a safetensors input's pieces copied whole have their CRCs noted for the verification") {
  tfckpt::testing::TempDir dir;
  // "big" moves in-kernel (a run of 512 KiB), "small" is gathered through a buffer.
  std::vector<float> big(512 * 256), small(6);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) / 7;
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<float>(i);
  const std::string st = dir / "in.safetensors";
  {
    auto w = tfckpt::SafetensorsWriter::Create(tfckpt::Location::Of(st), {{"big", kFloat, {512, 256}}, {"small", kFloat, {6}}}, {});
    REQUIRE(w.ok());
    REQUIRE((*w)->Append(Floats(big)).ok());
    REQUIRE((*w)->Append(Floats(small)).ok());
    REQUIRE((*w)->Finish().ok());
    REQUIRE((*w)->Commit().ok());
  }
  auto in = tfckpt::OpenCheckpoint(st);
  REQUIRE(in.ok());
  const tfckpt::StoredData& b = (*in)->Find("big")->slices[0].data;
  const tfckpt::StoredData& s = (*in)->Find("small")->slices[0].data;
  {
    CombineOptions o;
    o.jobs = 2;
    o.read_back = true;
    std::optional<uint32_t> big_crc = 7, small_crc = 7;
    bool called = false;
    o.before_commit = [&](const tfckpt::WrittenOutput& written, const tfckpt::CombineReport&) {
      called = true;
      REQUIRE(written.source_crc);
      big_crc = written.source_crc(st, b.offset, b.size);
      small_crc = written.source_crc(st, s.offset, s.size);
      return absl::OkStatus();
    };
    REQUIRE(tfckpt::CombineCheckpoints({st}, dir / "out", o).ok());
    REQUIRE(called);
    REQUIRE(big_crc.has_value());
    CHECK(*big_crc == tfckpt::crc32c::Value(Floats(big)));
    CHECK_FALSE(small_crc.has_value());  // (gathered: the verification reads it)
  }
}
