// Opening checkpoints by name: resolving what the user named (a prefix, an index file,
// a directory and its state file, V1 files or patterns, safetensors) and handing it to
// the format's loader. The one place that decides which format a CKPT is.
#include "tfckpt/open.h"

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <optional>
#include <string_view>
#include <set>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint_state.pb.h"
#include "format/bundle/bundle_reader.h"
#include "format/safetensors/safetensors_reader.h"
#include "format/table/table.h"
#include "format/v1/v1_reader.h"
#include "base/path.h"
#include "base/regex.h"
#include "tfckpt/status.h"

namespace tfckpt {

namespace {

bool IsTableFile(const Location& file) {
  auto f = file.OpenForRead();
  if (!f.ok() || (*f)->size() < kFooterSize) return false;
  char magic[8];
  if (!(*f)->ReadAt((*f)->size() - 8, 8, magic).ok()) return false;
  uint64_t v;
  std::memcpy(&v, magic, 8);
  return v == kTableMagic;
}

std::vector<std::string> Glob(const Location& pattern) {
  std::vector<std::string> out = pattern.store().Glob(pattern.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Names in a directory's `listing` ending in ".index" (hidden ones too: a prefix may be the
// directory itself, giving a file named ".index").
std::vector<std::string> IndexFilesIn(const std::vector<DirEntry>& listing) {
  std::vector<std::string> out;
  for (const DirEntry& e : listing) {
    if (absl::EndsWith(e.name, ".index") && e.kind == EntryKind::kFile) out.push_back(e.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The kind of `name` in a directory's `listing`; kOther when it is not there.
EntryKind KindIn(const std::vector<DirEntry>& listing, std::string_view name) {
  for (const DirEntry& e : listing) {
    if (e.name == name) return e.kind;
  }
  return EntryKind::kOther;
}

// The entries of `spec` when it is a directory (a local one, or an object store prefix with
// objects under it), nullopt when it is not; an error when that cannot be told (a
// directory that may not be read, a prefix that may not be listed and is no object). One
// listing, which the caller decides from: on an object store every probe is a request.
absl::StatusOr<std::optional<std::vector<DirEntry>>> DirectoryListing(const Location& spec) {
  absl::StatusOr<std::vector<DirEntry>> listing = spec.store().List(spec.path());
  if (listing.ok()) return std::optional<std::vector<DirEntry>>(*std::move(listing));
  if (!absl::IsPermissionDenied(listing.status())) return std::nullopt;  // (absent, a file)
  // Not one this caller may list: Stat tells a file (which needs no listing: credentials
  // that may read objects but not list them) from a refusal.
  const absl::StatusOr<FileStat> stat = spec.Stat();
  if (absl::IsPermissionDenied(stat.status())) return stat.status();
  if (stat.ok() && stat->kind == EntryKind::kDirectory) return listing.status();  // (a directory it cannot read)
  return std::nullopt;
}

// ReadCheckpointState on the directory `dir`.
absl::StatusOr<std::string> ReadStateFile(const Location& dir, std::vector<std::string>* notes) {
  const std::string path = JoinPath(dir.path(), "checkpoint");
  auto text = dir.store().ReadSmallFile(path, kMaxStateFileBytes);
  if (!text.ok()) return absl::NotFoundError(StrCat(path, ": cannot open"));
  pb::CheckpointState state;
  google::protobuf::TextFormat::Parser parser;
  parser.AllowUnknownField(true);
  // A state file is two flat fields: deep nesting (of unknown fields, say) is refused
  // before the parser's recursion runs out of stack.
  parser.SetRecursionLimit(16);
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
  if (state.model_checkpoint_path().size() > kMaxCheckpointPathBytes) {
    return DataLossAt("state.parse", path, "", -1,
                      StrCat("model_checkpoint_path is ", state.model_checkpoint_path().size(),
                             " bytes long, longer than any path (", kMaxCheckpointPathBytes, ")"));
  }
  std::string prefix = JoinPath(dir.path(), state.model_checkpoint_path());
  // (A path read from a file: resolved here, once -- JoinPath may have made it a path of
  // another store than the state file's.)
  if (const Location named = Location::Of(prefix); !state.model_checkpoint_path().empty() &&
      state.model_checkpoint_path()[0] == '/' && !named.Sibling(".index").Exists() && !named.Exists()) {
    // An absolute path from the machine that trained: the files were moved since. Look
    // beside the state file, as a user who copied the directory would expect.
    const Location local = dir.Child(Basename(prefix));
    if (local.Sibling(".index").Exists() || local.Exists() || !Glob(local.Sibling("-?????-of-?????")).empty()) {
      if (notes) notes->push_back(StrCat("state file names ", prefix, ", which does not exist; using ", local.path()));
      prefix = local.path();
    }
  }
  return prefix;
}

// A state file names a checkpoint that is resolved in turn, and so on: a chain longer than
// this (state files that name one another, an object that is also a "directory" of keys
// whose state file names it) is refused rather than followed for ever.
constexpr int kMaxResolveDepth = 8;

absl::StatusOr<ResolvedCheckpoint> Resolve(const Location& at, int depth) {
  const std::string& spec = at.path();
  Storage& store = at.store();
  if (spec.empty()) return absl::InvalidArgumentError("empty checkpoint path");
  if (depth > kMaxResolveDepth) {
    return absl::NotFoundError(StrCat(spec, ": no checkpoint found (state files lead on from one checkpoint to another more than ",
                                      kMaxResolveDepth, " times: a cycle?)"));
  }
  // An object store that cannot be asked (malformed URL, no bucket, refused credentials,
  // no answer) is that error, not "no checkpoint found".
  TFCKPT_RETURN_IF_ERROR(store.CheckAccess(spec));
  ResolvedCheckpoint r;
  if ((absl::EndsWith(spec, ".safetensors") || absl::EndsWith(spec, ".safetensors.index.json")) && at.Exists()) {
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
  if (absl::EndsWith(AV(spec), ".index") && store.IsFile(spec)) {
    return v2(spec.substr(0, spec.size() - 6));
  }
  // 2. A V2 prefix.
  if (store.IsFile(spec + ".index")) return v2(spec);
  // 3. A directory: decided from one listing of it. (A refusal to say is an error: an
  // object store's prefix that may not be listed, a local directory that may not be read.)
  TFCKPT_ASSIGN_OR_RETURN(const std::optional<std::vector<DirEntry>> dir, DirectoryListing(at));
  if (dir.has_value()) {
    const std::vector<DirEntry>& listing = *dir;
    if (const std::string state = JoinPath(spec, "checkpoint"); KindIn(listing, "checkpoint") == EntryKind::kFile) {
      std::vector<std::string> notes;
      TFCKPT_ASSIGN_OR_RETURN(std::string prefix, ReadStateFile(at, &notes));
      notes.insert(notes.begin(), StrCat("resolved ", spec, " through its checkpoint state file to ", prefix));
      // A prefix named in this directory (as TensorFlow writes them) is decided from the
      // listing; one elsewhere, or "." (the directory itself), is looked up.
      const std::string base = Basename(prefix);
      const bool here = !base.empty() && base != "." && base != ".." && Dirname(prefix) == Dirname(JoinPath(spec, "x"));
      const EntryKind kind = here ? KindIn(listing, base) : EntryKind::kOther;
      // (One in this directory is in this store; one elsewhere may be in another.)
      const Location named = here ? at.At(prefix) : Location::Of(prefix);
      const bool is_dir = here ? kind == EntryKind::kDirectory : named.IsDirectory();
      absl::StatusOr<ResolvedCheckpoint> inner = absl::NotFoundError("");
      if (is_dir && named.Child(".index").IsFile()) {
        inner = ResolvedCheckpoint{Format::kV2, JoinPath(prefix, "."), {}, {}, ""};
      } else if (here ? KindIn(listing, base + ".index") == EntryKind::kFile : named.Sibling(".index").IsFile()) {
        inner = ResolvedCheckpoint{Format::kV2, prefix, {}, {}, ""};
      } else if (!is_dir) {
        inner = Resolve(named, depth + 1);
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
    std::vector<std::string> indexes = IndexFilesIn(listing);
    if (indexes.size() == 1) {
      const std::string& name = indexes[0];
      return v2(JoinPath(spec, name.size() == 6 ? "." : name.substr(0, name.size() - 6)));
    }
    if (indexes.size() > 1) {
      return absl::InvalidArgumentError(StrCat(spec, ": holds several checkpoints and no state file: ",
                                               absl::StrJoin(indexes, ", "), " (name one of them)"));
    }
    const std::string sm = JoinPath(spec, "variables/variables");
    if (KindIn(listing, "variables") == EntryKind::kDirectory && store.IsFile(sm + ".index")) return v2(sm);
    // A single V1 checkpoint (one table file, or the shards of one).
    std::set<std::string> v1;
    static const Regex kShard = Regex::Fixed(R"((.*)-\d{5}-of-(\d{5}))");
    for (const DirEntry& e : listing) {
      const std::string path = JoinPath(spec, e.name);
      if (e.kind != EntryKind::kFile || !IsTableFile(at.At(path))) continue;
      std::vector<std::string> m;
      v1.insert(kShard.FullMatch(path, &m) ? StrCat(m[0], "-00000-of-", m[1]) : path);
    }
    if (v1.size() == 1) return Resolve(at.At(*v1.begin()), depth + 1);
    if (v1.size() > 1) {
      return absl::InvalidArgumentError(StrCat(spec, ": holds several V1 checkpoints: ", absl::StrJoin(v1, ", "),
                                               " (name one of them)"));
    }
    return absl::NotFoundError(StrCat(spec, ": directory holds no checkpoint (no state file, no *.index)"));
  }
  r.format = Format::kV1;
  // 4. A V1 file, possibly one shard of a sharded V1 checkpoint.
  const bool is_file = store.IsFile(spec);
  if (is_file && IsTableFile(at)) {
    static const Regex kSharded = Regex::Fixed(R"((.*)-(\d{5})-of-(\d{5}))");
    std::vector<std::string> m;
    if (kSharded.FullMatch(spec, &m)) {
      const std::string base = m[0];
      const int n = std::stoi(m[2]);
      for (int i = 0; i < n; ++i) {
        std::string f = absl::StrFormat("%s-%05d-of-%05d", base, i, n);
        if (!store.Exists(f)) return absl::NotFoundError(StrCat(f, ": V1 shard missing"));
        r.v1_files.push_back(f);
      }
      r.prefix = absl::StrFormat("%s-?????-of-%05d", base, n);
      return r;
    }
    r.prefix = spec;
    r.v1_files = {spec};
    return r;
  }
  if (is_file) {
    return DataLossAt("table.footer", spec, "", -1,
                      StrCat("not a checkpoint (no ", spec, ".index beside it, and not a V1 table file)"));
  }
  // 5. A V1 pattern.
  std::vector<std::string> files = Glob(spec.find_first_of("*?[") != std::string::npos ? at : at.Sibling("-?????-of-?????"));
  if (!files.empty()) {
    for (const auto& f : files) {
      if (!IsTableFile(at.At(f))) return DataLossAt("table.footer", f, "", -1, "not a V1 checkpoint table");
    }
    r.prefix = spec;
    r.v1_files = std::move(files);
    return r;
  }
  // Unreachable is not absent: a directory on the way that cannot be searched.
  if (auto st = store.Stat(spec + ".index"); absl::IsPermissionDenied(st.status())) {
    return ErrnoError(spec + ".index", "cannot open", EACCES);
  }
  return absl::NotFoundError(
      StrCat(spec, ": no checkpoint found (looked for ", spec, ".index, a directory, and V1 files)"));
}

}  // namespace

absl::StatusOr<std::string> ReadCheckpointState(const std::string& dir, std::vector<std::string>* notes) {
  return ReadStateFile(Location::Of(dir), notes);
}

absl::StatusOr<ResolvedCheckpoint> ResolveCheckpoint(const std::string& spec) { return Resolve(Location::Of(spec), 0); }

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenResolved(const ResolvedCheckpoint& r, std::vector<Finding>* findings,
                                                         const FileOpener* opener) {
  return r.format == Format::kV2            ? OpenBundle(r.prefix, findings, opener)
         : r.format == Format::kSafetensors ? OpenSafetensors(r.prefix)
                                            : OpenV1(r.prefix, r.v1_files, findings);
}

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpoint(const std::string& spec, std::vector<Finding>* findings) {
  TFCKPT_ASSIGN_OR_RETURN(ResolvedCheckpoint r, ResolveCheckpoint(spec));
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = OpenResolved(r, findings);
  if (c.ok()) (*c)->set_notes(std::move(r.notes));
  return c;
}

}  // namespace tfckpt
