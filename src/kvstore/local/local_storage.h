// The local file system as a Storage (storage.h): read-only maps with pread and
// copy_file_range, output files written under a temporary name and renamed into place.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "tfckpt/storage.h"

namespace tfckpt {

// A local file, mapped whole (read-only). A 0-byte file is valid (no mapping is made).
class LocalReadableFile final : public ReadableFile {
 public:
  static absl::StatusOr<std::unique_ptr<LocalReadableFile>> Open(const std::string& path);
  ~LocalReadableFile() override;
  LocalReadableFile(const LocalReadableFile&) = delete;
  LocalReadableFile& operator=(const LocalReadableFile&) = delete;

  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const override;
  std::optional<std::string_view> mapping() const override { return std::string_view(data_, size_); }
  // See the functions below.
  absl::Status CheckMapped(uint64_t offset, uint64_t n) const;
  absl::StatusOr<std::shared_ptr<char>> MapPrivate(uint64_t offset, uint64_t n) const;
  void Release(uint64_t offset, uint64_t n) const override;
  void WillReadSequentially(uint64_t offset, uint64_t n) const override;
  int fd() const { return fd_; }  // for copy_file_range

 private:
  LocalReadableFile(std::string path, int fd, const char* data, uint64_t size)
      : path_(std::move(path)), fd_(fd), data_(data), size_(size) {}
  std::string path_;
  int fd_;
  const char* data_;
  uint64_t size_;
};

// An output file written as `final_path + ".tmp-tfckpt-<pid>-<n>"` (TemporaryName, tracked
// for the interrupt handler) and renamed to `final_path` by Commit().
// OK when the bytes [offset, offset + n) of f.mapping() are still in the file: a local file
// truncated after it was mapped kills the process (SIGBUS) when its lost pages are touched,
// so ReadableFile::Range asks this (an fstat) before it hands out a view; the error names
// the file and its size now. OK for a file of another medium.
absl::Status CheckMapped(const ReadableFile& f, uint64_t offset, uint64_t n);

// (MapPrivate, a copy-on-write mapping of a local file's range: tfckpt/storage.h.)

class LocalWritableFile final : public WritableFile {
 public:
  static absl::StatusOr<std::unique_ptr<LocalWritableFile>> Create(const std::string& final_path,
                                                                    const WriteOptions& options);
  ~LocalWritableFile() override;

  const std::string& path() const override { return final_path_; }
  uint64_t size() const override { return size_; }
  absl::Status Append(std::string_view data) override;
  absl::Status AppendFrom(const ReadableFile& src, uint64_t src_offset, uint64_t n) override;
  absl::Status WriteAt(uint64_t offset, std::string_view data) override;
  absl::Status CopyAt(uint64_t offset, const ReadableFile& src, uint64_t src_offset, uint64_t n) override;
  // Writes out the buffer, starts the write-back of what is dirty, and opens the temporary
  // (also after Close()).
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenWritten() override;
  absl::Status ReadBack(uint64_t offset, uint64_t n, char* out) override;
  bool MovesInKernel() const override { return true; }
  absl::Status Close() override;
  absl::Status Commit() override;
  void Publish() override;

  const std::string& temp_path() const { return temp_path_; }

 private:
  LocalWritableFile(std::string final_path, std::string temp_path, int fd);
  absl::Status FlushBuffer();
  absl::Status WriteAll(const char* data, size_t n);
  // Copies n bytes of src at src_offset to this file at *out (advanced): in-kernel when src
  // is local and the file systems allow, else read and written.
  absl::Status CopyRange(const ReadableFile& src, uint64_t src_offset, uint64_t n, uint64_t* out);
  absl::Status ReadAndWrite(const ReadableFile& src, uint64_t src_offset, uint64_t n, uint64_t* out);
  absl::Status PwriteAll(uint64_t offset, std::string_view data);  // REQUIRES: fd_ open
  // Fills [offset, offset + n) through shared mappings of the file, window by window,
  // without write_mu_: `fill(at, k, out)` writes bytes [at, at + k) of the range to `out`.
  // Sets *done to the bytes written: all of them, or fewer where the file system cannot
  // (the caller writes the rest under write_mu_, which then reports the real error, e.g. a
  // full disk). REQUIRES: fd_ open.
  using Fill = std::function<absl::Status(uint64_t at, uint64_t k, char* out)>;
  absl::Status MappedWrite(uint64_t offset, uint64_t n, const Fill& fill, uint64_t* done);
  void Extend(uint64_t end);
  // Counts bytes written; every kWritebackEvery starts their writeback (sync_file_range).
  void Written(uint64_t n);
  std::string final_path_, temp_path_;
  bool if_absent_ = false;  // WriteOptions::if_absent
  int fd_;
  std::atomic<uint64_t> size_ = 0;
  std::atomic<uint64_t> unflushed_ = 0;
  // Serializes positional writes (write, copy_file_range): the file system locks the file
  // for each of them anyway, and threads that spin on that lock burn the CPU the other
  // thread needs. A thread that finds it taken writes through a mapping instead
  // (MappedWrite), which the file system does not serialize.
  std::mutex write_mu_;
  std::string buffer_;
  bool committed_ = false;
  uint64_t tracked_ = 0;  // TrackCreated id: of the temporary, after Commit() of the output
};

class LocalStorage final : public Storage {
 public:
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenForRead(const std::string& path) override;
  using Storage::Create;
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
  absl::Status CheckNotInputs(const std::vector<std::string>& outputs, const std::vector<std::string>& inputs) override;
  std::vector<std::string> RemoveStaleTemporaries(const std::string& dir, const std::string& stem) override;
};

}  // namespace tfckpt
