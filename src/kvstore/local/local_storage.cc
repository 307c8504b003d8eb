#include "local_storage.h"

#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "kvstore/local/tracked.h"
#include "run/run.h"
#include "base/path.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {

namespace fs = std::filesystem;

namespace {
constexpr size_t kOutputBuffer = 1 << 20;
constexpr uint64_t kWritebackEvery = 64 << 20;  // bytes written between writeback starts
// Bytes per copy_file_range call: a stop request is checked between two (docs/RELIABILITY.md:
// within half a second even from a slow disk).
constexpr uint64_t kCopyChunk = 16 << 20;
// Bytes of a file mapped at once by a positional write (MappedWrite): small enough that -j
// threads' windows stay far within the memory promise (file-backed pages count while
// mapped).
constexpr uint64_t kMapWindow = 2 << 20;

// Reads exactly `n` bytes of `fd` at `offset` into `out`; an error names `path` and the offset.
absl::Status PreadFully(int fd, const std::string& path, uint64_t offset, uint64_t n, char* out) {
  uint64_t done = 0;
  while (done < n) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n - done, 1 << 30));
    const ssize_t got = ::pread(fd, out + done, want, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError(path, StrCat("read failed at offset ", offset + done), errno);
    if (got == 0) {
      return absl::DataLossError(StrCat(path, ": offset ", offset + done, ": unexpected end of file"));
    }
    done += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

EntryKind KindOf(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return EntryKind::kFile;
  if (S_ISDIR(st.st_mode)) return EntryKind::kDirectory;
  return EntryKind::kOther;
}
}  // namespace

// ---------------------------------------------------------------------------------------
// Reading

absl::StatusOr<std::unique_ptr<LocalReadableFile>> LocalReadableFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(path, "cannot open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const char* data = "";
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return ErrnoError(path, "cannot map", err);
    }
    data = static_cast<const char*>(p);
  }
  return std::unique_ptr<LocalReadableFile>(new LocalReadableFile(path, fd, data, size));
}

LocalReadableFile::~LocalReadableFile() {
  if (size_ > 0) ::munmap(const_cast<char*>(data_), size_);
  ::close(fd_);
}

absl::Status LocalReadableFile::ReadAt(uint64_t offset, uint64_t n, char* out) const {
  if (offset > size_ || n > size_ - offset) return PastEndError(offset, n);
  return PreadFully(fd_, path_, offset, n, out);
}

absl::Status LocalReadableFile::CheckMapped(uint64_t offset, uint64_t n) const {
  if (n == 0) return absl::OkStatus();
  struct stat st;
  if (::fstat(fd_, &st) != 0) return ErrnoError(path_, "cannot stat", errno);
  const uint64_t now = static_cast<uint64_t>(st.st_size);
  if (offset > now || n > now - offset) {
    return absl::DataLossError(StrCat(path_, ": offset ", offset, ": the file shrank to ", now,
                                      " bytes since it was opened (", size_, " bytes): truncated or rewritten"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<char>> LocalReadableFile::MapPrivate(uint64_t offset, uint64_t n) const {
  if (offset > size_ || n > size_ - offset) return PastEndError(offset, n);
  if (n == 0) return std::shared_ptr<char>();
  TFCKPT_RETURN_IF_ERROR(CheckMapped(offset, n));
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = offset / page * page;
  const size_t length = static_cast<size_t>(offset + n - begin);
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, static_cast<off_t>(begin));
  if (p == MAP_FAILED) return std::shared_ptr<char>();  // (out of mappings, vm.max_map_count: the caller copies)
  std::shared_ptr<char> base(static_cast<char*>(p), [length](char* q) { ::munmap(q, length); });
  return std::shared_ptr<char>(base, base.get() + (offset - begin));
}

void LocalReadableFile::Release(uint64_t offset, uint64_t n) const {
  if (size_ == 0 || n == 0) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = offset / page * page;
  const uint64_t end = std::min(size_, offset + n);
  if (begin >= end) return;
  ::madvise(const_cast<char*>(data_) + begin, end - begin, MADV_DONTNEED);
}

void LocalReadableFile::WillReadSequentially(uint64_t offset, uint64_t n) const {
  ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_SEQUENTIAL);
}

// ---------------------------------------------------------------------------------------
// Writing

LocalWritableFile::LocalWritableFile(std::string final_path, std::string temp_path, int fd)
    : final_path_(std::move(final_path)), temp_path_(std::move(temp_path)), fd_(fd) {}

absl::StatusOr<std::unique_ptr<LocalWritableFile>> LocalWritableFile::Create(const std::string& final_path,
                                                                             const WriteOptions& options) {
  std::string temp = TemporaryName(final_path);
  const uint64_t id = TrackCreated(temp);
  // Read-write: ReadBack reads through the same descriptor.
  int fd = ::open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    ForgetCreated(id);
    return ErrnoError(temp, "cannot create", err);
  }
  std::unique_ptr<LocalWritableFile> f(new LocalWritableFile(final_path, std::move(temp), fd));
  f->tracked_ = id;
  f->if_absent_ = options.if_absent;
  TFCKPT_RETURN_IF_ERROR(Reached("temporary-created"));
  return f;
}

LocalWritableFile::~LocalWritableFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    ::unlink(temp_path_.c_str());
    ForgetCreated(tracked_);
  }
}

void LocalWritableFile::Written(uint64_t n) {
  if (unflushed_.fetch_add(n) + n < kWritebackEvery) return;
  unflushed_ = 0;
  // Advisory (errors ignored): start writing back what is dirty now, without waiting.
  // Otherwise the kernel starts only at its background threshold (a tenth of memory, GBs)
  // and Close()'s fsync waits for nearly the whole file at the end.
  ::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
}

absl::Status LocalWritableFile::WriteAll(const char* data, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd_, data + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(temp_path_, "write failed", errno);
    }
    done += static_cast<size_t>(w);
  }
  Written(n);
  return absl::OkStatus();
}

absl::Status LocalWritableFile::FlushBuffer() {
  TFCKPT_RETURN_IF_ERROR(WriteAll(buffer_.data(), buffer_.size()));
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status LocalWritableFile::Append(std::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError(StrCat(temp_path_, ": append after close"));
  size_ += data.size();
  if (buffer_.size() + data.size() <= kOutputBuffer) {
    buffer_.append(data);
    return absl::OkStatus();
  }
  if (absl::Status s = FlushBuffer(); !s.ok()) return s;
  if (data.size() < kOutputBuffer) {
    buffer_.append(data);
    return absl::OkStatus();
  }
  return WriteAll(data.data(), data.size());  // large writes go straight through
}

absl::Status LocalWritableFile::CopyRange(const ReadableFile& src, uint64_t src_offset, uint64_t n, uint64_t* out) {
  const auto* local = dynamic_cast<const LocalReadableFile*>(&src);
  if (local == nullptr) return ReadAndWrite(src, src_offset, n, out);
  loff_t in = static_cast<loff_t>(src_offset);
  loff_t at = static_cast<loff_t>(*out);
  uint64_t left = n;
  while (left > 0) {
    TFCKPT_RETURN_IF_ERROR(CheckStop());
    const ssize_t k = ::copy_file_range(local->fd(), &in, fd_, &at, std::min<uint64_t>(left, kCopyChunk), 0);
    if (k > 0) {
      left -= static_cast<uint64_t>(k);
      Written(static_cast<uint64_t>(k));
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != EBADF) {
      return ErrnoError(temp_path_, "copy failed", errno);
    }
    // Not supported here (or a short source): read and write instead.
    *out = static_cast<uint64_t>(at);
    return ReadAndWrite(src, static_cast<uint64_t>(in), left, out);
  }
  *out = static_cast<uint64_t>(at);
  return absl::OkStatus();
}

absl::Status LocalWritableFile::ReadAndWrite(const ReadableFile& src, uint64_t src_offset, uint64_t n,
                                             uint64_t* out) {
  if (src_offset > src.size() || n > src.size() - src_offset) {
    return ErrnoError(temp_path_, "source ended early while copying", EIO);
  }
  std::string buf(static_cast<size_t>(std::min<uint64_t>(n, 1 << 20)), '\0');
  for (uint64_t done = 0; done < n;) {
    TFCKPT_RETURN_IF_ERROR(CheckStop());
    const uint64_t k = std::min<uint64_t>(n - done, buf.size());
    TFCKPT_RETURN_IF_ERROR(src.ReadAt(src_offset + done, k, buf.data()));
    TFCKPT_RETURN_IF_ERROR(PwriteAll(*out + done, std::string_view(buf.data(), static_cast<size_t>(k))));
    done += k;
  }
  *out += n;
  return absl::OkStatus();
}

absl::Status LocalWritableFile::AppendFrom(const ReadableFile& src, uint64_t src_offset, uint64_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError(StrCat(temp_path_, ": append after close"));
  TFCKPT_RETURN_IF_ERROR(FlushBuffer());
  uint64_t at = size_;
  TFCKPT_RETURN_IF_ERROR(CopyRange(src, src_offset, n, &at));
  // Positional copies leave the file position alone: move it to the end for the next
  // append.
  if (::lseek(fd_, static_cast<off_t>(at), SEEK_SET) < 0) return ErrnoError(temp_path_, "seek failed", errno);
  size_ = at;
  return absl::OkStatus();
}

void LocalWritableFile::Extend(uint64_t end) {
  uint64_t cur = size_.load();
  while (cur < end && !size_.compare_exchange_weak(cur, end)) {
  }
}

absl::Status LocalWritableFile::PwriteAll(uint64_t offset, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(temp_path_, "write failed", errno);
    }
    done += static_cast<size_t>(w);
  }
  Extend(offset + data.size());
  Written(data.size());
  return absl::OkStatus();
}

// One file written by several threads does not scale through write(2) and
// copy_file_range(2): the file system holds the file's lock (inode_lock) while it copies the
// bytes into its pages, so the threads take turns however many there are. Page faults on a
// shared mapping of the file take no such lock. So a thread that finds write_mu_ taken
// writes its range through a mapping rather than wait: at -j 1 nothing changes; at -j 2,
// one thread copies in the kernel while the other maps. Measured on 1 GiB in tmpfs, 2
// threads, 8 MiB ranges (docs/PERFORMANCE.md, issue 26): copy_file_range under the lock
// 0.47-0.51 s, mappings only 0.54-0.58 s (each page is zeroed at its first fault before
// the copy overwrites it: 0.84-0.91 s on one thread), both together 0.38-0.41 s; into two
// separate files 0.28 s.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL (then no mapping)
#endif

absl::Status LocalWritableFile::MappedWrite(uint64_t offset, uint64_t n, const Fill& fill, uint64_t* done) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  *done = 0;
  while (*done < n) {
    TFCKPT_RETURN_IF_ERROR(CheckStop());
    const uint64_t at = offset + *done;
    const uint64_t k = std::min(n - *done, kMapWindow);
    // The file must reach the window's end before it is mapped (past it a write faults
    // with SIGBUS). fallocate extends it and, unlike ftruncate, never shortens it under a
    // thread that has written further meanwhile.
    if (::fallocate(fd_, 0, static_cast<off_t>(at + k - 1), 1) != 0) return absl::OkStatus();
    const uint64_t begin = at / page * page;
    void* map = ::mmap(nullptr, at + k - begin, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, static_cast<off_t>(begin));
    if (map == MAP_FAILED) return absl::OkStatus();
    // Fault every page in first: where a page cannot be had (a full disk) this returns an
    // error, where the copy's own fault would raise SIGBUS.
    const bool populated = ::madvise(map, at + k - begin, MADV_POPULATE_WRITE) == 0;
    const absl::Status filled = populated ? fill(*done, k, static_cast<char*>(map) + (at - begin)) : absl::OkStatus();
    ::munmap(map, at + k - begin);
    if (!populated) return absl::OkStatus();
    TFCKPT_RETURN_IF_ERROR(filled);
    *done += k;
    Extend(at + k);
    Written(k);
  }
  return absl::OkStatus();
}

absl::Status LocalWritableFile::WriteAt(uint64_t offset, std::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError(StrCat(temp_path_, ": write after close"));
  std::unique_lock<std::mutex> lock(write_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    uint64_t done = 0;
    TFCKPT_RETURN_IF_ERROR(MappedWrite(offset, data.size(), [&](uint64_t at, uint64_t k, char* out) {
      std::memcpy(out, data.data() + at, k);
      return absl::OkStatus();
    }, &done));
    if (done == data.size()) return absl::OkStatus();
    data.remove_prefix(static_cast<size_t>(done));
    offset += done;
    lock.lock();
  }
  return PwriteAll(offset, data);
}

absl::Status LocalWritableFile::CopyAt(uint64_t offset, const ReadableFile& src, uint64_t src_offset, uint64_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError(StrCat(temp_path_, ": write after close"));
  std::unique_lock<std::mutex> lock(write_mu_, std::try_to_lock);
  // (Sources that are not in memory or mapped are read as before: the other thread's copy
  // does not wait for the network.) The source is read with its ReadAt (pread) straight into
  // the mapping, not through its own mapping, which would keep the pages it touched.
  if (!lock.owns_lock() && src.mapping()) {
    uint64_t done = 0;
    TFCKPT_RETURN_IF_ERROR(MappedWrite(offset, n, [&](uint64_t at, uint64_t k, char* out) {
      return src.ReadAt(src_offset + at, k, out);
    }, &done));
    if (done == n) return absl::OkStatus();
    offset += done;
    src_offset += done;
    n -= done;
  }
  if (!lock.owns_lock()) lock.lock();
  uint64_t at = offset;
  TFCKPT_RETURN_IF_ERROR(CopyRange(src, src_offset, n, &at));
  lock.unlock();
  Extend(at);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReadableFile>> LocalWritableFile::OpenWritten() {
  if (committed_) return absl::FailedPreconditionError(StrCat(final_path_, ": already committed"));
  if (fd_ >= 0) {
    TFCKPT_RETURN_IF_ERROR(FlushBuffer());
    ::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);  // advisory, as in Written()
    unflushed_ = 0;
  }
  TFCKPT_ASSIGN_OR_RETURN(auto f, LocalReadableFile::Open(temp_path_));
  return Renamed(std::move(f), final_path_);
}

absl::Status LocalWritableFile::ReadBack(uint64_t offset, uint64_t n, char* out) {
  if (fd_ < 0) return absl::FailedPreconditionError(StrCat(temp_path_, ": read back after close"));
  if (!buffer_.empty()) TFCKPT_RETURN_IF_ERROR(FlushBuffer());
  return PreadFully(fd_, final_path_, offset, n, out);
}

absl::Status LocalWritableFile::Close() {
  if (fd_ < 0) return absl::FailedPreconditionError(StrCat(temp_path_, ": closed twice"));
  absl::Status s = FlushBuffer();
  if (s.ok() && ::fsync(fd_) != 0) s = ErrnoError(temp_path_, "fsync failed", errno);
  if (::close(fd_) != 0 && s.ok()) s = ErrnoError(temp_path_, "close failed", errno);
  fd_ = -1;
  return s;
}

absl::Status LocalWritableFile::Commit() {
  if (fd_ >= 0) return absl::FailedPreconditionError(StrCat(temp_path_, ": commit before close"));
  TFCKPT_RETURN_IF_ERROR(MoveIntoPlace(temp_path_, tracked_, final_path_, &tracked_, if_absent_));
  committed_ = true;
  return absl::OkStatus();
}

void LocalWritableFile::Publish() {
  ForgetCreated(tracked_);
  tracked_ = 0;
}

// ---------------------------------------------------------------------------------------
// The store

absl::StatusOr<std::unique_ptr<ReadableFile>> LocalStorage::OpenForRead(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(auto f, LocalReadableFile::Open(path));
  return std::unique_ptr<ReadableFile>(std::move(f));
}

absl::StatusOr<std::unique_ptr<WritableFile>> LocalStorage::Create(const std::string& final_path,
                                                                   const WriteOptions& options) {
  TFCKPT_ASSIGN_OR_RETURN(auto f, LocalWritableFile::Create(final_path, options));
  return std::unique_ptr<WritableFile>(std::move(f));
}

absl::StatusOr<std::vector<DirEntry>> LocalStorage::List(const std::string& dir) {
  std::vector<DirEntry> out;
  std::error_code ec;
  fs::directory_iterator it(dir.empty() ? "." : dir, ec);
  if (ec) return ErrnoError(dir.empty() ? "." : dir, "cannot list", ec.value());
  for (const auto& e : it) {
    DirEntry d{e.path().filename().string(), EntryKind::kOther, 0};
    struct stat st;
    if (::stat(e.path().c_str(), &st) == 0) {
      d.kind = KindOf(st);
      if (d.kind == EntryKind::kFile) d.size = static_cast<uint64_t>(st.st_size);
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<std::string> LocalStorage::Glob(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  return out;
}

absl::StatusOr<FileStat> LocalStorage::Stat(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoError(path, "cannot stat", errno);
  FileStat s{KindOf(st), 0, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  if (s.kind == EntryKind::kFile) s.size = static_cast<uint64_t>(st.st_size);
  return s;
}

absl::StatusOr<std::string> LocalStorage::ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  TFCKPT_ASSIGN_OR_RETURN(auto f, LocalReadableFile::Open(path));
  if (f->size() > max_bytes) {
    return absl::FailedPreconditionError(
        StrCat(path, ": too large (", f->size(), " bytes; at most ", max_bytes, " expected)"));
  }
  return std::string(*f->mapping());
}

absl::Status LocalStorage::Remove(const std::string& path) {
  std::error_code ec;
  if (!fs::remove(path, ec)) return ErrnoError(path, "cannot remove", ec ? ec.value() : ENOENT);
  return absl::OkStatus();
}

absl::Status LocalStorage::RemoveAll(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return ErrnoError(path, "cannot remove", ec.value());
  return absl::OkStatus();
}

absl::Status LocalStorage::CreateDirectories(const std::string& dir) {
  if (dir.empty() || IsDirectory(dir)) return absl::OkStatus();
  const std::string parent = Dirname(dir);
  if (!parent.empty() && parent != dir) TFCKPT_RETURN_IF_ERROR(CreateDirectories(parent));
  const uint64_t id = TrackCreated(dir, TrackKind::kDirectory);  // (a run that fails leaves no empty directory)
  if (::mkdir(dir.c_str(), 0777) != 0) {
    const int err = errno;
    ForgetCreated(id);
    if (err == EEXIST && IsDirectory(dir)) return absl::OkStatus();  // made meanwhile by someone else
    return ErrnoError(dir, "cannot create directory", err);
  }
  return absl::OkStatus();
}

absl::Status LocalStorage::Move(const std::string& from, const std::string& to) {
  struct stat a, b;
  if (::stat(from.c_str(), &a) == 0 && ::stat(to.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    // rename() of two links to one file does nothing and would leave `from` behind.
    if (::unlink(from.c_str()) != 0) return ErrnoError(from, "cannot remove (already linked as the output)", errno);
    return absl::OkStatus();
  }
  if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoError(to, "cannot move into place", errno);
  return absl::OkStatus();
}

absl::Status LocalStorage::Link(const std::string& from, const std::string& to) {
  if (::link(from.c_str(), to.c_str()) != 0) return ErrnoError(to, "cannot link", errno);
  return absl::OkStatus();
}

std::string LocalStorage::Absolute(const std::string& path) {
  std::error_code ec;
  return fs::absolute(path, ec).lexically_normal().string();
}

absl::Status LocalStorage::CheckNotInputs(const std::vector<std::string>& outputs,
                                          const std::vector<std::string>& inputs) {
  std::error_code ec;
  for (const std::string& in : inputs) {
    const fs::path in_resolved = fs::weakly_canonical(in, ec);
    const bool in_exists = fs::exists(in, ec);
    for (const std::string& out : outputs) {
      const bool same_name = !in_resolved.empty() && fs::weakly_canonical(out, ec) == in_resolved;
      const bool same_file = in_exists && fs::exists(out, ec) && fs::equivalent(out, in, ec);
      if (same_name || same_file) {
        return absl::InvalidArgumentError(StrCat(out, same_name ? ": is one of the inputs (" : ": is the same file as input (",
                                                 in, "); write the output elsewhere"));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> LocalStorage::RemoveStaleTemporaries(const std::string& dir, const std::string& stem) {
  static constexpr std::string_view kMark = ".tmp-tfckpt-";
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t mark = name.rfind(kMark);
    if (name.rfind(stem, 0) != 0 || mark == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + mark + kMark.size(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // its writer still runs
    if (fs::remove(e.path(), ec)) removed.push_back(e.path().string());
  }
  return removed;
}

}  // namespace tfckpt
