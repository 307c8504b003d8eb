// Writer round trips, table writing/reading, and reader failures on damaged tables.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <mutex>
#include <algorithm>
#include <chrono>
#include <atomic>

#include "test_util.h"
#include "base/crc32c.h"
#include "model/tensor_encoding.h"
#include "format/bundle/bundle_proto.h"
#include "format/table/table.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "kvstore/local/tracked.h"
#include "run/run.h"
#include "tfckpt/storage.h"
#include "tfckpt/open.h"
#include "model/values.h"

using tfckpt::testing::ReadFile;
using tfckpt::testing::TempDir;
using tfckpt::testing::WriteFile;

namespace {

std::string RandomBytes(size_t n, std::mt19937& rng) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// The full tensor of `t` assembled from its pieces (test helper: small tensors only).
std::string Assemble(const tfckpt::Checkpoint& c, const tfckpt::TensorEntry& t) {
  const int esize = tfckpt::LookupDType(t.dtype)->element_size;
  const int64_t n = *tfckpt::NumElements(t.shape);
  std::string full(static_cast<size_t>(n * esize), '\0');
  const auto strides = tfckpt::Strides(t.shape);
  for (const auto& s : t.slices) {
    auto b = c.Read(t, s);
    REQUIRE(b.ok());
    const int64_t m = s.region.num_elements();
    std::vector<int64_t> idx(s.region.rank(), 0);
    for (int64_t k = 0; k < m; ++k) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += (s.region.start[d] + idx[d]) * strides[d];
      std::memcpy(full.data() + off * esize, b->data.data() + k * esize, esize);
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < s.region.shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  return full;
}

}  // namespace

TEST_CASE("writer round trip: every fixed-size dtype, scalars and 0-element tensors") {
  TempDir dir;
  std::mt19937 rng(7);
  const std::string prefix = dir / "ckpt";
  struct Want {
    std::string name;
    int32_t dtype;
    tfckpt::Shape shape;
    std::string payload;
  };
  std::vector<Want> wants;
  for (int32_t dt = 1; dt <= 33; ++dt) {
    const tfckpt::DTypeInfo* info = tfckpt::LookupDType(dt);
    if (info == nullptr || info->element_size == 0) continue;
    wants.push_back({"t" + std::to_string(dt) + "/matrix", dt, {3, 5}, RandomBytes(15 * info->element_size, rng)});
    wants.push_back({"t" + std::to_string(dt) + "/scalar", dt, {}, RandomBytes(info->element_size, rng)});
    wants.push_back({"t" + std::to_string(dt) + "/empty", dt, {4, 0}, ""});
  }
  {
    tfckpt::BundleWriterOptions o;
    o.num_shards = 3;
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
    REQUIRE(w.ok());
    for (size_t i = 0; i < wants.size(); ++i) {
      REQUIRE((*w)->Add(wants[i].name, wants[i].dtype, wants[i].shape, wants[i].payload, i % 3).ok());
    }
    REQUIRE((*w)->Finish().ok());
  }
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  CHECK((*c)->info().num_shards == 3);
  CHECK((*c)->tensors().size() == wants.size());
  for (const Want& want : wants) {
    CAPTURE(want.name);
    const tfckpt::TensorEntry* t = (*c)->Find(want.name);
    REQUIRE(t != nullptr);
    CHECK(t->dtype == want.dtype);
    CHECK(t->shape == want.shape);
    CHECK_FALSE(t->partitioned);
    auto b = (*c)->Read(*t, t->slices[0]);
    REQUIRE(b.ok());
    CHECK(std::string(b->data) == want.payload);
  }
  // 0-element tensors carry the masked CRC of nothing (docs/FORMAT.md §i).
  CHECK((*c)->Find("t1/empty")->slices[0].data.masked_crc == 0xA282EAD8u);
}

TEST_CASE("writer round trip: strings, including empty strings and multi-element") {
  TempDir dir;
  const std::string prefix = dir / "s";
  std::vector<std::vector<std::string_view>> cases = {
      {""}, {"abc"}, {"", "abc", "", std::string_view("\0\xff", 2)}, {}, {"x", "yy", "zzz", "wwww", "", "v"}};
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
    REQUIRE(w.ok());
    for (size_t i = 0; i < cases.size(); ++i) {
      std::string payload;
      tfckpt::EncodeStrings(cases[i], &payload);
      tfckpt::Shape shape = i == 0 ? tfckpt::Shape{} : tfckpt::Shape{static_cast<int64_t>(cases[i].size())};
      REQUIRE((*w)->Add("s" + std::to_string(i), 7, shape, payload).ok());
    }
    REQUIRE((*w)->Finish().ok());
  }
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto* t = (*c)->Find("s" + std::to_string(i));
    REQUIRE(t != nullptr);
    auto b = (*c)->Read(*t, t->slices[0]);
    REQUIRE(b.ok());
    auto d = tfckpt::DecodeStrings(b->data, static_cast<int64_t>(cases[i].size()));
    REQUIRE(d.ok());
    REQUIRE(d->elements.size() == cases[i].size());
    for (size_t k = 0; k < cases[i].size(); ++k) CHECK(d->elements[k] == cases[i][k]);
  }
}

TEST_CASE("writer round trip: partitioned tensors on several axes and files") {
  TempDir dir;
  std::mt19937 rng(11);
  const std::string prefix = dir / "p";
  const tfckpt::Shape full{10, 6};
  std::string whole = RandomBytes(60 * 4, rng);
  // Rows [0,4) [4,7) [7,10) x cols [0,3) [3,6): six slices.
  std::vector<tfckpt::Region> regions;
  for (auto [r0, rn] : {std::pair{0, 4}, {4, 3}, {7, 3}}) {
    for (auto [c0, cn] : {std::pair{0, 3}, {3, 3}}) regions.push_back({{r0, c0}, {rn, cn}});
  }
  {
    tfckpt::BundleWriterOptions o;
    o.num_shards = 2;
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
    REQUIRE(w.ok());
    for (size_t i = 0; i < regions.size(); ++i) {
      std::string part;
      for (int64_t r = 0; r < regions[i].shape[0]; ++r) {
        part.append(whole, ((regions[i].start[0] + r) * 6 + regions[i].start[1]) * 4, regions[i].shape[1] * 4);
      }
      REQUIRE((*w)->AddSlice("emb", 1, full, regions[i], part, i % 2).ok());
    }
    // A slice covering the whole tensor is a plain entry.
    REQUIRE((*w)->AddSlice("whole", 1, {2}, tfckpt::Region{{0}, {2}}, std::string(8, 'a')).ok());
    // Refusals: duplicate slice, mismatched full shape, wrong payload size, bad shard.
    CHECK_FALSE((*w)->AddSlice("emb", 1, full, regions[0], std::string(48, 'x')).ok());
    CHECK_FALSE((*w)->AddSlice("emb", 1, {10, 7}, tfckpt::Region{{0, 0}, {1, 1}}, std::string(4, 'x')).ok());
    CHECK_FALSE((*w)->Add("other", 1, {2}, "abc").ok());
    CHECK_FALSE((*w)->Add("other", 1, {1}, "abcd", 5).ok());
    CHECK_FALSE((*w)->Add("whole", 1, {2}, std::string(8, 'b')).ok());
    REQUIRE((*w)->Finish().ok());
  }
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  CHECK((*c)->tensors().size() == 2);
  const auto* t = (*c)->Find("emb");
  REQUIRE(t != nullptr);
  CHECK(t->partitioned);
  CHECK(t->slices.size() == 6);
  CHECK(t->defect == "");
  CHECK(Assemble(**c, *t) == whole);
  CHECK_FALSE((*c)->Find("whole")->partitioned);
  // Element lookup across slices: element [9, 5] is the last float.
  float last;
  std::memcpy(&last, whole.data() + 59 * 4, 4);
  auto text = tfckpt::FormatValues(**c, *t, {});
  REQUIRE(text.ok());
  REQUIRE(text->size() > 2);
  REQUIRE(text->substr(text->size() - 2) == "]]");
  const size_t start = text->find_last_of(" [\n", text->size() - 3) + 1;
  const float printed = std::strtof(text->substr(start, text->size() - 2 - start).c_str(), nullptr);
  CHECK((printed == last || (std::isnan(printed) && std::isnan(last))));
}

TEST_CASE("writer refuses to overwrite and leaves no output on failure") {
  TempDir dir;
  const std::string prefix = dir / "x";
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
    REQUIRE(w.ok());
    REQUIRE((*w)->Add("a", 1, {}, std::string(4, '\0')).ok());
    REQUIRE((*w)->Finish().ok());
  }
  auto again = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
  CHECK(absl::IsAlreadyExists(again.status()));
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "abandoned"));
    REQUIRE(w.ok());
    REQUIRE((*w)->Add("a", 1, {}, std::string(4, '\0')).ok());
    // destroyed without Finish()
  }
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    CHECK(e.path().filename().string().rfind("abandoned", 0) != 0);
  }
  tfckpt::BundleWriterOptions o;
  o.overwrite = true;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
  REQUIRE(w.ok());
  REQUIRE((*w)->Add("b", 1, {}, std::string(4, '\0')).ok());
  REQUIRE((*w)->Finish().ok());
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  CHECK((*c)->Find("b") != nullptr);
  CHECK((*c)->Find("a") == nullptr);
}

TEST_CASE("streaming entries compute the CRC while writing") {
  TempDir dir;
  const std::string prefix = dir / "st";
  std::string data(4 * 1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
    REQUIRE(w.ok());
    auto s = (*w)->BeginEntry("v", 1, {1000}, std::nullopt);
    REQUIRE(s.ok());
    CHECK_FALSE((*w)->Add("other", 1, {}, "abcd").ok());  // a stream is open
    for (size_t at = 0; at < data.size(); at += 333) REQUIRE(s->Append(std::string_view(data).substr(at, 333)).ok());
    REQUIRE(s->Close().ok());
    REQUIRE((*w)->Finish().ok());
  }
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  const auto* t = (*c)->Find("v");
  CHECK(t->slices[0].data.masked_crc == tfckpt::crc32c::Mask(tfckpt::crc32c::Value(data)));
  CHECK((*c)->Read(*t, t->slices[0]).ok());
}

TEST_CASE("positional entries written by several threads in any order equal appended ones") {
  TempDir dir;
  std::mt19937 rng(5);
  // Twelve float slices of a [12, 300] tensor (rows cut in 12), a string tensor and a
  // whole tensor, over two data files; appended in order vs. laid out and written
  // positionally from four threads in reverse order, streams in uneven parts.
  const tfckpt::Shape full{12, 300};
  std::vector<std::string> parts;
  for (int i = 0; i < 12; ++i) parts.push_back(RandomBytes(300 * 4, rng));
  std::string strings;
  tfckpt::EncodeStrings({"a", "", "longer string"}, &strings);
  const std::string whole = RandomBytes(40, rng);
  auto region = [](int i) { return tfckpt::Region{{i, 0}, {1, 300}}; };
  tfckpt::BundleWriterOptions o;
  o.num_shards = 2;
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "appended"), o);
    REQUIRE(w.ok());
    for (int i = 0; i < 12; ++i) REQUIRE((*w)->AddSlice("emb", 1, full, region(i), parts[i], i % 2).ok());
    REQUIRE((*w)->Add("names", 7, {3}, strings, 1).ok());
    REQUIRE((*w)->Add("whole", 1, {10}, whole, 0).ok());
    REQUIRE((*w)->Finish().ok());
  }
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "positional"), o);
    REQUIRE(w.ok());
    // Layout: file i%2 holds slices i in order, then "names" in file 1, "whole" in file 0.
    std::vector<uint64_t> at(12);
    uint64_t end[2] = {0, 0};
    for (int i = 0; i < 12; ++i) {
      at[i] = end[i % 2];
      end[i % 2] += parts[i].size();
    }
    REQUIRE((*w)->AddAt("names", 7, {3}, std::nullopt, strings, 1, end[1]).ok());
    REQUIRE((*w)->AddAt("whole", 1, {10}, std::nullopt, whole, 0, end[0]).ok());
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int th = 0; th < 4; ++th) {
      threads.emplace_back([&, th] {
        for (int i = 11 - th; i >= 0; i -= 4) {
          auto s = (*w)->BeginEntryAt("emb", 1, full, region(i), i % 2, at[i]);
          if (!s.ok()) {
            ++failures;
            continue;
          }
          for (size_t k = 0; k < parts[i].size(); k += 333) {
            if (!s->Append(std::string_view(parts[i]).substr(k, 333)).ok()) ++failures;
          }
          if (!s->Close().ok()) ++failures;
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(failures == 0);
    REQUIRE((*w)->Finish().ok());
  }
  for (const std::string suffix : {".index", ".data-00000-of-00002", ".data-00001-of-00002"}) {
    CAPTURE(suffix);
    CHECK(ReadFile(dir / ("positional" + suffix)) == ReadFile(dir / ("appended" + suffix)));
  }
  // A bad string payload is refused before anything is recorded.
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "bad"));
  REQUIRE(w.ok());
  CHECK_FALSE((*w)->AddAt("s", 7, {3}, std::nullopt, "\x05" "ab", 0, 0).ok());
  CHECK((*w)->AddAt("s", 7, {3}, std::nullopt, strings, 0, 0).ok());
}

TEST_CASE("tables: many blocks, a big entry in a block of its own, and point lookups") {
  TempDir dir;
  const std::string path = dir / "t.table";
  std::vector<std::pair<std::string, std::string>> kv;
  for (int i = 0; i < 20000; ++i) kv.emplace_back("key" + std::to_string(100000 + i), std::string(40, 'v'));
  kv.emplace_back("zbig", std::string(600 * 1024, 'B'));
  kv.emplace_back("zz", "after");
  {
    auto out = tfckpt::Storage::Local().Create(path);
    REQUIRE(out.ok());
    tfckpt::TableWriter w(out->get());
    for (const auto& [k, v] : kv) REQUIRE(w.Add(k, v).ok());
    CHECK_FALSE(w.Add("a", "out of order").ok());
    REQUIRE(w.Finish().ok());
    REQUIRE((*out)->Close().ok());
    REQUIRE((*out)->Commit().ok());
  }
  auto t = tfckpt::TableReader::Open(path);
  REQUIRE(t.ok());
  CHECK((*t)->data_blocks().size() > 3);
  size_t i = 0;
  bool ordered = true;
  REQUIRE((*t)->ForEach([&](std::string_view k, std::string_view v, uint64_t) {
                ordered = ordered && i < kv.size() && k == kv[i].first && v == kv[i].second;
                ++i;
                return absl::OkStatus();
              }).ok());
  CHECK(ordered);
  CHECK(i == kv.size());
  // The big entry sits alone in its block: its block's separator lies between zbig and zz.
  bool alone = false;
  for (const auto& b : (*t)->data_blocks()) alone = alone || (b.handle.size > 600 * 1024 && b.handle.size < 610 * 1024);
  CHECK(alone);
  auto hit = (*t)->Get("key100500");
  REQUIRE(hit.ok());
  CHECK(hit->value_or("") == std::string(40, 'v'));
  auto miss = (*t)->Get("key0");
  REQUIRE(miss.ok());
  CHECK_FALSE(miss->has_value());
}

TEST_CASE("table reader rejects damaged files with the offset in the message") {
  TempDir dir;
  const std::string path = dir / "t";
  {
    auto out = tfckpt::Storage::Local().Create(path);
    REQUIRE(out.ok());
    tfckpt::TableWriter w(out->get());
    REQUIRE(w.Add("a", "1").ok());
    REQUIRE(w.Add("b", "2").ok());
    REQUIRE(w.Finish().ok());
    REQUIRE((*out)->Close().ok());
    REQUIRE((*out)->Commit().ok());
  }
  const std::string good = ReadFile(path);
  auto open_all = [&](const std::string& bytes) -> absl::Status {
    WriteFile(path, bytes);
    auto t = tfckpt::TableReader::Open(path);
    if (!t.ok()) return t.status();
    return (*t)->ForEach([](std::string_view, std::string_view, uint64_t) { return absl::OkStatus(); });
  };
  CHECK(open_all(good).ok());
  CHECK_FALSE(open_all(good.substr(0, 40)).ok());  // shorter than a footer
  std::string bad_magic = good;
  bad_magic.back() ^= 1;
  absl::Status s = open_all(bad_magic);
  CHECK(absl::IsDataLoss(s));
  CHECK(std::string(s.message()).find("magic") != std::string::npos);
  std::string bad_block = good;
  bad_block[3] ^= 0x40;  // inside the data block
  s = open_all(bad_block);
  CHECK(absl::IsDataLoss(s));
  CHECK(std::string(s.message()).find("offset 0: block checksum mismatch") != std::string::npos);
  // Every truncation fails cleanly.
  for (size_t n = 0; n < good.size(); ++n) CHECK_FALSE(open_all(good.substr(0, n)).ok());
  // Every single-byte flip is either harmless padding or an error; never a crash.
  for (size_t at = 0; at < good.size(); ++at) {
    std::string flipped = good;
    flipped[at] ^= 0x5a;
    (void)open_all(flipped);
  }
}

TEST_CASE("big-endian bundles are checked on the raw bytes and byte-swapped on read") {
  TempDir dir;
  const std::string prefix = dir / "be";
  // Data file: float32 [2] = {1.5, -2.0} big-endian, then int16 scalar 0x0102, then the
  // strings {"ab", ""} whose length-checksum word is big-endian.
  const std::string f = tfckpt::testing::Bytes({0x3F, 0xC0, 0x00, 0x00, 0xC0, 0x00, 0x00, 0x00});
  const std::string i16 = tfckpt::testing::Bytes({0x01, 0x02});
  uint32_t lc = 0;
  for (uint32_t len : {2u, 0u}) {
    const unsigned char be[4] = {static_cast<unsigned char>(len >> 24), static_cast<unsigned char>(len >> 16),
                                 static_cast<unsigned char>(len >> 8), static_cast<unsigned char>(len)};
    lc = tfckpt::crc32c::Extend(lc, be, 4);
  }
  const uint32_t masked_lc = tfckpt::crc32c::Mask(lc);
  std::string str = tfckpt::testing::Bytes({0x02, 0x00});
  const std::string lc_be = tfckpt::testing::Bytes({static_cast<int>(masked_lc >> 24), static_cast<int>((masked_lc >> 16) & 0xff),
                                                    static_cast<int>((masked_lc >> 8) & 0xff), static_cast<int>(masked_lc & 0xff)});
  str += lc_be + "ab";
  uint32_t sc = tfckpt::crc32c::Extend(lc, lc_be.data(), 4);
  sc = tfckpt::crc32c::Extend(sc, "ab", 2);
  WriteFile(prefix + ".data-00000-of-00001", f + i16 + str);
  {
    auto out = tfckpt::Storage::Local().Create(prefix + ".index");
    REQUIRE(out.ok());
    tfckpt::TableWriter w(out->get());
    std::string v;
    tfckpt::MakeHeader(1, /*big_endian=*/true).SerializeToString(&v);
    REQUIRE(w.Add("", v).ok());
    v.clear();
    tfckpt::MakeEntry(1, {2}, 0, 0, 8, tfckpt::crc32c::Mask(tfckpt::crc32c::Value(f))).SerializeToString(&v);
    REQUIRE(w.Add("f", v).ok());
    v.clear();
    tfckpt::MakeEntry(5, {}, 0, 8, 2, tfckpt::crc32c::Mask(tfckpt::crc32c::Value(i16))).SerializeToString(&v);
    REQUIRE(w.Add("i", v).ok());
    v.clear();
    tfckpt::MakeEntry(7, {2}, 0, 10, str.size(), tfckpt::crc32c::Mask(sc)).SerializeToString(&v);
    REQUIRE(w.Add("s", v).ok());
    REQUIRE(w.Finish().ok());
    REQUIRE((*out)->Close().ok());
    REQUIRE((*out)->Commit().ok());
  }
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  CHECK((*c)->info().big_endian);
  auto fb = (*c)->Read(*(*c)->Find("f"), (*c)->Find("f")->slices[0]);
  REQUIRE(fb.ok());
  float vals[2];
  std::memcpy(vals, fb->data.data(), 8);
  CHECK(vals[0] == 1.5f);
  CHECK(vals[1] == -2.0f);
  auto ib = (*c)->Read(*(*c)->Find("i"), (*c)->Find("i")->slices[0]);
  REQUIRE(ib.ok());
  int16_t iv;
  std::memcpy(&iv, ib->data.data(), 2);
  CHECK(iv == 0x0102);
  auto sb = (*c)->Read(*(*c)->Find("s"), (*c)->Find("s")->slices[0]);
  REQUIRE(sb.ok());
  auto d = tfckpt::DecodeStrings(sb->data, 2);  // handed out in little-endian layout
  REQUIRE(d.ok());
  CHECK(d->elements[0] == "ab");
  CHECK(d->elements[1] == "");
}

// ---------------------------------------------------------------------------------------
// What a run creates is tracked and removed when it fails or is stopped (run/run.h,
// docs/RELIABILITY.md). Stopping by signal is tested end to end in
// crash_safety_test.py; here what a run undoes.

namespace {

// The names in `dir`, sorted.
std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A committed WritableFile holding "data".
std::string Committed(const std::string& path) {
  auto out = tfckpt::Storage::Local().Create(path);
  REQUIRE(out.ok());
  REQUIRE((*out)->Append("data").ok());
  REQUIRE((*out)->Close().ok());
  REQUIRE((*out)->Commit().ok());
  return path;
}

}  // namespace

TEST_CASE("a failed run removes the outputs and directories it made, newest first; a successful one keeps them") {
  TempDir dir;
  const std::string existing = dir / "old";
  WriteFile(existing, "not ours");
  std::string f, g;
  {
    tfckpt::Run run;
    tfckpt::RunScope scope(&run);
    REQUIRE(tfckpt::Storage::Local().CreateParentDirectories(dir / "a/b/f").ok());
    f = Committed(dir / "a/b/f");
    g = Committed(dir / "g");
    tfckpt::TrackCreated(dir / "z.", tfckpt::TrackKind::kFilesStartingWith);
    WriteFile(dir / "z.tmp1", "libzip's");
    WriteFile(dir / "zz", "other");
    {
      auto abandoned = tfckpt::Storage::Local().Create(dir / "h");  // destroyed uncommitted
      REQUIRE(abandoned.ok());
    }
    run.Undo();
  }
  CHECK_FALSE(std::filesystem::exists(f));
  CHECK_FALSE(std::filesystem::exists(dir / "a"));  // emptied, then removed with its parent
  CHECK_FALSE(std::filesystem::exists(g));
  CHECK_FALSE(std::filesystem::exists(dir / "z.tmp1"));
  CHECK(std::filesystem::exists(dir / "zz"));
  CHECK(std::filesystem::exists(existing));
  CHECK(std::filesystem::is_directory(dir.path()));
  CHECK(std::vector<std::string>{"old", "zz"} == Listing(dir.path()));
  // After success nothing is removed, even by a later Undo.
  std::string kept;
  {
    tfckpt::Run run;
    tfckpt::RunScope scope(&run);
    kept = Committed(dir / "kept");
    run.Keep();
    run.Undo();
  }
  CHECK(std::filesystem::exists(kept));
  // A run that ends neither kept nor undone is undone.
  {
    tfckpt::Run run;
    tfckpt::RunScope scope(&run);
    Committed(dir / "forgotten");
  }
  CHECK_FALSE(std::filesystem::exists(dir / "forgotten"));
  // Outside a run nothing is tracked: a committed file stays.
  Committed(dir / "no-run");
  CHECK(std::filesystem::exists(dir / "no-run"));
}

TEST_CASE("a directory that already exists is not tracked, nor removed") {
  TempDir dir;
  std::filesystem::create_directories(dir / "have");
  {
    tfckpt::Run run;
    tfckpt::RunScope scope(&run);
    REQUIRE(tfckpt::Storage::Local().CreateDirectories(dir / "have").ok());
    REQUIRE(tfckpt::Storage::Local().CreateDirectories(dir / "have/new/").ok());
    CHECK(std::filesystem::is_directory(dir / "have/new"));
    run.Undo();
  }
  CHECK_FALSE(std::filesystem::exists(dir / "have/new"));
  CHECK(std::filesystem::is_directory(dir / "have"));
  // A file where a directory should be: an error naming it.
  WriteFile(dir / "file", "x");
  auto s = tfckpt::Storage::Local().CreateDirectories(dir / "file/sub");
  CHECK_FALSE(s.ok());
  CHECK(std::string(s.message()).find("file") != std::string::npos);
}
