#include "kvstore/s3/part_plan.h"

#include <algorithm>

#include "tfckpt/strings.h"

namespace tfckpt::s3 {

absl::StatusOr<std::vector<PlannedPart>> PlanParts(uint64_t size, std::vector<CopyRun> copies,
                                                   const PartLimits& limits) {
  std::sort(copies.begin(), copies.end(), [](const CopyRun& a, const CopyRun& b) { return a.offset < b.offset; });
  // Copies that continue each other, in the object and in one source, are one copy.
  std::vector<CopyRun> runs;
  for (const CopyRun& c : copies) {
    if (c.size == 0) continue;
    if (c.offset > size || c.size > size - c.offset) {
      return absl::InvalidArgumentError(StrCat("bug: a copy of ", c.size, " bytes at ", c.offset,
                                               " ends past the object's ", size, " bytes"));
    }
    if (!runs.empty()) {
      CopyRun& last = runs.back();
      if (c.offset < last.offset + last.size) {
        return absl::InvalidArgumentError(StrCat("bug: copies at ", last.offset, " and ", c.offset, " overlap"));
      }
      if (last.offset + last.size == c.offset && last.source == c.source &&
          last.source_offset + last.size == c.source_offset) {
        last.size += c.size;
        continue;
      }
    }
    runs.push_back(c);
  }
  std::vector<PlannedPart> parts;
  // Bytes [begin, end) sent from here: parts of local_part to twice that (one part when
  // shorter), so that each is at least min_part where the stretch is.
  const auto local = [&](uint64_t begin, uint64_t end) {
    if (end <= begin) return;
    const uint64_t len = end - begin;
    const uint64_t n = std::max<uint64_t>(1, len / std::max<uint64_t>(1, limits.local_part));
    for (uint64_t i = 0; i < n; ++i) parts.push_back({begin + len / n * i, i + 1 == n ? end : begin + len / n * (i + 1)});
  };
  bool copied = false;
  uint64_t pending = 0;  // where the bytes sent from here not yet in a part begin
  for (const CopyRun& r : runs) {
    if (r.size < limits.min_part) continue;  // sent from here with its neighbours
    uint64_t a = r.offset;
    const uint64_t b = r.offset + r.size;
    const uint64_t gap = a - pending;
    if (gap > 0 && gap < limits.min_part) {
      // Too small to stand alone: the copy's first bytes go with it, if the copy keeps enough.
      const uint64_t need = limits.min_part - gap;
      if (r.size - need < limits.min_part) continue;  // then the whole copy is sent from here
      a += need;
    }
    local(pending, a);
    const uint64_t len = b - a;
    const uint64_t n = (len + limits.max_copy_part - 1) / limits.max_copy_part;
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t begin = a + len / n * i, end = i + 1 == n ? b : a + len / n * (i + 1);
      parts.push_back({begin, end, r.source, r.source_offset + (begin - r.offset)});
    }
    copied = true;
    pending = b;
    if (parts.size() > static_cast<size_t>(limits.max_parts)) break;
  }
  if (!copied) return std::vector<PlannedPart>{};
  local(pending, size);
  if (parts.size() > static_cast<size_t>(limits.max_parts)) {
    return absl::FailedPreconditionError(StrCat("an object of ", size, " bytes assembled from ", runs.size(),
                                                " copied ranges needs more than ", limits.max_parts, " parts"));
  }
  return parts;
}

}  // namespace tfckpt::s3
