// A checkpoint opened for reading: its files, header facts and slice map.
//
// The slice map lists every *logical* tensor once (partitioned tensors under their own
// name, never as raw slice keys) with its dtype, full shape, and the stored pieces that
// hold its bytes. An unpartitioned tensor has exactly one piece covering it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/storage.h"
#include "tfckpt/ordered_code.h"
#include "tfckpt/region.h"
#include "tfckpt/table.h"

namespace tfckpt {

// kSafetensors: a .safetensors file or a sharded set (safetensors.h), read through the
// same slice map (one piece per tensor; no CRCs).
enum class Format { kV2, kV1, kSafetensors };

enum class Severity { kError, kWarning, kNote };  // a note is information, never a failure

// One problem found in a checkpoint: a stable check id (man tfckpt-validate), where it
// is, and what is wrong.
struct Finding {
  std::string check;
  Severity severity = Severity::kError;
  std::string file, key;
  int64_t offset = -1;
  std::string message;
};

// The finding an error status describes (its check id and location payloads).
Finding FindingOf(const absl::Status& s, Severity severity = Severity::kError);

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
};

// The payload of one stored piece in TensorFlow's byte layout (POD elements
// little-endian; strings and variants as in docs/FORMAT.md §c.4/§c.5).
struct TensorBytes {
  std::string_view data;
  std::shared_ptr<const void> owner;  // keeps `data` alive when it is not a file mapping
};

class Checkpoint {
 public:
  // Opens what the user named (see ResolveCheckpoint).
  //
  // Without `findings`, the first damaged table block, header or entry fails the open.
  // With `findings` (validate), such damage is recorded there and the load goes on with
  // the rest; only an index that cannot be opened at all fails. In both modes, tensors
  // whose entries are inconsistent are listed with a `defect`.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& spec,
                                                          std::vector<Finding>* findings = nullptr);
  static absl::StatusOr<std::unique_ptr<Checkpoint>> OpenV2(const std::string& prefix,
                                                            std::vector<Finding>* findings = nullptr);
  // A .safetensors file or a *.safetensors.index.json set, strictly checked.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> OpenSafetensors(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Checkpoint>> OpenV1(const std::string& pattern,
                                                            std::vector<std::string> files,
                                                            std::vector<Finding>* findings = nullptr);

  const CheckpointInfo& info() const { return info_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* Find(std::string_view name) const;

  // Visits every index entry as stored (V2): key and serialized BundleEntryProto, in key
  // order, re-reading the index (nothing is kept in memory). The header (key "") is
  // included. Not thread-safe against other calls of itself.
  absl::Status ForEachIndexEntry(const TableReader::Visitor& visit) const;
  const std::string& raw_header() const { return raw_header_; }

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

 private:
  Checkpoint() = default;
  absl::Status LoadV2Entries(TableReader& table, std::vector<Finding>* findings);
  absl::Status LoadV1(const std::vector<std::string>& files, std::vector<Finding>* findings);
  absl::StatusOr<TensorBytes> ReadV1(const TensorEntry& t, const StoredSlice& s) const;

  CheckpointInfo info_;
  std::vector<TensorEntry> tensors_;  // sorted by name
  std::unique_ptr<TableReader> index_;
  std::string raw_header_;

  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<ReadableFile>> data_files_;
  mutable std::vector<std::unique_ptr<TableReader>> v1_tables_;
};

// What a CKPT argument names. In order: `X` ending in `.index`; `X.index` exists (V2
// prefix `X`); a directory (its `checkpoint` state file, else its single `*.index`, else
// `variables/variables`); a V1 table file (a `…-NNNNN-of-MMMMM` name brings in all its
// shards); a V1 glob pattern or `X-?????-of-?????`.
struct ResolvedCheckpoint {
  Format format = Format::kV2;
  std::string prefix;                 // V2 prefix, or V1 path / pattern
  std::vector<std::string> v1_files;  // V1 only
  std::vector<std::string> notes;     // how it was resolved
  std::string state_dir;              // the directory whose state file was used, or ""
};
absl::StatusOr<ResolvedCheckpoint> ResolveCheckpoint(const std::string& spec);

// Walks every entry of `table`. Without `findings`, stops at the first error (of the
// table or of `visit`); with it, records errors there and continues with the next block.
absl::Status VisitTable(TableReader& table, std::vector<Finding>* findings, const TableReader::Visitor& visit);

// How errors name a stored piece: "" for an unpartitioned tensor, "slice 0,250:- " for
// a slice (errors carry the logical tensor name as their key, never raw slice keys).
std::string PieceLabel(const TensorEntry& t, const StoredSlice& s);

// Name of data file `shard` of `num_shards` for `prefix`: PREFIX.data-00000-of-00002.
std::string DataFileName(std::string_view prefix, int32_t shard, int32_t num_shards);

// Every file `info`'s checkpoint is made of: V2 index and data files, V1 files, the
// safetensors file (or index and shards). For refusing outputs over inputs.
std::vector<std::string> FilesOf(const CheckpointInfo& info);

// The files a V2 checkpoint written at `prefix` with `num_shards` data files occupies,
// plus the data files of any other checkpoint already at that prefix.
std::vector<std::string> BundleFilesAt(const std::string& prefix, int32_t num_shards);

// The newest checkpoint named by the `checkpoint` state file in `dir`.
// A state file lists a few paths: one larger than this is not read.
inline constexpr uint64_t kMaxStateFileBytes = 64 << 20;
absl::StatusOr<std::string> ReadCheckpointState(const std::string& dir, std::vector<std::string>* notes);

}  // namespace tfckpt
