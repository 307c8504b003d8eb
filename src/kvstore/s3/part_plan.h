// The parts of an object assembled partly from ranges of other objects of the same store
// (S3's UploadPartCopy with x-amz-copy-source-range): which parts the store copies and
// which are sent from here. A pure function of the layout, so that S3's rules are tested
// without a store:
//   - every part but the last is at least 5 MiB (kMinPart), none larger than 5 GiB;
//   - at most 10,000 parts;
//   - a copy shorter than kMinPart is sent from here (its bytes are at hand anyway), and
//     bytes sent from here that would make a part too small to stand alone (a header, small
//     tensors between two large ones) take bytes of the next copy with them, fetched and
//     sent: the copy keeps at least kMinPart, else it is sent whole.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/s3/ranges.h"

namespace tfckpt::s3 {

inline constexpr uint64_t kMinPart = 5ull << 20;
inline constexpr uint64_t kMaxPart = 5ull << 30;

// Bytes [offset, offset + size) of the object are bytes [source_offset, ...) of source
// `source` (an index into the caller's list of sources).
struct CopyRun {
  uint64_t offset = 0, size = 0;
  int source = 0;
  uint64_t source_offset = 0;
};

// Part [begin, end): copied from `source` at `source_offset` (source >= 0) or sent from
// here (source == -1).
struct PlannedPart {
  uint64_t begin = 0, end = 0;
  int source = -1;
  uint64_t source_offset = 0;
  bool copied() const { return source >= 0; }
};

struct PartLimits {
  uint64_t min_part = kMinPart;
  // The largest part copied (at most kMaxPart; smaller keeps a refused copy, fetched and
  // sent instead, small in memory).
  uint64_t max_copy_part = kMaxPart;
  // Parts sent from here are about this size (between it and twice it; memory).
  uint64_t local_part = 8ull << 20;
  int max_parts = static_cast<int>(kMaxParts);  // (ranges.h: S3's limit)
};

// The parts of an object of `size` bytes whose `copies` (in any order, within the object,
// not overlapping) are copies of ranges of other objects. Empty when nothing would be
// copied (every copy too small); FailedPrecondition when more than limits.max_parts parts
// would be needed (the caller then sends the object from here). The parts tile [0, size)
// in order.
absl::StatusOr<std::vector<PlannedPart>> PlanParts(uint64_t size, std::vector<CopyRun> copies,
                                                   const PartLimits& limits = {});

}  // namespace tfckpt::s3
