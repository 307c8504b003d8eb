// The V2 tensor bundle as a Checkpoint (docs/FORMAT.md §b, §c): loading the index into
// the slice map, and reading payloads from the data files with bounds and CRC checks.
#include "format/bundle/bundle_reader.h"

#include "run/run.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/crc32c.h"
#include "model/tensor_encoding.h"
#include "format/bundle/bundle_proto.h"
#include "format/table/table.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt {

namespace {

// How many `slices` (field 7) a serialized BundleEntryProto lists, found by walking its
// wire format without building messages; -1 when it does not parse.
int64_t CountSlicesField(std::string_view value) {
  namespace wfl = google::protobuf::internal;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(value.data()),
                                            static_cast<int>(value.size()));
  int64_t n = 0;
  while (uint32_t tag = in.ReadTag()) {
    if (tag == wfl::WireFormatLite::MakeTag(7, wfl::WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) ++n;
    if (!wfl::WireFormatLite::SkipField(&in, tag)) return -1;
  }
  return in.ConsumedEntireMessage() || in.CurrentPosition() == static_cast<int>(value.size()) ? n : -1;
}

// The header entry of `path` (`raw`, in the block at `block`), parsed and checked.
absl::StatusOr<pb::BundleHeaderProto> ParseHeader(const std::string& path, std::string_view raw, uint64_t block,
                                                  uint64_t index_size) {
  pb::BundleHeaderProto header;
  if (!header.ParseFromArray(raw.data(), static_cast<int>(raw.size()))) {
    return DataLossAt("header.parse", path, "", block, "header is not a BundleHeaderProto");
  }
  TFCKPT_RETURN_IF_ERROR(Annotate(CheckVersion(header.version()), path));
  if (header.endianness() != pb::BundleHeaderProto::LITTLE && header.endianness() != pb::BundleHeaderProto::BIG) {
    return DataLossAt("header.endianness", path, "", block, StrCat("header has unknown endianness ", header.endianness()));
  }
  if (header.num_shards() < 0 || header.num_shards() > kMaxBundleShards) {
    return DataLossAt("header.num-shards", path, "", block, StrCat("header has implausible num_shards ", header.num_shards()));
  }
  if (static_cast<uint64_t>(header.num_shards()) > MaxShardsFor(index_size)) {
    return DataLossAt("header.num-shards", path, "", block,
                      StrCat("header counts ", header.num_shards(), " data files, more than an index of ", index_size,
                             " bytes can name (", MaxShardsFor(index_size), ")"));
  }
  return header;
}


// The slice map of an index and its facts, as the loader builds them before the Checkpoint is constructed.
struct BundleLoader {
  absl::Status LoadV2Entries(TableReader& table, std::vector<Finding>* findings);

  CheckpointInfo info_;
  std::vector<TensorEntry> tensors_;  // sorted by name
  std::string raw_header_;
};

// The reader a V2 bundle's Checkpoint reads through.
class BundleIndexReader : public BundleReader {
 public:
  BundleIndexReader(DataFiles files, std::unique_ptr<TableReader> index, std::string raw_header)
      : BundleReader(std::move(files)), index_(std::move(index)), raw_header_(std::move(raw_header)) {}

  absl::Status ForEachIndexEntry(const IndexEntryVisitor& visit) const override { return index_->ForEach(visit); }
  const std::string& raw_header() const override { return raw_header_; }

 private:
  std::unique_ptr<TableReader> index_;
  std::string raw_header_;
};

}  // namespace

absl::Status VisitBundleIndex(TableReader& index, std::vector<Finding>* findings, const BundleIndexVisitor& visit) {
  const std::string& path = index.path();
  bool have_header = false;
  int64_t slice_entries = 0;  // parsed so far; slice keys sort before every name
  pb::BundleEntryProto e;
  TFCKPT_RETURN_IF_ERROR(VisitTable(index, findings, [&](std::string_view key, std::string_view value, uint64_t block) {
    if (key.empty()) {
      have_header = true;  // a damaged header is one finding, not one per entry after it
      TFCKPT_ASSIGN_OR_RETURN(const pb::BundleHeaderProto header, ParseHeader(path, value, block, index.file_size()));
      return visit.header(value, header);
    }
    if (!have_header) return DataLossAt("header.missing", path, key, block, "index has no header entry (empty key) before tensors");
    // A metadata entry listing far more slices than exist is refused before its slice list
    // is built (TooManySlices).
    const bool slice = IsSliceKey(key);
    if (!slice) {
      const int64_t listed = CountSlicesField(value);
      if (TooManySlices(listed, slice_entries)) {
        return DataLossAt("entry.slices", path, key, block,
                          StrCat("entry lists ", listed, " slices but the index holds only ", slice_entries,
                                 " slice entries"));
      }
    }
    if (!e.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return DataLossAt("entry.parse", path, key, block, "entry is not a BundleEntryProto");
    }
    if (slice) {
      ++slice_entries;
      return visit.entry(key, e, nullptr, block);
    }
    auto shape = ShapeFromProto(e.shape());
    if (!shape.ok()) return DataLossAt("entry.shape", path, key, block, SV(shape.status().message()));
    return visit.entry(key, e, &*shape, block);
  }));
  if (!have_header) {
    absl::Status st = DataLossAt("header.missing", path, "", -1, "index has no header entry");
    if (findings == nullptr) return st;
    findings->push_back(FindingOf(st));
  }
  return absl::OkStatus();
}

std::string EntryShardDefect(std::string_view label, int64_t shard, int32_t num_shards) {
  if (shard >= 0 && shard < num_shards) return "";
  return StrCat("entry \"", PrintableKey(label), "\" names data file ", shard, " but the header has ", num_shards);
}

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenBundle(const std::string& prefix, std::vector<Finding>* findings,
                                                       const FileOpener* opener) {
  BundleLoader c;
  c.info_.format = Format::kV2;
  c.info_.prefix = prefix;
  c.info_.index_path = prefix + ".index";
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<TableReader> index, TableReader::Open(c.info_.index_path, opener));
  c.info_.index_size = index->file_size();
  TFCKPT_RETURN_IF_ERROR(c.LoadV2Entries(*index, findings));
  c.info_.index_has_snappy = index->saw_snappy();
  auto reader = std::make_unique<BundleIndexReader>(
      BundleReader::DataFiles{c.info_.data_files, c.info_.num_shards, c.info_.big_endian, /*checksums=*/true,
                              opener != nullptr ? *opener : FileOpener(),
                              BundleReader::LayoutOf(c.tensors_, c.info_.data_files.size())},
      std::move(index), std::move(c.raw_header_));
  return std::make_unique<Checkpoint>(std::move(c.info_), std::move(c.tensors_), std::move(reader));
}

absl::Status BundleLoader::LoadV2Entries(TableReader& table, std::vector<Finding>* findings) {
  // Slice entries, kept until every metadata entry has claimed its slices.
  struct SliceEntry {
    pb::BundleEntryProto entry;
    bool used = false;
  };
  std::map<std::string, SliceEntry> slice_entries;
  std::vector<std::pair<size_t, pb::BundleEntryProto>> partitioned;  // tensors_ index, metadata

  // Fills `data` from a stored entry and returns {check id, defect description}, or
  // empty strings when the entry looks readable.
  using Defect = std::pair<std::string, std::string>;
  auto stored = [&](std::string_view key, const pb::BundleEntryProto& e, int32_t dtype, const Shape& shape,
                    StoredData* data) -> Defect {
    data->shard = e.shard_id();
    data->offset = static_cast<uint64_t>(e.offset());
    data->size = static_cast<uint64_t>(e.size());
    data->masked_crc = e.crc32c();
    if (std::string d = EntryShardDefect(key, e.shard_id(), info_.num_shards); !d.empty()) return {"entry.shard", d};
    if (e.offset() < 0 || e.size() < 0) {
      data->offset = data->size = 0;  // (never read; nor counted as 2^64 - 1 bytes in listings)
      return {"entry.bounds", StrCat("entry \"", PrintableKey(key), "\" has a negative offset or size")};
    }
    const DTypeInfo* info = LookupDType(dtype);
    if (info == nullptr) return {"entry.dtype", StrCat("unknown or unstorable dtype ", DTypeName(dtype))};
    if (info->element_size > 0) {
      const int64_t n = *NumElements(shape);
      if (n > INT64_MAX / info->element_size || e.size() != n * info->element_size) {
        return {"entry.size", StrCat("entry \"", PrintableKey(key), "\" has size ", e.size(), " but ",
                                     ShapeString(shape), " ", info->name, " needs ", n, " x ", info->element_size,
                                     " bytes")};
      }
    } else {
      // Strings and variants: every element takes at least one length byte (variants also
      // a 4-byte checksum), so a count the payload cannot hold is refused here, before any
      // reader sizes a list of elements from it.
      const int64_t n = *NumElements(shape);
      const int64_t least = dtype == static_cast<int32_t>(DType::kVariant) ? 5 : 1;
      if (n > e.size() / least) {
        return {"entry.size", StrCat("entry \"", PrintableKey(key), "\": a ", info->name, " tensor of ", n,
                                     " elements cannot fit in ", e.size(), " bytes")};
      }
    }
    return {};
  };
  auto set_defect = [](TensorEntry& t, Defect d) {
    if (t.defect.empty() && !d.second.empty()) std::tie(t.defect_check, t.defect) = std::move(d);
  };

  BundleIndexVisitor visit;
  visit.header = [&](std::string_view raw, const pb::BundleHeaderProto& header) {
    raw_header_.assign(raw);
    info_.num_shards = header.num_shards();
    info_.big_endian = header.endianness() == pb::BundleHeaderProto::BIG;
    info_.producer = header.version().producer();
    info_.min_consumer = header.version().min_consumer();
    return absl::OkStatus();
  };
  visit.entry = [&](std::string_view key, pb::BundleEntryProto& e, const Shape* shape, uint64_t) {
    if (shape == nullptr) {  // a slice entry: claimed below by its metadata entry
      slice_entries[std::string(key)].entry = std::move(e);
      return absl::OkStatus();
    }
    TensorEntry& t = tensors_.emplace_back();
    t.name.assign(key);
    t.dtype = e.dtype();
    t.shape = *shape;
    if (e.slices_size() == 0) {
      StoredSlice& s = t.slices.emplace_back();
      s.region = Region::Full(t.shape);
      s.key = t.name;
      set_defect(t, stored(key, e, t.dtype, t.shape, &s.data));
      t.bytes = s.data.size;
    } else {
      t.partitioned = true;
      partitioned.emplace_back(tensors_.size() - 1, std::move(e));
    }
    return absl::OkStatus();
  };
  TFCKPT_RETURN_IF_ERROR(VisitBundleIndex(table, findings, visit));
  for (int32_t i = 0; i < info_.num_shards; ++i) info_.data_files.push_back(DataFileName(info_.prefix, i, info_.num_shards));

  for (auto& [idx, meta] : partitioned) {
    TensorEntry& t = tensors_[idx];
    for (const auto& sp : meta.slices()) {
      StoredSlice s;
      s.extents = ExtentsFromProto(sp);
      auto region = RegionOf(s.extents, t.shape);
      if (!region.ok()) {
        set_defect(t, {"slice.bounds", std::string(SV(region.status().message()))});
        continue;
      }
      s.region = *region;
      s.key = EncodeSliceKey(t.name, s.extents);
      auto it = slice_entries.find(s.key);
      if (it == slice_entries.end()) {
        set_defect(t, {"slice.missing-entry", StrCat("slice ", SliceString(s.region, t.shape), " has no entry")});
        continue;
      }
      it->second.used = true;
      const pb::BundleEntryProto& se = it->second.entry;
      auto sshape = ShapeFromProto(se.shape());
      if (!sshape.ok() || *sshape != s.region.shape) {
        set_defect(t, {"slice.shape", StrCat("slice ", SliceString(s.region, t.shape), " entry has shape ",
                                             sshape.ok() ? ShapeString(*sshape) : "(invalid)")});
      } else if (se.dtype() != t.dtype) {
        set_defect(t, {"slice.dtype", StrCat("slice ", SliceString(s.region, t.shape), " entry has dtype ",
                                             DTypeName(se.dtype()))});
      } else {
        set_defect(t, stored(StrCat(t.name, " slice ", SliceString(s.region, t.shape)), se, t.dtype,
                             s.region.shape, &s.data));
      }
      t.bytes += s.data.size;
      t.slices.push_back(std::move(s));
    }
  }
  for (const auto& [key, se] : slice_entries) {
    if (!se.used) info_.orphan_slice_keys.push_back(key);
  }
  // Index keys are in byte order, so tensors_ is sorted by name.
  return absl::OkStatus();
}


BundleReader::BundleReader(DataFiles files) : info_(std::move(files)), data_files_(info_.data_files.size()) {}

std::vector<std::vector<std::pair<uint64_t, uint64_t>>> BundleReader::LayoutOf(const std::vector<TensorEntry>& tensors,
                                                                              size_t num_files) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> layout(num_files);
  for (const TensorEntry& t : tensors) {
    for (const StoredSlice& s : t.slices) {
      if (s.data.shard >= 0 && static_cast<size_t>(s.data.shard) < num_files) {
        layout[static_cast<size_t>(s.data.shard)].emplace_back(s.data.offset, s.data.size);
      }
    }
  }
  return layout;
}

absl::StatusOr<const ReadableFile*> BundleReader::DataFile(int32_t shard) const {
  if (shard < 0 || static_cast<size_t>(shard) >= data_files_.size()) {
    return absl::OutOfRangeError(StrCat("no data file ", shard, " (the index lists ", info_.num_shards, ")"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!data_files_[shard]) {
    auto f = OpenFile(info_.data_files[shard], &info_.opener);
    if (!f.ok()) {
      if (absl::IsNotFound(f.status())) {
        return Locate(absl::NotFoundError(StrCat("data file missing (the index lists ", info_.num_shards,
                                                 " data files)")),
                      "files.missing-data", info_.data_files[shard], "", -1);
      }
      return f.status();
    }
    if (static_cast<size_t>(shard) < info_.layout.size()) (*f)->AdviseLayout(info_.layout[static_cast<size_t>(shard)]);
    data_files_[shard] = std::move(*f);
  }
  return data_files_[shard].get();
}

absl::Status BundleReader::CheckStored(const TensorEntry& t, const StoredSlice& s) const {
  TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, DataFile(s.data.shard));
  if (s.data.offset > file->size() || s.data.size > file->size() - s.data.offset) {
    return DataLossAt("entry.bounds", file->path(), t.name, static_cast<int64_t>(std::min<uint64_t>(s.data.offset, INT64_MAX)),
                      StrCat(PieceLabel(t, s), "tensor of ", s.data.size, " bytes runs past the end of the file (",
                             file->size(), " bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorBytes> BundleReader::Read(const TensorEntry& t, const StoredSlice& s, bool verify) const {
  TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, DataFile(s.data.shard));
  const std::string label = PieceLabel(t, s);
  // A mapped file hands out views of its mapping; elsewhere the bytes are read into `read`.
  std::shared_ptr<std::string> read = file->mapping() ? nullptr : std::make_shared<std::string>();
  std::string unused;
  auto range = file->Range(s.data.offset, s.data.size, read ? read.get() : &unused);
  if (!range.ok() && s.data.offset <= file->size() && s.data.size <= file->size() - s.data.offset) {
    // (in the file as opened: it shrank since, or could not be read)
    return Locate(range.status(), "entry.bounds", file->path(), t.name, static_cast<int64_t>(s.data.offset), label);
  }
  if (!range.ok()) {
    return DataLossAt("entry.bounds", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                      StrCat(label, "tensor of ", s.data.size, " bytes runs past the end of the file (",
                                   file->size(), " bytes)"));
  }
  const int64_t n = s.region.num_elements();
  if (verify && info_.checksums) {
    auto crc = PayloadCrc(t.dtype, *range, n, info_.big_endian);
    if (!crc.ok()) return Locate(crc.status(), "data.crc", file->path(), t.name, static_cast<int64_t>(s.data.offset), label);
    if (*crc != crc32c::Unmask(s.data.masked_crc)) {
      return DataLossAt("data.crc", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                        StrCat(label, "tensor checksum mismatch (stored ",
                                     absl::Hex(crc32c::Unmask(s.data.masked_crc), absl::kZeroPad8), ", computed ",
                                     absl::Hex(*crc, absl::kZeroPad8), ")"));
    }
  }
  if (!info_.big_endian) return TensorBytes{*range, std::move(read)};
  // Big-endian bundle: hand out little-endian bytes.
  auto buf = std::make_shared<std::string>();
  if (t.dtype == static_cast<int32_t>(DType::kString)) {
    auto d = DecodeStrings(*range, n, /*big_endian=*/true);
    if (!d.ok()) return Locate(d.status(), "data.string-layout", file->path(), t.name, static_cast<int64_t>(s.data.offset), label);
    EncodeStrings(d->elements, buf.get());
  } else if (t.dtype == static_cast<int32_t>(DType::kVariant)) {
    return DataLossAt("data.variant", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                      "variant tensors of big-endian bundles cannot be read (TensorFlow refuses them too)");
  } else {
    buf->assign(*range);
    SwapToLittleEndian(t.dtype, buf->data(), buf->size());
  }
  std::string_view view = *buf;
  return TensorBytes{view, std::move(buf)};
}

absl::Status BundleReader::VerifyCrc(const TensorEntry& t, const StoredSlice& s, std::string* buffer) const {
  const DTypeInfo* dt = LookupDType(t.dtype);
  if (!info_.checksums) {  // safetensors: bounds only
    auto r = Read(t, s, /*verify=*/false);
    return r.ok() ? absl::OkStatus() : r.status();
  }
  if (info_.big_endian || dt == nullptr || dt->element_size == 0) return PieceReader::VerifyCrc(t, s, buffer);
  TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, DataFile(s.data.shard));
  const std::string label = PieceLabel(t, s);
  if (s.data.offset > file->size() || s.data.size > file->size() - s.data.offset) {
    return DataLossAt("entry.bounds", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                      StrCat(label, "tensor of ", s.data.size, " bytes runs past the end of the file (", file->size(),
                             " bytes)"));
  }
  constexpr size_t kBuffer = 1 << 20;  // fits in L2: the CRC reads what pread just wrote
  if (buffer->size() < kBuffer) buffer->resize(kBuffer);
  file->WillReadSequentially(s.data.offset, s.data.size);
  uint32_t crc = 0;
  for (uint64_t at = 0; at < s.data.size;) {
    TFCKPT_RETURN_IF_ERROR(CheckStop());
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBuffer, s.data.size - at));
    TFCKPT_RETURN_IF_ERROR(Locate(file->ReadAt(s.data.offset + at, n, buffer->data()),
                                  "entry.bounds", file->path(), t.name, static_cast<int64_t>(s.data.offset + at), label));
    crc = crc32c::Extend(crc, buffer->data(), n);
    at += n;
  }
  if (crc != crc32c::Unmask(s.data.masked_crc)) {
    return DataLossAt("data.crc", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                      StrCat(label, "tensor checksum mismatch (stored ",
                             absl::Hex(crc32c::Unmask(s.data.masked_crc), absl::kZeroPad8), ", computed ",
                             absl::Hex(crc, absl::kZeroPad8), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string_view> BundleReader::ReadRange(const TensorEntry& t, const StoredSlice& s, uint64_t begin,
                                                         uint64_t end, std::string* buffer, TensorBytes* owner) const {
  if (!info_.big_endian) {
    TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, DataFile(s.data.shard));
    if (end > s.data.size || s.data.offset > file->size() || end > file->size() - s.data.offset) {
      return DataLossAt("entry.bounds", file->path(), t.name, static_cast<int64_t>(s.data.offset + begin),
                        StrCat(PieceLabel(t, s), "range runs past the end of the file"));
    }
    buffer->resize(static_cast<size_t>(end - begin));
    TFCKPT_RETURN_IF_ERROR(file->ReadAt(s.data.offset + begin, buffer->size(), buffer->data()));
    return std::string_view(*buffer);
  }
  return PieceReader::ReadRange(t, s, begin, end, buffer, owner);
}

absl::Status BundleReader::ReadInto(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end,
                                    char* out, bool verify) const {
  if (info_.big_endian) return PieceReader::ReadInto(t, s, begin, end, out, verify);
  TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, DataFile(s.data.shard));
  const std::string label = PieceLabel(t, s);
  if (end > s.data.size || s.data.offset > file->size() || s.data.size > file->size() - s.data.offset) {
    return DataLossAt("entry.bounds", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                      StrCat(label, "tensor of ", s.data.size, " bytes runs past the end of the file (", file->size(),
                             " bytes)"));
  }
  // Chunks that fit in L2: the CRC reads what pread just wrote.
  constexpr uint64_t kChunk = 1 << 20;
  const bool check = verify && info_.checksums && begin == 0 && end == s.data.size;
  file->WillReadSequentially(s.data.offset + begin, end - begin);
  uint32_t crc = 0;
  for (uint64_t at = begin; at < end;) {
    TFCKPT_RETURN_IF_ERROR(Reached("read-chunk"));
    const uint64_t n = std::min(kChunk, end - at);
    char* dst = out + (at - begin);
    TFCKPT_RETURN_IF_ERROR(Locate(file->ReadAt(s.data.offset + at, n, dst), "entry.bounds", file->path(), t.name,
                                  static_cast<int64_t>(s.data.offset + at), label));
    if (check) crc = crc32c::Extend(crc, dst, static_cast<size_t>(n));
    at += n;
  }
  if (check && crc != crc32c::Unmask(s.data.masked_crc)) {
    return DataLossAt("data.crc", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                      StrCat(label, "tensor checksum mismatch (stored ",
                             absl::Hex(crc32c::Unmask(s.data.masked_crc), absl::kZeroPad8), ", computed ",
                             absl::Hex(crc, absl::kZeroPad8), ")"));
  }
  return absl::OkStatus();
}


}  // namespace tfckpt
