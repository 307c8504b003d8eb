// The safetensors format (Hugging Face): one file is
//
//   8 bytes   N, little-endian uint64: length of the header
//   N bytes   JSON object, padded with spaces: per tensor {"dtype", "shape",
//             "data_offsets": [begin, end]} (offsets relative to the data), and an
//             optional "__metadata__" object of string values
//   the data  tensors packed densely, row-major, little-endian: sorted by begin, the
//             first at 0, each next one starting where the previous ended, the last
//             ending at the end of the file; no holes, no overlaps
//
// A sharded set is NAME-00001-of-0000K.safetensors files plus NAME.safetensors.index.json:
// {"metadata": {...}, "weight_map": {tensor: file name}}.
//
// Reading is strict, as the reference implementation: a header longer than 100 MB or than
// the file, JSON that does not parse or is not an object, a duplicate or unknown key, an
// unknown dtype, a negative or non-integer dim, a size that does not match dtype x shape,
// and ranges that overlap, leave holes or run outside the file are each an error naming
// the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/storage.h"
#include "tfckpt/region.h"

namespace tfckpt {

inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// safetensors dtype name <-> TensorFlow DataType value. Complex128, strings, variants and
// quantized types have no safetensors name.
std::optional<int32_t> SafetensorsDType(std::string_view name);
std::optional<std::string_view> SafetensorsDTypeName(int32_t dtype);

struct SafetensorsTensor {
  std::string name;
  int32_t dtype = 0;
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the data start
};

struct SafetensorsHeader {
  uint64_t data_start = 0;  // 8 + N
  std::vector<SafetensorsTensor> tensors;  // in order of begin
  std::map<std::string, std::string> metadata;
};

// Parses and checks `header` (the N JSON bytes) of a file whose data part has
// `data_size` bytes. `file` names the file in errors.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view header, uint64_t data_size,
                                                         const std::string& file);

// Reads the header of the file `path` (8 + N bytes) and checks it against the file size.
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path);

// A sharded set's index: tensor name -> file (relative to the index's directory).
struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;
  std::map<std::string, std::string> metadata;  // string values only
};
absl::StatusOr<SafetensorsIndex> ReadSafetensorsIndex(const std::string& path);

// Writes one safetensors file. The tensors, their dtypes and shapes are declared up front
// (in order), so the header and every tensor's place are fixed at Create(), which writes
// the header: the data are then written positionally, each tensor at DataOffset(i) of
// file() (several threads at once, e.g. through PositionalSinks, copy.h), or in order
// through Append/AppendFrom (which write at a cursor behind the header; not to be mixed
// with positional writes of the same bytes). Atomic: the file appears under its name only
// at Commit().
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    int32_t dtype = 0;
    Shape shape;
  };
  // REQUIRES: every dtype has a safetensors name; names unique.
  // With `header_later`, the header is written by WriteHeader() instead (after PlanCopies).
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Create(const Location& path,
                                                                   const std::vector<Entry>& entries,
                                                                   const std::map<std::string, std::string>& metadata,
                                                                   bool header_later = false);
  // The file's ranges that are copies of other files' (WritableFile::PlanCopies, with the
  // file's size). REQUIRES: Create(..., header_later = true), before WriteHeader().
  absl::StatusOr<bool> PlanCopies(const std::vector<PlannedCopy>& copies, ServerSideCopy mode) {
    return out_->PlanCopies(header_end_ + data_size_, copies, mode);
  }
  absl::Status WriteHeader();
  absl::Status Append(std::string_view bytes);
  absl::Status AppendFrom(const ReadableFile& src, uint64_t src_offset, uint64_t n);
  // Where the data of entry `i` (in the order given to Create) begin in the file.
  // REQUIRES: i < the number of entries.
  uint64_t DataOffset(size_t i) const { return header_end_ + offsets_[i]; }
  // The file, for positional writes of the data (WriteAt, CopyAt). Valid until Commit().
  WritableFile& file() { return *out_; }
  // Closes the temporary. REQUIRES: every data byte written.
  absl::Status Finish();
  // Renames the file into place. REQUIRES: Finish() succeeded.
  absl::Status Commit();
  uint64_t data_size() const { return data_size_; }

  // Bytes of `e`'s data.
  static uint64_t EntryBytes(const Entry& e);

 private:
  std::unique_ptr<WritableFile> out_;
  std::vector<uint64_t> offsets_;  // of each entry, relative to the data
  uint64_t header_end_ = 0, data_size_ = 0, cursor_ = 0;
  std::string header_;  // 8 + N bytes, until written
};

}  // namespace tfckpt
