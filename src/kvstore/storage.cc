// The parts of storage.h that every implementation shares, and the choice of one.
#include "tfckpt/storage.h"

#include "kvstore/local/local_storage.h"
#include "kvstore/s3/s3_storage.h"
#include "tfckpt/path.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {

absl::Status ReadableFile::PastEndError(uint64_t offset, uint64_t n) const {
  return absl::DataLossError(StrCat(path(), ": offset ", offset, ": range of ", n,
                                    " bytes ends past the end of the file (", size(), " bytes)"));
}

absl::StatusOr<std::string_view> ReadableFile::Range(uint64_t offset, uint64_t n, std::string* scratch) const {
  const uint64_t total = size();
  if (offset > total || n > total - offset) return PastEndError(offset, n);
  if (const std::optional<std::string_view> all = mapping()) return all->substr(offset, n);
  scratch->resize(static_cast<size_t>(n));
  TFCKPT_RETURN_IF_ERROR(ReadAt(offset, n, scratch->data()));
  return std::string_view(*scratch);
}

bool Storage::IsDirectory(const std::string& path) {
  auto s = Stat(path);
  return s.ok() && s->kind == EntryKind::kDirectory;
}

bool Storage::IsFile(const std::string& path) {
  auto s = Stat(path);
  return s.ok() && s->kind == EntryKind::kFile;
}

absl::Status Storage::CreateParentDirectories(const std::string& path) {
  const std::string dir = Dirname(path);
  return dir.empty() ? absl::OkStatus() : CreateDirectories(dir);
}

namespace {

class RenamedFile final : public ReadableFile {
 public:
  RenamedFile(std::unique_ptr<ReadableFile> file, std::string name) : file_(std::move(file)), name_(std::move(name)) {}
  const std::string& path() const override { return name_; }
  uint64_t size() const override { return file_->size(); }
  absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const override {
    if (offset > size() || n > size() - offset) return PastEndError(offset, n);
    return file_->ReadAt(offset, n, out);  // a failure of the medium names the file it read
  }
  std::optional<std::string_view> mapping() const override { return file_->mapping(); }
  void Release(uint64_t offset, uint64_t n) const override { file_->Release(offset, n); }
  void WillReadSequentially(uint64_t offset, uint64_t n) const override { file_->WillReadSequentially(offset, n); }
  void AdviseLayout(const std::vector<std::pair<uint64_t, uint64_t>>& pieces) override { file_->AdviseLayout(pieces); }

 private:
  std::unique_ptr<ReadableFile> file_;
  std::string name_;
};

}  // namespace

std::unique_ptr<ReadableFile> Renamed(std::unique_ptr<ReadableFile> file, std::string name) {
  return std::make_unique<RenamedFile>(std::move(file), std::move(name));
}

absl::StatusOr<std::unique_ptr<ReadableFile>> OpenFile(const std::string& path, const FileOpener* opener) {
  if (opener != nullptr && *opener) return (*opener)(path);
  return Storage::For(path).OpenForRead(path);
}

Storage& Storage::Local() {
  static auto* local = new LocalStorage();  // never destroyed: used until exit
  return *local;
}

Storage& Storage::For(std::string_view path) {
  if (IsUrl(path)) return s3::S3Storage::ForCurrentRun();
  return Local();
}

}  // namespace tfckpt
