// The copy engine: the bytes of regions of a checkpoint's tensors streamed into sinks (a
// BundleWriter entry, a safetensors file, a zip member), pieces copied into a BundleWriter,
// and the execution of a plan of output data files and pieces (WritePlan). The planners
// (reshard.h, combine.h, convert.h, scale_out.h) decide what goes where; this only copies,
// and includes nothing of theirs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/read.h"

namespace tfckpt {

// ---------------------------------------------------------------------------------------
// A plan: which regions of which tensors go to which output data file, in which order.
// PlanReshard makes one (reshard.h calls it ReshardPlan) and ExecutePlan writes it;
// combine and scale-out write their PlannedPieces through PieceCopier.

struct PlannedPiece {
  Region region;  // in the full tensor
  int32_t file = 0;
  uint64_t bytes = 0;  // payload bytes (estimated for strings)
  // How the slice is recorded in the index: a stored piece kept as it is keeps its own
  // extents, a DTensor layout's piece has "-" on unsharded axes; nullopt: explicit
  // START,LENGTH everywhere (TF's Python savers). Unused for a piece covering the tensor
  // (stored as a plain entry).
  std::optional<SliceExtents> extents;
};

struct TensorPlan {
  const TensorEntry* source = nullptr;
  std::vector<PlannedPiece> pieces;  // one covering piece = stored whole
  bool resliced = false;             // regions differ from the source's
  std::string rule;                  // the --partition rule that applied, or ""
  std::string note;                  // why a matching rule was not applied
  std::string name;                  // in the output, when not the source's (a renamed TF1 slot)
  int64_t follows = -1;              // a slot cut like its primary: the primary's index in the plan
  const std::string& out_name() const { return name.empty() ? source->name : name; }
};

struct WritePlan {
  int32_t num_files = 1;
  std::vector<TensorPlan> tensors;   // in the input's (name) order
  // The order the tensors are laid out in each data file: indexes into `tensors` (TF2's save
  // order: the object graph's, the graph itself last, as TF2 writes them); empty: as listed
  // (key order, as TF1's Saver writes them).
  std::vector<size_t> order;
  std::vector<uint64_t> file_bytes;  // per output file
  std::vector<std::string> notes;    // e.g. data files that stay empty (fewer pieces than files)
};

// The slice string a piece is (or will be) stored under (ExtentsString of its extents):
// "" for a piece stored as a plain entry (the whole tensor), as TF's shape_and_slice.
std::string StoredSpec(const TensorEntry& t, const PlannedPiece& p);
// The slice string of a stored slice of `t` ("" when `t` is not partitioned).
std::string StoredSpec(const TensorEntry& t, const StoredSlice& s);

// The stored slice of `t` whose region is `region`, or nullptr.
const StoredSlice* StoredSliceOf(const TensorEntry& t, const Region& region);

// ---------------------------------------------------------------------------------------
// Copying.

// Where copied bytes go: an entry of a BundleWriter, a safetensors file, a zip member.
class PieceSink {
 public:
  virtual ~PieceSink() = default;
  virtual absl::Status Append(std::string_view bytes) = 0;
  // `bytes` were just read from `src` at `src_offset`: a sink that writes a file may
  // move them in-kernel instead (WritableFile::AppendFrom).
  virtual absl::Status AppendFrom(const ReadableFile& src, uint64_t src_offset, std::string_view bytes) {
    (void)src;
    (void)src_offset;
    return Append(bytes);
  }
};

// The bytes of one output range, written front to back from `offset` of `file` with its
// positional forms (WriteAt; CopyAt for bytes that move unchanged, where the file moves
// them in-kernel): several threads may fill disjoint ranges of one file at once, each
// with a sink of its own, and the file's bytes do not depend on which thread wrote what.
// REQUIRES: `file` is written only positionally (storage.h), and the range is this sink's.
class PositionalSink : public PieceSink {
 public:
  PositionalSink(WritableFile& file, uint64_t offset) : file_(file), at_(offset) {}
  absl::Status Append(std::string_view bytes) override;
  absl::Status AppendFrom(const ReadableFile& src, uint64_t src_offset, std::string_view bytes) override;
  uint64_t offset() const { return at_; }  // where the next byte goes

 private:
  WritableFile& file_;
  uint64_t at_;
};

// The copies CopyRegion makes when it copies `region` of `t` unchanged to offset `at` of a
// file (its in-kernel runs, handed to the sink's AppendFrom), in the region's order: for
// WritableFile::PlanCopies and BundleWriter::AddCopiedAt. None where it gathers the region
// (runs too short, V1, big-endian, strings). `crc`: the region's CRC-32C where the copies
// are whole stored pieces with CRCs (theirs, concatenated).
struct RegionCopies {
  std::vector<PlannedCopy> copies;
  std::optional<uint32_t> crc;
};
absl::StatusOr<RegionCopies> PlannedCopiesOf(const Checkpoint& c, const TensorEntry& t, const Region& region,
                                             uint64_t at);

// Converts whole elements of dtype `from` to `to` (see CastElements) on their way to `next`.
class CastSink : public PieceSink {
 public:
  // REQUIRES: CastSupported(from, to).
  CastSink(int32_t from, int32_t to, PieceSink& next);
  absl::Status Append(std::string_view bytes) override;

 private:
  int32_t from_, to_;
  size_t from_size_, to_size_;
  PieceSink& next_;
  std::string out_;
};

// Streams the bytes of `region` of the fixed-size tensor `t` into `sink`, in row-major
// order of the region: stored pieces that hold long contiguous runs are handed over with
// AppendFrom (in-kernel copies), others are gathered through `buffer` (bounded, about
// 8 MiB). A stored V2 piece that moves whole (the region is that piece, or the piece is
// one contiguous run of it) has its CRC checked over the bytes that moved, at no extra
// read, and so does a piece the gather reads whole, front to back (unpartitioning and
// cuts on axis 0). With `verify_sources`, every other piece the region reads is checked
// first (VerifyCrc); without, those (parts of pieces read for cuts on other axes) are
// left to the caller (reshard compares the output with the input afterwards).
// `progress`, when given, advances by the bytes copied.
// With `carried` (one tensor copied region by region in row-major order over several
// calls, e.g. an .npz member chunk by chunk), the stored pieces' CRCs are taken over the
// bytes as they pass, across the calls, and each piece is checked once all of them have
// passed (FinishCarriedCrcs checks the rest), instead of `verify_sources` reading a piece
// again for every region that touches it.
// With `noted`: where a stored piece with no CRC (safetensors) moves whole in-kernel, the
// CRC-32C of its bytes as read is handed to it (for the verification: WrittenOutput::source_crc).
// REQUIRES: region inside t.shape; t's element size > 0.
struct CarriedCrcs {
  struct Piece {
    uint64_t next = 0;  // the bytes [0, next) of the piece passed in order (UINT64_MAX: out of order)
    uint32_t crc = 0;   // their CRC-32C
    bool checked = false;
  };
  std::map<const StoredSlice*, Piece> pieces;
};
absl::Status CopyRegion(const Checkpoint& c, const TensorEntry& t, const Region& region, PieceSink& sink,
                        std::string* buffer, std::atomic<uint64_t>* progress = nullptr,
                        bool verify_sources = false, CarriedCrcs* carried = nullptr,
                        const std::function<void(const StoredSlice& piece, uint32_t crc)>& noted = {});
// After the last CopyRegion of `t` with `carried`: checks every stored piece of `t` whose
// CRC the copies did not prove (VerifyCrc: read again). REQUIRES: t's element size > 0.
absl::Status FinishCarriedCrcs(const Checkpoint& c, const TensorEntry& t, CarriedCrcs& carried, std::string* buffer);

// The payload of `region` of the string or variant tensor `t` as a writer stores it: a
// stored piece equal to the region as read (CRC checked, kept alive in `keep`), else the
// region's strings gathered and encoded into `encoded`. (Variants cannot be resliced.)
absl::StatusOr<std::string_view> VariablePayload(const Checkpoint& c, const TensorEntry& t, const Region& region,
                                                 TensorBytes* keep, std::string* encoded);


// Copies pieces of tensors of one checkpoint into a BundleWriter (CopyRegion for
// fixed-size dtypes; string pieces are re-encoded, others copied whole). The entry is
// written under `out_name` (default: t.name); `casts` (dtype -> dtype, CastSupported)
// converts the tensors of those dtypes on the way; `verify_sources` as in CopyRegion.
// Thread safety: one copier per thread; see BundleWriter for shards.
class PieceCopier {
 public:
  PieceCopier(const Checkpoint& c, BundleWriter& w, std::atomic<uint64_t>* progress = nullptr,
              std::map<int32_t, int32_t> casts = {}, bool verify_sources = false)
      : c_(c), w_(w), progress_(progress), casts_(std::move(casts)), verify_sources_(verify_sources) {}
  // With `at`, the entry is written at that offset of its data file (BundleWriter's
  // positional forms); the caller has laid the file out with PieceSize.
  // REQUIRES: piece.region within t.shape; t's slices belong to the checkpoint given.
  absl::Status Write(const TensorEntry& t, const PlannedPiece& piece, std::string_view out_name = {},
                     std::optional<uint64_t> at = std::nullopt);
  // Writes the piece at `at` of its data file (`size` bytes, PieceSize), copied inside the
  // store where its data file copies it (`rc`: PlannedCopiesOf, given to the file's
  // PlanCopies) and its CRC is known (`rc.crc`, or `crc_read_back`: the writer takes it
  // from the completed object; BundleWriter::AddCopiedAt): then it is not read here at
  // all. Otherwise as Write. REQUIRES: as Write; `rc` planned for this piece at `at`.
  absl::Status WriteCopiedAt(const TensorEntry& t, const PlannedPiece& piece, std::string_view out_name, uint64_t at,
                             uint64_t size, const RegionCopies& rc, bool crc_read_back = false);

 private:
  void Progress(uint64_t n);
  const Checkpoint& c_;
  BundleWriter& w_;
  std::atomic<uint64_t>* progress_;
  std::map<int32_t, int32_t> casts_;
  bool verify_sources_;
  std::string buf_;
};

struct ExecuteOptions {
  int jobs = 0;           // threads writing work units; 0 = cores
  bool overwrite = false;
  std::atomic<uint64_t>* progress = nullptr;  // bytes written so far, if given
  BeforeCommit before_commit;                 // publish/publication.h: e.g. verification
  // BundleWriterOptions::read_back for every tensor whose input and output pieces are all
  // cut on axis 0 only (the verification proves those by CRCs alone; others it reads).
  bool read_back = false;
  // Whether bytes that move unchanged are copied inside the store where the input and the
  // output are objects of one store (WritableFile::PlanCopies).
  ServerSideCopy server_side = ServerSideCopy::kAuto;
};

// ---------------------------------------------------------------------------------------
// Running the copies of an output whose layout is fixed (every piece's place known from
// its size before a byte is written) on several threads.

// A unit of work for RunUnits: its size in bytes (units run largest first) and the output
// files it writes (a thread prefers units whose files no other thread is writing: two
// writers of one file only take turns on the file system's lock of it).
struct WorkUnit {
  uint64_t bytes = 0;
  std::vector<int32_t> files;
};

// Runs run(i, stop) for every unit i on up to `jobs` threads (0: one per core; never more
// than there are units). A free thread takes the largest unit left whose files no other
// thread is writing, else the largest left. After an error no further unit starts and
// `stop` turns true (long units poll it between steps); the first error is returned.
absl::Status RunUnits(const std::vector<WorkUnit>& units, int jobs,
                      const std::function<absl::Status(size_t unit, const std::atomic<bool>& stop)>& run);

// The parts in which the whole of the fixed-size tensor `t` is copied by separate units
// with no stored piece read twice and every stored CRC checked over the bytes that move:
// the regions of its stored pieces, in row order, when they are all whole rows (a cut on
// axis 0 only, so that each is one contiguous range of the tensor's row-major bytes);
// otherwise the tensor whole. (A region of several parts is never split: pieces it only
// partly covers would be read and checked once per part.)
std::vector<Region> RowParts(const TensorEntry& t);

// Where `part` (whole rows of a tensor of shape `shape`) begins in the tensor's row-major
// bytes, for elements of `element_size` bytes. REQUIRES: part is whole rows of `shape`.
uint64_t RowPartOffset(const Shape& shape, const Region& part, int64_t element_size);

// The bytes a writer stores for `region` of `t`: elements x element size, or for strings
// and variants the payload's size (a stored piece's own size when it is copied as is,
// else the size of the re-encoded strings, which are gathered to find it).
absl::StatusOr<uint64_t> PieceSize(const Checkpoint& c, const TensorEntry& t, const Region& region);

// Writes `plan` for checkpoint `c` to `out_prefix` (atomic: temporaries renamed into place,
// data files first, index last). Bytes that move unchanged and contiguous are copied
// in-kernel; others are gathered through a bounded buffer; memory does not grow with the
// checkpoint. The object graph and every tensor the plan does not reslice are carried
// over byte for byte.
absl::Status ExecutePlan(const Checkpoint& c, const WritePlan& plan, const std::string& out_prefix,
                         const ExecuteOptions& options);

}  // namespace tfckpt
