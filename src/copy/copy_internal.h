// What the files of the copy engine (copy.cc, execute_plan.cc) share; not public.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "tfckpt/checkpoint.h"

namespace tfckpt::copy_internal {

inline constexpr int64_t kChunkBytes = 8 << 20;   // gather buffer
inline constexpr size_t kCopyChunk = 1 << 20;     // pread for the CRC of in-kernel copies
inline constexpr int64_t kDirectRun = 256 << 10;  // runs at least this long are copied in-kernel
inline constexpr int64_t kSpanBytes = 1 << 20;    // the most a gather reads of one source per chunk

// The stored pieces of `t` that hold elements of `region` (for an empty region: a piece
// equal to it).
std::vector<const StoredSlice*> SourcesOf(const TensorEntry& t, const Region& region);

// Whether CopyRegion moves `region` in-kernel: a V2 little-endian source whose pieces
// hold the region in runs of at least kDirectRun bytes. Otherwise it is gathered.
bool MovesInKernel(const Checkpoint& c, const TensorEntry& t, const std::vector<const StoredSlice*>& sources,
                   const Region& region);

// A run CopyRegion moves unchanged: `n` elements from element `src` of stored piece `s`
// to element `dst` of the region (row-major offsets).
struct KernelRun {
  int64_t dst, src, n;
  const StoredSlice* s;
  // Whether the run is its stored piece, whole (its bytes are the piece's, stored CRC and all).
  bool WholePiece() const { return src == 0 && n == s->region.num_elements(); }
};
// The runs of `region` of `t` in `sources` (SourcesOf), in the region's order.
std::vector<KernelRun> KernelRuns(const Region& region, const std::vector<const StoredSlice*>& sources);

// The error for a piece whose bytes, as they were copied, do not match its stored CRC
// (`crc` unmasked); OK when they do.
absl::Status CheckCopiedCrc(const Checkpoint& c, const TensorEntry& t, const StoredSlice& s, uint32_t crc);

}  // namespace tfckpt::copy_internal
