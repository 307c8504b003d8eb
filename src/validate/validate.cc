// tfckpt validate: every check of a checkpoint, and logical comparison of two.
#include "validate/validate.h"
#include "tfckpt/open.h"
#include "base/regex.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/crc32c.h"
#include "base/parallel.h"
#include "model/tensor_encoding.h"
#include "tfckpt/dtype.h"
#include "base/float_convert.h"
#include "model/object_graph.h"
#include "base/path.h"
#include "tfckpt/status.h"
#include "model/values.h"

namespace tfckpt {


size_t ValidateReport::errors() const {
  return std::count_if(findings.begin(), findings.end(), [](const Finding& f) { return f.severity == Severity::kError; });
}
size_t ValidateReport::warnings() const {
  return std::count_if(findings.begin(), findings.end(), [](const Finding& f) { return f.severity == Severity::kWarning; });
}
size_t ValidateReport::notes() const { return findings.size() - errors() - warnings(); }

namespace {

Finding Make(std::string check, Severity sev, std::string file, std::string key, int64_t offset, std::string msg) {
  return Finding{std::move(check), sev, std::move(file), std::move(key), offset, std::move(msg)};
}

// ---------------------------------------------------------------------------------------
// Files beside the index: data files present, unreferenced, leftovers of crashed saves.

// The writes under `prefix` in progress (an object store's multipart uploads), one
// finding each of `severity`, saying how to abandon them.
void CheckUnfinishedWrites(const std::string& prefix, Severity severity, std::vector<Finding>* out) {
  auto unfinished = Storage::For(prefix).UnfinishedWrites(prefix);
  for (const std::string& name : unfinished.ok() ? *unfinished : std::vector<std::string>{}) {
    out->push_back(Make("files.upload-in-progress", severity, name, "", -1,
                        StrCat("upload in progress, never completed (its writer was killed, or still runs); "
                               "abort it with: tfckpt validate --abort-uploads ", prefix)));
  }
}

// `spec` (an object URL) names no checkpoint: when data files of that prefix, or uploads in progress under
// it, are there, an unfinished or interrupted save (the index is written last), one error
// finding each; else nothing.
std::vector<Finding> UnfinishedCheckpoint(const std::string& spec) {
  std::vector<Finding> out;
  for (const std::string& f : Storage::For(spec).Glob(spec + ".data-?????-of-?????")) {
    out.push_back(Make("files.no-index", Severity::kError, f, "", -1,
                       StrCat("data file without ", spec, ".index: an unfinished or interrupted save (the index is "
                              "written last)")));
  }
  CheckUnfinishedWrites(spec, Severity::kError, &out);
  return out;
}

void CheckFiles(const Checkpoint& c, std::vector<Finding>* out) {
  const CheckpointInfo& info = c.info();
  const std::string dir = DirectoryOf(info.prefix);
  const bool has_dir = !Dirname(info.prefix).empty();
  const std::string base = Basename(info.prefix);  // "" when the prefix is a directory
  Storage& store = Storage::For(info.prefix);
  std::vector<uint64_t> need(info.data_files.size(), 0);
  std::vector<int> users(info.data_files.size(), 0);
  for (const auto& t : c.tensors()) {
    for (const auto& s : t.slices) {
      if (s.data.shard >= 0 && s.data.shard < static_cast<int32_t>(need.size())) {
        need[s.data.shard] = std::max(need[s.data.shard], s.data.offset + s.data.size);
        ++users[s.data.shard];
      }
    }
  }
  // Data files that exist, by name.
  static const Regex data_re = Regex::Fixed(R"(\.data-(\d{5})-of-(\d{5}))");
  std::set<std::string> expected(info.data_files.begin(), info.data_files.end());
  std::map<int, int> other_counts;  // NNNNN of data files for another shard count -> files
  auto listing = store.List(dir);
  for (const DirEntry& e : listing.ok() ? *listing : std::vector<DirEntry>{}) {
    const std::string& name = e.name;
    if (name.compare(0, base.size(), base) != 0) continue;
    const std::string rest = name.substr(base.size());
    const std::string path = has_dir ? JoinPath(dir, name) : name;  // as data_files spell it
    if (rest.find(".tempstate") != std::string::npos || rest.find(".tmp-tfckpt-") != std::string::npos) {
      out->push_back(Make("files.debris", Severity::kWarning, path, "", -1,
                          "temporary file left by an interrupted save (not part of the checkpoint)"));
      continue;
    }
    if (e.kind == EntryKind::kDirectory && (rest.rfind("_temp", 0) == 0)) {
      const std::string sub = JoinPath(dir, name);
      auto inner = store.List(sub);
      for (const DirEntry& p : inner.ok() ? *inner : std::vector<DirEntry>{}) {
        if (p.name.rfind("part-", 0) == 0) {
          out->push_back(Make("files.debris", Severity::kWarning, JoinPath(sub, p.name), "", -1,
                              "part of an unmerged distributed save (tfckpt merge --recover can finish it)"));
        }
      }
      continue;
    }
    std::vector<std::string> m;
    if (rest.rfind(".data-", 0) != 0 || !data_re.FullMatch(rest, &m)) continue;
    if (!expected.count(path)) {
      ++other_counts[std::stoi(m[1])];
      out->push_back(Make("files.unreferenced-data", Severity::kWarning, path, "", -1,
                          StrCat("data file of this prefix that the index does not use (header: ", info.num_shards,
                                 " data files)")));
    }
  }
  size_t missing = 0;
  for (size_t i = 0; i < info.data_files.size(); ++i) {
    const std::string& f = info.data_files[i];
    if (!FileExists(f)) {
      ++missing;
      out->push_back(Make("files.missing-data", Severity::kError, f, "", -1,
                          StrCat("data file missing; ", Count(users[i], "stored tensor"), users[i] == 1 ? " points" : " point", " into it")));
      continue;
    }
    auto st = store.Stat(f);
    const uint64_t size = st.ok() ? st->size : static_cast<uint64_t>(-1);
    if (users[i] == 0) {  // an empty file too: the header counts a file nothing needs
      out->push_back(Make("files.unreferenced-data", Severity::kWarning, f, "", -1,
                          StrCat("no tensor is stored in this data file (", size, " bytes)")));
    }
  }
  for (const auto& [count, files] : other_counts) {
    if (missing > 0 && count != info.num_shards) {
      out->push_back(Make("header.num-shards", Severity::kError, info.index_path, "", -1,
                          StrCat("header says ", Count(info.num_shards, "data file"), ", but ", Count(files, "data file"),
                                 " named for ", count, files == 1 ? " exists" : " exist")));
    }
  }
}

// ---------------------------------------------------------------------------------------
// Entries: defects, ranges inside their data files, overlapping byte ranges.

void CheckEntries(const Checkpoint& c, std::vector<Finding>* out, std::vector<bool>* readable) {
  const CheckpointInfo& info = c.info();
  const std::string where = info.format == Format::kV2 ? info.index_path : info.prefix;
  std::vector<int64_t> sizes(info.data_files.size(), -1);
  for (size_t i = 0; i < info.data_files.size(); ++i) {
    auto st = Storage::For(info.data_files[i]).Stat(info.data_files[i]);
    if (st.ok()) sizes[i] = static_cast<int64_t>(st->size);
  }
  struct Range {
    uint64_t begin, end;
    const TensorEntry* t;
    const StoredSlice* s;
  };
  std::vector<std::vector<Range>> ranges(info.data_files.size());
  size_t k = 0;
  for (const auto& t : c.tensors()) {
    if (!t.defect.empty()) {
      out->push_back(Make(t.defect_check.empty() ? "entry" : t.defect_check, Severity::kError, where, t.name, -1,
                          t.defect));
    }
    for (const auto& s : t.slices) {
      bool ok = t.defect.empty();
      if (info.format != Format::kV1 && ok) {
        const int64_t fsize = sizes[s.data.shard];
        if (fsize < 0) {
          ok = false;  // reported as files.missing-data
        } else if (s.data.offset > static_cast<uint64_t>(fsize) || s.data.size > static_cast<uint64_t>(fsize) - s.data.offset) {
          out->push_back(Make("entry.bounds", Severity::kError, info.data_files[s.data.shard], t.name,
                              static_cast<int64_t>(s.data.offset),
                              StrCat(PieceLabel(t, s), "tensor of ", s.data.size, " bytes runs past the end of the file (", fsize,
                                     " bytes)")));
          ok = false;
        }
        if (s.data.size > 0) ranges[s.data.shard].push_back({s.data.offset, s.data.offset + s.data.size, &t, &s});
      }
      (*readable)[k++] = ok;
    }
  }
  for (size_t f = 0; f < ranges.size(); ++f) {
    auto& r = ranges[f];
    std::sort(r.begin(), r.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < r.size(); ++i) {
      if (r[i].begin < r[i - 1].end) {
        out->push_back(Make("entry.overlap", Severity::kWarning, info.data_files[f], r[i].t->name,
                            static_cast<int64_t>(r[i].begin),
                            StrCat(PieceLabel(*r[i].t, *r[i].s), "bytes overlap those of \"",
                                   PrintableKey(r[i - 1].t->name), "\" ", PieceLabel(*r[i - 1].t, *r[i - 1].s), "(",
                                   r[i - 1].begin, "..", r[i - 1].end, ")")));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Data: every stored piece's checksum, streamed with large reads, in parallel.

struct Piece {
  const TensorEntry* t;
  const StoredSlice* s;
};

// The medium failed, not the checkpoint's bytes: no permission, a store that stops
// answering (its retries used up), an object replaced during the run. The check cannot
// go on (exit 3, one error), rather than one finding per tensor.
bool MediumFailed(const absl::Status& s) {
  return absl::IsPermissionDenied(s) || absl::IsUnauthenticated(s) || absl::IsUnavailable(s) ||
         absl::IsFailedPrecondition(s) || absl::IsCancelled(s);
}

// The bytes checked; the first failure of the medium (MediumFailed) ends the check.
absl::StatusOr<uint64_t> CheckData(const Checkpoint& c, const std::vector<Piece>& pieces, int jobs,
                                   std::vector<Finding>* out) {
  const CheckpointInfo& info = c.info();
  // Large pieces first, largest first, so one big tensor does not finish last on its own;
  // then the small ones in file order, so that reads ahead (an object store's windows,
  // the kernel's) are used once each rather than fetched again for scattered neighbours.
  constexpr uint64_t kLargePiece = 4 << 20;
  auto key = [&](size_t i) {
    const StoredSlice& s = *pieces[i].s;
    const bool large = s.data.size >= kLargePiece;
    return std::make_tuple(!large, large ? ~s.data.size : 0, s.data.shard, s.data.offset);
  };
  std::vector<size_t> order(pieces.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  std::mutex mu;
  std::atomic<uint64_t> bytes{0};
  std::atomic<bool> failed{false};
  absl::Status medium;
  ParallelFor(order.size(), jobs, [&](size_t n) {
    if (failed) return;
    thread_local std::string buf;
    const Piece& p = pieces[order[n]];
    const DTypeInfo* dt = LookupDType(p.t->dtype);
    const absl::Status st = c.VerifyCrc(*p.t, *p.s, &buf);
    if (st.ok()) {
      bytes += info.format != Format::kV1 ? p.s->data.size
                                          : static_cast<uint64_t>(p.s->region.num_elements()) * (dt ? dt->element_size : 0);
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!MediumFailed(st)) {
      out->push_back(FindingOf(st));
    } else if (!failed.exchange(true)) {
      medium = st;
    }
  });
  if (failed) return medium;
  return bytes.load();
}

// ---------------------------------------------------------------------------------------
// Object graph.

void CheckObjectGraph(const Checkpoint& c, std::vector<Finding>* out) {
  const TensorEntry* gt = c.Find(kObjectGraphKey);
  if (gt == nullptr || !gt->defect.empty()) return;
  const std::string where = c.info().format == Format::kV2 ? c.info().index_path : c.info().prefix;
  auto g = LoadObjectGraph(c);
  if (!g.ok()) {
    // A graph tensor that cannot be read is reported by the data checks already.
    Finding f = FindingOf(g.status());
    if (f.check == "graph.parse") {
      if (f.file.empty()) f.file = where;
      f.key = kObjectGraphKey;
      out->push_back(std::move(f));
    }
    return;
  }
  std::set<const TensorEntry*> referenced = {gt};
  for (int i = 0; i < (*g)->nodes_size(); ++i) {
    for (const auto& a : (*g)->nodes(i).attributes()) {
      auto ts = AttributeTensors(c, a.checkpoint_key());
      if (ts.empty()) {
        out->push_back(Make("graph.missing-key", Severity::kError, where, a.checkpoint_key(), -1,
                            StrCat("object graph node ", i, " attribute ", a.name(),
                                   " names a key that is not in the checkpoint")));
      }
      referenced.insert(ts.begin(), ts.end());
    }
  }
  for (const auto& t : c.tensors()) {
    if (!referenced.count(&t)) {
      out->push_back(Make("graph.unreferenced", Severity::kWarning, where, t.name, -1,
                          "no object-graph attribute refers to this tensor (it would not be restored)"));
    }
  }
}

// ---------------------------------------------------------------------------------------
// The checkpoint state file of a directory.

void CheckStateFile(const std::string& dir, const std::vector<std::string>& notes, std::vector<Finding>* out) {
  const std::string path = JoinPath(dir, "checkpoint");
  for (const auto& n : notes) {
    if (n.find("does not exist; using") != std::string::npos) {
      out->push_back(Make("state.moved", Severity::kWarning, path, "", -1, n));
    }
  }
  // ResolveCheckpoint already parsed it and found model_checkpoint_path; check the list.
  const std::string text = Storage::For(path).ReadSmallFile(path, kMaxStateFileBytes).value_or("");
  static const Regex re = Regex::Fixed(R"re(\s*all_model_checkpoint_paths\s*:\s*"(.*)"\s*)re");
  for (const absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> m;
    if (!re.FullMatch(SV(line), &m)) continue;
    std::string p = m[0];
    std::string full = JoinPath(dir, p);
    if (p == ".") full = dir + "/";
    if (!FileExists(full + ".index") && !FileExists(full) && !FileExists(JoinPath(dir, Basename(p)))) {
      out->push_back(Make("state.stale-entry", Severity::kWarning, path, "", -1,
                          StrCat("lists ", p, ", which does not exist (older checkpoints are often deleted)")));
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Slice layout.

void CheckSliceLayout(const TensorEntry& t, const std::string& file, std::vector<Finding>* out) {
  if (!t.partitioned || t.slices.empty()) return;
  const auto total = NumElements(t.shape);
  if (!total.ok()) return;
  // The sweep below needs every slice inside the tensor. The loaders keep slices that lie
  // outside it out of the slice map (a defect of the tensor), so this fires only for slice
  // maps built otherwise.
  bool outside = false;
  for (const auto& s : t.slices) {
    if (s.region.InsideOf(t.shape)) continue;
    outside = true;
    const std::string slice = s.region.rank() == t.shape.size() ? SliceString(s.region, t.shape)
                                                                 : StrCat("of rank ", s.region.rank());
    out->push_back(Make("slice.bounds", Severity::kError, file, t.name, -1,
                        StrCat("slice ", slice, " lies outside the shape ", ShapeString(t.shape))));
  }
  if (outside) return;
  std::vector<size_t> order(t.slices.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const bool scalar = t.shape.empty();
  auto start0 = [&](size_t i) { return scalar ? 0 : t.slices[i].region.start[0]; };
  auto end0 = [&](size_t i) { return scalar ? 1 : t.slices[i].region.start[0] + t.slices[i].region.shape[0]; };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return start0(a) < start0(b); });
  bool overlap = false;
  int64_t covered = 0;
  for (size_t x = 0; x < order.size(); ++x) {
    const Region& a = t.slices[order[x]].region;
    covered += a.num_elements();
    for (size_t y = x + 1; y < order.size() && start0(order[y]) < end0(order[x]); ++y) {
      const Region& b = t.slices[order[y]].region;
      if (a.empty() || b.empty() || !Intersect(a, b)) continue;
      overlap = true;
      out->push_back(Make("slice.overlap", Severity::kError, file, t.name, -1,
                          a == b ? StrCat("slice ", SliceString(a, t.shape), " is stored twice")
                                 : StrCat("slices ", SliceString(a, t.shape), " and ", SliceString(b, t.shape),
                                          " overlap")));
    }
  }
  if (!overlap && covered == *total) return;
  if (overlap && covered < *total) {
    // fall through to the gap search
  } else if (overlap) {
    return;  // overlapping but possibly complete: the overlap is the finding
  }
  // The first element (row-major) in no slice lies on the grid of slice ends and 0.
  std::vector<std::vector<int64_t>> cand(t.shape.size());
  for (size_t d = 0; d < t.shape.size(); ++d) {
    cand[d].push_back(0);
    for (const auto& s : t.slices) {
      const int64_t e = s.region.start[d] + s.region.shape[d];
      if (e < t.shape[d]) cand[d].push_back(e);
    }
    std::sort(cand[d].begin(), cand[d].end());
    cand[d].erase(std::unique(cand[d].begin(), cand[d].end()), cand[d].end());
  }
  std::vector<size_t> pos(t.shape.size(), 0);
  std::vector<int64_t> idx(t.shape.size());
  std::string where;
  for (int64_t budget = 2'000'000; budget > 0; --budget) {
    for (size_t d = 0; d < idx.size(); ++d) idx[d] = cand[d][pos[d]];
    bool in_any = false;
    for (const auto& s : t.slices) in_any = in_any || s.region.Contains(idx);
    if (!in_any) {
      where = StrCat(" starting at ", ShapeString(idx));
      break;
    }
    size_t d = idx.size();
    while (d > 0 && ++pos[d - 1] == cand[d - 1].size()) pos[--d] = 0;
    if (d == 0) break;
  }
  out->push_back(Make("slice.gap", Severity::kError, file, t.name, -1,
                      StrCat("elements", where, " are in no slice (slices hold ", covered, " of ", *total,
                             " elements): they could never be restored")));
}

namespace {

// A data file we may not read makes the whole check impossible (exit 3, one error), not
// one finding per tensor in it: the first such file's error, else OK.
absl::Status DataFilesPermitted(const Checkpoint& c) {
  for (const std::string& f : c.info().data_files) {
    if (auto m = Storage::For(f).OpenForRead(f); MediumFailed(m.status())) return m.status();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ValidateReport> Validate(const std::string& spec, const ValidateOptions& options) {
  ValidateReport report;
  report.path = spec;
  auto resolved = ResolveCheckpoint(spec);
  if (!resolved.ok()) {
    if (absl::IsDataLoss(resolved.status())) {  // e.g. a state file that does not parse
      report.findings.push_back(FindingOf(resolved.status()));
      return report;
    }
    if (absl::IsNotFound(resolved.status()) && IsUrl(spec)) {
      report.findings = UnfinishedCheckpoint(spec);
      if (!report.findings.empty()) return report;
    }
    return resolved.status();
  }
  report.path = resolved->prefix;
  std::vector<Finding>& out = report.findings;
  if (!resolved->state_dir.empty()) CheckStateFile(resolved->state_dir, resolved->notes, &out);
  auto opened = OpenResolved(*resolved, &out);
  if (!opened.ok()) {
    if (absl::IsDataLoss(opened.status())) {
      out.push_back(FindingOf(opened.status()));
      return report;
    }
    return opened.status();
  }
  const Checkpoint& c = **opened;
  const CheckpointInfo& info = c.info();
  report.tensors = static_cast<int64_t>(c.tensors().size());
  const std::string where = info.format == Format::kV2 ? info.index_path : info.prefix;

  if (info.format == Format::kV2) {
    TFCKPT_RETURN_IF_ERROR(DataFilesPermitted(c));
    CheckFiles(c, &out);
    CheckUnfinishedWrites(info.prefix, Severity::kWarning, &out);
  }
  size_t pieces_total = 0;
  for (const auto& t : c.tensors()) pieces_total += t.slices.size();
  std::vector<bool> readable(pieces_total, false);
  CheckEntries(c, &out, &readable);
  for (const auto& key : info.orphan_slice_keys) {
    auto d = DecodeSliceKey(key);
    out.push_back(Make("slice.orphan-entry", Severity::kError, where, key, -1,
                       d.ok() ? StrCat("slice entry of \"", PrintableKey(d->name),
                                       "\" that its metadata entry does not list")
                              : "slice entry whose key does not decode"));
  }
  for (const auto& t : c.tensors()) CheckSliceLayout(t, where, &out);
  if (!options.quick) {
    std::vector<Piece> pieces;
    size_t k = 0;
    for (const auto& t : c.tensors()) {
      for (const auto& s : t.slices) {
        if (readable[k++]) pieces.push_back({&t, &s});
      }
    }
    TFCKPT_ASSIGN_OR_RETURN(report.bytes_checked, CheckData(c, pieces, Jobs(options.jobs), &out));
  }
  CheckObjectGraph(c, &out);
  // Stable order: by severity, then file, key and offset.
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return std::tie(a.severity, a.file, a.key, a.offset) < std::tie(b.severity, b.file, b.key, b.offset);
  });
  return report;
}

// ---------------------------------------------------------------------------------------
// Compare.


namespace {

struct Loaded {
  TensorBytes bytes;
  std::vector<std::string_view> elements;  // strings
};

absl::StatusOr<std::vector<Loaded>> LoadAll(const Checkpoint& c, const TensorEntry& t) {
  std::vector<Loaded> out;
  for (const auto& s : t.slices) {
    TFCKPT_ASSIGN_OR_RETURN(TensorBytes b, c.Read(t, s, /*verify=*/true));
    Loaded l{std::move(b), {}};
    if (t.dtype == static_cast<int32_t>(DType::kString)) {
      TFCKPT_ASSIGN_OR_RETURN(auto d, DecodeStrings(l.bytes.data, s.region.num_elements()));
      l.elements = std::move(d.elements);
    } else if (t.dtype == static_cast<int32_t>(DType::kVariant)) {
      TFCKPT_ASSIGN_OR_RETURN(auto d, DecodeVariants(l.bytes.data, s.region.num_elements()));
      l.elements = std::move(d.elements);
    }
    out.push_back(std::move(l));
  }
  return out;
}

// The index in the full tensor of the element at offset `local` of region `r`, into `idx`.
void FullIndex(const Region& r, int64_t local, std::vector<int64_t>* idx) {
  idx->resize(r.rank());
  for (size_t d = r.rank(); d-- > 0;) {
    (*idx)[d] = r.start[d] + local % r.shape[d];
    local /= r.shape[d];
  }
}

std::string StringText(std::string_view e) {
  std::string s(e.substr(0, 64));
  return StrCat("b'", PrintableKey(s), e.size() > 64 ? "...'" : "'");
}

bool Numeric(ValueKind k) {
  return k == ValueKind::kFloat || k == ValueKind::kSigned || k == ValueKind::kUnsigned || k == ValueKind::kBool;
}

// |new - old|: 0 for two NaNs, infinite when only one side is NaN.
double AbsDiff(double u, double v) {
  if (std::isnan(u) && std::isnan(v)) return 0;
  const double d = std::fabs(u - v);
  return std::isnan(d) ? HUGE_VAL : d;
}

// |new - old| / |old| for the difference `d`: infinite when old is 0 (or not finite).
double RelDiff(double d, double v) {
  if (d == 0) return 0;
  const double r = d / std::fabs(v);
  return std::isnan(r) ? HUGE_VAL : r;
}

// The running ValueDifference of one tensor pair: differing elements are added in any
// order; the first and the largest are kept by their row-major position.
class DiffTracker {
 public:
  DiffTracker(const TensorEntry& a, bool numeric) : strides_(Strides(a.shape)) {
    d_.tensor = a.name;
    d_.elements = NumElements(a.shape).value_or(0);
    d_.numeric = numeric;
  }

  // The element at offset `k` of the new side's region `r` differs by `abs` (relative
  // `rel`; numeric dtypes). `texts()` gives both values as text, only when needed.
  template <typename Texts>
  void Add(const Region& r, int64_t k, double abs, double rel, Texts texts) {
    ++d_.differing;
    FullIndex(r, k, &idx_);
    int64_t linear = 0;
    for (size_t i = 0; i < idx_.size(); ++i) linear += idx_[i] * strides_[i];
    auto element = [&] {
      auto [n, o] = texts();
      return ValueDifference::Element{idx_, std::move(n), std::move(o)};
    };
    if (linear < first_) {
      first_ = linear;
      d_.first = element();
    }
    if (!d_.numeric) return;
    d_.max_rel = std::max(d_.max_rel, rel);
    if (abs > d_.max_abs || (abs == d_.max_abs && linear < max_)) {
      d_.max_abs = abs;
      max_ = linear;
      d_.max = element();
    }
  }

  ValueDifference Take() { return std::move(d_); }

 private:
  std::vector<int64_t> strides_, idx_;
  ValueDifference d_;
  int64_t first_ = INT64_MAX, max_ = INT64_MAX;
};

// Strings and variants: both tensors decoded, compared element by element.
absl::Status CompareElements(const Checkpoint& ca, const TensorEntry& a, const Checkpoint& cb, const TensorEntry& b,
                             const CompareOptions& options, DiffTracker* diff) {
  auto strip = [&](std::string_view e) {
    if (options.strings_without_trailing_nul) {
      while (!e.empty() && e.back() == '\0') e.remove_suffix(1);
    }
    return e;
  };
  TFCKPT_ASSIGN_OR_RETURN(std::vector<Loaded> la, LoadAll(ca, a));
  TFCKPT_ASSIGN_OR_RETURN(std::vector<Loaded> lb, LoadAll(cb, b));
  for (size_t i = 0; i < a.slices.size(); ++i) {
    for (size_t j = 0; j < b.slices.size(); ++j) {
      auto r = Intersect(a.slices[i].region, b.slices[j].region);
      if (!r && !(a.shape.empty())) continue;
      const Region& inter = r ? *r : a.slices[i].region;
      const Loaded& x = la[i];
      const Loaded& y = lb[j];
      ForEachRun(inter, {&a.slices[i].region, &b.slices[j].region}, [&](const int64_t* off, int64_t n) {
        for (int64_t e = 0; e < n; ++e) {
          const std::string_view u = x.elements[off[0] + e], v = y.elements[off[1] + e];
          if (u == v || strip(u) == strip(v)) continue;
          diff->Add(a.slices[i].region, off[0] + e, 0, 0, [&] { return std::pair(StringText(u), StringText(v)); });
        }
      });
    }
  }
  return absl::OkStatus();
}

// Checks every stored piece of `t`: by its cursor when that read the whole piece in
// order from a V2 little-endian file (the bytes ReadRange gives are then the stored
// bytes), else (or to report a mismatch with its usual error) by VerifyCrc.
absl::Status SettleCrcs(const Checkpoint& c, const TensorEntry& t, const std::vector<crc32c::Cursor>& cursors,
                        std::string* buf) {
  const bool raw = c.info().format == Format::kV2 && !c.info().big_endian;
  for (size_t k = 0; k < t.slices.size(); ++k) {
    const StoredSlice& s = t.slices[k];
    const crc32c::Cursor& cur = cursors[k];
    if (raw && cur.Covered(s.data.size) && cur.crc == crc32c::Unmask(s.data.masked_crc)) continue;
    TFCKPT_RETURN_IF_ERROR(c.VerifyCrc(t, s, buf));
  }
  return absl::OkStatus();
}

// Fixed-size values: each old slice is walked once, chunk by chunk (spans of about
// 1 MiB, read with pread); every new slice overlapping a chunk is compared with it over
// their intersection. Both sides' CRCs are computed on the bytes the comparison reads
// whenever a slice is read front to back (the usual case: one pass over each side); the
// others are checked by VerifyCrc afterwards.
absl::Status CompareFixed(const Checkpoint& ca, const TensorEntry& a, const Checkpoint& cb, const TensorEntry& b,
                          const CompareOptions& options, DiffTracker* diff) {
  const DTypeInfo* da = LookupDType(a.dtype);
  const int64_t sa = da->element_size, sb = LookupDType(b.dtype)->element_size;
  const bool same_dtype = a.dtype == b.dtype;
  const bool cast = !same_dtype && options.cast;  // b's values cast to a's dtype, then compared bitwise
  const bool bitwise = same_dtype || cast;
  const bool by_value = !bitwise || (options.use_tolerance && da->kind == ValueKind::kFloat);
  const bool numeric = Numeric(da->kind);
  const double tolerance = options.use_tolerance ? options.tolerance : 0;
  std::string stage_a, stage_b, cast_b;
  std::vector<crc32c::Cursor> cur_a(a.slices.size()), cur_b(b.slices.size());
  for (size_t j = 0; j < b.slices.size(); ++j) {
    const Region& rb = b.slices[j].region;
    TensorBytes own_b;
    std::vector<TensorBytes> own_a(a.slices.size());
    TFCKPT_RETURN_IF_ERROR(ForEachChunk(rb, sb, 1 << 20, [&](const Region& chunk) -> absl::Status {
      const RunPlan whole = PlanRuns(chunk, {&rb});
      const auto span_b = RunSpan(whole, chunk, 0);  // (clang 14 cannot capture structured bindings)
      const int64_t lb = span_b.first, hb = span_b.second;
      TFCKPT_ASSIGN_OR_RETURN(std::string_view y, cb.ReadRange(b, b.slices[j], lb * sb, hb * sb, &stage_b, &own_b));
      cur_b[j].Feed(static_cast<uint64_t>(lb * sb), y);
      for (size_t i = 0; i < a.slices.size(); ++i) {
        const Region& ra = a.slices[i].region;
        auto sub = a.shape.empty() ? std::optional<Region>(chunk) : Intersect(chunk, ra);
        if (!sub) continue;
        const RunPlan rp = PlanRuns(*sub, {&ra, &rb});
        const auto span_a = RunSpan(rp, *sub, 0);
        const int64_t la = span_a.first, ha = span_a.second;
        TFCKPT_ASSIGN_OR_RETURN(std::string_view x, ca.ReadRange(a, a.slices[i], la * sa, ha * sa, &stage_a, &own_a[i]));
        cur_a[i].Feed(static_cast<uint64_t>(la * sa), x);
        ForEachRun(*sub, {&ra, &rb}, [&](const int64_t* off, int64_t n) {
          const char* px = x.data() + (off[0] - la) * sa;
          const char* py_old = y.data() + (off[1] - lb) * sb;
          const char* py = py_old;
          if (cast) {
            cast_b.resize(static_cast<size_t>(n * sa));
            CastElements(b.dtype, a.dtype, py_old, static_cast<size_t>(n), cast_b.data());
            py = cast_b.data();
          }
          const int64_t sy = cast ? sa : sb;
          const int32_t ty = cast ? a.dtype : b.dtype;
          if (bitwise && std::memcmp(px, py, static_cast<size_t>(n * sa)) == 0) return;
          for (int64_t e = 0; e < n; ++e) {
            const char* p = px + e * sa;
            const char* q = py + e * sy;
            if (bitwise && std::memcmp(p, q, static_cast<size_t>(sa)) == 0) continue;
            const double u = numeric ? ElementToDouble(a.dtype, p) : 0, v = numeric ? ElementToDouble(ty, q) : 0;
            const double d = AbsDiff(u, v);
            if (by_value && d <= tolerance) continue;
            diff->Add(ra, off[0] + e, d, RelDiff(d, v),
                      [&] { return std::pair(FormatElement(a.dtype, p), FormatElement(b.dtype, py_old + e * sb)); });
          }
        });
      }
      return absl::OkStatus();
    }));
  }
  std::string buf;
  TFCKPT_RETURN_IF_ERROR(SettleCrcs(ca, a, cur_a, &buf));
  return SettleCrcs(cb, b, cur_b, &buf);
}

// A stored piece as a range of its tensor's row-major bytes.
struct ByteRange {
  uint64_t begin, end;
  size_t slice;  // index in TensorEntry::slices
};

// The pieces of `t` as byte ranges in order, when they tile the tensor's bytes exactly
// (each piece whole rows, i.e. cut on axis 0 only, or the whole tensor; no gap, no
// overlap; each stored with the size of its range) and are raw little-endian V2 bytes (or,
// with `copies_too`, a safetensors tensor's or an .npz member's bytes, which have no CRC-32C).
std::optional<std::vector<ByteRange>> RowTiling(const Checkpoint& c, const TensorEntry& t, int64_t esize,
                                                bool copies_too = false) {
  const Format f = c.info().format;
  const bool raw = f == Format::kV2 || (copies_too && (f == Format::kSafetensors || f == Format::kNpz));
  if (!raw || c.info().big_endian || !t.defect.empty()) return std::nullopt;
  const auto total = NumElements(t.shape);
  if (!total.ok()) return std::nullopt;
  std::vector<ByteRange> ranges;
  for (size_t k = 0; k < t.slices.size(); ++k) {
    const Region& r = t.slices[k].region;
    uint64_t begin = 0, end = static_cast<uint64_t>(*total * esize);
    if (!r.Covers(t.shape)) {
      if (r.rank() != t.shape.size() || r.rank() == 0 || t.shape[0] == 0 || !r.WholeRowsOf(t.shape)) {
        return std::nullopt;
      }
      const uint64_t row = end / static_cast<uint64_t>(t.shape[0]);
      begin = static_cast<uint64_t>(r.start[0]) * row;
      end = begin + static_cast<uint64_t>(r.shape[0]) * row;
    }
    if (t.slices[k].data.size != end - begin) return std::nullopt;
    ranges.push_back({begin, end, k});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const ByteRange& x, const ByteRange& y) { return std::tie(x.begin, x.end) < std::tie(y.begin, y.end); });
  uint64_t at = 0;
  for (const ByteRange& r : ranges) {
    if (r.begin != at) return std::nullopt;
    at = r.end;
  }
  if (at != static_cast<uint64_t>(*total * esize)) return std::nullopt;
  return ranges;
}

// CompareOptions::crc_holds: the bytes of `a` (new) equal those of `b` (old) by their stored
// CRCs alone. Both tilings cover the same bytes; they are walked together in stretches
// that end where a boundary of each side meets (the whole tensor at worst), and over each
// stretch the CRCs of its pieces, concatenated, must be equal on both sides.
bool SameByStoredCrcs(const TensorEntry& a, const std::vector<ByteRange>& new_ranges, const TensorEntry& b,
                      const std::vector<ByteRange>& old_ranges) {
  size_t i = 0, j = 0;
  auto add = [](const TensorEntry& t, const ByteRange& r, uint32_t* crc, uint64_t* end) {
    *crc = crc32c::Concat(*crc, crc32c::Unmask(t.slices[r.slice].data.masked_crc), r.end - r.begin);
    *end = r.end;
  };
  while (i < new_ranges.size() && j < old_ranges.size()) {
    uint32_t crc_new = 0, crc_old = 0;
    uint64_t end_new = 0, end_old = 0;
    add(a, new_ranges[i++], &crc_new, &end_new);
    add(b, old_ranges[j++], &crc_old, &end_old);
    while (end_new != end_old) {
      if (end_new < end_old) {
        if (i == new_ranges.size()) return false;
        add(a, new_ranges[i++], &crc_new, &end_new);
      } else {
        if (j == old_ranges.size()) return false;
        add(b, old_ranges[j++], &crc_old, &end_old);
      }
    }
    if (crc_new != crc_old) return false;
  }
  return i == new_ranges.size() && j == old_ranges.size();
}

// Whether the bytes of `b` (old, raw: `old_ranges`), read once in order, have over each
// piece of `a` (new) that piece's stored CRC.
bool OldBytesHaveNewCrcs(const TensorEntry& a, const std::vector<ByteRange>& new_ranges, const Checkpoint& cb,
                         const TensorEntry& b, const std::vector<ByteRange>& old_ranges) {
  std::vector<crc32c::Cursor> cur(a.slices.size());
  std::string buffer;
  TensorBytes unused;
  size_t first = 0;  // the first new range not ended before the bytes being read
  for (const ByteRange& piece : old_ranges) {
    const StoredSlice& s = b.slices[piece.slice];
    for (uint64_t at = piece.begin; at < piece.end;) {
      const uint64_t n = std::min<uint64_t>(piece.end - at, 1 << 20);
      auto bytes = cb.ReadRange(b, s, at - piece.begin, at - piece.begin + n, &buffer, &unused);
      if (!bytes.ok()) return false;
      for (size_t m = first; m < new_ranges.size() && new_ranges[m].begin < at + n; ++m) {
        const ByteRange& o = new_ranges[m];
        const uint64_t lo = std::max(at, o.begin), hi = std::min(at + n, o.end);
        if (lo < hi) cur[o.slice].Feed(lo - o.begin, bytes->substr(lo - at, hi - lo));
      }
      at += n;
      while (first < new_ranges.size() && new_ranges[first].end <= at) ++first;
    }
  }
  for (const ByteRange& o : new_ranges) {
    const StoredSlice& s = a.slices[o.slice];
    if (!cur[o.slice].Covered(s.data.size) || cur[o.slice].crc != crc32c::Unmask(s.data.masked_crc)) return false;
  }
  return true;
}

// CompareOptions::by_checksum: whether the CRCs alone prove `a` (new) equal to `b` (old),
// both of one fixed-size dtype, raw, and cut on axis 0 only. The new side is read once,
// front to back: every new piece's bytes must have its stored CRC, and the new bytes
// over each old piece's range must have that piece's stored CRC. (Where a new piece is
// an old piece's range exactly, its one CRC serves both.) A safetensors or .npz new side
// has no CRC-32C: its bytes are proved by the old side's alone (and an .npz member's
// CRC-32 is checked on the same bytes, PayloadCheck). False when that cannot be shown, for
// whatever reason (the caller then compares as usual and reports).
bool SameByCrc(const Checkpoint& ca, const TensorEntry& a, const Checkpoint& cb, const TensorEntry& b,
               const CompareOptions& options) {
  if (a.dtype != b.dtype) return false;
  const int64_t esize = LookupDType(a.dtype)->element_size;
  const bool new_crcs = ca.info().format == Format::kV2;
  const auto new_ranges = RowTiling(ca, a, esize, /*copies_too=*/true), old_ranges = RowTiling(cb, b, esize);
  if (new_ranges && new_crcs && options.crc_holds &&
      std::all_of(a.slices.begin(), a.slices.end(), options.crc_holds)) {
    if (old_ranges) return SameByStoredCrcs(a, *new_ranges, b, *old_ranges);
    // An old side without CRCs (safetensors): its bytes, read once, must have the new
    // pieces' CRCs (which hold for the new bytes).
    if (cb.info().format == Format::kSafetensors) {
      if (auto raw_old = RowTiling(cb, b, esize, /*copies_too=*/true)) return OldBytesHaveNewCrcs(a, *new_ranges, cb, b, *raw_old);
    }
  }
  if (!new_ranges || !old_ranges) return false;
  std::vector<crc32c::Cursor> old(b.slices.size());
  std::string buffer;
  TensorBytes unused;  // (ReadRange reads raw pieces into `buffer`)
  size_t first = 0;    // the first old range not ended before the bytes being read
  for (const ByteRange& piece : *new_ranges) {
    const StoredSlice& s = a.slices[piece.slice];
    std::optional<size_t> same;  // an old piece whose range is this one
    for (size_t m = first; m < old_ranges->size() && (*old_ranges)[m].begin <= piece.begin; ++m) {
      if ((*old_ranges)[m].begin == piece.begin && (*old_ranges)[m].end == piece.end) same = (*old_ranges)[m].slice;
    }
    crc32c::Cursor cur;
    std::unique_ptr<PayloadCheck> own = ca.StartPayloadCheck(a, s);  // (an .npz member's CRC-32)
    for (uint64_t at = piece.begin; at < piece.end;) {
      const uint64_t n = std::min<uint64_t>(piece.end - at, 1 << 20);
      auto bytes = ca.ReadRange(a, s, at - piece.begin, at - piece.begin + n, &buffer, &unused);
      if (!bytes.ok()) return false;
      cur.Feed(at - piece.begin, *bytes);
      if (own) own->Feed(*bytes);
      for (size_t m = first; !same && m < old_ranges->size() && (*old_ranges)[m].begin < at + n; ++m) {
        const ByteRange& o = (*old_ranges)[m];
        const uint64_t lo = std::max(at, o.begin), hi = std::min(at + n, o.end);
        if (lo < hi) old[o.slice].Feed(lo - o.begin, bytes->substr(lo - at, hi - lo));
      }
      at += n;
      while (first < old_ranges->size() && (*old_ranges)[first].end <= at) ++first;
    }
    if (!cur.Covered(s.data.size) || (new_crcs && cur.crc != crc32c::Unmask(s.data.masked_crc))) return false;
    if (own && !own->Finish().ok()) return false;
    if (same) old[*same] = cur;
  }
  for (const ByteRange& o : *old_ranges) {
    const StoredSlice& s = b.slices[o.slice];
    if (!old[o.slice].Covered(s.data.size) || old[o.slice].crc != crc32c::Unmask(s.data.masked_crc)) return false;
  }
  return true;
}

// The against.values message: "N of M elements differ; first at [i]: new X, old Y".
std::string DifferenceMessage(const ValueDifference& d, const CompareOptions& options, bool by_value) {
  return StrCat(d.differing, " of ", d.elements, " elements differ",
                by_value && options.use_tolerance ? StrCat(" by more than ", options.tolerance) : "", "; first at ",
                ShapeString(d.first.index), ": new ", d.first.new_value, ", old ", d.first.old_value);
}

}  // namespace

bool ComparableByValue(int32_t a, int32_t b) {
  const DTypeInfo* x = LookupDType(a);
  const DTypeInfo* y = LookupDType(b);
  return x != nullptr && y != nullptr && x->kind == ValueKind::kFloat && y->kind == ValueKind::kFloat;
}

absl::StatusOr<ValueDifference> CompareTensorValues(const Checkpoint& ca, const TensorEntry& a, const Checkpoint& cb,
                                                    const TensorEntry& b, const CompareOptions& options) {
  const DTypeInfo* da = LookupDType(a.dtype);
  DiffTracker diff(a, da->element_size > 0 && Numeric(da->kind));
  if (da->element_size == 0) {
    TFCKPT_RETURN_IF_ERROR(CompareElements(ca, a, cb, b, options, &diff));
  } else if (options.by_checksum && SameByCrc(ca, a, cb, b, options)) {
    return diff.Take();  // equal
  } else {
    TFCKPT_RETURN_IF_ERROR(CompareFixed(ca, a, cb, b, options, &diff));
  }
  return diff.Take();
}

absl::StatusOr<ValidateReport> Compare(const std::string& new_spec, const std::string& old_spec,
                                       const CompareOptions& options) {
  ValidateReport report;
  std::vector<Finding>& out = report.findings;
  auto nc = OpenCheckpoint(new_spec, &out);
  if (!nc.ok()) return nc.status();
  auto oc = OpenCheckpoint(old_spec, &out);
  if (!oc.ok()) return oc.status();
  TFCKPT_RETURN_IF_ERROR(CompareCheckpoints(**nc, **oc, nullptr, options, &report));
  return report;
}

absl::Status CompareCheckpoints(const Checkpoint& a, const Checkpoint& b,
                                const std::map<std::string, std::string>* names, const CompareOptions& options,
                                ValidateReport* report_out) {
  ValidateReport& report = *report_out;
  std::vector<Finding>& out = report.findings;
  TFCKPT_RETURN_IF_ERROR(DataFilesPermitted(a));
  TFCKPT_RETURN_IF_ERROR(DataFilesPermitted(b));
  report.path = a.info().prefix;
  report.tensors = static_cast<int64_t>(a.tensors().size());
  const std::string where = a.info().format == Format::kV2 ? a.info().index_path : a.info().prefix;
  std::vector<std::pair<const TensorEntry*, const TensorEntry*>> pairs;
  if (names == nullptr) {
    for (const auto& t : b.tensors()) {
      if (a.Find(t.name) == nullptr) {
        out.push_back(Make("against.removed", Severity::kError, where, t.name, -1,
                           StrCat("tensor of the old checkpoint (", DTypeName(t.dtype), " ", ShapeString(t.shape),
                                  ") is missing")));
      }
    }
  } else {
    for (const auto& [new_name, old_name] : *names) {
      if (a.Find(new_name) == nullptr) {
        out.push_back(Make("against.removed", Severity::kError, where, new_name, -1,
                           StrCat("tensor (from \"", old_name, "\" of the old checkpoint) is missing")));
      }
    }
  }
  for (const auto& t : a.tensors()) {
    const std::string* old_name = &t.name;
    if (names != nullptr) {
      const auto listed = names->find(t.name);
      if (listed == names->end()) continue;  // not the caller's to compare here
      old_name = &listed->second;
    }
    const TensorEntry* o = b.Find(*old_name);
    if (o == nullptr) {
      out.push_back(Make("against.added", Severity::kError, where, t.name, -1,
                         StrCat("tensor (", DTypeName(t.dtype), " ", ShapeString(t.shape),
                                ") is not in the old checkpoint")));
      continue;
    }
    if (t.dtype != o->dtype) {
      // With a tolerance, floating-point values compare as numbers whatever their dtype;
      // with `cast`, the old values cast to the new dtype compare bitwise.
      const bool cast = options.cast && CastSupported(o->dtype, t.dtype);
      const bool by_value = cast || (options.use_tolerance && ComparableByValue(t.dtype, o->dtype));
      out.push_back(Make("against.dtype", by_value ? Severity::kNote : Severity::kError, where, t.name, -1,
                         StrCat("dtype changed from ", DTypeName(o->dtype), " to ", DTypeName(t.dtype),
                                cast ? "; old values compared cast to it" : by_value ? "; values compared as numbers" : "")));
      if (!by_value) continue;
    }
    if (t.shape != o->shape) {
      out.push_back(Make("against.shape", Severity::kError, where, t.name, -1,
                         StrCat("shape changed from ", ShapeString(o->shape), " to ", ShapeString(t.shape))));
      continue;
    }
    CheckSliceLayout(t, where, &out);
    if (!t.defect.empty()) {
      out.push_back(Make(t.defect_check, Severity::kError, where, t.name, -1, t.defect));
      continue;
    }
    if (!o->defect.empty()) {
      out.push_back(Make(o->defect_check, Severity::kError, b.info().prefix, o->name, -1, o->defect));
      continue;
    }
    if (LookupDType(t.dtype) == nullptr) continue;
    pairs.emplace_back(&t, o);
  }
  std::mutex mu;
  std::atomic<uint64_t> own_bytes{0};
  std::atomic<uint64_t>& bytes = options.progress != nullptr ? *options.progress : own_bytes;
  ParallelFor(pairs.size(), Jobs(options.jobs), [&](size_t i) {
    const TensorEntry& t = *pairs[i].first;
    const TensorEntry& o = *pairs[i].second;
    auto d = CompareTensorValues(a, t, b, o, options);
    std::lock_guard<std::mutex> lock(mu);
    if (!d.ok()) {
      out.push_back(FindingOf(d.status()));  // a checksum error alone: the values of a damaged slice mean nothing
      return;
    }
    bytes += t.bytes;
    if (d->differing == 0) return;
    const bool by_value = t.dtype != o.dtype || LookupDType(t.dtype)->kind == ValueKind::kFloat;
    out.push_back(Make("against.values", Severity::kError, where, t.name, -1, DifferenceMessage(*d, options, by_value)));
    report.differences.push_back(*std::move(d));
  });
  report.bytes_checked += bytes;
  std::stable_sort(out.begin(), out.end(), [](const Finding& x, const Finding& y) {
    return std::tie(x.severity, x.file, x.key, x.offset) < std::tie(y.severity, y.file, y.key, y.offset);
  });
  std::sort(report.differences.begin(), report.differences.end(),
            [](const ValueDifference& x, const ValueDifference& y) { return x.tensor < y.tensor; });
  return absl::OkStatus();
}

}  // namespace tfckpt
