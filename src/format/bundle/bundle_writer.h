// Writes V2 tensor bundles the way TensorFlow does (docs/FORMAT.md §a.8, §b, §c, §d.1):
// densely packed data files, masked CRC-32C per entry, partitioned tensors as a
// metadata entry plus slice-key entries, uncompressed index in key order.
//
// Output is crash-safe: the writer publishes through a Publication (publish/publication.h),
// begun by Create() (an existing checkpoint at the prefix is refused unless `overwrite` is
// set) and committed by Finish(): every file written under a temporary name, verified
// (before_commit), the data files in place first and the index last, so a reader never
// sees an index whose data is missing.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tfckpt/storage.h"
#include "tfckpt/ordered_code.h"
#include "tfckpt/region.h"
#include "publish/publication.h"

namespace tfckpt {

// Name of data file `shard` of `num_shards` for `prefix`: PREFIX.data-00000-of-00002.
std::string DataFileName(std::string_view prefix, int32_t shard, int32_t num_shards);
// The files of a TF bundle written at `prefix` with `num_files` data files: the index
// and PREFIX.data-0000i-of-0000N (what a run that wrote it may remove).
std::vector<std::string> BundleFiles(const std::string& prefix, int32_t num_files);

// The files a V2 checkpoint written at `prefix` with `num_shards` data files occupies,
// plus the data files of any other checkpoint already at that prefix.
std::vector<std::string> BundleFilesAt(const Location& prefix, int32_t num_shards);

struct BundleWriterOptions {
  int32_t num_shards = 1;  // data files PREFIX.data-0000i-of-NNNNN, all created
  // Other names for the data files (num_shards of them), e.g. a scale-out task's on an
  // object store: its data object goes straight under the output's final name, as there
  // is no rename to put it there later (scale_out.h). Empty: PREFIX.data-….
  std::vector<std::string> data_files;
  bool overwrite = false;  // replace an existing checkpoint at the prefix
  BeforeCommit before_commit;  // e.g. verification (verify.h)
  // Positional entries (AddAt, BeginEntryAt) of the tensors this accepts (by name) are read
  // back right after each write and compared with the bytes their CRC was computed on, by
  // the thread that wrote them (while others copy): a difference fails the write
  // (DataLoss, check id "output.mismatch"). WrittenOutput::read_back then names them.
  // Empty: none (the read-back pays only where the verification can then skip reading).
  std::function<bool(std::string_view tensor)> read_back;
};

class BundleWriter {
 public:
  // Every file of the bundle is in `prefix`'s store (BundleWriterOptions::data_files too).
  static absl::StatusOr<std::unique_ptr<BundleWriter>> Create(const Location& prefix,
                                                              BundleWriterOptions options = {});
  ~BundleWriter();

  // Adds a whole tensor whose payload is in TensorFlow's layout (POD little-endian;
  // strings/variants encoded as in docs/FORMAT.md §c.4/§c.5).
  // REQUIRES: `name` not added before; 0 <= shard < num_shards.
  absl::Status Add(std::string_view name, int32_t dtype, const Shape& shape, std::string_view payload,
                   int32_t shard = 0);

  // Adds one slice `region` of the partitioned tensor `name` with full shape `full`.
  // The slice is recorded with `extents` when given (e.g. DTensor's "-" for unsharded
  // axes, or a stored slice's own extents), else with explicit extents, as TF's Python
  // savers write it; a slice covering the whole tensor is stored as a plain entry
  // (docs/FORMAT.md §d.1). REQUIRES: `extents`, when given, describe `region` (RegionOf).
  // The other forms that take a region take `extents` the same way.
  absl::Status AddSlice(std::string_view name, int32_t dtype, const Shape& full, const Region& region,
                        std::string_view payload, int32_t shard = 0, const SliceExtents* extents = nullptr);

  // Streaming form for fixed-size dtypes: the payload of the entry is appended in
  // pieces through the returned stream; its CRC is computed while writing.
  //
  // Thread safety: entries may be added concurrently from several threads as long as
  // each data file (shard) is written by one thread at a time.
  class EntryStream {
   public:
    absl::Status Append(std::string_view bytes);
    // Appends `bytes`, which the caller has just read from `src` at `src_offset`:
    // the CRC is computed on `bytes`, the data moved in-kernel (copy_file_range).
    absl::Status AppendFrom(const ReadableFile& src, uint64_t src_offset, std::string_view bytes);
    // Completes the entry. REQUIRES: exactly the announced number of bytes appended.
    absl::Status Close();

   private:
    friend class BundleWriter;
    // After a positional write at `at`: BundleWriter::AfterPositionalWrite, counted.
    absl::Status Checked(uint64_t at, std::string_view bytes);
    BundleWriter* writer_ = nullptr;
    std::string key_;
    int32_t shard_ = 0;
    bool positional_ = false;
    uint64_t expected_ = 0, written_ = 0, offset_ = 0;
    bool check_ = false;      // read back each write (BundleWriterOptions::read_back)
    uint64_t read_back_ = 0;  // bytes read back and found equal
    uint32_t crc_ = 0;
  };
  absl::StatusOr<EntryStream> BeginEntry(std::string_view name, int32_t dtype, const Shape& full,
                                         const std::optional<Region>& region, int32_t shard = 0,
                                         const SliceExtents* extents = nullptr);

  // Positional forms, for a caller that knows every entry's size and so lays out each
  // data file before writing (reshard): the entry's bytes go at `offset` of data file
  // `shard`, written with pwrite / copy_file_range, so several threads may fill one
  // data file at once. The entry stream writes its bytes front to back from `offset`.
  // REQUIRES: the entries of a data file are all added positionally, in ranges that do
  // not overlap and leave no gaps; none of the appending forms used on that file.
  absl::Status AddAt(std::string_view name, int32_t dtype, const Shape& full, const std::optional<Region>& region,
                     std::string_view payload, int32_t shard, uint64_t offset, const SliceExtents* extents = nullptr);
  absl::StatusOr<EntryStream> BeginEntryAt(std::string_view name, int32_t dtype, const Shape& full,
                                           const std::optional<Region>& region, int32_t shard, uint64_t offset,
                                           const SliceExtents* extents = nullptr);

  // A positional entry whose bytes all move unchanged from other files (`copies`, which
  // tile [offset, offset + its size) in order), into data file `shard`, which took a plan
  // of them (PlanCopies): the stretches the file copies inside the store are placed with
  // WritableFile::CopyAt and never read here; the others (a part the store's 5 MiB minimum
  // makes this process send) are read from their source, their CRC taken, and written.
  // The entry's CRC is `crc` where the caller knows it (the copies are whole stored pieces:
  // their CRCs concatenated). Where options.read_back accepts `name` (the run verifies),
  // the copied stretches are read back once from the completed objects (Finish: the run's
  // "verifying" phase) and, with the CRCs of the stretches sent, give the entry's CRC,
  // which must then equal `crc` where given (DataLoss "output.mismatch" else); the entry
  // counts as read back (WrittenOutput::read_back). REQUIRES: as BeginEntryAt; a fixed-size
  // dtype; `crc` given or options.read_back accepting `name` (a run that does not verify
  // reads a cut piece from its input instead, for its CRC).
  absl::Status AddCopiedAt(std::string_view name, int32_t dtype, const Shape& full, const std::optional<Region>& region,
                           int32_t shard, uint64_t offset, const std::vector<PlannedCopy>& copies,
                           std::optional<uint32_t> crc, const SliceExtents* extents = nullptr);

  // Data file `shard` will be `size` bytes, of which `copies` move unchanged from other
  // files (WritableFile::PlanCopies); whether the file took the plan. REQUIRES: before any
  // entry of that file is written.
  absl::StatusOr<bool> PlanCopies(int32_t shard, uint64_t size, const std::vector<PlannedCopy>& copies,
                                  ServerSideCopy mode);
  // Whether data file `shard` copies any of bytes [offset, offset + n) inside the store
  // (WritableFile::CopiedInStore). REQUIRES: 0 <= shard < num_shards.
  bool CopiesInStore(int32_t shard, uint64_t offset, uint64_t n) const {
    return !data_[static_cast<size_t>(shard)]->CopiedInStore(offset, n).empty();
  }
  // Notes the CRC-32C of bytes [offset, offset + size) of the input file `file`, taken as a
  // copy read them, for the verification (WrittenOutput::source_crc). Thread-safe.
  void NoteSourceCrc(const std::string& file, uint64_t offset, uint64_t size, uint32_t crc);

  // Writes the index, calls options.before_commit, makes every file durable and renames
  // them into place (data files first, the index last). On an object store (data files
  // not ReadableBeforeCommit): the data objects are completed first, before_commit reads
  // them then, and the index goes up last (PublishBundle's check_data): it is written only
  // then, once the CRCs AddCopiedAt left open are read back from the completed objects. An
  // entry that options.read_back asks for counts as read back there: its CRC was taken
  // from the bytes uploaded, which the store checks against their SHA-256, or from the
  // completed object. REQUIRES: called once.
  absl::Status Finish();

  const std::string& prefix() const { return prefix_; }

 private:
  BundleWriter() = default;
  // Checks and records where a new entry goes; returns its table key.
  absl::StatusOr<std::string> Register(std::string_view name, int32_t dtype, const Shape& full,
                                       const std::optional<Region>& region, int32_t shard, uint64_t size,
                                       bool positional, const SliceExtents* extents);
  absl::Status FinishEntry(const std::string& key, uint64_t offset, uint64_t size, uint32_t crc, bool read_back);
  // After a positional write of `bytes` at `at` of data file `shard` (entry `key`): plants
  // the test fault (TFCKPT_FAULT_FLIP_OUTPUT_BYTE) when it falls there, then, with `check`,
  // reads the range back and compares. Returns whether it was checked.
  absl::StatusOr<bool> AfterPositionalWrite(int32_t shard, uint64_t at, std::string_view bytes, const std::string& key,
                                            bool check);
  // The CRCs of the entries AddCopiedAt left without one: each read back from its data
  // file (in chunks, on the run's threads). REQUIRES: the data files complete (an object
  // store's committed) or ReadableBeforeCommit.
  absl::Status TakeDeferredCrcs();
  // Whether options.read_back asks for the entries of `tensor`.
  bool WantsReadBack(std::string_view tensor) const { return options_.read_back && options_.read_back(tensor); }
  // Add / AddSlice (appending) or, with `at`, AddAt.
  absl::Status AddPayload(std::string_view name, int32_t dtype, const Shape& full, const std::optional<Region>& region,
                          std::string_view payload, int32_t shard, std::optional<uint64_t> at,
                          const SliceExtents* extents);
  // Internal error when two entries of a data file overlap (positional writers promise they
  // do not): an entry read back whole (options.read_back) then still holds its bytes.
  absl::Status CheckDisjoint() const;
  // What the writer knows of its output's bytes, for options.before_commit (read_back,
  // source_crc).
  WrittenOutput Written();
  // The index's bytes into `file` (Publication::Index::write).
  absl::Status WriteIndex(WritableFile& file) const;
  // BeginEntry (appending) or, with `at`, BeginEntryAt.
  absl::StatusOr<EntryStream> StartEntry(std::string_view name, int32_t dtype, const Shape& full,
                                         const std::optional<Region>& region, int32_t shard, std::optional<uint64_t> at,
                                         const SliceExtents* extents);

  std::string prefix_;
  BundleWriterOptions options_;
  std::vector<std::unique_ptr<WritableFile>> data_;
  struct Pending;
  std::map<std::string, std::unique_ptr<Pending>> entries_;   // table key -> entry
  std::map<std::string, std::string> partitioned_;            // name -> metadata key (= name)
  std::vector<char> in_stream_;                                // per shard
  std::set<std::tuple<int32_t, uint64_t, uint64_t>> read_back_;  // (shard, offset, size) of entries read back
  struct Deferred {  // an entry of AddCopiedAt to be read back
    std::string key;
    int32_t shard;
    uint64_t offset, size;
    std::optional<uint32_t> crc;  // the caller's
    // Its stretches in order: [offset, offset + size), with the CRC of the bytes sent, or
    // none where the store copied them (read back).
    struct Stretch {
      uint64_t offset, size;
      std::optional<uint32_t> crc;
    };
    std::vector<Stretch> stretches;
  };
  std::vector<Deferred> deferred_;  // (guarded by mu_)
  std::map<std::tuple<std::string, uint64_t, uint64_t>, uint32_t> source_crcs_;  // NoteSourceCrc (guarded by mu_)
  std::unique_ptr<Publication> publication_;  // of the output: owns its commit
  bool finished_ = false;
  std::mutex mu_;  // guards entries_, partitioned_, read_back_, deferred_ and source_crcs_ while entries are added
};

}  // namespace tfckpt
