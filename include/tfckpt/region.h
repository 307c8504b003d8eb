// One type for "a box inside a tensor": start + shape. Used for stored slices,
// partitioner output, reshard plans, validation coverage and DTensor layouts.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tfckpt {

using Shape = std::vector<int64_t>;

// Number of elements of `shape`; error when a dim is negative or the product overflows
// int64 (untrusted shapes come from files).
absl::StatusOr<int64_t> NumElements(const Shape& shape);

// Row-major strides in elements. REQUIRES: NumElements(shape) succeeded.
std::vector<int64_t> Strides(const Shape& shape);

std::string ShapeString(const Shape& shape);  // "[10, 3]", "[]" for a scalar

struct Region {
  Shape start;
  Shape shape;

  size_t rank() const { return shape.size(); }
  // REQUIRES: the region was validated against a shape (no overflow).
  int64_t num_elements() const;
  bool empty() const;

  // The whole of `full`.
  static Region Full(const Shape& full);

  // True when 0 <= start, 0 <= shape and start + shape <= full in every dimension.
  bool InsideOf(const Shape& full) const;
  bool Covers(const Shape& full) const;  // equals Full(full)
  bool Contains(const std::vector<int64_t>& index) const;

  friend bool operator==(const Region&, const Region&) = default;
};

// Intersection of two regions of the same rank; nullopt when it is empty.
// REQUIRES: a.rank() == b.rank().
std::optional<Region> Intersect(const Region& a, const Region& b);

// Calls fn(offsets, count) for each run of `sub` that is contiguous in the row-major
// layout of every region in `containers`: offsets[i] is the element offset of the run's
// first element inside containers[i], count its number of elements. Runs come in
// row-major order of `sub`, as long as the containers allow (whole trailing dimensions
// merge into one run). Nothing is called for an empty `sub`.
// REQUIRES: every container has sub's rank and contains sub.
void ForEachRun(const Region& sub, const std::vector<const Region*>& containers,
                const std::function<void(const int64_t* offsets, int64_t count)>& fn);

// TensorSlice text form (FORMAT §d.3): "0,5:-". Dimensions covering all of `full`
// print as "-". A scalar prints as "". REQUIRES: r.rank() == full.size().
std::string SliceString(const Region& r, const Shape& full);

// Parses a slice string against `full` ("-" = whole dimension). Error when the rank
// differs or an extent is outside `full`.
absl::StatusOr<Region> ParseSliceString(std::string_view spec, const Shape& full);

}  // namespace tfckpt
