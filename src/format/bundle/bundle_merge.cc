// MergeV2Checkpoints (docs/FORMAT.md §e.3): bundles merged into one on raw index entries.
#include "format/bundle/bundle_merge.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "tensor_bundle.pb.h"
#include "format/bundle/bundle_proto.h"
#include "format/bundle/bundle_reader.h"
#include "format/table/table.h"
#include "run/run.h"
#include "format/bundle/bundle_writer.h"
#include "publish/publication.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/ordered_code.h"
#include "base/path.h"
#include "tfckpt/status.h"

namespace tfckpt {

namespace {

struct Merged {
  pb::BundleEntryProto entry;
  size_t input = 0;  // which input it came from (for messages)
  size_t last = 0;   // the last input that added slices to it
};

// How messages name an index key: the tensor name, or "NAME slice 0,3:-" for a slice key.
std::string DescribeKey(const std::string& key) {
  if (!IsSliceKey(key)) return StrCat("tensor \"", PrintableKey(key), "\"");
  auto d = DecodeSliceKey(key);
  if (!d.ok()) return StrCat("slice key \"", PrintableKey(key), "\"");
  return StrCat("slice ", ExtentsString(d->extents), " of tensor \"", PrintableKey(d->name), "\"");
}

// One input as the bundle reader reads it: its header and its entries in key order.
struct Input {
  pb::BundleHeaderProto header;
  std::vector<std::pair<std::string, pb::BundleEntryProto>> entries;
  std::map<std::string, Shape, std::less<>> shapes;  // of the plain and metadata entries
};

// Reads the index `index` through the bundle reader's one walk (VisitBundleIndex): every
// bound the reader applies (header.num-shards among them), its errors as the reader's.
absl::StatusOr<Input> ReadInput(const std::string& index) {
  TFCKPT_ASSIGN_OR_RETURN(auto table, TableReader::Open(index));
  Input in;
  BundleIndexVisitor visit;
  visit.header = [&](std::string_view, const pb::BundleHeaderProto& header) {
    in.header = header;
    return absl::OkStatus();
  };
  visit.entry = [&](std::string_view key, pb::BundleEntryProto& e, const Shape* shape, uint64_t) {
    if (shape != nullptr) in.shapes.emplace(std::string(key), *shape);
    in.entries.emplace_back(std::string(key), std::move(e));
    return absl::OkStatus();
  };
  TFCKPT_RETURN_IF_ERROR(VisitBundleIndex(*table, nullptr, visit));
  return in;
}

// Refuses entry `key` of input `in` (at `index`) when its data file is not one the header
// counts, as the reader refuses reading it: check entry.shard, at the tensor's name, a
// slice described as the reader does ("NAME slice 0,3:-", against its tensor's shape).
absl::Status CheckShard(const std::string& index, const Input& in, const std::string& key,
                        const pb::BundleEntryProto& e) {
  const int32_t num_shards = in.header.num_shards();
  if (EntryShardDefect("", e.shard_id(), num_shards).empty()) return absl::OkStatus();
  std::string name = key, label = key;
  if (IsSliceKey(key)) {
    if (auto d = DecodeSliceKey(key); d.ok()) {
      name = d->name;
      label = StrCat(d->name, " slice ", ExtentsString(d->extents));  // without its tensor's shape
      auto full = in.shapes.find(d->name);
      auto region = full != in.shapes.end() ? RegionOf(d->extents, full->second) : absl::NotFoundError("");
      if (region.ok()) label = StrCat(d->name, " slice ", SliceString(*region, full->second));
    }
  }
  return DataLossAt("entry.shard", index, name, -1, EntryShardDefect(label, e.shard_id(), num_shards));
}

// The shards s of `prefix` whose data file DataFileName(prefix, s, num_shards) exists: one
// listing of its directory, however many files the header counts.
absl::StatusOr<std::set<int32_t>> ExistingShards(const Location& at, int32_t num_shards) {
  const std::string& prefix = at.path();
  const std::string dir = DirectoryOf(prefix), stem = Basename(prefix) + ".data-";
  TFCKPT_ASSIGN_OR_RETURN(const std::vector<DirEntry> listing, at.store().List(dir));
  std::set<int32_t> shards;
  for (const DirEntry& f : listing) {
    if (f.kind != EntryKind::kFile || f.name.compare(0, stem.size(), stem) != 0) continue;
    int32_t s = 0;
    const std::string_view rest = std::string_view(f.name).substr(stem.size());
    if (!absl::SimpleAtoi(AV(rest.substr(0, rest.find('-'))), &s) || s < 0 || s >= num_shards) continue;
    if (DataFileName(Basename(prefix), s, num_shards) == f.name) shards.insert(s);
  }
  return shards;
}

// The output index as MergeV2Checkpoints builds it (FORMAT §e.3 step 2): the inputs'
// entries unioned in input order, the slices of a partitioned tensor concatenated, data
// files numbered in order of first use.
class MergedIndex {
 public:
  // REQUIRES: `at` outlives this, the inputs' prefixes in their stores.
  explicit MergedIndex(const std::vector<Location>& at) : at_(at) {
    for (const Location& in : at) inputs_.push_back(in.path());
  }

  // Adds input `j` as read by ReadInput. With `keep_empty`, an input without entries brings
  // its data files, in order. REQUIRES: inputs before `j` added or skipped, `j` not added.
  absl::Status Add(size_t j, Input in, bool keep_empty);
  // Appends the data files no entry uses, of the inputs added, that exist (an input's empty
  // file: a policy left it without pieces). TensorFlow's MergeV2 names none of them, and
  // its header then counts more files than it wrote; here they follow the used ones (whose
  // numbers stay TensorFlow's), so that every file the header counts exists. Found by one
  // listing per input, however many files its header counts.
  absl::Status AddUnusedFiles();
  // Refuses an output the reader would refuse for its slice lists (entry.slices): the inputs
  // list together more slices of a partitioned tensor than the output's slice entries
  // allow (each input may list slices it does not hold, within the bound).
  absl::Status CheckSliceLists() const;

  bool empty() const { return !first_header_; }
  // The first input's header with the inputs' num_shards summed. REQUIRES: !empty().
  pb::BundleHeaderProto Header() const {
    pb::BundleHeaderProto h = *first_header_;
    h.set_num_shards(static_cast<int32_t>(num_shards_total_));
    return h;
  }
  const std::map<std::string, Merged>& entries() const { return entries_; }
  // The inputs' data files, by output shard id, and each one's location.
  const std::vector<std::string>& files() const { return files_; }
  Location FileAt(size_t i) const { return at_[file_input_[i]].At(files_[i]); }

 private:
  struct Used {
    size_t input;
    std::string prefix;
    int32_t num_shards = 0;
    std::set<int32_t> shards;  // those its entries use
  };
  // Checks `header` of input `j` against the first one and counts its data files.
  absl::Status AddHeader(size_t j, const pb::BundleHeaderProto& header);
  // Adds `e` under `key` from input `j`, or its slices to the partitioned tensor an
  // earlier input holds.
  absl::Status AddEntry(size_t j, const Input& in, const std::string& key, pb::BundleEntryProto e, Used* used);
  // The output id of data file `file` of input `j`, the next one on its first use.
  int32_t FileId(size_t j, const std::string& file) {
    auto [f, inserted] = file_ids_.try_emplace(file, static_cast<int32_t>(files_.size()));
    if (inserted) {
      files_.push_back(file);
      file_input_.push_back(j);
    }
    return f->second;
  }

  const std::vector<Location>& at_;
  std::vector<std::string> inputs_;  // their paths
  std::optional<pb::BundleHeaderProto> first_header_;
  int64_t num_shards_total_ = 0;
  std::map<std::string, Merged> entries_;
  std::map<std::string, int32_t> file_ids_;  // input data file -> output shard id
  std::vector<std::string> files_;
  std::vector<size_t> file_input_;  // the input each of files_ is of
  std::vector<Used> used_;  // the inputs added
};

absl::Status MergedIndex::Add(size_t j, Input in, bool keep_empty) {
  TFCKPT_RETURN_IF_ERROR(AddHeader(j, in.header));
  const std::string& prefix = inputs_[j];
  const int32_t n = in.header.num_shards();
  Used& used = used_.emplace_back(Used{j, prefix, n, {}});
  if (in.entries.empty() && keep_empty) {
    for (int32_t s = 0; s < n; ++s) {
      FileId(j, DataFileName(prefix, s, n));
      used.shards.insert(s);
    }
  }
  for (auto& [key, e] : in.entries) TFCKPT_RETURN_IF_ERROR(AddEntry(j, in, key, std::move(e), &used));
  return absl::OkStatus();
}

absl::Status MergedIndex::AddHeader(size_t j, const pb::BundleHeaderProto& header) {
  const std::string index = inputs_[j] + ".index";
  if (!first_header_) {
    first_header_ = header;
  } else {
    if (header.endianness() != first_header_->endianness()) {
      return absl::FailedPreconditionError(StrCat(index, ": endianness differs from ", inputs_.front(), ".index"));
    }
    if (header.version().SerializeAsString() != first_header_->version().SerializeAsString()) {
      return absl::FailedPreconditionError(StrCat(index, ": bundle version differs from the first input's"));
    }
  }
  num_shards_total_ += header.num_shards();
  if (num_shards_total_ > kMaxBundleShards) {
    return DataLossAt("header.num-shards", index, "", -1,
                      StrCat("header has num_shards ", header.num_shards(), ", which brings the inputs' total to ",
                             num_shards_total_, ", more than a bundle may count (", kMaxBundleShards, ")"));
  }
  return absl::OkStatus();
}

absl::Status MergedIndex::AddEntry(size_t j, const Input& in, const std::string& key, pb::BundleEntryProto e,
                                   Used* used) {
  const std::string& prefix = inputs_[j];
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    Merged& m = it->second;
    if (m.entry.slices_size() == 0) {
      return absl::InvalidArgumentError(StrCat(DescribeKey(key), " is in both ", inputs_[m.input], " and ", prefix));
    }
    if (e.slices_size() == 0) {
      return absl::InvalidArgumentError(StrCat("tensor \"", PrintableKey(key), "\" is partitioned in ",
                                               inputs_[m.input], " but whole in ", prefix));
    }
    if (e.dtype() != m.entry.dtype() || e.shape().SerializeAsString() != m.entry.shape().SerializeAsString()) {
      return absl::InvalidArgumentError(StrCat("partitioned tensor \"", PrintableKey(key),
                                               "\": dtype or full shape differs between ", inputs_[m.input], " and ",
                                               prefix, " (TensorFlow crashes here)"));
    }
    for (const auto& s : e.slices()) *m.entry.add_slices() = s;
    m.last = j;
    return absl::OkStatus();
  }
  // Map the entry's data file to an output id, in order of first use (TF does this for
  // metadata entries of partitioned tensors too).
  TFCKPT_RETURN_IF_ERROR(CheckShard(prefix + ".index", in, key, e));
  used->shards.insert(e.shard_id());
  e.set_shard_id(FileId(j, DataFileName(prefix, e.shard_id(), in.header.num_shards())));
  entries_.emplace(key, Merged{std::move(e), j, j});
  return absl::OkStatus();
}

absl::Status MergedIndex::CheckSliceLists() const {
  int64_t slice_entries = 0;  // slice keys sort before every name: all are before each list
  for (const auto& [key, m] : entries_) slice_entries += IsSliceKey(key) ? 1 : 0;
  for (const auto& [key, m] : entries_) {
    if (!TooManySlices(m.entry.slices_size(), slice_entries)) continue;
    return DataLossAt("entry.slices", inputs_[m.last] + ".index", key, -1,
                      StrCat("the inputs list ", m.entry.slices_size(), " slices of this tensor but hold only ",
                             slice_entries, " slice entries"));
  }
  return absl::OkStatus();
}

absl::Status MergedIndex::AddUnusedFiles() {
  for (const Used& u : used_) {
    if (static_cast<int32_t>(u.shards.size()) == u.num_shards) continue;
    TFCKPT_ASSIGN_OR_RETURN(const std::set<int32_t> existing, ExistingShards(at_[u.input], u.num_shards));
    for (int32_t s : existing) {
      if (!u.shards.count(s)) FileId(u.input, DataFileName(u.prefix, s, u.num_shards));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool MovesByCopy(const std::vector<std::string>& inputs, const std::string& out) {
  return IsUrl(out) || std::any_of(inputs.begin(), inputs.end(), [](const std::string& in) { return IsUrl(in); });
}

namespace {

// The inputs read and unioned (MergedIndex): what the output's index holds and which data
// files it takes, in order. Nothing is written.
absl::StatusOr<MergedIndex> UnionInputs(const std::vector<Location>& inputs, const MergeOptions& options,
                                        MergeReport* report) {
  MergedIndex merged(inputs);
  for (size_t j = 0; j < inputs.size(); ++j) {
    const std::string& prefix = inputs[j].path();
    const std::string index = prefix + ".index";
    if (!inputs[j].Sibling(".index").Exists()) {
      if (options.allow_missing) {
        report->inputs_skipped.push_back(prefix);
        continue;
      }
      return absl::NotFoundError(StrCat(index, ": input index missing (--allow-missing skips such inputs)"));
    }
    TFCKPT_ASSIGN_OR_RETURN(Input in, ReadInput(index));
    if (in.entries.empty() && !options.keep_empty) {
      report->inputs_skipped.push_back(prefix);
      report->notes.push_back(StrCat(prefix, ": no tensors; skipped (TensorFlow would count its data file and "
                                             "leave num_shards inconsistent)"));
      continue;
    }
    TFCKPT_RETURN_IF_ERROR(merged.Add(j, std::move(in), options.keep_empty));
    report->inputs_used.push_back(prefix);
  }
  if (merged.empty()) {
    std::vector<std::string> tried;
    for (const Location& in : inputs) tried.push_back(in.path());
    return absl::NotFoundError(StrCat("no input checkpoint found (tried ", absl::StrJoin(tried, ", "), ")"));
  }
  TFCKPT_RETURN_IF_ERROR(merged.AddUnusedFiles());
  TFCKPT_RETURN_IF_ERROR(merged.CheckSliceLists());
  return merged;
}

// The merged index's bytes into `file`.
absl::Status WriteMergedIndex(const MergedIndex& merged, WritableFile& file) {
  TableWriter table(&file);
  std::string value;
  merged.Header().SerializeToString(&value);
  TFCKPT_RETURN_IF_ERROR(table.Add("", value));
  for (const auto& [key, m] : merged.entries()) {
    value.clear();
    m.entry.SerializeToString(&value);
    TFCKPT_RETURN_IF_ERROR(table.Add(key, value));
  }
  return table.Finish();
}

// The output's data files handed to `publication`: in place (data_in_place), moved from
// the inputs (`rename`), else staged as links or copies of them.
absl::Status HandOverDataFiles(const MergedIndex& merged, const Location& out, bool rename,
                               const MergeOptions& options, Publication& publication) {
  const std::vector<std::string>& files = merged.files();
  const int32_t k = static_cast<int32_t>(files.size());
  for (int32_t i = 0; i < k; ++i) {
    const Location src = options.data_in_place ? out.At(DataFileName(out.path(), i, k)) : merged.FileAt(i);
    if (!src.Exists()) return absl::NotFoundError(StrCat(src.path(), ": data file missing"));
  }
  for (int32_t i = 0; i < k; ++i) {
    const std::string dst = DataFileName(out.path(), i, k);
    if (options.data_in_place) {
      publication.AddInPlace(dst);
    } else if (rename) {
      TFCKPT_RETURN_IF_ERROR(publication.MoveIn(files[i], dst));
    } else {
      TFCKPT_RETURN_IF_ERROR(
          publication.Stage(merged.FileAt(i), dst, IsUrl(out.path()) ? options.server_side : ServerSideCopy::kNever));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MergeReport> MergeBundles(const std::vector<std::string>& inputs, const std::string& out,
                                         const MergeOptions& options) {
  MergeReport report;
  if (inputs.empty()) return absl::InvalidArgumentError("merge needs at least one input");
  // An output that exists, or that is one of the inputs, is refused first. --move where a
  // name is an object (an object store has no rename) copies, inside the store where it
  // can, and deletes the inputs once the output is committed (MovesByCopy).
  const bool by_copy = options.move && !options.data_in_place && MovesByCopy(inputs, out);
  const bool rename = options.move && !by_copy;
  // The paths resolved, once each: every file of an input is in its store, every file of
  // the output in the output's.
  const Location at = Location::Of(out);
  std::vector<Location> ins;
  for (const auto& in : inputs) ins.push_back(Location::Of(in));
  for (const auto& in : inputs) {
    TFCKPT_RETURN_IF_ERROR(at.store().CheckNotInputs({out + ".index"}, {in + ".index"}));
  }
  if (!options.overwrite && at.Sibling(".index").Exists()) {
    return absl::AlreadyExistsError(StrCat(out, ".index: output exists (use --force to replace it)"));
  }
  TFCKPT_ASSIGN_OR_RETURN(const MergedIndex merged, UnionInputs(ins, options, &report));
  const std::vector<std::string>& files_in_order = merged.files();
  report.num_files = static_cast<int32_t>(files_in_order.size());
  TFCKPT_RETURN_IF_ERROR(Reached("inputs-read"));
  // Data files first (hard link / copy / rename), then the index: the publication's.
  PublishOptions po;
  po.overwrite = options.overwrite;
  po.data_in_place = options.data_in_place;
  // (replace_in_one_step, the default: on an object store --force replaces the old index in
  // one PUT, or backs the old checkpoint up first where the new data take its names, as
  // BundleWriter's outputs do.)
  po.temporaries = options.temporaries;
  // (Not with `move` by rename, whose renames cannot wait.)
  if (!rename) po.before_commit = options.before_commit;
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Publication> publication, Publication::Bundle(at, std::move(po)));
  TFCKPT_RETURN_IF_ERROR(HandOverDataFiles(merged, at, rename, options, *publication));
  Publication::Index index;
  index.write = [&merged](WritableFile& file) { return WriteMergedIndex(merged, file); };
  TFCKPT_RETURN_IF_ERROR(publication->CommitBundle(index));
  report.entries = static_cast<int64_t>(merged.entries().size());
  // TF: the input indexes deleted, then the inputs' directories when they differ from the
  // output's and are empty; by copy, the inputs' data files too.
  if (options.move) {
    std::vector<Location> used, data_files;
    for (const Location& in : ins) {
      if (std::find(report.inputs_used.begin(), report.inputs_used.end(), in.path()) != report.inputs_used.end()) {
        used.push_back(in);
      }
    }
    for (size_t i = 0; by_copy && i < files_in_order.size(); ++i) data_files.push_back(merged.FileAt(i));
    publication->RemoveConsumed(used, data_files, by_copy, &report.notes);
  }
  if (options.after_commit) TFCKPT_RETURN_IF_ERROR(publication->CheckCommitted(options.after_commit));
  return report;
}

}  // namespace tfckpt
