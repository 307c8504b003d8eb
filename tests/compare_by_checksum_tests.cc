// Unit tests of CompareOptions::by_checksum: equality of a copy proven from CRCs with the
// new side read once; anything else compared (and reported) as without it.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "test_util.h"
#include "base/crc32c.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/open.h"
#include "format/safetensors/safetensors.h"
#include "tfckpt/status.h"
#include "validate/compare.h"

namespace {

using tfckpt::Region;

// [6, 4] float32 = i, the same values in every checkpoint unless `changed` (then element
// [4, 1] is 100).
std::string Values(bool changed = false) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  if (changed) v[4 * 4 + 1] = 100;
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Writes tensor "t" to PREFIX in the given slices (an empty list: whole).
void Write(const std::string& prefix, const std::vector<Region>& slices, const std::string& bytes) {
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
  REQUIRE(w.ok());
  if (slices.empty()) REQUIRE((*w)->Add("t", 1, {6, 4}, bytes).ok());
  for (const Region& r : slices) {
    const size_t begin = static_cast<size_t>((r.start[0] * 4 + r.start[1]) * 4);
    std::string part;
    for (int64_t row = 0; row < r.shape[0]; ++row) {
      part += bytes.substr(begin + static_cast<size_t>(row * 16), static_cast<size_t>(r.shape[1] * 4));
    }
    REQUIRE((*w)->AddSlice("t", 1, {6, 4}, r, part).ok());
  }
  REQUIRE((*w)->Finish().ok());
}

// Flips the first data byte of PREFIX's one data file.
void Damage(const std::string& prefix) {
  const std::string path = prefix + ".data-00000-of-00001";
  std::string data = tfckpt::testing::ReadFile(path);
  data[0] = static_cast<char>(data[0] ^ 1);
  tfckpt::testing::WriteFile(path, data);
}

// With `read_back`, every new piece counts as read back by its writer (crc_holds).
absl::StatusOr<tfckpt::ValueDifference> Compare(const std::string& new_prefix, const std::string& old_prefix,
                                                bool by_checksum, bool read_back = false) {
  auto a = tfckpt::OpenCheckpoint(new_prefix);
  auto b = tfckpt::OpenCheckpoint(old_prefix);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  tfckpt::CompareOptions o;
  o.by_checksum = by_checksum;
  if (read_back) o.crc_holds = [](const tfckpt::StoredSlice&) { return true; };
  return tfckpt::CompareTensorValues(**a, *(*a)->Find("t"), **b, *(*b)->Find("t"), o);
}

const std::vector<Region> kOldRows = {Region{{0, 0}, {2, 4}}, Region{{2, 0}, {4, 4}}};
const std::vector<Region> kNewRows = {Region{{0, 0}, {3, 4}}, Region{{3, 0}, {1, 4}}, Region{{4, 0}, {2, 4}}};

}  // namespace

TEST_CASE("by_checksum: a copy is proven equal from the new side alone, whatever the axis-0 cuts") {
  tfckpt::testing::TempDir dir;
  const std::string old_prefix = dir / "old";
  Write(old_prefix, kOldRows, Values());
  int n = 0;
  for (const auto& slices : {kNewRows, kOldRows, std::vector<Region>{}}) {
    const std::string new_prefix = dir / ("new" + std::to_string(n++));
    Write(new_prefix, slices, Values());
    auto d = Compare(new_prefix, old_prefix, true);
    REQUIRE(d.ok());
    CHECK(d->differing == 0);
    CHECK(d->elements == 24);
  }
  // Unpartitioned on both sides.
  Write(dir / "old_whole", {}, Values());
  auto d = Compare(dir / "new2", dir / "old_whole", true);
  REQUIRE(d.ok());
  CHECK(d->differing == 0);
}

TEST_CASE("by_checksum: the old side's data is not read when the CRCs prove the copy") {
  tfckpt::testing::TempDir dir;
  Write(dir / "old", kOldRows, Values());
  Write(dir / "new", kNewRows, Values());
  Damage(dir / "old");  // its stored CRCs still describe the values the copy holds
  auto plain = Compare(dir / "new", dir / "old", false);
  REQUIRE_FALSE(plain.ok());
  CHECK(tfckpt::ErrorInfoOf(plain.status()).check == "data.crc");
  auto d = Compare(dir / "new", dir / "old", true);
  REQUIRE(d.ok());
  CHECK(d->differing == 0);
}

TEST_CASE("by_checksum: differences, a damaged new side and other cuts are reported as without it") {
  tfckpt::testing::TempDir dir;
  Write(dir / "old", kOldRows, Values());
  SUBCASE("a value differs") {
    Write(dir / "new", kNewRows, Values(/*changed=*/true));
    auto plain = Compare(dir / "new", dir / "old", false);
    auto d = Compare(dir / "new", dir / "old", true);
    REQUIRE(plain.ok());
    REQUIRE(d.ok());
    CHECK(d->differing == 1);
    CHECK(d->first.index == std::vector<int64_t>{4, 1});
    CHECK(d->first.new_value == plain->first.new_value);
    CHECK(d->first.old_value == plain->first.old_value);
  }
  SUBCASE("the new side is damaged") {
    Write(dir / "new", kNewRows, Values());
    Damage(dir / "new");
    auto d = Compare(dir / "new", dir / "old", true);
    REQUIRE_FALSE(d.ok());
    CHECK(tfckpt::ErrorInfoOf(d.status()).check == "data.crc");
    CHECK(tfckpt::ErrorInfoOf(d.status()).file.find("new.data") != std::string::npos);
  }
  SUBCASE("a cut on axis 1: compared element by element, the old side read") {
    Write(dir / "new", {Region{{0, 0}, {6, 1}}, Region{{0, 1}, {6, 3}}}, Values());
    Damage(dir / "old");
    auto d = Compare(dir / "new", dir / "old", true);
    REQUIRE_FALSE(d.ok());
    CHECK(tfckpt::ErrorInfoOf(d.status()).check == "data.crc");
  }
}

TEST_CASE("by_checksum: new pieces read back, an old side without CRCs (safetensors) is read once against their CRCs") {
  tfckpt::testing::TempDir dir;
  for (bool changed : {false, true}) {
    CAPTURE(changed);
    const std::string st = dir / (changed ? "c.safetensors" : "s.safetensors");
    {
      auto w = tfckpt::SafetensorsWriter::Create(tfckpt::Location::Of(st), {{"t", 1, {6, 4}}}, {});
      REQUIRE(w.ok());
      REQUIRE((*w)->Append(Values()).ok());
      REQUIRE((*w)->Finish().ok());
      REQUIRE((*w)->Commit().ok());
    }
    const std::string new_prefix = dir / (changed ? "newc" : "new");
    Write(new_prefix, kNewRows, Values(changed));
    auto d = Compare(new_prefix, st, /*by_checksum=*/true, /*read_back=*/true);
    REQUIRE(d.ok());
    CHECK(d->differing == (changed ? 1 : 0));  // a difference is found and reported as without it
  }
}

TEST_CASE("by_checksum: an old side without CRCs whose pieces' CRCs the copy noted (source_crc) is not read") {
  tfckpt::testing::TempDir dir;
  const std::string st = dir / "s.safetensors";
  {
    auto w = tfckpt::SafetensorsWriter::Create(tfckpt::Location::Of(st), {{"t", 1, {6, 4}}}, {});
    REQUIRE(w.ok());
    REQUIRE((*w)->Append(Values()).ok());
    REQUIRE((*w)->Finish().ok());
    REQUIRE((*w)->Commit().ok());
  }
  Write(dir / "new", kNewRows, Values());
  // The input changes after the copy: its last element's top byte (element [5, 3]).
  std::string bytes = tfckpt::testing::ReadFile(st);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x40);
  tfckpt::testing::WriteFile(st, bytes);
  auto a = tfckpt::OpenCheckpoint(dir / "new");
  auto b = tfckpt::OpenCheckpoint(st);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const tfckpt::StoredData where = (*b)->Find("t")->slices[0].data;
  auto compare = [&](std::optional<uint32_t> noted) {
    tfckpt::CompareOptions o;
    o.by_checksum = true;
    o.crc_holds = [](const tfckpt::StoredSlice&) { return true; };
    o.source_crc = [&](const tfckpt::Checkpoint& c, const tfckpt::StoredSlice& s) -> std::optional<uint32_t> {
      CHECK(c.info().data_files.at(static_cast<size_t>(s.data.shard)) == st);
      CHECK(s.data.offset == where.offset);
      CHECK(s.data.size == where.size);
      return noted;
    };
    auto d = tfckpt::CompareTensorValues(**a, *(*a)->Find("t"), **b, *(*b)->Find("t"), o);
    REQUIRE(d.ok());
    return d->differing;
  };
  const uint32_t copied = tfckpt::crc32c::Value(Values());  // the CRC the copy took
  CHECK(compare(copied) == 0);                // proven by CRCs: the input is not read again
  CHECK(compare(std::nullopt) == 1);          // nothing noted: read, and the change found
  CHECK(compare(copied ^ 1) == 1);            // a CRC the new pieces do not have: read, as without it
}
