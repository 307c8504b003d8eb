// Reshard: plan which regions go to which output file (ExecutePlan, copy.h, writes them).
#include "tfckpt/reshard.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "core/tensor_encoding.h"
#include "tfckpt/dtype.h"
#include "tfckpt/regex.h"
#include "tfckpt/status.h"

namespace tfckpt {

absl::StatusOr<Policy> ParsePolicy(std::string_view text) {
  Policy p;
  auto number = [&](std::string_view s, int64_t* v) { return absl::SimpleAtoi(AV(s), v) && *v >= 1; };
  if (text == "single") {
    p.kind = Policy::Kind::kSingle;
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
        StrCat("--policy ", text, ": want by-task[:N], shards:N, single or max-shard-size:BYTES (N, BYTES >= 1; BYTES may end in K, M, G or T)"));
  }
  return p;
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

// by-task: a piece stored as it is keeps its data file (modulo the file count); the
// pieces of re-sliced tensors go to the files in turn, as TF's round-robin device setter
// places variable partitions on parameter servers; then no file is left empty while
// another holds two pieces.
void AssignByTask(ReshardPlan* plan) {
  int64_t next = 0;
  for (TensorPlan& tp : plan->tensors) {
    for (PlannedPiece& p : tp.pieces) {
      const StoredSlice* s = tp.resliced ? nullptr : StoredSliceOf(*tp.source, p.region);
      p.file = static_cast<int32_t>((s != nullptr ? s->data.shard : next++) % plan->num_files);
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

absl::StatusOr<ReshardPlan> PlanReshard(const Checkpoint& c, const ReshardOptions& options) {
  ReshardPlan plan;
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
  }
  for (size_t i = 0; i < options.rules.size(); ++i) {
    if (options.rules[i].pattern && !used[i]) {
      return absl::InvalidArgumentError(StrCat("--partition ", options.rules[i].text, ": ", *options.rules[i].pattern,
                                               " matches no tensor"));
    }
  }
  // The policy.
  const Policy& pol = options.policy;
  switch (pol.kind) {
    case Policy::Kind::kSingle:
      plan.num_files = 1;
      break;
    case Policy::Kind::kByTask: {
      const int64_t inputs = c.info().format == Format::kV2 ? std::max(1, c.info().num_shards) : 1;
      plan.num_files = static_cast<int32_t>(pol.n > 0 ? pol.n : inputs);
      AssignByTask(&plan);
      break;
    }
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
    case Policy::Kind::kMaxShardSize: {
      std::vector<ShardablePiece> pieces;
      for (size_t i = 0; i < plan.tensors.size(); ++i) {
        const TensorEntry& t = *plan.tensors[i].source;
        const bool sized = t.name != "_CHECKPOINTABLE_OBJECT_GRAPH" && t.dtype != static_cast<int32_t>(DType::kVariant);
        for (const PlannedPiece& p : plan.tensors[i].pieces) pieces.push_back({i, p.region, t.shape, sized});
      }
      absl::Status size_error;
      auto sizes = [&](size_t i, const Region& r) -> std::pair<int64_t, int64_t> {
        const TensorEntry& t = *plan.tensors[i].source;
        const DTypeInfo* info = LookupDType(t.dtype);
        if (info->element_size > 0) return {r.num_elements() * info->element_size, info->element_size};
        auto s = StringSizes(c, t, r);
        if (!s.ok()) {
          size_error = s.status();
          return {0, 0};
        }
        return *s;
      };
      TFCKPT_ASSIGN_OR_RETURN(auto shards,
                              MaxShardSizeShards(pieces, pol.n, sizes, [&](size_t i) { return plan.tensors[i].source->name; }));
      TFCKPT_RETURN_IF_ERROR(size_error);
      // A piece the policy did not cut further keeps its extents; TF's policy records
      // the pieces it cuts with explicit extents.
      std::vector<std::vector<PlannedPiece>> before(plan.tensors.size());
      for (size_t i = 0; i < plan.tensors.size(); ++i) before[i] = std::move(plan.tensors[i].pieces);
      for (TensorPlan& tp : plan.tensors) tp.pieces.clear();
      for (size_t f = 0; f < shards.size(); ++f) {
        for (auto& [i, region] : shards[f]) {
          PlannedPiece p{region, static_cast<int32_t>(f), PieceBytes(*plan.tensors[i].source, region), std::nullopt};
          for (const PlannedPiece& old : before[i]) {
            if (old.region == region) p.extents = old.extents;
          }
          plan.tensors[i].pieces.push_back(std::move(p));
        }
      }
      plan.num_files = static_cast<int32_t>(std::max<size_t>(1, shards.size()));
      for (TensorPlan& tp : plan.tensors) {
        const TensorEntry& t = *tp.source;
        std::vector<Region> after;
        for (const PlannedPiece& p : tp.pieces) after.push_back(p.region);
        tp.resliced = !SameRegions(after, StoredRegions(t));
        if (tp.resliced && t.dtype == static_cast<int32_t>(DType::kVariant)) {
          return absl::InternalError("bug: max-shard-size resliced a variant tensor");
        }
      }
      break;
    }
  }
  plan.file_bytes.assign(plan.num_files, 0);
  for (const TensorPlan& tp : plan.tensors) {
    for (const PlannedPiece& p : tp.pieces) plan.file_bytes[p.file] += p.bytes;
  }
  TFCKPT_RETURN_IF_ERROR(CheckPlan(plan));
  NoteEmptyFiles(&plan);
  return plan;
}

}  // namespace tfckpt
