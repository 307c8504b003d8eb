// Reshard: plan which regions go to which output file (ExecutePlan, copy.h, writes them).
#include "reshard/reshard.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "model/tensor_encoding.h"
#include "tfckpt/commands.h"
#include "tfckpt/dtype.h"
#include "model/name_rules.h"
#include "model/object_graph.h"
#include "base/regex.h"
#include "tfckpt/status.h"

namespace tfckpt {

const std::vector<std::string>& PolicyWords() {
  static const auto* words = new std::vector<std::string>{"by-task",         "by-task:",  "shards:", "single",
                                                          "max-shard-size:", "by-device", "file:"};
  return *words;
}

absl::StatusOr<Policy> ParsePolicy(std::string_view text) {
  Policy p;
  auto number = [&](std::string_view s, int64_t* v) { return absl::SimpleAtoi(AV(s), v) && *v >= 1; };
  if (text == "single") {
    p.kind = Policy::Kind::kSingle;
  } else if (text == "by-device") {
    p.kind = Policy::Kind::kByDevice;
  } else if (text.rfind("file:", 0) == 0 && text.size() > 5) {
    p.kind = Policy::Kind::kCallback;
    p.file = std::string(text.substr(5));
  } else if (text == "by-task") {
    p.kind = Policy::Kind::kByTask;
  } else if (text.rfind("by-task:", 0) == 0 && number(text.substr(8), &p.n)) {
    p.kind = Policy::Kind::kByTask;
  } else if (text.rfind("shards:", 0) == 0 && number(text.substr(7), &p.n)) {
    p.kind = Policy::Kind::kShards;
  } else if (auto bytes = text.rfind("max-shard-size:", 0) == 0 ? ParseByteSize(text.substr(15)) : std::nullopt;
             bytes && *bytes >= 1 && *bytes <= static_cast<uint64_t>(INT64_MAX)) {
    p.n = static_cast<int64_t>(*bytes);
    p.kind = Policy::Kind::kMaxShardSize;
  } else {
    return absl::InvalidArgumentError(
        StrCat("--policy ", text, ": want by-task[:N], shards:N, single, max-shard-size:BYTES, by-device or file:SHARDS.json (N, BYTES >= 1; BYTES may end in K, M, G or T)"));
  }
  return p;
}

namespace {

// `region` of a tensor of rank r cut down to its first n dimensions.
Region FirstDims(const Region& region, size_t n) {
  Region out;
  out.start.assign(region.start.begin(), region.start.begin() + static_cast<std::ptrdiff_t>(n));
  out.shape.assign(region.shape.begin(), region.shape.begin() + static_cast<std::ptrdiff_t>(n));
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> PieceTasks(const ReshardPlan& plan, int64_t n) {
  std::vector<std::vector<int64_t>> tasks(plan.tensors.size());
  int64_t next = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorPlan& tp = plan.tensors[i];
    if (tp.follows >= 0 && tp.resliced) continue;  // (below: its primary's tasks)
    for (const PlannedPiece& p : tp.pieces) {
      const StoredSlice* s = tp.resliced ? nullptr : StoredSliceOf(*tp.source, p.region);
      tasks[i].push_back((s != nullptr ? s->data.shard : next++) % n);
    }
  }
  // A slot's new pieces go where its primary's pieces go (TF colocates a slot with its
  // primary: slot_creator), taking no turn of their own.
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorPlan& tp = plan.tensors[i];
    if (tp.follows < 0 || !tp.resliced) continue;
    const TensorPlan& primary = plan.tensors[static_cast<size_t>(tp.follows)];
    for (const PlannedPiece& p : tp.pieces) {
      int64_t task = next++ % n;
      for (size_t k = 0; k < primary.pieces.size(); ++k) {
        if (primary.pieces[k].region.rank() >= p.region.rank() &&
            FirstDims(primary.pieces[k].region, p.region.rank()) == p.region) {
          task = tasks[static_cast<size_t>(tp.follows)][k];
          break;
        }
      }
      tasks[i].push_back(task);
    }
  }
  return tasks;
}

namespace {

// True when the two lists hold the same regions, in any order.
bool SameRegions(std::vector<Region> a, std::vector<Region> b) {
  auto less = [](const Region& x, const Region& y) { return std::tie(x.start, x.shape) < std::tie(y.start, y.shape); };
  std::sort(a.begin(), a.end(), less);
  std::sort(b.begin(), b.end(), less);
  return a == b;
}

// The regions a tensor is stored in today.
std::vector<Region> StoredRegions(const TensorEntry& t) {
  std::vector<Region> out;
  for (const auto& s : t.slices) out.push_back(s.region);
  return out;
}

// Payload bytes of `region` of `t`: exact for fixed-size dtypes, the stored bytes' share
// of its elements for strings and variants.
uint64_t PieceBytes(const TensorEntry& t, const Region& region) {
  const DTypeInfo* info = LookupDType(t.dtype);
  if (info->element_size > 0) return static_cast<uint64_t>(region.num_elements()) * info->element_size;
  const int64_t total = *NumElements(t.shape);
  return total == 0 ? t.bytes
                    : static_cast<uint64_t>(static_cast<double>(t.bytes) * region.num_elements() / total);
}

int64_t Prod(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// TF's MaxShardSizePolicy.MaxShardSizePartitioner, step for step
// (tensorflow/python/checkpoint/sharding/sharding_policies.py).
class MaxShardSizePartitioner {
 public:
  MaxShardSizePartitioner(int64_t max_bytes) : max_(max_bytes), remaining_(max_bytes) { shards_.emplace_back(); }

  absl::Status Add(size_t tensor, const Region& root, int64_t total, int64_t dsize, const std::string& name) {
    tensor_ = tensor;
    root_ = root;
    dsize_ = dsize;
    if (root.rank() == 0) {
      if (total > max_) {
        large_.push_back({{tensor, root}});
      } else {
        if (total > remaining_) NewShard();
        shards_.back().emplace_back(tensor, root);
        remaining_ -= total;
      }
      return absl::OkStatus();
    }
    offset_ = root.start;
    shape_ = root.shape;
    int64_t working = total;
    while (working > remaining_) {
      auto [axis, part] = NextPartition();
      if (part == 0 && remaining_ == max_) {
        // TF loops forever here: not even a fresh shard holds the smallest piece it can cut
        // (one slab along some axis; at least one element).
        int64_t smallest = INT64_MAX;
        for (size_t d = 0; d < shape_.size(); ++d) smallest = std::min(smallest, Prod(shape_) / shape_[d] * dsize_);
        return absl::InvalidArgumentError(
            StrCat("max-shard-size:", max_, " cannot hold any piece of \"", name, "\": ",
                   dsize_ > max_ ? StrCat("one element is ", dsize_, " bytes")
                                 : StrCat("the smallest slab along one axis is ", smallest, " bytes"),
                   " (TensorFlow's policy would loop forever)"));
      }
      if (part == 0) {
        NewShard();
      } else {
        TFCKPT_RETURN_IF_ERROR(AddPartition(axis, part));
        working = Prod(shape_) * dsize_;
      }
    }
    // TF adds the remainder only when it has elements, which silently drops a tensor with
    // no elements at all; we keep such a tensor (whole) in the current shard.
    if (Prod(shape_) > 0 || Prod(root.shape) == 0) shards_.back().emplace_back(tensor, Region{offset_, shape_});
    remaining_ -= working;
    return absl::OkStatus();
  }

  std::vector<std::vector<std::pair<size_t, Region>>> Result() {
    std::vector<std::vector<std::pair<size_t, Region>>> out;
    for (auto& s : shards_) {
      if (!s.empty()) out.push_back(std::move(s));  // TF keeps a trailing empty shard; a file needs content
    }
    for (auto& s : large_) out.push_back(std::move(s));
    return out;
  }

 private:
  void NewShard() {
    shards_.emplace_back();
    remaining_ = max_;
  }

  std::pair<int, int64_t> NextPartition() {
    const int64_t num_elems = Prod(shape_);
    constexpr double kInf = std::numeric_limits<double>::infinity();
    auto num_partitions = [&](size_t axis) -> double {
      const int64_t axis_len = shape_[axis];
      const int64_t bytes_per_slice = num_elems / axis_len * dsize_;
      const int64_t slices_per_shard = remaining_ / bytes_per_slice;
      if (slices_per_shard == 0) return kInf;
      return std::ceil(static_cast<double>(axis_len) / static_cast<double>(slices_per_shard));
    };
    double min_parts = num_partitions(0);
    int min_axis = 0;
    for (size_t axis = 1; axis < shape_.size(); ++axis) {
      const double parts = num_partitions(axis);
      const double part_size = static_cast<double>(num_elems * dsize_) / parts;
      if (parts < min_parts && part_size <= static_cast<double>(remaining_)) {
        min_axis = static_cast<int>(axis);
        min_parts = parts;
      }
    }
    if (std::isinf(min_parts)) return {min_axis, 0};
    return {min_axis, static_cast<int64_t>(std::ceil(static_cast<double>(shape_[min_axis]) / min_parts))};
  }

  absl::Status AddPartition(int axis, int64_t part) {
    Shape slice_shape = shape_;
    slice_shape[axis] = part;
    const int64_t size = Prod(slice_shape) * dsize_;
    Region piece{offset_, slice_shape};
    if (size > max_) {
      large_.push_back({{tensor_, piece}});
    } else if (size > remaining_) {
      return absl::InternalError("bug: max-shard-size slice larger than the remaining shard space");
    } else {
      shards_.back().emplace_back(tensor_, piece);
      remaining_ -= size;
      if (remaining_ == 0) NewShard();
    }
    offset_[axis] += part;
    for (size_t d = 0; d < shape_.size(); ++d) shape_[d] = root_.shape[d] - (offset_[d] - root_.start[d]);
    return absl::OkStatus();
  }

  int64_t max_, remaining_;
  std::vector<std::vector<std::pair<size_t, Region>>> shards_, large_;
  size_t tensor_ = 0;
  Region root_;
  int64_t dsize_ = 0;
  Shape offset_, shape_;
};

// validate_shards: every element of every tensor in exactly one piece, regions inside the
// tensor, no duplicate key+slice, every file index valid.
absl::Status CheckPlan(const ReshardPlan& plan) {
  for (const TensorPlan& tp : plan.tensors) {
    const TensorEntry& t = *tp.source;
    const int64_t total = *NumElements(t.shape);
    int64_t covered = 0;
    for (size_t i = 0; i < tp.pieces.size(); ++i) {
      const Region& r = tp.pieces[i].region;
      if (!r.InsideOf(t.shape)) return absl::InternalError(StrCat("bug: plan puts a region outside \"", t.name, "\""));
      if (tp.pieces[i].file < 0 || tp.pieces[i].file >= plan.num_files) {
        return absl::InternalError(StrCat("bug: plan names data file ", tp.pieces[i].file));
      }
      covered += r.num_elements();
      for (size_t j = 0; j < i; ++j) {
        if (r == tp.pieces[j].region || (!r.empty() && Intersect(r, tp.pieces[j].region))) {
          return absl::InternalError(StrCat("bug: plan has overlapping pieces of \"", t.name, "\" (validate_shards)"));
        }
      }
    }
    if (tp.pieces.empty() || (total > 0 && covered != total)) {
      return absl::InternalError(StrCat("bug: plan does not cover \"", t.name, "\" exactly (validate_shards)"));
    }
  }
  return absl::OkStatus();
}

// Moves pieces into empty data files while another file holds two or more: from the file
// with the most pieces (the lowest such index), its last new piece in plan order (new
// pieces have no file of their own), else its last kept one, into the lowest empty file.
void FillEmptyFiles(ReshardPlan* plan) {
  struct Held {
    std::vector<PlannedPiece*> kept, fresh;
    size_t size() const { return kept.size() + fresh.size(); }
  };
  std::vector<Held> files(plan->num_files);
  for (TensorPlan& tp : plan->tensors) {
    for (PlannedPiece& p : tp.pieces) (tp.resliced ? files[p.file].fresh : files[p.file].kept).push_back(&p);
  }
  for (int32_t empty = 0; empty < plan->num_files; ++empty) {
    if (files[empty].size() > 0) continue;
    auto donor =
        std::max_element(files.begin(), files.end(), [](const Held& a, const Held& b) { return a.size() < b.size(); });
    if (donor->size() < 2) return;
    std::vector<PlannedPiece*>& from = donor->fresh.empty() ? donor->kept : donor->fresh;
    PlannedPiece* moved = from.back();
    from.pop_back();
    moved->file = empty;
    files[empty].kept.push_back(moved);
  }
}

// (sum of string lengths, longest string) over `region` of string tensor `t`.
absl::StatusOr<std::pair<int64_t, int64_t>> StringSizes(const Checkpoint& c, const TensorEntry& t, const Region& region) {
  int64_t sum = 0, longest = 0;
  for (const auto& s : t.slices) {
    auto inter = Intersect(region, s.region);
    if (!inter && !(region.rank() == 0)) continue;
    TFCKPT_ASSIGN_OR_RETURN(TensorBytes b, c.Read(t, s));
    TFCKPT_ASSIGN_OR_RETURN(DecodedElements d, DecodeStrings(b.data, s.region.num_elements()));
    const Region& r = inter ? *inter : region;
    ForEachRun(r, {&s.region}, [&](const int64_t* off, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t len = static_cast<int64_t>(d.elements[off[0] + i].size());
        sum += len;
        longest = std::max(longest, len);
      }
    });
  }
  return std::pair<int64_t, int64_t>{sum, longest};
}

// by-task: each piece goes to its task's file (PieceTasks); then no file is left empty
// while another holds two pieces.
void AssignByTask(ReshardPlan* plan) {
  const auto tasks = PieceTasks(*plan, plan->num_files);
  for (size_t i = 0; i < plan->tensors.size(); ++i) {
    for (size_t j = 0; j < plan->tensors[i].pieces.size(); ++j) {
      plan->tensors[i].pieces[j].file = static_cast<int32_t>(tasks[i][j]);
    }
  }
  FillEmptyFiles(plan);
}

// A note when output data files stay empty (the checkpoint has fewer pieces than files).
void NoteEmptyFiles(ReshardPlan* plan) {
  std::vector<int64_t> pieces(plan->num_files, 0);
  int64_t total = 0;
  for (const TensorPlan& tp : plan->tensors) {
    for (const PlannedPiece& p : tp.pieces) ++pieces[p.file], ++total;
  }
  std::vector<std::string> empty;
  for (int32_t f = 0; f < plan->num_files; ++f) {
    if (pieces[f] == 0) empty.push_back(StrCat(f));
  }
  if (empty.empty()) return;
  const std::string why = total < plan->num_files
                              ? StrCat("the checkpoint has ", total, " piece", total == 1 ? "" : "s", " for ",
                                       plan->num_files, " files")
                              : "the policy put nothing there";
  plan->notes.push_back(StrCat(empty.size(), " of ", plan->num_files, " data files stay empty (file",
                               empty.size() == 1 ? " " : "s ", absl::StrJoin(empty, ", "), "): ", why));
}

}  // namespace

absl::StatusOr<std::vector<std::vector<std::pair<size_t, Region>>>> MaxShardSizeShards(
    const std::vector<ShardablePiece>& pieces, int64_t max_bytes,
    const std::function<std::pair<int64_t, int64_t>(size_t, const Region&)>& sizes,
    const std::function<std::string(size_t)>& name) {
  MaxShardSizePartitioner p(max_bytes);
  for (const ShardablePiece& piece : pieces) {
    auto [total, dsize] = piece.sized ? sizes(piece.tensor, piece.root) : std::pair<int64_t, int64_t>{0, 0};
    TFCKPT_RETURN_IF_ERROR(p.Add(piece.tensor, piece.root, total, dsize, name(piece.tensor)));
  }
  return p.Result();
}

namespace {

bool IsObjectGraph(const TensorEntry& t) { return t.name == kObjectGraphKey; }

// The number of tasks of the input: its data files (a V1 or safetensors input is one).
int64_t InputTasks(const Checkpoint& c) { return c.info().format == Format::kV2 ? std::max(1, c.info().num_shards) : 1; }

// The plan's tensors in the order TF hands them to a sharding policy: the object graph
// last (TrackableSaver._gather_serialized_tensors adds it after every other tensor).
std::vector<size_t> PolicyOrder(const ReshardPlan& plan) {
  if (!plan.order.empty()) return plan.order;
  std::vector<size_t> order, graph;
  for (size_t i = 0; i < plan.tensors.size(); ++i) (IsObjectGraph(*plan.tensors[i].source) ? graph : order).push_back(i);
  order.insert(order.end(), graph.begin(), graph.end());
  return order;
}


// A note when a rule cuts another axis than 0 of a tensor that looks like a
// ShardedVariable's: an object-based key stored in several slices, all whole rows.
// ParameterServerStrategyV2._create_variable refuses partitions on any other axis
// ("variable_partitioner must return a list/tuple whose elements are 1 besides the first
// element (non-zero)"), so such a variable cannot restore them piece by piece.
std::string ShardedVariableNote(const TensorEntry& t, const std::vector<Region>& regions) {
  if (t.slices.size() < 2 || t.name.find("/.ATTRIBUTES/") == std::string::npos) return "";
  for (const StoredSlice& s : t.slices) {
    if (!s.region.WholeRowsOf(t.shape)) return "";
  }
  for (const Region& r : regions) {
    if (!r.WholeRowsOf(t.shape)) {
      return "cut on another axis than 0: a ShardedVariable (ParameterServerStrategy) is partitioned on axis 0 "
             "only (its variable_partitioner must return 1 for every other axis)";
    }
  }
  return "";
}

// The tensors and the regions the --partition rules cut them into (the first half of a
// plan: no files yet), and the DTensor layout that cut each tensor, if one did.
struct RulePlan {
  ReshardPlan plan;
  std::vector<const Layout*> layouts;
};

// The slot a TF1 key names under `primary`: "S" of "PRIMARY/S" or of "PRIMARY/part_0/S", S
// one path component; "" otherwise. Which such keys are slots is for the caller to say.
std::string Tf1SlotName(const std::string& key, const std::string& primary) {
  if (key.size() <= primary.size() + 1 || key.compare(0, primary.size() + 1, primary + "/") != 0) return "";
  std::string rest = key.substr(primary.size() + 1);
  if (rest.rfind("part_0/", 0) == 0) rest = rest.substr(7);
  return rest.find('/') == std::string::npos ? rest : "";
}

// Whether the TF2 key `key` is a slot variable of the variable stored under `primary`
// ("V/.ATTRIBUTES/VARIABLE_VALUE"): "V/.OPTIMIZER_SLOT/OPTIMIZER/SLOT/.ATTRIBUTES/VARIABLE_VALUE".
bool IsTf2SlotOf(const std::string& key, const std::string& primary) {
  static const std::string kValue = "/.ATTRIBUTES/VARIABLE_VALUE";
  if (!absl::EndsWith(primary, kValue) || !absl::EndsWith(key, kValue)) return false;
  const std::string base = primary.substr(0, primary.size() - kValue.size());
  return absl::StartsWith(key, base + "/.OPTIMIZER_SLOT/");
}

// The slices slot_creator gives a slot of `slot_shape` of a primary cut into `pieces`: the
// primary's, cut down to the slot's rank (its shape is the primary's first dimensions:
// Adafactor's row and column factors); nullopt when that is not a partition of the slot
// (the primary is cut on an axis the slot does not have) or the shape is no such prefix.
std::optional<std::vector<Region>> SlotRegions(const Shape& slot_shape, const Shape& primary_shape,
                                               const std::vector<PlannedPiece>& pieces) {
  const size_t n = slot_shape.size();
  if (n == 0 || n > primary_shape.size() || !std::equal(slot_shape.begin(), slot_shape.end(), primary_shape.begin())) {
    return std::nullopt;
  }
  std::vector<Region> out;
  int64_t covered = 0;
  for (const PlannedPiece& p : pieces) {
    Region r = FirstDims(p.region, n);
    if (std::find(out.begin(), out.end(), r) != out.end()) continue;
    covered += r.num_elements();
    out.push_back(std::move(r));
  }
  if (covered != *NumElements(slot_shape)) return std::nullopt;
  return out;
}

// Optimizer slots (and other slot_creator slots) of primaries the rules cut: they take the
// primary's slices, as TF cuts them, and go to the primary's data files (PieceTasks).
//
// TF1: slot_creator._create_slot_var gives the slot of a partition PRIMARY/part_i the
// SaveSliceInfo of its primary under the name full_name + "/" + real_slot_name, cut down to
// the slot's rank: the checkpoint keys it PRIMARY/SLOT, sliced like PRIMARY
// (saveable_object_util.op_list_to_dict keys a sliced variable by full_name). With one
// partition the slice is full and BundleWriter::AddSlice stores it whole (IsFullSlice),
// still as PRIMARY/SLOT. Older TF1 saves (estimator_linear_ftrl_2shards) key a
// one-partition variable's slots PRIMARY/part_0/SLOT instead. A key PRIMARY/S (or
// PRIMARY/part_0/S) is taken for such a slot when S names an optimizer's slot
// (IsOptimizerState: Adam, Ftrl, ...) or ExponentialMovingAverage's shadow, or when the
// input stores it in the slices of its primary (any slot_creator slot: a custom
// optimizer's), and its shape is the primary's or the first dimensions of it. When the
// rule cuts PRIMARY into several slices, PRIMARY/part_0/SLOT becomes PRIMARY/SLOT; a
// whole primary's slots keep their names.
//
// TF2: a ShardedVariable's slot variables (V/.OPTIMIZER_SLOT/OPTIMIZER/SLOT/...), which
// ParameterServerStrategy creates with the variable's partitioning, follow V the same way
// (their keys unchanged).
void SliceSlotsLikePrimaries(RulePlan* rules) {
  ReshardPlan* plan = &rules->plan;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < plan->tensors.size(); ++i) index[plan->tensors[i].source->name] = i;
  std::set<std::string> taken;
  for (const auto& [name, i] : index) taken.insert(name);
  for (const auto& [name, i] : index) {
    const TensorPlan& primary = plan->tensors[i];
    if (primary.rule.empty()) continue;
    const bool tf2 = name.find("/.ATTRIBUTES/") != std::string::npos;
    const bool sliced = !(primary.pieces.size() == 1 && primary.pieces[0].region.Covers(primary.source->shape));
    const std::string scope = tf2 ? name.substr(0, name.rfind("/.ATTRIBUTES/")) + "/" : name + "/";
    for (auto it = index.upper_bound(scope); it != index.end() && it->first.rfind(scope, 0) == 0; ++it) {
      TensorPlan& slot = plan->tensors[it->second];
      if (slot.source->dtype == static_cast<int32_t>(DType::kVariant) || it->second == i) continue;
      std::string s;
      if (tf2) {
        if (!IsTf2SlotOf(it->first, name)) continue;
      } else {
        s = Tf1SlotName(it->first, name);
        if (s.empty()) continue;
        const bool known = IsOptimizerState(s) || s == "ExponentialMovingAverage";
        bool stored_alike = false;
        if (!known && primary.source->partitioned && slot.source->partitioned) {
          std::vector<PlannedPiece> stored;
          for (const Region& r : StoredRegions(*primary.source)) stored.push_back(PlannedPiece{r, 0, 0, std::nullopt});
          const auto want = SlotRegions(slot.source->shape, primary.source->shape, stored);
          stored_alike = want.has_value() && SameRegions(*want, StoredRegions(*slot.source));
        }
        if (!known && !stored_alike) continue;
      }
      const std::optional<std::vector<Region>> regions =
          SlotRegions(slot.source->shape, primary.source->shape, primary.pieces);
      if (!regions.has_value()) continue;
      slot.pieces.clear();
      for (const Region& r : *regions) {
        std::optional<SliceExtents> extents;
        for (const PlannedPiece& p : primary.pieces) {
          if (p.extents && FirstDims(p.region, r.rank()) == r) {
            SliceExtents e = *p.extents;
            e.starts.resize(r.rank());
            e.lengths.resize(r.rank());
            extents = e;
            break;
          }
        }
        slot.pieces.push_back(PlannedPiece{r, 0, PieceBytes(*slot.source, r), extents});
      }
      slot.resliced = !SameRegions(*regions, StoredRegions(*slot.source));
      slot.rule = StrCat(primary.rule, " (a slot of ", name, ")");
      slot.follows = static_cast<int64_t>(i);
      rules->layouts[it->second] = rules->layouts[i];
      if (tf2) continue;
      const std::string renamed = StrCat(name, "/", s);
      if (sliced && it->first != renamed && taken.insert(renamed).second) {
        slot.name = renamed;
        slot.note = StrCat("renamed as TF1 keys the slot of a partitioned variable (", renamed, ")");
      }
    }
  }
}

// TF2's save order of the plan's tensors (WritePlan::order): the object graph's keys in
// its order (SaveOrderKeys, with the suffixed tensors of a saveable: AttributeTensors), then
// any tensor it does not name in key order, then the graph itself. Empty for a checkpoint
// without an object graph (TF1: key order) or whose graph cannot be read (its own check
// reports that).
std::vector<size_t> SaveOrder(const Checkpoint& c, const ReshardPlan& plan) {
  absl::StatusOr<std::optional<pb::TrackableObjectGraph>> g = LoadObjectGraph(c);
  if (!g.ok() || !g->has_value()) return {};
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < plan.tensors.size(); ++i) at[plan.tensors[i].source->name] = i;
  std::vector<size_t> order;
  std::vector<bool> placed(plan.tensors.size(), false);
  auto place = [&](const std::string& name) {
    const auto it = at.find(name);
    if (it == at.end() || placed[it->second] || IsObjectGraph(*plan.tensors[it->second].source)) return;
    placed[it->second] = true;
    order.push_back(it->second);
  };
  for (const std::string& key : SaveOrderKeys(**g)) {
    for (const TensorEntry* t : AttributeTensors(c, key)) place(t->name);
  }
  for (size_t i = 0; i < plan.tensors.size(); ++i) place(plan.tensors[i].source->name);
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    if (!placed[i]) order.push_back(i);  // the object graph
  }
  return order;
}

absl::StatusOr<RulePlan> ApplyRules(const Checkpoint& c, const ReshardOptions& options) {
  RulePlan out;
  ReshardPlan& plan = out.plan;
  std::vector<std::optional<Regex>> patterns;
  for (const auto& r : options.rules) {
    if (r.pattern) {
      TFCKPT_ASSIGN_OR_RETURN(Regex re, Regex::Compile(*r.pattern, StrCat("--partition ", r.text, ": REGEX")));
      patterns.emplace_back(std::move(re));
    } else {
      patterns.emplace_back(std::nullopt);
    }
  }
  std::vector<bool> used(options.rules.size(), false);
  for (const TensorEntry& t : c.tensors()) {
    if (!t.defect.empty()) {
      return DataLossAt(t.defect_check, c.info().prefix, t.name, -1, StrCat(t.defect, " (run tfckpt validate)"));
    }
    const DTypeInfo* info = LookupDType(t.dtype);
    TensorPlan tp;
    tp.source = &t;
    std::vector<Region> regions = StoredRegions(t);
    const Layout* layout = nullptr;  // the DTensor layout that cut the tensor, if one did
    for (size_t i = 0; i < options.rules.size(); ++i) {
      const bool match = patterns[i] ? patterns[i]->Search(t.name) : t.partitioned;
      if (!match) continue;
      used[i] = true;
      tp.rule = options.rules[i].text;
      if (t.dtype == static_cast<int32_t>(DType::kVariant)) {
        tp.note = "variant tensors are kept as stored";
        break;
      }
      const int64_t esize = info->element_size > 0 ? info->element_size : options.bytes_per_string;
      std::string note;
      auto r = ApplyRule(options.rules[i], t.shape, esize, &note);
      if (!r.ok()) return absl::InvalidArgumentError(StrCat("\"", t.name, "\": ", SV(r.status().message())));
      if (r->has_value()) {
        regions = std::move(**r);
        if (options.rules[i].kind == PartitionRule::Kind::kLayout) layout = &options.rules[i].layout;
        note = ShardedVariableNote(t, regions);
      }
      tp.note = note;
      break;
    }
    tp.resliced = !SameRegions(regions, StoredRegions(t));
    for (Region& r : regions) {
      PlannedPiece p{r, 0, PieceBytes(t, r), std::nullopt};
      if (!tp.resliced) {
        if (t.partitioned) p.extents = StoredSliceOf(t, r)->extents;
      } else if (layout != nullptr) {
        p.extents = LayoutExtents(r, *layout);
      }
      tp.pieces.push_back(std::move(p));
    }
    plan.tensors.push_back(std::move(tp));
    out.layouts.push_back(layout);
  }
  for (size_t i = 0; i < options.rules.size(); ++i) {
    if (options.rules[i].pattern && !used[i]) {
      return absl::InvalidArgumentError(StrCat("--partition ", options.rules[i].text, ": ", *options.rules[i].pattern,
                                               " matches no tensor"));
    }
    if (!used[i]) {
      // A rule without REGEX= is for the tensors already partitioned: said, not silent.
      plan.notes.push_back(StrCat("--partition ", options.rules[i].text,
                                  " matches no tensor: without REGEX= a rule reslices the tensors stored partitioned, "
                                  "and ",
                                  std::any_of(c.tensors().begin(), c.tensors().end(),
                                              [](const TensorEntry& t) { return t.partitioned; })
                                      ? "the rules before it took them"
                                      : "none is",
                                  " (name the tensors to partition: REGEX=", options.rules[i].text, ")"));
    }
  }
  SliceSlotsLikePrimaries(&out);
  plan.order = SaveOrder(c, plan);
  return out;
}

// The shardable tensors of a rule plan, in PolicyOrder, and where each is in the plan.
struct Shardables {
  std::vector<ShardableTensor> tensors;
  std::vector<std::pair<size_t, size_t>> at;  // (tensor, piece) in the plan
};

Shardables ShardablesOf(const ReshardPlan& plan, int64_t tasks) {
  Shardables out;
  const auto task = PieceTasks(plan, tasks);
  for (size_t i : PolicyOrder(plan)) {
    const TensorEntry& t = *plan.tensors[i].source;
    for (size_t j = 0; j < plan.tensors[i].pieces.size(); ++j) {
      const PlannedPiece& p = plan.tensors[i].pieces[j];
      ShardableTensor s;
      s.checkpoint_key = plan.tensors[i].out_name();  // as the new graph's saver keys it
      s.extents = p.extents ? *p.extents : ExtentsOf(p.region, t.shape);
      s.slice_spec = p.region.Covers(t.shape) ? "" : StrCat(absl::StrJoin(t.shape, " "), " ", ExtentsString(s.extents));
      s.shape = p.region.shape;
      s.full_shape = t.shape;
      s.dtype = t.dtype;
      s.task = task[i][j];
      s.region = p.region;
      out.tensors.push_back(std::move(s));
      out.at.emplace_back(i, j);
    }
  }
  return out;
}

// Replaces every tensor's pieces by those `shards` (output files, in order) hold.
void SetPieces(ReshardPlan* plan, const std::vector<std::vector<std::pair<size_t, PlannedPiece>>>& shards) {
  for (TensorPlan& tp : plan->tensors) tp.pieces.clear();
  for (const auto& shard : shards) {
    for (const auto& [i, p] : shard) plan->tensors[i].pieces.push_back(p);
  }
  plan->num_files = static_cast<int32_t>(std::max<size_t>(1, shards.size()));
  for (TensorPlan& tp : plan->tensors) {
    std::vector<Region> after;
    for (const PlannedPiece& p : tp.pieces) after.push_back(p.region);
    tp.resliced = !SameRegions(after, StoredRegions(*tp.source));
  }
}

// TF's MaxShardSizePolicy as MultiDeviceSaver runs it (functional_saver.py,
// _get_shards_by_task): once per task, the shards of task 0 first. TF stores every piece
// under SaveSliceInfo(...).spec (explicit extents), or whole when it covers the tensor
// (BundleWriter::AddSlice's IsFullSlice).
absl::Status AssignMaxShardSize(const Checkpoint& c, const Policy& pol, ReshardPlan* plan) {
  const auto task = PieceTasks(*plan, InputTasks(c));
  const auto order = PolicyOrder(*plan);
  absl::Status size_error;
  auto sizes = [&](size_t i, const Region& r) -> std::pair<int64_t, int64_t> {
    const TensorEntry& t = *plan->tensors[i].source;
    const DTypeInfo* info = LookupDType(t.dtype);
    if (info->element_size > 0) return {r.num_elements() * info->element_size, info->element_size};
    auto s = StringSizes(c, t, r);
    if (!s.ok()) {
      size_error = s.status();
      return {0, 0};
    }
    return *s;
  };
  std::vector<std::vector<std::pair<size_t, PlannedPiece>>> files;
  for (int64_t k = 0; k < InputTasks(c); ++k) {
    std::vector<ShardablePiece> pieces;
    for (size_t i : order) {
      const TensorEntry& t = *plan->tensors[i].source;
      const bool sized = !IsObjectGraph(t) && t.dtype != static_cast<int32_t>(DType::kVariant);
      for (size_t j = 0; j < plan->tensors[i].pieces.size(); ++j) {
        if (task[i][j] == k) pieces.push_back({i, plan->tensors[i].pieces[j].region, t.shape, sized});
      }
    }
    if (pieces.empty()) continue;
    TFCKPT_ASSIGN_OR_RETURN(auto shards, MaxShardSizeShards(pieces, pol.n, sizes, [&](size_t i) {
                              return plan->tensors[i].source->name;
                            }));
    TFCKPT_RETURN_IF_ERROR(size_error);
    for (auto& shard : shards) {
      auto& file = files.emplace_back();
      for (auto& [i, region] : shard) {
        file.push_back({i, PlannedPiece{region, static_cast<int32_t>(files.size() - 1),
                                        PieceBytes(*plan->tensors[i].source, region), std::nullopt}});
      }
    }
  }
  SetPieces(plan, files);
  for (const TensorPlan& tp : plan->tensors) {
    if (tp.resliced && tp.source->dtype == static_cast<int32_t>(DType::kVariant)) {
      return absl::InternalError("bug: max-shard-size resliced a variant tensor");
    }
  }
  return absl::OkStatus();
}

// The user's sharding callback (or SHARDS.json), called per task when it asks so (TF calls
// it once per task), its shards checked by ValidateShards; shard N is data file N.
absl::Status AssignByCallback(const Checkpoint& c, const Policy& pol, ReshardPlan* plan) {
  ShardingCallback cb = pol.callback;
  if (!cb.shards) {
    TFCKPT_ASSIGN_OR_RETURN(cb, ShardsFromFile(pol.file));
  }
  const Shardables all = ShardablesOf(*plan, InputTasks(c));
  std::vector<Shard> shards;
  if (cb.per_task) {
    for (int64_t k = 0; k < InputTasks(c); ++k) {
      std::vector<ShardableTensor> mine;
      for (const ShardableTensor& s : all.tensors) {
        if (s.task == k) mine.push_back(s);
      }
      if (mine.empty()) continue;
      TFCKPT_ASSIGN_OR_RETURN(std::vector<Shard> got, cb.shards(mine));
      for (Shard& s : got) shards.push_back(std::move(s));
    }
  } else {
    TFCKPT_ASSIGN_OR_RETURN(shards, cb.shards(all.tensors));
  }
  TFCKPT_ASSIGN_OR_RETURN(auto valid, ValidateShards(all.tensors, shards, cb.description));
  std::vector<std::vector<std::pair<size_t, PlannedPiece>>> files(valid.size());
  for (size_t f = 0; f < valid.size(); ++f) {
    for (const ShardPiece& sp : valid[f]) {
      const size_t i = all.at[sp.tensor].first;
      files[f].push_back({i, PlannedPiece{sp.region, static_cast<int32_t>(f),
                                          PieceBytes(*plan->tensors[i].source, sp.region), sp.extents}});
    }
  }
  SetPieces(plan, files);
  // Each tensor's pieces in the order of the pieces they come from, then by start: a
  // SHARDS.json made from --dry-run --json gives back the same plan.
  std::map<std::pair<size_t, std::pair<Shape, Shape>>, size_t> from;
  for (size_t f = 0; f < valid.size(); ++f) {
    for (const ShardPiece& sp : valid[f]) {
      from[{all.at[sp.tensor].first, {sp.region.start, sp.region.shape}}] = all.at[sp.tensor].second;
    }
  }
  for (size_t i = 0; i < plan->tensors.size(); ++i) {
    auto key = [&](const PlannedPiece& p) {
      return std::pair{from.at({i, {p.region.start, p.region.shape}}), p.region.start};
    };
    std::stable_sort(plan->tensors[i].pieces.begin(), plan->tensors[i].pieces.end(),
                     [&](const PlannedPiece& a, const PlannedPiece& b) { return key(a) < key(b); });
  }
  return absl::OkStatus();
}

// by-device: each piece in the data file of the device DTensor's save has write it
// (save_restore_util.cc: BuildSliceSpecDeviceMap saves a slice on the lowest device id
// holding it, a tensor without a layout on device 0; DTensorShardedPrefix merges the
// devices' parts in device order, so data file N is the Nth device that saves anything).
// Device ids are row-major over the mesh (tensor_layout.cc, Mesh::device_location).
absl::Status AssignByDevice(const RulePlan& rules, ReshardPlan* plan) {
  const Layout* mesh = nullptr;
  for (const Layout* l : rules.layouts) {
    if (l == nullptr) continue;
    if (mesh != nullptr && l->mesh != mesh->mesh) {
      return absl::InvalidArgumentError(StrCat("--policy by-device places pieces on one DTensor mesh; the layouts "
                                               "name two: ", MeshString(mesh->mesh), " and ", MeshString(l->mesh)));
    }
    mesh = l;
  }
  std::map<int64_t, int32_t> files;  // device id -> data file
  std::vector<std::vector<int64_t>> device(plan->tensors.size());
  for (size_t i = 0; i < plan->tensors.size(); ++i) {
    for (const PlannedPiece& p : plan->tensors[i].pieces) {
      const int64_t d = rules.layouts[i] ? SavingDevice(*rules.layouts[i], plan->tensors[i].source->shape, p.region) : 0;
      device[i].push_back(d);
      files.emplace(d, 0);
    }
  }
  int32_t next = 0;
  for (auto& [d, f] : files) f = next++;
  plan->num_files = std::max<int32_t>(1, next);
  for (size_t i = 0; i < plan->tensors.size(); ++i) {
    for (size_t j = 0; j < device[i].size(); ++j) plan->tensors[i].pieces[j].file = files[device[i][j]];
  }
  return absl::OkStatus();
}

// C++'s DataTypeString, as GetSliceValue's "Dtype X not supported." names a dtype.
std::string CppDTypeName(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::kFloat: return "float";
    case DType::kDouble: return "double";
    case DType::kHalf: return "half";
    default: return DTypeName(dtype);
  }
}

// New slices TF could not store or read back: an explicit empty extent (TensorSlice::Parse
// and BuildTensorSlice want a positive length), and, unless allowed, a dtype
// BundleReader::GetSliceValue does not assemble.
absl::Status CheckNewSlices(const ReshardPlan& plan, bool allow_any_dtype) {
  for (const TensorPlan& tp : plan.tensors) {
    const TensorEntry& t = *tp.source;
    if (!tp.resliced || (tp.pieces.size() == 1 && tp.pieces[0].region.Covers(t.shape))) continue;
    for (const PlannedPiece& p : tp.pieces) {
      const SliceExtents e = p.extents ? *p.extents : ExtentsOf(p.region, t.shape);
      for (size_t d = 0; d < e.lengths.size(); ++d) {
        if (e.lengths[d] != 0) continue;
        return absl::InvalidArgumentError(StrCat(
            "\"", t.name, "\": the slice ", ExtentsString(e), " of ", ShapeString(t.shape),
            " is empty, which TensorFlow cannot store or restore (TensorSlice::Parse: \"Expected non-negative start "
            "and positive length but got start = ", e.starts[d], ", length = 0: string = ", ExtentsString(e), "\")"));
      }
    }
    if (!allow_any_dtype && !TfAssemblesSlices(t.dtype)) {
      return absl::InvalidArgumentError(StrCat(
          "\"", t.name, "\": a ", DTypeName(t.dtype), " tensor cut into ", tp.pieces.size(),
          " slices cannot be read back whole by TensorFlow: BundleReader::GetSliceValue assembles slices only of "
          "float, double, int32, uint8, int16, int8, complex64, complex128, int64, bool, qint32, quint8, qint8, "
          "bfloat16, int4 and uint4 (\"Dtype ", CppDTypeName(t.dtype), " not supported.\"); --allow-any-dtype writes it anyway"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<VerifySource> ReshardSources(const Checkpoint& c, const ReshardPlan& plan) {
  std::map<std::string, std::string> names;
  for (const TensorPlan& tp : plan.tensors) names[tp.out_name()] = tp.source->name;
  return {VerifySource{&c, std::move(names)}};
}

bool TfAssemblesSlices(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::kFloat: case DType::kDouble: case DType::kInt32: case DType::kUInt8: case DType::kInt16:
    case DType::kInt8: case DType::kComplex64: case DType::kComplex128: case DType::kInt64: case DType::kBool:
    case DType::kQInt32: case DType::kQUInt8: case DType::kQInt8: case DType::kBFloat16: case DType::kInt4:
    case DType::kUInt4:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<std::vector<ShardableTensor>> ShardableTensors(const Checkpoint& c, const ReshardOptions& options) {
  TFCKPT_ASSIGN_OR_RETURN(RulePlan rules, ApplyRules(c, options));
  return ShardablesOf(rules.plan, InputTasks(c)).tensors;
}

absl::StatusOr<ReshardPlan> PlanReshard(const Checkpoint& c, const ReshardOptions& options) {
  TFCKPT_ASSIGN_OR_RETURN(RulePlan rules, ApplyRules(c, options));
  ReshardPlan& plan = rules.plan;
  const Policy& pol = options.policy;
  switch (pol.kind) {
    case Policy::Kind::kSingle:
      plan.num_files = 1;
      break;
    case Policy::Kind::kByTask:
      plan.num_files = static_cast<int32_t>(pol.n > 0 ? pol.n : InputTasks(c));
      AssignByTask(&plan);
      break;
    case Policy::Kind::kShards: {
      plan.num_files = static_cast<int32_t>(pol.n);
      std::vector<PlannedPiece*> all;
      for (TensorPlan& tp : plan.tensors) {
        for (PlannedPiece& p : tp.pieces) all.push_back(&p);
      }
      std::stable_sort(all.begin(), all.end(), [](auto* a, auto* b) { return a->bytes > b->bytes; });
      std::vector<uint64_t> load(plan.num_files, 0);
      for (PlannedPiece* p : all) {
        const auto f = std::min_element(load.begin(), load.end()) - load.begin();
        p->file = static_cast<int32_t>(f);
        load[f] += p->bytes;
      }
      break;
    }
    case Policy::Kind::kMaxShardSize:
      TFCKPT_RETURN_IF_ERROR(AssignMaxShardSize(c, pol, &plan));
      break;
    case Policy::Kind::kByDevice:
      TFCKPT_RETURN_IF_ERROR(AssignByDevice(rules, &plan));
      break;
    case Policy::Kind::kCallback:
      TFCKPT_RETURN_IF_ERROR(AssignByCallback(c, pol, &plan));
      break;
  }
  TFCKPT_RETURN_IF_ERROR(CheckNewSlices(plan, options.allow_any_dtype));
  plan.file_bytes.assign(plan.num_files, 0);
  for (const TensorPlan& tp : plan.tensors) {
    for (const PlannedPiece& p : tp.pieces) plan.file_bytes[p.file] += p.bytes;
  }
  TFCKPT_RETURN_IF_ERROR(CheckPlan(plan));
  NoteEmptyFiles(&plan);
  return std::move(plan);
}

}  // namespace tfckpt
