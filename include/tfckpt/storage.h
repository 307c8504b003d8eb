// Storage: the one interface through which the library and the commands read, write, list
// and remove files. A path resolves to its store by its scheme, once (Storage::For): a plain
// path is the local file system (src/kvstore/local/: mmap, pread, copy_file_range, rename),
// s3:// and gs:// an object store (src/kvstore/s3/), mem:// the in-memory store of the tests
// (src/kvstore/memory/); each store registers its scheme in one table (storage.cc). Nothing
// outside src/kvstore/local/ calls the file system (scripts/lint-storage.sh checks it).
//
// An object store fits the interface this way:
//   - ReadableFile::ReadAt is a ranged GET; mapping() is nullopt (no whole-object mapping),
//     so Range() reads into the caller's scratch buffer; Release is a no-op.
//   - WritableFile is a multipart upload: Append/WriteAt/the copy forms fill parts, Close
//     sends the last one and completes nothing, Commit completes the upload so that the
//     object appears whole under its name at once; destroying it uncommitted aborts the
//     upload (no trace). There is no temporary name, and no reading before Commit
//     (ReadableBeforeCommit).
//   - List is a listing by prefix (directories are common prefixes), Stat a HEAD, Glob a
//     listing of the pattern's fixed prefix filtered by the pattern.
//   - Move answers Unimplemented: an object store has no rename, and callers copy instead
//     (it is never emulated here by copy + delete, which is not atomic). Link likewise.
//   - CreateDirectories is a no-op (prefixes need no creation).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tfckpt {

// How a new file is written and published (Storage::Create): commit semantics are the
// caller's to say, never guessed from the name.
struct WriteOptions {
  // Commit() fails (AlreadyExists) and leaves what is there when a file of that name
  // exists: a checkpoint's index, the commit of a whole checkpoint, never replaces one that
  // another run wrote meanwhile. Without it, Commit() replaces an existing file.
  bool if_absent = false;
  // Object stores: the size of the parts the file goes up in (0: the store's default). A
  // file no larger than one part is held in memory until Commit(), and so can be read
  // before it (OpenWritten): a checkpoint's index, checked before it goes up.
  uint64_t part_size = 0;
};

class ReadableFile;

// True when `path` is a URL ("SCHEME://…", SCHEME letters, digits, + - . starting with a
// letter): an object store's name (s3://, gs://), not a local path.
bool IsUrl(std::string_view path);

// Whether bytes that move unchanged from one object of an object store to another of the
// same store are copied inside the store (S3's UploadPartCopy) instead of through this
// process (the commands' --server-side): kAuto where the store can, kNever never, kAlways
// or fail (a store that refuses is then an error, not a fallback).
enum class ServerSideCopy { kAuto, kNever, kAlways };

// The names of the modes, in ServerSideCopy's order: "auto", "never", "always" (the
// commands' --server-side takes them: its check, completion, --help and man page).
const std::vector<std::string>& ServerSideWords();
// A mode by its name (ServerSideWords; the commands' --server-side, man tfckpt-reshard; a
// scale-out plan's output.server_side); InvalidArgument "\"VALUE\": not auto, never or
// always" else.
absl::StatusOr<ServerSideCopy> ParseServerSide(std::string_view mode);
// The name ParseServerSide reads.
std::string_view ServerSideName(ServerSideCopy mode);

// A range of a file being written that will be a copy of a range of another file
// (WritableFile::PlanCopies): bytes [offset, offset + size) are those of `src` from
// `src_offset`.
struct PlannedCopy {
  uint64_t offset = 0;
  const ReadableFile* src = nullptr;
  uint64_t src_offset = 0;
  uint64_t size = 0;
};

// What a store moved for a run (bytes): copied inside the store, sent in request bodies,
// received in response bodies; and what the run should be told of it (a store that refused
// a server-side copy). All zero for a local store.
struct TransferStats {
  uint64_t copied_in_store = 0;
  uint64_t uploaded = 0;
  uint64_t downloaded = 0;
  std::vector<std::string> notes;
};

// A file open for positional reads.
class ReadableFile {
 public:
  virtual ~ReadableFile() = default;

  // The name errors use: the path (a URL for an object store, never with credentials).
  virtual const std::string& path() const = 0;
  virtual uint64_t size() const = 0;

  // Reads exactly `n` bytes at `offset` into `out`. Error naming the file and the offset
  // when any of the range lies past the end (overflow-safe for untrusted offsets) or the
  // medium fails.
  virtual absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const = 0;

  // The whole file in memory, where the medium maps it (a local file: mmap, read-only);
  // nullopt elsewhere. Valid as long as this object lives.
  virtual std::optional<std::string_view> mapping() const { return std::nullopt; }
  // Drops the mapped pages of [offset, offset + n) from this process (the page cache keeps
  // them), so that reading a large file through the mapping does not grow memory use.
  // No-op without a mapping.
  virtual void Release(uint64_t /*offset*/, uint64_t /*n*/) const {}
  // Hint that [offset, offset + n) is about to be read once, in order. May do nothing.
  virtual void WillReadSequentially(uint64_t /*offset*/, uint64_t /*n*/) const {}
  // The pieces a reader reads this file by ([offset, offset + size): a checkpoint's stored
  // entries), so that a medium that fetches more than is asked fetches each byte once: an
  // object store reads neighbouring small pieces together and never the bytes of a large
  // piece for a small one (s3_storage.h). Sorted or not, overlapping or not. May do nothing.
  // REQUIRES: called before the file is shared between threads.
  virtual void AdviseLayout(const std::vector<std::pair<uint64_t, uint64_t>>& /*pieces*/) {}

  // Bytes [offset, offset + n): a view of the mapping when there is one, else read into
  // `*scratch` (resized) and a view of it. Error (naming the file and offset) when the range
  // ends past the end of the file; overflow-safe. REQUIRES: scratch != nullptr.
  absl::StatusOr<std::string_view> Range(uint64_t offset, uint64_t n, std::string* scratch) const;
  // The error Range and ReadAt give for a range past the end.
  absl::Status PastEndError(uint64_t offset, uint64_t n) const;
};

// A private, copy-on-write mapping of the bytes [offset, offset + n) of a local file
// (MAP_PRIVATE, readable and writable: numpy.memmap(mode="c")), for memory handed out to a
// caller that may write into it (the Python module's mmap=True): its pages are the file's
// until written, and writes reach neither the file nor f.mapping(). Points at byte
// `offset`; unmapped when the last copy goes. nullptr for a file of another medium or when
// no mapping can be made now (the caller copies instead); an error when the range is no
// longer in the file (CheckMapped).
absl::StatusOr<std::shared_ptr<char>> MapPrivate(const ReadableFile& f, uint64_t offset, uint64_t n);

// A file being written, that appears under its name only at Commit(). Destroying it
// without Commit() abandons it: nothing of it remains (locally, the temporary is removed).
class WritableFile {
 public:
  virtual ~WritableFile() = default;

  // The name it will have (errors name it, or the temporary it is written under).
  virtual const std::string& path() const = 0;
  // Bytes written so far (with positional writes: where the furthest write ends).
  virtual uint64_t size() const = 0;

  virtual absl::Status Append(std::string_view data) = 0;
  // Appends `n` bytes of `src` from `src_offset`: moved without passing through this
  // process where the medium allows (locally copy_file_range when both files are local),
  // else read and written.
  virtual absl::Status AppendFrom(const ReadableFile& src, uint64_t src_offset, uint64_t n) = 0;

  // Positional forms, for files whose layout is known before any byte is written: several
  // threads may write disjoint ranges at once. REQUIRES: not mixed with Append/AppendFrom
  // on the same file.
  virtual absl::Status WriteAt(uint64_t offset, std::string_view data) = 0;
  virtual absl::Status CopyAt(uint64_t offset, const ReadableFile& src, uint64_t src_offset, uint64_t n) = 0;

  // A reader of the bytes written so far, before Commit(): to verify an output before it is
  // published (and, before Close(), while its write-back is under way). Its path() is the
  // final name. Unimplemented where the medium cannot read an unfinished file (an object
  // store's multipart upload): a BeforeCommit that needs it then fails. REQUIRES: no write
  // to this file while the reader is used (positional writers: none at all; the buffer of
  // appends is flushed without the positional writers' lock).
  virtual absl::StatusOr<std::unique_ptr<ReadableFile>> OpenWritten() {
    return absl::UnimplementedError(path() + ": cannot be read before it is committed");
  }

  // Reads back [offset, offset + n) of what was written, so that a writer can check a range
  // right after writing it (while the other threads copy). Unimplemented where the medium
  // cannot read an unfinished file. REQUIRES: the range written, before Close(); no write
  // to it meanwhile; not mixed with Append (whose buffer it flushes unlocked).
  virtual absl::Status ReadBack(uint64_t /*offset*/, uint64_t /*n*/, char* /*out*/) {
    return absl::UnimplementedError(path() + ": cannot be read before it is committed");
  }

  // Whether OpenWritten and ReadBack can read the bytes before Commit(): a local file, yes;
  // an object store's upload, no. A writer that must check its output before publishing it
  // then commits the data first and the file that makes them a whole last (BundleWriter:
  // the index).
  virtual bool ReadableBeforeCommit() const { return true; }
  // Whether AppendFrom/CopyAt move bytes without them passing through this process (local
  // to local: copy_file_range). Where not, a caller that holds the bytes already should
  // Append/WriteAt them instead of having them read again.
  virtual bool MovesInKernel() const { return false; }

  // Announces, before any byte is written, the ranges of this file that will be copies of
  // ranges of other files, and its final `size`: a medium that copies between its files
  // without the bytes passing through this process (an object store: UploadPartCopy) lays
  // the file out around them. Returns whether it took the plan (then CopyInStoreAt does
  // those copies inside the store); false where it cannot or `mode` says no (kAlways: an
  // error saying why instead). REQUIRES: before any write; called at most once; the
  // sources outlive the file's Close(). Nothing is promised for ranges never announced.
  virtual absl::StatusOr<bool> PlanCopies(uint64_t /*size*/, const std::vector<PlannedCopy>& /*copies*/,
                                          ServerSideCopy mode) {
    if (mode == ServerSideCopy::kAlways) {
      return absl::FailedPreconditionError(path() + ": this medium cannot copy inside the store");
    }
    return false;
  }
  // Places `bytes`, which are `src`'s at `src_offset` (the caller has read them: it checks
  // their CRC), at `offset`: where PlanCopies planned them as a copy inside the store, the
  // store copies them (they are not sent), from the source pinned to the version they were
  // read from, so that a CRC taken from `bytes` holds for the file; else they are written
  // (WriteAt). Returns whether any of them is copied inside the store. REQUIRES: as WriteAt.
  virtual absl::StatusOr<bool> CopyInStoreAt(uint64_t offset, const ReadableFile& /*src*/, uint64_t /*src_offset*/,
                                             std::string_view bytes) {
    if (absl::Status s = WriteAt(offset, bytes); !s.ok()) return s;
    return false;
  }

  // The stretches of bytes [offset, offset + n) that the plan PlanCopies took copies inside
  // the store, in order, as [begin, end) (none without a plan): a caller places those with
  // CopyAt, unread, and the others itself (WriteAt), having their bytes at hand.
  virtual std::vector<std::pair<uint64_t, uint64_t>> CopiedInStore(uint64_t /*offset*/, uint64_t /*n*/) const {
    return {};
  }

  // Flushes and makes the bytes durable. REQUIRES: called at most once.
  virtual absl::Status Close() = 0;
  // Publishes the file under its name, atomically. REQUIRES: Close() succeeded. A failure
  // may leave the name as it was, or (CommitMayHaveHappened) not be known to.
  virtual absl::Status Commit() = 0;
  // Keeps the committed file even if the run later fails or is interrupted (for outputs
  // that replace consumed inputs, merge --move). REQUIRES: Commit() succeeded.
  virtual void Publish() = 0;
};

// Whether a failed Commit() may have put the file in place all the same: its outcome is
// unknown (an object store's completion that was cut off or answered 5xx, and whose upload
// could not be found still in progress). Otherwise the name is as it was before.
bool CommitMayHaveHappened(const absl::Status& commit);
// Marks `s` (Unavailable, say) as a commit's failure known not to have been carried out.
absl::Status CommitNotCarriedOut(absl::Status s);

// Opens a file for reading by its path: Storage::For(path).OpenForRead(path), or something
// else that answers for those names (the writer's not yet committed files, OpenWritten).
using FileOpener = std::function<absl::StatusOr<std::unique_ptr<ReadableFile>>(const std::string& path)>;
// `file` under another name: path() (and so every error about it) says `name`; everything
// else is `file`'s. For a temporary read as the file it will become.
std::unique_ptr<ReadableFile> Renamed(std::unique_ptr<ReadableFile> file, std::string name);

// (*opener)(path) when `opener` is given (non-null and not empty), else the path's Storage.
absl::StatusOr<std::unique_ptr<ReadableFile>> OpenFile(const std::string& path, const FileOpener* opener);

enum class EntryKind { kFile, kDirectory, kOther };

struct DirEntry {
  std::string name;  // the last component only
  EntryKind kind = EntryKind::kOther;
  uint64_t size = 0;  // files only
};

struct FileStat {
  EntryKind kind = EntryKind::kOther;
  uint64_t size = 0;
  int64_t mtime_ns = 0;  // last modification, nanoseconds since the epoch
};

class Storage : public std::enable_shared_from_this<Storage> {
 public:
  virtual ~Storage() = default;

  // The store that holds `path`, by its scheme ("s3://", "gs://", "mem://"; none: the local
  // file system). Within a run (run/run.h) each scheme's store is the one the caller gave
  // (RunOptions::stores), else the run's own, made on its first use and gone with it (an
  // object store's settings and caches are per run); outside any run, one per scheme for the
  // process. A scheme no store serves is an error of every call of the store returned.
  static Storage& For(std::string_view path);
  // The local file system (credential files, for example, are always local).
  static Storage& Local();

  virtual absl::StatusOr<std::unique_ptr<ReadableFile>> OpenForRead(const std::string& path) = 0;
  // A new file that becomes `final_path` at Commit() (see WriteOptions). The directory must
  // exist (CreateDirectories).
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> Create(const std::string& final_path,
                                                               const WriteOptions& options) = 0;
  absl::StatusOr<std::unique_ptr<WritableFile>> Create(const std::string& final_path) {
    return Create(final_path, WriteOptions{});
  }

  // The entries of directory `dir` ("" is the current directory), in no particular order.
  virtual absl::StatusOr<std::vector<DirEntry>> List(const std::string& dir) = 0;
  // The paths matching a shell pattern (*, ?, [...]), in no particular order; none when
  // nothing matches.
  virtual std::vector<std::string> Glob(const std::string& pattern) = 0;
  // NotFound when nothing is there.
  virtual absl::StatusOr<FileStat> Stat(const std::string& path) = 0;
  bool Exists(const std::string& path) { return Stat(path).ok(); }
  bool IsDirectory(const std::string& path);
  // A file at `path` (an object: one HEAD, where Stat of a missing key also lists).
  virtual bool IsFile(const std::string& path);
  // Stat of each of `paths` (all of this store), in their order. An object store asks them
  // side by side, as many at once as its connections (each is a request), not one after
  // the other.
  virtual std::vector<absl::StatusOr<FileStat>> StatAll(const std::vector<std::string>& paths);

  // The whole of a small file (state files, plan JSON, credentials). Error when it is
  // larger than `max_bytes`, or not a regular file.
  virtual absl::StatusOr<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) = 0;

  // Removes a file, or an empty directory. NotFound when nothing is there.
  virtual absl::Status Remove(const std::string& path) = 0;
  // Removes `path` and everything under it; OK when nothing is there.
  virtual absl::Status RemoveAll(const std::string& path) = 0;
  // Creates the missing directories of `dir` (and its parents). With the run's cleanup
  // run (src/run/run.h): a run that fails or stops leaves no empty directory it made.
  virtual absl::Status CreateDirectories(const std::string& dir) = 0;
  // The same for the directory that will hold `path` (nothing when it has none).
  absl::Status CreateParentDirectories(const std::string& path);

  // Renames `from` to `to` atomically, replacing `to`. When both names are already one file
  // (hard links), removes `from`. Unimplemented on a medium without rename (the caller
  // copies instead).
  virtual absl::Status Move(const std::string& from, const std::string& to) = 0;
  // Makes `to` (new) another name of `from`'s file. Unimplemented where the medium has no
  // links, or an error when they are on different devices: the caller copies instead.
  virtual absl::Status Link(const std::string& from, const std::string& to) = 0;

  // `path` made absolute and lexically normal (locally against the working directory).
  virtual std::string Absolute(const std::string& path) = 0;

  // Error (InvalidArgument, naming both files) when writing any of `outputs` would touch
  // one of `inputs`: the same path once symlinks and ".." are resolved, or the same file
  // (inode) under another name. Paths that do not exist are compared by resolved name.
  virtual absl::Status CheckNotInputs(const std::vector<std::string>& outputs,
                                      const std::vector<std::string>& inputs) = 0;

  // OK when the medium holding `path` can be asked about it: always for local paths; for
  // an object store, the URL is well formed, its bucket exists, the credentials are
  // accepted and the endpoint answers (one request). The error names `path`.
  virtual absl::Status CheckAccess(const std::string& /*path*/) { return absl::OkStatus(); }

  // The final names of writes under `prefix` (names starting with it) that were started and
  // are neither finished nor abandoned: an object store's multipart uploads in progress,
  // left by a writer that was killed (or that still runs). None locally (an interrupted
  // local write is a temporary: RemoveStaleTemporaries).
  virtual absl::StatusOr<std::vector<std::string>> UnfinishedWrites(const std::string& /*prefix*/) {
    return std::vector<std::string>{};
  }
  // Abandons those started at least `min_age_seconds` ago (aborts the uploads: a younger
  // one may be a writer still running); the names abandoned. A write whose start the store
  // does not say is taken as old.
  virtual absl::StatusOr<std::vector<std::string>> AbortUnfinishedWrites(const std::string& /*prefix*/,
                                                                        int64_t /*min_age_seconds*/) {
    return std::vector<std::string>{};
  }

  // What the store moved for the run so far (object stores: TransferStats); zero locally.
  virtual TransferStats Transfers() { return {}; }

  // Removes the temporaries (NAME.tmp-tfckpt-PID-N) that writers killed before they
  // finished left in `dir` for names starting with `stem`: those whose PID no longer runs.
  // Returns the paths removed (the final name each was meant for is NAME).
  virtual std::vector<std::string> RemoveStaleTemporaries(const std::string& dir, const std::string& stem) = 0;
};

// A path and the store that holds it (TensorStore's KvStore: driver + path): resolved from a
// path once, where a path comes in -- a command's argument, a path read from a state file,
// a plan or a shards file -- and passed down. The files that go with it (a prefix's index,
// its data files, its temporaries, a directory's entries) are in the same store: they are
// reached from it (Sibling, Child, Parent) without being resolved again. Copyable; the store
// is shared (within a run, the run's store for the scheme: Storage::For).
class Location {
 public:
  // `path` and its store: Storage::For(path) -- the one resolution of a path.
  static Location Of(std::string path);
  Location(std::shared_ptr<Storage> store, std::string path) : store_(std::move(store)), path_(std::move(path)) {}

  Storage& store() const { return *store_; }
  const std::shared_ptr<Storage>& shared_store() const { return store_; }
  const std::string& path() const { return path_; }

  // Another path of the same store: `path` + `suffix` (PREFIX.index), the entry `name` of
  // this directory (JoinPath), this path's directory (Dirname), or any `path` of the same
  // store (a data file named by an index beside it). REQUIRES (At): `path` has this
  // location's scheme.
  Location Sibling(std::string_view suffix) const;
  Location Child(std::string_view name) const;
  Location Parent() const;
  Location At(std::string path) const { return Location(store_, std::move(path)); }

  // The store's calls on this path.
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenForRead() const { return store_->OpenForRead(path_); }
  absl::StatusOr<FileStat> Stat() const { return store_->Stat(path_); }
  bool Exists() const { return store_->Exists(path_); }
  bool IsFile() const { return store_->IsFile(path_); }
  bool IsDirectory() const { return store_->IsDirectory(path_); }
  absl::Status Remove() const { return store_->Remove(path_); }

 private:
  std::shared_ptr<Storage> store_;
  std::string path_;
};

// Stores to hand a run (RunOptions::stores, run.h) for a scheme: a new, empty store kept in
// memory (a test's or an embedder's s3:// without a network: the paths are its keys, as
// written), and one that refuses every path (FailedPrecondition naming it, without a
// request: what a hermetic program, such as a fuzz target, gives "s3" and "gs").
std::shared_ptr<Storage> NewMemoryStorage();
std::shared_ptr<Storage> NewRefusingStorage();

}  // namespace tfckpt
