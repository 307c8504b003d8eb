// The in-memory store, for tests: `mem://BUCKET/KEY` URLs, like an object store's (a key is
// a name; "directories" are the prefixes before a "/"; there is no rename or link), held in
// this process's memory. Every run sees the same objects (Storage::For returns the one
// instance), so a test can write a checkpoint with one command and read it with the next.
// It is what the storage conformance suite (tests/storage_conformance_tests.cc) holds the
// other stores to: the same behaviour, none of the file system's or the network's cost.
//
//   OpenForRead   the object as it was when opened (later writes make a new object); its
//                 bytes are the mapping
//   Create        a buffer published whole at Commit() (WriteOptions::if_absent: refused when
//                 the name is taken); readable before Commit (OpenWritten, ReadBack)
//   List, Glob    the objects and "directories" one level under a prefix
//   Move, Link    Unimplemented, as on an object store
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tfckpt/storage.h"

namespace tfckpt {

class MemoryStorage final : public Storage {
 public:
  // The one instance (tests only: it lives as long as the process).
  static std::shared_ptr<MemoryStorage> Instance();

  using Storage::Create;
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenForRead(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> Create(const std::string& final_path,
                                                       const WriteOptions& options) override;
  absl::StatusOr<std::vector<DirEntry>> List(const std::string& dir) override;
  std::vector<std::string> Glob(const std::string& pattern) override;
  absl::StatusOr<FileStat> Stat(const std::string& path) override;
  absl::StatusOr<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) override;
  absl::Status Remove(const std::string& path) override;
  absl::Status RemoveAll(const std::string& path) override;
  absl::Status CreateDirectories(const std::string& dir) override;
  absl::Status Move(const std::string& from, const std::string& to) override;
  absl::Status Link(const std::string& from, const std::string& to) override;
  std::string Absolute(const std::string& path) override;
  absl::Status CheckNotInputs(const std::vector<std::string>& outputs,
                              const std::vector<std::string>& inputs) override;
  std::vector<std::string> RemoveStaleTemporaries(const std::string& dir, const std::string& stem) override;

  // Publishes `bytes` under `name` (replacing, or with `if_absent` refused when taken).
  // For MemoryWritableFile::Commit.
  absl::Status Put(const std::string& name, std::shared_ptr<const std::string> bytes, bool if_absent);

 private:
  using Bytes = std::shared_ptr<const std::string>;
  std::mutex mu_;
  std::map<std::string, Bytes> objects_;  // by URL, guarded by mu_
};

}  // namespace tfckpt
