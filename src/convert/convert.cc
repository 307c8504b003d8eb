// tfckpt convert: safetensors and .npz writers (see convert.h).
#include "convert/convert.h"

#include "format/npz/npy.h"

#include <zip.h>

#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/float_convert.h"
#include "model/tensor_encoding.h"
#include "copy/copy.h"
#include "tfckpt/dtype.h"
#include "kvstore/local/tracked.h"
#include "run/run.h"
#include "model/object_graph.h"
#include "base/path.h"
#include "format/safetensors/safetensors.h"
#include "tfckpt/status.h"

namespace tfckpt {

namespace {

struct Planned {
  const TensorEntry* t = nullptr;
  std::string name;   // in the output
  int32_t dtype = 0;  // in the output (after casts)
  uint64_t bytes = 0; // in the output (strings: payload estimate)
};

// Tensors that pass the rules, renamed and cast; `refuse(t, dtype)` gives why the format
// cannot hold one ("" when it can).
absl::StatusOr<std::vector<Planned>> PlanTensors(const Checkpoint& c, const ConvertOptions& options,
                                                 const std::function<std::string(const TensorEntry&, int32_t)>& refuse,
                                                 ConvertReport* report) {
  TFCKPT_ASSIGN_OR_RETURN(NameRules rules, NameRules::Create(options.include, options.exclude, options.renames));
  std::vector<Planned> out;
  std::map<std::string, std::string> taken;  // output name -> input name
  for (const TensorEntry& t : c.tensors()) {
    if (!rules.Selected(t.name)) continue;
    if (!t.defect.empty()) {
      return DataLossAt(t.defect_check, c.info().format == Format::kV2 ? c.info().index_path : c.info().prefix, t.name,
                        -1, t.defect);
    }
    Planned p;
    p.t = &t;
    p.name = rules.Rename(t.name);
    auto cast = options.casts.find(t.dtype);
    p.dtype = cast == options.casts.end() ? t.dtype : cast->second;
    const std::string why = refuse(t, p.dtype);
    if (!why.empty()) {
      report->skipped.push_back(StrCat(t.name, ": ", why));
      continue;
    }
    const DTypeInfo* info = LookupDType(p.dtype);
    p.bytes = info->element_size > 0 ? static_cast<uint64_t>(NumElements(t.shape).value_or(0)) * info->element_size
                                     : t.bytes;
    auto [it, inserted] = taken.emplace(p.name, t.name);
    if (!inserted) {
      return absl::InvalidArgumentError(
          StrCat("--rename makes \"", it->second, "\" and \"", t.name, "\" both \"", p.name, "\""));
    }
    report->sources.emplace(p.name, t.name);
    out.push_back(std::move(p));
  }
  if (options.strict && !report->skipped.empty()) {
    return absl::InvalidArgumentError(StrCat("--strict: ", Count(report->skipped.size(), "tensor"), " cannot be converted: ",
                                             absl::StrJoin(report->skipped, "; ")));
  }
  if (out.empty()) return absl::InvalidArgumentError("nothing to write: no tensor passes the filters");
  std::sort(out.begin(), out.end(), [](const Planned& a, const Planned& b) { return a.name < b.name; });
  return out;
}

std::string SourceFormat(const Checkpoint& c) {
  switch (c.info().format) {
    case Format::kV2: return "tensorflow-v2";
    case Format::kV1: return "tensorflow-v1";
    case Format::kSafetensors: return "safetensors";
    case Format::kNpz: return "npz";
  }
  return "";
}

// Outputs may never be input files; existing outputs need --force.
// REQUIRES: `paths` not empty (all on one storage).
absl::Status RefuseExisting(const Checkpoint& c, const std::vector<std::string>& paths, bool overwrite) {
  TFCKPT_RETURN_IF_ERROR(Storage::For(paths.front()).CheckNotInputs(paths, FilesOf(c.info())));
  if (overwrite) return absl::OkStatus();
  for (const auto& p : paths) {
    if (FileExists(p)) return absl::AlreadyExistsError(StrCat(p, ": output exists (use --force to replace it)"));
  }
  return absl::OkStatus();
}

class SafetensorsSink : public PieceSink {
 public:
  explicit SafetensorsSink(SafetensorsWriter& w) : w_(w) {}
  absl::Status Append(std::string_view bytes) override { return w_.Append(bytes); }
  absl::Status AppendFrom(const ReadableFile& src, uint64_t offset, std::string_view bytes) override {
    return w_.AppendFrom(src, offset, bytes.size());
  }

 private:
  SafetensorsWriter& w_;
};

class StringSink : public PieceSink {
 public:
  explicit StringSink(std::string* out) : out_(out) {}
  absl::Status Append(std::string_view bytes) override {
    out_->append(bytes);
    return absl::OkStatus();
  }

 private:
  std::string* out_;
};

// Copies region `r` of `t` into `sink`, casting to `dtype` when it differs.
absl::Status CopyCast(const Checkpoint& c, const TensorEntry& t, const Region& r, int32_t dtype, PieceSink& sink,
                      std::string* buf, std::atomic<uint64_t>* progress) {
  if (dtype == t.dtype) return CopyRegion(c, t, r, sink, buf, progress, /*verify_sources=*/true);
  CastSink cast(t.dtype, dtype, sink);
  return CopyRegion(c, t, r, cast, buf, progress, /*verify_sources=*/true);
}

}  // namespace

absl::StatusOr<std::pair<int32_t, int32_t>> ParseCast(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos) return absl::InvalidArgumentError(StrCat("--cast \"", text, "\": expected FROM=TO"));
  auto from = ParseDType(text.substr(0, eq));
  auto to = ParseDType(text.substr(eq + 1));
  if (!from || !to) return absl::InvalidArgumentError(StrCat("--cast \"", text, "\": unknown dtype"));
  if (!CastSupported(static_cast<int32_t>(*from), static_cast<int32_t>(*to))) {
    return absl::InvalidArgumentError(StrCat("--cast \"", text,
                                             "\": not offered (float32=bfloat16, float32=float16, float32=float64, "
                                             "bfloat16=float32, float16=float32, float64=float32)"));
  }
  return std::make_pair(static_cast<int32_t>(*from), static_cast<int32_t>(*to));
}

// ---------------------------------------------------------------------------------------
// safetensors

absl::StatusOr<ConvertReport> WriteSafetensors(const Checkpoint& c, const std::string& out,
                                               const ConvertOptions& options) {
  ConvertReport report;
  auto refuse = [](const TensorEntry& t, int32_t dtype) -> std::string {
    if (t.name == kObjectGraphKey) return "the object graph (no safetensors equivalent)";
    if (t.dtype == static_cast<int32_t>(DType::kString)) return "string tensor";
    if (t.dtype == static_cast<int32_t>(DType::kVariant)) return "variant tensor";
    if (!SafetensorsDTypeName(dtype)) return StrCat(DTypeName(dtype), " has no safetensors dtype");
    return "";
  };
  TFCKPT_ASSIGN_OR_RETURN(std::vector<Planned> plan, PlanTensors(c, options, refuse, &report));
  // Files: everything in `out`, or packed in name order under max_file_size.
  std::vector<std::vector<const Planned*>> groups(1);
  uint64_t in_group = 0;
  for (const Planned& p : plan) {
    if (options.max_file_size > 0 && !groups.back().empty() && in_group + p.bytes > options.max_file_size) {
      groups.emplace_back();
      in_group = 0;
    }
    if (options.max_file_size > 0 && p.bytes > options.max_file_size) {
      report.notes.push_back(StrCat("\"", p.name, "\" (", p.bytes, " bytes) is larger than --max-file-size; it gets a file of its own"));
    }
    groups.back().push_back(&p);
    in_group += p.bytes;
  }
  std::string stem = out;
  if (absl::EndsWith(stem, ".safetensors")) stem.resize(stem.size() - std::string(".safetensors").size());
  std::vector<std::string> paths;
  const std::string index_path = stem + ".safetensors.index.json";
  for (size_t i = 0; i < groups.size(); ++i) {
    paths.push_back(groups.size() == 1 ? out
                                       : StrCat(stem, absl::StrFormat("-%05d-of-%05d.safetensors", i + 1, groups.size())));
  }
  std::vector<std::string> all = paths;
  if (groups.size() > 1) all.push_back(index_path);
  TFCKPT_RETURN_IF_ERROR(RefuseExisting(c, all, options.overwrite));
  TFCKPT_RETURN_IF_ERROR(Storage::For(out).CreateParentDirectories(out));
  uint64_t total = 0;
  for (const Planned& p : plan) total += p.bytes;
  std::atomic<uint64_t>* progress = options.start_progress ? options.start_progress(total, "writing") : nullptr;
  const std::map<std::string, std::string> metadata = {
      {"source", c.info().prefix}, {"source_format", SourceFormat(c)}, {"converted_by", "tfckpt"}};
  std::vector<std::unique_ptr<SafetensorsWriter>> writers;
  std::string buf;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t i = 0; i < groups.size(); ++i) {
    std::vector<SafetensorsWriter::Entry> entries;
    for (const Planned* p : groups[i]) entries.push_back({p->name, p->dtype, p->t->shape});
    TFCKPT_ASSIGN_OR_RETURN(auto w, SafetensorsWriter::Create(paths[i], entries, metadata));
    SafetensorsSink sink(*w);
    for (const Planned* p : groups[i]) {
      TFCKPT_RETURN_IF_ERROR(CopyCast(c, *p->t, Region::Full(p->t->shape), p->dtype, sink, &buf, progress));
      TFCKPT_RETURN_IF_ERROR(Reached("piece-written"));
      weight_map[p->name] = Basename(paths[i]);
      ++report.tensors;
      report.bytes += p->bytes;
    }
    TFCKPT_RETURN_IF_ERROR(w->Finish());
    writers.push_back(std::move(w));
  }
  std::unique_ptr<WritableFile> index;
  if (groups.size() > 1) {
    nlohmann::ordered_json j = {{"metadata", {{"total_size", report.bytes}, {"source", c.info().prefix},
                                              {"source_format", SourceFormat(c)}, {"converted_by", "tfckpt"}}},
                                {"weight_map", weight_map}};
    TFCKPT_ASSIGN_OR_RETURN(index, Storage::For(index_path).Create(index_path));
    TFCKPT_RETURN_IF_ERROR(index->Append(j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n"));
    TFCKPT_RETURN_IF_ERROR(index->Close());
  }
  for (auto& w : writers) TFCKPT_RETURN_IF_ERROR(w->Commit());
  if (index) TFCKPT_RETURN_IF_ERROR(index->Commit());
  report.files = all;
  return report;
}

// ---------------------------------------------------------------------------------------
// npz

namespace {

// The .npy preamble: magic, version, header length, the header dict padded with spaces
// and ended by '\n' so that the data starts at a multiple of 64.
std::string NpyHeader(const std::string& descr, const Shape& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) StrAppend(&dims, i ? ", " : "", shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string dict = StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", dims, "), }");
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(dict.size());
  for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  return out + dict;
}

// One archive member, produced on demand while libzip reads it (pull): the .npy header,
// then the tensor in chunks of about 8 MiB (fixed-size dtypes) or its padded strings.
struct Member {
  const Checkpoint* c = nullptr;
  const Planned* p = nullptr;
  std::atomic<uint64_t>* progress = nullptr;
  std::string header;
  std::vector<Region> chunks;
  std::string strings;  // the |S<n> bytes of a string tensor
  uint64_t size = 0;    // of the member
  // Reading state.
  size_t next = 0;      // 0 = header, 1 = strings or chunks[0], ...
  std::string pending;
  size_t pos = 0;
  std::string buf;
  absl::Status status;
  zip_error_t error;

  absl::Status Fill() {
    pending.clear();
    pos = 0;
    const bool is_string = p->t->dtype == static_cast<int32_t>(DType::kString);
    if (next == 0) {
      pending = header;
    } else if (is_string) {
      if (next == 1) pending.swap(strings);
    } else if (next - 1 < chunks.size()) {
      StringSink sink(&pending);
      TFCKPT_RETURN_IF_ERROR(CopyCast(*c, *p->t, chunks[next - 1], p->dtype, sink, &buf, progress));
    }
    ++next;
    return absl::OkStatus();
  }

  zip_int64_t Read(char* data, zip_uint64_t len) {
    zip_uint64_t done = 0;
    while (done < len) {
      if (pos == pending.size()) {
        if (next > chunks.size() + 1) break;
        status = Fill();
        if (!status.ok()) {
          zip_error_set(&error, ZIP_ER_READ, EIO);
          return -1;
        }
        continue;
      }
      const size_t n = static_cast<size_t>(std::min<zip_uint64_t>(len - done, pending.size() - pos));
      std::memcpy(data + done, pending.data() + pos, n);
      pos += n;
      done += n;
    }
    return static_cast<zip_int64_t>(done);
  }
};

zip_int64_t MemberCallback(void* state, void* data, zip_uint64_t len, zip_source_cmd_t cmd) {
  Member* m = static_cast<Member*>(state);
  switch (cmd) {
    case ZIP_SOURCE_OPEN:
      m->next = 0;
      m->pending.clear();
      m->pos = 0;
      return 0;
    case ZIP_SOURCE_READ: return m->Read(static_cast<char*>(data), len);
    case ZIP_SOURCE_CLOSE:
      // A member is written (a fault point: the run may be asked to stop here).
      if (m->status.ok()) m->status = Reached("piece-written");
      if (!m->status.ok()) {
        zip_error_set(&m->error, ZIP_ER_READ, EIO);
        return -1;
      }
      return 0;
    case ZIP_SOURCE_STAT: {
      zip_stat_t* st = static_cast<zip_stat_t*>(data);
      zip_stat_init(st);
      st->size = m->size;
      st->mtime = 315532800;  // 1980-01-01: archives do not depend on the clock
      st->comp_method = ZIP_CM_STORE;
      st->valid |= ZIP_STAT_SIZE | ZIP_STAT_MTIME;
      return sizeof(zip_stat_t);
    }
    case ZIP_SOURCE_ERROR: return zip_error_to_data(&m->error, data, len);
    case ZIP_SOURCE_FREE: return 0;
    case ZIP_SOURCE_SUPPORTS:
      return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
                                            ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
    default:
      zip_error_set(&m->error, ZIP_ER_OPNOTSUPP, 0);
      return -1;
  }
}

// Where libzip writes the archive before it becomes `out` (libzip writes by path, and
// seeks back to rewrite each member's local header once its size and CRC are known, so an
// archive cannot be streamed into an object store's upload): beside `out`, or, for an
// object's URL, in the local temporary directory ($TMPDIR, else /tmp).
std::string NpzTemporaryName(const std::string& out) {
  if (!IsUrl(out)) return TemporaryName(out);
  const char* dir = std::getenv("TMPDIR");
  return TemporaryName(JoinPath(dir != nullptr && *dir != '\0' ? dir : "/tmp", Basename(out)));
}

// The name libzip writes an archive under before it becomes `out`, and libzip's own
// temporaries beside it (NAME.XXXXXX), tracked from before zip_close creates them.
// Destroyed uncommitted, removes them.
class NpzTemporary {
 public:
  explicit NpzTemporary(const std::string& out) : out_(out), path_(NpzTemporaryName(out)) {
    file_ = TrackCreated(path_);
    libzip_ = TrackCreated(path_ + ".", TrackKind::kFilesStartingWith);
  }
  ~NpzTemporary() {
    ForgetCreated(libzip_);  // libzip removes its temporary when zip_close fails
    RemoveLocal();
  }
  const std::string& path() const { return path_; }
  // Locally renamed into place; for a URL, uploaded (its progress a phase of its own,
  // when `start_progress` is set), and the local copy removed.
  absl::Status Commit(const ConvertOptions::StartProgress& start_progress) {
    if (IsUrl(out_)) {
      TFCKPT_RETURN_IF_ERROR(Upload(start_progress));
      RemoveLocal();
      return absl::OkStatus();
    }
    TFCKPT_RETURN_IF_ERROR(MoveIntoPlace(path_, file_, out_));
    file_ = 0;
    return absl::OkStatus();
  }

 private:
  // The archive copied into an upload that appears whole under `out` at its Commit() (an
  // output of the run from then on, removed if the run fails: storage.h). A failure
  // before abandons the upload.
  absl::Status Upload(const ConvertOptions::StartProgress& start_progress) {
    TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> in, Storage::Local().OpenForRead(path_));
    TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> up, Storage::For(out_).Create(out_));
    std::atomic<uint64_t>* progress = start_progress ? start_progress(in->size(), "uploading") : nullptr;
    constexpr uint64_t kStep = 8 << 20;  // (progress between steps; the upload keeps its own parts)
    for (uint64_t at = 0; at < in->size(); at += kStep) {
      TFCKPT_RETURN_IF_ERROR(CheckStop());
      const uint64_t n = std::min(kStep, in->size() - at);
      TFCKPT_RETURN_IF_ERROR(up->AppendFrom(*in, at, n));
      if (progress != nullptr) *progress += n;
    }
    TFCKPT_RETURN_IF_ERROR(up->Close());
    return up->Commit();
  }

  void RemoveLocal() {
    if (file_ == 0) return;
    (void)Storage::Local().Remove(path_);
    ForgetCreated(file_);
    file_ = 0;
  }

  std::string out_, path_;
  uint64_t file_ = 0, libzip_ = 0;
};

}  // namespace

absl::StatusOr<ConvertReport> WriteNpz(const Checkpoint& c, const std::string& out, const ConvertOptions& options) {
  ConvertReport report;
  std::vector<std::string> refused;
  auto refuse = [&](const TensorEntry& t, int32_t dtype) -> std::string {
    if (t.name == kObjectGraphKey) return "the object graph (not a value)";
    if (t.dtype == static_cast<int32_t>(DType::kVariant)) return "variant tensor";
    if (t.dtype == static_cast<int32_t>(DType::kString)) return "";
    if (dtype == static_cast<int32_t>(DType::kBFloat16)) {
      refused.push_back(t.name);
      return "";
    }
    if (!NpyDescr(dtype)) return StrCat(DTypeName(dtype), " has no NumPy dtype");
    return "";
  };
  TFCKPT_ASSIGN_OR_RETURN(std::vector<Planned> plan, PlanTensors(c, options, refuse, &report));
  if (!refused.empty()) {
    return absl::InvalidArgumentError(StrCat("bfloat16 has no NumPy dtype: ", Count(refused.size(), "tensor"), " (",
                                             refused.front(), refused.size() > 1 ? ", ..." : "",
                                             "); add --cast bfloat16=float32"));
  }
  TFCKPT_RETURN_IF_ERROR(RefuseExisting(c, {out}, options.overwrite));
  TFCKPT_RETURN_IF_ERROR(Storage::For(out).CreateParentDirectories(out));
  std::vector<std::unique_ptr<Member>> members;
  uint64_t total = 0;
  std::string buf;
  for (const Planned& p : plan) {
    auto m = std::make_unique<Member>();
    m->c = &c;
    m->p = &p;
    zip_error_init(&m->error);
    if (p.t->dtype == static_cast<int32_t>(DType::kString)) {
      // Every element padded with NULs to the longest (numpy strips trailing NULs, so
      // values that end in one do not read back the same: said in a note).
      std::vector<TensorBytes> keep;
      TFCKPT_ASSIGN_OR_RETURN(std::vector<std::string_view> all,
                              GatherStrings(c, *p.t, Region::Full(p.t->shape), &keep));
      size_t width = 1;
      bool trailing_nul = false;
      for (auto e : all) {
        width = std::max(width, e.size());
        trailing_nul = trailing_nul || (!e.empty() && e.back() == '\0');
      }
      if (trailing_nul) report.notes.push_back(StrCat("\"", p.t->name, "\": values ending in NUL bytes lose them in NumPy"));
      m->strings.reserve(all.size() * width);
      for (auto e : all) {
        m->strings.append(e);
        m->strings.append(width - e.size(), '\0');
      }
      m->header = NpyHeader(StrCat("|S", width), p.t->shape);
      m->size = m->header.size() + m->strings.size();
    } else {
      const int esize = LookupDType(p.t->dtype)->element_size;
      TFCKPT_RETURN_IF_ERROR(ForEachChunk(Region::Full(p.t->shape), esize, 8 << 20, [&](const Region& r) {
        m->chunks.push_back(r);
        return absl::OkStatus();
      }));
      m->header = NpyHeader(*NpyDescr(p.dtype), p.t->shape);
      m->size = m->header.size() + p.bytes;
    }
    total += m->size;
    members.push_back(std::move(m));
  }
  std::atomic<uint64_t>* progress = options.start_progress ? options.start_progress(total, "writing") : nullptr;
  for (auto& m : members) m->progress = progress;
  // libzip writes the archive to TEMP.XXXXXX (its own temporary) and renames that to
  // TEMP at zip_close; TEMP is ours (NpzTemporaryName) and is renamed to `out` after, or
  // uploaded to it and removed. Both are tracked, so an interrupt at any point leaves
  // neither.
  NpzTemporary temp(out);
  int err = 0;
  zip_t* za = zip_open(temp.path().c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  if (za == nullptr) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, err);
    absl::Status s = absl::UnavailableError(StrCat(out, ": cannot create (", zip_error_strerror(&ze), ")"));
    zip_error_fini(&ze);
    return s;
  }
  for (auto& m : members) {
    zip_source_t* src = zip_source_function(za, MemberCallback, m.get());
    if (src == nullptr) {
      zip_discard(za);
      return absl::InternalError(StrCat(out, ": ", zip_strerror(za)));
    }
    const std::string member = m->p->name + ".npy";
    const zip_int64_t idx = zip_file_add(za, member.c_str(), src, ZIP_FL_ENC_UTF_8);
    if (idx < 0) {
      zip_source_free(src);
      const std::string why = zip_strerror(za);
      zip_discard(za);
      return absl::InvalidArgumentError(StrCat(out, ": member \"", member, "\": ", why));
    }
    zip_set_file_compression(za, static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0);
    zip_file_set_mtime(za, static_cast<zip_uint64_t>(idx), 315532800, 0);
    ++report.tensors;
    report.bytes += m->p->bytes;
  }
  if (zip_close(za) != 0) {
    for (auto& m : members) {
      if (!m->status.ok()) {
        zip_discard(za);
        return m->status;
      }
    }
    const std::string why = zip_strerror(za);
    const int sys_err = zip_error_code_system(zip_get_error(za));
    const bool full = zip_error_system_type(zip_get_error(za)) == ZIP_ET_SYS &&
                      (sys_err == ENOSPC || sys_err == EDQUOT || sys_err == EFBIG);
    zip_discard(za);
    // For an object's URL the archive is built locally first: the error names where (a full
    // or missing $TMPDIR is not the store's fault).
    const std::string what =
        IsUrl(out) ? StrCat("cannot write the archive in ", temp.path()) : "cannot write the archive";
    if (full) return ErrnoError(out, what, sys_err);
    return absl::UnavailableError(StrCat(out, ": ", what, " (", why, ")"));
  }
  TFCKPT_RETURN_IF_ERROR(Reached("npz-written"));
  TFCKPT_RETURN_IF_ERROR(temp.Commit(options.start_progress));
  report.files = {out};
  return report;
}

}  // namespace tfckpt
