// A checkpoint opened for reading: its slice map, and reading payloads through the
// format's PieceReader (tensors with a defect are refused here, for every format).
#include "tfckpt/checkpoint.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/piece_reader.h"
#include "run/run.h"
#include "tfckpt/status.h"

namespace tfckpt {

std::string PieceLabel(const TensorEntry& t, const StoredSlice& s) {
  return t.partitioned ? StrCat("slice ", SliceString(s.region, t.shape), ": ") : std::string();
}

std::vector<std::string> FilesOf(const CheckpointInfo& info) {
  std::vector<std::string> files;
  if (!info.index_path.empty()) files.push_back(info.index_path);
  if (info.format == Format::kSafetensors || info.format == Format::kNpz) files.push_back(info.prefix);
  files.insert(files.end(), info.data_files.begin(), info.data_files.end());
  files.insert(files.end(), info.v1_files.begin(), info.v1_files.end());
  return files;
}

absl::Status PieceReader::VerifyCrc(const TensorEntry& t, const StoredSlice& s, std::string*) const {
  auto r = Read(t, s, /*verify=*/true);
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<std::string_view> PieceReader::ReadRange(const TensorEntry& t, const StoredSlice& s, uint64_t begin,
                                                        uint64_t end, std::string*, TensorBytes* owner) const {
  if (owner->data.data() == nullptr) {
    TFCKPT_ASSIGN_OR_RETURN(*owner, Read(t, s, /*verify=*/false));
  }
  return owner->data.substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
}

absl::Status PieceReader::ReadInto(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end,
                                   char* out, bool verify) const {
  TensorBytes owner;
  std::string buffer;
  std::string_view bytes;
  if (verify && begin == 0) {  // (the whole payload, when `end` is its size: checked by Read)
    TFCKPT_ASSIGN_OR_RETURN(owner, Read(t, s, /*verify=*/true));
    if (end > owner.data.size()) return absl::InternalError("bug: ReadInto past the end of a payload");
    bytes = owner.data.substr(0, static_cast<size_t>(end));
  } else {
    TFCKPT_ASSIGN_OR_RETURN(bytes, ReadRange(t, s, begin, end, &buffer, &owner));
  }
  constexpr size_t kChunk = 1 << 20;
  for (size_t at = 0; at < bytes.size();) {
    TFCKPT_RETURN_IF_ERROR(Reached("read-chunk"));
    const size_t n = std::min(kChunk, bytes.size() - at);
    std::memcpy(out + at, bytes.data() + at, n);
    at += n;
  }
  return absl::OkStatus();
}

std::unique_ptr<PayloadCheck> PieceReader::StartPayloadCheck(const TensorEntry&, const StoredSlice&) const {
  return nullptr;
}

absl::StatusOr<const ReadableFile*> PieceReader::DataFile(int32_t shard) const {
  return absl::InternalError(StrCat("bug: no data file ", shard, " in a format without data files"));
}

absl::Status PieceReader::CheckStored(const TensorEntry&, const StoredSlice&) const { return absl::OkStatus(); }

absl::Status PieceReader::ForEachIndexEntry(const IndexEntryVisitor&) const {
  return absl::InternalError("bug: index entries walked in a format without a V2 index");
}

const std::string& PieceReader::raw_header() const {
  static const std::string* const kNone = new std::string();
  return *kNone;
}

Checkpoint::Checkpoint(CheckpointInfo info, std::vector<TensorEntry> tensors, std::unique_ptr<PieceReader> reader)
    : info_(std::move(info)), tensors_(std::move(tensors)), reader_(std::move(reader)) {}

Checkpoint::~Checkpoint() = default;

const std::string& Checkpoint::raw_header() const { return reader_->raw_header(); }

std::unique_ptr<PayloadCheck> Checkpoint::StartPayloadCheck(const TensorEntry& t, const StoredSlice& s) const {
  return reader_->StartPayloadCheck(t, s);
}

absl::Status Checkpoint::ForEachIndexEntry(const IndexEntryVisitor& visit) const {
  if (info_.format != Format::kV2) return absl::FailedPreconditionError(StrCat(info_.prefix, ": not a V2 checkpoint"));
  return reader_->ForEachIndexEntry(visit);
}

const TensorEntry* Checkpoint::Find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorEntry& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

absl::StatusOr<const ReadableFile*> Checkpoint::DataFile(int32_t shard) const {
  if (shard < 0 || shard >= info_.num_shards) {
    return absl::OutOfRangeError(StrCat(info_.index_path, ": no data file ", shard));
  }
  return reader_->DataFile(shard);
}

absl::Status Checkpoint::DefectError(const TensorEntry& t) const {
  if (t.defect.empty()) return absl::OkStatus();
  return DataLossAt(t.defect_check, info_.format == Format::kV2 ? info_.index_path : info_.prefix, t.name, -1,
                    t.defect);
}

absl::Status Checkpoint::CheckStored(const TensorEntry& t, const Region* box) const {
  TFCKPT_RETURN_IF_ERROR(DefectError(t));
  const Region whole = Region::Full(t.shape);
  if (box == nullptr) box = &whole;
  // Every element of the box in some piece (overlapping pieces count twice, but each
  // counted element is then still backed by a byte of its own piece), every piece present.
  int64_t covered = 0;
  for (const StoredSlice& s : t.slices) {
    const std::optional<Region> inter = box->rank() == 0 ? std::optional<Region>(s.region) : Intersect(s.region, *box);
    if (!inter) continue;
    TFCKPT_RETURN_IF_ERROR(reader_->CheckStored(t, s));
    covered += inter->num_elements();
    if (covered >= box->num_elements()) covered = box->num_elements();  // (no overflow)
  }
  if (covered < box->num_elements()) {
    return DataLossAt("slice.gap", info_.format == Format::kV2 ? info_.index_path : info_.prefix, t.name, -1,
                      StrCat(box->num_elements() - covered, " elements of ", SliceString(*box, t.shape),
                             " are in no stored slice"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorBytes> Checkpoint::Read(const TensorEntry& t, const StoredSlice& s, bool verify) const {
  TFCKPT_RETURN_IF_ERROR(DefectError(t));
  return reader_->Read(t, s, verify);
}

absl::Status Checkpoint::VerifyCrc(const TensorEntry& t, const StoredSlice& s, std::string* buffer) const {
  TFCKPT_RETURN_IF_ERROR(DefectError(t));
  return reader_->VerifyCrc(t, s, buffer);
}

absl::StatusOr<std::string_view> Checkpoint::ReadRange(const TensorEntry& t, const StoredSlice& s, uint64_t begin,
                                                       uint64_t end, std::string* buffer, TensorBytes* owner) const {
  TFCKPT_RETURN_IF_ERROR(DefectError(t));
  return reader_->ReadRange(t, s, begin, end, buffer, owner);
}

absl::Status Checkpoint::ReadInto(const TensorEntry& t, const StoredSlice& s, uint64_t begin, uint64_t end, char* out,
                                  bool verify) const {
  TFCKPT_RETURN_IF_ERROR(DefectError(t));
  if (begin > end) return absl::InternalError("bug: ReadInto of a negative range");
  return reader_->ReadInto(t, s, begin, end, out, verify);
}

}  // namespace tfckpt
