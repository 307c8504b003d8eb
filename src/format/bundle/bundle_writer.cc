#include "format/bundle/bundle_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <random>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tensor_bundle.pb.h"
#include "base/crc32c.h"
#include "base/parallel.h"
#include "model/tensor_encoding.h"
#include "format/bundle/bundle_proto.h"
#include "format/table/table.h"
#include "run/run.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "tfckpt/ordered_code.h"
#include "base/path.h"
#include "tfckpt/status.h"

namespace tfckpt {

std::string DataFileName(std::string_view prefix, int32_t shard, int32_t num_shards) {
  return absl::StrFormat("%s.data-%05d-of-%05d", prefix, shard, num_shards);
}

std::vector<std::string> BundleFiles(const std::string& prefix, int32_t num_files) {
  std::vector<std::string> files{prefix + ".index"};
  for (int32_t i = 0; i < num_files; ++i) files.push_back(DataFileName(prefix, i, num_files));
  return files;
}

std::vector<std::string> BundleFilesAt(const Location& at, int32_t num_shards) {
  const std::string& prefix = at.path();
  std::vector<std::string> files = BundleFiles(prefix, num_shards);
  const std::string stem = Basename(prefix) + ".data-";
  const std::string dir = Dirname(prefix);
  auto listing = at.store().List(dir);
  for (const DirEntry& e : listing.ok() ? *listing : std::vector<DirEntry>{}) {
    if (e.name.rfind(stem, 0) == 0) files.push_back(dir.empty() ? e.name : JoinPath(dir, e.name));
  }
  return files;
}

struct BundleWriter::Pending {
  pb::BundleEntryProto entry;
  bool done = false;
};

namespace {

// The "output.mismatch" error for the entry of table key `key` at byte `at` of data file
// `path`: the tensor's name, and its slice's extents before `what` for a slice key.
absl::Status OutputMismatch(const std::string& path, const std::string& key, uint64_t at, std::string_view what) {
  std::string name = key, slice;
  if (IsSliceKey(key)) {
    TFCKPT_ASSIGN_OR_RETURN(DecodedSliceKey d, DecodeSliceKey(key));
    name = d.name;
    slice = StrCat("slice ", ExtentsString(d.extents), ": ");
  }
  return DataLossAt("output.mismatch", path, name, static_cast<int64_t>(at), StrCat(slice, what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BundleWriter>> BundleWriter::Create(const Location& at,
                                                                   BundleWriterOptions options) {
  const std::string& prefix = at.path();
  if (options.num_shards < 1) return absl::InvalidArgumentError("a bundle needs at least one data file");
  PublishOptions po;
  po.overwrite = options.overwrite;
  po.before_commit = options.before_commit;
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Publication> publication, Publication::Bundle(at, std::move(po)));
  std::unique_ptr<BundleWriter> w(new BundleWriter());
  w->prefix_ = prefix;
  w->options_ = options;
  w->publication_ = std::move(publication);
  w->in_stream_.assign(options.num_shards, 0);
  if (!options.data_files.empty() && options.data_files.size() != static_cast<size_t>(options.num_shards)) {
    return absl::InvalidArgumentError("bug: data file names given for some data files only");
  }
  for (int32_t i = 0; i < options.num_shards; ++i) {
    const std::string name = options.data_files.empty() ? DataFileName(prefix, i, options.num_shards)
                                                        : options.data_files[static_cast<size_t>(i)];
    TFCKPT_ASSIGN_OR_RETURN(auto f, at.store().Create(name));
    w->publication_->Add(*f);
    w->data_.push_back(std::move(f));
  }
  return w;
}

BundleWriter::~BundleWriter() = default;  // uncommitted WritableFiles leave no trace

absl::StatusOr<std::string> BundleWriter::Register(std::string_view name, int32_t dtype, const Shape& full,
                                                   const std::optional<Region>& region, int32_t shard, uint64_t size,
                                                   bool positional, const SliceExtents* extents) {
  if (finished_) return absl::FailedPreconditionError("bundle already finished");
  if (name.empty()) return absl::InvalidArgumentError("tensor name is empty");
  if (IsSliceKey(name)) return absl::InvalidArgumentError("tensor names may not start with a NUL byte");
  const DTypeInfo* info = LookupDType(dtype);
  if (info == nullptr) return absl::InvalidArgumentError(StrCat("cannot store dtype ", DTypeName(dtype)));
  if (shard < 0 || shard >= options_.num_shards) {
    return absl::InvalidArgumentError(StrCat("data file ", shard, " out of range"));
  }
  if (!positional && in_stream_[shard]) {
    return absl::FailedPreconditionError("an entry stream is still open on this data file");
  }
  auto n_full = NumElements(full);
  if (!n_full.ok()) return n_full.status();
  const bool sliced = region.has_value() && !region->Covers(full);
  if (region.has_value() && !region->InsideOf(full)) {
    return absl::InvalidArgumentError(StrCat(name, ": slice lies outside ", ShapeString(full)));
  }
  const Shape& stored_shape = sliced ? region->shape : full;
  const int64_t n = sliced ? region->num_elements() : *n_full;
  if (info->element_size > 0 && size != static_cast<uint64_t>(n) * info->element_size) {
    return absl::InvalidArgumentError(StrCat(name, ": payload of ", size, " bytes, ", ShapeString(stored_shape),
                                                   " ", info->name, " needs ", n * info->element_size));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::string key(name);
  SliceExtents ext;
  if (sliced) {
    if (extents != nullptr) {
      auto described = RegionOf(*extents, full);
      if (!described.ok() || *described != *region) {
        return absl::InvalidArgumentError(StrCat(name, ": slice extents do not describe the slice"));
      }
    }
    ext = extents != nullptr ? *extents : ExtentsOf(*region, full);
    key = EncodeSliceKey(name, ext);
    auto meta = entries_.find(std::string(name));
    if (meta != entries_.end()) {
      if (!partitioned_.count(std::string(name))) {
        return absl::AlreadyExistsError(StrCat(name, ": already added as a whole tensor"));
      }
      auto shape = ShapeFromProto(meta->second->entry.shape());
      if (meta->second->entry.dtype() != dtype || !shape.ok() || *shape != full) {
        return absl::InvalidArgumentError(StrCat(name, ": slices disagree on dtype or full shape"));
      }
    }
  }
  if (entries_.count(key)) {
    return absl::AlreadyExistsError(StrCat(name, sliced ? ": slice added twice" : ": tensor added twice"));
  }
  // All checks passed: record the metadata entry and the new entry.
  if (sliced) {
    auto [meta, inserted] = entries_.try_emplace(std::string(name));
    if (inserted) {
      meta->second = std::make_unique<Pending>();
      meta->second->entry.set_dtype(static_cast<pb::DataType>(dtype));
      ShapeToProto(full, meta->second->entry.mutable_shape());
      meta->second->done = true;
      partitioned_[std::string(name)] = std::string(name);
    }
    ExtentsToProto(ext, meta->second->entry.add_slices());
  }
  auto it = entries_.try_emplace(key).first;
  it->second = std::make_unique<Pending>();
  it->second->entry = MakeEntry(dtype, stored_shape, shard, 0, 0, 0);
  return key;
}

absl::Status BundleWriter::FinishEntry(const std::string& key, uint64_t offset, uint64_t size, uint32_t crc,
                                       bool read_back) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = *entries_.at(key);
    // (An empty entry is not named: several can share a place, and it has nothing to read.)
    if (read_back && size > 0) read_back_.emplace(p.entry.shard_id(), offset, size);
    p.entry.set_offset(static_cast<int64_t>(offset));
    p.entry.set_size(static_cast<int64_t>(size));
    p.entry.set_crc32c(crc32c::Mask(crc));
    p.done = true;
  }
  return Reached("piece-written");
}

absl::Status BundleWriter::Add(std::string_view name, int32_t dtype, const Shape& shape, std::string_view payload,
                               int32_t shard) {
  return AddPayload(name, dtype, shape, std::nullopt, payload, shard, std::nullopt, nullptr);
}

absl::Status BundleWriter::AddSlice(std::string_view name, int32_t dtype, const Shape& full, const Region& region,
                                    std::string_view payload, int32_t shard, const SliceExtents* extents) {
  return AddPayload(name, dtype, full, region, payload, shard, std::nullopt, extents);
}

absl::Status BundleWriter::AddAt(std::string_view name, int32_t dtype, const Shape& full,
                                 const std::optional<Region>& region, std::string_view payload, int32_t shard,
                                 uint64_t offset, const SliceExtents* extents) {
  return AddPayload(name, dtype, full, region, payload, shard, offset, extents);
}

absl::Status BundleWriter::AddPayload(std::string_view name, int32_t dtype, const Shape& full,
                                      const std::optional<Region>& region, std::string_view payload, int32_t shard,
                                      std::optional<uint64_t> at, const SliceExtents* extents) {
  if (region.has_value() && region->rank() != full.size()) {
    return absl::InvalidArgumentError(StrCat(name, ": slice rank differs from the tensor's"));
  }
  const bool sliced = region.has_value() && !region->Covers(full);
  // Strings and variants are decoded for their CRC: a bad payload is refused before
  // anything is registered, so it leaves no trace. (Register checks the rest.)
  const DTypeInfo* info = LookupDType(dtype);
  std::optional<uint32_t> crc;
  if (info != nullptr && info->element_size == 0) {
    auto n = sliced ? absl::StatusOr<int64_t>(region->num_elements()) : NumElements(full);
    if (!n.ok()) return n.status();
    auto c = PayloadCrc(dtype, payload, *n);
    if (!c.ok()) return Annotate(c.status(), name);
    crc = *c;
  }
  TFCKPT_ASSIGN_OR_RETURN(std::string key, Register(name, dtype, full, sliced ? region : std::nullopt, shard,
                                                    payload.size(), at.has_value(), extents));
  if (!crc) crc = crc32c::Value(payload);  // fixed-size: the CRC of the bytes
  const uint64_t offset = at ? *at : data_[shard]->size();
  TFCKPT_RETURN_IF_ERROR(at ? data_[shard]->WriteAt(offset, payload) : data_[shard]->Append(payload));
  bool read_back = false;
  if (at) {
    TFCKPT_ASSIGN_OR_RETURN(read_back, AfterPositionalWrite(shard, offset, payload, key, WantsReadBack(name)));
  }
  return FinishEntry(key, offset, payload.size(), *crc, read_back);
}

absl::StatusOr<bool> BundleWriter::AfterPositionalWrite(int32_t shard, uint64_t at, std::string_view bytes,
                                                        const std::string& key, bool check) {
  WritableFile& f = *data_[shard];
  if (shard == 0) TFCKPT_RETURN_IF_ERROR(publication_->PlantFault(f, at, bytes.size()));  // (tests)
  if (!check) return false;
  // An upload cannot be read before it is complete; the bytes just written are what goes
  // up (their CRC was taken from them), and the store checks each part's SHA-256 against
  // what we sent (signed payload hash): the entry's CRC holds for the stored bytes.
  if (!f.ReadableBeforeCommit()) return true;
  thread_local std::string back;
  back.resize(bytes.size());
  TFCKPT_RETURN_IF_ERROR(f.ReadBack(at, bytes.size(), back.data()));
  if (std::memcmp(back.data(), bytes.data(), bytes.size()) != 0) {
    size_t i = 0;
    while (back[i] == bytes[i]) ++i;
    return OutputMismatch(f.path(), key, at + i, "read back differs from what was written; nothing was written");
  }
  return true;
}

absl::StatusOr<BundleWriter::EntryStream> BundleWriter::BeginEntry(std::string_view name, int32_t dtype,
                                                                   const Shape& full,
                                                                   const std::optional<Region>& region, int32_t shard,
                                                                   const SliceExtents* extents) {
  return StartEntry(name, dtype, full, region, shard, std::nullopt, extents);
}

absl::StatusOr<BundleWriter::EntryStream> BundleWriter::StartEntry(std::string_view name, int32_t dtype,
                                                                   const Shape& full,
                                                                   const std::optional<Region>& region, int32_t shard,
                                                                   std::optional<uint64_t> at,
                                                                   const SliceExtents* extents) {
  const DTypeInfo* info = LookupDType(dtype);
  if (info == nullptr || info->element_size == 0) {
    return absl::InvalidArgumentError(StrCat(name, ": streaming needs a fixed-size dtype"));
  }
  auto n = region.has_value() ? absl::StatusOr<int64_t>(region->num_elements()) : NumElements(full);
  if (!n.ok()) return n.status();
  const uint64_t size = static_cast<uint64_t>(*n) * info->element_size;
  TFCKPT_ASSIGN_OR_RETURN(std::string key, Register(name, dtype, full, region, shard, size, at.has_value(), extents));
  EntryStream s;
  s.writer_ = this;
  s.key_ = std::move(key);
  s.shard_ = shard;
  s.positional_ = at.has_value();
  s.check_ = s.positional_ && WantsReadBack(name);
  s.expected_ = size;
  s.offset_ = at ? *at : data_[shard]->size();
  if (!at) in_stream_[shard] = 1;
  return s;
}

absl::StatusOr<BundleWriter::EntryStream> BundleWriter::BeginEntryAt(std::string_view name, int32_t dtype,
                                                                     const Shape& full,
                                                                     const std::optional<Region>& region, int32_t shard,
                                                                     uint64_t offset, const SliceExtents* extents) {
  return StartEntry(name, dtype, full, region, shard, offset, extents);
}

absl::Status BundleWriter::EntryStream::Append(std::string_view bytes) {
  if (writer_ == nullptr) return absl::FailedPreconditionError("entry stream is closed");
  if (bytes.size() > expected_ - written_) {
    return absl::InvalidArgumentError(StrCat("entry stream: more than the announced ", expected_, " bytes"));
  }
  crc_ = crc32c::Extend(crc_, bytes.data(), bytes.size());
  const uint64_t at = offset_ + written_;
  written_ += bytes.size();
  if (!positional_) return writer_->data_[shard_]->Append(bytes);
  TFCKPT_RETURN_IF_ERROR(writer_->data_[shard_]->WriteAt(at, bytes));
  return Checked(at, bytes);
}

absl::Status BundleWriter::EntryStream::Checked(uint64_t at, std::string_view bytes) {
  TFCKPT_ASSIGN_OR_RETURN(const bool checked, writer_->AfterPositionalWrite(shard_, at, bytes, key_, check_));
  if (checked) read_back_ += bytes.size();
  return absl::OkStatus();
}

absl::Status BundleWriter::EntryStream::AppendFrom(const ReadableFile& src, uint64_t src_offset, std::string_view bytes) {
  if (writer_ == nullptr) return absl::FailedPreconditionError("entry stream is closed");
  if (bytes.size() > expected_ - written_) {
    return absl::InvalidArgumentError(StrCat("entry stream: more than the announced ", expected_, " bytes"));
  }
  crc_ = crc32c::Extend(crc_, bytes.data(), bytes.size());
  const uint64_t at = offset_ + written_;
  written_ += bytes.size();
  WritableFile& f = *writer_->data_[shard_];
  // Moved in-kernel where both ends allow; else the bytes at hand, not read again (or,
  // where the file planned it, copied inside the store: PlanCopies).
  const bool move = f.MovesInKernel() && src.mapping().has_value();
  if (!positional_) return move ? f.AppendFrom(src, src_offset, bytes.size()) : f.Append(bytes);
  if (move) {
    TFCKPT_RETURN_IF_ERROR(f.CopyAt(at, src, src_offset, bytes.size()));
    return Checked(at, bytes);
  }
  // Bytes the store copies were not sent from here, so no signed payload hash vouches for
  // what arrived (AfterPositionalWrite): the entry does not count as read back, and a
  // verification would read the copied range from the committed object. (The copy engine
  // reads bytes it copies inside the store only for a run that does not verify and cuts a
  // stored piece, to have the new piece's CRC: otherwise AddCopiedAt.)
  TFCKPT_ASSIGN_OR_RETURN(const bool in_store, f.CopyInStoreAt(at, src, src_offset, bytes));
  return in_store ? absl::OkStatus() : Checked(at, bytes);
}

absl::StatusOr<bool> BundleWriter::PlanCopies(int32_t shard, uint64_t size, const std::vector<PlannedCopy>& copies,
                                              ServerSideCopy mode) {
  if (shard < 0 || static_cast<size_t>(shard) >= data_.size()) {
    return absl::InvalidArgumentError(StrCat("bug: no data file ", shard));
  }
  return data_[static_cast<size_t>(shard)]->PlanCopies(size, copies, mode);
}

absl::Status BundleWriter::AddCopiedAt(std::string_view name, int32_t dtype, const Shape& full,
                                       const std::optional<Region>& region, int32_t shard, uint64_t offset,
                                       const std::vector<PlannedCopy>& copies, std::optional<uint32_t> crc,
                                       const SliceExtents* extents) {
  const DTypeInfo* info = LookupDType(dtype);
  if (info == nullptr || info->element_size == 0) {
    return absl::InvalidArgumentError(StrCat(name, ": a copied entry needs a fixed-size dtype"));
  }
  const bool read_back = WantsReadBack(name);
  if (!crc && !read_back) {
    return absl::InternalError(StrCat("bug: ", name, ": a copied entry without a CRC and not read back"));
  }
  uint64_t size = 0;
  for (const PlannedCopy& c : copies) {
    if (c.offset != offset + size || c.src == nullptr) {
      return absl::InternalError(StrCat("bug: ", name, ": the copies do not tile the entry"));
    }
    size += c.size;
  }
  const bool sliced = region.has_value() && !region->Covers(full);
  TFCKPT_ASSIGN_OR_RETURN(std::string key,
                          Register(name, dtype, full, sliced ? region : std::nullopt, shard, size, true, extents));
  WritableFile& f = *data_[static_cast<size_t>(shard)];
  Deferred d{key, shard, offset, size, crc, {}};
  std::string buffer;
  for (const PlannedCopy& c : copies) {
    // The copy's stretches the store copies, and those between them sent from here.
    std::vector<std::pair<uint64_t, uint64_t>> copied = f.CopiedInStore(c.offset, c.size);
    copied.emplace_back(c.offset + c.size, c.offset + c.size);  // (the end)
    uint64_t at = c.offset;
    for (const auto& [begin, end] : copied) {
      for (uint64_t sent = at; sent < begin;) {  // sent from here, its CRC taken
        const uint64_t n = std::min<uint64_t>(begin - sent, 8ull << 20);
        buffer.resize(static_cast<size_t>(n));
        TFCKPT_RETURN_IF_ERROR(c.src->ReadAt(c.src_offset + (sent - c.offset), n, buffer.data()));
        TFCKPT_RETURN_IF_ERROR(f.WriteAt(sent, buffer));
        d.stretches.push_back({sent, n, crc32c::Value(buffer.data(), buffer.size())});
        sent += n;
      }
      if (end > begin) {
        TFCKPT_RETURN_IF_ERROR(f.CopyAt(begin, *c.src, c.src_offset + (begin - c.offset), end - begin));
        d.stretches.push_back({begin, end - begin, std::nullopt});
      }
      at = end;
    }
  }
  if (!read_back) return FinishEntry(key, offset, size, *crc, false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = *entries_.at(key);
    p.entry.set_offset(static_cast<int64_t>(offset));
    p.entry.set_size(static_cast<int64_t>(size));
    p.done = true;  // (its CRC comes from TakeDeferredCrcs)
    deferred_.push_back(std::move(d));
  }
  return Reached("piece-written");
}

absl::Status BundleWriter::TakeDeferredCrcs() {
  if (deferred_.empty()) return absl::OkStatus();
  // Each data file opened once (an object store's completed object); each copied stretch
  // read by one thread as an announced sequential scan (the store streams it ahead over
  // its connections, each byte fetched once), the run's threads on different stretches.
  std::vector<std::unique_ptr<ReadableFile>> files(data_.size());
  struct Read {
    size_t entry, stretch;
  };
  std::vector<Read> reads;
  uint64_t total = 0;
  for (size_t e = 0; e < deferred_.size(); ++e) {
    const Deferred& d = deferred_[e];
    WritableFile& f = *data_[static_cast<size_t>(d.shard)];
    for (size_t k = 0; k < d.stretches.size(); ++k) {
      if (d.stretches[k].crc) continue;
      if (!files[static_cast<size_t>(d.shard)] && !f.ReadableBeforeCommit()) {
        TFCKPT_ASSIGN_OR_RETURN(files[static_cast<size_t>(d.shard)], f.OpenWritten());
      }
      reads.push_back({e, k});
      total += d.stretches[k].size;
    }
  }
  std::atomic<uint64_t>* progress = StartPhase("verifying", total);
  TFCKPT_RETURN_IF_ERROR(ParallelForStatus(reads.size(), Jobs(RunJobs()), [&](size_t i, const std::atomic<bool>& stop) {
    constexpr uint64_t kChunk = 8ull << 20;
    Deferred& d = deferred_[reads[i].entry];
    Deferred::Stretch& st = d.stretches[reads[i].stretch];
    const ReadableFile* file = files[static_cast<size_t>(d.shard)].get();
    if (file != nullptr) file->WillReadSequentially(st.offset, st.size);
    thread_local std::string buffer;
    uint32_t crc = 0;
    for (uint64_t at = 0; at < st.size && !stop; at += kChunk) {
      const uint64_t n = std::min(kChunk, st.size - at);
      buffer.resize(static_cast<size_t>(n));
      TFCKPT_RETURN_IF_ERROR(file != nullptr
                                 ? file->ReadAt(st.offset + at, n, buffer.data())
                                 : data_[static_cast<size_t>(d.shard)]->ReadBack(st.offset + at, n, buffer.data()));
      crc = crc32c::Extend(crc, buffer.data(), buffer.size());
      if (progress != nullptr) *progress += n;
    }
    st.crc = crc;
    return absl::OkStatus();
  }));
  std::lock_guard<std::mutex> lock(mu_);
  for (const Deferred& d : deferred_) {
    uint32_t crc = 0;
    for (const Deferred::Stretch& st : d.stretches) crc = crc32c::Concat(crc, *st.crc, st.size);
    if (d.crc && *d.crc != crc) {
      return OutputMismatch(data_[static_cast<size_t>(d.shard)]->path(), d.key, d.offset,
                            StrCat("the bytes copied inside the store differ from the input's (CRC-32C ",
                                   absl::StrFormat("%08x", crc), ", the input's ", absl::StrFormat("%08x", *d.crc),
                                   "); nothing was written"));
    }
    if (d.size > 0) read_back_.emplace(d.shard, d.offset, d.size);
    entries_.at(d.key)->entry.set_crc32c(crc32c::Mask(crc));
  }
  deferred_.clear();
  return absl::OkStatus();
}

absl::Status BundleWriter::EntryStream::Close() {
  if (writer_ == nullptr) return absl::FailedPreconditionError("entry stream is closed");
  if (written_ != expected_) {
    return absl::InvalidArgumentError(StrCat("entry stream: ", written_, " of ", expected_, " bytes written"));
  }
  BundleWriter* w = writer_;
  writer_ = nullptr;
  if (!positional_) w->in_stream_[shard_] = 0;
  return w->FinishEntry(key_, offset_, written_, crc_, positional_ && read_back_ == written_);
}

absl::Status BundleWriter::CheckDisjoint() const {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> ranges(data_.size());
  for (const auto& [key, p] : entries_) {
    if (p->entry.slices_size() > 0 || !p->done) continue;  // a partitioned tensor's metadata entry
    ranges[static_cast<size_t>(p->entry.shard_id())].emplace_back(p->entry.offset(), p->entry.size());
  }
  for (size_t shard = 0; shard < ranges.size(); ++shard) {
    auto& r = ranges[shard];
    std::sort(r.begin(), r.end());
    for (size_t i = 0; i + 1 < r.size(); ++i) {
      if (r[i].first + r[i].second > r[i + 1].first) {
        return absl::InternalError(StrCat("bug: entries at offsets ", r[i].first, " and ", r[i + 1].first, " of ",
                                          data_[shard]->path(), " overlap"));
      }
    }
  }
  return absl::OkStatus();
}

void BundleWriter::NoteSourceCrc(const std::string& file, uint64_t offset, uint64_t size, uint32_t crc) {
  std::lock_guard<std::mutex> lock(mu_);
  source_crcs_[{file, offset, size}] = crc;
}

WrittenOutput BundleWriter::Written() {
  WrittenOutput out;  // (its `open` is the publication's)
  out.read_back = [this](int32_t shard, uint64_t offset, uint64_t size) {
    return read_back_.count({shard, offset, size}) > 0;  // (Finish: no entry is added any more)
  };
  out.source_crc = [this](const std::string& file, uint64_t offset, uint64_t size) -> std::optional<uint32_t> {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = source_crcs_.find({file, offset, size});
    if (it == source_crcs_.end()) return std::nullopt;
    return it->second;
  };
  return out;
}

absl::Status BundleWriter::Finish() {
  if (finished_) return absl::FailedPreconditionError("bundle already finished");
  for (char open : in_stream_) {
    if (open) return absl::FailedPreconditionError("an entry stream is still open");
  }
  finished_ = true;
  // Slices of a partitioned tensor are listed as TensorFlow's MergeV2 lists them (by data
  // file, then by slice key), whatever order threads added them in: output is
  // deterministic, and equal to a MergeV2 of one writer per data file (reshard --plan).
  for (const auto& [name, meta_key] : partitioned_) {
    auto& meta = entries_.at(meta_key)->entry;
    std::vector<std::tuple<int32_t, std::string, pb::TensorSliceProto>> order;
    for (const auto& sp : meta.slices()) {
      const std::string key = EncodeSliceKey(name, ExtentsFromProto(sp));
      order.emplace_back(entries_.at(key)->entry.shard_id(), key, sp);
    }
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return std::tie(std::get<0>(a), std::get<1>(a)) <
                                                        std::tie(std::get<0>(b), std::get<1>(b)); });
    meta.clear_slices();
    for (auto& o : order) *meta.add_slices() = std::move(std::get<2>(o));
    // Multi-file checkpoints come from MergeV2, which gives a metadata entry the data
    // file where the tensor's first slice is: do the same (0 for one data file).
    if (!order.empty()) meta.set_shard_id(std::get<0>(order.front()));
  }
  TFCKPT_RETURN_IF_ERROR(CheckDisjoint());
  Publication::Index index;
  index.prepare = [this] { return TakeDeferredCrcs(); };
  index.write = [this](WritableFile& file) { return WriteIndex(file); };
  index.written = Written();
  return publication_->CommitBundle(index);
}

absl::Status BundleWriter::WriteIndex(WritableFile& file) const {
  TableWriter table(&file);
  std::string value;
  MakeHeader(options_.num_shards).SerializeToString(&value);
  TFCKPT_RETURN_IF_ERROR(table.Add("", value));
  for (const auto& [key, p] : entries_) {
    value.clear();
    p->entry.SerializeToString(&value);
    TFCKPT_RETURN_IF_ERROR(table.Add(key, value));
  }
  return table.Finish();
}


}  // namespace tfckpt
