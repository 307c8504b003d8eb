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

std::vector<std::string> ExistingBundleFiles(const Location& at) {
  const std::string& prefix = at.path();
  std::vector<std::string> out;
  if (at.Sibling(".index").Exists()) out.push_back(prefix + ".index");
  const std::string stem = Basename(prefix) + ".data-";
  auto listing = at.store().List(Dirname(prefix));
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

namespace {

// One run of PublishBundle: its arguments, and what it has done so far (what a failure
// must undo or put back).
class BundleCommit {
 public:
  BundleCommit(const Location& prefix, bool overwrite, const std::vector<std::string>& data_files,
               const std::function<absl::Status(size_t)>& commit_data_file,
               const std::function<absl::Status()>& commit_index, const std::function<absl::Status()>& check_data,
               bool* replace_in_place, const std::function<void(size_t)>& keep_data_file)
      : prefix_(prefix.path()), index_(prefix_ + ".index"), at_(prefix), overwrite_(overwrite), data_files_(data_files),
        commit_data_file_(commit_data_file), commit_index_(commit_index), check_data_(check_data),
        replace_in_place_(replace_in_place), keep_data_file_(keep_data_file), store_(prefix.store()),
        committed_(data_files.size(), false), replaced_(data_files.size(), false),
        collides_(data_files.size(), false) {}

  absl::Status Publish();

 private:
  // Which new data files take names of the old checkpoint's, and so how it is replaced.
  void Decide();
  // From here the run finishes whatever happens (run/run.h).
  void PassNoReturn() {
    if (Run* run = CurrentRun()) run->PassPointOfNoReturn();
  }
  // The data files, those under names the old checkpoint does not use first (it stays
  // whole meanwhile), then those under its names, its index removed right before.
  absl::Status CommitDataFiles();
  absl::Status BackUp();
  absl::Status RemoveOldIndex();
  absl::Status Restore(absl::Status s);
  absl::Status Fail(absl::Status s);
  // The new index's commit failed with `s`.
  absl::Status IndexFailed(absl::Status s);
  void PutOldIndexBack();
  // After the new index: the old checkpoint's data files that the new one does not use,
  // then (on a store that replaces in one step) the backups.
  absl::Status RemoveOld();

  const std::string prefix_, index_;
  const Location at_;  // the prefix and its store
  const bool overwrite_;
  const std::vector<std::string>& data_files_;
  const std::function<absl::Status(size_t)>& commit_data_file_;
  const std::function<absl::Status()>& commit_index_;
  const std::function<absl::Status()>& check_data_;
  bool* replace_in_place_;
  const std::function<void(size_t)>& keep_data_file_;
  Storage& store_;

  std::vector<std::string> stale_;  // the old checkpoint's files (overwrite)
  bool replacing_ = false;          // overwrite, and an old index is there
  bool in_place_ = false;           // the new index replaces the old one in one step
  bool guarded_ = false;            // the old checkpoint is backed up before its index goes
  std::string backup_;                                       // its prefix, once begun
  std::vector<std::pair<std::string, std::string>> backed_;  // (old data file, its copy)
  std::vector<std::unique_ptr<WritableFile>> backup_files_;  // committed; undone unless kept
  bool backed_up_ = false;                                   // the backup's index is up
  std::vector<bool> committed_;
  std::vector<bool> replaced_;  // (or perhaps: an unknown outcome)
  std::vector<bool> collides_;
  std::optional<std::string> old_index_;  // its bytes, while it may be put back
  bool old_index_removed_ = false;
  bool old_data_replaced_ = false;  // (or perhaps replaced: a commit whose outcome is unknown)
};

void BundleCommit::Decide() {
  replacing_ = overwrite_ && store_.Exists(index_);
  // The new data files that take names of the old checkpoint's (the same number of data
  // files): the old index must be gone before the first of them is in place, so that no
  // reader pairs it with new data. (Named by a listing, or found one by one where the
  // store may not be listed.)
  for (size_t i = 0; i < data_files_.size() && replacing_; ++i) {
    collides_[i] = std::find(stale_.begin(), stale_.end(), data_files_[i]) != stale_.end() ||
                   store_.Exists(data_files_[i]);
  }
  const bool any_collides = std::find(collides_.begin(), collides_.end(), true) != collides_.end();
  // Where the store replaces in one step and no new data file takes an old one's name, the
  // old index is never removed: the new one replaces it (a reader finds one or the other).
  in_place_ = replace_in_place_ != nullptr && replacing_ && !any_collides;
  if (replace_in_place_ != nullptr) *replace_in_place_ = in_place_;
  // On such a store, where new data files do take the old ones' names, the old checkpoint
  // is first copied inside the store under a backup prefix (PREFIX.tfckpt-old-XXXXXXXX:
  // its data files, then its index), and put back from there should the run fail or be
  // stopped before the new index is up; the backup goes once it is.
  guarded_ = replace_in_place_ != nullptr && replacing_ && any_collides;
}

absl::Status BundleCommit::BackUp() {
  backup_ = BackupPrefix(prefix_);
  // The old data files listed, and any a new one takes that the listing missed.
  std::vector<std::string> old_data;
  for (const auto& path : stale_) {
    if (path != index_) old_data.push_back(path);
  }
  for (size_t i = 0; i < data_files_.size(); ++i) {
    if (collides_[i] && std::find(old_data.begin(), old_data.end(), data_files_[i]) == old_data.end()) {
      old_data.push_back(data_files_[i]);
    }
  }
  for (const auto& path : old_data) {
    if (path.rfind(prefix_, 0) != 0) continue;
    const std::string to = backup_ + path.substr(prefix_.size());
    TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, CopyWithin(store_, path, to));
    backup_files_.push_back(std::move(f));
    backed_.emplace_back(path, to);
  }
  // The backup's data files are there, its index not yet (a kill leaves data files that
  // the next --force removes).
  TFCKPT_RETURN_IF_ERROR(Reached("old-backing-up"));
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f,
                          WriteWhole(store_, backup_ + ".index", *old_index_, kIndexWrite));
  backup_files_.push_back(std::move(f));
  backed_up_ = true;
  return Reached("old-backed-up");
}

absl::Status BundleCommit::RemoveOldIndex() {
  if (!replacing_ || old_index_removed_) return absl::OkStatus();
  TFCKPT_RETURN_IF_ERROR(CheckStop());
  absl::StatusOr<std::string> bytes = store_.ReadSmallFile(index_, kIndexWrite.part_size);
  if (bytes.ok()) old_index_ = *std::move(bytes);  // (else it cannot be put back)
  if (guarded_) {
    // (the old checkpoint is not given up without its backup)
    if (!bytes.ok()) return bytes.status();
    TFCKPT_RETURN_IF_ERROR(BackUp());
  } else {
    PassNoReturn();
  }
  TFCKPT_RETURN_IF_ERROR(store_.Remove(index_));
  old_index_removed_ = true;
  return Reached("old-index-removed");
}

// Guarded, once the backup is whole: the old data files that were (or may have been)
// replaced are copied back from it, then its index (only if absent: a new index whose
// commit failed is gone by then), then the backup is removed. The run's undo must not
// remove what is put back: those names are kept (keep_data_file), and the copies back are
// published. A restore that fails keeps the backup (published) and says where.
absl::Status BundleCommit::Restore(absl::Status s) {
  // From here the restore goes through whatever comes (a stop no longer cuts it short).
  PassNoReturn();
  (void)Reached("old-restoring");
  absl::Status r;
  for (size_t i = 0; i < data_files_.size() && r.ok(); ++i) {
    if (!replaced_[i]) continue;
    if (keep_data_file_) keep_data_file_(i);
    for (const auto& [path, copy] : backed_) {
      if (path != data_files_[i]) continue;
      absl::StatusOr<std::unique_ptr<WritableFile>> back = CopyWithin(store_, copy, path);
      if (back.ok()) (*back)->Publish();
      r = back.status();
    }
  }
  if (r.ok() && (old_index_removed_ || !store_.Exists(index_))) {
    absl::StatusOr<std::unique_ptr<WritableFile>> back = WriteWhole(store_, index_, *old_index_, kIndexWrite);
    if (back.ok()) (*back)->Publish();
    r = back.status();
  }
  if (!r.ok()) {
    for (const auto& f : backup_files_) f->Publish();
    return absl::Status(s.code(), StrCat(s.message(), " (the old checkpoint could not be put back: ", r.message(),
                                         "; it is kept whole under ", backup_, ".index)"));
  }
  // The new data files under other names go (the run's undo removes them too).
  for (size_t i = 0; i < data_files_.size(); ++i) {
    if (committed_[i] && !collides_[i]) (void)store_.Remove(data_files_[i]);
  }
  RemoveBackups(store_, prefix_, backup_, backed_);
  return absl::Status(s.code(), StrCat(s.message(), " (the old checkpoint was kept)"));
}

void BundleCommit::PutOldIndexBack() {
  absl::StatusOr<std::unique_ptr<WritableFile>> back = store_.Create(index_, kIndexWrite);
  absl::Status put = back.status();
  if (put.ok()) put = (*back)->Append(*old_index_);
  if (put.ok()) put = (*back)->Close();
  if (put.ok()) put = (*back)->Commit();
  if (put.ok()) (*back)->Publish();
}

// A failure: the data files this run put in place are removed, as no reader would take
// them. (Not the index: an index that could not be written only if absent is another
// run's.) The old checkpoint stays when none of its data files was replaced (its index put
// back if it was removed); else what is left of it goes too. Guarded, the old checkpoint
// is put back from its backup (Restore); a backup not yet whole is removed by the run's
// undo (the old checkpoint was not touched).
absl::Status BundleCommit::Fail(absl::Status s) {
  if (backed_up_) return Restore(std::move(s));
  for (size_t i = 0; i < data_files_.size(); ++i) {
    if (committed_[i] || (collides_[i] && old_data_replaced_)) (void)store_.Remove(data_files_[i]);
  }
  if (old_data_replaced_) {
    for (const auto& path : stale_) (void)store_.Remove(path);
  } else if (old_index_removed_ && old_index_.has_value()) {
    PutOldIndexBack();
  }
  return s;
}

absl::Status BundleCommit::CommitDataFiles() {
  for (const bool on_old_names : {false, true}) {
    for (size_t i = 0; i < data_files_.size(); ++i) {
      if (collides_[i] != on_old_names) continue;
      if (on_old_names) {
        if (absl::Status s = RemoveOldIndex(); !s.ok()) return Fail(s);
      }
      absl::Status s = commit_data_file_(i);
      committed_[i] = s.ok();
      // A commit refused left the old file as it was; one whose outcome is unknown (its
      // last attempt went unanswered) may have replaced it.
      if (on_old_names && (s.ok() || CommitMayHaveHappened(s))) old_data_replaced_ = replaced_[i] = true;
      if (!s.ok()) return Fail(s);
    }
  }
  return absl::OkStatus();
}

// An index whose commit may have been carried out (its last attempt went unanswered) names
// these data files: it goes before them, and unless it is gone for sure they stay (a reader
// must never find an index whose data files were removed). Replacing in place, the old
// index still there says the new one did not go up; anything else is removed too, and the
// old one put back (Fail).
absl::Status BundleCommit::IndexFailed(absl::Status s) {
  const auto still_old = [&] {
    if (!in_place_ || !old_index_.has_value()) return false;
    absl::StatusOr<std::string> now = store_.ReadSmallFile(index_, kIndexWrite.part_size);
    return now.ok() && *now == *old_index_;
  };
  if (CommitMayHaveHappened(s) && !still_old()) {
    absl::Status gone = store_.Remove(index_);
    if (!gone.ok() && !absl::IsNotFound(gone)) {
      // (guarded: the old checkpoint stays whole under its backup's name)
      for (const auto& f : backup_files_) f->Publish();
      return absl::Status(s.code(), StrCat(s.message(), " (", index_, " may have been written and could not be "
                                           "removed: ", gone.message(), "; its data files were left in place",
                                           backed_up_ ? StrCat("; the old checkpoint is kept whole under ", backup_,
                                                               ".index")
                                                      : std::string(),
                                           ")"));
    }
    if (in_place_) old_index_removed_ = true;
  }
  return Fail(s);
}

absl::Status BundleCommit::RemoveOld() {
  std::vector<std::string> ours = data_files_;
  ours.push_back(index_);
  for (const auto& path : stale_) {
    if (std::find(ours.begin(), ours.end(), path) == ours.end()) (void)store_.Remove(path);
  }
  if (replace_in_place_ != nullptr && overwrite_) {
    // This run's backup, and any that a --force run killed before it could remove its own
    // left (the new checkpoint is up: none of them is needed any more).
    TFCKPT_RETURN_IF_ERROR(Reached("backup-removing"));
    for (const auto& f : backup_files_) f->Publish();  // (removed here, not by an undo)
    RemoveBackups(store_, prefix_, backup_, backed_);
  }
  return absl::OkStatus();
}

absl::Status BundleCommit::Publish() {
  if (overwrite_) stale_ = ExistingBundleFiles(at_);
  // A stop requested so far undoes the run; from the first change to what is under the
  // output's names that cannot be undone (the old index removed, the new one committed)
  // the run finishes instead (run/run.h, docs/RELIABILITY.md).
  TFCKPT_RETURN_IF_ERROR(CheckStop());
  Decide();
  TFCKPT_RETURN_IF_ERROR(CommitDataFiles());  // (Fail done)
  // The one window where data files are in place and the index is not (a kill here leaves
  // data files that the next run, and validate, recognise: docs/RELIABILITY.md).
  if (absl::Status s = Reached("data-committed"); !s.ok()) return Fail(s);
  if (check_data_) {
    if (absl::Status s = check_data_(); !s.ok()) return Fail(s);
  }
  if (absl::Status s = CheckStop(); !s.ok()) return Fail(s);
  if (in_place_) {
    // (its bytes, to be put back should the new one's commit end unknown)
    absl::StatusOr<std::string> bytes = store_.ReadSmallFile(index_, kIndexWrite.part_size);
    if (bytes.ok()) old_index_ = *std::move(bytes);
    if (absl::Status s = Reached("index-replacing"); !s.ok()) return Fail(s);
  } else if (absl::Status s = RemoveOldIndex(); !s.ok()) {
    return Fail(s);
  }
  PassNoReturn();
  if (absl::Status s = commit_index_(); !s.ok()) return IndexFailed(s);
  TFCKPT_RETURN_IF_ERROR(Reached("index-committed"));
  return RemoveOld();
}

}  // namespace

absl::Status PublishBundle(const Location& prefix, bool overwrite, const std::vector<std::string>& data_files,
                           const std::function<absl::Status(size_t)>& commit_data_file,
                           const std::function<absl::Status()>& commit_index,
                           const std::function<absl::Status()>& check_data, bool* replace_in_place,
                           const std::function<void(size_t)>& keep_data_file) {
  return BundleCommit(prefix, overwrite, data_files, commit_data_file, commit_index, check_data, replace_in_place,
                      keep_data_file)
      .Publish();
}

}  // namespace tfckpt
