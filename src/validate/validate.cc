// tfckpt validate: every check of one checkpoint (validate.h). The comparison of two,
// which --against runs, is compare.cc.
#include "validate/validate.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "absl/strings/str_split.h"
#include "base/parallel.h"
#include "base/path.h"
#include "base/regex.h"
#include "model/object_graph.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"

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
// A listing the store refused (a role that may read objects and not list them): what was
// not looked for, as a note (the checkpoint is checked all the same).
void NotListed(const absl::Status& refused, const std::string& path, std::string_view what,
               std::vector<Finding>* out) {
  out->push_back(Make("files.not-listed", Severity::kNote, path, "", -1,
                      StrCat("not looked for ", what, ": ", refused.message())));
}

void CheckUnfinishedWrites(const Location& at, Severity severity, std::vector<Finding>* out) {
  const std::string& prefix = at.path();
  auto unfinished = at.store().UnfinishedWrites(prefix);
  if (absl::IsPermissionDenied(unfinished.status())) NotListed(unfinished.status(), prefix, "uploads in progress", out);
  for (const std::string& name : unfinished.ok() ? *unfinished : std::vector<std::string>{}) {
    out->push_back(Make("files.upload-in-progress", severity, name, "", -1,
                        StrCat("upload in progress, never completed (its writer was killed, or still runs); "
                               "abort it with: tfckpt validate --abort-uploads ", prefix,
                               " (one started within the hour: add --older-than 0 once its writer is gone)")));
  }
}

// `spec` (an object URL) names no checkpoint: when data files of that prefix, or uploads in progress under
// it, are there, an unfinished or interrupted save (the index is written last), one error
// finding each; else nothing.
std::vector<Finding> UnfinishedCheckpoint(const Location& at) {
  const std::string& spec = at.path();
  std::vector<Finding> out;
  for (const std::string& f : at.store().Glob(spec + ".data-?????-of-?????")) {
    out.push_back(Make("files.no-index", Severity::kError, f, "", -1,
                       StrCat("data file without ", spec, ".index: an unfinished or interrupted save (the index is "
                              "written last)")));
  }
  CheckUnfinishedWrites(at, Severity::kError, &out);
  return out;
}

// REQUIRES (here and below): `store` holds the checkpoint `c`'s files.
void CheckFiles(const Checkpoint& c, Storage& store, std::vector<Finding>* out) {
  const CheckpointInfo& info = c.info();
  const std::string dir = DirectoryOf(info.prefix);
  const bool has_dir = !Dirname(info.prefix).empty();
  const std::string base = Basename(info.prefix);  // "" when the prefix is a directory
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
  if (absl::IsPermissionDenied(listing.status())) {
    NotListed(listing.status(), info.prefix, "data files the index does not use, or leftovers of saves", out);
  }
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
                              StrCat("part of a distributed save, beside the index it was merged into (",
                                     Basename(info.index_path), " is there: merge --recover ran without --move, "
                                     "or the save was finished another way); not needed to read the checkpoint: "
                                     "remove ", sub, " (tfckpt merge --recover --move merges and removes the parts)")));
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
    if (!store.Exists(f)) {
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

void CheckEntries(const Checkpoint& c, Storage& store, std::vector<Finding>* out, std::vector<bool>* readable) {
  const CheckpointInfo& info = c.info();
  const std::string where = info.format == Format::kV2 ? info.index_path : info.prefix;
  std::vector<int64_t> sizes(info.data_files.size(), -1);
  for (size_t i = 0; i < info.data_files.size(); ++i) {
    auto st = store.Stat(info.data_files[i]);
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

void CheckStateFile(const Location& at, const std::vector<std::string>& notes, std::vector<Finding>* out) {
  const std::string& dir = at.path();
  Storage& store = at.store();
  const std::string path = JoinPath(dir, "checkpoint");
  for (const auto& n : notes) {
    if (n.find("does not exist; using") != std::string::npos) {
      out->push_back(Make("state.moved", Severity::kWarning, path, "", -1, n));
    }
  }
  // ResolveCheckpoint already parsed it and found model_checkpoint_path; check the list.
  const std::string text = store.ReadSmallFile(path, kMaxStateFileBytes).value_or("");
  static const Regex re = Regex::Fixed(R"re(\s*all_model_checkpoint_paths\s*:\s*"(.*)"\s*)re");
  for (const absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> m;
    if (!re.FullMatch(SV(line), &m)) continue;
    std::string p = m[0];
    std::string full = JoinPath(dir, p);
    if (p == ".") full = dir + "/";
    if (!store.Exists(full + ".index") && !store.Exists(full) && !store.Exists(JoinPath(dir, Basename(p)))) {
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

absl::Status DataFilesPermitted(const Checkpoint& c, Storage& store) {
  for (const std::string& f : c.info().data_files) {
    if (auto m = store.OpenForRead(f); MediumFailed(m.status())) return m.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<ValidateReport> Validate(const std::string& spec, const ValidateOptions& options) {
  ValidateReport report;
  report.path = spec;
  // The locations: resolved here, once each (the argument; the checkpoint it resolved to
  // and its state file's directory, which a state file may place in another store).
  const Location at = Location::Of(spec);
  auto resolved = ResolveCheckpoint(spec);
  if (!resolved.ok()) {
    if (absl::IsDataLoss(resolved.status())) {  // e.g. a state file that does not parse
      report.findings.push_back(FindingOf(resolved.status()));
      return report;
    }
    if (absl::IsNotFound(resolved.status()) && IsUrl(spec)) {
      report.findings = UnfinishedCheckpoint(at);
      if (!report.findings.empty()) return report;
    }
    return resolved.status();
  }
  report.path = resolved->prefix;
  std::vector<Finding>& out = report.findings;
  if (!resolved->state_dir.empty()) CheckStateFile(Location::Of(resolved->state_dir), resolved->notes, &out);
  const Location checkpoint = Location::Of(resolved->prefix);
  Storage& store = checkpoint.store();
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
    TFCKPT_RETURN_IF_ERROR(DataFilesPermitted(c, store));
    CheckFiles(c, store, &out);
    CheckUnfinishedWrites(checkpoint, Severity::kWarning, &out);
  }
  size_t pieces_total = 0;
  for (const auto& t : c.tensors()) pieces_total += t.slices.size();
  std::vector<bool> readable(pieces_total, false);
  CheckEntries(c, store, &out, &readable);
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

}  // namespace tfckpt
