// The copy engine (copy.h) on a small generated checkpoint: CopyRegion across axis-0 and
// axis-1 cuts and when unpartitioning (exact bytes), CastSink, the slice.gap and data.crc
// errors, PieceSize, ReadStrings.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "model/tensor_encoding.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "copy/copy.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"

using tfckpt::Region;
using tfckpt::Shape;
using tfckpt::testing::TempDir;

namespace {

constexpr int32_t kFloat = static_cast<int32_t>(tfckpt::DType::kFloat);
constexpr int32_t kBFloat16 = static_cast<int32_t>(tfckpt::DType::kBFloat16);
constexpr int32_t kString = static_cast<int32_t>(tfckpt::DType::kString);

// Calls `f(flat index in full)` for every element of `region`, in row-major order of the region.
template <typename F>
void ForEachElement(const Shape& full, const Region& region, F f) {
  if (region.empty()) return;
  std::vector<int64_t> at(region.start);
  for (;;) {
    int64_t flat = 0;
    for (size_t d = 0; d < full.size(); ++d) flat = flat * full[d] + at[d];
    f(flat);
    size_t d = full.size();
    while (d > 0) {
      --d;
      if (++at[d] < region.start[d] + region.shape[d]) break;
      at[d] = region.start[d];
      if (d == 0) return;
    }
    if (full.empty()) return;
  }
}

// The float32 bytes of `region` of a tensor of shape `full` whose element i is i + base.
std::string Floats(const Shape& full, const Region& region, float base = 0) {
  std::string out;
  ForEachElement(full, region, [&](int64_t i) {
    const float v = static_cast<float>(i) + base;
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  });
  return out;
}

// Element i of the string tensor: i + 1 copies of the letter 'a' + i.
std::string Element(int64_t i) { return std::string(static_cast<size_t>(i + 1), static_cast<char>('a' + i)); }

std::vector<std::string> Strings(const Shape& full, const Region& region) {
  std::vector<std::string> out;
  ForEachElement(full, region, [&](int64_t i) { out.push_back(Element(i)); });
  return out;
}

std::string EncodedStrings(const Shape& full, const Region& region) {
  const std::vector<std::string> s = Strings(full, region);
  std::string out;
  tfckpt::EncodeStrings(std::vector<std::string_view>(s.begin(), s.end()), &out);
  return out;
}

Region Box(Shape start, Shape shape) { return Region{std::move(start), std::move(shape)}; }

// The tensors of the fixture, each stored in the slices listed (data file i % 2).
struct Stored {
  std::string name;
  int32_t dtype;
  Shape shape;
  std::vector<Region> slices;
};

const std::vector<Stored>& Fixture() {
  static const std::vector<Stored> tensors = {
      {"rows", kFloat, {6, 4}, {Box({0, 0}, {3, 4}), Box({3, 0}, {3, 4})}},       // cut on axis 0
      {"cols", kFloat, {4, 6}, {Box({0, 0}, {4, 2}), Box({0, 2}, {4, 4})}},       // cut on axis 1
      {"gap", kFloat, {4, 2}, {Box({0, 0}, {1, 2}), Box({2, 0}, {2, 2})}},        // row 1 in no slice
      {"big", kFloat, {2, 300000}, {Box({0, 0}, {1, 300000}), Box({1, 0}, {1, 300000})}},  // runs > 1 MiB
      {"whole", kFloat, {4}, {Box({0}, {4})}},
      {"names", kString, {2, 3}, {Box({0, 0}, {2, 1}), Box({0, 1}, {2, 2})}},      // cut on axis 1
      {"string_gap", kString, {3}, {Box({0}, {1}), Box({2}, {1})}},
  };
  return tensors;
}

// Writes the fixture at `prefix`; "whole" holds 1.0, 1 + 2^-8, 1 + 3 * 2^-8 and -2.5.
void WriteFixture(const std::string& prefix) {
  tfckpt::BundleWriterOptions o;
  o.num_shards = 2;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
  REQUIRE(w.ok());
  for (const Stored& t : Fixture()) {
    for (size_t k = 0; k < t.slices.size(); ++k) {
      const Region& r = t.slices[k];
      std::string payload = t.dtype == kString ? EncodedStrings(t.shape, r) : Floats(t.shape, r);
      if (t.name == "whole") {
        const float v[] = {1.0f, 1.00390625f, 1.01171875f, -2.5f};
        payload.assign(reinterpret_cast<const char*>(v), sizeof v);
      }
      const int32_t file = static_cast<int32_t>(k % 2);
      if (r.Covers(t.shape)) {
        REQUIRE((*w)->Add(t.name, t.dtype, t.shape, payload, file).ok());
      } else {
        REQUIRE((*w)->AddSlice(t.name, t.dtype, t.shape, r, payload, file).ok());
      }
    }
  }
  REQUIRE((*w)->Finish().ok());
}

// Keeps what it is given (AppendFrom falls back to Append with the same bytes).
class StringSink : public tfckpt::PieceSink {
 public:
  absl::Status Append(std::string_view bytes) override {
    out.append(bytes);
    return absl::OkStatus();
  }
  std::string out;
};

struct Opened {
  TempDir dir;
  std::unique_ptr<tfckpt::Checkpoint> c;
  Opened() {
    WriteFixture(dir / "ckpt");
    auto opened = tfckpt::OpenCheckpoint(dir / "ckpt");
    REQUIRE(opened.ok());
    c = std::move(*opened);
  }
  const tfckpt::TensorEntry& T(const std::string& name) const {
    const tfckpt::TensorEntry* t = c->Find(name);
    REQUIRE(t != nullptr);
    return *t;
  }
};

// CopyRegion of `region` of `name` into a string; REQUIRE success.
std::string Copy(const Opened& o, const std::string& name, const Region& region) {
  StringSink sink;
  std::string buffer;
  const absl::Status st = tfckpt::CopyRegion(*o.c, o.T(name), region, sink, &buffer);
  CAPTURE(st.ToString());
  REQUIRE(st.ok());
  return sink.out;
}

}  // namespace

TEST_CASE("copy: CopyRegion across a cut on axis 0 gives the region's exact bytes") {
  Opened o;
  const Shape full{6, 4};
  REQUIRE(o.T("rows").slices.size() == 2);
  for (const Region& r : {Region::Full(full), Box({2, 0}, {3, 4}), Box({1, 1}, {4, 2}), Box({3, 0}, {3, 4}),
                          Box({5, 3}, {1, 1})}) {
    CAPTURE(tfckpt::SliceString(r, full));
    CHECK(Copy(o, "rows", r) == Floats(full, r));
  }
}

TEST_CASE("copy: CopyRegion across a cut on axis 1 gives the region's exact bytes") {
  Opened o;
  const Shape full{4, 6};
  for (const Region& r : {Region::Full(full), Box({1, 1}, {2, 3}), Box({0, 2}, {4, 1}), Box({3, 0}, {1, 6})}) {
    CAPTURE(tfckpt::SliceString(r, full));
    CHECK(Copy(o, "cols", r) == Floats(full, r));
  }
}

TEST_CASE("copy: unpartitioning pieces stored in long runs (moved in-kernel, 1 MiB at a time) gives the exact bytes") {
  Opened o;
  const Shape full{2, 300000};
  CHECK(Copy(o, "big", Region::Full(full)) == Floats(full, Region::Full(full)));
  CHECK(Copy(o, "big", Box({1, 0}, {1, 300000})) == Floats(full, Box({1, 0}, {1, 300000})));
}

TEST_CASE("copy: a byte flipped in a stored piece that moves is a data.crc error naming the tensor") {
  TempDir dir;
  WriteFixture(dir / "ckpt");
  {
    auto c = tfckpt::OpenCheckpoint(dir / "ckpt");
    REQUIRE(c.ok());
    const tfckpt::StoredSlice& s = (*c)->Find("big")->slices[1];
    const std::string file = tfckpt::DataFileName(dir / "ckpt", s.data.shard, 2);
    std::string bytes = tfckpt::testing::ReadFile(file);
    bytes[s.data.offset + 1000] ^= 1;
    tfckpt::testing::WriteFile(file, bytes);
  }
  auto c = tfckpt::OpenCheckpoint(dir / "ckpt");
  REQUIRE(c.ok());
  const tfckpt::TensorEntry& t = *(*c)->Find("big");
  for (const Region& r : {Region::Full(t.shape), t.slices[1].region}) {
    StringSink sink;
    std::string buffer;
    const absl::Status st = tfckpt::CopyRegion(**c, t, r, sink, &buffer);
    CAPTURE(st.ToString());
    CHECK(absl::IsDataLoss(st));
    CHECK(tfckpt::ErrorInfoOf(st).check == "data.crc");
    CHECK(tfckpt::ErrorInfoOf(st).key == "big");
  }
}

TEST_CASE("copy: CastSink turns float32 into bfloat16, rounding to nearest even") {
  Opened o;
  auto cast = [&](const std::string& name, const Region& r) {
    StringSink out;
    tfckpt::CastSink sink(kFloat, kBFloat16, out);
    std::string buffer;
    REQUIRE(tfckpt::CopyRegion(*o.c, o.T(name), r, sink, &buffer).ok());
    return out.out;
  };
  // 1 + 2^-8 is halfway between two bfloat16 values and goes to the even one (1.0);
  // 1 + 3 * 2^-8 goes up to the even 1 + 2^-6.
  const uint16_t want[] = {0x3F80, 0x3F80, 0x3F82, 0xC020};
  CHECK(cast("whole", Region::Full({4})) == std::string(reinterpret_cast<const char*>(want), sizeof want));
  // Integers up to 256 are exact in bfloat16: the upper half of each float32, across the cut.
  const Shape full{6, 4};
  const Region r = Box({2, 1}, {3, 3});
  const std::string f = Floats(full, r);
  std::string halves;
  for (size_t i = 0; i < f.size(); i += 4) halves.append(f, i + 2, 2);
  CHECK(cast("rows", r) == halves);
}

TEST_CASE("copy: an element in no stored slice is a slice.gap error, not a made-up value") {
  Opened o;
  const Shape full{4, 2};
  for (const auto& [r, missing] : std::vector<std::pair<Region, std::string>>{
           {Region::Full(full), "2"}, {Box({1, 1}, {1, 1}), "1"}, {Box({0, 0}, {3, 2}), "2"}}) {
    CAPTURE(tfckpt::SliceString(r, full));
    StringSink sink;
    std::string buffer;
    const absl::Status st = tfckpt::CopyRegion(*o.c, o.T("gap"), r, sink, &buffer);
    CAPTURE(st.ToString());
    CHECK(absl::IsDataLoss(st));
    CHECK(tfckpt::ErrorInfoOf(st).check == "slice.gap");
    CHECK(tfckpt::ErrorInfoOf(st).key == "gap");
    CHECK(std::string(st.message()).find(missing + " elements of ") != std::string::npos);
    CHECK(sink.out.empty());
  }
  // The rows that are stored copy fine.
  CHECK(Copy(o, "gap", Box({2, 0}, {2, 2})) == Floats(full, Box({2, 0}, {2, 2})));
  std::vector<tfckpt::TensorBytes> keep;
  auto strings = tfckpt::ReadStrings(*o.c, o.T("string_gap"), Region::Full({3}), &keep);
  REQUIRE_FALSE(strings.ok());
  CHECK(tfckpt::ErrorInfoOf(strings.status()).check == "slice.gap");
}

TEST_CASE("copy: PieceSize of fixed-size and string regions") {
  Opened o;
  auto size = [&](const std::string& name, const Region& r) {
    auto s = tfckpt::PieceSize(*o.c, o.T(name), r);
    REQUIRE(s.ok());
    return *s;
  };
  CHECK(size("rows", Box({2, 0}, {3, 4})) == 3 * 4 * 4);
  CHECK(size("cols", Box({1, 1}, {2, 3})) == 2 * 3 * 4);
  CHECK(size("big", Region::Full({2, 300000})) == 2 * 300000 * 4);
  CHECK(size("rows", Box({0, 0}, {0, 4})) == 0);
  // Strings: one varint length per element (each < 128: one byte), a 4-byte checksum, the bytes.
  // A stored piece keeps its stored size: elements 1, 2, 4, 5 (lengths 2, 3, 5, 6).
  const tfckpt::TensorEntry& names = o.T("names");
  CHECK(size("names", Box({0, 1}, {2, 2})) == 4 + 4 + (2 + 3 + 5 + 6));
  CHECK(size("names", Box({0, 1}, {2, 2})) == names.slices[1].data.size);
  // A re-sliced region: its strings re-encoded, elements 0, 1, 2 (lengths 1, 2, 3).
  CHECK(size("names", Box({0, 0}, {1, 3})) == 3 + 4 + (1 + 2 + 3));
  CHECK(size("names", Region::Full({2, 3})) == 6 + 4 + (1 + 2 + 3 + 4 + 5 + 6));
}

TEST_CASE("copy: ReadStrings gives a region's elements in row-major order across stored pieces") {
  Opened o;
  const Shape full{2, 3};
  for (const Region& r : {Region::Full(full), Box({1, 0}, {1, 2}), Box({0, 1}, {2, 1}), Box({0, 0}, {2, 1})}) {
    CAPTURE(tfckpt::SliceString(r, full));
    std::vector<tfckpt::TensorBytes> keep;
    auto got = tfckpt::ReadStrings(*o.c, o.T("names"), r, &keep);
    REQUIRE(got.ok());
    CHECK(std::vector<std::string>(got->begin(), got->end()) == Strings(full, r));
  }
  std::vector<tfckpt::TensorBytes> keep;
  auto all = tfckpt::ReadStrings(*o.c, o.T("names"), Region::Full(full), &keep);
  REQUIRE(all.ok());
  CHECK(std::vector<std::string>(all->begin(), all->end()) ==
        std::vector<std::string>{"a", "bb", "ccc", "dddd", "eeeee", "ffffff"});
}

TEST_CASE("copy: RowParts are a tensor's stored pieces when they are cut on axis 0, else the tensor whole") {
  Opened o;
  const std::vector<Region> rows = tfckpt::RowParts(o.T("rows"));
  REQUIRE(rows.size() == 2);
  CHECK(rows[0] == Box({0, 0}, {3, 4}));
  CHECK(rows[1] == Box({3, 0}, {3, 4}));
  CHECK(tfckpt::RowPartOffset({6, 4}, rows[1], 4) == 3 * 4 * 4);
  CHECK(tfckpt::RowPartOffset({6, 4}, rows[1], 2) == 3 * 4 * 2);  // (a cast to a 2-byte dtype)
  CHECK(tfckpt::RowParts(o.T("cols")) == std::vector<Region>{Region::Full({4, 6})});
  CHECK(tfckpt::RowParts(o.T("gap")) == std::vector<Region>{Region::Full({4, 2})});  // CopyRegion reports the gap
  CHECK(tfckpt::RowParts(o.T("whole")) == std::vector<Region>{Region::Full({4})});
}

TEST_CASE("copy: PositionalSinks of several threads fill one file; the bytes do not depend on who wrote what") {
  Opened o;
  const tfckpt::TensorEntry& big = o.T("big");
  const std::vector<Region> parts = tfckpt::RowParts(big);
  REQUIRE(parts.size() == 2);
  std::string first;
  for (int jobs : {1, 2}) {
    const std::string path = o.dir / ("out" + std::to_string(jobs));
    auto file = tfckpt::Storage::Local().Create(path);
    REQUIRE(file.ok());
    REQUIRE((*file)->WriteAt(0, "head").ok());
    std::vector<tfckpt::WorkUnit> units;
    for (const Region& r : parts) units.push_back({static_cast<uint64_t>(r.num_elements() * 4), {0}});
    std::atomic<int> ran{0};
    REQUIRE(tfckpt::RunUnits(units, jobs, [&](size_t u, const std::atomic<bool>&) {
              ++ran;
              std::string buffer;
              tfckpt::PositionalSink sink(**file, 4 + tfckpt::RowPartOffset(big.shape, parts[u], 4));
              return tfckpt::CopyRegion(*o.c, big, parts[u], sink, &buffer, nullptr, /*verify_sources=*/true);
            }).ok());
    CHECK(ran == 2);
    REQUIRE((*file)->Close().ok());
    REQUIRE((*file)->Commit().ok());
    const std::string bytes = tfckpt::testing::ReadFile(path);
    CHECK(bytes == "head" + Floats(big.shape, Region::Full(big.shape)));
    if (jobs == 1) first = bytes;
    CHECK(bytes == first);
  }
}

TEST_CASE("copy: RunUnits runs every unit once, largest first on one thread, and stops at the first error") {
  std::vector<tfckpt::WorkUnit> units = {{10, {0}}, {30, {1}}, {20, {0}}, {30, {0}}};
  std::vector<size_t> order;
  REQUIRE(tfckpt::RunUnits(units, 1, [&](size_t u, const std::atomic<bool>&) {
            order.push_back(u);
            return absl::OkStatus();
          }).ok());
  CHECK(order == std::vector<size_t>{1, 3, 2, 0});  // by size, ties in order
  std::mutex mu;
  std::vector<int> count(units.size(), 0);
  REQUIRE(tfckpt::RunUnits(units, 8, [&](size_t u, const std::atomic<bool>&) {
            std::lock_guard<std::mutex> lock(mu);
            ++count[u];
            return absl::OkStatus();
          }).ok());
  CHECK(count == std::vector<int>{1, 1, 1, 1});
  std::atomic<int> started{0};
  const absl::Status st = tfckpt::RunUnits(units, 1, [&](size_t u, const std::atomic<bool>&) {
    ++started;
    return u == 1 ? absl::DataLossError("unit 1") : absl::OkStatus();
  });
  CHECK(st.message() == "unit 1");
  CHECK(started == 1);  // the first unit (the largest) failed: no other started
  CHECK(tfckpt::RunUnits({}, 4, [](size_t, const std::atomic<bool>&) { return absl::OkStatus(); }).ok());
}
