// The order of a bundle's commits (publish_bundle.h).
#include "publish/publish_bundle.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "base/path.h"
#include "publish/publication.h"
#include "run/run.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "tfckpt/strings.h"

namespace tfckpt {

std::vector<std::string> ExistingBundleFiles(const std::string& prefix) {
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
  if (overwrite) stale = ExistingBundleFiles(prefix);
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
