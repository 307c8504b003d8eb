// Table writing through leveldb::TableBuilder, set up the way TensorFlow's writer is
// (docs/FORMAT.md §a.8): 256 KiB blocks, restart interval 16 (1 in the index block, which
// TableBuilder does itself), no compression, no filter, empty meta-index block.
#include <leveldb/env.h>
#include <leveldb/options.h>
#include <leveldb/table_builder.h>

#include "absl/strings/str_cat.h"
#include "format/table/table.h"
#include "tfckpt/status.h"

namespace tfckpt {
namespace {

// Lets TableBuilder append to our WritableFile (which publishes it whole at Commit).
class WritableFileAdapter final : public leveldb::WritableFile {
 public:
  explicit WritableFileAdapter(tfckpt::WritableFile* out) : out_(out) {}
  leveldb::Status Append(const leveldb::Slice& data) override {
    status_ = out_->Append(std::string_view(data.data(), data.size()));
    return status_.ok() ? leveldb::Status::OK() : leveldb::Status::IOError(std::string(status_.message()));
  }
  leveldb::Status Close() override { return leveldb::Status::OK(); }
  leveldb::Status Flush() override { return leveldb::Status::OK(); }
  leveldb::Status Sync() override { return leveldb::Status::OK(); }
  const absl::Status& status() const { return status_; }

 private:
  tfckpt::WritableFile* out_;
  absl::Status status_;
};

}  // namespace

struct TableWriter::Impl {
  explicit Impl(WritableFile* out, const TableWriterOptions& o) : adapter(out), block_size(o.block_size) {
    options.block_size = o.block_size;
    options.block_restart_interval = o.block_restart_interval;
    options.compression = leveldb::kNoCompression;
    builder = std::make_unique<leveldb::TableBuilder>(options, &adapter);
  }
  absl::Status Convert(const leveldb::Status& s) {
    if (!adapter.status().ok()) return adapter.status();
    if (s.ok()) return absl::OkStatus();
    return absl::InternalError(StrCat("table builder: ", s.ToString()));
  }
  leveldb::Options options;
  WritableFileAdapter adapter;
  size_t block_size;
  std::unique_ptr<leveldb::TableBuilder> builder;
  std::string last_key;
  bool finished = false;
};

TableWriter::TableWriter(WritableFile* out, TableWriterOptions options)
    : impl_(std::make_unique<Impl>(out, options)) {}

TableWriter::~TableWriter() {
  if (!impl_->finished) impl_->builder->Abandon();
}

absl::Status TableWriter::Add(std::string_view key, std::string_view value) {
  Impl& r = *impl_;
  if (r.builder->NumEntries() > 0 && !(key > r.last_key)) {
    return absl::InternalError(StrCat("table keys out of order: \"", PrintableKey(key), "\" after \"",
                                            PrintableKey(r.last_key), "\""));
  }
  // TensorFlow-specific: a large entry starts a block of its own.
  if (r.builder->NumEntries() > 0 && key.size() + value.size() >= 2 * r.block_size) r.builder->Flush();
  r.builder->Add(leveldb::Slice(key.data(), key.size()), leveldb::Slice(value.data(), value.size()));
  r.last_key.assign(key);
  return r.Convert(r.builder->status());
}

absl::Status TableWriter::Finish() {
  impl_->finished = true;
  return impl_->Convert(impl_->builder->Finish());
}

}  // namespace tfckpt
