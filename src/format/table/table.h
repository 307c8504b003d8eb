// TensorFlow's "table" files (LevelDB SSTable layout, docs/FORMAT.md §a): the V2 `.index`
// file and every V1 checkpoint file.
//
// Reading is our own small implementation rather than leveldb::Table because the input
// is untrusted: every block handle is checked against the file before anything is
// allocated, Snappy output sizes are bounded, and every error names the file and byte
// offset (see docs/ARCHITECTURE.md). Writing uses leveldb::TableBuilder, which produces
// TensorFlow's bytes exactly (TF's writer is a fork of it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"

namespace tfckpt {

inline constexpr uint64_t kTableMagic = 0xDB4775248B80FB57ull;
inline constexpr size_t kFooterSize = 48;
inline constexpr size_t kBlockTrailerSize = 5;

struct BlockHandle {
  uint64_t offset = 0;
  uint64_t size = 0;  // contents only, without the 5-byte trailer
};

struct DataBlockInfo {
  std::string separator;  // index-block key
  BlockHandle handle;
};

class TableReader {
 public:
  // Opens the table in `path`: checks size, magic, both footer handles, reads and
  // verifies the index block. Data blocks are read (and their CRCs verified) on use.
  // The file is opened through `opener` when given (storage.h: OpenFile).
  static absl::StatusOr<std::unique_ptr<TableReader>> Open(const std::string& path,
                                                           const FileOpener* opener = nullptr);

  const std::string& path() const { return file_->path(); }
  uint64_t file_size() const { return file_->size(); }
  const std::vector<DataBlockInfo>& data_blocks() const { return blocks_; }
  // True when any data block read so far was Snappy-compressed. Complete after a full
  // ForEach.
  bool saw_snappy() const { return saw_snappy_; }

  // Called once per entry in key order. `block_offset` is the file offset of the block
  // holding the entry. The views are valid only during the call.
  using Visitor = std::function<absl::Status(std::string_view key, std::string_view value,
                                             uint64_t block_offset)>;

  // Visits every entry of every data block in order. Checks block CRCs, restart arrays,
  // entry bounds and that keys strictly increase. Stops at the first error.
  absl::Status ForEach(const Visitor& visit);

  // Key order state carried from block to block.
  struct KeyOrder {
    bool any = false;
    std::string last;
  };
  // Visits the entries of data block `i` (reading and checking it); keys must be greater
  // than order->last. For callers that go on after a damaged block (validate).
  absl::Status VisitBlock(size_t i, KeyOrder* order, const Visitor& visit);

  // The value stored under `key`, or nullopt.
  absl::StatusOr<std::optional<std::string>> Get(std::string_view key);

 private:
  explicit TableReader(std::unique_ptr<ReadableFile> file) : file_(std::move(file)) {}
  // Block contents after CRC check and decompression; `storage` owns decompressed bytes.
  absl::StatusOr<std::string_view> ReadBlock(const BlockHandle& h, std::string* storage);
  // Visits the entries of one block. When `order` is given, keys must be strictly
  // greater than order->last (across calls) and it is updated.
  absl::Status ParseBlock(std::string_view block, uint64_t block_offset, KeyOrder* order,
                          const Visitor& visit);

  std::unique_ptr<ReadableFile> file_;
  std::string_view all_;  // the whole file: its mapping, or `read_` where it has none
  std::string read_;
  std::vector<DataBlockInfo> blocks_;
  bool saw_snappy_ = false;
};

// Walks every entry of `table`. Without `findings`, stops at the first error (of the
// table or of `visit`); with it, records errors there and continues with the next block.
absl::Status VisitTable(TableReader& table, std::vector<Finding>* findings, const TableReader::Visitor& visit);

// Options reproducing TensorFlow's table writer (docs/FORMAT.md §a.8).
struct TableWriterOptions {
  size_t block_size = 256 * 1024;
  int block_restart_interval = 16;
};

// Writes a table to an already created output file. Keys must be added in strictly
// increasing order.
class TableWriter {
 public:
  explicit TableWriter(WritableFile* out, TableWriterOptions options = {});
  ~TableWriter();

  // REQUIRES: key > every key added before.
  absl::Status Add(std::string_view key, std::string_view value);
  absl::Status Finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfckpt
