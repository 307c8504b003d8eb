#include "kvstore/memory/memory_storage.h"

#include <fnmatch.h>

#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "run/run.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {
namespace {

using Bytes = std::shared_ptr<const std::string>;

absl::Status NoSuchObject(const std::string& path, std::string_view what) {
  return absl::NotFoundError(StrCat(path, ": ", what, ": no such object"));
}

// "mem://b/k" as a prefix of the objects under it: "mem://b/k/" ("mem://b/" for a bucket).
std::string UnderPrefix(const std::string& dir) { return absl::EndsWith(dir, "/") ? dir : dir + "/"; }

class MemoryFile final : public ReadableFile {
 public:
  MemoryFile(std::string name, Bytes bytes) : name_(std::move(name)), bytes_(std::move(bytes)) {}
  const std::string& path() const override { return name_; }
  uint64_t size() const override { return bytes_->size(); }
  absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const override {
    if (offset > size() || n > size() - offset) return PastEndError(offset, n);
    std::memcpy(out, bytes_->data() + offset, static_cast<size_t>(n));
    return absl::OkStatus();
  }
  std::optional<std::string_view> mapping() const override { return std::string_view(*bytes_); }

 private:
  std::string name_;
  Bytes bytes_;
};

class MemoryWritableFile final : public WritableFile {
 public:
  MemoryWritableFile(std::shared_ptr<MemoryStorage> store, std::string name, WriteOptions options)
      : store_(std::move(store)), name_(std::move(name)), options_(options) {}

  const std::string& path() const override { return name_; }
  uint64_t size() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_.size();
  }
  absl::Status Append(std::string_view data) override { return WriteAt(size(), data); }
  absl::Status AppendFrom(const ReadableFile& src, uint64_t src_offset, uint64_t n) override {
    return CopyAt(size(), src, src_offset, n);
  }
  absl::Status WriteAt(uint64_t offset, std::string_view data) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return absl::FailedPreconditionError(StrCat(name_, ": write after close"));
    if (bytes_.size() < offset + data.size()) bytes_.resize(offset + data.size());
    std::memcpy(bytes_.data() + offset, data.data(), data.size());
    return absl::OkStatus();
  }
  absl::Status CopyAt(uint64_t offset, const ReadableFile& src, uint64_t src_offset, uint64_t n) override {
    std::string chunk;
    for (uint64_t done = 0; done < n;) {
      TFCKPT_RETURN_IF_ERROR(CheckStop());
      const uint64_t take = std::min<uint64_t>(n - done, 8 << 20);
      TFCKPT_ASSIGN_OR_RETURN(std::string_view bytes, src.Range(src_offset + done, take, &chunk));
      TFCKPT_RETURN_IF_ERROR(WriteAt(offset + done, bytes));
      done += take;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenWritten() override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::unique_ptr<ReadableFile>(new MemoryFile(name_, std::make_shared<const std::string>(bytes_)));
  }
  absl::Status ReadBack(uint64_t offset, uint64_t n, char* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (offset > bytes_.size() || n > bytes_.size() - offset) {
      return absl::OutOfRangeError(StrCat(name_, ": offset ", offset, ": read back past what was written"));
    }
    std::memcpy(out, bytes_.data() + offset, static_cast<size_t>(n));
    return absl::OkStatus();
  }
  absl::Status Close() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return absl::FailedPreconditionError(StrCat(name_, ": closed twice"));
    closed_ = true;
    return absl::OkStatus();
  }
  // Like a local output renamed into place, the object stays an output of the run until it
  // succeeds (run/run.h): a failure or a stop of the run before that removes it.
  absl::Status Commit() override {
    Bytes bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!closed_) return absl::FailedPreconditionError(StrCat(name_, ": commit before close"));
      bytes = std::make_shared<const std::string>(std::move(bytes_));
    }
    undo_ = AtUndo([store = store_, name = name_] { store->Remove(name).IgnoreError(); });
    if (absl::Status s = store_->Put(name_, std::move(bytes), options_.if_absent); !s.ok()) {
      ForgetAtUndo(undo_);
      undo_ = 0;
      return s;
    }
    return absl::OkStatus();
  }
  void Publish() override {
    ForgetAtUndo(undo_);
    undo_ = 0;
  }

 private:
  std::shared_ptr<MemoryStorage> store_;
  std::string name_;
  WriteOptions options_;
  mutable std::mutex mu_;
  std::string bytes_;  // guarded by mu_
  bool closed_ = false;
  uint64_t undo_ = 0;
};

}  // namespace

std::shared_ptr<MemoryStorage> MemoryStorage::Instance() {
  static auto* instance = new std::shared_ptr<MemoryStorage>(std::make_shared<MemoryStorage>());  // never destroyed
  return *instance;
}

absl::Status MemoryStorage::Put(const std::string& name, Bytes bytes, bool if_absent) {
  std::lock_guard<std::mutex> lock(mu_);
  Bytes& slot = objects_[name];
  if (slot && if_absent) return absl::AlreadyExistsError(StrCat(name, ": already exists"));
  slot = std::move(bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReadableFile>> MemoryStorage::OpenForRead(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(path);
  if (it == objects_.end()) return NoSuchObject(path, "cannot open");
  return std::unique_ptr<ReadableFile>(new MemoryFile(path, it->second));
}

absl::StatusOr<std::unique_ptr<WritableFile>> MemoryStorage::Create(const std::string& final_path,
                                                                    const WriteOptions& options) {
  if (absl::EndsWith(final_path, "/")) return absl::InvalidArgumentError(StrCat(final_path, ": names no object"));
  TFCKPT_RETURN_IF_ERROR(Reached("temporary-created"));
  return std::unique_ptr<WritableFile>(
      new MemoryWritableFile(std::static_pointer_cast<MemoryStorage>(shared_from_this()), final_path, options));
}

absl::StatusOr<std::vector<DirEntry>> MemoryStorage::List(const std::string& dir) {
  const std::string prefix = UnderPrefix(dir);
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DirEntry> out;
  std::set<std::string> dirs;
  for (auto it = objects_.lower_bound(prefix); it != objects_.end() && absl::StartsWith(it->first, prefix); ++it) {
    const std::string rest = it->first.substr(prefix.size());
    const size_t slash = rest.find('/');
    if (slash == std::string::npos) {
      out.push_back({rest, EntryKind::kFile, it->second->size()});
    } else if (dirs.insert(rest.substr(0, slash)).second) {
      out.push_back({rest.substr(0, slash), EntryKind::kDirectory, 0});
    }
  }
  if (out.empty()) return absl::NotFoundError(StrCat(dir, ": cannot list: no such directory"));
  return out;
}

std::vector<std::string> MemoryStorage::Glob(const std::string& pattern) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, bytes] : objects_) {
    if (::fnmatch(pattern.c_str(), name.c_str(), FNM_PATHNAME) == 0) out.push_back(name);
  }
  return out;
}

absl::StatusOr<FileStat> MemoryStorage::Stat(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = objects_.find(path); it != objects_.end()) return FileStat{EntryKind::kFile, it->second->size(), 0};
  const std::string prefix = UnderPrefix(path);
  auto it = objects_.lower_bound(prefix);
  if (it != objects_.end() && absl::StartsWith(it->first, prefix)) return FileStat{EntryKind::kDirectory, 0, 0};
  return NoSuchObject(path, "cannot stat");
}

absl::StatusOr<std::string> MemoryStorage::ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, OpenForRead(path));
  if (f->size() > max_bytes) {
    return absl::FailedPreconditionError(
        StrCat(path, ": too large (", f->size(), " bytes; at most ", max_bytes, " expected)"));
  }
  return std::string(*f->mapping());
}

absl::Status MemoryStorage::Remove(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (objects_.erase(path) == 0) return NoSuchObject(path, "cannot remove");
  return absl::OkStatus();
}

absl::Status MemoryStorage::RemoveAll(const std::string& path) {
  const std::string prefix = UnderPrefix(path);
  std::lock_guard<std::mutex> lock(mu_);
  objects_.erase(path);
  for (auto it = objects_.lower_bound(prefix); it != objects_.end() && absl::StartsWith(it->first, prefix);) {
    it = objects_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status MemoryStorage::CreateDirectories(const std::string&) { return absl::OkStatus(); }

absl::Status MemoryStorage::Move(const std::string& from, const std::string&) {
  return absl::UnimplementedError(StrCat(from, ": the in-memory store has no rename, as an object store"));
}

absl::Status MemoryStorage::Link(const std::string& from, const std::string&) {
  return absl::UnimplementedError(StrCat(from, ": the in-memory store has no links"));
}

std::string MemoryStorage::Absolute(const std::string& path) { return path; }

absl::Status MemoryStorage::CheckNotInputs(const std::vector<std::string>& outputs,
                                           const std::vector<std::string>& inputs) {
  for (const std::string& out : outputs) {
    for (const std::string& in : inputs) {
      if (out == in) {
        return absl::InvalidArgumentError(StrCat(out, ": is one of the inputs (", in, "); write the output elsewhere"));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> MemoryStorage::RemoveStaleTemporaries(const std::string&, const std::string&) { return {}; }

}  // namespace tfckpt
