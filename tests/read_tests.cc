// ReadTensor and ReadSize (tfckpt/read.h) on a small written checkpoint: whole tensors,
// boxes across a cut on axis 0 and on axis 1, bfloat16 widened, the InvalidArgument
// refusals (wrong size, a box outside the shape, strings), a damaged byte (data.crc), a stop.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "format/bundle/bundle_writer.h"
#include "model/tensor_encoding.h"
#include "test_util.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "tfckpt/read.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"

using tfckpt::Region;
using tfckpt::Shape;
using tfckpt::testing::TempDir;

namespace {

constexpr int32_t kFloat = static_cast<int32_t>(tfckpt::DType::kFloat);
constexpr int32_t kBFloat16 = static_cast<int32_t>(tfckpt::DType::kBFloat16);
constexpr int32_t kString = static_cast<int32_t>(tfckpt::DType::kString);

Region Box(Shape start, Shape shape) { return Region{std::move(start), std::move(shape)}; }

// Element (i, j) of a float tensor [rows, cols] is 100 * i + j; these are `box`'s, in
// row-major order.
std::vector<float> Values(const Region& box) {
  std::vector<float> v;
  for (int64_t i = box.start[0]; i < box.start[0] + box.shape[0]; ++i) {
    for (int64_t j = box.start[1]; j < box.start[1] + box.shape[1]; ++j) v.push_back(static_cast<float>(100 * i + j));
  }
  return v;
}

std::string Bytes(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

// "whole" [3, 5] stored whole; "rows" [6, 4] in two slices cut on axis 0, "cols" [4, 6] in
// two cut on axis 1 (slice k in data file k); "half" bfloat16 [2] = {1, -2.5}; "names"
// string [2].
void Write(const std::string& prefix) {
  tfckpt::BundleWriterOptions o;
  o.num_shards = 2;
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), o);
  REQUIRE(w.ok());
  REQUIRE((*w)->Add("whole", kFloat, {3, 5}, Bytes(Values(Box({0, 0}, {3, 5}))), 0).ok());
  const std::vector<std::pair<std::string, std::vector<Region>>> sliced = {
      {"rows", {Box({0, 0}, {3, 4}), Box({3, 0}, {3, 4})}},
      {"cols", {Box({0, 0}, {4, 2}), Box({0, 2}, {4, 4})}},
  };
  for (const auto& [name, slices] : sliced) {
    const Shape full = name == "rows" ? Shape{6, 4} : Shape{4, 6};
    for (size_t k = 0; k < slices.size(); ++k) {
      REQUIRE((*w)->AddSlice(name, kFloat, full, slices[k], Bytes(Values(slices[k])), static_cast<int32_t>(k)).ok());
    }
  }
  const uint16_t half[] = {0x3F80, 0xC020};
  REQUIRE((*w)->Add("half", kBFloat16, {2}, std::string(reinterpret_cast<const char*>(half), sizeof half), 0).ok());
  std::string names;
  tfckpt::EncodeStrings({"a", "bc"}, &names);
  REQUIRE((*w)->Add("names", kString, {2}, names, 0).ok());
  REQUIRE((*w)->Finish().ok());
}

struct Opened {
  TempDir dir;
  std::unique_ptr<tfckpt::Checkpoint> c;
  Opened() {
    Write(dir / "ckpt");
    Open();
  }
  void Open() {
    auto opened = tfckpt::OpenCheckpoint(dir / "ckpt");
    REQUIRE(opened.ok());
    c = std::move(*opened);
  }
  const tfckpt::TensorEntry& T(const std::string& name) const {
    const tfckpt::TensorEntry* t = c->Find(name);
    REQUIRE(t != nullptr);
    return *t;
  }
  // ReadTensor of `box` of `name` into a buffer of ReadSize's size.
  absl::Status Read(const std::string& name, const Region& box, std::string* out,
                    const tfckpt::ReadOptions& options = {}) const {
    auto size = tfckpt::ReadSize(T(name), box, options);
    if (!size.ok()) return size.status();
    out->assign(*size, '\0');
    return tfckpt::ReadTensor(*c, T(name), box, out->data(), out->size(), options);
  }
  // Flips one byte of the stored piece `k` of `name`.
  void Damage(const std::string& name, size_t k, uint64_t at) {
    const tfckpt::StoredSlice& s = T(name).slices[k];
    const std::string file = tfckpt::DataFileName(dir / "ckpt", s.data.shard, 2);
    std::string bytes = tfckpt::testing::ReadFile(file);
    bytes[s.data.offset + at] ^= 1;
    tfckpt::testing::WriteFile(file, bytes);
    Open();
  }
};

}  // namespace

TEST_CASE("ReadTensor: a whole tensor, stored whole or in slices, is its row-major bytes") {
  Opened o;
  std::vector<float> v(15);
  REQUIRE(tfckpt::ReadTensor(*o.c, o.T("whole"), reinterpret_cast<char*>(v.data()), v.size() * 4).ok());
  CHECK(v == Values(Box({0, 0}, {3, 5})));
  std::string out;
  for (const char* name : {"rows", "cols"}) {
    CAPTURE(name);
    const Region full = Region::Full(o.T(name).shape);
    REQUIRE(o.Read(name, full, &out).ok());
    CHECK(out == Bytes(Values(full)));
  }
}

TEST_CASE("ReadTensor: a box across two stored slices, cut on axis 0 or on axis 1, is the box's bytes") {
  Opened o;
  std::string out;
  for (const auto& [name, box] : {std::pair<const char*, Region>{"rows", Box({2, 0}, {2, 4})},  // whole rows
                                  {"rows", Box({1, 1}, {4, 2})},
                                  {"cols", Box({1, 1}, {2, 3})},
                                  {"cols", Box({0, 2}, {4, 4})},  // exactly the second slice
                                  {"whole", Box({2, 4}, {1, 1})},
                                  {"whole", Box({1, 0}, {0, 5})}}) {  // empty
    CAPTURE(name);
    CAPTURE(tfckpt::SliceString(box, o.T(name).shape));
    REQUIRE(o.Read(name, box, &out).ok());
    CHECK(out == Bytes(Values(box)));
  }
}

TEST_CASE("ReadTensor: bfloat16 as stored, or widened to float32") {
  Opened o;
  std::string out;
  REQUIRE(o.Read("half", Region::Full({2}), &out).ok());
  REQUIRE(out.size() == 4);
  uint16_t bits[2];
  std::memcpy(bits, out.data(), 4);
  CHECK(bits[0] == 0x3F80);
  CHECK(bits[1] == 0xC020);
  tfckpt::ReadOptions widen;
  widen.bfloat16_as_float32 = true;
  REQUIRE(o.Read("half", Region::Full({2}), &out, widen).ok());
  CHECK(out == Bytes({1.0f, -2.5f}));
  CHECK(*tfckpt::ReadSize(o.T("whole"), Region::Full({3, 5}), widen) == 60);  // (other dtypes as stored)
}

TEST_CASE("ReadTensor: a wrong buffer size, a box outside the shape and strings are InvalidArgument naming the tensor") {
  Opened o;
  std::vector<char> buf(1024);
  const Region full = Region::Full({3, 5});
  for (size_t size : {size_t{0}, size_t{56}, size_t{64}}) {
    const absl::Status s = tfckpt::ReadTensor(*o.c, o.T("whole"), full, buf.data(), size);
    CAPTURE(s.ToString());
    CHECK(absl::IsInvalidArgument(s));
    CHECK(s.message() == "tensor \"whole\": the box at [0, 0] of shape [3, 5] is 60 bytes, the buffer " +
                             std::to_string(size));
  }
  for (const Region& box : {Box({2, 0}, {2, 5}), Box({0, 4}, {1, 2}), Box({-1, 0}, {1, 1}), Box({0}, {1}),
                            Box({0, 0, 0}, {1, 1, 1}), Box({0, 0}, {1})}) {
    const absl::Status s = tfckpt::ReadTensor(*o.c, o.T("whole"), box, buf.data(), 4);
    CAPTURE(s.ToString());
    CHECK(absl::IsInvalidArgument(s));
    CHECK(s.message().find("tensor \"whole\": the box at ") == 0);
    CHECK(s.message().find("is not inside its shape [3, 5]") != std::string::npos);
  }
  const absl::Status s = tfckpt::ReadTensor(*o.c, o.T("names"), Region::Full({2}), buf.data(), 16);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message() == "tensor \"names\": a string tensor has no fixed-size elements to read into a buffer");
}

// Each box of `name` fails with data.crc naming the tensor.
static void CheckCrcErrors(const Opened& o, const std::string& name, const std::vector<Region>& boxes) {
  std::string out;
  for (const Region& box : boxes) {
    const absl::Status s = o.Read(name, box, &out);
    CAPTURE(s.ToString());
    CHECK(absl::IsDataLoss(s));
    CHECK(tfckpt::ErrorInfoOf(s).check == "data.crc");
    CHECK(tfckpt::ErrorInfoOf(s).key == name);
  }
}

TEST_CASE("ReadTensor: a damaged byte in a stored piece read whole is a data.crc error naming the tensor") {
  std::string out;
  SUBCASE("a slice of a cut on axis 0 (read straight into the buffer)") {
    Opened o;
    o.Damage("rows", 1, 5);
    CheckCrcErrors(o, "rows", {Region::Full({6, 4}), Box({3, 0}, {3, 4}), Box({2, 0}, {4, 4})});
    // A box covering the damaged piece in part reads it as stored (read.h), and without
    // `verify` nothing is checked.
    CHECK(o.Read("rows", Box({0, 0}, {4, 4}), &out).ok());
    tfckpt::ReadOptions unchecked;
    unchecked.verify = false;
    CHECK(o.Read("rows", Region::Full({6, 4}), &out, unchecked).ok());
  }
  SUBCASE("a slice of a cut on axis 1 (through the copy engine)") {
    Opened o;
    o.Damage("cols", 1, 9);
    CheckCrcErrors(o, "cols", {Region::Full({4, 6}), Box({0, 1}, {4, 5}), Box({0, 2}, {4, 4})});
    CHECK(o.Read("cols", Box({1, 1}, {2, 3}), &out).ok());
  }
}

TEST_CASE("ReadStrings: a string tensor's elements, of the whole or of a box; other dtypes are refused") {
  Opened o;
  std::vector<tfckpt::TensorBytes> keep;
  auto all = tfckpt::ReadStrings(*o.c, o.T("names"), Region::Full({2}), &keep);
  REQUIRE(all.ok());
  CHECK(*all == std::vector<std::string_view>{"a", "bc"});
  auto second = tfckpt::ReadStrings(*o.c, o.T("names"), Box({1}, {1}), &keep);
  REQUIRE(second.ok());
  CHECK(*second == std::vector<std::string_view>{"bc"});
  const absl::Status s = tfckpt::ReadStrings(*o.c, o.T("whole"), Region::Full({3, 5}), &keep).status();
  CAPTURE(s.ToString());
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message().find("whole") != std::string_view::npos);
}

TEST_CASE("ReadTensor: a stop request is Cancelled") {
  Opened o;
  std::stop_source stop;
  tfckpt::ReadOptions options;
  options.stop = stop.get_token();
  std::string out;
  CHECK(o.Read("cols", Region::Full({4, 6}), &out, options).ok());
  stop.request_stop();
  for (const char* name : {"rows", "cols"}) {
    const absl::Status s = o.Read(name, Region::Full(o.T(name).shape), &out, options);
    CAPTURE(s.ToString());
    CHECK(absl::IsCancelled(s));
  }
}
