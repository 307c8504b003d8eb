// Reading V2 tensor bundles (docs/FORMAT.md §b, §c): the one walk over an index (every
// bound the reader applies), the loader that turns an index into a Checkpoint through it,
// and the PieceReader that reads payloads from data files.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "format/bundle/bundle_proto.h"
#include "format/table/table.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/status.h"
#include "model/piece_reader.h"

namespace tfckpt {

// The most data files a header may count (check header.num-shards): far more than any
// saver writes, few enough that a loop or a list over them stays small.
inline constexpr int32_t kMaxBundleShards = 1 << 20;
// The most data files an index of `index_size` bytes may count (check header.num-shards): a
// data file holds the bytes of at least one entry (each over 16 bytes of the index), but for
// the few that a merge of tasks that saved nothing leaves empty. So a 100-byte index cannot
// make a reader list, open or check a million data files.
inline uint64_t MaxShardsFor(uint64_t index_size) { return 1000 + index_size / 16; }

// The reader's bound on a metadata entry's slice list (check entry.slices): more slices than
// twice the slice entries before it in the index, plus 1000, are refused before the list is
// built (millions of listed slices would cost gigabytes); fewer missing ones are a defect
// of that tensor (slice.missing-entry).
inline bool TooManySlices(int64_t listed, int64_t slice_entries) { return listed > 2 * slice_entries + 1000; }

// What VisitBundleIndex hands its caller, entry by entry.
struct BundleIndexVisitor {
  // The header (key ""), parsed and checked: the version (CheckVersion), the endianness,
  // 0 <= num_shards <= kMaxBundleShards. `raw`: its bytes as stored. Called once, before
  // any entry; not called when the header fails a check.
  std::function<absl::Status(std::string_view raw, const pb::BundleHeaderProto& header)> header;
  // Every other entry in key order (slice entries sort first), parsed; the callee may move
  // from `entry`. For a plain or metadata entry, `shape` is its parsed shape and its slice
  // list is no longer than the slice entries before it allow; for a slice entry, `shape` is
  // null (a slice's shape is checked against its tensor's by the loader, as a defect).
  std::function<absl::Status(std::string_view key, pb::BundleEntryProto& entry, const Shape* shape,
                             uint64_t block)>
      entry;
};

// The one reader of V2 indexes (docs/ARCHITECTURE.md, "One reader"): walks `index` with
// every bound the bundle reader applies and hands the header and the raw entries to
// `visit`, in order. OpenBundle's loader and MergeBundles both read through it. Errors
// (DataLoss with their check ids): header.parse, header.endianness, header.num-shards,
// header.missing (no header, or an entry before it), entry.slices, entry.parse, entry.shape,
// the table's own (table.*); FailedPrecondition for a version this reader may not read; and
// whatever `visit` returns. Without `findings`, stops at the first error; with it, records
// each error there and goes on (VisitTable).
// REQUIRES: `index` opened and not walked concurrently.
absl::Status VisitBundleIndex(TableReader& index, std::vector<Finding>* findings, const BundleIndexVisitor& visit);

// The reader's check of an entry's data file (check id "entry.shard"): "" when 0 <= shard
// < num_shards, else what is wrong, naming the entry as `label` (a tensor name, or "NAME
// slice 0,3:-" for a slice).
std::string EntryShardDefect(std::string_view label, int64_t shard, int32_t num_shards);

// Opens the V2 bundle at `prefix` (PREFIX.index and its data files). `findings`: as
// OpenCheckpoint (open.h), which is the entry callers use.
// The index and data files are opened through `opener` when given (storage.h: OpenFile).
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenBundle(const std::string& prefix,
                                                       std::vector<Finding>* findings = nullptr,
                                                       const FileOpener* opener = nullptr);

// Reads pieces stored densely in data files at StoredData::shard/offset/size: mapped on
// first use, bounds-checked, CRC-checked when the format has checksums, big-endian
// payloads swapped. Used by V2 bundles and (without checksums) safetensors.
class BundleReader : public PieceReader {
 public:
  struct DataFiles {
    std::vector<std::string> data_files;  // by shard id
    int32_t num_shards = 0;               // for messages: how many the index lists
    bool big_endian = false;
    bool checksums = true;  // StoredData::masked_crc is meaningful (V2)
    FileOpener opener;      // opens the data files; empty: their Storage
    // By shard id: the pieces' byte ranges (offset, size), the layout its reads follow
    // (ReadableFile::AdviseLayout); empty: none given.
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> layout;
  };
  // The layout of `tensors`' pieces in `num_files` data files (DataFiles::layout).
  static std::vector<std::vector<std::pair<uint64_t, uint64_t>>> LayoutOf(const std::vector<TensorEntry>& tensors,
                                                                         size_t num_files);
  explicit BundleReader(DataFiles files);

  absl::StatusOr<TensorBytes> Read(const TensorEntry& t, const StoredSlice& s, bool verify) const override;
  absl::Status VerifyCrc(const TensorEntry& t, const StoredSlice& s, std::string* buffer) const override;
  absl::StatusOr<std::string_view> ReadRange(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end,
                                             std::string* buffer, TensorBytes* owner) const override;
  absl::Status ReadInto(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end, char* out,
                        bool verify) const override;
  absl::StatusOr<const ReadableFile*> DataFile(int32_t shard) const override;
  absl::Status CheckStored(const TensorEntry& t, const StoredSlice& s) const override;

 private:
  DataFiles info_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<ReadableFile>> data_files_;
};

}  // namespace tfckpt
