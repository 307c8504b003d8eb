// Unit tests of CompareTensorValues: logical values whatever the slicing, the numbers it
// gathers, and comparison across floating-point dtypes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "test_util.h"
#include "base/float_convert.h"
#include "model/tensor_encoding.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/open.h"
#include "validate/compare.h"

namespace {

using tfckpt::Region;

template <typename T>
std::string BytesOf(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// "whole" [4, 3] float32 = 0.25 * i; "rows": the same values in two row slices except
// [2, 1] and [3, 0], both 5 larger; "bf": "whole" as bfloat16 (exact); "nan": "whole"
// with [0, 2] = NaN; "words" / "words2" [3] strings differing at [1].
std::unique_ptr<tfckpt::Checkpoint> Fixture(const tfckpt::testing::TempDir& dir) {
  std::vector<float> whole(12), rows(12);
  std::vector<uint16_t> bf(12);
  for (int i = 0; i < 12; ++i) {
    whole[i] = rows[i] = 0.25f * static_cast<float>(i);
    bf[i] = tfckpt::FloatToBFloat16(whole[i]);
  }
  rows[2 * 3 + 1] += 5;
  rows[3 * 3 + 0] += 5;
  std::vector<float> nan = whole;
  nan[2] = std::nanf("");
  const std::string prefix = dir / "c";
  auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
  REQUIRE(w.ok());
  REQUIRE((*w)->Add("whole", 1, {4, 3}, BytesOf(whole)).ok());
  const std::string r = BytesOf(rows);
  REQUIRE((*w)->AddSlice("rows", 1, {4, 3}, Region{{0, 0}, {1, 3}}, r.substr(0, 12)).ok());
  REQUIRE((*w)->AddSlice("rows", 1, {4, 3}, Region{{1, 0}, {3, 3}}, r.substr(12)).ok());
  REQUIRE((*w)->Add("bf", 14, {4, 3}, BytesOf(bf)).ok());
  REQUIRE((*w)->Add("nan", 1, {4, 3}, BytesOf(nan)).ok());
  std::string words, words2;
  tfckpt::EncodeStrings({"a", "b", "c"}, &words);
  tfckpt::EncodeStrings({"a", "x", "c"}, &words2);
  REQUIRE((*w)->Add("words", 7, {3}, words).ok());
  REQUIRE((*w)->Add("words2", 7, {3}, words2).ok());
  REQUIRE((*w)->Finish().ok());
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  return std::move(*c);
}

tfckpt::ValueDifference Diff(const tfckpt::Checkpoint& c, const char* a, const char* b,
                             std::optional<double> tolerance = std::nullopt) {
  tfckpt::CompareOptions o;
  o.use_tolerance = tolerance.has_value();
  o.tolerance = tolerance.value_or(0);
  auto d = tfckpt::CompareTensorValues(c, *c.Find(a), c, *c.Find(b), o);
  REQUIRE(d.ok());
  return *d;
}

}  // namespace

TEST_CASE("CompareTensorValues: any slicing; count, first, largest difference (first on a tie), relative") {
  tfckpt::testing::TempDir dir;
  auto c = Fixture(dir);
  const auto d = Diff(*c, "rows", "whole");
  CHECK(d.elements == 12);
  CHECK(d.differing == 2);
  CHECK(d.first.index == std::vector<int64_t>{2, 1});
  CHECK(d.first.new_value == "6.75");
  CHECK(d.first.old_value == "1.75");
  CHECK(d.numeric);
  CHECK(d.max_abs == 5);
  CHECK(d.max.index == std::vector<int64_t>{2, 1});  // [3, 0] differs by 5 too: the first wins
  CHECK(d.max_rel == doctest::Approx(5 / 1.75));       // 5 / 1.75 at [2, 1] > 5 / 2.25 at [3, 0]
  CHECK(Diff(*c, "whole", "whole").differing == 0);
  CHECK(Diff(*c, "rows", "whole", 5.0).differing == 0);
  CHECK(Diff(*c, "rows", "whole", 4.9).differing == 2);
}

TEST_CASE("CompareTensorValues: floating-point dtypes by value; NaN; strings") {
  tfckpt::testing::TempDir dir;
  auto c = Fixture(dir);
  CHECK(Diff(*c, "bf", "whole", 0.0).differing == 0);
  const auto r = Diff(*c, "bf", "rows", 0.0);
  CHECK(r.differing == 2);
  CHECK(r.first.new_value == "1.75");  // bfloat16 text
  const auto n = Diff(*c, "nan", "whole");
  CHECK(n.differing == 1);
  CHECK(std::isinf(n.max_abs));
  CHECK(n.max.index == std::vector<int64_t>{0, 2});
  CHECK(Diff(*c, "nan", "nan", 0.0).differing == 0);  // NaN equals NaN
  const auto s = Diff(*c, "words2", "words");
  CHECK(s.differing == 1);
  CHECK_FALSE(s.numeric);
  CHECK(s.first.index == std::vector<int64_t>{1});
  CHECK(s.first.new_value == "b'x'");
}
