// The copy engine (see copy.h): sinks, CopyRegion, strings, PieceCopier, PieceSize. The
// execution of a whole plan is in execute_plan.cc.
#include "copy/copy.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_format.h"
#include "copy_internal.h"
#include "base/crc32c.h"
#include "base/float_convert.h"
#include "model/tensor_encoding.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt {

namespace copy_internal {

// (Declared, with what they do, in copy_internal.h.)

std::vector<const StoredSlice*> SourcesOf(const TensorEntry& t, const Region& region) {
  std::vector<const StoredSlice*> sources;
  for (const auto& s : t.slices) {
    if (s.region == region || (!region.empty() && Intersect(s.region, region))) sources.push_back(&s);
  }
  return sources;
}

bool MovesInKernel(const Checkpoint& c, const TensorEntry& t, const std::vector<const StoredSlice*>& sources,
                   const Region& region) {
  const CheckpointInfo& ci = c.info();
  const int64_t esize = LookupDType(t.dtype)->element_size;
  if (ci.format == Format::kV1 || ci.big_endian || esize == 0) return false;
  int64_t min_run = INT64_MAX, total_runs = 0;
  for (const StoredSlice* s : sources) {
    auto inter = Intersect(region, s->region);
    if (!inter) continue;
    const RunPlan rp = PlanRuns(*inter, {&region, &s->region});
    min_run = std::min(min_run, rp.count);
    total_runs += rp.runs;
  }
  return total_runs > 0 && min_run >= kDirectRun / esize;
}

std::vector<KernelRun> KernelRuns(const Region& region, const std::vector<const StoredSlice*>& sources) {
  std::vector<KernelRun> runs;
  for (const StoredSlice* s : sources) {
    auto inter = Intersect(region, s->region);
    if (!inter) continue;
    ForEachRun(*inter, {&region, &s->region},
               [&](const int64_t* off, int64_t n) { runs.push_back({off[0], off[1], n, s}); });
  }
  std::sort(runs.begin(), runs.end(), [](const KernelRun& x, const KernelRun& y) { return x.dst < y.dst; });
  return runs;
}

absl::Status CheckCopiedCrc(const Checkpoint& c, const TensorEntry& t, const StoredSlice& s, uint32_t crc) {
  if (crc32c::Mask(crc) == s.data.masked_crc) return absl::OkStatus();
  TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, c.DataFile(s.data.shard));
  return DataLossAt("data.crc", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                    StrCat(PieceLabel(t, s), "checksum mismatch while copying (stored ",
                           absl::StrFormat("%08x", crc32c::Unmask(s.data.masked_crc)), ", computed ",
                           absl::StrFormat("%08x", crc), ")"));
}

}  // namespace copy_internal

namespace {

using copy_internal::CheckCopiedCrc;
using copy_internal::kChunkBytes;
using copy_internal::kCopyChunk;
using copy_internal::kSpanBytes;
using copy_internal::MovesInKernel;
using copy_internal::SourcesOf;

// A BundleWriter entry as a sink.
class EntrySink : public PieceSink {
 public:
  explicit EntrySink(BundleWriter::EntryStream& s) : s_(s) {}
  absl::Status Append(std::string_view bytes) override { return s_.Append(bytes); }
  absl::Status AppendFrom(const ReadableFile& src, uint64_t offset, std::string_view bytes) override {
    return s_.AppendFrom(src, offset, bytes);
  }

 private:
  BundleWriter::EntryStream& s_;
};

}  // namespace

absl::Status PositionalSink::Append(std::string_view bytes) {
  TFCKPT_RETURN_IF_ERROR(file_.WriteAt(at_, bytes));
  at_ += bytes.size();
  return absl::OkStatus();
}

absl::Status PositionalSink::AppendFrom(const ReadableFile& src, uint64_t src_offset, std::string_view bytes) {
  // (Where the file cannot move them in-kernel, or the source is not a local file (not
  // mapped: an object store's, whose bytes a copy would fetch a second time), the bytes at
  // hand are written -- or copied inside the store where the file planned that:
  // reading them again would cost a second read.)
  const bool in_kernel = file_.MovesInKernel() && src.mapping().has_value();
  if (in_kernel) {
    TFCKPT_RETURN_IF_ERROR(file_.CopyAt(at_, src, src_offset, bytes.size()));
  } else {
    TFCKPT_RETURN_IF_ERROR(file_.CopyInStoreAt(at_, src, src_offset, bytes).status());
  }
  at_ += bytes.size();
  return absl::OkStatus();
}

absl::StatusOr<RegionCopies> PlannedCopiesOf(const Checkpoint& c, const TensorEntry& t, const Region& region,
                                             uint64_t at) {
  const DTypeInfo* info = LookupDType(t.dtype);
  if (info == nullptr || info->element_size == 0) return RegionCopies{};
  const std::vector<const StoredSlice*> sources = SourcesOf(t, region);
  if (!MovesInKernel(c, t, sources, region)) return RegionCopies{};
  const uint64_t esize = static_cast<uint64_t>(info->element_size);
  const bool has_crc = c.info().format == Format::kV2 && !c.info().big_endian;
  RegionCopies out;
  uint32_t crc = 0;
  bool whole = has_crc;
  for (const copy_internal::KernelRun& r : copy_internal::KernelRuns(region, sources)) {
    TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, c.DataFile(r.s->data.shard));
    const uint64_t size = static_cast<uint64_t>(r.n) * esize;
    out.copies.push_back({at + static_cast<uint64_t>(r.dst) * esize, file,
                          r.s->data.offset + static_cast<uint64_t>(r.src) * esize, size});
    whole = whole && r.WholePiece();
    if (whole) crc = crc32c::Concat(crc, crc32c::Unmask(r.s->data.masked_crc), size);
  }
  if (whole && !out.copies.empty()) out.crc = crc;
  return out;
}

std::vector<Region> RowParts(const TensorEntry& t) {
  std::vector<Region> parts;
  if (t.shape.empty() || t.slices.size() < 2) return {Region::Full(t.shape)};
  for (const StoredSlice& s : t.slices) {
    if (s.region.rank() != t.shape.size() || !s.region.WholeRowsOf(t.shape)) return {Region::Full(t.shape)};
    if (!s.region.empty()) parts.push_back(s.region);
  }
  std::sort(parts.begin(), parts.end(), [](const Region& a, const Region& b) { return a.start[0] < b.start[0]; });
  // They must tile the rows exactly (a damaged layout is copied whole, and CopyRegion
  // reports its gap or overlap).
  int64_t next = 0;
  for (const Region& r : parts) {
    if (r.start[0] != next) return {Region::Full(t.shape)};
    next += r.shape[0];
  }
  if (next != t.shape[0] || parts.empty()) return {Region::Full(t.shape)};
  return parts;
}

uint64_t RowPartOffset(const Shape& shape, const Region& part, int64_t element_size) {
  if (shape.empty() || shape[0] == 0) return 0;
  const int64_t row = NumElements(shape).value_or(0) / shape[0];
  return static_cast<uint64_t>(part.start[0]) * static_cast<uint64_t>(row) * static_cast<uint64_t>(element_size);
}

CastSink::CastSink(int32_t from, int32_t to, PieceSink& next)
    : from_(from),
      to_(to),
      from_size_(static_cast<size_t>(LookupDType(from)->element_size)),
      to_size_(static_cast<size_t>(LookupDType(to)->element_size)),
      next_(next) {}

absl::Status CastSink::Append(std::string_view bytes) {
  const size_t n = bytes.size() / from_size_;
  out_.resize(n * to_size_);
  CastElements(from_, to_, bytes.data(), n, out_.data());
  return next_.Append(out_);
}

namespace {

// Feeds `bytes`, at `begin` of piece `s`, into its carried CRC; once the piece has passed
// whole, in order, checks it.
absl::Status Carry(const Checkpoint& c, const TensorEntry& t, const StoredSlice& s, uint64_t begin,
                   std::string_view bytes, CarriedCrcs* carried) {
  if (carried == nullptr) return absl::OkStatus();
  CarriedCrcs::Piece& p = carried->pieces[&s];
  if (p.next != begin) {
    p.next = UINT64_MAX;
    return absl::OkStatus();
  }
  p.crc = crc32c::Extend(p.crc, bytes.data(), bytes.size());
  p.next += bytes.size();
  if (p.next != s.data.size || p.checked) return absl::OkStatus();
  p.checked = true;
  return CheckCopiedCrc(c, t, s, p.crc);
}

}  // namespace

absl::Status FinishCarriedCrcs(const Checkpoint& c, const TensorEntry& t, CarriedCrcs& carried, std::string* buffer) {
  const CheckpointInfo& ci = c.info();
  if (ci.format != Format::kV2 || ci.big_endian) return absl::OkStatus();  // (no CRCs, or checked as read)
  for (const StoredSlice& s : t.slices) {
    CarriedCrcs::Piece& p = carried.pieces[&s];
    if (p.checked) continue;
    TFCKPT_RETURN_IF_ERROR(c.VerifyCrc(t, s, buffer));
    p.checked = true;
  }
  return absl::OkStatus();
}

absl::Status CopyRegion(const Checkpoint& c, const TensorEntry& t, const Region& region, PieceSink& sink,
                        std::string* buffer, std::atomic<uint64_t>* counter, bool verify_sources,
                        CarriedCrcs* carried, const std::function<void(const StoredSlice&, uint32_t)>& noted) {
  const DTypeInfo* info = LookupDType(t.dtype);
  if (info == nullptr || info->element_size == 0) {
    return absl::InternalError(StrCat("bug: CopyRegion on variable-size tensor \"", t.name, "\""));
  }
  // (Every piece present and the region covered before a chunk is sized: CheckStored.)
  TFCKPT_RETURN_IF_ERROR(c.CheckStored(t, &region));
  const std::vector<const StoredSlice*> sources = SourcesOf(t, region);
  auto progress = [counter](uint64_t n) {
    if (counter) *counter += n;
  };
  std::string& buf = *buffer;
    const int64_t esize = info->element_size;
    const CheckpointInfo& ci = c.info();
    const bool has_crc = ci.format == Format::kV2 && !ci.big_endian;
    if (MovesInKernel(c, t, sources, region)) {
      // Large contiguous runs: each moves in-kernel, in the piece's order. A run that is a
      // whole stored piece has that piece's CRC checked over a window of the mapping as
      // it goes; other pieces are checked beforehand when asked to.
      const std::vector<copy_internal::KernelRun> runs = copy_internal::KernelRuns(region, sources);
      std::set<const StoredSlice*> whole;
      for (const copy_internal::KernelRun& r : runs) {
        if (has_crc && r.WholePiece()) whole.insert(r.s);
      }
      if (verify_sources && has_crc && carried == nullptr) {
        for (const StoredSlice* s : sources) {
          if (!whole.count(s)) TFCKPT_RETURN_IF_ERROR(c.VerifyCrc(t, *s, &buf));
        }
      }
      for (const copy_internal::KernelRun& r : runs) {
        TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, c.DataFile(r.s->data.shard));
        const uint64_t begin = static_cast<uint64_t>(r.src * esize);
        const uint64_t len = static_cast<uint64_t>(r.n * esize);
        const bool check_run = whole.count(r.s) > 0;
        const bool note_run = noted && !has_crc && r.WholePiece();
        uint32_t crc = 0;
        // Sequential 1 MiB windows read into a buffer that stays in cache for the CRCs
        // (the writer's, and the piece's), the bytes themselves moved in-kernel. (Windows
        // of the mapping instead cost a page fault per 16 pages and a TLB-flushing
        // madvise per window to keep memory flat: measured slower.)
        TensorBytes unused;  // (ReadRange reads V2 little-endian pieces into `buf`)
        file->WillReadSequentially(r.s->data.offset + begin, len);  // (an object store streams it ahead)
        for (uint64_t done = 0; done < len;) {
          const uint64_t n = std::min<uint64_t>(len - done, kCopyChunk);
          TFCKPT_ASSIGN_OR_RETURN(std::string_view window, c.ReadRange(t, *r.s, begin + done, begin + done + n, &buf, &unused));
          if (check_run || note_run) crc = crc32c::Extend(crc, window.data(), window.size());
          if (has_crc) TFCKPT_RETURN_IF_ERROR(Carry(c, t, *r.s, begin + done, window, carried));
          TFCKPT_RETURN_IF_ERROR(sink.AppendFrom(*file, r.s->data.offset + begin + done, window));
          done += n;
          progress(n);
        }
        if (check_run) TFCKPT_RETURN_IF_ERROR(CheckCopiedCrc(c, t, *r.s, crc));
        if (note_run) noted(*r.s, crc);
      }
      return absl::OkStatus();
    }
    if (verify_sources && has_crc && carried == nullptr && !(sources.size() == 1 && sources[0]->region == region)) {
      for (const StoredSlice* s : sources) TFCKPT_RETURN_IF_ERROR(c.VerifyCrc(t, *s, &buf));
    }
    // Otherwise gather chunk by chunk in the piece's order. Chunks are sized so that the
    // span each source must provide stays within about 1 MiB (read with pread); chunks
    // accumulate in an 8 MiB buffer written in one go.
    int64_t widest = 1;  // how much more of a source a chunk's rows span than of the piece
    for (const StoredSlice* s : sources) {
      if (region.rank() == 0) break;
      const int64_t src_row = s->region.num_elements() / std::max<int64_t>(1, s->region.shape[0]);
      const int64_t dst_row = region.num_elements() / std::max<int64_t>(1, region.shape[0]);
      if (dst_row > 0) widest = std::max(widest, (src_row + dst_row - 1) / dst_row);
    }
    std::map<const StoredSlice*, TensorBytes> owners;
    // A stored piece the chunks read front to back (the region is that piece, or it is
    // unpartitioned or cut on axis 0) has its CRC checked on those bytes: no second read,
    // and no damaged byte copied silently.
    std::map<const StoredSlice*, crc32c::Cursor> cursors;
    std::string stage;
    buf.clear();
    TFCKPT_RETURN_IF_ERROR(ForEachChunk(region, esize, std::max<int64_t>(esize, kSpanBytes / widest),
                                        [&](const Region& chunk) -> absl::Status {
      const size_t at = buf.size();
      buf.resize(at + static_cast<size_t>(chunk.num_elements() * esize));
      char* dst = buf.data() + at;
      for (const StoredSlice* s : sources) {
        auto inter = Intersect(chunk, s->region);
        if (!inter) continue;
        const RunPlan rp = PlanRuns(*inter, {&chunk, &s->region});
        const auto span = RunSpan(rp, *inter, 1);  // (not a structured binding: clang 14 cannot capture one)
        const int64_t lo = span.first, hi = span.second;
        const uint64_t begin = static_cast<uint64_t>(lo * esize), end = static_cast<uint64_t>(hi * esize);
        TFCKPT_ASSIGN_OR_RETURN(std::string_view src, c.ReadRange(t, *s, begin, end, &stage, &owners[s]));
        cursors[s].Feed(begin, src);
        if (has_crc) TFCKPT_RETURN_IF_ERROR(Carry(c, t, *s, begin, src, carried));
        ForEachRun(*inter, {&chunk, &s->region}, [&](const int64_t* off, int64_t n) {
          std::memcpy(dst + off[0] * esize, src.data() + (off[1] - lo) * esize, static_cast<size_t>(n * esize));
        });
      }
      progress(chunk.num_elements() * esize);
      if (buf.size() < static_cast<size_t>(kChunkBytes)) return absl::OkStatus();
      absl::Status st = sink.Append(buf);
      buf.clear();
      return st;
    }));
    if (!buf.empty()) TFCKPT_RETURN_IF_ERROR(sink.Append(buf));
    if (has_crc) {
      for (const StoredSlice* s : sources) {  // (an empty piece is covered with nothing read)
        if (cursors[s].Covered(s->data.size)) TFCKPT_RETURN_IF_ERROR(CheckCopiedCrc(c, t, *s, cursors[s].crc));
      }
    }
    return absl::OkStatus();
}

void PieceCopier::Progress(uint64_t n) {
  if (progress_) *progress_ += n;
}

absl::Status PieceCopier::WriteCopiedAt(const TensorEntry& t, const PlannedPiece& piece, std::string_view out_name,
                                       uint64_t at, uint64_t size, const RegionCopies& rc, bool crc_read_back) {
  if (rc.copies.empty() || !(rc.crc || crc_read_back) || !w_.CopiesInStore(piece.file, at, size)) {
    return Write(t, piece, out_name, at);
  }
  const std::string_view name = out_name.empty() ? std::string_view(t.name) : out_name;
  const std::optional<Region> region = piece.region.Covers(t.shape) ? std::nullopt : std::optional<Region>(piece.region);
  TFCKPT_RETURN_IF_ERROR(w_.AddCopiedAt(name, t.dtype, t.shape, region, piece.file, at, rc.copies, rc.crc,
                                        piece.extents ? &*piece.extents : nullptr));
  Progress(size);
  return absl::OkStatus();
}

absl::Status PieceCopier::Write(const TensorEntry& t, const PlannedPiece& piece, std::string_view out_name,
                               std::optional<uint64_t> at) {
  const std::string_view name = out_name.empty() ? std::string_view(t.name) : out_name;
  const DTypeInfo* info = LookupDType(t.dtype);
  const bool whole = piece.region.Covers(t.shape);
  const std::optional<Region> region = whole ? std::nullopt : std::optional<Region>(piece.region);
  const SliceExtents* extents = piece.extents ? &*piece.extents : nullptr;
  if (info->element_size == 0) {
    TensorBytes keep;
    std::string encoded;
    TFCKPT_ASSIGN_OR_RETURN(std::string_view payload, VariablePayload(c_, t, piece.region, &keep, &encoded));
    Progress(payload.size());
    if (at) return w_.AddAt(name, t.dtype, t.shape, region, payload, piece.file, *at, extents);
    return whole ? w_.Add(name, t.dtype, t.shape, payload, piece.file)
                 : w_.AddSlice(name, t.dtype, t.shape, piece.region, payload, piece.file, extents);
  }
  const auto cast = casts_.find(t.dtype);
  const int32_t out_dtype = cast == casts_.end() ? t.dtype : cast->second;
  auto begun = at ? w_.BeginEntryAt(name, out_dtype, t.shape, region, piece.file, *at, extents)
                  : w_.BeginEntry(name, out_dtype, t.shape, region, piece.file, extents);
  if (!begun.ok()) return begun.status();
  BundleWriter::EntryStream& stream = *begun;
  EntrySink entry(stream);
  if (out_dtype == t.dtype) {
    // (A piece without a stored CRC that moves whole: its CRC as read proves the copy to
    // the verification, which then need not read it again.)
    auto note = [this](const StoredSlice& s, uint32_t crc) {
      w_.NoteSourceCrc(c_.info().data_files[static_cast<size_t>(s.data.shard)], s.data.offset, s.data.size, crc);
    };
    TFCKPT_RETURN_IF_ERROR(CopyRegion(c_, t, piece.region, entry, &buf_, progress_, verify_sources_, nullptr,
                                      verify_sources_ ? std::function<void(const StoredSlice&, uint32_t)>(note) : nullptr));
  } else {
    CastSink casting(t.dtype, out_dtype, entry);
    TFCKPT_RETURN_IF_ERROR(CopyRegion(c_, t, piece.region, casting, &buf_, progress_, verify_sources_));
  }
  return stream.Close();
}

absl::StatusOr<std::string_view> VariablePayload(const Checkpoint& c, const TensorEntry& t, const Region& region,
                                                 TensorBytes* keep, std::string* encoded) {
  const std::vector<const StoredSlice*> sources = SourcesOf(t, region);
  // Stored exactly as it is: the payload as read (CRC checked).
  if (sources.size() == 1 && sources[0]->region == region) {
    TFCKPT_ASSIGN_OR_RETURN(*keep, c.Read(t, *sources[0], /*verify=*/true));
    return keep->data;
  }
  if (t.dtype != static_cast<int32_t>(DType::kString)) {
    return absl::InternalError(StrCat("bug: plan reslices variant tensor \"", t.name, "\""));
  }
  std::vector<TensorBytes> parts;
  TFCKPT_ASSIGN_OR_RETURN(std::vector<std::string_view> elements, ReadStrings(c, t, region, &parts));
  encoded->clear();
  EncodeStrings(elements, encoded);
  return std::string_view(*encoded);
}

absl::StatusOr<std::vector<std::string_view>> ReadStrings(const Checkpoint& c, const TensorEntry& t,
                                                          const Region& region, std::vector<TensorBytes>* keep) {
  if (static_cast<DType>(t.dtype) != DType::kString) {
    return absl::InvalidArgumentError(StrCat("\"", PrintableKey(t.name), "\" is not a string tensor"));
  }
  // Sized only once the pieces are known to be present (each element of a checked string
  // tensor takes at least one byte of them: its count cannot outgrow the data files).
  TFCKPT_RETURN_IF_ERROR(c.CheckStored(t, &region));
  const std::vector<const StoredSlice*> sources = SourcesOf(t, region);
  std::vector<std::string_view> elements(static_cast<size_t>(region.num_elements()));
  for (const StoredSlice* s : sources) {
    TFCKPT_ASSIGN_OR_RETURN(TensorBytes b, c.Read(t, *s, /*verify=*/true));
    TFCKPT_ASSIGN_OR_RETURN(DecodedElements d, DecodeStrings(b.data, s->region.num_elements()));
    keep->push_back(std::move(b));
    auto inter = Intersect(region, s->region);
    if (!inter) continue;
    ForEachRun(*inter, {&region, &s->region}, [&](const int64_t* off, int64_t n) {
      for (int64_t i = 0; i < n; ++i) elements[off[0] + i] = d.elements[off[1] + i];
    });
  }
  return elements;
}

absl::StatusOr<uint64_t> PieceSize(const Checkpoint& c, const TensorEntry& t, const Region& region) {
  const DTypeInfo* info = LookupDType(t.dtype);
  if (info == nullptr) return absl::InvalidArgumentError(StrCat("\"", t.name, "\": unsupported dtype"));
  if (info->element_size > 0) return static_cast<uint64_t>(region.num_elements() * info->element_size);
  const std::vector<const StoredSlice*> sources = SourcesOf(t, region);
  if (c.info().format == Format::kV2 && !c.info().big_endian && t.defect.empty() && sources.size() == 1 &&
      sources[0]->region == region) {
    return sources[0]->data.size;
  }
  TensorBytes keep;
  std::string encoded;
  TFCKPT_ASSIGN_OR_RETURN(std::string_view payload, VariablePayload(c, t, region, &keep, &encoded));
  return static_cast<uint64_t>(payload.size());
}

std::string StoredSpec(const TensorEntry& t, const PlannedPiece& p) {
  if (p.region.Covers(t.shape)) return "";
  return ExtentsString(p.extents ? *p.extents : ExtentsOf(p.region, t.shape));
}

std::string StoredSpec(const TensorEntry& t, const StoredSlice& s) {
  return t.partitioned ? ExtentsString(s.extents) : "";
}

const StoredSlice* StoredSliceOf(const TensorEntry& t, const Region& region) {
  for (const StoredSlice& s : t.slices) {
    if (s.region == region) return &s;
  }
  return nullptr;
}

}  // namespace tfckpt
