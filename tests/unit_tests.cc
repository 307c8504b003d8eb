// Unit tests of the primitives against the worked examples of docs/FORMAT.md.
#include <doctest/doctest.h>

#include <cstring>

#include "test_util.h"
#include "base/coding.h"
#include "base/crc32c.h"
#include "model/tensor_encoding.h"
#include "tfckpt/dtype.h"
#include "tfckpt/ordered_code.h"
#include "tfckpt/region.h"

namespace tfckpt::testing {
bool NeedsTestData() { return false; }
}  // namespace tfckpt::testing

using tfckpt::testing::Bytes;
namespace oc = tfckpt::ordered_code;

TEST_CASE("crc32c Concat equals the CRC of the concatenation") {
  std::string a, b;
  for (int i = 0; i < 5000; ++i) a.push_back(static_cast<char>(i * 7 + 3));
  for (int i = 0; i < 3001; ++i) b.push_back(static_cast<char>(i * 13 + 1));
  for (size_t la : {size_t{0}, size_t{1}, size_t{17}, size_t{4096}, a.size()}) {
    for (size_t lb : {size_t{0}, size_t{1}, size_t{8}, size_t{1000}, b.size()}) {
      const std::string_view x(a.data(), la), y(b.data(), lb);
      CHECK(tfckpt::crc32c::Concat(tfckpt::crc32c::Value(x), tfckpt::crc32c::Value(y), lb) ==
            tfckpt::crc32c::Value(std::string(x) + std::string(y)));
    }
  }
  // A long run of zeros (8 GiB and one byte) against chained Extends of a zero buffer.
  const std::string zeros(1 << 20, '\0');
  uint32_t crc = tfckpt::crc32c::Value("head");
  for (int i = 0; i < 8192; ++i) crc = tfckpt::crc32c::Extend(crc, zeros.data(), zeros.size());
  crc = tfckpt::crc32c::Extend(crc, "\x01", 1);
  const uint32_t tail = tfckpt::crc32c::Extend(tfckpt::crc32c::Extend(0, zeros.data(), 0), "\x01", 1);
  uint32_t zeros_8g = 0;  // CRC of 8 GiB of zeros, from 1 MiB by Concat
  for (int i = 0; i < 8192; ++i) zeros_8g = tfckpt::crc32c::Concat(zeros_8g, tfckpt::crc32c::Value(zeros.data(), zeros.size()), zeros.size());
  CHECK(tfckpt::crc32c::Concat(tfckpt::crc32c::Concat(tfckpt::crc32c::Value("head"), zeros_8g, uint64_t{8192} << 20), tail, 1) ==
        crc);
}

TEST_CASE("crc32c check value, empty input and chaining") {
  CHECK(tfckpt::crc32c::Value("123456789") == 0xE3069283u);
  CHECK(tfckpt::crc32c::Value("") == 0u);
  uint32_t c = tfckpt::crc32c::Value("1234");
  CHECK(tfckpt::crc32c::Extend(c, "56789", 5) == 0xE3069283u);
}

TEST_CASE("crc32c masking (docs/FORMAT.md §a.7, §b.3)") {
  CHECK(tfckpt::crc32c::Mask(0) == 0xA282EAD8u);
  // Scalar float 0.5: crc32c(00 00 00 3F) = 0x26973E52, masked 0x1F273806.
  const std::string half = Bytes({0x00, 0x00, 0x00, 0x3F});
  CHECK(tfckpt::crc32c::Value(half) == 0x26973E52u);
  CHECK(tfckpt::crc32c::Mask(0x26973E52u) == 0x1F273806u);
  for (uint32_t v : {0u, 1u, 0xFFFFFFFFu, 0x12345678u, 0xE3069283u}) {
    CHECK(tfckpt::crc32c::Unmask(tfckpt::crc32c::Mask(v)) == v);
  }
}

TEST_CASE("OrderedCode WriteNumIncreasing examples") {
  auto enc = [](uint64_t v) {
    std::string s;
    oc::WriteNumIncreasing(&s, v);
    return s;
  };
  CHECK(enc(0) == Bytes({0x00}));
  CHECK(enc(1) == Bytes({0x01, 0x01}));
  CHECK(enc(256) == Bytes({0x02, 0x01, 0x00}));
  for (uint64_t v : {0ull, 1ull, 255ull, 256ull, 65535ull, 1ull << 40, ~0ull}) {
    std::string s = enc(v);
    std::string_view sv = s;
    uint64_t back = 7;
    REQUIRE(oc::ReadNumIncreasing(&sv, &back));
    CHECK(back == v);
    CHECK(sv.empty());
  }
}

TEST_CASE("OrderedCode WriteString escapes 00 and FF") {
  std::string s;
  oc::WriteString(&s, "foo");
  CHECK(s == Bytes({0x66, 0x6F, 0x6F, 0x00, 0x01}));
  s.clear();
  oc::WriteString(&s, std::string("a\0b\xff", 4));
  CHECK(s == Bytes({'a', 0x00, 0xFF, 'b', 0xFF, 0x00, 0x00, 0x01}));
  std::string_view sv = s;
  std::string back;
  REQUIRE(oc::ReadString(&sv, &back));
  CHECK(back == std::string("a\0b\xff", 4));
  std::string_view bad = "\x00\x02";
  CHECK_FALSE(oc::ReadString(&bad, &back));
  std::string_view unterminated = "abc";
  CHECK_FALSE(oc::ReadString(&unterminated, &back));
}

TEST_CASE("OrderedCode WriteSignedNumIncreasing: every example of docs/FORMAT.md §d.2") {
  struct Case {
    int64_t v;
    std::string bytes;
  };
  const Case cases[] = {
      {0, Bytes({0x80})},
      {1, Bytes({0x81})},
      {63, Bytes({0xBF})},
      {64, Bytes({0xC0, 0x40})},
      {100, Bytes({0xC0, 0x64})},
      {8191, Bytes({0xDF, 0xFF})},
      {8192, Bytes({0xE0, 0x20, 0x00})},
      {0x424242, Bytes({0xF0, 0x42, 0x42, 0x42})},
      {-1, Bytes({0x7F})},
      {-64, Bytes({0x40})},
      {-65, Bytes({0x3F, 0xBF})},
      {-8192, Bytes({0x20, 0x00})},
      {-8193, Bytes({0x1F, 0xDF, 0xFF})},
      {int64_t{1} << 55, Bytes({0xFF, 0x80, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},
      {INT64_MAX, Bytes({0xFF, 0xC0, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})},
      {INT64_MIN, Bytes({0x00, 0x3F, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},
  };
  for (const Case& c : cases) {
    CAPTURE(c.v);
    std::string s;
    oc::WriteSignedNumIncreasing(&s, c.v);
    CHECK(s == c.bytes);
    std::string_view sv = c.bytes;
    int64_t back = 12345;
    REQUIRE(oc::ReadSignedNumIncreasing(&sv, &back));
    CHECK(back == c.v);
    CHECK(sv.empty());
  }
}

TEST_CASE("OrderedCode signed numbers round-trip and keep order") {
  std::vector<int64_t> values;
  for (int shift = 0; shift < 63; ++shift) {
    const int64_t p = int64_t{1} << shift;
    for (int64_t v : {p - 1, p, p + 1, -p - 1, -p, -p + 1}) values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  std::string prev;
  for (size_t i = 0; i < values.size(); ++i) {
    std::string s;
    oc::WriteSignedNumIncreasing(&s, values[i]);
    std::string_view sv = s;
    int64_t back;
    REQUIRE(oc::ReadSignedNumIncreasing(&sv, &back));
    CHECK(back == values[i]);
    if (i > 0 && values[i] != values[i - 1]) CHECK(prev < s);
    prev = s;
  }
}

TEST_CASE("slice keys: the full-key examples of docs/FORMAT.md §d.2") {
  using tfckpt::SliceExtents;
  CHECK(tfckpt::EncodeSliceKey("weights", SliceExtents{{0, 0}, {5, -1}}) ==
        Bytes({0x00, 0x77, 0x65, 0x69, 0x67, 0x68, 0x74, 0x73, 0x00, 0x01, 0x01, 0x02, 0x80, 0x85, 0x80, 0x7F}));
  CHECK(tfckpt::EncodeSliceKey("emb", SliceExtents{{100, 0}, {50, 64}}) ==
        Bytes({0x00, 0x65, 0x6D, 0x62, 0x00, 0x01, 0x01, 0x02, 0xC0, 0x64, 0xB2, 0x80, 0xC0, 0x40}));
  CHECK(tfckpt::EncodeSliceKey("x", SliceExtents{}) == Bytes({0x00, 0x78, 0x00, 0x01, 0x00}));

  auto d = tfckpt::DecodeSliceKey(Bytes({0x00, 0x65, 0x6D, 0x62, 0x00, 0x01, 0x01, 0x02, 0xC0, 0x64, 0xB2, 0x80, 0xC0, 0x40}));
  REQUIRE(d.ok());
  CHECK(d->name == "emb");
  CHECK(d->extents == SliceExtents{{100, 0}, {50, 64}});
  auto scalar = tfckpt::DecodeSliceKey(Bytes({0x00, 0x78, 0x00, 0x01, 0x00}));
  REQUIRE(scalar.ok());
  CHECK(scalar->name == "x");
  CHECK(scalar->extents.starts.empty());
  CHECK_FALSE(tfckpt::DecodeSliceKey(Bytes({0x00, 0x78, 0x00, 0x01, 0x00, 0x55})).ok());  // trailing byte
  CHECK_FALSE(tfckpt::DecodeSliceKey(Bytes({0x01, 0x01})).ok());
  CHECK_FALSE(tfckpt::DecodeSliceKey(Bytes({0x00, 0x78, 0x00, 0x01, 0x01, 0x02, 0x80})).ok());  // truncated
}

TEST_CASE("slice strings: parse and print") {
  const tfckpt::Shape full{10, 3};
  auto r = tfckpt::ParseSliceString("0,5:-", full);
  REQUIRE(r.ok());
  CHECK(r->start == tfckpt::Shape{0, 0});
  CHECK(r->shape == tfckpt::Shape{5, 3});
  CHECK(tfckpt::SliceString(*r, full) == "0,5:-");
  auto r2 = tfckpt::ParseSliceString("-:1,2", full);
  REQUIRE(r2.ok());
  CHECK(tfckpt::SliceString(*r2, full) == "-:1,2");
  CHECK(tfckpt::SliceString(tfckpt::Region{{5, 0}, {5, 3}}, full) == "5,5:-");
  CHECK(tfckpt::SliceString(tfckpt::Region{}, {}) == "");
  CHECK_FALSE(tfckpt::ParseSliceString("0,5", full).ok());         // rank
  CHECK_FALSE(tfckpt::ParseSliceString("8,5:-", full).ok());       // outside
  CHECK_FALSE(tfckpt::ParseSliceString("0,0:-", full).ok());       // zero length
  CHECK_FALSE(tfckpt::ParseSliceString("a,b:-", full).ok());
  CHECK_FALSE(tfckpt::ParseSliceString("-1,2:-", full).ok());
}

TEST_CASE("regions: intersection, containment, element counts") {
  tfckpt::Region a{{0, 0}, {5, 3}}, b{{3, 1}, {4, 2}};
  auto i = tfckpt::Intersect(a, b);
  REQUIRE(i.has_value());
  CHECK(*i == tfckpt::Region{{3, 1}, {2, 2}});
  CHECK_FALSE(tfckpt::Intersect(a, tfckpt::Region{{5, 0}, {5, 3}}).has_value());
  CHECK(a.InsideOf({10, 3}));
  CHECK_FALSE(b.InsideOf({6, 3}));
  CHECK(tfckpt::Region::Full({10, 3}).Covers({10, 3}));
  CHECK(*tfckpt::NumElements({}) == 1);
  CHECK(*tfckpt::NumElements({10, 0, 5}) == 0);
  CHECK_FALSE(tfckpt::NumElements({1ll << 40, 1ll << 40}).ok());
  CHECK_FALSE(tfckpt::NumElements({-1}).ok());
  CHECK(tfckpt::Strides({2, 3, 4}) == std::vector<int64_t>{12, 4, 1});
}

TEST_CASE("string tensors: the worked examples of docs/FORMAT.md §c.4") {
  std::string payload;
  const uint32_t crc = tfckpt::EncodeStrings({"", "abc"}, &payload);
  CHECK(payload == Bytes({0x00, 0x03, 0xEC, 0xC6, 0xEA, 0x19, 0x61, 0x62, 0x63}));
  CHECK(tfckpt::crc32c::Mask(crc) == 0x35344714u);
  auto d = tfckpt::DecodeStrings(payload, 2);
  REQUIRE(d.ok());
  CHECK(d->elements.size() == 2);
  CHECK(d->elements[0] == "");
  CHECK(d->elements[1] == "abc");
  CHECK(d->crc == crc);

  std::string empty;
  const uint32_t crc0 = tfckpt::EncodeStrings({}, &empty);
  CHECK(empty == Bytes({0xD8, 0xEA, 0x82, 0xA2}));
  CHECK(tfckpt::crc32c::Mask(crc0) == 0x640CC1F6u);

  // Corruptions: a length byte, the length checksum, a trailing byte, a short payload.
  std::string bad = payload;
  bad[1] = 0x02;
  CHECK_FALSE(tfckpt::DecodeStrings(bad, 2).ok());
  bad = payload;
  bad[3] ^= 1;
  CHECK_FALSE(tfckpt::DecodeStrings(bad, 2).ok());
  CHECK_FALSE(tfckpt::DecodeStrings(payload + "x", 2).ok());
  CHECK_FALSE(tfckpt::DecodeStrings(payload, 1000000).ok());  // element count beyond the bytes
}

TEST_CASE("variant payloads: per-element checksums") {
  // Build two elements by hand following docs/FORMAT.md §c.5.
  std::string payload;
  uint32_t c = 0;
  for (std::string e : {std::string("hello"), std::string("")}) {
    tfckpt::PutVarint64(&payload, e.size());
    uint64_t len = e.size();
    c = tfckpt::crc32c::Extend(c, &len, 8);
    payload += e;
    c = tfckpt::crc32c::Extend(c, e.data(), e.size());
    const size_t at = payload.size();
    tfckpt::PutFixed32(&payload, tfckpt::crc32c::Mask(c));
    c = tfckpt::crc32c::Extend(c, payload.data() + at, 4);
  }
  auto d = tfckpt::DecodeVariants(payload, 2);
  REQUIRE(d.ok());
  CHECK(d->elements[0] == "hello");
  CHECK(d->crc == c);
  std::string bad = payload;
  bad[2] ^= 0x20;
  CHECK_FALSE(tfckpt::DecodeVariants(bad, 2).ok());
  CHECK_FALSE(tfckpt::DecodeVariants(payload, 3).ok());
}

TEST_CASE("varints reject overlong encodings") {
  std::string s;
  tfckpt::PutVarint64(&s, ~0ull);
  std::string_view sv = s;
  uint64_t v;
  REQUIRE(tfckpt::GetVarint64(&sv, &v));
  CHECK(v == ~0ull);
  std::string_view overlong = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f";
  CHECK_FALSE(tfckpt::GetVarint64(&overlong, &v));
  std::string_view truncated = "\x80";
  CHECK_FALSE(tfckpt::GetVarint64(&truncated, &v));
  uint32_t v32;
  std::string_view big32 = "\xff\xff\xff\xff\x1f";
  CHECK_FALSE(tfckpt::GetVarint32(&big32, &v32));
}

TEST_CASE("dtype table: Python names and sizes") {
  CHECK(tfckpt::DTypeName(1) == "float32");
  CHECK(tfckpt::DTypeName(14) == "bfloat16");
  CHECK(tfckpt::DTypeName(19) == "float16");
  CHECK(tfckpt::DTypeName(25) == "float8_e4m3fn");
  CHECK(tfckpt::DTypeName(99) == "unknown(99)");
  CHECK(tfckpt::LookupDType(18)->element_size == 16);
  CHECK(tfckpt::LookupDType(20) == nullptr);  // resource
  CHECK(tfckpt::LookupDType(0) == nullptr);
  CHECK(tfckpt::LookupDType(101) == nullptr);  // *_REF
  CHECK(*tfckpt::ParseDType("bfloat16") == tfckpt::DType::kBFloat16);
  CHECK_FALSE(tfckpt::ParseDType("float128").has_value());
}

TEST_CASE("ForEachRun: runs of a sub-region inside containing slices") {
  using tfckpt::Region;
  // sub = rows 2..3, cols 1..2 of a [4, 3] slice starting at (1, 0), and of a [3, 4] slice at (2, 0).
  Region a{{1, 0}, {4, 3}}, b{{2, 0}, {3, 4}}, sub{{2, 1}, {2, 2}};
  std::vector<std::pair<std::vector<int64_t>, int64_t>> runs;
  tfckpt::ForEachRun(sub, {&a, &b}, [&](const int64_t* off, int64_t n) {
    runs.push_back({{off[0], off[1]}, n});
  });
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].first == std::vector<int64_t>{1 * 3 + 1, 0 * 4 + 1});
  CHECK(runs[0].second == 2);
  CHECK(runs[1].first == std::vector<int64_t>{2 * 3 + 1, 1 * 4 + 1});
  // Whole trailing dimensions merge: rows 1..2 of two [*, 3, 2] slices with full trailing dims.
  Region c{{0, 0, 0}, {4, 3, 2}}, d{{1, 0, 0}, {3, 3, 2}}, rows{{1, 0, 0}, {2, 3, 2}};
  runs.clear();
  tfckpt::ForEachRun(rows, {&c, &d}, [&](const int64_t* off, int64_t n) { runs.push_back({{off[0], off[1]}, n}); });
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].first == std::vector<int64_t>{6, 0});
  CHECK(runs[0].second == 12);
  // Scalars and empty regions.
  Region s{{}, {}};
  int calls = 0;
  tfckpt::ForEachRun(s, {&s}, [&](const int64_t*, int64_t n) { calls += static_cast<int>(n); });
  CHECK(calls == 1);
  Region e{{0}, {0}};
  tfckpt::ForEachRun(e, {&e}, [&](const int64_t*, int64_t) { ++calls; });
  CHECK(calls == 1);
  // Every element visited exactly once, in row-major order, for a 3-D cut.
  Region big{{0, 0, 0}, {3, 4, 5}}, cut{{1, 1, 2}, {2, 3, 3}};
  std::vector<int64_t> seen;
  tfckpt::ForEachRun(cut, {&big}, [&](const int64_t* off, int64_t n) {
    for (int64_t i = 0; i < n; ++i) seen.push_back(off[0] + i);
  });
  std::vector<int64_t> want;
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t j = 1; j < 4; ++j)
      for (int64_t k = 2; k < 5; ++k) want.push_back(i * 20 + j * 5 + k);
  CHECK(seen == want);
}
