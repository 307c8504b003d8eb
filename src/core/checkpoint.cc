// Opening checkpoints: resolving what the user named, loading the index into the slice
// map, and reading payloads with bounds and CRC checks.
#include "tfckpt/checkpoint.h"

#include <algorithm>
#include <tuple>
#include <map>
#include <set>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/wire_format_lite.h>
#include <google/protobuf/text_format.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint_state.pb.h"
#include "tfckpt/bundle_proto.h"
#include "tfckpt/crc32c.h"
#include "tfckpt/regex.h"
#include "tfckpt/dtype.h"
#include "tfckpt/file.h"
#include "tfckpt/path.h"
#include "tfckpt/status.h"
#include "tfckpt/tensor_encoding.h"

namespace tfckpt {

std::string PieceLabel(const TensorEntry& t, const StoredSlice& s) {
  return t.partitioned ? StrCat("slice ", SliceString(s.region, t.shape), ": ") : std::string();
}

std::string DataFileName(std::string_view prefix, int32_t shard, int32_t num_shards) {
  return absl::StrFormat("%s.data-%05d-of-%05d", prefix, shard, num_shards);
}

std::vector<std::string> FilesOf(const CheckpointInfo& info) {
  std::vector<std::string> files;
  if (!info.index_path.empty()) files.push_back(info.index_path);
  if (info.format == Format::kSafetensors) files.push_back(info.prefix);
  files.insert(files.end(), info.data_files.begin(), info.data_files.end());
  files.insert(files.end(), info.v1_files.begin(), info.v1_files.end());
  return files;
}

std::vector<std::string> BundleFilesAt(const std::string& prefix, int32_t num_shards) {
  std::vector<std::string> files = {prefix + ".index"};
  for (int32_t i = 0; i < num_shards; ++i) files.push_back(DataFileName(prefix, i, num_shards));
  const std::string stem = Basename(prefix) + ".data-";
  const std::string dir = Dirname(prefix);
  auto listing = Storage::For(prefix).List(dir);
  for (const DirEntry& e : listing.ok() ? *listing : std::vector<DirEntry>{}) {
    if (e.name.rfind(stem, 0) == 0) files.push_back(dir.empty() ? e.name : JoinPath(dir, e.name));
  }
  return files;
}

namespace {

constexpr int32_t kMaxShards = 1 << 20;

// DIR/NAME, keeping the user's spelling of DIR. NAME "." (a prefix that is the directory
// itself, as Keras writes it) gives "DIR/".
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

bool IsTableFile(const std::string& path) {
  auto f = Storage::For(path).OpenForRead(path);
  if (!f.ok() || (*f)->size() < kFooterSize) return false;
  char magic[8];
  if (!(*f)->ReadAt((*f)->size() - 8, 8, magic).ok()) return false;
  uint64_t v;
  std::memcpy(&v, magic, 8);
  return v == kTableMagic;
}

std::vector<std::string> Glob(const std::string& pattern) {
  std::vector<std::string> out = Storage::For(pattern).Glob(pattern);
  std::sort(out.begin(), out.end());
  return out;
}


// Names in `dir` ending in ".index" (hidden ones too: a prefix may be the directory
// itself, giving a file named ".index").
std::vector<std::string> IndexFilesIn(const std::string& dir) {
  std::vector<std::string> out;
  auto listing = Storage::For(dir).List(dir);
  for (const DirEntry& e : listing.ok() ? *listing : std::vector<DirEntry>{}) {
    if (absl::EndsWith(e.name, ".index") && e.kind == EntryKind::kFile) out.push_back(e.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Finding FindingOf(const absl::Status& s, Severity severity) {
  ErrorInfo e = ErrorInfoOf(s);
  return Finding{e.check.empty() ? "input" : e.check, severity, e.file, e.key, e.offset, e.what};
}

absl::Status VisitTable(TableReader& table, std::vector<Finding>* findings, const TableReader::Visitor& visit) {
  if (findings == nullptr) return table.ForEach(visit);
  // Lenient: a damaged block or entry is recorded and the walk goes on with the next.
  TableReader::KeyOrder order;
  for (size_t i = 0; i < table.data_blocks().size(); ++i) {
    absl::Status s = table.VisitBlock(i, &order, [&](std::string_view k, std::string_view v, uint64_t off) {
      absl::Status r = visit(k, v, off);
      if (!r.ok()) findings->push_back(FindingOf(r));
      return absl::OkStatus();
    });
    if (!s.ok()) findings->push_back(FindingOf(s));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadCheckpointState(const std::string& dir, std::vector<std::string>* notes) {
  const std::string path = JoinPath(dir, "checkpoint");
  auto text = Storage::For(path).ReadSmallFile(path, kMaxStateFileBytes);
  if (!text.ok()) return absl::NotFoundError(StrCat(path, ": cannot open"));
  pb::CheckpointState state;
  google::protobuf::TextFormat::Parser parser;
  parser.AllowUnknownField(true);
  struct Quiet : google::protobuf::io::ErrorCollector {
    std::string first;
    void AddError(int line, int col, const std::string& m) override {
      if (first.empty()) first = StrCat("line ", line + 1, " column ", col + 1, ": ", m);
    }
  } errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(*text, &state)) {
    return DataLossAt("state.parse", path, "", -1, StrCat("not a checkpoint state file: ", errors.first));
  }
  if (state.model_checkpoint_path().empty()) {
    return DataLossAt("state.parse", path, "", -1, "model_checkpoint_path is empty");
  }
  std::string prefix = JoinPath(dir, state.model_checkpoint_path());
  if (!state.model_checkpoint_path().empty() && state.model_checkpoint_path()[0] == '/' &&
      !FileExists(prefix + ".index") && !FileExists(prefix)) {
    // An absolute path from the machine that trained: the files were moved since. Look
    // beside the state file, as a user who copied the directory would expect.
    const std::string local = JoinPath(dir, Basename(prefix));
    if (FileExists(local + ".index") || FileExists(local) || !Glob(local + "-?????-of-?????").empty()) {
      if (notes) notes->push_back(StrCat("state file names ", prefix, ", which does not exist; using ", local));
      prefix = local;
    }
  }
  return prefix;
}

absl::StatusOr<ResolvedCheckpoint> ResolveCheckpoint(const std::string& spec) {
  if (spec.empty()) return absl::InvalidArgumentError("empty checkpoint path");
  ResolvedCheckpoint r;
  if ((absl::EndsWith(spec, ".safetensors") || absl::EndsWith(spec, ".safetensors.index.json")) && FileExists(spec)) {
    r.format = Format::kSafetensors;
    r.prefix = spec;
    return r;
  }
  auto v2 = [&r](std::string prefix) {
    r.format = Format::kV2;
    r.prefix = std::move(prefix);
    return r;
  };
  // 1. PREFIX.index named directly.
  if (absl::EndsWith(AV(spec), ".index") && FileExists(spec) && !IsDirectory(spec)) {
    return v2(spec.substr(0, spec.size() - 6));
  }
  // 2. A V2 prefix.
  if (FileExists(spec + ".index")) return v2(spec);
  // 3. A directory.
  if (IsDirectory(spec)) {
    TFCKPT_ASSIGN_OR_RETURN(const std::vector<DirEntry> listing, Storage::For(spec).List(spec));
    const std::string state = JoinPath(spec, "checkpoint");
    if (FileExists(state) && !IsDirectory(state)) {
      std::vector<std::string> notes;
      TFCKPT_ASSIGN_OR_RETURN(std::string prefix, ReadCheckpointState(spec, &notes));
      notes.insert(notes.begin(), StrCat("resolved ", spec, " through its checkpoint state file to ", prefix));
      absl::StatusOr<ResolvedCheckpoint> inner = absl::NotFoundError("");
      if (IsDirectory(prefix) && FileExists(JoinPath(prefix, ".index"))) {
        inner = ResolvedCheckpoint{Format::kV2, JoinPath(prefix, "."), {}, {}, ""};
      } else if (FileExists(prefix + ".index")) {
        inner = ResolvedCheckpoint{Format::kV2, prefix, {}, {}, ""};
      } else if (!IsDirectory(prefix)) {
        inner = ResolveCheckpoint(prefix);
      }
      if (!inner.ok()) {
        return absl::NotFoundError(StrCat(state, ": names ", prefix, ", which is not a checkpoint",
                                          inner.status().message().empty() ? "" : " (",
                                          SV(inner.status().message()),
                                          inner.status().message().empty() ? "" : ")"));
      }
      inner->state_dir = spec;
      for (auto& n : inner->notes) notes.push_back(std::move(n));
      inner->notes = std::move(notes);
      return inner;
    }
    std::vector<std::string> indexes = IndexFilesIn(spec);
    if (indexes.size() == 1) {
      const std::string& name = indexes[0];
      return v2(JoinPath(spec, name.size() == 6 ? "." : name.substr(0, name.size() - 6)));
    }
    if (indexes.size() > 1) {
      return absl::InvalidArgumentError(StrCat(spec, ": holds several checkpoints and no state file: ",
                                               absl::StrJoin(indexes, ", "), " (name one of them)"));
    }
    const std::string sm = JoinPath(spec, "variables/variables");
    if (FileExists(sm + ".index")) return v2(sm);
    // A single V1 checkpoint (one table file, or the shards of one).
    std::set<std::string> v1;
    static const Regex kShard = Regex::Fixed(R"((.*)-\d{5}-of-(\d{5}))");
    for (const DirEntry& e : listing) {
      const std::string path = JoinPath(spec, e.name);
      if (e.kind != EntryKind::kFile || !IsTableFile(path)) continue;
      std::vector<std::string> m;
      v1.insert(kShard.FullMatch(path, &m) ? StrCat(m[0], "-00000-of-", m[1]) : path);
    }
    if (v1.size() == 1) return ResolveCheckpoint(*v1.begin());
    if (v1.size() > 1) {
      return absl::InvalidArgumentError(StrCat(spec, ": holds several V1 checkpoints: ", absl::StrJoin(v1, ", "),
                                               " (name one of them)"));
    }
    return absl::NotFoundError(StrCat(spec, ": directory holds no checkpoint (no state file, no *.index)"));
  }
  r.format = Format::kV1;
  // 4. A V1 file, possibly one shard of a sharded V1 checkpoint.
  if (FileExists(spec) && IsTableFile(spec)) {
    static const Regex kSharded = Regex::Fixed(R"((.*)-(\d{5})-of-(\d{5}))");
    std::vector<std::string> m;
    if (kSharded.FullMatch(spec, &m)) {
      const std::string base = m[0];
      const int n = std::stoi(m[2]);
      for (int i = 0; i < n; ++i) {
        std::string f = absl::StrFormat("%s-%05d-of-%05d", base, i, n);
        if (!FileExists(f)) return absl::NotFoundError(StrCat(f, ": V1 shard missing"));
        r.v1_files.push_back(f);
      }
      r.prefix = absl::StrFormat("%s-?????-of-%05d", base, n);
      return r;
    }
    r.prefix = spec;
    r.v1_files = {spec};
    return r;
  }
  if (FileExists(spec)) {
    return DataLossAt("table.footer", spec, "", -1,
                      StrCat("not a checkpoint (no ", spec, ".index beside it, and not a V1 table file)"));
  }
  // 5. A V1 pattern.
  std::vector<std::string> files =
      Glob(spec.find_first_of("*?[") != std::string::npos ? spec : spec + "-?????-of-?????");
  if (!files.empty()) {
    for (const auto& f : files) {
      if (!IsTableFile(f)) return DataLossAt("table.footer", f, "", -1, "not a V1 checkpoint table");
    }
    r.prefix = spec;
    r.v1_files = std::move(files);
    return r;
  }
  // Unreachable is not absent: a directory on the way that cannot be searched.
  if (auto st = Storage::For(spec).Stat(spec + ".index"); absl::IsPermissionDenied(st.status())) {
    return ErrnoError(spec + ".index", "cannot open", EACCES);
  }
  return absl::NotFoundError(
      StrCat(spec, ": no checkpoint found (looked for ", spec, ".index, a directory, and V1 files)"));
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& spec,
                                                             std::vector<Finding>* findings) {
  TFCKPT_ASSIGN_OR_RETURN(ResolvedCheckpoint r, ResolveCheckpoint(spec));
  absl::StatusOr<std::unique_ptr<Checkpoint>> c =
      r.format == Format::kV2            ? OpenV2(r.prefix, findings)
      : r.format == Format::kSafetensors ? OpenSafetensors(r.prefix)
                                         : OpenV1(r.prefix, r.v1_files, findings);
  if (c.ok()) (*c)->info_.notes = std::move(r.notes);
  return c;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::OpenV2(const std::string& prefix,
                                                               std::vector<Finding>* findings) {
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->info_.format = Format::kV2;
  c->info_.prefix = prefix;
  c->info_.index_path = prefix + ".index";
  TFCKPT_ASSIGN_OR_RETURN(c->index_, TableReader::Open(c->info_.index_path));
  c->info_.index_size = c->index_->file_size();
  TFCKPT_RETURN_IF_ERROR(c->LoadV2Entries(*c->index_, findings));
  c->info_.index_has_snappy = c->index_->saw_snappy();
  return c;
}

absl::Status Checkpoint::ForEachIndexEntry(const TableReader::Visitor& visit) const {
  if (!index_) return absl::FailedPreconditionError(StrCat(info_.prefix, ": not a V2 checkpoint"));
  return index_->ForEach(visit);
}

absl::Status Checkpoint::LoadV2Entries(TableReader& table, std::vector<Finding>* findings) {
  const std::string& path = info_.index_path;
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
    if (e.shard_id() < 0 || e.shard_id() >= info_.num_shards) {
      return {"entry.shard", StrCat("entry \"", PrintableKey(key), "\" names data file ", e.shard_id(),
                                    " but the header has ", info_.num_shards)};
    }
    if (e.offset() < 0 || e.size() < 0) {
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
    }
    return {};
  };
  auto set_defect = [](TensorEntry& t, Defect d) {
    if (t.defect.empty() && !d.second.empty()) std::tie(t.defect_check, t.defect) = std::move(d);
  };

  bool have_header = false;
  pb::BundleEntryProto e;
  TFCKPT_RETURN_IF_ERROR(VisitTable(table, findings, [&](std::string_view key, std::string_view value, uint64_t block) {
    if (key.empty()) {
      raw_header_.assign(value);
      have_header = true;
      pb::BundleHeaderProto header;
      if (!header.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
        return DataLossAt("header.parse", path, "", block, "header is not a BundleHeaderProto");
      }
      TFCKPT_RETURN_IF_ERROR(Annotate(CheckVersion(header.version()), path));
      if (header.endianness() != pb::BundleHeaderProto::LITTLE && header.endianness() != pb::BundleHeaderProto::BIG) {
        return DataLossAt("header.endianness", path, "", block, StrCat("header has unknown endianness ", header.endianness()));
      }
      if (header.num_shards() < 0 || header.num_shards() > kMaxShards) {
        return DataLossAt("header.num-shards", path, "", block, StrCat("header has implausible num_shards ", header.num_shards()));
      }
      info_.num_shards = header.num_shards();
      info_.big_endian = header.endianness() == pb::BundleHeaderProto::BIG;
      info_.producer = header.version().producer();
      info_.min_consumer = header.version().min_consumer();
      return absl::OkStatus();
    }
    if (!have_header) return DataLossAt("header.missing", path, key, block, "index has no header entry (empty key) before tensors");
    // Slice keys sort before every name, so all slice entries are known by now. A
    // metadata entry listing far more slices than exist is refused before its slice list
    // is built (millions of listed slices would cost gigabytes); a few missing slices are
    // a defect of that tensor, reported by validate (slice.missing-entry).
    if (!IsSliceKey(key)) {
      const int64_t listed = CountSlicesField(value);
      if (listed > 2 * static_cast<int64_t>(slice_entries.size()) + 1000) {
        return DataLossAt("entry.slices", path, key, block,
                          StrCat("entry lists ", listed, " slices but the index holds only ", slice_entries.size(),
                                 " slice entries"));
      }
    }
    if (!e.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return DataLossAt("entry.parse", path, key, block, "entry is not a BundleEntryProto");
    }
    if (IsSliceKey(key)) {
      slice_entries[std::string(key)].entry = e;
      return absl::OkStatus();
    }
    auto shape = ShapeFromProto(e.shape());
    if (!shape.ok()) return DataLossAt("entry.shape", path, key, block, SV(shape.status().message()));
    TensorEntry& t = tensors_.emplace_back();
    t.name.assign(key);
    t.dtype = e.dtype();
    t.shape = std::move(*shape);
    if (e.slices_size() == 0) {
      StoredSlice& s = t.slices.emplace_back();
      s.region = Region::Full(t.shape);
      s.key = t.name;
      set_defect(t, stored(key, e, t.dtype, t.shape, &s.data));
      t.bytes = s.data.size;
    } else {
      t.partitioned = true;
      partitioned.emplace_back(tensors_.size() - 1, e);
    }
    return absl::OkStatus();
  }));
  if (!have_header) {
    absl::Status st = DataLossAt("header.missing", path, "", -1, "index has no header entry");
    if (findings == nullptr) return st;
    findings->push_back(FindingOf(st));
  }
  for (int32_t i = 0; i < info_.num_shards; ++i) info_.data_files.push_back(DataFileName(info_.prefix, i, info_.num_shards));
  data_files_.resize(info_.num_shards);

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

const TensorEntry* Checkpoint::Find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorEntry& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

absl::StatusOr<const ReadableFile*> Checkpoint::DataFile(int32_t shard) const {
  if (shard < 0 || shard >= info_.num_shards) {
    return absl::OutOfRangeError(StrCat(info_.index_path, ": no data file ", shard));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!data_files_[shard]) {
    auto f = Storage::For(info_.data_files[shard]).OpenForRead(info_.data_files[shard]);
    if (!f.ok()) {
      if (absl::IsNotFound(f.status())) {
        return Locate(absl::NotFoundError(StrCat("data file missing (the index lists ", info_.num_shards,
                                                 " data files)")),
                      "files.missing-data", info_.data_files[shard], "", -1);
      }
      return f.status();
    }
    data_files_[shard] = std::move(*f);
  }
  return data_files_[shard].get();
}

absl::StatusOr<TensorBytes> Checkpoint::Read(const TensorEntry& t, const StoredSlice& s, bool verify) const {
  if (!t.defect.empty()) {
    return DataLossAt(t.defect_check, info_.format == Format::kV2 ? info_.index_path : info_.prefix, t.name, -1,
                      t.defect);
  }
  if (info_.format == Format::kV1) return ReadV1(t, s);
  TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, DataFile(s.data.shard));
  const std::string label = PieceLabel(t, s);
  // A mapped file hands out views of its mapping; elsewhere the bytes are read into `read`.
  std::shared_ptr<std::string> read = file->mapping() ? nullptr : std::make_shared<std::string>();
  std::string unused;
  auto range = file->Range(s.data.offset, s.data.size, read ? read.get() : &unused);
  if (!range.ok()) {
    return DataLossAt("entry.bounds", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                      StrCat(label, "tensor of ", s.data.size, " bytes runs past the end of the file (",
                                   file->size(), " bytes)"));
  }
  const int64_t n = s.region.num_elements();
  if (verify && info_.format == Format::kV2) {
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

absl::Status Checkpoint::VerifyCrc(const TensorEntry& t, const StoredSlice& s, std::string* buffer) const {
  const DTypeInfo* dt = LookupDType(t.dtype);
  if (info_.format == Format::kSafetensors) {  // no checksums: bounds only
    auto r = Read(t, s, /*verify=*/false);
    return r.ok() ? absl::OkStatus() : r.status();
  }
  if (info_.format != Format::kV2 || info_.big_endian || dt == nullptr || dt->element_size == 0 || !t.defect.empty()) {
    auto r = Read(t, s, /*verify=*/true);
    return r.ok() ? absl::OkStatus() : r.status();
  }
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

absl::StatusOr<std::string_view> Checkpoint::ReadRange(const TensorEntry& t, const StoredSlice& s, uint64_t begin,
                                                       uint64_t end, std::string* buffer, TensorBytes* owner) const {
  if (info_.format != Format::kV1 && !info_.big_endian && t.defect.empty()) {
    TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, DataFile(s.data.shard));
    if (end > s.data.size || s.data.offset > file->size() || end > file->size() - s.data.offset) {
      return DataLossAt("entry.bounds", file->path(), t.name, static_cast<int64_t>(s.data.offset + begin),
                        StrCat(PieceLabel(t, s), "range runs past the end of the file"));
    }
    buffer->resize(static_cast<size_t>(end - begin));
    TFCKPT_RETURN_IF_ERROR(file->ReadAt(s.data.offset + begin, buffer->size(), buffer->data()));
    return std::string_view(*buffer);
  }
  if (owner->data.data() == nullptr) {
    TFCKPT_ASSIGN_OR_RETURN(*owner, Read(t, s, /*verify=*/false));
  }
  return owner->data.substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
}

}  // namespace tfckpt
