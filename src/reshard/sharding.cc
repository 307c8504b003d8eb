// The user's own sharding: TensorFlow's validate_shards (sharding_util.py) over shards a
// callback or a SHARDS.json file returns, offline.
#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tfckpt/dtype.h"
#include "reshard/sharding.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "validate/validate.h"

namespace tfckpt {

std::string ShardableTensor::device() const { return task ? StrCat("/job:worker/task:", *task) : ""; }

std::optional<int64_t> TaskOfDevice(std::string_view device) {
  for (absl::string_view part : absl::StrSplit(AV(device), '/', absl::SkipEmpty())) {
    int64_t task;
    if (absl::StartsWith(part, "task:") && absl::SimpleAtoi(part.substr(5), &task)) return task;
  }
  return std::nullopt;
}

namespace {

constexpr uint64_t kMaxShardsFileBytes = uint64_t{1} << 30;

// How TF's f-strings print the values validate_shards reports: str(TensorShape),
// str(DType), and an optional task (None).
std::string PyShape(const Shape& s) {
  if (s.size() == 1) return StrCat("(", s[0], ",)");
  return StrCat("(", absl::StrJoin(s, ", "), ")");
}
std::string PyDType(int32_t d) { return StrCat("<dtype: '", DTypeName(d), "'>"); }
std::string PyTask(std::optional<int64_t> t) { return t ? StrCat(*t) : "None"; }

constexpr char kAfter[] = "After executing the checkpoint sharding callback, ";

// One entry, resolved against the shardable tensors of its key.
struct Resolved {
  const ShardEntry* entry = nullptr;
  std::string spec;  // as given, stripped (TF strips it)
  std::vector<size_t> pieces;  // the shardable tensors of its key
  Region region;
  std::optional<int64_t> task;  // the tensor's task: stated, else the input's
};

// The region `spec` names in a tensor of shape `full`: "" (whole), TF's "FULL SHAPE
// EXTENTS" (the shape must be the tensor's) or the extents alone.
absl::StatusOr<Region> RegionOfSpec(std::string_view spec, const Shape& full) {
  if (spec.empty()) return Region::Full(full);
  std::string_view extents = spec;
  if (const size_t space = spec.rfind(' '); space != std::string_view::npos) {
    extents = spec.substr(space + 1);
    Shape stated;
    for (absl::string_view d : absl::StrSplit(AV(spec.substr(0, space)), ' ', absl::SkipEmpty())) {
      int64_t v;
      if (!absl::SimpleAtoi(d, &v)) return absl::InvalidArgumentError(StrCat("bad dimension \"", SV(d), "\""));
      stated.push_back(v);
    }
    if (stated != full) {
      return absl::InvalidArgumentError(StrCat("its full shape ", ShapeString(stated), " is not the tensor's"));
    }
  }
  return ParseSliceString(extents, full);
}

// Whether the box of `inner` (even an empty one) lies inside `outer`.
bool BoxInside(const Region& inner, const Region& outer) {
  for (size_t d = 0; d < inner.rank(); ++d) {
    if (inner.start[d] < outer.start[d] || inner.start[d] + inner.shape[d] > outer.start[d] + outer.shape[d]) {
      return false;
    }
  }
  return true;
}

// The task of the input piece(s) `region` lies in: theirs when they agree, else none.
std::optional<int64_t> InputTask(const std::vector<ShardableTensor>& tensors, const std::vector<size_t>& pieces,
                                 const Region& region) {
  std::optional<std::optional<int64_t>> task;
  for (size_t i : pieces) {
    if (!region.empty() ? !Intersect(region, tensors[i].region) : !BoxInside(region, tensors[i].region)) continue;
    if (task && *task != tensors[i].task) return std::nullopt;
    task = tensors[i].task;
  }
  return task.value_or(std::nullopt);
}

class Validator {
 public:
  Validator(const std::vector<ShardableTensor>& tensors, std::string_view description,
            const ValidateShardsOptions& options)
      : tensors_(tensors), description_(description), options_(options) {
    for (size_t i = 0; i < tensors.size(); ++i) by_key_[tensors[i].checkpoint_key].push_back(i);
  }

  absl::StatusOr<std::vector<std::vector<ShardPiece>>> Run(const std::vector<Shard>& shards) {
    std::vector<std::vector<ShardPiece>> out(shards.size());
    for (size_t s = 0; s < shards.size(); ++s) {
      std::optional<Resolved> first;  // TF's task_tensor
      for (const ShardEntry& e : shards[s]) {
        TFCKPT_ASSIGN_OR_RETURN(Resolved r, Resolve(e));
        TFCKPT_RETURN_IF_ERROR(CheckSameTask(first, r));
        if (!first) first = r;
        out[s].push_back(Piece(r));
        by_key_seen_[e.checkpoint_key].push_back(r);
      }
    }
    TFCKPT_RETURN_IF_ERROR(CheckTiling());
    return out;
  }

 private:
  std::string Head(std::string_view what, const std::string& key, const std::string& spec) const {
    return StrCat(kAfter, what, ": callback_description: ", description_, "; checkpoint_key: ", key,
                  "; slice_spec: ", spec);
  }

  // TF's checks of one tensor of a shard, in its order: uniqueness, added, shape, dtype,
  // task.
  absl::StatusOr<Resolved> Resolve(const ShardEntry& e) {
    Resolved r;
    r.entry = &e;
    r.spec = std::string(absl::StripAsciiWhitespace(e.slice_spec));
    const auto key = by_key_.find(e.checkpoint_key);
    std::string unique = r.spec;
    if (key != by_key_.end()) {
      r.pieces = key->second;
      const ShardableTensor& any = tensors_[r.pieces.front()];
      auto region = RegionOfSpec(r.spec, any.full_shape);
      if (!region.ok()) {
        return absl::InvalidArgumentError(StrCat(Head("a slice spec that names no slice of its tensor was found",
                                                      e.checkpoint_key, r.spec),
                                                 "; tensor_shape: ", PyShape(any.full_shape), ": ",
                                                 SV(region.status().message())));
      }
      r.region = *region;
      unique = StrCat(ShapeString(r.region.start), ShapeString(r.region.shape));
    }
    if (!seen_.insert({e.checkpoint_key, unique}).second) {
      return absl::InvalidArgumentError(Head(
          "multiple tensors with the same checkpoint key and slice spec were found", e.checkpoint_key, r.spec));
    }
    if (key == by_key_.end()) {
      return absl::InvalidArgumentError(
          Head("a tensor not originally in the object graph was found in the checkpoint shards", e.checkpoint_key,
               r.spec));
    }
    const ShardableTensor& any = tensors_[r.pieces.front()];
    if (e.shape && *e.shape != r.region.shape) {
      return absl::InvalidArgumentError(StrCat(Head("a tensor was found with an altered shape", e.checkpoint_key, r.spec),
                                               "; original tensor_shape: ", PyShape(r.region.shape),
                                               "; new tensor_shape: ", PyShape(*e.shape)));
    }
    if (e.dtype && *e.dtype != any.dtype) {
      return absl::InvalidArgumentError(StrCat(Head("a tensor was found with an altered dtype", e.checkpoint_key, r.spec),
                                               "; original tensor_dtype: ", PyDType(any.dtype),
                                               "; new tensor_dtype: ", PyDType(*e.dtype)));
    }
    const std::optional<int64_t> original = InputTask(tensors_, r.pieces, r.region);
    r.task = e.device ? TaskOfDevice(*e.device) : original;
    if (r.task != original) {
      return absl::InvalidArgumentError(StrCat(Head("a tensor was found with an altered task", e.checkpoint_key, r.spec),
                                               "; original tensor_task: ", PyTask(original),
                                               "; new tensor_task: ", PyTask(r.task)));
    }
    return r;
  }

  // "Validate tensors in shard have the same task": against the shard's first tensor,
  // when both have a task.
  absl::Status CheckSameTask(const std::optional<Resolved>& first, const Resolved& r) const {
    if (!options_.one_task_per_shard || !first || !first->task || !r.task || *first->task == *r.task) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(StrCat(
        kAfter, "tensors with different tasks were found in the same shard: callback_description: ", description_,
        "; tensor #1: checkpoint_key: ", first->entry->checkpoint_key, "; slice_spec: ", first->spec,
        "; task: ", *first->task, "; tensor #2: checkpoint_key: ", r.entry->checkpoint_key,
        "; slice_spec: ", r.spec, "; task: ", *r.task));
  }

  ShardPiece Piece(const Resolved& r) const {
    ShardPiece p{r.pieces.front(), r.region, std::nullopt};
    for (size_t i : r.pieces) {
      if (tensors_[i].region == r.region) {
        p.tensor = i;
        p.extents = tensors_[i].extents;
        return p;
      }
    }
    for (size_t i : r.pieces) {
      if (!r.region.empty() && Intersect(r.region, tensors_[i].region)) p.tensor = i;
    }
    return p;
  }

  // Every key's slices tile its tensor: no two overlap, and every input piece is whole
  // ("validate no tensor removal").
  absl::Status CheckTiling() const {
    std::vector<std::string> missing;
    size_t count = 0;
    for (const auto& [key, pieces] : by_key_) {
      const auto seen = by_key_seen_.find(key);
      const std::vector<Resolved> none;
      const std::vector<Resolved>& got = seen == by_key_seen_.end() ? none : seen->second;
      TFCKPT_RETURN_IF_ERROR(CheckNoOverlap(key, got));
      for (size_t i : pieces) {
        const Region& piece = tensors_[i].region;
        int64_t covered = 0;
        bool boxed = false;  // an empty piece: inside some slice
        for (const Resolved& r : got) {
          boxed = boxed || BoxInside(piece, r.region);
          if (auto in = Intersect(r.region, piece)) covered += in->num_elements();
        }
        if (piece.empty() ? boxed : covered == piece.num_elements()) continue;
        if (++count <= 10) {
          missing.push_back(StrCat("tensor: checkpoint_key: ", key, "; slice_spec: ", tensors_[i].slice_spec));
        }
      }
    }
    if (missing.empty()) return absl::OkStatus();
    if (count > missing.size()) missing.push_back(StrCat("and ", count - missing.size(), " more"));
    return absl::InvalidArgumentError(StrCat(
        kAfter, "tensors in the object graph were not found in the checkpoint shards: callback_description: ",
        description_, "; ", absl::StrJoin(missing, "; ")));
  }

  // Slices of one key that overlap without being equal (equal ones are duplicates, found
  // before): the layout check's sweep finds them, then the pair is named.
  absl::Status CheckNoOverlap(const std::string& key, const std::vector<Resolved>& got) const {
    if (got.size() < 2) return absl::OkStatus();
    TensorEntry t;
    t.name = key;
    t.shape = tensors_[got.front().pieces.front()].full_shape;
    t.partitioned = true;
    for (const Resolved& r : got) t.slices.push_back(StoredSlice{r.region, {}, {}, {}});
    std::vector<Finding> findings;
    CheckSliceLayout(t, "", &findings);
    if (std::none_of(findings.begin(), findings.end(), [](const Finding& f) { return f.check == "slice.overlap"; })) {
      return absl::OkStatus();
    }
    for (size_t a = 0; a < got.size(); ++a) {
      for (size_t b = a + 1; b < got.size(); ++b) {
        if (got[a].region.empty() || got[b].region.empty() || !Intersect(got[a].region, got[b].region)) continue;
        return absl::InvalidArgumentError(StrCat(Head("overlapping slices of one tensor were found", key, got[a].spec),
                                                 "; slice_spec: ", got[b].spec));
      }
    }
    return absl::InternalError("bug: an overlap the layout check found is not between two slices");
  }

  const std::vector<ShardableTensor>& tensors_;
  const std::string description_;
  const ValidateShardsOptions options_;
  std::map<std::string, std::vector<size_t>> by_key_;
  std::map<std::string, std::vector<Resolved>> by_key_seen_;
  std::set<std::pair<std::string, std::string>> seen_;
};

using json = nlohmann::json;

absl::StatusOr<ShardEntry> EntryFromJson(const json& j, const std::string& where) {
  if (!j.is_object()) return absl::InvalidArgumentError(StrCat(where, ": want {\"key\", \"slice\"}"));
  ShardEntry e;
  for (const auto& [field, value] : j.items()) {
    if (field == "key" && value.is_string()) {
      e.checkpoint_key = value.get<std::string>();
    } else if (field == "slice" && value.is_string()) {
      e.slice_spec = value.get<std::string>();
    } else if (field == "shape" && value.is_array() &&
               std::all_of(value.begin(), value.end(), [](const json& d) { return d.is_number_integer(); })) {
      e.shape = value.get<Shape>();
    } else if (field == "dtype" && value.is_string() && ParseDType(value.get<std::string>())) {
      e.dtype = static_cast<int32_t>(*ParseDType(value.get<std::string>()));
    } else if (field == "device" && value.is_string()) {
      e.device = value.get<std::string>();
    } else {
      return absl::InvalidArgumentError(StrCat(where, ": field \"", field, "\" ",
                                               field == "key" || field == "slice" || field == "shape" ||
                                                       field == "dtype" || field == "device"
                                                   ? "has a bad value"
                                                   : "is unknown (key, slice, shape, dtype, device)"));
    }
  }
  if (!j.contains("key")) return absl::InvalidArgumentError(StrCat(where, ": no \"key\""));
  return e;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<ShardPiece>>> ValidateShards(const std::vector<ShardableTensor>& tensors,
                                                                     const std::vector<Shard>& shards,
                                                                     std::string_view description,
                                                                     const ValidateShardsOptions& options) {
  return Validator(tensors, description, options).Run(shards);
}

absl::StatusOr<ShardingCallback> ShardsFromFile(const std::string& path) {
  TFCKPT_ASSIGN_OR_RETURN(const std::string text, Location::Of(path).store().ReadSmallFile(path, kMaxShardsFileBytes));
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(StrCat(path, ": not JSON"));
  ShardingCallback cb;
  cb.description = StrCat("shards of ", path);
  cb.per_task = false;
  const json* list = &doc;
  if (doc.is_object()) {
    for (const auto& [field, value] : doc.items()) {
      if (field == "description" && value.is_string()) {
        cb.description = value.get<std::string>();
      } else if (field != "shards") {
        return absl::InvalidArgumentError(StrCat(path, ": field \"", field, "\" is unknown or bad (description, shards)"));
      }
    }
    if (!doc.contains("shards")) return absl::InvalidArgumentError(StrCat(path, ": no \"shards\""));
    list = &doc["shards"];
  }
  if (!list->is_array()) return absl::InvalidArgumentError(StrCat(path, ": \"shards\" is not a list of shards"));
  std::vector<Shard> shards;
  for (size_t s = 0; s < list->size(); ++s) {
    const json& shard = (*list)[s];
    if (!shard.is_array()) return absl::InvalidArgumentError(StrCat(path, ": shard ", s, " is not a list"));
    Shard out;
    for (size_t i = 0; i < shard.size(); ++i) {
      TFCKPT_ASSIGN_OR_RETURN(ShardEntry e, EntryFromJson(shard[i], StrCat(path, ": shard ", s, " entry ", i)));
      out.push_back(std::move(e));
    }
    shards.push_back(std::move(out));
  }
  cb.shards = [shards = std::move(shards)](const std::vector<ShardableTensor>&) -> absl::StatusOr<std::vector<Shard>> {
    return shards;
  };
  return cb;
}

}  // namespace tfckpt
