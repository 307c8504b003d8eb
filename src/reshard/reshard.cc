// Reshard: plan which regions go to which output file, then write them.
#include "tfckpt/reshard.h"
#include "tfckpt/regex.h"

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
#include "tfckpt/bundle_writer.h"
#include "tfckpt/crc32c.h"
#include "tfckpt/float_convert.h"
#include "tfckpt/dtype.h"
#include "tfckpt/parallel.h"
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
  } else if (text.rfind("max-shard-size:", 0) == 0 && number(text.substr(15), &p.n)) {
    p.kind = Policy::Kind::kMaxShardSize;
  } else {
    return absl::InvalidArgumentError(
        StrCat("--policy ", text, ": want by-task[:N], shards:N, single or max-shard-size:BYTES (N, BYTES >= 1)"));
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
      if (r->has_value()) regions = std::move(**r);
      tp.note = note;
      break;
    }
    tp.resliced = !SameRegions(regions, StoredRegions(t));
    for (Region& r : regions) {
      const uint64_t bytes = PieceBytes(t, r);
      tp.pieces.push_back(PlannedPiece{std::move(r), 0, bytes});
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
      for (TensorPlan& tp : plan.tensors) {
        for (size_t i = 0; i < tp.pieces.size(); ++i) {
          tp.pieces[i].file = tp.pieces.size() > 1 ? static_cast<int32_t>(i % plan.num_files) : 0;
        }
      }
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
      for (TensorPlan& tp : plan.tensors) tp.pieces.clear();
      for (size_t f = 0; f < shards.size(); ++f) {
        for (auto& [i, region] : shards[f]) {
          plan.tensors[i].pieces.push_back(
              PlannedPiece{region, static_cast<int32_t>(f), PieceBytes(*plan.tensors[i].source, region)});
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

// The error for a piece whose bytes, as they were copied, do not match its stored CRC
// (`crc` unmasked); OK when they do.
absl::Status CheckCopiedCrc(const Checkpoint& c, const TensorEntry& t, const StoredSlice& s, uint32_t crc) {
  if (crc32c::Mask(crc) == s.data.masked_crc) return absl::OkStatus();
  TFCKPT_ASSIGN_OR_RETURN(const MappedFile* file, c.DataFile(s.data.shard));
  return DataLossAt("data.crc", file->path(), t.name, static_cast<int64_t>(s.data.offset),
                    StrCat(PieceLabel(t, s), "checksum mismatch while copying (stored ",
                           absl::StrFormat("%08x", crc32c::Unmask(s.data.masked_crc)), ", computed ",
                           absl::StrFormat("%08x", crc), ")"));
}

// Passes bytes on to a sink and, when the region is one stored V2 piece copied whole,
// checks the stored CRC over them at the end (no second read).
class CrcCheckingSink {
 public:
  CrcCheckingSink(const Checkpoint& c, const TensorEntry& t, const std::vector<const StoredSlice*>& sources,
                  const Region& region, PieceSink& sink)
      : c_(c), t_(t), sink_(sink) {
    const CheckpointInfo& ci = c.info();
    if (sources.size() == 1 && sources[0]->region == region && ci.format == Format::kV2 && !ci.big_endian) {
      piece_ = sources[0];
    }
  }
  absl::Status Append(std::string_view bytes) {
    if (piece_) crc_ = crc32c::Extend(crc_, bytes.data(), bytes.size());
    return sink_.Append(bytes);
  }
  absl::Status AppendFrom(int fd, uint64_t offset, std::string_view bytes) {
    if (piece_) crc_ = crc32c::Extend(crc_, bytes.data(), bytes.size());
    return sink_.AppendFrom(fd, offset, bytes);
  }
  absl::Status Finish() const { return piece_ ? CheckCopiedCrc(c_, t_, *piece_, crc_) : absl::OkStatus(); }

 private:
  const Checkpoint& c_;
  const TensorEntry& t_;
  PieceSink& sink_;
  const StoredSlice* piece_ = nullptr;
  uint32_t crc_ = 0;
};

// A BundleWriter entry as a sink.
class EntrySink : public PieceSink {
 public:
  explicit EntrySink(BundleWriter::EntryStream& s) : s_(s) {}
  absl::Status Append(std::string_view bytes) override { return s_.Append(bytes); }
  absl::Status AppendFrom(int fd, uint64_t offset, std::string_view bytes) override {
    return s_.AppendFrom(fd, offset, bytes);
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
  if (sources.empty() && !region.empty()) return absl::InternalError(StrCat("bug: no source for \"", t.name, "\""));
  auto progress = [counter](uint64_t n) {
    if (counter) *counter += n;
  };
  std::string& buf = *buffer;
  CrcCheckingSink check(c, t, sources, region, sink);
    const int64_t esize = info->element_size;
    const CheckpointInfo& ci = c.info();
    // Every run of the piece, per source, and the smallest run.
    int64_t min_run = INT64_MAX, total_runs = 0;
    for (const StoredSlice* s : sources) {
      auto inter = Intersect(region, s->region);
      if (!inter) continue;
      const RunPlan rp = PlanRuns(*inter, {&region, &s->region});
      min_run = std::min(min_run, rp.count);
      total_runs += rp.runs;
    }
    const bool has_crc = ci.format == Format::kV2 && !ci.big_endian;
    if (ci.format != Format::kV1 && !ci.big_endian && total_runs > 0 && min_run >= kDirectRun / esize) {
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
        TFCKPT_ASSIGN_OR_RETURN(const MappedFile* file, c.DataFile(r.s->data.shard));
        const uint64_t base = r.s->data.offset + static_cast<uint64_t>(r.src * esize);
        const uint64_t len = static_cast<uint64_t>(r.n * esize);
        TFCKPT_ASSIGN_OR_RETURN(std::string_view all, file->Range(base, len));
        const bool check_run = whole.count(r.s) > 0;
        uint32_t crc = 0;
        // Sequential 1 MiB windows of the mapping for the CRC (pages released after each;
        // measured flat), the bytes themselves moved in-kernel.
        for (uint64_t done = 0; done < len;) {
          const uint64_t n = std::min<uint64_t>(len - done, kCopyChunk);
          const std::string_view window = all.substr(done, n);
          if (check_run) crc = crc32c::Extend(crc, window.data(), window.size());
          TFCKPT_RETURN_IF_ERROR(sink.AppendFrom(file->fd(), base + done, window));
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
        ForEachRun(*inter, {&chunk, &s->region}, [&](const int64_t* off, int64_t n) {
          std::memcpy(dst + off[0] * esize, src.data() + (off[1] - lo) * esize, static_cast<size_t>(n * esize));
        });
      }
      progress(chunk.num_elements() * esize);
      if (buf.size() < static_cast<size_t>(kChunkBytes)) return absl::OkStatus();
      absl::Status st = check.Append(buf);
      buf.clear();
      return st;
    }));
    if (!buf.empty()) TFCKPT_RETURN_IF_ERROR(check.Append(buf));
    return check.Finish();
}

void PieceCopier::Progress(uint64_t n) {
  if (progress_) *progress_ += n;
}

absl::Status PieceCopier::Write(const TensorEntry& t, const PlannedPiece& piece, std::string_view out_name) {
  const std::string_view name = out_name.empty() ? std::string_view(t.name) : out_name;
  const DTypeInfo* info = LookupDType(t.dtype);
  const bool whole = piece.region.Covers(t.shape);
  const std::optional<Region> region = whole ? std::nullopt : std::optional<Region>(piece.region);
  if (info->element_size == 0) {
    const std::vector<const StoredSlice*> sources = SourcesOf(t, piece.region);
    // Stored exactly as it is: copy the payload.
    if (sources.size() == 1 && sources[0]->region == piece.region) {
      TFCKPT_ASSIGN_OR_RETURN(TensorBytes b, c_.Read(t, *sources[0], /*verify=*/true));
      Progress(b.data.size());
      return whole ? w_.Add(name, t.dtype, t.shape, b.data, piece.file)
                   : w_.AddSlice(name, t.dtype, t.shape, piece.region, b.data, piece.file);
    }
    return WriteStrings(t, piece, whole, name);
  }
  const auto cast = casts_.find(t.dtype);
  const int32_t out_dtype = cast == casts_.end() ? t.dtype : cast->second;
  TFCKPT_ASSIGN_OR_RETURN(auto stream, w_.BeginEntry(name, out_dtype, t.shape, region, piece.file));
  EntrySink entry(stream);
  if (out_dtype == t.dtype) {
    TFCKPT_RETURN_IF_ERROR(CopyRegion(c_, t, piece.region, entry, &buf_, progress_, verify_sources_));
  } else {
    CastSink casting(t.dtype, out_dtype, entry);
    TFCKPT_RETURN_IF_ERROR(CopyRegion(c_, t, piece.region, casting, &buf_, progress_, verify_sources_));
  }
  return stream.Close();
}

absl::StatusOr<std::vector<std::string_view>> GatherStrings(const Checkpoint& c, const TensorEntry& t,
                                                            const Region& region, std::vector<TensorBytes>* keep) {
  std::vector<std::string_view> elements(static_cast<size_t>(region.num_elements()));
  for (const StoredSlice* s : SourcesOf(t, region)) {
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

absl::Status PieceCopier::WriteStrings(const TensorEntry& t, const PlannedPiece& piece, bool whole, std::string_view name) {
  if (t.dtype != static_cast<int32_t>(DType::kString)) {
    return absl::InternalError(StrCat("bug: plan reslices variant tensor \"", t.name, "\""));
  }
  std::vector<TensorBytes> keep;
  TFCKPT_ASSIGN_OR_RETURN(std::vector<std::string_view> elements, GatherStrings(c_, t, piece.region, &keep));
  std::string payload;
  EncodeStrings(elements, &payload);
  Progress(payload.size());
  return whole ? w_.Add(name, t.dtype, t.shape, payload, piece.file)
               : w_.AddSlice(name, t.dtype, t.shape, piece.region, payload, piece.file);
}

absl::Status ExecutePlan(const Checkpoint& c, const ReshardPlan& plan, const std::string& out_prefix,
                         const ExecuteOptions& options) {
  BundleWriterOptions wo;
  wo.num_shards = plan.num_files;
  wo.overwrite = options.overwrite;
  TFCKPT_ASSIGN_OR_RETURN(auto writer, BundleWriter::Create(out_prefix, wo));
  std::vector<std::vector<std::pair<const TensorEntry*, const PlannedPiece*>>> files(plan.num_files);
  for (const TensorPlan& tp : plan.tensors) {
    for (const PlannedPiece& p : tp.pieces) files[p.file].emplace_back(tp.source, &p);
  }
  TFCKPT_RETURN_IF_ERROR(ParallelForStatus(files.size(), Jobs(options.jobs), [&](size_t f, const std::atomic<bool>& stop) {
    PieceCopier pw(c, *writer, options.progress);
    for (const auto& [t, p] : files[f]) {
      if (stop) return absl::OkStatus();
      TFCKPT_RETURN_IF_ERROR(pw.Write(*t, *p));
    }
    return absl::OkStatus();
  }));
  return writer->Finish();
}

}  // namespace tfckpt
