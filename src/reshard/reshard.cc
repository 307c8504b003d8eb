// Reshard: plan which regions go to which output file, then write them.
#include "tfckpt/reshard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tfckpt/bundle_writer.h"
#include "tfckpt/crc32c.h"
#include "tfckpt/dtype.h"
#include "tfckpt/float_convert.h"
#include "tfckpt/parallel.h"
#include "tfckpt/regex.h"
#include "tfckpt/status.h"
#include "tfckpt/tensor_encoding.h"

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

std::string StoredSpec(const TensorEntry& t, const PlannedPiece& p) {
  if (p.region.Covers(t.shape)) return "";
  return ExtentsString(p.extents ? *p.extents : ExtentsOf(p.region, t.shape));
}

std::string StoredSpec(const TensorEntry& t, const StoredSlice& s) {
  return t.partitioned ? ExtentsString(s.extents) : "";
}

const StoredSlice* StoredSliceOf(const TensorEntry& t, const Region& region) {
  for (const StoredSlice& s : t.slices) {
    if (s.region == region) return &s;
  }
  return nullptr;
}

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

// ---------------------------------------------------------------------------------------
// Execution.

namespace {

constexpr int64_t kChunkBytes = 8 << 20;   // gather buffer
constexpr size_t kCopyChunk = 1 << 20;     // pread for the CRC of in-kernel copies
constexpr int64_t kDirectRun = 256 << 10;  // runs at least this long are copied in-kernel
constexpr int64_t kSpanBytes = 1 << 20;    // the most a gather reads of one source per chunk

}  // namespace

namespace {

// The stored pieces of `t` that hold elements of `region` (for an empty region: a piece
// equal to it).
std::vector<const StoredSlice*> SourcesOf(const TensorEntry& t, const Region& region) {
  std::vector<const StoredSlice*> sources;
  for (const auto& s : t.slices) {
    if (s.region == region || (!region.empty() && Intersect(s.region, region))) sources.push_back(&s);
  }
  return sources;
}

// An error (slice.gap) when `sources` hold fewer elements of `region` than it has: some
// element is in no stored slice, and a copy would make up its value.
absl::Status CheckCovered(const Checkpoint& c, const TensorEntry& t, const Region& region,
                          const std::vector<const StoredSlice*>& sources) {
  int64_t covered = 0;
  for (const StoredSlice* s : sources) {
    if (auto inter = Intersect(s->region, region)) covered += inter->num_elements();
  }
  if (covered >= region.num_elements()) return absl::OkStatus();
  return DataLossAt("slice.gap", c.info().index_path, t.name, -1,
                    StrCat(region.num_elements() - covered, " elements of ", SliceString(region, t.shape),
                           " are in no stored slice"));
}

// Whether CopyRegion moves `region` in-kernel: a V2 little-endian source whose pieces
// hold the region in runs of at least kDirectRun bytes. Otherwise it is gathered.
bool MovesInKernel(const Checkpoint& c, const TensorEntry& t, const std::vector<const StoredSlice*>& sources,
                   const Region& region) {
  const CheckpointInfo& ci = c.info();
  const int64_t esize = LookupDType(t.dtype)->element_size;
  if (ci.format == Format::kV1 || ci.big_endian || esize == 0) return false;
  int64_t min_run = INT64_MAX, total_runs = 0;
  for (const StoredSlice* s : sources) {
    auto inter = Intersect(region, s->region);
    if (!inter) continue;
    const RunPlan rp = PlanRuns(*inter, {&region, &s->region});
    min_run = std::min(min_run, rp.count);
    total_runs += rp.runs;
  }
  return total_runs > 0 && min_run >= kDirectRun / esize;
}

// The error for a piece whose bytes, as they were copied, do not match its stored CRC
// (`crc` unmasked); OK when they do.
absl::Status CheckCopiedCrc(const Checkpoint& c, const TensorEntry& t, const StoredSlice& s, uint32_t crc) {
  if (crc32c::Mask(crc) == s.data.masked_crc) return absl::OkStatus();
  TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, c.DataFile(s.data.shard));
  return DataLossAt("data.crc", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                    StrCat(PieceLabel(t, s), "checksum mismatch while copying (stored ",
                           absl::StrFormat("%08x", crc32c::Unmask(s.data.masked_crc)), ", computed ",
                           absl::StrFormat("%08x", crc), ")"));
}

// A BundleWriter entry as a sink.
class EntrySink : public PieceSink {
 public:
  explicit EntrySink(BundleWriter::EntryStream& s) : s_(s) {}
  absl::Status Append(std::string_view bytes) override { return s_.Append(bytes); }
  absl::Status AppendFrom(const ReadableFile& src, uint64_t offset, std::string_view bytes) override {
    return s_.AppendFrom(src, offset, bytes);
  }

 private:
  BundleWriter::EntryStream& s_;
};

}  // namespace

CastSink::CastSink(int32_t from, int32_t to, PieceSink& next)
    : from_(from),
      to_(to),
      from_size_(static_cast<size_t>(LookupDType(from)->element_size)),
      to_size_(static_cast<size_t>(LookupDType(to)->element_size)),
      next_(next) {}

absl::Status CastSink::Append(std::string_view bytes) {
  const size_t n = bytes.size() / from_size_;
  out_.resize(n * to_size_);
  CastElements(from_, to_, bytes.data(), n, out_.data());
  return next_.Append(out_);
}

absl::Status CopyRegion(const Checkpoint& c, const TensorEntry& t, const Region& region, PieceSink& sink,
                        std::string* buffer, std::atomic<uint64_t>* counter, bool verify_sources) {
  const DTypeInfo* info = LookupDType(t.dtype);
  if (info == nullptr || info->element_size == 0) {
    return absl::InternalError(StrCat("bug: CopyRegion on variable-size tensor \"", t.name, "\""));
  }
  const std::vector<const StoredSlice*> sources = SourcesOf(t, region);
  TFCKPT_RETURN_IF_ERROR(CheckCovered(c, t, region, sources));
  auto progress = [counter](uint64_t n) {
    if (counter) *counter += n;
  };
  std::string& buf = *buffer;
    const int64_t esize = info->element_size;
    const CheckpointInfo& ci = c.info();
    const bool has_crc = ci.format == Format::kV2 && !ci.big_endian;
    if (MovesInKernel(c, t, sources, region)) {
      // Large contiguous runs: each moves in-kernel, in the piece's order. A run that is a
      // whole stored piece has that piece's CRC checked over a window of the mapping as
      // it goes; other pieces are checked beforehand when asked to.
      struct Run {
        int64_t dst, src, n;
        const StoredSlice* s;
      };
      std::vector<Run> runs;
      for (const StoredSlice* s : sources) {
        auto inter = Intersect(region, s->region);
        if (!inter) continue;
        ForEachRun(*inter, {&region, &s->region},
                   [&](const int64_t* off, int64_t n) { runs.push_back({off[0], off[1], n, s}); });
      }
      std::sort(runs.begin(), runs.end(), [](const Run& x, const Run& y) { return x.dst < y.dst; });
      std::set<const StoredSlice*> whole;
      for (const Run& r : runs) {
        if (has_crc && r.src == 0 && r.n == r.s->region.num_elements()) whole.insert(r.s);
      }
      if (verify_sources && has_crc) {
        for (const StoredSlice* s : sources) {
          if (!whole.count(s)) TFCKPT_RETURN_IF_ERROR(c.VerifyCrc(t, *s, &buf));
        }
      }
      for (const Run& r : runs) {
        TFCKPT_ASSIGN_OR_RETURN(const ReadableFile* file, c.DataFile(r.s->data.shard));
        const uint64_t base = r.s->data.offset + static_cast<uint64_t>(r.src * esize);
        const uint64_t len = static_cast<uint64_t>(r.n * esize);
        if (base > file->size() || len > file->size() - base) return file->PastEndError(base, len);
        const bool check_run = whole.count(r.s) > 0;
        uint32_t crc = 0;
        // Sequential 1 MiB windows of the mapping for the CRC (pages released after each;
        // measured flat), the bytes themselves moved in-kernel.
        for (uint64_t done = 0; done < len;) {
          const uint64_t n = std::min<uint64_t>(len - done, kCopyChunk);
          TFCKPT_ASSIGN_OR_RETURN(const std::string_view window, file->Range(base + done, n, &buf));
          if (check_run) crc = crc32c::Extend(crc, window.data(), window.size());
          TFCKPT_RETURN_IF_ERROR(sink.AppendFrom(*file, base + done, window));
          file->Release(base + done, n);
          done += n;
          progress(n);
        }
        if (check_run) TFCKPT_RETURN_IF_ERROR(CheckCopiedCrc(c, t, *r.s, crc));
      }
      return absl::OkStatus();
    }
    if (verify_sources && has_crc && !(sources.size() == 1 && sources[0]->region == region)) {
      for (const StoredSlice* s : sources) TFCKPT_RETURN_IF_ERROR(c.VerifyCrc(t, *s, &buf));
    }
    // Otherwise gather chunk by chunk in the piece's order. Chunks are sized so that the
    // span each source must provide stays within about 1 MiB (read with pread); chunks
    // accumulate in an 8 MiB buffer written in one go.
    int64_t widest = 1;  // how much more of a source a chunk's rows span than of the piece
    for (const StoredSlice* s : sources) {
      if (region.rank() == 0) break;
      const int64_t src_row = s->region.num_elements() / std::max<int64_t>(1, s->region.shape[0]);
      const int64_t dst_row = region.num_elements() / std::max<int64_t>(1, region.shape[0]);
      if (dst_row > 0) widest = std::max(widest, (src_row + dst_row - 1) / dst_row);
    }
    std::map<const StoredSlice*, TensorBytes> owners;
    // A stored piece the chunks read front to back (the region is that piece, or it is
    // unpartitioned or cut on axis 0) has its CRC checked on those bytes: no second read,
    // and no damaged byte copied silently.
    std::map<const StoredSlice*, crc32c::Cursor> cursors;
    std::string stage;
    buf.clear();
    TFCKPT_RETURN_IF_ERROR(ForEachChunk(region, esize, std::max<int64_t>(esize, kSpanBytes / widest),
                                        [&](const Region& chunk) -> absl::Status {
      const size_t at = buf.size();
      buf.resize(at + static_cast<size_t>(chunk.num_elements() * esize));
      char* dst = buf.data() + at;
      for (const StoredSlice* s : sources) {
        auto inter = Intersect(chunk, s->region);
        if (!inter) continue;
        const RunPlan rp = PlanRuns(*inter, {&chunk, &s->region});
        const auto span = RunSpan(rp, *inter, 1);  // (not a structured binding: clang 14 cannot capture one)
        const int64_t lo = span.first, hi = span.second;
        const uint64_t begin = static_cast<uint64_t>(lo * esize), end = static_cast<uint64_t>(hi * esize);
        TFCKPT_ASSIGN_OR_RETURN(std::string_view src, c.ReadRange(t, *s, begin, end, &stage, &owners[s]));
        cursors[s].Feed(begin, src);
        ForEachRun(*inter, {&chunk, &s->region}, [&](const int64_t* off, int64_t n) {
          std::memcpy(dst + off[0] * esize, src.data() + (off[1] - lo) * esize, static_cast<size_t>(n * esize));
        });
      }
      progress(chunk.num_elements() * esize);
      if (buf.size() < static_cast<size_t>(kChunkBytes)) return absl::OkStatus();
      absl::Status st = sink.Append(buf);
      buf.clear();
      return st;
    }));
    if (!buf.empty()) TFCKPT_RETURN_IF_ERROR(sink.Append(buf));
    if (has_crc) {
      for (const StoredSlice* s : sources) {  // (an empty piece is covered with nothing read)
        if (cursors[s].Covered(s->data.size)) TFCKPT_RETURN_IF_ERROR(CheckCopiedCrc(c, t, *s, cursors[s].crc));
      }
    }
    return absl::OkStatus();
}

void PieceCopier::Progress(uint64_t n) {
  if (progress_) *progress_ += n;
}

absl::Status PieceCopier::Write(const TensorEntry& t, const PlannedPiece& piece, std::string_view out_name,
                               std::optional<uint64_t> at) {
  const std::string_view name = out_name.empty() ? std::string_view(t.name) : out_name;
  const DTypeInfo* info = LookupDType(t.dtype);
  const bool whole = piece.region.Covers(t.shape);
  const std::optional<Region> region = whole ? std::nullopt : std::optional<Region>(piece.region);
  const SliceExtents* extents = piece.extents ? &*piece.extents : nullptr;
  if (info->element_size == 0) {
    TensorBytes keep;
    std::string encoded;
    TFCKPT_ASSIGN_OR_RETURN(std::string_view payload, VariablePayload(c_, t, piece.region, &keep, &encoded));
    Progress(payload.size());
    if (at) return w_.AddAt(name, t.dtype, t.shape, region, payload, piece.file, *at, extents);
    return whole ? w_.Add(name, t.dtype, t.shape, payload, piece.file)
                 : w_.AddSlice(name, t.dtype, t.shape, piece.region, payload, piece.file, extents);
  }
  const auto cast = casts_.find(t.dtype);
  const int32_t out_dtype = cast == casts_.end() ? t.dtype : cast->second;
  auto begun = at ? w_.BeginEntryAt(name, out_dtype, t.shape, region, piece.file, *at, extents)
                  : w_.BeginEntry(name, out_dtype, t.shape, region, piece.file, extents);
  if (!begun.ok()) return begun.status();
  BundleWriter::EntryStream& stream = *begun;
  EntrySink entry(stream);
  if (out_dtype == t.dtype) {
    TFCKPT_RETURN_IF_ERROR(CopyRegion(c_, t, piece.region, entry, &buf_, progress_, verify_sources_));
  } else {
    CastSink casting(t.dtype, out_dtype, entry);
    TFCKPT_RETURN_IF_ERROR(CopyRegion(c_, t, piece.region, casting, &buf_, progress_, verify_sources_));
  }
  return stream.Close();
}

absl::StatusOr<std::string_view> VariablePayload(const Checkpoint& c, const TensorEntry& t, const Region& region,
                                                 TensorBytes* keep, std::string* encoded) {
  const std::vector<const StoredSlice*> sources = SourcesOf(t, region);
  // Stored exactly as it is: the payload as read (CRC checked).
  if (sources.size() == 1 && sources[0]->region == region) {
    TFCKPT_ASSIGN_OR_RETURN(*keep, c.Read(t, *sources[0], /*verify=*/true));
    return keep->data;
  }
  if (t.dtype != static_cast<int32_t>(DType::kString)) {
    return absl::InternalError(StrCat("bug: plan reslices variant tensor \"", t.name, "\""));
  }
  std::vector<TensorBytes> parts;
  TFCKPT_ASSIGN_OR_RETURN(std::vector<std::string_view> elements, GatherStrings(c, t, region, &parts));
  encoded->clear();
  EncodeStrings(elements, encoded);
  return std::string_view(*encoded);
}

absl::StatusOr<std::vector<std::string_view>> GatherStrings(const Checkpoint& c, const TensorEntry& t,
                                                            const Region& region, std::vector<TensorBytes>* keep) {
  std::vector<std::string_view> elements(static_cast<size_t>(region.num_elements()));
  const std::vector<const StoredSlice*> sources = SourcesOf(t, region);
  TFCKPT_RETURN_IF_ERROR(CheckCovered(c, t, region, sources));
  for (const StoredSlice* s : sources) {
    TFCKPT_ASSIGN_OR_RETURN(TensorBytes b, c.Read(t, *s, /*verify=*/true));
    TFCKPT_ASSIGN_OR_RETURN(DecodedElements d, DecodeStrings(b.data, s->region.num_elements()));
    keep->push_back(std::move(b));
    auto inter = Intersect(region, s->region);
    if (!inter) continue;
    ForEachRun(*inter, {&region, &s->region}, [&](const int64_t* off, int64_t n) {
      for (int64_t i = 0; i < n; ++i) elements[off[0] + i] = d.elements[off[1] + i];
    });
  }
  return elements;
}

namespace {

// Writes every piece of the fixed-size tensor `t` in one pass over its stored pieces:
// slabs of whole rows (axis 0, about kSpanBytes, so a slab stays in cache between being
// read and being split) are read once from each stored piece,
// and each output piece takes its part of the slab (a contiguous part of that piece, as
// slabs span every other axis). For cuts on other axes this reads the input once instead
// of once per output piece. Each stored V2 piece is read front to back, so its CRC is
// checked on the way. `streams[k]` receives piece k.
// REQUIRES: t.shape has rank >= 1 and rows of at most kChunkBytes.
absl::Status GatherPieces(const Checkpoint& c, const TensorEntry& t, const std::vector<const PlannedPiece*>& pieces,
                          std::vector<BundleWriter::EntryStream>& streams, std::atomic<uint64_t>* progress,
                          const std::atomic<bool>& stop) {
  const int64_t esize = LookupDType(t.dtype)->element_size;
  const int64_t rows = t.shape[0];
  const int64_t row_bytes = rows == 0 ? 0 : *NumElements(t.shape) / rows * esize;
  const int64_t slab_rows = std::max<int64_t>(1, kSpanBytes / std::max<int64_t>(1, row_bytes));
  const bool has_crc = c.info().format == Format::kV2 && !c.info().big_endian;
  struct Source {
    const StoredSlice* s;
    int64_t row_elems;
    crc32c::Cursor crc;
    TensorBytes owner;
  };
  std::vector<Source> sources;
  for (const StoredSlice& s : t.slices) {
    if (s.region.empty()) continue;
    sources.push_back({&s, s.region.num_elements() / s.region.shape[0]});
  }
  std::vector<std::string> out(pieces.size());
  std::vector<std::optional<Region>> part(pieces.size());
  std::string stage;
  for (int64_t a = 0; a < rows; a += slab_rows) {
    if (stop) return absl::OkStatus();
    Region slab;
    slab.start.assign(t.shape.size(), 0);
    slab.shape = t.shape;
    slab.start[0] = a;
    slab.shape[0] = std::min(slab_rows, rows - a);
    for (size_t k = 0; k < pieces.size(); ++k) {
      part[k] = Intersect(slab, pieces[k]->region);
      if (part[k]) out[k].resize(static_cast<size_t>(part[k]->num_elements() * esize));
    }
    for (Source& src : sources) {
      const auto inter = Intersect(slab, src.s->region);  // whole rows of the stored piece
      if (!inter) continue;
      const int64_t first = (inter->start[0] - src.s->region.start[0]) * src.row_elems;
      const uint64_t begin = static_cast<uint64_t>(first * esize);
      const uint64_t end = begin + static_cast<uint64_t>(inter->shape[0] * src.row_elems * esize);
      TFCKPT_ASSIGN_OR_RETURN(std::string_view bytes, c.ReadRange(t, *src.s, begin, end, &stage, &src.owner));
      src.crc.Feed(begin, bytes);
      for (size_t k = 0; k < pieces.size(); ++k) {
        if (!part[k]) continue;
        const auto sub = Intersect(*inter, pieces[k]->region);
        if (!sub) continue;
        char* dst = out[k].data();
        ForEachRun(*sub, {&*part[k], &src.s->region}, [&](const int64_t* off, int64_t n) {
          std::memcpy(dst + off[0] * esize, bytes.data() + (off[1] - first) * esize, static_cast<size_t>(n * esize));
        });
      }
    }
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (!part[k]) continue;
      TFCKPT_RETURN_IF_ERROR(streams[k].Append(out[k]));
      if (progress) *progress += out[k].size();
    }
  }
  if (has_crc) {
    for (const Source& src : sources) {
      if (src.crc.Covered(src.s->data.size)) TFCKPT_RETURN_IF_ERROR(CheckCopiedCrc(c, t, *src.s, src.crc.crc));
    }
  }
  for (auto& st : streams) TFCKPT_RETURN_IF_ERROR(st.Close());
  return absl::OkStatus();
}

// Whether GatherPieces should write the pieces of `tp` (rather than one CopyRegion per
// piece): several fixed-size pieces, rows that fit a slab, and some piece that cannot be
// moved in-kernel (a cut on an axis other than 0).
bool GathersTogether(const Checkpoint& c, const TensorPlan& tp) {
  const TensorEntry& t = *tp.source;
  const DTypeInfo* info = LookupDType(t.dtype);
  if (tp.pieces.size() < 2 || info == nullptr || info->element_size == 0 || t.shape.empty()) return false;
  auto n = NumElements(t.shape);
  if (!n.ok() || *n == 0 || *n / t.shape[0] * info->element_size > kChunkBytes) return false;
  for (const PlannedPiece& p : tp.pieces) {
    if (!MovesInKernel(c, t, SourcesOf(t, p.region), p.region)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<uint64_t> PieceSize(const Checkpoint& c, const TensorEntry& t, const Region& region) {
  const DTypeInfo* info = LookupDType(t.dtype);
  if (info == nullptr) return absl::InvalidArgumentError(StrCat("\"", t.name, "\": unsupported dtype"));
  if (info->element_size > 0) return static_cast<uint64_t>(region.num_elements() * info->element_size);
  const std::vector<const StoredSlice*> sources = SourcesOf(t, region);
  if (c.info().format == Format::kV2 && !c.info().big_endian && t.defect.empty() && sources.size() == 1 &&
      sources[0]->region == region) {
    return sources[0]->data.size;
  }
  TensorBytes keep;
  std::string encoded;
  TFCKPT_ASSIGN_OR_RETURN(std::string_view payload, VariablePayload(c, t, region, &keep, &encoded));
  return static_cast<uint64_t>(payload.size());
}

absl::Status ExecutePlan(const Checkpoint& c, const ReshardPlan& plan, const std::string& out_prefix,
                         const ExecuteOptions& options) {
  BundleWriterOptions wo;
  wo.num_shards = plan.num_files;
  wo.overwrite = options.overwrite;
  TFCKPT_ASSIGN_OR_RETURN(auto writer, BundleWriter::Create(out_prefix, wo));
  // Every entry's size is known before a byte is written, so each data file is laid out
  // first (its entries in plan order, as one writer per file would append them) and then
  // filled positionally by whichever thread is free: work units are tensors written
  // together (GatherPieces) or single pieces, largest first.
  struct Unit {
    const TensorPlan* tp;
    std::vector<const PlannedPiece*> pieces;
    std::vector<uint64_t> at;
    uint64_t bytes = 0;
  };
  std::vector<Unit> units;
  std::vector<uint64_t> end(static_cast<size_t>(plan.num_files), 0);
  for (const TensorPlan& tp : plan.tensors) {
    const bool together = GathersTogether(c, tp);
    for (const PlannedPiece& p : tp.pieces) {
      TFCKPT_ASSIGN_OR_RETURN(uint64_t size, PieceSize(c, *tp.source, p.region));
      if (!together || units.empty() || units.back().tp != &tp) units.push_back({&tp, {}, {}, 0});
      units.back().pieces.push_back(&p);
      units.back().at.push_back(end[p.file]);
      units.back().bytes += size;
      end[p.file] += size;
    }
  }
  std::stable_sort(units.begin(), units.end(), [](const Unit& x, const Unit& y) { return x.bytes > y.bytes; });
  // A thread takes the largest unit whose data files no other thread is writing (two
  // writers of one file only take turns on its lock), else the largest left.
  std::mutex mu;
  std::vector<char> taken(units.size(), 0);
  std::vector<int> busy(static_cast<size_t>(plan.num_files), 0);
  size_t first_left = 0;
  auto take = [&]() -> std::optional<size_t> {
    std::lock_guard<std::mutex> lock(mu);
    while (first_left < units.size() && taken[first_left]) ++first_left;
    std::optional<size_t> pick;
    for (size_t i = first_left, seen = 0; i < units.size() && seen < 64; ++i) {
      if (taken[i]) continue;
      ++seen;
      if (!pick) pick = i;
      bool idle = true;
      for (const PlannedPiece* p : units[i].pieces) idle = idle && busy[p->file] == 0;
      if (idle) {
        pick = i;
        break;
      }
    }
    if (pick) {
      taken[*pick] = 1;
      for (const PlannedPiece* p : units[*pick].pieces) ++busy[p->file];
    }
    return pick;
  };
  auto done = [&](size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    for (const PlannedPiece* p : units[i].pieces) --busy[p->file];
  };
  auto run = [&](const Unit& u, const std::atomic<bool>& stop) -> absl::Status {
    const TensorEntry& t = *u.tp->source;
    if (u.pieces.size() == 1) {
      PieceCopier pw(c, *writer, options.progress);
      return pw.Write(t, *u.pieces[0], {}, u.at[0]);
    }
    std::vector<BundleWriter::EntryStream> streams;
    for (size_t k = 0; k < u.pieces.size(); ++k) {
      const PlannedPiece& p = *u.pieces[k];
      const std::optional<Region> region =
          p.region.Covers(t.shape) ? std::nullopt : std::optional<Region>(p.region);
      TFCKPT_ASSIGN_OR_RETURN(auto s, writer->BeginEntryAt(t.name, t.dtype, t.shape, region, p.file, u.at[k],
                                                           p.extents ? &*p.extents : nullptr));
      streams.push_back(std::move(s));
    }
    return GatherPieces(c, t, u.pieces, streams, options.progress, stop);
  };
  const int jobs = std::min<int>(Jobs(options.jobs), static_cast<int>(std::max<size_t>(1, units.size())));
  TFCKPT_RETURN_IF_ERROR(ParallelForStatus(static_cast<size_t>(jobs), jobs, [&](size_t, const std::atomic<bool>& stop) {
    while (!stop) {
      const std::optional<size_t> i = take();
      if (!i) break;
      absl::Status st = run(units[*i], stop);
      done(*i);
      TFCKPT_RETURN_IF_ERROR(st);
    }
    return absl::OkStatus();
  }));
  return writer->Finish();
}

}  // namespace tfckpt
