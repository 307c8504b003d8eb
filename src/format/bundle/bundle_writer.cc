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

std::vector<std::string> BundleFilesAt(const std::string& prefix, int32_t num_shards) {
  std::vector<std::string> files = BundleFiles(prefix, num_shards);
  const std::string stem = Basename(prefix) + ".data-";
  const std::string dir = Dirname(prefix);
  auto listing = Storage::For(prefix).List(dir);
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

// Files of an existing checkpoint at `prefix`: PREFIX.index and PREFIX.data-*.
std::vector<std::string> ExistingFiles(const std::string& prefix) {
  std::vector<std::string> out;
  if (FileExists(prefix + ".index")) out.push_back(prefix + ".index");
  const std::string stem = Basename(prefix) + ".data-";
  auto listing = Storage::For(prefix).List(Dirname(prefix));
  for (const DirEntry& e : listing.ok() ? *listing : std::vector<DirEntry>{}) {
    if (e.name.rfind(stem, 0) == 0 && e.name.find(".tmp-tfckpt-") == std::string::npos) {
      out.push_back(JoinPath(Dirname(prefix), e.name));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<bool> PlantOutputFault(WritableFile& f, uint64_t from, uint64_t n) {
  const int64_t at = FlipOutputByte();
  if (at < 0 || static_cast<uint64_t>(at) < from || static_cast<uint64_t>(at) - from >= n) return false;
  if (!f.ReadableBeforeCommit()) return false;
  TFCKPT_ASSIGN_OR_RETURN(auto in, f.OpenWritten());
  if (static_cast<uint64_t>(at) >= in->size()) return false;
  char byte;
  TFCKPT_RETURN_IF_ERROR(in->ReadAt(static_cast<uint64_t>(at), 1, &byte));
  byte = static_cast<char>(byte ^ 1);
  TFCKPT_RETURN_IF_ERROR(f.WriteAt(static_cast<uint64_t>(at), std::string_view(&byte, 1)));
  return true;
}

absl::StatusOr<std::unique_ptr<BundleWriter>> BundleWriter::Create(const std::string& prefix,
                                                                   BundleWriterOptions options) {
  if (options.num_shards < 1) return absl::InvalidArgumentError("a bundle needs at least one data file");
  Storage& store = Storage::For(prefix);
  TFCKPT_RETURN_IF_ERROR(store.CreateParentDirectories(prefix));
  // Leftovers of a writer that was killed: its temporaries; and when it died between
  // renaming its data files into place and renaming the index (its index temporary is
  // still there, the index is not), those data files too: no index refers to them.
  {
    const std::string stem = Basename(prefix) + ".";
    bool interrupted_commit = false;
    for (const std::string& t : store.RemoveStaleTemporaries(DirectoryOf(prefix), stem)) {
      if (Basename(t).rfind(stem + "index.tmp-tfckpt-", 0) == 0) interrupted_commit = true;
    }
    if (interrupted_commit && !FileExists(prefix + ".index")) {
      for (const std::string& f : ExistingFiles(prefix)) (void)store.Remove(f);
    }
  }
  if (!options.overwrite) {
    auto existing = ExistingFiles(prefix);
    if (!existing.empty()) {
      return absl::AlreadyExistsError(StrCat(existing[0], ": output exists (use --force to replace it)"));
    }
  }
  std::unique_ptr<BundleWriter> w(new BundleWriter());
  w->prefix_ = prefix;
  w->options_ = options;
  w->in_stream_.assign(options.num_shards, 0);
  if (!options.data_files.empty() && options.data_files.size() != static_cast<size_t>(options.num_shards)) {
    return absl::InvalidArgumentError("bug: data file names given for some data files only");
  }
  for (int32_t i = 0; i < options.num_shards; ++i) {
    const std::string name = options.data_files.empty() ? DataFileName(prefix, i, options.num_shards)
                                                        : options.data_files[static_cast<size_t>(i)];
    TFCKPT_ASSIGN_OR_RETURN(auto f, Storage::For(name).Create(name));
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
  if (shard == 0) {
    TFCKPT_ASSIGN_OR_RETURN(const bool planted, PlantOutputFault(f, at, bytes.size()));  // (tests)
    if (planted) fault_planted_ = true;
  }
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

WrittenOutput BundleWriter::Written(WritableFile& index) {
  std::map<std::string, WritableFile*> files{{index.path(), &index}};
  for (auto& f : data_) files.emplace(f->path(), f.get());
  WrittenOutput out;
  out.open = [files = std::move(files)](const std::string& path) -> absl::StatusOr<std::unique_ptr<ReadableFile>> {
    auto it = files.find(path);
    if (it == files.end()) return NotWritten(path);
    return it->second->OpenWritten();
  };
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
  std::unique_ptr<WritableFile> index;
  bool replace_in_place = false;  // (PublishBundle's decision, on an object store)
  const auto write_index = [&]() -> absl::Status {
    TFCKPT_ASSIGN_OR_RETURN(index, Storage::For(prefix_).Create(prefix_ + ".index",
                                                                replace_in_place ? kIndexReplace : kIndexWrite));
    TableWriter table(index.get());
    std::string value;
    MakeHeader(options_.num_shards).SerializeToString(&value);
    TFCKPT_RETURN_IF_ERROR(table.Add("", value));
    for (const auto& [key, p] : entries_) {
      value.clear();
      p->entry.SerializeToString(&value);
      TFCKPT_RETURN_IF_ERROR(table.Add(key, value));
    }
    return table.Finish();
  };
  // The tests' fault (RunOptions::flip_output_byte, tests/cli_verify_test.py): one bit of
  // the first data file flipped after it was written, as a failing disk or copy would.
  if (!data_.empty() && !fault_planted_) {
    TFCKPT_RETURN_IF_ERROR(PlantOutputFault(*data_[0], 0, UINT64_MAX).status());
  }
  const auto commit_data = [&](size_t i) { return data_[i]->Commit(); };
  const auto close_files = [&](bool with_index) {  // in parallel: the device sees their writes at once
    return ParallelForStatus(data_.size() + (with_index ? 1 : 0), Jobs(RunJobs()), [&](size_t i, const std::atomic<bool>&) {
      return i < data_.size() ? data_[i]->Close() : index->Close();
    });
  };
  const auto check = [&] { return options_.before_commit ? options_.before_commit(Written(*index)) : absl::OkStatus(); };
  if (!std::all_of(data_.begin(), data_.end(), [](const auto& f) { return f->ReadableBeforeCommit(); })) {
    // An object store: the data objects cannot be read before they are complete. They are
    // completed first; then the CRCs of entries copied inside the store are read back from
    // them, the index (kept in memory) is written, the output is checked, and the index
    // goes up last: no reader finds an index before its data is whole and checked.
    TFCKPT_RETURN_IF_ERROR(close_files(false));
    const auto index_then_check = [&]() -> absl::Status {
      TFCKPT_RETURN_IF_ERROR(TakeDeferredCrcs());
      TFCKPT_RETURN_IF_ERROR(write_index());
      TFCKPT_RETURN_IF_ERROR(index->Close());
      return check();
    };
    return PublishBundle(prefix_, options_.overwrite, DataNames(), commit_data, [&] { return index->Commit(); },
                         index_then_check, &replace_in_place, [&](size_t i) { data_[i]->Publish(); });
  }
  TFCKPT_RETURN_IF_ERROR(TakeDeferredCrcs());
  TFCKPT_RETURN_IF_ERROR(write_index());
  // Everything is written and nothing published: the check before the commit (reading
  // what the kernel is still writing back), then all of it made durable.
  TFCKPT_RETURN_IF_ERROR(check());
  TFCKPT_RETURN_IF_ERROR(close_files(true));  // (fsync)
  TFCKPT_RETURN_IF_ERROR(Reached("before-commit"));
  return PublishBundle(prefix_, options_.overwrite, DataNames(), commit_data, [&] { return index->Commit(); });
}

absl::Status NotWritten(const std::string& path) {
  return absl::NotFoundError(StrCat(path, ": not a file of the output being written"));
}

std::vector<std::string> BundleWriter::DataNames() const {
  std::vector<std::string> names;
  for (const auto& f : data_) names.push_back(f->path());
  return names;
}

namespace {

// `from` copied whole to `to` (the same store), inside the store where it can (an object
// store's UploadPartCopy: no byte passes through this process), and committed, not
// published (the run's undo removes it unless the caller publishes it).
absl::StatusOr<std::unique_ptr<WritableFile>> CopyWithin(Storage& store, const std::string& from,
                                                         const std::string& to) {
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> src, store.OpenForRead(from));
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> dst, store.Create(to, WriteOptions{}));
  if (const uint64_t n = src->size(); n > 0) {
    TFCKPT_RETURN_IF_ERROR(dst->PlanCopies(n, {PlannedCopy{0, src.get(), 0, n}}, ServerSideCopy::kAuto).status());
    TFCKPT_RETURN_IF_ERROR(dst->CopyAt(0, *src, 0, n));
  }
  TFCKPT_RETURN_IF_ERROR(dst->Close());
  TFCKPT_RETURN_IF_ERROR(dst->Commit());
  return dst;
}

// `bytes` written to `to` and committed (not published).
absl::StatusOr<std::unique_ptr<WritableFile>> WriteWhole(Storage& store, const std::string& to,
                                                         const std::string& bytes, const WriteOptions& options) {
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, store.Create(to, options));
  TFCKPT_RETURN_IF_ERROR(f->Append(bytes));
  TFCKPT_RETURN_IF_ERROR(f->Close());
  TFCKPT_RETURN_IF_ERROR(f->Commit());
  return f;
}

std::string BackupPrefix(const std::string& prefix) {
  std::random_device random;
  return StrCat(prefix, kOldCheckpointInfix, absl::StrFormat("%08x", random()));
}

// This run's backup (`own`: its prefix, or "", and its data files) and the backups of old
// checkpoints under `prefix` (BackupPrefix) that --force runs left, as a listing finds them
// (where the store may not be listed, this run's alone): their indexes first, then their
// data files (never an index whose data files are gone).
void RemoveBackups(Storage& store, const std::string& prefix, const std::string& own,
                   const std::vector<std::pair<std::string, std::string>>& own_data) {
  const std::string stem = Basename(prefix) + kOldCheckpointInfix;
  std::vector<std::string> indexes, rest;
  if (!own.empty()) indexes.push_back(own + ".index");
  for (const auto& [from, copy] : own_data) rest.push_back(copy);
  absl::StatusOr<std::vector<DirEntry>> listing = store.List(Dirname(prefix));
  for (const DirEntry& e : listing.ok() ? *listing : std::vector<DirEntry>{}) {
    if (e.name.rfind(stem, 0) != 0) continue;
    const std::string path = JoinPath(Dirname(prefix), e.name);
    std::vector<std::string>& to = absl::EndsWith(e.name, ".index") ? indexes : rest;
    if (std::find(to.begin(), to.end(), path) == to.end()) to.push_back(path);
  }
  for (const auto& path : indexes) (void)store.Remove(path);
  for (const auto& path : rest) (void)store.Remove(path);
}

}  // namespace

absl::Status PublishBundle(const std::string& prefix, bool overwrite, const std::vector<std::string>& data_files,
                           const std::function<absl::Status(size_t)>& commit_data_file,
                           const std::function<absl::Status()>& commit_index,
                           const std::function<absl::Status()>& check_data, bool* replace_in_place,
                           const std::function<void(size_t)>& keep_data_file) {
  Storage& store = Storage::For(prefix);
  const std::string index = prefix + ".index";
  std::vector<std::string> stale;
  if (overwrite) stale = ExistingFiles(prefix);
  // A stop requested so far undoes the run; from the first change to what is under the
  // output's names that cannot be undone (the old index removed, the new one committed)
  // the run finishes instead (run/run.h, docs/RELIABILITY.md).
  TFCKPT_RETURN_IF_ERROR(CheckStop());
  Run* run = CurrentRun();
  const auto no_return = [run] {
    if (run != nullptr) run->PassPointOfNoReturn();
  };
  const bool replacing = overwrite && FileExists(index);
  // The new data files that take names of the old checkpoint's (the same number of data
  // files): the old index must be gone before the first of them is in place, so that no
  // reader pairs it with new data. (Named by a listing, or found one by one where the
  // store may not be listed.)
  std::vector<bool> collides(data_files.size(), false);
  for (size_t i = 0; i < data_files.size() && replacing; ++i) {
    collides[i] = std::find(stale.begin(), stale.end(), data_files[i]) != stale.end() ||
                  FileExists(data_files[i]);
  }
  const bool any_collides = std::find(collides.begin(), collides.end(), true) != collides.end();
  // Where the store replaces in one step and no new data file takes an old one's name, the
  // old index is never removed: the new one replaces it (a reader finds one or the other).
  const bool in_place = replace_in_place != nullptr && replacing && !any_collides;
  if (replace_in_place != nullptr) *replace_in_place = in_place;
  // On such a store, where new data files do take the old ones' names, the old checkpoint
  // is first copied inside the store under a backup prefix (PREFIX.tfckpt-old-XXXXXXXX:
  // its data files, then its index), and put back from there should the run fail or be
  // stopped before the new index is up; the backup goes once it is.
  const bool guarded = replace_in_place != nullptr && replacing && any_collides;
  std::string backup;                                       // its prefix, once begun
  std::vector<std::pair<std::string, std::string>> backed;  // (old data file, its copy)
  std::vector<std::unique_ptr<WritableFile>> backup_files;  // committed; undone unless kept
  bool backed_up = false;                                   // the backup's index is up
  std::vector<bool> committed(data_files.size(), false);
  std::vector<bool> replaced(data_files.size(), false);  // (or perhaps: an unknown outcome)
  std::optional<std::string> old_index;  // its bytes, while it may be put back
  bool old_index_removed = false;
  bool old_data_replaced = false;  // (or perhaps replaced: a commit whose outcome is unknown)
  const auto back_up = [&]() -> absl::Status {
    backup = BackupPrefix(prefix);
    // The old data files listed, and any a new one takes that the listing missed.
    std::vector<std::string> old_data;
    for (const auto& path : stale) {
      if (path != index) old_data.push_back(path);
    }
    for (size_t i = 0; i < data_files.size(); ++i) {
      if (collides[i] && std::find(old_data.begin(), old_data.end(), data_files[i]) == old_data.end()) {
        old_data.push_back(data_files[i]);
      }
    }
    for (const auto& path : old_data) {
      if (path.rfind(prefix, 0) != 0) continue;
      const std::string to = backup + path.substr(prefix.size());
      TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, CopyWithin(store, path, to));
      backup_files.push_back(std::move(f));
      backed.emplace_back(path, to);
    }
    // The backup's data files are there, its index not yet (a kill leaves data files that
    // the next --force removes).
    TFCKPT_RETURN_IF_ERROR(Reached("old-backing-up"));
    TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, WriteWhole(store, backup + ".index", *old_index, kIndexWrite));
    backup_files.push_back(std::move(f));
    backed_up = true;
    return Reached("old-backed-up");
  };
  const auto remove_old_index = [&]() -> absl::Status {
    if (!replacing || old_index_removed) return absl::OkStatus();
    TFCKPT_RETURN_IF_ERROR(CheckStop());
    absl::StatusOr<std::string> bytes = store.ReadSmallFile(index, kIndexWrite.part_size);
    if (bytes.ok()) old_index = *std::move(bytes);  // (else it cannot be put back)
    if (guarded) {
      // (the old checkpoint is not given up without its backup)
      if (!bytes.ok()) return bytes.status();
      TFCKPT_RETURN_IF_ERROR(back_up());
    } else {
      no_return();
    }
    TFCKPT_RETURN_IF_ERROR(store.Remove(index));
    old_index_removed = true;
    return Reached("old-index-removed");
  };
  // Guarded, once the backup is whole: the old data files that were (or may have been)
  // replaced are copied back from it, then its index (only if absent: a new index whose
  // commit failed is gone by then), then the backup is removed. The run's undo must not
  // remove what is put back: those names are kept (keep_data_file), and the copies back
  // are published. A restore that fails keeps the backup (published) and says where.
  const auto restore = [&](absl::Status s) -> absl::Status {
    // From here the restore goes through whatever comes (a stop no longer cuts it short).
    no_return();
    (void)Reached("old-restoring");
    absl::Status r;
    for (size_t i = 0; i < data_files.size() && r.ok(); ++i) {
      if (!replaced[i]) continue;
      if (keep_data_file) keep_data_file(i);
      for (const auto& [path, copy] : backed) {
        if (path != data_files[i]) continue;
        absl::StatusOr<std::unique_ptr<WritableFile>> back = CopyWithin(store, copy, path);
        if (back.ok()) (*back)->Publish();
        r = back.status();
      }
    }
    if (r.ok() && (old_index_removed || !FileExists(index))) {
      absl::StatusOr<std::unique_ptr<WritableFile>> back = WriteWhole(store, index, *old_index, kIndexWrite);
      if (back.ok()) (*back)->Publish();
      r = back.status();
    }
    if (!r.ok()) {
      for (const auto& f : backup_files) f->Publish();
      return absl::Status(s.code(), StrCat(s.message(), " (the old checkpoint could not be put back: ", r.message(),
                                           "; it is kept whole under ", backup, ".index)"));
    }
    // The new data files under other names go (the run's undo removes them too).
    for (size_t i = 0; i < data_files.size(); ++i) {
      if (committed[i] && !collides[i]) (void)Storage::For(data_files[i]).Remove(data_files[i]);
    }
    RemoveBackups(store, prefix, backup, backed);
    return absl::Status(s.code(), StrCat(s.message(), " (the old checkpoint was kept)"));
  };
  // A failure: the data files this run put in place are removed, as no reader would take
  // them. (Not the index: an index that could not be written only if absent is another
  // run's.) The old checkpoint stays when none of its data files was replaced (its index
  // put back if it was removed); else what is left of it goes too. Guarded, the old
  // checkpoint is put back from its backup (restore); a backup not yet whole is removed
  // by the run's undo (the old checkpoint was not touched).
  const auto fail = [&](absl::Status s) {
    if (backed_up) return restore(std::move(s));
    for (size_t i = 0; i < data_files.size(); ++i) {
      if (committed[i] || (collides[i] && old_data_replaced)) (void)Storage::For(data_files[i]).Remove(data_files[i]);
    }
    if (old_data_replaced) {
      for (const auto& path : stale) (void)store.Remove(path);
    } else if (old_index_removed && old_index.has_value()) {
      absl::StatusOr<std::unique_ptr<WritableFile>> back = store.Create(index, kIndexWrite);
      absl::Status put = back.status();
      if (put.ok()) put = (*back)->Append(*old_index);
      if (put.ok()) put = (*back)->Close();
      if (put.ok()) put = (*back)->Commit();
      if (put.ok()) (*back)->Publish();
    }
    return s;
  };
  // Data files under names the old checkpoint does not use first (it stays whole
  // meanwhile), then those under its names, its index removed right before.
  for (const bool on_old_names : {false, true}) {
    for (size_t i = 0; i < data_files.size(); ++i) {
      if (collides[i] != on_old_names) continue;
      if (on_old_names) {
        if (absl::Status s = remove_old_index(); !s.ok()) return fail(s);
      }
      absl::Status s = commit_data_file(i);
      committed[i] = s.ok();
      // A commit refused left the old file as it was; one whose outcome is unknown (its
      // last attempt went unanswered) may have replaced it.
      if (on_old_names && (s.ok() || CommitMayHaveHappened(s))) old_data_replaced = replaced[i] = true;
      if (!s.ok()) return fail(s);
    }
  }
  // The one window where data files are in place and the index is not (a kill here leaves
  // data files that the next run, and validate, recognise: docs/RELIABILITY.md).
  if (absl::Status s = Reached("data-committed"); !s.ok()) return fail(s);
  if (check_data) {
    if (absl::Status s = check_data(); !s.ok()) return fail(s);
  }
  if (absl::Status s = CheckStop(); !s.ok()) return fail(s);
  if (in_place) {
    // (its bytes, to be put back should the new one's commit end unknown)
    absl::StatusOr<std::string> bytes = store.ReadSmallFile(index, kIndexWrite.part_size);
    if (bytes.ok()) old_index = *std::move(bytes);
    if (absl::Status s = Reached("index-replacing"); !s.ok()) return fail(s);
  } else if (absl::Status s = remove_old_index(); !s.ok()) {
    return fail(s);
  }
  no_return();
  if (absl::Status s = commit_index(); !s.ok()) {
    // An index whose commit may have been carried out (its last attempt went unanswered)
    // names these data files: it goes before them, and unless it is gone for sure they stay
    // (a reader must never find an index whose data files were removed). Replacing in
    // place, the old index still there says the new one did not go up; anything else is
    // removed too, and the old one put back (fail).
    const auto still_old = [&] {
      if (!in_place || !old_index.has_value()) return false;
      absl::StatusOr<std::string> now = store.ReadSmallFile(index, kIndexWrite.part_size);
      return now.ok() && *now == *old_index;
    };
    if (CommitMayHaveHappened(s) && !still_old()) {
      absl::Status gone = store.Remove(index);
      if (!gone.ok() && !absl::IsNotFound(gone)) {
        // (guarded: the old checkpoint stays whole under its backup's name)
        for (const auto& f : backup_files) f->Publish();
        return absl::Status(s.code(), StrCat(s.message(), " (", index, " may have been written and could not be "
                                             "removed: ", gone.message(), "; its data files were left in place",
                                             backed_up ? StrCat("; the old checkpoint is kept whole under ", backup,
                                                                ".index")
                                                       : std::string(),
                                             ")"));
      }
      if (in_place) old_index_removed = true;
    }
    return fail(s);
  }
  TFCKPT_RETURN_IF_ERROR(Reached("index-committed"));
  // The old checkpoint's data files that the new one does not use: removed last.
  std::vector<std::string> ours = data_files;
  ours.push_back(index);
  for (const auto& path : stale) {
    if (std::find(ours.begin(), ours.end(), path) == ours.end()) (void)store.Remove(path);
  }
  if (replace_in_place != nullptr && overwrite) {
    // This run's backup, and any that a --force run killed before it could remove its own
    // left (the new checkpoint is up: none of them is needed any more).
    TFCKPT_RETURN_IF_ERROR(Reached("backup-removing"));
    for (const auto& f : backup_files) f->Publish();  // (removed here, not by an undo)
    RemoveBackups(store, prefix, backup, backed);
  }
  return absl::OkStatus();
}

}  // namespace tfckpt
