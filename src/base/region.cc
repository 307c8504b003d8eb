#include "tfckpt/region.h"

#include "run/run.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tfckpt/ordered_code.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {

absl::StatusOr<int64_t> NumElements(const Shape& shape) {
  // The count, and the product of the non-zero dimensions within kMaxElements: a 0-sized
  // dim makes the count 0, but strides and byte offsets are still products of the others
  // (TF takes [0, 2^62, 2^62]; no checkpoint holds it, and its strides would overflow).
  int64_t n = 1, nonzero = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(StrCat("negative dimension in ", ShapeString(shape)));
    if (d != 0 && nonzero > kMaxElements / d) {
      return absl::InvalidArgumentError(StrCat("element count of ", ShapeString(shape), " overflows"));
    }
    if (d != 0) nonzero *= d;
    n *= d;
  }
  return n;
}

std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

std::string ShapeString(const Shape& shape) { return StrCat("[", absl::StrJoin(shape, ", "), "]"); }

int64_t Region::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool Region::empty() const {
  return std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d == 0; });
}

Region Region::Full(const Shape& full) { return Region{Shape(full.size(), 0), full}; }

bool Region::InsideOf(const Shape& full) const {
  if (start.size() != full.size() || shape.size() != full.size()) return false;
  for (size_t d = 0; d < full.size(); ++d) {
    if (start[d] < 0 || shape[d] < 0 || start[d] > full[d] || shape[d] > full[d] - start[d]) return false;
  }
  return true;
}

bool Region::Covers(const Shape& full) const { return *this == Full(full); }

bool Region::WholeRowsOf(const Shape& full) const {
  for (size_t d = 1; d < rank(); ++d) {
    if (start[d] != 0 || shape[d] != full[d]) return false;
  }
  return true;
}

bool Region::Contains(const std::vector<int64_t>& index) const {
  for (size_t d = 0; d < rank(); ++d) {
    if (index[d] < start[d] || index[d] >= start[d] + shape[d]) return false;
  }
  return true;
}

std::optional<Region> Intersect(const Region& a, const Region& b) {
  Region r;
  for (size_t d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(a.start[d], b.start[d]);
    const int64_t hi = std::min(a.start[d] + a.shape[d], b.start[d] + b.shape[d]);
    if (hi <= lo) return std::nullopt;
    r.start.push_back(lo);
    r.shape.push_back(hi - lo);
  }
  return r;
}

RunPlan PlanRuns(const Region& sub, const std::vector<const Region*>& containers) {
  RunPlan p;
  const size_t rank = sub.rank();
  const size_t k = containers.size();
  p.base.assign(k, 0);
  if (sub.empty()) return p;
  if (rank == 0) {
    p.count = 1;
    p.runs = 1;
    return p;
  }
  // Dimensions after `d` are whole in every container, so they merge into the run.
  size_t d = rank - 1;
  auto whole_in_all = [&](size_t dim) {
    for (const Region* c : containers) {
      if (c->shape[dim] != sub.shape[dim]) return false;
    }
    return true;
  };
  while (d > 0 && whole_in_all(d)) --d;
  p.outer = d;
  p.count = 1;
  for (size_t j = d; j < rank; ++j) p.count *= sub.shape[j];
  p.runs = 1;
  for (size_t j = 0; j < d; ++j) p.runs *= sub.shape[j];
  p.steps.assign(k * d, 0);
  for (size_t i = 0; i < k; ++i) {
    const std::vector<int64_t> strides = Strides(containers[i]->shape);
    for (size_t j = 0; j < rank; ++j) p.base[i] += (sub.start[j] - containers[i]->start[j]) * strides[j];
    for (size_t j = 0; j < d; ++j) p.steps[i * d + j] = strides[j];
  }
  return p;
}

std::pair<int64_t, int64_t> RunSpan(const RunPlan& p, const Region& sub, size_t i) {
  if (p.runs == 0) return {0, 0};
  int64_t last = p.base[i];
  for (size_t j = 0; j < p.outer; ++j) last += (sub.shape[j] - 1) * p.steps[i * p.outer + j];
  return {p.base[i], last + p.count};
}

absl::Status ForEachChunk(const Region& target, int64_t esize, int64_t max_bytes,
                          const std::function<absl::Status(const Region&)>& fn) {
  const size_t rank = target.rank();
  if (rank == 0 || target.empty()) return fn(target);
  // The first axis whose slab (everything after it) fits the budget.
  size_t a = 0;
  int64_t slab = esize;
  for (size_t j = 1; j < rank; ++j) slab *= target.shape[j];
  while (slab > max_bytes && a + 1 < rank) {
    ++a;
    slab /= target.shape[a];
  }
  const int64_t step = std::max<int64_t>(1, max_bytes / std::max<int64_t>(1, slab));
  std::vector<int64_t> outer(a, 0);
  while (true) {
    for (int64_t r = 0; r < target.shape[a]; r += step) {
      Region chunk = target;
      for (size_t j = 0; j < a; ++j) {
        chunk.start[j] = target.start[j] + outer[j];
        chunk.shape[j] = 1;
      }
      chunk.start[a] = target.start[a] + r;
      chunk.shape[a] = std::min(step, target.shape[a] - r);
      TFCKPT_RETURN_IF_ERROR(CheckStop());
      TFCKPT_RETURN_IF_ERROR(fn(chunk));
    }
    size_t j = a;
    while (j > 0) {
      --j;
      if (++outer[j] < target.shape[j]) break;
      outer[j] = 0;
      if (j == 0) return absl::OkStatus();
    }
    if (a == 0) return absl::OkStatus();
  }
}

std::string SliceString(const Region& r, const Shape& full) {
  std::string out;
  for (size_t d = 0; d < r.rank(); ++d) {
    if (d > 0) out += ':';
    if (r.start[d] == 0 && r.shape[d] == full[d]) {
      out += '-';
    } else {
      StrAppend(&out, r.start[d], ",", r.shape[d]);
    }
  }
  return out;
}

absl::StatusOr<Region> ParseSliceString(std::string_view spec, const Shape& full, SliceExtents* extents) {
  std::vector<absl::string_view> items = absl::StrSplit(AV(spec), ':', absl::SkipEmpty());
  if (items.size() != full.size()) {
    return absl::InvalidArgumentError(StrCat("slice \"", spec, "\" has ", items.size(),
                                                   " dimensions, tensor ", ShapeString(full), " has ",
                                                   full.size()));
  }
  Region r;
  for (size_t d = 0; d < items.size(); ++d) {
    if (items[d] == "-") {
      r.start.push_back(0);
      r.shape.push_back(full[d]);
      continue;
    }
    std::vector<absl::string_view> parts = absl::StrSplit(items[d], ',');
    int64_t start, length;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &start) || !absl::SimpleAtoi(parts[1], &length) ||
        start < 0 || length <= 0) {
      return absl::InvalidArgumentError(StrCat("bad slice item \"", items[d], "\" in \"", spec,
                                                     "\" (want START,LENGTH or -)"));
    }
    if (start > full[d] || length > full[d] - start) {
      return absl::InvalidArgumentError(StrCat("slice item \"", items[d], "\" lies outside dimension ",
                                                     d, " of size ", full[d]));
    }
    r.start.push_back(start);
    r.shape.push_back(length);
  }
  if (extents != nullptr) {
    *extents = SliceExtents{r.start, r.shape};
    for (size_t d = 0; d < items.size(); ++d) {
      if (items[d] == "-") extents->lengths[d] = -1;
    }
  }
  return r;
}

}  // namespace tfckpt
