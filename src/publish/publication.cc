// Publication (publication.h): the one owner of "write, verify, publish".
#include "publish/publication.h"

#include <algorithm>
#include <map>

#include "base/parallel.h"
#include "base/path.h"
#include "kvstore/local/tracked.h"
#include "publish/publish_bundle.h"
#include "run/left_behind.h"
#include "run/run.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {

absl::Status NotWritten(const std::string& path) {
  return absl::NotFoundError(StrCat(path, ": not a file of the output being written"));
}

// A data file of a bundle staged under a temporary name: a hard link to an input's, or
// (another file system, an object store) a copy, which reports a full disk as such.
// Destroyed uncommitted, it removes the temporary.
class StagedFile {
 public:
  // REQUIRES: `store` holds `dst`.
  static absl::StatusOr<std::unique_ptr<StagedFile>> Create(const Location& src, Storage& store, const std::string& dst,
                                                            ServerSideCopy mode) {
    std::unique_ptr<StagedFile> f(new StagedFile(store));
    f->dst_ = dst;
    f->tmp_ = TemporaryName(dst);
    f->tracked_ = TrackCreated(f->tmp_);
    if (store.Link(src.path(), f->tmp_).ok()) {
      f->linked_ = true;
      return f;
    }
    ForgetCreated(f->tracked_);
    f->tracked_ = 0;
    TFCKPT_ASSIGN_OR_RETURN(auto in, src.OpenForRead());
    TFCKPT_ASSIGN_OR_RETURN(f->copy_, store.Create(dst));
    // Between objects of one store: copied inside it, where it can (`in` outlives Close).
    if (mode != ServerSideCopy::kNever && in->size() > 0) {
      TFCKPT_RETURN_IF_ERROR(f->copy_->PlanCopies(in->size(), {{0, in.get(), 0, in->size()}}, mode).status());
    }
    TFCKPT_RETURN_IF_ERROR(f->copy_->AppendFrom(*in, 0, in->size()));
    TFCKPT_RETURN_IF_ERROR(f->copy_->Close());
    return f;
  }
  ~StagedFile() {
    if (!linked_) return;  // (tracked_ is 0 outside a run: the link is still removed)
    (void)store_.Remove(tmp_);
    ForgetCreated(tracked_);
  }
  bool ReadableBeforeCommit() const { return !copy_ || copy_->ReadableBeforeCommit(); }
  // The staged file, read as the file it will become (an object store's copy: once
  // committed).
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenWritten() {
    if (copy_) return copy_->OpenWritten();
    TFCKPT_ASSIGN_OR_RETURN(auto f, store_.OpenForRead(tmp_));
    return Renamed(std::move(f), dst_);
  }
  absl::Status Commit() {
    if (copy_) return copy_->Commit();
    TFCKPT_RETURN_IF_ERROR(MoveIntoPlace(tmp_, tracked_, dst_));
    tracked_ = 0;
    linked_ = false;
    return absl::OkStatus();
  }
  void Publish() {
    if (copy_) copy_->Publish();
  }

 private:
  explicit StagedFile(Storage& store) : store_(store) {}
  Storage& store_;
  std::string dst_, tmp_;
  uint64_t tracked_ = 0;
  bool linked_ = false;  // the temporary is ours and not yet renamed
  std::unique_ptr<WritableFile> copy_;
};

namespace {

// Removes what writers killed at `prefix` left: their temporaries and, when one died
// between its data files' commit and its index's (its index temporary is still there, the
// index is not), those data files: no index refers to them.
void RemoveLeftovers(const Location& at) {
  Storage& store = at.store();
  const std::string& prefix = at.path();
  const std::string stem = Basename(prefix) + ".";
  bool interrupted_commit = false;
  for (const std::string& t : store.RemoveStaleTemporaries(DirectoryOf(prefix), stem)) {
    if (Basename(t).rfind(stem + "index.tmp-tfckpt-", 0) == 0) interrupted_commit = true;
  }
  if (interrupted_commit && !at.Sibling(".index").Exists()) {
    for (const std::string& f : ExistingBundleFiles(at)) (void)store.Remove(f);
  }
}

}  // namespace

Publication::~Publication() = default;

absl::StatusOr<std::unique_ptr<Publication>> Publication::Bundle(const Location& at, PublishOptions options) {
  const std::string& prefix = at.path();
  TFCKPT_RETURN_IF_ERROR(at.store().CreateParentDirectories(prefix));
  RemoveLeftovers(at);
  if (!options.overwrite) {
    // (Data files in place are this output's own: only an index there is refused.)
    std::vector<std::string> existing;
    if (!options.data_in_place) {
      existing = ExistingBundleFiles(at);
    } else if (at.Sibling(".index").Exists()) {
      existing.push_back(prefix + ".index");
    }
    if (!existing.empty()) {
      return absl::AlreadyExistsError(StrCat(existing[0], ": output exists (use --force to replace it)"));
    }
  }
  std::unique_ptr<Publication> p(new Publication());
  p->store_ = at.shared_store();
  p->prefix_ = prefix;
  p->options_ = std::move(options);
  p->bundle_ = true;
  return p;
}

absl::Status Publication::ClearIndexForDataInPlace(const Location& prefix, bool overwrite,
                                                   const std::string& refusal) {
  const Location index = prefix.Sibling(".index");
  if (!index.Exists()) return absl::OkStatus();
  if (!overwrite) return absl::AlreadyExistsError(refusal);
  if (absl::Status s = index.Remove(); !s.ok() && !absl::IsNotFound(s)) return s;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Publication>> Publication::Files(const std::vector<Location>& files,
                                                                const std::vector<std::string>& inputs,
                                                                bool overwrite) {
  Storage& store = files.front().store();
  std::vector<std::string> paths;
  for (const Location& f : files) paths.push_back(f.path());
  TFCKPT_RETURN_IF_ERROR(store.CheckNotInputs(paths, inputs));
  for (const auto& path : paths) {
    if (!overwrite && store.Exists(path)) {
      return absl::AlreadyExistsError(StrCat(path, ": output exists (use --force to replace it)"));
    }
  }
  TFCKPT_RETURN_IF_ERROR(store.CreateParentDirectories(paths.front()));
  std::unique_ptr<Publication> p(new Publication());
  p->store_ = files.front().shared_store();
  p->options_.overwrite = overwrite;
  return p;
}

void Publication::Add(WritableFile& file) { files_.push_back(Entry{file.path(), &file, nullptr}); }

absl::Status Publication::Stage(const Location& src, const std::string& path, ServerSideCopy mode) {
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<StagedFile> f, StagedFile::Create(src, *store_, path, mode));
  files_.push_back(Entry{path, nullptr, std::move(f)});
  return absl::OkStatus();
}

absl::Status Publication::MoveIn(const std::string& src, const std::string& path) {
  if (!index_only_) {
    // The inputs' files become the output's (not tracked: they are not ours to remove). A
    // stop until here leaves the inputs whole; from the first move on, the run finishes
    // (run/run.h: its point of no return).
    TFCKPT_RETURN_IF_ERROR(CheckStop());
    if (Run* run = CurrentRun()) run->PassPointOfNoReturn();
    index_only_ = true;
  }
  // (Storage::Move: when both names are already links to one file, the output of an
  // earlier merge of the same parts, the input's name is removed rather than left behind,
  // orphaned once its index is gone.)
  TFCKPT_RETURN_IF_ERROR(store_->Move(src, path));
  moved_ = true;
  files_.push_back(Entry{path, nullptr, nullptr});
  return Reached("input-moved");
}

void Publication::AddInPlace(const std::string& path) {
  index_only_ = true;
  files_.push_back(Entry{path, nullptr, nullptr});
}

namespace {

// The tests' damage in `f` (Publication::PlantFault): whether it was planted.
absl::StatusOr<bool> PlantOutputFault(WritableFile& f, uint64_t from, uint64_t n) {
  const int64_t at = FlipOutputByte();
  if (at < 0 || static_cast<uint64_t>(at) < from || static_cast<uint64_t>(at) - from >= n) return false;
  if (!f.ReadableBeforeCommit()) return false;
  TFCKPT_ASSIGN_OR_RETURN(auto in, f.OpenWritten());
  if (static_cast<uint64_t>(at) >= in->size()) return false;
  char byte;
  TFCKPT_RETURN_IF_ERROR(in->ReadAt(static_cast<uint64_t>(at), 1, &byte));
  byte = static_cast<char>(byte ^ 1);
  TFCKPT_RETURN_IF_ERROR(f.WriteAt(static_cast<uint64_t>(at), std::string_view(&byte, 1)));
  return true;
}

}  // namespace

absl::Status Publication::PlantFault(WritableFile& f, uint64_t from, uint64_t n) {
  if (fault_planted_ || FlipOutputByte() < 0) return absl::OkStatus();
  TFCKPT_ASSIGN_OR_RETURN(const bool planted, PlantOutputFault(f, from, n));
  if (planted) fault_planted_ = true;
  return absl::OkStatus();
}

WrittenOutput Publication::Written(WritableFile& index, const WrittenOutput& extra) const {
  std::map<std::string, std::function<absl::StatusOr<std::unique_ptr<ReadableFile>>()>> files;
  files.emplace(index.path(), [&index] { return index.OpenWritten(); });
  for (const Entry& e : files_) {
    if (e.written != nullptr) files.emplace(e.name, [f = e.written] { return f->OpenWritten(); });
    if (e.staged != nullptr) files.emplace(e.name, [f = e.staged.get()] { return f->OpenWritten(); });
  }
  WrittenOutput out = extra;
  out.open = [files = std::move(files)](const std::string& path) -> absl::StatusOr<std::unique_ptr<ReadableFile>> {
    auto it = files.find(path);
    if (it == files.end()) return NotWritten(path);
    return it->second();
  };
  return out;
}

bool Publication::DataReadableBeforeCommit() const {
  return std::all_of(files_.begin(), files_.end(), [](const Entry& e) {
    return e.written != nullptr ? e.written->ReadableBeforeCommit()
                                : e.staged == nullptr || e.staged->ReadableBeforeCommit();
  });
}

std::vector<std::string> Publication::DataNames() const {
  std::vector<std::string> names;
  for (const Entry& e : files_) names.push_back(e.name);
  return names;
}

absl::Status Publication::CommitData(size_t i) {
  Entry& e = files_[i];
  if (e.written != nullptr) return e.written->Commit();
  if (e.staged != nullptr) return e.staged->Commit();
  return absl::OkStatus();  // moved or in place
}

absl::Status Publication::WriteIndex(const Index& index, bool replace) {
  TFCKPT_ASSIGN_OR_RETURN(index_, store_->Create(prefix_ + ".index", replace ? kIndexReplace : kIndexWrite));
  return index.write(*index_);
}

absl::Status Publication::CloseAll(bool with_index) {
  // In parallel: the device sees their writes at once. (Staged files are closed already.)
  std::vector<WritableFile*> open;
  for (const Entry& e : files_) {
    if (e.written != nullptr) open.push_back(e.written);
  }
  if (with_index) open.push_back(index_.get());
  return ParallelForStatus(open.size(), Jobs(RunJobs()),
                           [&](size_t i, const std::atomic<bool>&) { return open[i]->Close(); });
}

absl::Status Publication::CommitBundle(const Index& index) {
  if (!bundle_ || committed_) return absl::FailedPreconditionError("bug: not a bundle's publication, or committed");
  committed_ = true;
  if (index_only_) return CommitIndexOnly(index);
  // The tests' fault (RunOptions::flip_output_byte, tests/cli_verify_test.py): one bit of
  // the first data file flipped after it was written, as a failing disk or copy would.
  if (!files_.empty() && files_[0].written != nullptr) {
    TFCKPT_RETURN_IF_ERROR(PlantFault(*files_[0].written, 0, UINT64_MAX));
  }
  return DataReadableBeforeCommit() ? CommitLocal(index) : CommitToStore(index);
}

absl::Status Publication::CommitLocal(const Index& index) {
  if (index.prepare) TFCKPT_RETURN_IF_ERROR(index.prepare());
  TFCKPT_RETURN_IF_ERROR(WriteIndex(index, false));
  // Everything is written and nothing published: the check before the commit (reading
  // what the kernel is still writing back), then all of it made durable.
  if (options_.before_commit) TFCKPT_RETURN_IF_ERROR(options_.before_commit(Written(*index_, index.written)));
  TFCKPT_RETURN_IF_ERROR(CloseAll(true));  // (fsync)
  TFCKPT_RETURN_IF_ERROR(Reached("before-commit"));
  return PublishBundle(Location(store_, prefix_), options_.overwrite, DataNames(),
                       [this](size_t i) { return CommitData(i); }, [this] { return index_->Commit(); });
}

absl::Status Publication::CommitToStore(const Index& index) {
  // An object store: the data objects cannot be read before they are complete. They are
  // committed first; then what the writer reads back from them (prepare), the index (kept
  // in memory) is written, the output is checked, and the index goes up last: no reader
  // finds an index before its data is whole and checked.
  TFCKPT_RETURN_IF_ERROR(CloseAll(false));
  bool replace = false;  // (PublishBundle's decision)
  const auto index_then_check = [&]() -> absl::Status {
    if (index.prepare) TFCKPT_RETURN_IF_ERROR(index.prepare());
    TFCKPT_RETURN_IF_ERROR(WriteIndex(index, replace));
    TFCKPT_RETURN_IF_ERROR(index_->Close());
    return options_.before_commit ? options_.before_commit(Written(*index_, index.written)) : absl::OkStatus();
  };
  const auto keep = [this](size_t i) {
    if (files_[i].written != nullptr) files_[i].written->Publish();
    if (files_[i].staged != nullptr) files_[i].staged->Publish();
  };
  return PublishBundle(Location(store_, prefix_), options_.overwrite, DataNames(),
                       [this](size_t i) { return CommitData(i); }, [this] { return index_->Commit(); }, index_then_check,
                       options_.replace_in_one_step ? &replace : nullptr, keep);
}

absl::Status Publication::CommitIndexOnly(const Index& index) {
  if (index.prepare) TFCKPT_RETURN_IF_ERROR(index.prepare());
  TFCKPT_RETURN_IF_ERROR(WriteIndex(index, false));
  TFCKPT_RETURN_IF_ERROR(index_->Close());
  TFCKPT_RETURN_IF_ERROR(CheckStop());  // (data in place: the index is the first change)
  if (Run* run = CurrentRun()) run->PassPointOfNoReturn();
  // The index is written only if absent (kIndexWrite): one that --force replaces goes first.
  const std::string name = prefix_ + ".index";
  if (options_.overwrite && store_->Exists(name)) TFCKPT_RETURN_IF_ERROR(store_->Remove(name));
  TFCKPT_RETURN_IF_ERROR(index_->Commit());
  index_->Publish();  // the inputs are consumed: the output stays, whatever follows
  return Reached("index-committed");
}

void Publication::RemoveConsumed(const std::vector<Location>& inputs, const std::vector<Location>& data_files,
                                 bool by_copy, std::vector<std::string>* notes) {
  if (by_copy) {
    // The output is committed: the inputs are consumed now, whatever follows (an interrupt
    // no longer stops the run). Their indexes go first (no index is left naming a data file
    // that is gone), then their data files.
    if (Run* run = CurrentRun()) run->PassPointOfNoReturn();
    const auto remove = [notes](const Location& f) {
      if (absl::Status s = f.Remove(); !s.ok() && !absl::IsNotFound(s)) {
        notes->push_back(StrCat("--move: could not remove ", f.path(), ": ", s.message()));
      }
    };
    for (const Location& in : inputs) remove(in.Sibling(".index"));
    for (const Location& f : data_files) remove(f);
  }
  const std::string out_dir = DirectoryOf(prefix_);
  for (const Location& in : inputs) (void)in.Sibling(".index").Remove();
  for (const Location& in : inputs) {
    Storage& store = in.store();
    const std::string dir = DirectoryOf(in.path());
    const bool outputs_dir = &store == store_.get() && store.Absolute(dir) == store.Absolute(out_dir);
    if (!outputs_dir) (void)store.Remove(dir);  // only if empty
  }
  // (This tool's temporaries, beside the output: in its store.)
  const std::string& temporaries = options_.temporaries;
  if (!temporaries.empty()) (void)store_->RemoveAll(temporaries);
}

absl::Status Publication::CommitFiles() {
  if (bundle_ || committed_) return absl::FailedPreconditionError("bug: not a publication of files, or committed");
  committed_ = true;
  for (size_t i = 0; i < files_.size(); ++i) TFCKPT_RETURN_IF_ERROR(CommitData(i));
  return absl::OkStatus();
}

absl::Status Publication::CheckCommitted(const std::function<absl::Status()>& check) {
  if (!committed_) return absl::FailedPreconditionError("bug: CheckCommitted before the commit");
  const absl::Status s = check();
  // Stopped: the run's undo removes what it wrote (the message is the stop's own).
  if (s.ok() || absl::IsCancelled(s)) return s;
  if (moved_ && options_.temporaries.empty()) return s;  // the consumed inputs' only copy
  std::vector<std::string> files;
  if (bundle_) files.push_back(prefix_ + ".index");
  for (const Entry& e : files_) files.push_back(e.name);
  // One that cannot be removed is named as left behind (the run's error lists it, run/run.h),
  // and the message does not say the output was removed.
  bool kept = false;
  for (const std::string& f : files) {
    const absl::Status removed = store_->Remove(f);
    if (!removed.ok() && !absl::IsNotFound(removed) && NoteLeftBehind(f)) kept = true;
  }
  if (kept) return s;
  absl::Status out(s.code(), StrCat(s.message(), "; removed the output"));
  s.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace tfckpt
