// Reading V2 tensor bundles (docs/FORMAT.md §b, §c): the loader that turns an index
// into a Checkpoint, and the PieceReader that reads payloads from data files.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/status.h"

namespace tfckpt {

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
  };
  explicit BundleReader(DataFiles files);

  absl::StatusOr<TensorBytes> Read(const TensorEntry& t, const StoredSlice& s, bool verify) const override;
  absl::Status VerifyCrc(const TensorEntry& t, const StoredSlice& s, std::string* buffer) const override;
  absl::StatusOr<std::string_view> ReadRange(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end,
                                             std::string* buffer, TensorBytes* owner) const override;
  absl::Status ReadInto(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end, char* out,
                        bool verify) const override;
  absl::StatusOr<const ReadableFile*> DataFile(int32_t shard) const override;

 private:
  DataFiles info_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<ReadableFile>> data_files_;
};

}  // namespace tfckpt
