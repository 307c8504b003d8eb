#include "tfckpt/strings.h"
#include "tfckpt/region.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tfckpt/strings.h"

namespace tfckpt {

absl::StatusOr<int64_t> NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(StrCat("negative dimension in ", ShapeString(shape)));
    if (d != 0 && n > INT64_MAX / d) {
      return absl::InvalidArgumentError(StrCat("element count of ", ShapeString(shape), " overflows"));
    }
    n *= d;
  }
  // A 0-sized dim makes the count 0 even after an earlier overflow check passed.
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

void ForEachRun(const Region& sub, const std::vector<const Region*>& containers,
                const std::function<void(const int64_t* offsets, int64_t count)>& fn) {
  const size_t rank = sub.rank();
  const size_t k = containers.size();
  std::vector<int64_t> offsets(k, 0);
  if (sub.empty()) return;
  if (rank == 0) {
    fn(offsets.data(), 1);
    return;
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
  int64_t count = 1;
  for (size_t j = d; j < rank; ++j) count *= sub.shape[j];
  std::vector<std::vector<int64_t>> strides;
  for (const Region* c : containers) strides.push_back(Strides(c->shape));
  // Offset of sub's first element in each container, then walk dims [0, d) row-major.
  std::vector<int64_t> base(k, 0);
  for (size_t i = 0; i < k; ++i) {
    for (size_t j = 0; j < rank; ++j) base[i] += (sub.start[j] - containers[i]->start[j]) * strides[i][j];
  }
  std::vector<int64_t> idx(d, 0);
  while (true) {
    for (size_t i = 0; i < k; ++i) {
      int64_t off = base[i];
      for (size_t j = 0; j < d; ++j) off += idx[j] * strides[i][j];
      offsets[i] = off;
    }
    fn(offsets.data(), count);
    size_t j = d;
    while (j > 0) {
      --j;
      if (++idx[j] < sub.shape[j]) break;
      idx[j] = 0;
      if (j == 0) return;
    }
    if (d == 0) return;
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

absl::StatusOr<Region> ParseSliceString(std::string_view spec, const Shape& full) {
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
  return r;
}

}  // namespace tfckpt
