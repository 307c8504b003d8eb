// Stored-member zip archives (src/format/npz/stored_zip.h): ISA-L's CRC-32 against zlib's,
// the writer's archives read by libzip (with its consistency check) and by our own
// directory reader, members written from several threads in any order, zip64 records,
// names refused.
#include <doctest/doctest.h>

#include <zip.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "format/npz/stored_zip.h"
#include "test_util.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"

namespace {

namespace zip = tfckpt::zip;
using tfckpt::testing::TempDir;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

uint32_t ZlibCrc(const std::string& s) {
  return static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

// Every member of the archive at `path` as libzip reads it (ZIP_CHECKCONS: local headers
// against the central directory; each member read to its end, where libzip checks the
// CRC-32), by name.
std::vector<std::pair<std::string, std::string>> ReadWithLibzip(const std::string& path) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
  REQUIRE(z != nullptr);
  std::vector<std::pair<std::string, std::string>> out;
  for (zip_int64_t i = 0; i < zip_get_num_entries(z, 0); ++i) {
    zip_stat_t st;
    REQUIRE(zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st) == 0);
    CHECK(st.comp_method == ZIP_CM_STORE);
    std::string data(static_cast<size_t>(st.size), '\0');
    zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
    REQUIRE(f != nullptr);
    CHECK(zip_fread(f, data.data(), data.size()) == static_cast<zip_int64_t>(data.size()));
    char extra;
    CHECK(zip_fread(f, &extra, 1) == 0);  // the end: the CRC is checked here
    zip_fclose(f);
    out.emplace_back(st.name, data);
  }
  zip_close(z);
  return out;
}

}  // namespace

TEST_CASE("zip: Crc32 is zlib's CRC-32, and Crc32Concat joins the CRCs of parts") {
  const std::string s = RandomBytes(3 << 20, 1);
  CHECK(zip::Crc32(0, s.data(), s.size()) == ZlibCrc(s));
  CHECK(zip::Crc32(0, "", 0) == 0);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{4096}, s.size() - 7, s.size()}) {
    CAPTURE(cut);
    const uint32_t a = zip::Crc32(0, s.data(), cut), b = zip::Crc32(0, s.data() + cut, s.size() - cut);
    CHECK(zip::Crc32(a, s.data() + cut, s.size() - cut) == ZlibCrc(s));
    CHECK(zip::Crc32Concat(a, b, s.size() - cut) == ZlibCrc(s));
  }
}

TEST_CASE("zip: members written from several threads in any order read back through libzip and the directory") {
  TempDir dir;
  const std::string path = dir / "a.npz";
  std::vector<std::string> data;
  std::vector<zip::StoredZipWriter::Member> members;
  for (int i = 0; i < 12; ++i) {
    data.push_back(RandomBytes(static_cast<size_t>(i * 7919 % 100000), static_cast<uint32_t>(i)));
    members.push_back({i == 5 ? "\xc3\xa9t\xc3\xa9/w.npy" : "m" + std::to_string(i) + ".npy", data.back().size()});
  }
  members.push_back({"empty.npy", 0});
  data.emplace_back();
  auto w = zip::StoredZipWriter::Create(tfckpt::Location::Of(path), members);
  REQUIRE(w.ok());
  // Two threads, each member in two parts written back to front, CRCs joined.
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < data.size(); i += 2) {
        const std::string& d = data[i];
        const size_t half = d.size() / 2;
        REQUIRE((*w)->file().WriteAt((*w)->DataOffset(i) + half, std::string_view(d).substr(half)).ok());
        REQUIRE((*w)->file().WriteAt((*w)->DataOffset(i), std::string_view(d).substr(0, half)).ok());
        const uint32_t crc = zip::Crc32Concat(zip::Crc32(0, d.data(), half), zip::Crc32(0, d.data() + half, d.size() - half),
                                              d.size() - half);
        REQUIRE((*w)->SetCrc(i, crc).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE((*w)->Finish().ok());
  REQUIRE((*w)->Commit().ok());
  CHECK(std::filesystem::file_size(path) == (*w)->size());
  const auto got = ReadWithLibzip(path);
  REQUIRE(got.size() == members.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].first == members[i].name);
    CHECK(got[i].second == data[i]);
  }
  auto file = tfckpt::Storage::Local().OpenForRead(path);
  REQUIRE(file.ok());
  auto dirents = zip::ReadDirectory(**file);
  REQUIRE(dirents.ok());
  REQUIRE(dirents->size() == members.size());
  for (size_t i = 0; i < dirents->size(); ++i) {
    const zip::DirectoryMember& m = (*dirents)[i];
    CHECK(m.name == members[i].name);
    CHECK(m.method == zip::kMethodStored);
    CHECK(m.flags == (i == 5 ? 0x0800 : 0));  // UTF-8 names say so
    CHECK(m.size == data[i].size());
    CHECK(m.crc == ZlibCrc(data[i]));
    auto start = zip::DataStart(**file, m);
    REQUIRE(start.ok());
    CHECK(*start == (*w)->DataOffset(i));
  }
}

TEST_CASE("zip: the same members give the same bytes whatever order they were written in") {
  TempDir dir;
  const std::vector<std::string> data = {RandomBytes(5000, 1), RandomBytes(1, 2), RandomBytes(70000, 3)};
  std::vector<zip::StoredZipWriter::Member> members;
  for (size_t i = 0; i < data.size(); ++i) members.push_back({"t" + std::to_string(i) + ".npy", data[i].size()});
  for (bool reverse : {false, true}) {
    auto w = zip::StoredZipWriter::Create(tfckpt::Location::Of(dir / (reverse ? "r.npz" : "f.npz")), members);
    REQUIRE(w.ok());
    for (size_t k = 0; k < data.size(); ++k) {
      const size_t i = reverse ? data.size() - 1 - k : k;
      REQUIRE((*w)->SetCrc(i, ZlibCrc(data[i])).ok());
      REQUIRE((*w)->file().WriteAt((*w)->DataOffset(i), data[i]).ok());
    }
    REQUIRE((*w)->Finish().ok());
    REQUIRE((*w)->Commit().ok());
  }
  CHECK(tfckpt::testing::ReadFile(dir / "f.npz") == tfckpt::testing::ReadFile(dir / "r.npz"));
}

TEST_CASE("zip: sizes and offsets past 4 GiB take zip64 fields, and the directory reader finds them") {
  // The records alone, placed in a sparse file as a 6 GiB member at 5 GiB would leave them.
  const uint64_t big = 6ull << 30, at = 5ull << 30;
  const std::string local = zip::LocalHeader("big.npy", big, 0x12345678);
  CHECK(local.size() == 30 + 7 + 20);  // the zip64 extra field with both sizes
  CHECK(local.substr(18, 8) == std::string(8, '\xff'));
  const std::string entry = zip::DirectoryEntry("big.npy", big, 0x12345678, at);
  CHECK(entry.size() == 46 + 7 + 4 + 24);  // sizes and offset in the zip64 extra field
  const std::string small = zip::DirectoryEntry("s.npy", 10, 1, 0);
  CHECK(small.size() == 46 + 5);
  TempDir dir;
  const std::string path = dir / "big.npz";
  const uint64_t directory = at + local.size() + big;
  const std::string tail = entry + small + zip::EndRecords(2, directory, entry.size() + small.size());
  CHECK(tail.size() == entry.size() + small.size() + 56 + 20 + 22);  // zip64 end record, locator, end record
  {
    auto f = tfckpt::Storage::Local().Create(path);
    REQUIRE(f.ok());
    REQUIRE((*f)->WriteAt(at, local).ok());
    REQUIRE((*f)->WriteAt(directory, tail).ok());
    REQUIRE((*f)->Close().ok());
    REQUIRE((*f)->Commit().ok());
  }
  auto file = tfckpt::Storage::Local().OpenForRead(path);
  REQUIRE(file.ok());
  auto dirents = zip::ReadDirectory(**file);
  REQUIRE(dirents.ok());
  REQUIRE(dirents->size() == 2);
  CHECK((*dirents)[0].size == big);
  CHECK((*dirents)[0].compressed_size == big);
  CHECK((*dirents)[0].header_offset == at);
  CHECK((*dirents)[0].crc == 0x12345678u);
  CHECK((*dirents)[1].name == "s.npy");
  auto start = zip::DataStart(**file, (*dirents)[0]);
  REQUIRE(start.ok());
  CHECK(*start == at + local.size());
}

TEST_CASE("zip: names that are empty, not UTF-8 or given twice are refused before a file is created") {
  TempDir dir;
  const std::string path = dir / "x.npz";
  for (const auto& members : std::vector<std::vector<zip::StoredZipWriter::Member>>{
           {{"", 1}}, {{"a\xff.npy", 1}}, {{"\xc0\xaf.npy", 1}}, {{"a.npy", 1}, {"a.npy", 2}}}) {
    auto w = zip::StoredZipWriter::Create(tfckpt::Location::Of(path), members);
    CHECK(absl::IsInvalidArgument(w.status()));
  }
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("zip: a damaged directory is an npz.member error naming the file") {
  TempDir dir;
  const std::string path = dir / "bad.npz";
  for (const std::string& bytes : {std::string("PK"), std::string(100, 'x'),
                                   zip::EndRecords(1, 0, 46)}) {  // an entry the file does not hold
    tfckpt::testing::WriteFile(path, bytes);
    auto file = tfckpt::Storage::Local().OpenForRead(path);
    REQUIRE(file.ok());
    auto d = zip::ReadDirectory(**file);
    REQUIRE_FALSE(d.ok());
    CHECK(tfckpt::ErrorInfoOf(d.status()).check == "npz.member");
    CHECK(tfckpt::ErrorInfoOf(d.status()).file == path);
  }
}
