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

// The most elements a shape may have, counting only its non-zero dimensions: 2^59, so
// that a count times the widest element (16 bytes) and every stride and byte offset inside
// it fit in int64 (untrusted shapes come from files).
inline constexpr int64_t kMaxElements = INT64_MAX / 16;

// Number of elements of `shape`; error when a dim is negative or the product of its
// non-zero dims exceeds kMaxElements.
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
  // Spans all of axes 1.. of `full` (a cut on axis 0 only: whole rows). REQUIRES: rank() ==
  // full.size().
  bool WholeRowsOf(const Shape& full) const;
  bool Contains(const std::vector<int64_t>& index) const;

  friend bool operator==(const Region&, const Region&) = default;
};

// Intersection of two regions of the same rank; nullopt when it is empty.
// REQUIRES: a.rank() == b.rank().
std::optional<Region> Intersect(const Region& a, const Region& b);

// How `sub` splits into runs that are contiguous in the row-major layout of every region
// in `containers`: `runs` runs of `count` elements each (whole trailing dimensions merge
// into one run). REQUIRES: every container has sub's rank and contains sub.
struct RunPlan {
  size_t outer = 0;             // dimensions [0, outer) are walked; the rest form a run
  int64_t count = 0;            // elements per run
  int64_t runs = 0;             // number of runs (0 for an empty sub)
  std::vector<int64_t> base;    // per container: element offset of sub's first element
  std::vector<int64_t> steps;   // per container and outer dim: stride, [c * outer + dim]
};
RunPlan PlanRuns(const Region& sub, const std::vector<const Region*>& containers);

// The element span [first, last + 1) that the runs of `p` (planned for `sub`) cover in
// container `i`: what must be read from that container to serve every run.
std::pair<int64_t, int64_t> RunSpan(const RunPlan& p, const Region& sub, size_t i);

// Calls fn(offsets, count) for each run of `sub`, in row-major order of `sub`: offsets[i]
// is the element offset of the run's first element inside containers[i].
template <typename Fn>
void ForEachRun(const Region& sub, const std::vector<const Region*>& containers, Fn&& fn) {
  const RunPlan p = PlanRuns(sub, containers);
  if (p.runs == 0) return;
  const size_t k = containers.size();
  std::vector<int64_t> off = p.base;
  std::vector<int64_t> idx(p.outer, 0);
  for (int64_t r = 0; r < p.runs; ++r) {
    fn(static_cast<const int64_t*>(off.data()), p.count);
    for (size_t j = p.outer; j-- > 0;) {
      for (size_t i = 0; i < k; ++i) off[i] += p.steps[i * p.outer + j];
      if (++idx[j] < sub.shape[j]) break;
      for (size_t i = 0; i < k; ++i) off[i] -= p.steps[i * p.outer + j] * sub.shape[j];
      idx[j] = 0;
    }
  }
}

// Splits `target` into consecutive sub-regions that are contiguous in its row-major
// layout, each at most `max_bytes` at `esize` bytes per element (at least one element),
// and calls fn on each in order; stops at the first error, or with the run's stopped error
// when the run it works for is stopping (run/run.h).
absl::Status ForEachChunk(const Region& target, int64_t esize, int64_t max_bytes,
                          const std::function<absl::Status(const Region&)>& fn);

// TensorSlice text form (docs/FORMAT.md §d.3): "0,5:-". Dimensions covering all of `full`
// print as "-". A scalar prints as "". REQUIRES: r.rank() == full.size().
std::string SliceString(const Region& r, const Shape& full);

struct SliceExtents;  // ordered_code.h

// Parses a slice string against `full` ("-" = whole dimension). Error when the rank
// differs or an extent is outside `full`. With `extents`, also stores the extents as the
// string spells them ("-" as length -1, "0,N" explicit).
absl::StatusOr<Region> ParseSliceString(std::string_view spec, const Shape& full, SliceExtents* extents = nullptr);

}  // namespace tfckpt
