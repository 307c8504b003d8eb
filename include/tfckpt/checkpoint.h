// A checkpoint opened for reading: its files, header facts and slice map.
//
// The slice map lists every *logical* tensor once (partitioned tensors under their own
// name, never as raw slice keys) with its dtype, full shape, and the stored pieces that
// hold its bytes. An unpartitioned tensor has exactly one piece covering it.
//
// Core knows no format: each format's loader (src/format/<format>/) builds a Checkpoint
// from its slice map and a PieceReader (src/model/piece_reader.h, internal); open.h decides
// which loader a CKPT needs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/storage.h"
#include "tfckpt/ordered_code.h"
#include "tfckpt/region.h"
#include "tfckpt/status.h"

namespace tfckpt {

// kSafetensors: a .safetensors file or a sharded set (safetensors.h), read through the
// same slice map (one piece per tensor; no CRCs).
enum class Format { kV2, kV1, kSafetensors, kNpz };

// Where the bytes of one stored piece live.
struct StoredData {
  // V2: data file `shard`, bytes [offset, offset + size), masked CRC-32C `masked_crc`.
  int32_t shard = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t masked_crc = 0;
  // V1: index into CheckpointInfo::v1_files of the table holding the slice (its key is
  // StoredSlice::key); -1 for V2.
  int v1_file = -1;
};

struct StoredSlice {
  Region region;          // where the piece sits in the full tensor
  SliceExtents extents;   // the extents as stored (for keys and fidelity)
  std::string key;        // table key of the entry holding the bytes
  StoredData data;
};

struct TensorEntry {
  std::string name;  // logical name
  int32_t dtype = 0; // raw DataType value (may be unknown; see LookupDType)
  Shape shape;       // full shape
  bool partitioned = false;  // stored as a metadata entry plus slice entries
  std::vector<StoredSlice> slices;

  // Bytes of all stored pieces (V2), or elements x element size (V1, fixed-size dtypes).
  uint64_t bytes = 0;

  // Why this tensor cannot be read (unknown dtype, missing slice entry, size not matching
  // its shape, ...); empty when it looks readable. The rest of the checkpoint stays usable.
  std::string defect;
  std::string defect_check;  // its check id (man tfckpt-validate), e.g. "entry.size"
};

struct CheckpointInfo {
  Format format = Format::kV2;
  std::string prefix;              // V2 prefix, or the V1 path / pattern
  std::string index_path;          // V2 only
  std::vector<std::string> v1_files;
  int32_t num_shards = 0;          // V2 header
  bool big_endian = false;         // V2 header
  int32_t producer = 0, min_consumer = 0;
  std::vector<std::string> data_files;  // V2: prefix.data-%05d-of-%05d, by shard id
  bool index_has_snappy = false;
  uint64_t index_size = 0;
  std::vector<std::string> notes;  // how the argument was resolved, recoverable oddities
  std::vector<std::string> orphan_slice_keys;  // slice entries no metadata entry lists
  // Safetensors: the "__metadata__" of its (first) file, as {str: str}; empty elsewhere.
  std::map<std::string, std::string> safetensors_metadata;
};

// The payload of one stored piece in TensorFlow's byte layout (POD elements
// little-endian; strings and variants as in docs/FORMAT.md §c.4/§c.5).
struct TensorBytes {
  std::string_view data;
  std::shared_ptr<const void> owner;  // keeps `data` alive when it is not a file mapping
};

// One index entry as stored: key, serialized value, file offset of the block holding it.
// The views are valid only during the call.
using IndexEntryVisitor =
    std::function<absl::Status(std::string_view key, std::string_view value, uint64_t block_offset)>;

// How a format reads and checks its stored pieces (PieceReader), and a check of a piece by a
// checksum of its own (PayloadCheck): the formats' interface, internal to the library
// (src/model/piece_reader.h).
class PayloadCheck;
class PieceReader;

class Checkpoint {
 public:
  // A checkpoint whose slice map a format has loaded (open.h opens one by name).
  // REQUIRES: `tensors` sorted by name; `reader` reads the pieces they list.
  Checkpoint(CheckpointInfo info, std::vector<TensorEntry> tensors, std::unique_ptr<PieceReader> reader);
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const CheckpointInfo& info() const { return info_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* Find(std::string_view name) const;
  // How the argument was resolved (CheckpointInfo::notes).
  void set_notes(std::vector<std::string> notes) { info_.notes = std::move(notes); }

  // Visits every index entry as stored (V2): key and serialized BundleEntryProto, in key
  // order, re-reading the index (nothing is kept in memory). The header (key "") is
  // included. Not thread-safe against other calls of itself.
  absl::Status ForEachIndexEntry(const IndexEntryVisitor& visit) const;
  const std::string& raw_header() const;

  // The data file of `shard`, opened (locally: mapped) on first use. Thread-safe.
  absl::StatusOr<const ReadableFile*> DataFile(int32_t shard) const;

  // The payload of one piece of `t`. V2: a view into the mapped data file, bounds-checked
  // and (when `verify`) checked against the stored CRC; big-endian bundles are
  // byte-swapped into a buffer. V1: the decoded values re-encoded in V2 layout.
  absl::StatusOr<TensorBytes> Read(const TensorEntry& t, const StoredSlice& s, bool verify = true) const;

  // Checks the CRC of one stored piece without keeping its bytes: fixed-size V2 payloads
  // are streamed with pread through `buffer` (memory stays flat), others are read whole.
  absl::Status VerifyCrc(const TensorEntry& t, const StoredSlice& s, std::string* buffer) const;

  // Bytes [begin, end) of one stored piece's payload (little-endian layout). V2: read with
  // pread into `buffer` (memory stays flat; reading such spans through the mapping made
  // RSS grow to over 1 GiB on the benchmark even with MADV_DONTNEED after each span).
  // V1 and big-endian: from the decoded payload, kept in `owner` across calls for the
  // same piece. Not CRC-checked (see VerifyCrc).
  // REQUIRES: begin <= end <= payload size.
  absl::StatusOr<std::string_view> ReadRange(const TensorEntry& t, const StoredSlice& s, uint64_t begin,
                                             uint64_t end, std::string* buffer, TensorBytes* owner) const;

  // Bytes [begin, end) of one stored piece's payload (little-endian layout) read into the
  // caller's `out` (end - begin bytes), in chunks of about 1 MiB: V2 and safetensors with
  // positional reads straight into `out` (no other copy, nothing kept mapped). The whole
  // payload read with `verify` has its stored CRC checked over the bytes as they arrive.
  // Before each chunk the current run's test hook reaches the point "read-chunk" and a stop
  // request ends the read (Cancelled; run/run.h), so that a long read can be interrupted.
  // REQUIRES: a fixed-size dtype, begin <= end <= payload size.
  absl::Status ReadInto(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end, char* out,
                        bool verify = true) const;
  // The error every read of `t` gives when its index entry is defective (t.defect: DataLoss
  // naming the index and the tensor); OK when it has none.
  absl::Status DefectError(const TensorEntry& t) const;
  // Before anything is allocated from `t`'s shape: OK when `t` has no defect and every
  // stored piece that meets `box` (all of them when null) lies inside the bytes that hold
  // it (V2, safetensors: its data file, opened for its size). Else the error a read would
  // give (DataLoss: entry.bounds naming the data file, tensor and offset). So an element
  // count taken from a checked tensor is backed by bytes that exist: an index cannot make
  // a caller allocate more than its data files hold (docs/RELIABILITY.md, untrusted input).
  absl::Status CheckStored(const TensorEntry& t, const Region* box = nullptr) const;
  // A PayloadCheck of the piece when its format stores a checksum other than CRC-32C of
  // the payload (.npz: the member's CRC-32); nullptr otherwise (V2: the stored CRC-32C,
  // which a caller computes itself; safetensors: none). REQUIRES: t.defect is empty.
  std::unique_ptr<PayloadCheck> StartPayloadCheck(const TensorEntry& t, const StoredSlice& s) const;

 private:
  CheckpointInfo info_;
  std::vector<TensorEntry> tensors_;  // sorted by name
  std::unique_ptr<PieceReader> reader_;
};

// How errors name a stored piece: "" for an unpartitioned tensor, "slice 0,250:- " for
// a slice (errors carry the logical tensor name as their key, never raw slice keys).
std::string PieceLabel(const TensorEntry& t, const StoredSlice& s);

// Every file `info`'s checkpoint is made of: V2 index and data files, V1 files, the
// safetensors file (or index and shards). For refusing outputs over inputs.
std::vector<std::string> FilesOf(const CheckpointInfo& info);

}  // namespace tfckpt
