// Unit tests of tfckpt convert's library: WriteSafetensors and WriteNpz of a small
// checkpoint read back byte for byte (casts too), what each format cannot hold, and
// ParseCast's errors.
#include <doctest/doctest.h>

#include "absl/strings/str_join.h"

#include <zip.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "piece_util.h"
#include "test_util.h"
#include "tfckpt/commands.h"
#include "base/float_convert.h"
#include "model/tensor_encoding.h"
#include "format/npz/npz_reader.h"
#include "format/npz/stored_zip.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "convert/convert.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "model/piece_reader.h"

namespace {

using tfckpt::testing::OnlyPiece;

using tfckpt::Region;

constexpr int32_t kFloat = 1, kInt64 = 9, kString = 7, kBFloat16 = 14;

template <typename T>
std::string BytesOf(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// "rows" [4, 3] float32 = i / 4 in two row slices, "step" int64 = 42, "bf" [2] bfloat16,
// "words" [2] strings.
std::unique_ptr<tfckpt::Checkpoint> Source(const tfckpt::testing::TempDir& dir, std::string* rows_bytes) {
  std::vector<float> rows(12);
  for (int i = 0; i < 12; ++i) rows[i] = static_cast<float>(i) / 4;
  *rows_bytes = BytesOf(rows);
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "src"));
  REQUIRE(w.ok());
  REQUIRE((*w)->AddSlice("rows", kFloat, {4, 3}, Region{{0, 0}, {1, 3}}, rows_bytes->substr(0, 12)).ok());
  REQUIRE((*w)->AddSlice("rows", kFloat, {4, 3}, Region{{1, 0}, {3, 3}}, rows_bytes->substr(12)).ok());
  REQUIRE((*w)->Add("step", kInt64, {}, BytesOf(std::vector<int64_t>{42})).ok());
  REQUIRE((*w)->Add("bf", kBFloat16, {2}, BytesOf(std::vector<uint16_t>{0x3F80, 0xC040})).ok());  // 1, -3
  std::string words;
  tfckpt::EncodeStrings({"ab", "c"}, &words);
  REQUIRE((*w)->Add("words", kString, {2}, words).ok());
  REQUIRE((*w)->Finish().ok());
  auto c = tfckpt::OpenCheckpoint(dir / "src");
  REQUIRE(c.ok());
  return std::move(*c);
}

// Member NAME.npy of the archive at `path`: its header dictionary and its data.
struct Npy {
  std::string header, data;
};

Npy ReadNpy(const std::string& path, const std::string& name) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &err);
  REQUIRE(z != nullptr);
  zip_stat_t st;
  REQUIRE(zip_stat(z, (name + ".npy").c_str(), 0, &st) == 0);
  std::string bytes(static_cast<size_t>(st.size), '\0');
  zip_file_t* f = zip_fopen(z, (name + ".npy").c_str(), 0);
  REQUIRE(f != nullptr);
  REQUIRE(zip_fread(f, bytes.data(), st.size) == static_cast<zip_int64_t>(st.size));
  zip_fclose(f);
  zip_close(z);
  REQUIRE(bytes.compare(0, 6, "\x93NUMPY") == 0);
  REQUIRE(bytes[6] == 1);  // format 1.0: a 2-byte header length
  const size_t len = static_cast<uint8_t>(bytes[8]) | static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8;
  return {bytes.substr(10, len), bytes.substr(10 + len)};
}

}  // namespace

TEST_CASE("WriteSafetensors: values read back equal, partitioned tensors assembled, casts applied") {
  tfckpt::testing::TempDir dir;
  std::string rows;
  auto c = Source(dir, &rows);
  tfckpt::ConvertOptions o;
  o.casts[kBFloat16] = kFloat;
  const std::string out = dir / "out.safetensors";
  auto r = tfckpt::WriteSafetensors(*c, out, o);
  REQUIRE(r.ok());
  CHECK(r->tensors == 3);
  CHECK(r->files == std::vector<std::string>{out});
  REQUIRE(r->skipped.size() == 1);
  CHECK(r->skipped[0].rfind("words: ", 0) == 0);  // strings: safetensors has none
  auto back = tfckpt::OpenCheckpoint(out);
  REQUIRE(back.ok());
  CHECK((*back)->Find("rows")->shape == tfckpt::Shape{4, 3});
  CHECK(OnlyPiece(**back, "rows") == rows);
  CHECK(OnlyPiece(**back, "step") == BytesOf(std::vector<int64_t>{42}));
  CHECK((*back)->Find("bf")->dtype == kFloat);
  CHECK(OnlyPiece(**back, "bf") == BytesOf(std::vector<float>{1, -3}));
  // strict: what the format cannot hold is an error, and nothing is left.
  o.strict = true;
  auto strict = tfckpt::WriteSafetensors(*c, dir / "strict.safetensors", o);
  CHECK_FALSE(strict.ok());
  CHECK_FALSE(std::filesystem::exists(dir / "strict.safetensors"));
}

TEST_CASE("WriteNpz: each tensor a .npy member whose data reads back equal; bfloat16 needs a cast") {
  tfckpt::testing::TempDir dir;
  std::string rows;
  auto c = Source(dir, &rows);
  tfckpt::ConvertOptions o;
  auto refused = tfckpt::WriteNpz(*c, dir / "no.npz", o);
  REQUIRE_FALSE(refused.ok());
  CHECK(std::string(refused.status().message()).find("bfloat16 has no NumPy dtype") == 0);
  CHECK_FALSE(std::filesystem::exists(dir / "no.npz"));
  o.casts[kBFloat16] = kFloat;
  const std::string out = dir / "out.npz";
  auto r = tfckpt::WriteNpz(*c, out, o);
  REQUIRE(r.ok());
  CHECK(r->tensors == 4);
  const Npy x = ReadNpy(out, "rows");
  CHECK(x.header.find("'descr': '<f4'") != std::string::npos);
  CHECK(x.header.find("'shape': (4, 3)") != std::string::npos);
  CHECK(x.data == rows);
  CHECK(ReadNpy(out, "step").data == BytesOf(std::vector<int64_t>{42}));
  CHECK(ReadNpy(out, "bf").data == BytesOf(std::vector<float>{1, -3}));
  const Npy words = ReadNpy(out, "words");
  CHECK(words.header.find("'descr': '|S2'") != std::string::npos);
  CHECK(words.data == std::string("abc\0", 4));  // "ab", "c" padded to 2 bytes
}

TEST_CASE("OpenNpz reads through the storage; a failed read is the storage's error, naming the file and member") {
  tfckpt::testing::TempDir dir;
  std::string rows;
  auto c = Source(dir, &rows);
  tfckpt::ConvertOptions o;
  o.casts[kBFloat16] = kFloat;
  const std::string out = dir / "out.npz";
  REQUIRE(tfckpt::WriteNpz(*c, out, o).ok());
  auto back = tfckpt::OpenNpz(out);
  REQUIRE(back.ok());
  CHECK((*back)->tensors().size() == 4);
  CHECK(OnlyPiece(**back, "rows") == rows);
  std::string words;
  tfckpt::EncodeStrings({"ab", "c"}, &words);
  CHECK(OnlyPiece(**back, "words") == words);
  // Cut inside the data of "rows" after it was opened (the same file, shorter): libzip
  // alone would say "Read error"; the error is the storage's, placed at the member.
  const std::string whole = tfckpt::testing::ReadFile(out);
  const size_t at = whole.find(rows);
  REQUIRE(at != std::string::npos);
  std::filesystem::resize_file(out, at + 8);
  const tfckpt::TensorEntry* t = (*back)->Find("rows");
  REQUIRE(t != nullptr);
  auto cut = (*back)->Read(*t, t->slices[0]);
  REQUIRE_FALSE(cut.ok());
  const std::string message(cut.status().message());
  CAPTURE(message);
  CHECK(message.find("rows.npy") != std::string::npos);
  CHECK(message.find(out) != std::string::npos);
  CHECK(message.find("unexpected end of file") != std::string::npos);
  // Not an archive, and no file: errors naming the path.
  tfckpt::testing::WriteFile(dir / "not.npz", "not a zip archive");
  auto bad = tfckpt::OpenNpz(dir / "not.npz");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(bad.status().message()).find(dir / "not.npz") != std::string::npos);
  CHECK(std::string(bad.status().message()).find("not a readable zip archive") != std::string::npos);
  auto missing = tfckpt::OpenNpz(dir / "missing.npz");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message()).find(dir / "missing.npz") != std::string::npos);
}

TEST_CASE("ParseCast: FROM=TO names, unknown dtypes and casts not offered are errors") {
  auto ok = tfckpt::ParseCast("float32=bfloat16");
  REQUIRE(ok.ok());
  CHECK(*ok == std::make_pair(kFloat, kBFloat16));
  auto message = [](const std::string& text) {
    auto r = tfckpt::ParseCast(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  CHECK(message("float32") == "--cast \"float32\": expected FROM=TO");
  CHECK(message("float32=nosuch") == "--cast \"float32=nosuch\": unknown dtype");
  CHECK(message("int64=float32").rfind("--cast \"int64=float32\": not offered", 0) == 0);
  CHECK(message("bfloat16=float16").rfind("--cast \"bfloat16=float16\": not offered", 0) == 0);
  // The casts it offers are the words completion offers (CastWords), each one it parses.
  CHECK(tfckpt::CastWords() == std::vector<std::string>{"float32=bfloat16", "float32=float16", "float32=float64",
                                                       "bfloat16=float32", "float16=float32", "float64=float32"});
  for (const std::string& w : tfckpt::CastWords()) CHECK(tfckpt::ParseCast(w).ok());
  CHECK(message("int64=float32").find(absl::StrJoin(tfckpt::CastWords(), ", ")) != std::string::npos);
}

namespace {

// Tables "emb_K" [rows, 8] float32 in 3 row slices over 2 data files, "dense" [5, 3]
// whole, and "bf" bfloat16 in 2 row slices: enough units for several threads.
std::unique_ptr<tfckpt::Checkpoint> Tables(const tfckpt::testing::TempDir& dir) {
  tfckpt::BundleWriterOptions wo;
  wo.num_shards = 2;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(dir / "tables"), wo);
  REQUIRE(w.ok());
  for (int k = 0; k < 4; ++k) {
    const int64_t rows = 1000 + 37 * k;
    std::vector<float> v(static_cast<size_t>(rows * 8));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f + k;
    const std::string all = BytesOf(v);
    int64_t at = 0;
    for (int s = 0; s < 3; ++s) {
      const int64_t n = rows / 3 + (s < rows % 3 ? 1 : 0);
      REQUIRE((*w)->AddSlice("emb_" + std::to_string(k), kFloat, {rows, 8}, Region{{at, 0}, {n, 8}},
                             all.substr(static_cast<size_t>(at * 32), static_cast<size_t>(n * 32)), s % 2)
                  .ok());
      at += n;
    }
  }
  REQUIRE((*w)->Add("dense", kFloat, {5, 3}, BytesOf(std::vector<float>(15, 0.5f)), 1).ok());
  REQUIRE((*w)->AddSlice("bf", kBFloat16, {4}, Region{{0}, {2}}, BytesOf(std::vector<uint16_t>{0x3F80, 0x4000})).ok());
  REQUIRE((*w)->AddSlice("bf", kBFloat16, {4}, Region{{2}, {2}}, BytesOf(std::vector<uint16_t>{0x4040, 0xC040}), 1).ok());
  REQUIRE((*w)->Finish().ok());
  auto c = tfckpt::OpenCheckpoint(dir / "tables");
  REQUIRE(c.ok());
  return std::move(*c);
}

}  // namespace

TEST_CASE("WriteSafetensors and WriteNpz: the bytes do not depend on the number of threads") {
  tfckpt::testing::TempDir dir;
  auto c = Tables(dir);
  std::map<int, std::vector<std::string>> bytes;  // jobs -> every file written
  for (int jobs : {1, 4}) {
    const std::string j = dir / ("j" + std::to_string(jobs));  // the same names in each
    tfckpt::ConvertOptions o;
    o.jobs = jobs;
    o.casts[kBFloat16] = kFloat;
    auto one = tfckpt::WriteSafetensors(*c, j + "/one.safetensors", o);
    REQUIRE(one.ok());
    o.max_file_size = 40000;
    auto set = tfckpt::WriteSafetensors(*c, j + "/set.safetensors", o);
    REQUIRE(set.ok());
    CHECK(set->files.size() > 3);
    o.max_file_size = 0;
    auto npz = tfckpt::WriteNpz(*c, j + "/m.npz", o);
    REQUIRE(npz.ok());
    for (const auto& r : {*one, *set, *npz}) {
      for (const std::string& f : r.files) bytes[jobs].push_back(tfckpt::testing::ReadFile(f));
    }
  }
  CHECK(bytes[1] == bytes[4]);
  // And they hold the values: the .npz read back through the in-place reader.
  auto back = tfckpt::OpenNpz(dir / "j4/m.npz");
  REQUIRE(back.ok());
  const tfckpt::TensorEntry* t = (*back)->Find("emb_2");
  REQUIRE(t != nullptr);
  std::string buffer;
  tfckpt::TensorBytes owner;
  auto row = (*back)->ReadRange(*t, t->slices[0], 8 * 4 * 500, 8 * 4 * 501, &buffer, &owner);
  REQUIRE(row.ok());
  std::vector<float> want(8);
  for (int i = 0; i < 8; ++i) want[static_cast<size_t>(i)] = static_cast<float>(500 * 8 + i) * 0.25f + 2;
  CHECK(*row == BytesOf(want));
}

TEST_CASE("OpenNpz: stored members are checked in place; a flipped byte is a CRC-32 mismatch naming the member") {
  tfckpt::testing::TempDir dir;
  auto c = Tables(dir);
  tfckpt::ConvertOptions o;
  o.casts[kBFloat16] = kFloat;
  const std::string out = dir / "m.npz";
  REQUIRE(tfckpt::WriteNpz(*c, out, o).ok());
  std::string whole = tfckpt::testing::ReadFile(out);
  {
    auto back = tfckpt::OpenNpz(out);
    REQUIRE(back.ok());
    std::string buffer;
    for (const tfckpt::TensorEntry& t : (*back)->tensors()) CHECK((*back)->VerifyCrc(t, t.slices[0], &buffer).ok());
    // A PayloadCheck fed the payload holds; fed another byte, it fails.
    const tfckpt::TensorEntry& t = *(*back)->Find("emb_1");
    auto whole_payload = (*back)->Read(t, t.slices[0]);
    REQUIRE(whole_payload.ok());
    auto check = (*back)->StartPayloadCheck(t, t.slices[0]);
    REQUIRE(check != nullptr);
    check->Feed(whole_payload->data);
    CHECK(check->Finish().ok());
    auto wrong = (*back)->StartPayloadCheck(t, t.slices[0]);
    std::string changed(whole_payload->data);
    changed[100] ^= 1;
    wrong->Feed(changed);
    CHECK(tfckpt::ErrorInfoOf(wrong->Finish()).check == "npz.member");
  }
  {  // a byte inside emb_1's data
    auto file = tfckpt::Storage::Local().OpenForRead(out);
    REQUIRE(file.ok());
    auto members = tfckpt::zip::ReadDirectory(**file);
    REQUIRE(members.ok());
    for (const auto& m : *members) {
      if (m.name != "emb_1.npy") continue;
      auto start = tfckpt::zip::DataStart(**file, m);
      REQUIRE(start.ok());
      whole[*start + 1000] ^= 0x04;
    }
  }
  tfckpt::testing::WriteFile(out, whole);
  auto back = tfckpt::OpenNpz(out);
  REQUIRE(back.ok());
  const tfckpt::TensorEntry& t = *(*back)->Find("emb_1");
  std::string buffer;
  const absl::Status st = (*back)->VerifyCrc(t, t.slices[0], &buffer);
  REQUIRE_FALSE(st.ok());
  CHECK(tfckpt::ErrorInfoOf(st).check == "npz.member");
  CHECK(std::string(st.message()).find("emb_1.npy: CRC-32 mismatch") != std::string::npos);
  CHECK((*back)->VerifyCrc(*(*back)->Find("emb_2"), (*back)->Find("emb_2")->slices[0], &buffer).ok());
}
