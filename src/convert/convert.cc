// tfckpt convert: safetensors and .npz writers (see convert.h).
#include "convert/convert.h"

#include "format/npz/npy.h"
#include "format/npz/stored_zip.h"

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
#include "tfckpt/commands.h"
#include "tfckpt/dtype.h"
#include "publish/publication.h"
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

const std::vector<std::string>& CastWords() {
  static const auto* words = [] {
    auto* out = new std::vector<std::string>;
    const DType floats[] = {DType::kFloat, DType::kBFloat16, DType::kHalf, DType::kDouble};
    for (DType from : floats) {
      for (DType to : floats) {
        if (CastSupported(static_cast<int32_t>(from), static_cast<int32_t>(to))) {
          out->push_back(StrCat(DTypeName(static_cast<int32_t>(from)), "=", DTypeName(static_cast<int32_t>(to))));
        }
      }
    }
    return out;
  }();
  return *words;
}

absl::StatusOr<std::pair<int32_t, int32_t>> ParseCast(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos) return absl::InvalidArgumentError(StrCat("--cast \"", text, "\": expected FROM=TO"));
  auto from = ParseDType(text.substr(0, eq));
  auto to = ParseDType(text.substr(eq + 1));
  if (!from || !to) return absl::InvalidArgumentError(StrCat("--cast \"", text, "\": unknown dtype"));
  if (!CastSupported(static_cast<int32_t>(*from), static_cast<int32_t>(*to))) {
    return absl::InvalidArgumentError(StrCat("--cast \"", text,
                                             "\": not offered (", absl::StrJoin(CastWords(), ", "), ")"));
  }
  return std::make_pair(static_cast<int32_t>(*from), static_cast<int32_t>(*to));
}

// ---------------------------------------------------------------------------------------
// safetensors

namespace {

// The tensors of `plan`, packed in name order into files: everything in one, or, with
// options.max_file_size, files of at most that many data bytes (a larger tensor alone).
std::vector<std::vector<const Planned*>> GroupIntoFiles(const std::vector<Planned>& plan,
                                                        const ConvertOptions& options, ConvertReport* report) {
  std::vector<std::vector<const Planned*>> groups(1);
  uint64_t in_group = 0;
  for (const Planned& p : plan) {
    if (options.max_file_size > 0 && !groups.back().empty() && in_group + p.bytes > options.max_file_size) {
      groups.emplace_back();
      in_group = 0;
    }
    if (options.max_file_size > 0 && p.bytes > options.max_file_size) {
      report->notes.push_back(StrCat("\"", p.name, "\" (", p.bytes,
                                     " bytes) is larger than --max-file-size; it gets a file of its own"));
    }
    groups.back().push_back(&p);
    in_group += p.bytes;
  }
  return groups;
}

// The safetensors files' names: `out`, or STEM-0000i-of-0000K.safetensors for several.
std::vector<std::string> SafetensorsPaths(const std::string& out, const std::string& stem, size_t n) {
  std::vector<std::string> paths;
  for (size_t i = 0; i < n; ++i) {
    paths.push_back(n == 1 ? out : StrCat(stem, absl::StrFormat("-%05d-of-%05d.safetensors", i + 1, n)));
  }
  return paths;
}

// The safetensors files laid out (their headers written): each tensor's parts, one unit of
// work each, in their places.
struct SafetensorsLayout {
  std::vector<std::unique_ptr<SafetensorsWriter>> writers;
  struct Part {
    const Planned* p;
    size_t file;
    Region region;
    uint64_t offset;  // in the file
    // Where the file took a plan of copies inside the store: the part's, never read here
    // (the verification reads the output once and proves it by the input's CRCs).
    std::vector<PlannedCopy> copies;
  };
  std::vector<Part> parts;
  std::vector<WorkUnit> units;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
};

// File `i` of `layout`: created with `group`'s tensors, its parts and units added, the
// copies inside the store planned where the input and the file are objects of one store
// (the header, cast tensors and small pieces around the copies go up from here), its
// header written.
absl::Status LayOutSafetensorsFile(const Checkpoint& c, const std::vector<const Planned*>& group, size_t i,
                                   const Location& at, const std::map<std::string, std::string>& metadata,
                                   const ConvertOptions& options, SafetensorsLayout* layout, ConvertReport* report) {
  const std::string& path = at.path();
  std::vector<SafetensorsWriter::Entry> entries;
  for (const Planned* p : group) entries.push_back({p->name, p->dtype, p->t->shape});
  TFCKPT_ASSIGN_OR_RETURN(auto w, SafetensorsWriter::Create(at, entries, metadata, /*header_later=*/true));
  const bool in_store = options.server_side != ServerSideCopy::kNever && IsUrl(path);
  std::vector<PlannedCopy> copies;  // the tensors' bytes that move unchanged (not cast)
  const size_t first = layout->parts.size();
  for (size_t k = 0; k < group.size(); ++k) {
    const Planned* p = group[k];
    const int64_t esize = LookupDType(p->dtype)->element_size;
    for (const Region& r : RowParts(*p->t)) {
      const uint64_t at = w->DataOffset(k) + RowPartOffset(p->t->shape, r, esize);
      layout->parts.push_back({p, i, r, at, {}});
      layout->units.push_back({static_cast<uint64_t>(r.num_elements() * esize), {static_cast<int32_t>(i)}});
      if (in_store && p->dtype == p->t->dtype) {
        TFCKPT_ASSIGN_OR_RETURN(RegionCopies some, PlannedCopiesOf(c, *p->t, r, at));
        copies.insert(copies.end(), some.copies.begin(), some.copies.end());
        layout->parts.back().copies = std::move(some.copies);
      }
    }
    layout->weight_map[p->name] = Basename(path);
    ++report->tensors;
    report->bytes += p->bytes;
  }
  if (in_store) {
    TFCKPT_ASSIGN_OR_RETURN(const bool took, w->PlanCopies(copies, options.server_side));
    for (size_t k = first; k < layout->parts.size() && !took; ++k) layout->parts[k].copies.clear();
  }
  TFCKPT_RETURN_IF_ERROR(w->WriteHeader());
  layout->writers.push_back(std::move(w));
  return absl::OkStatus();
}

// Part `u` of `layout` copied into its place (cast where it is).
absl::Status CopySafetensorsPart(const Checkpoint& c, SafetensorsLayout& layout, size_t u,
                                 std::atomic<uint64_t>* progress) {
  thread_local std::string buf;
  const SafetensorsLayout::Part& part = layout.parts[u];
  WritableFile& file = layout.writers[part.file]->file();
  if (!part.copies.empty()) {
    for (const PlannedCopy& copy : part.copies) {
      TFCKPT_RETURN_IF_ERROR(file.CopyAt(copy.offset, *copy.src, copy.src_offset, copy.size));
    }
    if (progress != nullptr) *progress += layout.units[u].bytes;
    return Reached("piece-written");
  }
  PositionalSink sink(file, part.offset);
  TFCKPT_RETURN_IF_ERROR(CopyCast(c, *part.p->t, part.region, part.p->dtype, sink, &buf, progress));
  return Reached("piece-written");
}

// A safetensors set's index (`path`, STEM.safetensors.index.json), written and closed.
absl::StatusOr<std::unique_ptr<WritableFile>> WriteSafetensorsIndex(const Checkpoint& c, const Location& at,
                                                                    const SafetensorsLayout& layout, uint64_t bytes) {
  nlohmann::ordered_json j = {{"metadata", {{"total_size", bytes}, {"source", c.info().prefix},
                                            {"source_format", SourceFormat(c)}, {"converted_by", "tfckpt"}}},
                              {"weight_map", layout.weight_map}};
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> index, at.store().Create(at.path()));
  TFCKPT_RETURN_IF_ERROR(index->Append(j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n"));
  TFCKPT_RETURN_IF_ERROR(index->Close());
  return index;
}

std::string SafetensorsRefusal(const TensorEntry& t, int32_t dtype) {
  if (t.name == kObjectGraphKey) return "the object graph (no safetensors equivalent)";
  if (t.dtype == static_cast<int32_t>(DType::kString)) return "string tensor";
  if (t.dtype == static_cast<int32_t>(DType::kVariant)) return "variant tensor";
  if (!SafetensorsDTypeName(dtype)) return StrCat(DTypeName(dtype), " has no safetensors dtype");
  return "";
}

}  // namespace

absl::StatusOr<ConvertReport> WriteSafetensors(const Checkpoint& c, const std::string& out,
                                               const ConvertOptions& options) {
  ConvertReport report;
  TFCKPT_ASSIGN_OR_RETURN(std::vector<Planned> plan, PlanTensors(c, options, SafetensorsRefusal, &report));
  const std::vector<std::vector<const Planned*>> groups = GroupIntoFiles(plan, options, &report);
  std::string stem = out;
  if (absl::EndsWith(stem, ".safetensors")) stem.resize(stem.size() - std::string(".safetensors").size());
  const std::string index_path = stem + ".safetensors.index.json";
  // The output's files: all in the store of `out`, resolved here once.
  const Location at = Location::Of(out);
  std::vector<Location> all;
  for (const std::string& p : SafetensorsPaths(out, stem, groups.size())) all.push_back(at.At(p));
  if (groups.size() > 1) all.push_back(at.At(index_path));
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Publication> publication,
                          Publication::Files(all, FilesOf(c.info()), options.overwrite));
  uint64_t total = 0;
  for (const Planned& p : plan) total += p.bytes;
  std::atomic<uint64_t>* progress = options.start_progress ? options.start_progress(total, "writing") : nullptr;
  // A safetensors input's own metadata is kept ({"format": "pt"}, a model's config, ...);
  // tfckpt's three keys say where the file came from (replacing same-named ones).
  std::map<std::string, std::string> metadata = c.info().safetensors_metadata;
  metadata["source"] = c.info().prefix;
  metadata["source_format"] = SourceFormat(c);
  metadata["converted_by"] = "tfckpt";
  // Every file laid out (its header written) first; then the tensors are copied into their
  // places by units of work, largest first, on options.jobs threads.
  SafetensorsLayout layout;
  for (size_t i = 0; i < groups.size(); ++i) {
    TFCKPT_RETURN_IF_ERROR(LayOutSafetensorsFile(c, groups[i], i, all[i], metadata, options, &layout, &report));
    publication->Add(layout.writers.back()->file());
  }
  TFCKPT_RETURN_IF_ERROR(RunUnits(layout.units, options.jobs, [&](size_t u, const std::atomic<bool>&) {
    return CopySafetensorsPart(c, layout, u, progress);
  }));
  TFCKPT_RETURN_IF_ERROR(publication->PlantFault(layout.writers.front()->file(), 0, UINT64_MAX));  // (tests)
  for (auto& w : layout.writers) TFCKPT_RETURN_IF_ERROR(w->Finish());
  std::unique_ptr<WritableFile> index;
  if (groups.size() > 1) {
    TFCKPT_ASSIGN_OR_RETURN(index, WriteSafetensorsIndex(c, all.back(), layout, report.bytes));
    publication->Add(*index);
  }
  TFCKPT_RETURN_IF_ERROR(publication->CommitFiles());
  for (const Location& f : all) report.files.push_back(f.path());
  if (options.after_commit) {
    TFCKPT_RETURN_IF_ERROR(publication->CheckCommitted([&] { return options.after_commit(report); }));
  }
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

// Computes the zip CRC-32 of the bytes on their way to `next` (in cache: the copy engine
// hands over at most 8 MiB at a time, 1 MiB for bytes moved in-kernel).
class Crc32Sink : public PieceSink {
 public:
  explicit Crc32Sink(PieceSink& next) : next_(next) {}
  absl::Status Append(std::string_view bytes) override {
    crc_ = zip::Crc32(crc_, bytes.data(), bytes.size());
    return next_.Append(bytes);
  }
  absl::Status AppendFrom(const ReadableFile& src, uint64_t src_offset, std::string_view bytes) override {
    crc_ = zip::Crc32(crc_, bytes.data(), bytes.size());
    return next_.AppendFrom(src, src_offset, bytes);
  }
  uint32_t crc() const { return crc_; }

 private:
  PieceSink& next_;
  uint32_t crc_ = 0;
};

// One member of the archive: its .npy header, then the tensor's bytes (strings padded
// with NULs to `width` bytes each).
struct NpyMember {
  const Planned* p = nullptr;
  std::string header;
  size_t width = 0;  // strings
  uint64_t size = 0;
};

// Every string of `t`, NUL-padded to `width`, into `sink` in steps of about 8 MiB.
absl::Status WritePaddedStrings(const Checkpoint& c, const TensorEntry& t, size_t width, PieceSink& sink,
                                std::atomic<uint64_t>* progress) {
  std::vector<TensorBytes> keep;
  TFCKPT_ASSIGN_OR_RETURN(std::vector<std::string_view> all, ReadStrings(c, t, Region::Full(t.shape), &keep));
  std::string step;
  for (size_t i = 0; i < all.size(); ++i) {
    step.append(all[i]);
    step.append(width - all[i].size(), '\0');
    if (step.size() >= (8 << 20) || i + 1 == all.size()) {
      TFCKPT_RETURN_IF_ERROR(sink.Append(step));
      if (progress != nullptr) *progress += step.size();
      step.clear();
    }
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Member `m` of `p`: its .npy header and size (strings: every element padded with NULs to
// the longest, found by reading them once; numpy strips trailing NULs, so values that end in
// one do not read back the same: said in a note).
absl::StatusOr<NpyMember> PlanMember(const Checkpoint& c, const Planned& p, ConvertReport* report) {
  NpyMember m;
  m.p = &p;
  if (p.t->dtype != static_cast<int32_t>(DType::kString)) {
    m.header = NpyHeader(*NpyDescr(p.dtype), p.t->shape);
    m.size = m.header.size() + p.bytes;
    return m;
  }
  std::vector<TensorBytes> keep;
  TFCKPT_ASSIGN_OR_RETURN(std::vector<std::string_view> all, ReadStrings(c, *p.t, Region::Full(p.t->shape), &keep));
  size_t width = 1;
  bool trailing_nul = false;
  for (auto e : all) {
    width = std::max(width, e.size());
    trailing_nul = trailing_nul || (!e.empty() && e.back() == '\0');
  }
  if (trailing_nul) report->notes.push_back(StrCat("\"", p.t->name, "\": values ending in NUL bytes lose them in NumPy"));
  m.width = width;
  m.header = NpyHeader(StrCat("|S", width), p.t->shape);
  m.size = m.header.size() + all.size() * width;
  return m;
}

// The archive's units of work: each member's .npy header, then its tensor's bytes, by its
// stored pieces when it is cut on axis 0 (RowParts), each part with the CRC-32 of its
// bytes, joined per member at the end (parts_of: each member's parts in order).
struct NpzParts {
  struct Part {
    size_t member;
    std::optional<Region> region;  // nullopt: the .npy header, or a string tensor's padded elements
    bool strings = false;
    uint64_t offset, bytes;        // in the archive
  };
  std::vector<Part> parts;
  std::vector<WorkUnit> units;
  std::vector<std::vector<size_t>> parts_of;

  NpzParts(const std::vector<NpyMember>& members, const zip::StoredZipWriter& zip) : parts_of(members.size()) {
    for (size_t k = 0; k < members.size(); ++k) {
      const NpyMember& m = members[k];
      const uint64_t data = zip.DataOffset(k);
      Add({k, std::nullopt, false, data, m.header.size()});
      const uint64_t payload = data + m.header.size();
      if (m.width > 0) {
        Add({k, std::nullopt, true, payload, m.size - m.header.size()});
        continue;
      }
      const int64_t esize = LookupDType(m.p->dtype)->element_size;
      for (const Region& r : RowParts(*m.p->t)) {
        Add({k, r, false, payload + RowPartOffset(m.p->t->shape, r, esize),
             static_cast<uint64_t>(r.num_elements() * esize)});
      }
    }
  }
  void Add(Part part) {
    parts_of[part.member].push_back(parts.size());
    units.push_back({part.bytes, {0}});
    parts.push_back(std::move(part));
  }
};

// Part `part` of member `m` written into `file`; its CRC-32 into *crc.
absl::Status WriteNpzPart(const Checkpoint& c, const NpyMember& m, const NpzParts::Part& part, WritableFile& file,
                          std::atomic<uint64_t>* progress, uint32_t* crc) {
  thread_local std::string buf;
  PositionalSink positional(file, part.offset);
  Crc32Sink sink(positional);
  if (part.region) {
    TFCKPT_RETURN_IF_ERROR(CopyCast(c, *m.p->t, *part.region, m.p->dtype, sink, &buf, progress));
  } else if (part.strings) {
    TFCKPT_RETURN_IF_ERROR(WritePaddedStrings(c, *m.p->t, m.width, sink, progress));
  } else {
    TFCKPT_RETURN_IF_ERROR(sink.Append(m.header));
    if (progress != nullptr) *progress += m.header.size();
  }
  if (positional.offset() != part.offset + part.bytes) {
    return absl::InternalError(StrCat("bug: ", file.path(), ": member \"", m.p->name, "\": ",
                                      positional.offset() - part.offset, " bytes written of ", part.bytes));
  }
  *crc = sink.crc();
  return Reached("piece-written");
}

}  // namespace

absl::StatusOr<ConvertReport> WriteNpz(const Checkpoint& c, const std::string& out, const ConvertOptions& options) {
  const Location at = Location::Of(out);  // (the output's one file, resolved once)
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
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Publication> publication,
                          Publication::Files({at}, FilesOf(c.info()), options.overwrite));
  // Every member's size is known before a byte is written, so the archive is laid out first
  // (stored_zip.h) and its members filled positionally by units of work on options.jobs
  // threads (NpzParts). The bytes do not depend on the number of threads.
  std::vector<NpyMember> members;
  std::vector<zip::StoredZipWriter::Member> layout;
  uint64_t total = 0;
  for (const Planned& p : plan) {
    TFCKPT_ASSIGN_OR_RETURN(NpyMember m, PlanMember(c, p, &report));
    total += m.size;
    layout.push_back({p.name + ".npy", m.size});
    members.push_back(std::move(m));
    ++report.tensors;
    report.bytes += p.bytes;
  }
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<zip::StoredZipWriter> zip, zip::StoredZipWriter::Create(at, std::move(layout)));
  publication->Add(zip->file());
  std::atomic<uint64_t>* progress = options.start_progress ? options.start_progress(total, "writing") : nullptr;
  const NpzParts parts(members, *zip);
  std::vector<uint32_t> crcs(parts.parts.size(), 0);
  TFCKPT_RETURN_IF_ERROR(RunUnits(parts.units, options.jobs, [&](size_t u, const std::atomic<bool>&) {
    return WriteNpzPart(c, members[parts.parts[u].member], parts.parts[u], zip->file(), progress, &crcs[u]);
  }));
  for (size_t k = 0; k < members.size(); ++k) {
    uint32_t crc = 0;
    for (size_t u : parts.parts_of[k]) crc = zip::Crc32Concat(crc, crcs[u], parts.parts[u].bytes);
    TFCKPT_RETURN_IF_ERROR(zip->SetCrc(k, crc));
  }
  TFCKPT_RETURN_IF_ERROR(publication->PlantFault(zip->file(), 0, UINT64_MAX));  // (tests)
  TFCKPT_RETURN_IF_ERROR(zip->Finish());
  TFCKPT_RETURN_IF_ERROR(Reached("npz-written"));
  TFCKPT_RETURN_IF_ERROR(publication->CommitFiles());
  report.files = {out};
  if (options.after_commit) {
    TFCKPT_RETURN_IF_ERROR(publication->CheckCommitted([&] { return options.after_commit(report); }));
  }
  return report;
}

}  // namespace tfckpt
