// The object store Storage: s3:// and gs:// URLs (storage.h says how an object store fits
// the interface). Storage::For returns the current run's instance for every URL.
//
//   OpenForRead   HEAD: the size and the ETag, pinned: every later GET of the object sends
//                 it as If-Match, so an object replaced during the run is an error naming
//                 its URL, never a mix of two versions.
//   ReadAt        a thread's announced scan of a large range (WillReadSequentially, at
//                 least kScanMinBytes: a tensor verified or copied) is streamed ahead for
//                 that thread alone, as ranged GETs of kPieceBytes, as many ahead as
//                 connections (ScanPieces, shared by all scans). With the file's layout
//                 (AdviseLayout: the checkpoint's entries, FileLayout) every stored byte is
//                 fetched once per run: a small piece comes with its small neighbours (their
//                 group, a window of at most kWindowBytes, cached) -- but for the object's
//                 first small read when no WillReadSequentially announced it, fetched
//                 exactly (a caller that reads one tensor fetches its bytes, not its
//                 group's; from the second read on, groups), a large piece's bytes
//                 exactly as asked, never for a small piece's window (a thread that reads on
//                 where its last read of it ended, unannounced, is streamed ahead to the
//                 piece's end; an announced part of a large piece is streamed however
//                 small). An empty layout: every read exactly as asked (the .npz
//                 reader's while it opens the archive). Without a layout, small reads come from read-ahead windows
//                 (kWindowBytes unless TFCKPT_S3_READ_AHEAD_KIB says, aligned). Windows are
//                 fetched as ranged GETs of at most kWindowPieceBytes over the client's
//                 connections at once and kept in a cache shared by every open object (at
//                 most kCachedWindows windows: bounded memory); a read of a window or more
//                 goes straight into the caller's buffer as ranged GETs of kPieceBytes, over
//                 the connections at once.
//   Stat          HEAD; a key with objects under "KEY/" (or a key ending in "/") is a
//                 directory.
//   List          ListObjectsV2 with delimiter "/": the objects one level below, and the
//                 common prefixes as directories.
//   Glob          a listing of the pattern's fixed prefix, filtered by the pattern.
//   ReadSmallFile HEAD, then one GET when the object is within the cap.
//   Remove        DELETE (NotFound when there is no such object); RemoveAll also deletes
//                 every object under "KEY/".
//   Create        an upload (S3Upload, multipart_writer.h): parts of kPartBytes (or
//                 WriteOptions::part_size) go up as they fill, at most --connections parts of
//                 all uploads at once (memory); nothing is visible before Commit(), which
//                 completes it (a small object: one PUT). WriteOptions::if_absent: completed
//                 only if absent (If-None-Match: *). Not readable before Commit
//                 (ReadableBeforeCommit), except an object held whole in its first part.
//   UnfinishedWrites, AbortUnfinishedWrites  ListMultipartUploads under the prefix,
//                 AbortMultipartUpload of each.
//   Move, Link    Unimplemented: an object store has no rename (never copy + delete).
//   CreateDirectories  nothing to do.
//
// One store per run (run/run.h; ForCurrentRun), and in it one client per scheme (and so per
// endpoint: the scheme's settings name it), built on the run's first use of the scheme from
// the environment and the run's object store options (settings.h). Its options:
//   TFCKPT_S3_CONNECTIONS  concurrent transfers (default 8; the commands' --connections,
//                          RunOptions::connections, run.h, overrides it)
//   TFCKPT_S3_READ_AHEAD_KIB  the read-ahead window in KiB (64 to 65536, default 16384)
//   TFCKPT_S3_MAX_RETRIES  retries of a failing request (default 10, like TensorFlow's GCS
//                          file system; 0 fails at the first error)
//   TFCKPT_S3_CONNECT_SECONDS  the limit on connecting (1 to 300, default 10)
//   TFCKPT_S3_STALL_SECONDS  a transfer that moves no byte for this long fails and is
//                          retried (1 to 3600, default 30)
// Errors name the URL, never a credential. A malformed URL is NotFound (it names no
// object), so the commands report it as an unreadable input.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvstore/s3/client.h"
#include "kvstore/s3/settings.h"
#include "tfckpt/storage.h"

namespace tfckpt::s3 {

inline constexpr uint64_t kWindowBytes = 16ull << 20;
// 64 MiB at most: with the parts of uploads (kPartBytes, --connections of them on their way)
// a reshard from a store to a store stays within 256 MiB (docs/PERFORMANCE.md).
inline constexpr int kCachedWindows = 4;
inline constexpr uint64_t kPieceBytes = 8ull << 20;
// A window is fetched in pieces this size, so that the connections share it.
inline constexpr uint64_t kWindowPieceBytes = 8ull << 20;
// A thread's sequential scan of a range this large or larger (WillReadSequentially) is
// streamed ahead for it alone in pieces of kPieceBytes: all scans together hold at most
// ScanPieces(connections) of them (fetched or on their way), each scan an equal share;
// past that, reads go straight to the store.
inline constexpr uint64_t kScanMinBytes = 4ull << 20;
inline constexpr size_t kMaxScanPieces = 8;  // 64 MiB: with the uploads' parts, a reshard between stores within 256 MiB
inline size_t ScanPieces(int connections) {
  return std::clamp<size_t>(static_cast<size_t>(std::max(connections, 0)), 4, kMaxScanPieces);
}
// The parts of an upload (the first 2,000; then larger: PartLayout).
inline constexpr uint64_t kPartBytes = 8ull << 20;

// The pieces of an object as its reader reads them (ReadableFile::AdviseLayout): the small
// ones (under kScanMinBytes) grouped in file order into windows of at most `window` bytes
// (neighbours, and the gaps between them, fetched together once), the large ones alone.
class FileLayout {
 public:
  FileLayout(std::vector<std::pair<uint64_t, uint64_t>> pieces, uint64_t window);
  // What to fetch for a read of [offset, offset + n): the small piece's group (window), or
  // the bytes asked for (a large piece, which ends at piece_end); nullopt when the read is
  // not within one piece.
  struct Fetch {
    uint64_t offset, size;
    bool window;
    uint64_t piece_end;
  };
  std::optional<Fetch> For(uint64_t offset, uint64_t n) const;

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<uint64_t> begin_, end_;  // the pieces, sorted, overlaps merged
  std::vector<size_t> group_;          // by piece: its group, or kNone (large)
  std::vector<std::pair<uint64_t, uint64_t>> groups_;  // [begin, end)
};

// What the environment asks for: the client's options (TFCKPT_S3_CONNECTIONS,
// TFCKPT_S3_MAX_RETRIES) and the read-ahead window (TFCKPT_S3_READ_AHEAD_KIB);
// InvalidArgument naming the variable when one is not a whole number in range.
struct StoreOptions {
  ClientOptions client;
  uint64_t window_bytes = kWindowBytes;
};
absl::StatusOr<StoreOptions> StoreOptionsFromEnv(const EnvLookup& env);

class WindowCache;
class PartBudget;
class CopyRefusal;
struct ScanBudget;

class S3Storage final : public Storage {
 public:
  // Made for a run by Storage::For (storage.cc) on its first use of the scheme, reading the
  // environment and the run's options (object store options) when it first talks to a
  // scheme's endpoint, and gone with the run (the files it opened keep what they need).
  // `connections` > 0 (the run's) overrides TFCKPT_S3_CONNECTIONS.
  explicit S3Storage(int connections);
  ~S3Storage() override;

  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenForRead(const std::string& path) override;
  using Storage::Create;
  absl::StatusOr<std::unique_ptr<WritableFile>> Create(const std::string& final_path,
                                                       const WriteOptions& options) override;
  absl::StatusOr<std::vector<DirEntry>> List(const std::string& dir) override;
  std::vector<std::string> Glob(const std::string& pattern) override;
  absl::StatusOr<FileStat> Stat(const std::string& path) override;
  bool IsFile(const std::string& path) override;
  std::vector<absl::StatusOr<FileStat>> StatAll(const std::vector<std::string>& paths) override;
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
  absl::Status CheckAccess(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> UnfinishedWrites(const std::string& prefix) override;
  absl::StatusOr<std::vector<std::string>> AbortUnfinishedWrites(const std::string& prefix, int64_t min_age_seconds) override;
  TransferStats Transfers() override;

  // The run changed or removed the object at `url` (or, with `under`, every object whose
  // URL starts with it): what HEAD said of it before is forgotten.
  void Forget(const std::string& url, bool under = false);

 private:
  // The URL parsed and the client of its scheme (created on first use).
  struct Target {
    ObjectUrl url;
    std::shared_ptr<Client> client;
    uint64_t window_bytes;
    int connections;
  };
  absl::StatusOr<Target> Resolve(const std::string& path);
  // HEAD of the object, sent once per object and run: its size and ETag are remembered
  // (the ETag is pinned for every read anyway, so an object replaced meanwhile is an error
  // either way) until the run itself writes or removes the object (Forget). Errors are not
  // remembered.
  absl::StatusOr<ObjectInfo> HeadOnce(const Target& t);

  const int connections_override_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Client>> clients_;  // by scheme
  uint64_t window_bytes_ = kWindowBytes;  // from the environment, with the first client
  int connections_ = 8;                   // likewise
  std::shared_ptr<PartBudget> parts_;     // parts on their way, all uploads together
  std::shared_ptr<PartBudget> scan_gate_;  // pieces of sequential scans on their way
  std::shared_ptr<WindowCache> cache_;
  std::shared_ptr<ScanBudget> scans_;     // the sequential scans of this store's objects
  std::shared_ptr<CopyRefusal> refusal_;  // whether the store refused a copy inside it (for the run)
  std::mutex heads_mu_;
  std::map<std::string, ObjectInfo> heads_;  // HeadOnce's answers, by URL
};

}  // namespace tfckpt::s3
