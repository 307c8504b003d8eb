// Unit tests of CheckSliceLayout: a partition is clean; overlaps, duplicates, gaps (with
// the first element no slice holds) and slices outside the shape are each their finding.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "validate/validate.h"

namespace {

using tfckpt::Region;

// A partitioned float32 tensor of `shape` stored as `regions`.
tfckpt::TensorEntry Tensor(const tfckpt::Shape& shape, const std::vector<Region>& regions) {
  tfckpt::TensorEntry t;
  t.name = "t";
  t.dtype = 1;
  t.shape = shape;
  t.partitioned = true;
  for (const Region& r : regions) t.slices.push_back(tfckpt::StoredSlice{r, {}, "", {}});
  return t;
}

std::vector<tfckpt::Finding> Layout(const tfckpt::TensorEntry& t) {
  std::vector<tfckpt::Finding> out;
  tfckpt::CheckSliceLayout(t, "f.index", &out);
  return out;
}

}  // namespace

TEST_CASE("CheckSliceLayout: a partition, on any axis, has no finding") {
  CHECK(Layout(Tensor({4, 3}, {Region{{0, 0}, {1, 3}}, Region{{1, 0}, {3, 3}}})).empty());
  CHECK(Layout(Tensor({4, 3}, {Region{{0, 2}, {4, 1}}, Region{{0, 0}, {4, 2}}})).empty());
  CHECK(Layout(Tensor({4, 3}, {Region{{0, 0}, {2, 2}}, Region{{0, 2}, {2, 1}}, Region{{2, 0}, {2, 3}}})).empty());
}

TEST_CASE("CheckSliceLayout: overlapping slices and a slice stored twice are slice.overlap") {
  auto f = Layout(Tensor({10, 3}, {Region{{0, 0}, {4, 3}}, Region{{3, 0}, {7, 3}}}));
  REQUIRE(f.size() == 1);
  CHECK(f[0].check == "slice.overlap");
  CHECK(f[0].key == "t");
  CHECK(f[0].file == "f.index");
  CHECK(f[0].message == "slices 0,4:- and 3,7:- overlap");
  f = Layout(Tensor({4}, {Region{{0}, {2}}, Region{{2}, {2}}, Region{{2}, {2}}}));
  REQUIRE(f.size() == 1);
  CHECK(f[0].check == "slice.overlap");
  CHECK(f[0].message == "slice 2,2 is stored twice");
}

TEST_CASE("CheckSliceLayout: elements no slice holds are slice.gap, with the first of them") {
  auto f = Layout(Tensor({10, 3}, {Region{{0, 0}, {3, 3}}, Region{{4, 0}, {6, 3}}}));
  REQUIRE(f.size() == 1);
  CHECK(f[0].check == "slice.gap");
  CHECK(f[0].message ==
        "elements starting at [3, 0] are in no slice (slices hold 27 of 30 elements): they could never be restored");
  // On axis 1: the first uncovered element is [0, 2].
  f = Layout(Tensor({4, 3}, {Region{{0, 0}, {4, 2}}}));
  REQUIRE(f.size() == 1);
  CHECK(f[0].check == "slice.gap");
  CHECK(f[0].message.find("starting at [0, 2]") != std::string::npos);
  // Overlapping and incomplete: both findings.
  f = Layout(Tensor({6}, {Region{{0}, {3}}, Region{{2}, {2}}}));
  REQUIRE(f.size() == 2);
  CHECK(f[0].check == "slice.overlap");
  CHECK(f[1].check == "slice.gap");
  CHECK(f[1].message.find("starting at [4]") != std::string::npos);
}

TEST_CASE("CheckSliceLayout: a slice outside the shape is slice.bounds, not a made-up gap") {
  auto f = Layout(Tensor({4}, {Region{{0}, {4}}, Region{{4}, {2}}}));
  REQUIRE(f.size() == 1);
  CHECK(f[0].check == "slice.bounds");
  CHECK(f[0].message == "slice 4,2 lies outside the shape [4]");
  f = Layout(Tensor({4, 3}, {Region{{0}, {4}}}));  // rank 1 in a rank-2 tensor
  REQUIRE(f.size() == 1);
  CHECK(f[0].check == "slice.bounds");
  CHECK(f[0].message == "slice of rank 1 lies outside the shape [4, 3]");
}
