// MergeV2Checkpoints (docs/FORMAT.md §e.3): bundles merged into one on raw index entries.
#include "tfckpt/bundle_merge.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/str_join.h"
#include "tensor_bundle.pb.h"
#include "format/bundle/bundle_proto.h"
#include "format/table/table.h"
#include "kvstore/local/tracked.h"
#include "run/run.h"
#include "tfckpt/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/ordered_code.h"
#include "tfckpt/path.h"
#include "tfckpt/status.h"

namespace tfckpt {

namespace {

struct Merged {
  pb::BundleEntryProto entry;
  size_t input = 0;  // which input it came from (for messages)
};

// How messages name an index key: the tensor name, or "NAME slice 0,3:-" for a slice key.
std::string DescribeKey(const std::string& key) {
  if (!IsSliceKey(key)) return StrCat("tensor \"", PrintableKey(key), "\"");
  auto d = DecodeSliceKey(key);
  if (!d.ok()) return StrCat("slice key \"", PrintableKey(key), "\"");
  return StrCat("slice ", ExtentsString(d->extents), " of tensor \"", PrintableKey(d->name), "\"");
}

// A data file of the output staged under a temporary name: a hard link to the input's,
// or (another file system) a copy, which reports a full disk as such. Destroyed
// uncommitted, it removes the temporary.
class LinkedOrCopied {
 public:
  static absl::StatusOr<std::unique_ptr<LinkedOrCopied>> Create(const std::string& src, const std::string& dst) {
    std::unique_ptr<LinkedOrCopied> f(new LinkedOrCopied());
    f->dst_ = dst;
    f->tmp_ = TemporaryName(dst);
    f->tracked_ = TrackCreated(f->tmp_);
    if (Storage::For(dst).Link(src, f->tmp_).ok()) return f;
    ForgetCreated(f->tracked_);
    f->tracked_ = 0;
    TFCKPT_ASSIGN_OR_RETURN(auto in, Storage::For(src).OpenForRead(src));
    TFCKPT_ASSIGN_OR_RETURN(f->copy_, Storage::For(dst).Create(dst));
    TFCKPT_RETURN_IF_ERROR(f->copy_->AppendFrom(*in, 0, in->size()));
    TFCKPT_RETURN_IF_ERROR(f->copy_->Close());
    return f;
  }
  ~LinkedOrCopied() {
    if (tracked_ == 0) return;
    (void)Storage::For(tmp_).Remove(tmp_);
    ForgetCreated(tracked_);
  }
  const std::string& path() const { return dst_; }
  bool ReadableBeforeCommit() const { return !copy_ || copy_->ReadableBeforeCommit(); }
  // The staged file, read as the file it will become (an object store's copy: once
  // committed).
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenWritten() {
    if (copy_) return copy_->OpenWritten();
    TFCKPT_ASSIGN_OR_RETURN(auto f, Storage::For(tmp_).OpenForRead(tmp_));
    return Renamed(std::move(f), dst_);
  }
  absl::Status Commit() {
    if (copy_) return copy_->Commit();
    TFCKPT_RETURN_IF_ERROR(MoveIntoPlace(tmp_, tracked_, dst_));
    tracked_ = 0;
    return absl::OkStatus();
  }

 private:
  LinkedOrCopied() = default;
  std::string dst_, tmp_;
  uint64_t tracked_ = 0;
  std::unique_ptr<WritableFile> copy_;
};

// --move: renames an input's data file to the output's name (Storage::Move: when both
// names are already links to one file, the output of an earlier merge of the same parts,
// the input's name is removed rather than left behind, orphaned once its index is gone).
absl::Status MoveDataFile(const std::string& src, const std::string& dst) { return Storage::For(dst).Move(src, dst); }

}  // namespace

absl::StatusOr<MergeReport> MergeBundles(const std::vector<std::string>& inputs, const std::string& out,
                                         const MergeOptions& options) {
  MergeReport report;
  if (inputs.empty()) return absl::InvalidArgumentError("merge needs at least one input");
  // Refusals first: a rename an object store cannot do, an output that exists, or that is
  // one of the inputs.
  if (options.move && !options.data_in_place) {
    std::vector<std::string> names = inputs;
    names.push_back(out);
    for (const std::string& url : names) {
      if (!IsUrl(url)) continue;
      return absl::InvalidArgumentError(StrCat("--move: ", url, ": an object store has no rename (and tfckpt does "
                                               "not fake one with copy + delete); merge without --move, then remove "
                                               "the parts"));
    }
  }
  Storage& store = Storage::For(out);
  for (const auto& in : inputs) {
    TFCKPT_RETURN_IF_ERROR(store.CheckNotInputs({out + ".index"}, {in + ".index"}));
  }
  if (!options.overwrite && (FileExists(out + ".index"))) {
    return absl::AlreadyExistsError(StrCat(out, ".index: output exists (use --force to replace it)"));
  }

  int64_t num_shards_total = 0;
  std::optional<pb::BundleHeaderProto> first_header;
  std::map<std::string, Merged> entries;
  std::map<std::string, int32_t> file_ids;  // input data file -> output shard id
  std::vector<std::string> files_in_order;
  std::vector<std::pair<std::string, int32_t>> shards_used;  // inputs used, with their num_shards
  for (size_t j = 0; j < inputs.size(); ++j) {
    const std::string& prefix = inputs[j];
    const std::string index = prefix + ".index";
    if (!FileExists(index)) {
      if (options.allow_missing) {
        report.inputs_skipped.push_back(prefix);
        continue;
      }
      return absl::NotFoundError(StrCat(index, ": input index missing (--allow-missing skips such inputs)"));
    }
    TFCKPT_ASSIGN_OR_RETURN(auto table, TableReader::Open(index));
    pb::BundleHeaderProto header;
    bool have_header = false;
    std::vector<std::pair<std::string, pb::BundleEntryProto>> mine;
    TFCKPT_RETURN_IF_ERROR(table->ForEach([&](std::string_view key, std::string_view value, uint64_t block) {
      if (key.empty()) {
        have_header = header.ParseFromArray(value.data(), static_cast<int>(value.size()));
        if (!have_header) return DataLossAt("header.parse", index, "", block, "header is not a BundleHeaderProto");
        return absl::OkStatus();
      }
      pb::BundleEntryProto e;
      if (!e.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
        return DataLossAt("entry.parse", index, key, block, "entry is not a BundleEntryProto");
      }
      mine.emplace_back(std::string(key), std::move(e));
      return absl::OkStatus();
    }));
    if (!have_header) return DataLossAt("header.missing", index, "", -1, "index has no header entry");
    if (mine.empty() && !options.keep_empty) {
      report.inputs_skipped.push_back(prefix);
      report.notes.push_back(StrCat(prefix, ": no tensors; skipped (TensorFlow would count its data file and "
                                            "leave num_shards inconsistent)"));
      continue;
    }
    if (!first_header) {
      first_header = header;
    } else {
      if (header.endianness() != first_header->endianness()) {
        return absl::FailedPreconditionError(StrCat(index, ": endianness differs from ", inputs.front(), ".index"));
      }
      if (header.version().SerializeAsString() != first_header->version().SerializeAsString()) {
        return absl::FailedPreconditionError(StrCat(index, ": bundle version differs from the first input's"));
      }
    }
    num_shards_total += header.num_shards();
    report.inputs_used.push_back(prefix);
    shards_used.emplace_back(prefix, header.num_shards());
    if (mine.empty()) {  // keep_empty: its data files, in order
      for (int32_t s = 0; s < header.num_shards(); ++s) {
        const std::string file = DataFileName(prefix, s, header.num_shards());
        if (file_ids.try_emplace(file, static_cast<int32_t>(files_in_order.size())).second) {
          files_in_order.push_back(file);
        }
      }
    }
    for (auto& [key, e] : mine) {
      auto it = entries.find(key);
      if (it != entries.end()) {
        Merged& m = it->second;
        if (m.entry.slices_size() == 0) {
          return absl::InvalidArgumentError(StrCat(DescribeKey(key), " is in both ", inputs[m.input], " and ", prefix));
        }
        if (e.slices_size() == 0) {
          return absl::InvalidArgumentError(StrCat("tensor \"", PrintableKey(key), "\" is partitioned in ",
                                                   inputs[m.input], " but whole in ", prefix));
        }
        if (e.dtype() != m.entry.dtype() || e.shape().SerializeAsString() != m.entry.shape().SerializeAsString()) {
          return absl::InvalidArgumentError(StrCat("partitioned tensor \"", PrintableKey(key),
                                                   "\": dtype or full shape differs between ", inputs[m.input],
                                                   " and ", prefix, " (TensorFlow crashes here)"));
        }
        for (const auto& s : e.slices()) *m.entry.add_slices() = s;
        continue;
      }
      // Map the entry's data file to an output id, in order of first use (TF does this
      // for metadata entries of partitioned tensors too).
      const std::string file = DataFileName(prefix, e.shard_id(), header.num_shards());
      auto [f, inserted] = file_ids.try_emplace(file, static_cast<int32_t>(files_in_order.size()));
      if (inserted) files_in_order.push_back(file);
      e.set_shard_id(f->second);
      entries.emplace(key, Merged{std::move(e), j});
    }
  }
  if (!first_header) {
    return absl::NotFoundError(StrCat("no input checkpoint found (tried ", absl::StrJoin(inputs, ", "), ")"));
  }
  // Data files no entry uses (an input's empty file: a policy left it without pieces).
  // TensorFlow's MergeV2 names none of them, and its header then counts more files than it
  // wrote; here they follow the used ones (whose numbers stay TensorFlow's), so that every
  // file the header counts exists.
  for (const auto& [prefix, n] : shards_used) {
    for (int32_t s = 0; s < n; ++s) {
      const std::string file = DataFileName(prefix, s, n);
      if (!file_ids.count(file) && FileExists(file)) {
        file_ids.emplace(file, static_cast<int32_t>(files_in_order.size()));
        files_in_order.push_back(file);
      }
    }
  }
  const int32_t k = static_cast<int32_t>(files_in_order.size());
  report.num_files = k;
  TFCKPT_RETURN_IF_ERROR(Reached("inputs-read"));
  // Data files first (hard link / copy / rename), then the index.
  const std::string out_dir = DirectoryOf(out);
  TFCKPT_RETURN_IF_ERROR(store.CreateDirectories(out_dir));
  for (int32_t i = 0; i < k; ++i) {
    const std::string& src = options.data_in_place ? DataFileName(out, i, k) : files_in_order[i];
    if (!FileExists(src)) return absl::NotFoundError(StrCat(src, ": data file missing"));
  }
  std::vector<std::unique_ptr<LinkedOrCopied>> staged;
  if (options.data_in_place) {
    // Nothing to move: the index below is the commit.
  } else if (options.move) {
    // The inputs' files become the output's (not tracked: they are not ours to remove). A
    // stop until here leaves the inputs whole; from the first move on, the merge finishes
    // (run/run.h: its point of no return).
    TFCKPT_RETURN_IF_ERROR(CheckStop());
    if (Run* run = CurrentRun()) run->PassPointOfNoReturn();
    for (int32_t i = 0; i < k; ++i) {
      TFCKPT_RETURN_IF_ERROR(MoveDataFile(files_in_order[i], DataFileName(out, i, k)));
      TFCKPT_RETURN_IF_ERROR(Reached("input-moved"));
    }
  } else {
    for (int32_t i = 0; i < k; ++i) {
      TFCKPT_ASSIGN_OR_RETURN(auto f, LinkedOrCopied::Create(files_in_order[i], DataFileName(out, i, k)));
      staged.push_back(std::move(f));
    }
  }
  TFCKPT_ASSIGN_OR_RETURN(auto index, store.Create(out + ".index", kIndexWrite));
  {
    TableWriter table(index.get());
    pb::BundleHeaderProto h = *first_header;
    h.set_num_shards(static_cast<int32_t>(num_shards_total));
    std::string value;
    h.SerializeToString(&value);
    TFCKPT_RETURN_IF_ERROR(table.Add("", value));
    for (const auto& [key, m] : entries) {
      value.clear();
      m.entry.SerializeToString(&value);
      TFCKPT_RETURN_IF_ERROR(table.Add(key, value));
    }
    TFCKPT_RETURN_IF_ERROR(table.Finish());
  }
  std::map<std::string, LinkedOrCopied*> by_name;
  for (auto& f : staged) by_name.emplace(f->path(), f.get());
  const std::string index_name = index->path();
  WrittenOutput written;
  written.open = [&](const std::string& path) -> absl::StatusOr<std::unique_ptr<ReadableFile>> {
    if (path == index_name) return index->OpenWritten();
    auto it = by_name.find(path);
    return it != by_name.end() ? it->second->OpenWritten() : NotWritten(path);
  };
  std::function<absl::Status()> check;
  if (options.before_commit && !options.move) check = [&] { return options.before_commit(written); };
  // Copies into an object store cannot be read before they are complete: they are checked
  // between the data's commit and the index's (PublishBundle), as BundleWriter does.
  const bool readable = std::all_of(staged.begin(), staged.end(), [](const auto& f) { return f->ReadableBeforeCommit(); });
  if (check && readable) TFCKPT_RETURN_IF_ERROR(check());
  TFCKPT_RETURN_IF_ERROR(index->Close());
  if (options.move) {
    TFCKPT_RETURN_IF_ERROR(CheckStop());  // (data in place: the index is the first change)
    if (Run* run = CurrentRun()) run->PassPointOfNoReturn();
    // The index is written only if absent (kIndexWrite): one that --force replaces goes first.
    if (options.overwrite && FileExists(out + ".index")) TFCKPT_RETURN_IF_ERROR(store.Remove(out + ".index"));
    TFCKPT_RETURN_IF_ERROR(index->Commit());
    index->Publish();  // the inputs are consumed: the output stays, whatever follows
    TFCKPT_RETURN_IF_ERROR(Reached("index-committed"));
  } else {
    std::vector<std::string> names;
    for (int32_t i = 0; i < k; ++i) names.push_back(DataFileName(out, i, k));
    TFCKPT_RETURN_IF_ERROR(PublishBundle(
        out, options.overwrite, names,
        [&] {
          for (auto& f : staged) TFCKPT_RETURN_IF_ERROR(f->Commit());
          return absl::OkStatus();
        },
        [&] { return index->Commit(); }, readable ? nullptr : check));
  }
  report.entries = static_cast<int64_t>(entries.size());
  if (options.move) {
    // TF: delete the input indexes, then the inputs' directories when they differ from
    // the output's and are empty.
    for (const auto& in : report.inputs_used) (void)store.Remove(in + ".index");
    for (const auto& in : report.inputs_used) {
      const std::string dir = DirectoryOf(in);
      if (store.Absolute(dir) != store.Absolute(out_dir)) (void)store.Remove(dir);  // only if empty
    }
  }
  return report;
}

}  // namespace tfckpt
