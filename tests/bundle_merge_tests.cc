// MergeBundles (bundle_merge.h) reads its inputs through the bundle reader's one walk
// (VisitBundleIndex): a header or an entry the reader refuses is refused by merge with the
// same check id and message, before anything is written; a header's num_shards never
// drives a loop or an allocation of its own.
#include <doctest/doctest.h>

#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "format/bundle/bundle_proto.h"
#include "format/bundle/bundle_reader.h"
#include "format/table/table.h"
#include "format/bundle/bundle_merge.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"

using tfckpt::testing::ReadFile;
using tfckpt::testing::TempDir;
using tfckpt::testing::WriteFile;

namespace {

constexpr int32_t kFloat = static_cast<int32_t>(tfckpt::DType::kFloat);

using Entries = std::vector<std::pair<std::string, tfckpt::pb::BundleEntryProto>>;

// Writes PREFIX.index by hand: a header counting `num_shards` data files, then `entries`
// (in key order).
void WriteIndex(const std::string& prefix, int32_t num_shards, const Entries& entries) {
  auto out = tfckpt::Storage::Local().Create(prefix + ".index");
  REQUIRE(out.ok());
  {
    tfckpt::TableWriter table(out->get());
    std::string value;
    tfckpt::MakeHeader(num_shards).SerializeToString(&value);
    REQUIRE(table.Add("", value).ok());
    for (const auto& [key, entry] : entries) {
      value.clear();
      entry.SerializeToString(&value);
      REQUIRE(table.Add(key, value).ok());
    }
    REQUIRE(table.Finish().ok());
  }
  REQUIRE((*out)->Close().ok());
  REQUIRE((*out)->Commit().ok());
}

// A float32 [1] entry per name in `shards` (name -> its shard_id).
Entries Scalars(const std::vector<std::pair<std::string, int32_t>>& shards) {
  Entries out;
  for (const auto& [name, shard] : shards) out.emplace_back(name, tfckpt::MakeEntry(kFloat, {1}, shard, 0, 4, 0));
  return out;
}

// A good input "good" holding "a", written by the library.
std::string GoodInput(const TempDir& dir) {
  const std::string prefix = dir / "good";
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
  REQUIRE(w.ok());
  REQUIRE((*w)->Add("a", kFloat, {1}, std::string(4, '\0')).ok());
  REQUIRE((*w)->Finish().ok());
  return prefix;
}

// Names in `dir` starting with `stem`.
std::vector<std::string> Written(const TempDir& dir, const std::string& stem) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    if (name.rfind(stem, 0) == 0) out.push_back(name);
  }
  return out;
}

// `merged` is a DataLoss with `check` at `file`, and nothing was written at DIR/out.
void CheckRefused(const absl::StatusOr<tfckpt::MergeReport>& merged, const std::string& check, const std::string& file,
                  const TempDir& dir) {
  REQUIRE(!merged.ok());
  const tfckpt::ErrorInfo e = tfckpt::ErrorInfoOf(merged.status());
  CHECK(absl::IsDataLoss(merged.status()));
  CHECK(e.check == check);
  CHECK(e.file == file);
  CHECK(Written(dir, "out").empty());
}

}  // namespace

TEST_CASE("merge refuses a header num_shards the reader refuses, as the reader does, and writes nothing") {
  for (int32_t n : {tfckpt::kMaxBundleShards + 1, std::numeric_limits<int32_t>::max(), -1}) {
    CAPTURE(n);
    TempDir dir;
    const std::string good = GoodInput(dir), bad = dir / "bad";
    WriteIndex(bad, n, Scalars({{"b", 0}}));
    WriteFile(tfckpt::DataFileName(bad, 0, n), std::string(4, '\0'));
    const absl::Status opened = tfckpt::OpenCheckpoint(bad).status();
    REQUIRE(absl::IsDataLoss(opened));
    CHECK(tfckpt::ErrorInfoOf(opened).check == "header.num-shards");

    auto merged = tfckpt::MergeBundles({good, bad}, dir / "out", {});
    REQUIRE(!merged.ok());
    CHECK(merged.status() == opened);  // code, message, check id and location alike
    CHECK(Written(dir, "out").empty());
  }
}

TEST_CASE("merge refuses an entry naming a data file past the header's count, as reading it does") {
  TempDir dir;
  const std::string good = GoodInput(dir), bad = dir / "bad";
  WriteIndex(bad, 2, Scalars({{"b", 0}, {"c", 2}}));
  for (int s = 0; s < 3; ++s) WriteFile(tfckpt::DataFileName(bad, s, 2), std::string(4, '\0'));
  auto c = tfckpt::OpenCheckpoint(bad);
  REQUIRE(c.ok());
  const tfckpt::TensorEntry& t = *(*c)->Find("c");
  const absl::Status read = (*c)->Read(t, t.slices[0]).status();
  REQUIRE(absl::IsDataLoss(read));
  CHECK(tfckpt::ErrorInfoOf(read).check == "entry.shard");

  auto merged = tfckpt::MergeBundles({good, bad}, dir / "out", {});
  REQUIRE(!merged.ok());
  CHECK(merged.status() == read);
  CHECK(std::string(merged.status().message()) == dir / "bad.index: key \"c\": entry \"c\" names data file 2 but the header has 2");
  CHECK(Written(dir, "out").empty());
}

TEST_CASE("merge refuses inputs whose headers count more data files in all than a bundle may have") {
  // Each index large enough (a tensor named by 9 MiB of bytes) to count just over half of
  // the most data files a bundle may have (MaxShardsFor): each opens, their sum is refused.
  TempDir dir;
  const int32_t n = tfckpt::kMaxBundleShards / 2 + 1;
  std::vector<std::string> inputs;
  for (const char* name : {"x", "y"}) {
    inputs.push_back(dir / name);
    WriteIndex(inputs.back(), n, Scalars({{name + std::string(9 << 20, 'x'), 0}}));
    WriteFile(tfckpt::DataFileName(inputs.back(), 0, n), std::string(4, '\0'));
  }
  REQUIRE(tfckpt::OpenCheckpoint(inputs[0]).ok());
  CheckRefused(tfckpt::MergeBundles(inputs, dir / "out", {}), "header.num-shards", inputs[1] + ".index", dir);
}

TEST_CASE("a header counting more data files than its index can name is refused before any is listed") {
  TempDir dir;
  const std::string in = dir / "in";
  WriteIndex(in, tfckpt::kMaxBundleShards, Scalars({{"a", 0}}));
  WriteFile(tfckpt::DataFileName(in, 0, tfckpt::kMaxBundleShards), std::string(4, '\0'));
  auto c = tfckpt::OpenCheckpoint(in);
  REQUIRE(!c.ok());
  CHECK(tfckpt::ErrorInfoOf(c.status()).check == "header.num-shards");
  CHECK(std::string(c.status().message()).find("more than an index of") != std::string::npos);
  CheckRefused(tfckpt::MergeBundles({in}, dir / "out", {}), "header.num-shards", in + ".index", dir);
}

TEST_CASE("merge keeps an input's data files no entry uses, found among the files that exist") {
  TempDir dir;
  const std::string in = dir / "in";
  // Files 0 and 2 of 3 exist, file 1 does not; only file 0 is used. Then the same with a
  // header counting the most files so small an index may name (MaxShardsFor): the files
  // that exist are found, not every name the header allows probed.
  for (int32_t n : {3, static_cast<int32_t>(tfckpt::MaxShardsFor(0))}) {
    CAPTURE(n);
    WriteIndex(in, n, Scalars({{"a", 0}}));
    WriteFile(tfckpt::DataFileName(in, 0, n), "used");
    WriteFile(tfckpt::DataFileName(in, 2, n), "unused");
    WriteFile(tfckpt::DataFileName(in, 2, n + 1), "another count");
    const std::string out = dir / ("out" + std::to_string(n));
    auto merged = tfckpt::MergeBundles({in}, out, {});
    REQUIRE(merged.ok());
    CHECK(merged->num_files == 2);
    CHECK(ReadFile(tfckpt::DataFileName(out, 0, 2)) == "used");
    CHECK(ReadFile(tfckpt::DataFileName(out, 1, 2)) == "unused");
    auto c = tfckpt::OpenCheckpoint(out);
    REQUIRE(c.ok());
    CHECK((*c)->info().num_shards == n);  // the header's sum, as TF writes it
  }
}

TEST_CASE("merge refuses a partitioned tensor whose inputs list more slices together than the reader accepts") {
  // Each input's metadata entry lists 1000 slices of "t" and holds none of them: each input
  // opens (slice.missing-entry is a defect of "t"), but the merged entry would list 2000
  // slices with no slice entry, which the reader refuses (entry.slices): merge refuses it
  // first, naming the input that brings the list over.
  TempDir dir;
  std::vector<std::string> inputs;
  for (const char* name : {"x", "y"}) {
    inputs.push_back(dir / name);
    tfckpt::pb::BundleEntryProto meta = tfckpt::MakeEntry(kFloat, {2000}, 0, 0, 0, 0);
    for (int i = 0; i < 1000; ++i) {
      auto* extent = meta.add_slices()->add_extent();
      extent->set_start(2 * i + (name[0] == 'y'));
      extent->set_length(1);
    }
    WriteIndex(inputs.back(), 1, {{"t", meta}});
    WriteFile(tfckpt::DataFileName(inputs.back(), 0, 1), "");
    REQUIRE(tfckpt::OpenCheckpoint(inputs.back()).ok());
  }
  auto merged = tfckpt::MergeBundles(inputs, dir / "out", {});
  CheckRefused(merged, "entry.slices", inputs[1] + ".index", dir);
  CHECK(tfckpt::ErrorInfoOf(merged.status()).key == "t");
}
