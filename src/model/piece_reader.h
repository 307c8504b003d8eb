// The formats' interface to a Checkpoint (tfckpt/checkpoint.h): how the bytes of a stored
// piece are read and checked. Internal to the library: each format's loader
// (src/format/*/) implements PieceReader and builds a Checkpoint around it; callers of the
// public API see only Checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/storage.h"

namespace tfckpt {

// A check of one stored piece by a checksum of its format other than TensorFlow's CRC-32C
// of the payload (an .npz member's CRC-32, which also covers its .npy header), fed the
// payload's bytes in order by a caller that reads them anyway (a comparison): the piece is
// then checked with no read of its own. Not thread-safe; one per piece and reader.
class PayloadCheck {
 public:
  virtual ~PayloadCheck() = default;
  // The next bytes of the payload, in order from its first.
  virtual void Feed(std::string_view bytes) = 0;
  // OK when exactly the payload was fed and its checksum holds; else the error VerifyCrc
  // would give.
  virtual absl::Status Finish() = 0;
};

// What differs per format: how the bytes of a stored piece are read and checked. Each
// format (src/format/*/) implements it and builds a Checkpoint around it (see open.h).
// Checkpoint refuses tensors with a `defect` before calling any of these.
class PieceReader {
 public:
  virtual ~PieceReader() = default;

  // See Checkpoint::Read. REQUIRES: t.defect is empty.
  virtual absl::StatusOr<TensorBytes> Read(const TensorEntry& t, const StoredSlice& s, bool verify) const = 0;

  // See Checkpoint::VerifyCrc. By default the piece is read whole with `verify`.
  // REQUIRES: t.defect is empty.
  virtual absl::Status VerifyCrc(const TensorEntry& t, const StoredSlice& s, std::string* buffer) const;

  // See Checkpoint::ReadRange. By default the piece is read whole (unverified) into
  // `owner` and the range is a view into it. REQUIRES: t.defect is empty, begin <= end <=
  // payload size.
  virtual absl::StatusOr<std::string_view> ReadRange(const TensorEntry& t, const StoredSlice& s, uint64_t begin,
                                                     uint64_t end, std::string* buffer, TensorBytes* owner) const;

  // See Checkpoint::ReadInto. By default through Read (a whole piece, `verify`) or
  // ReadRange, copied chunk by chunk. REQUIRES: t.defect is empty, begin <= end <=
  // payload size, a fixed-size dtype.
  virtual absl::Status ReadInto(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end, char* out,
                                bool verify) const;
  // See Checkpoint::StartPayloadCheck. By default none (nullptr).
  virtual std::unique_ptr<PayloadCheck> StartPayloadCheck(const TensorEntry& t, const StoredSlice& s) const;

  // See Checkpoint::DataFile. REQUIRES: 0 <= shard < CheckpointInfo::num_shards.
  virtual absl::StatusOr<const ReadableFile*> DataFile(int32_t shard) const;

  // See Checkpoint::CheckStored: OK when the bytes of `s` are present where the index puts
  // them (V2, safetensors: inside its data file). By default OK (V1 and .npz loaders check
  // their pieces against the bytes that hold them). REQUIRES: t.defect is empty.
  virtual absl::Status CheckStored(const TensorEntry& t, const StoredSlice& s) const;

  // See Checkpoint::ForEachIndexEntry and raw_header (V2 only; others have neither).
  virtual absl::Status ForEachIndexEntry(const IndexEntryVisitor& visit) const;
  virtual const std::string& raw_header() const;
};

}  // namespace tfckpt
