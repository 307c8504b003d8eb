// Combining checkpoints with edits (see combine.h). Plan first (names, conflicts,
// collapses, checks, object graph, output files), then write each output data file on
// its own thread through PieceCopier (unchanged pieces) or the averaging loop.
#include "merge/combine.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "base/crc32c.h"
#include "base/float_convert.h"
#include "base/parallel.h"
#include "model/tensor_encoding.h"
#include "format/bundle/bundle_writer.h"
#include "base/path.h"
#include "copy/copy.h"
#include "tfckpt/dtype.h"
#include "model/object_graph.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"
#include "validate/compare.h"
#include "model/values.h"

namespace tfckpt {


namespace {

constexpr int64_t kAverageChunk = 1 << 15;  // elements read from each input per step when averaging
constexpr int64_t kTile = 1 << 10;           // elements summed at once (their doubles stay in L1)

using Kind = PlannedTensor::Kind;

bool Averageable(int32_t dtype) {
  const auto d = static_cast<DType>(dtype);
  return d == DType::kFloat || d == DType::kDouble || d == DType::kHalf || d == DType::kBFloat16;
}

std::vector<Region> SortedRegions(const TensorEntry& t) {
  std::vector<Region> r;
  for (const auto& s : t.slices) r.push_back(s.region);
  std::sort(r.begin(), r.end(), [](const Region& a, const Region& b) {
    return std::tie(a.start, a.shape) < std::tie(b.start, b.shape);
  });
  return r;
}

// How `b` differs from `a` (its component 0 or replica 0), whatever either's slicing,
// with validate --against's comparison (bitwise); "" when equal.
absl::StatusOr<std::string> Difference(const Checkpoint& ca, const TensorEntry& a, const Checkpoint& cb,
                                       const TensorEntry& b) {
  if (a.dtype != b.dtype) return StrCat("dtype ", DTypeName(b.dtype), " vs ", DTypeName(a.dtype));
  if (a.shape != b.shape) return StrCat("shape ", ShapeString(b.shape), " vs ", ShapeString(a.shape));
  for (const TensorEntry* t : {&a, &b}) {
    if (!t->defect.empty()) return absl::DataLossError(StrCat("\"", t->name, "\": ", t->defect, " (run tfckpt validate)"));
  }
  if (LookupDType(a.dtype) == nullptr) return absl::InvalidArgumentError(StrCat("\"", a.name, "\": unknown dtype"));
  TFCKPT_ASSIGN_OR_RETURN(ValueDifference d, CompareTensorValues(cb, b, ca, a, CompareOptions{}));
  if (d.differing == 0) return std::string();
  return StrCat("first at ", ShapeString(d.first.index), ": ", d.first.new_value, " vs ", d.first.old_value, " (",
                d.differing, " of ", d.elements, " elements differ)");
}

// Element-wise mean of one stored region over every input, written at its place in the
// output (positionally). Each source piece is read front to back in steps of about 1 MiB;
// the CRC of a raw V2 piece is checked on those bytes (no read of its own).
class Averager {
 public:
  Averager(const std::vector<std::shared_ptr<const Checkpoint>>& cs, std::atomic<uint64_t>* progress)
      : cs_(cs), progress_(progress) {}

  absl::Status Write(const PlannedTensor& o, const Region& region, BundleWriter& w, int32_t file, uint64_t at_offset) {
    const TensorEntry& last = *o.sources.back().tensor;
    const int32_t dtype = last.dtype;
    const int esize = LookupDType(dtype)->element_size;
    const bool whole = region.Covers(last.shape);
    TFCKPT_ASSIGN_OR_RETURN(auto stream, w.BeginEntryAt(o.name, dtype, last.shape,
                                                        whole ? std::nullopt : std::optional<Region>(region), file,
                                                        at_offset));
    std::vector<const StoredSlice*> slices;
    std::vector<bool> raw;  // CRC checked on the bytes read
    for (const CombineSource& c : o.sources) {
      const StoredSlice* s = StoredSliceOf(*c.tensor, region);
      if (s == nullptr) return absl::InternalError(StrCat("bug: no slice to average for \"", o.name, "\""));
      const CheckpointInfo& ci = cs_[c.input]->info();
      raw.push_back(ci.format == Format::kV2 && !ci.big_endian);
      if (!raw.back()) TFCKPT_RETURN_IF_ERROR(cs_[c.input]->VerifyCrc(*c.tensor, *s, &buf_));
      slices.push_back(s);
    }
    const int64_t n = region.num_elements();
    const double inv = 1.0 / static_cast<double>(o.sources.size());
    std::vector<TensorBytes> owners(o.sources.size());
    std::vector<crc32c::Cursor> crcs(o.sources.size());
    bufs_.resize(o.sources.size());
    std::vector<std::string_view> src(o.sources.size());
    for (int64_t at = 0; at < n; at += kAverageChunk) {
      const int64_t m = std::min(kAverageChunk, n - at);
      for (size_t j = 0; j < o.sources.size(); ++j) {
        TFCKPT_ASSIGN_OR_RETURN(src[j], cs_[o.sources[j].input]->ReadRange(*o.sources[j].tensor, *slices[j], at * esize,
                                                                           (at + m) * esize, &bufs_[j], &owners[j]));
        if (raw[j]) crcs[j].Feed(static_cast<uint64_t>(at * esize), src[j]);
      }
      // Tile by tile, the sums in a buffer that stays in L1 (in the inputs' order, as
      // always: the same doubles whatever the tiling).
      out_.resize(static_cast<size_t>(m * esize));
      for (int64_t t = 0; t < m; t += kTile) {
        const int64_t k = std::min(kTile, m - t);
        acc_.resize(static_cast<size_t>(k));
        for (size_t j = 0; j < src.size(); ++j) Accumulate(dtype, src[j].data() + t * esize, k, /*first=*/j == 0);
        Finish(dtype, inv, k, out_.data() + t * esize);
      }
      TFCKPT_RETURN_IF_ERROR(stream.Append(out_));
      if (progress_) *progress_ += out_.size();
    }
    for (size_t j = 0; j < o.sources.size(); ++j) {
      const StoredSlice& s = *slices[j];
      if (raw[j] && !(crcs[j].Covered(s.data.size) && crc32c::Mask(crcs[j].crc) == s.data.masked_crc)) {
        // (VerifyCrc reads it again to report the mismatch as every reader does.)
        TFCKPT_RETURN_IF_ERROR(cs_[o.sources[j].input]->VerifyCrc(*o.sources[j].tensor, s, &buf_));
      }
    }
    return stream.Close();
  }

 private:
  // a[i] = (first ? 0 : a[i]) + the i-th element of p. (The tile is copied into a typed
  // array first: element-wise memcpy from the bytes kept GCC from vectorising cleanly,
  // 2.3 ns an element against 0.6.)
  template <typename T, typename Widen>
  static void AddEach(const char* p, int64_t m, double* __restrict a, bool first, Widen widen) {
    T x[kTile];
    std::memcpy(x, p, static_cast<size_t>(m) * sizeof(T));
    if (first) {
      for (int64_t i = 0; i < m; ++i) a[i] = static_cast<double>(widen(x[i]));
      return;
    }
    for (int64_t i = 0; i < m; ++i) a[i] += static_cast<double>(widen(x[i]));
  }

  template <typename T, typename Narrow>
  static void StoreEach(const double* __restrict a, double scale, int64_t m, char* o, Narrow narrow) {
    T x[kTile];
    for (int64_t i = 0; i < m; ++i) x[i] = narrow(a[i] * scale);
    std::memcpy(o, x, static_cast<size_t>(m) * sizeof(T));
  }

  void Accumulate(int32_t dtype, const char* p, int64_t m, bool first) {
    double* a = acc_.data();
    switch (static_cast<DType>(dtype)) {
      case DType::kFloat: return AddEach<float>(p, m, a, first, [](float v) { return v; });
      case DType::kDouble: return AddEach<double>(p, m, a, first, [](double v) { return v; });
      case DType::kHalf: return AddEach<uint16_t>(p, m, a, first, HalfToFloat);
      default: return AddEach<uint16_t>(p, m, a, first, BFloat16ToFloat);  // bfloat16 (Averageable)
    }
  }

  void Finish(int32_t dtype, double inv, int64_t m, char* o) {
    const double* a = acc_.data();
    switch (static_cast<DType>(dtype)) {
      case DType::kFloat: return StoreEach<float>(a, inv, m, o, [](double v) { return static_cast<float>(v); });
      case DType::kDouble: return StoreEach<double>(a, inv, m, o, [](double v) { return v; });
      case DType::kHalf:
        return StoreEach<uint16_t>(a, inv, m, o, [](double v) { return FloatToHalf(static_cast<float>(v)); });
      default:
        return StoreEach<uint16_t>(a, inv, m, o, [](double v) { return FloatToBFloat16(static_cast<float>(v)); });
    }
  }

  const std::vector<std::shared_ptr<const Checkpoint>>& cs_;
  std::atomic<uint64_t>* progress_;
  std::vector<double> acc_;
  std::vector<std::string> bufs_;  // one per input
  std::string buf_, out_;
};

// True when `names` holds `key` or a tensor extending it (an attribute's saveable may
// store "<key>_STATE", "<key>-keys", ...; see AttributeTensors).
bool HoldsAttribute(const std::set<std::string>& names, const std::string& key) {
  if (names.count(key)) return true;
  for (auto it = names.upper_bound(key); it != names.end() && it->compare(0, key.size(), key) == 0; ++it) {
    const char c = (*it)[key.size()];
    if (c == '_' || c == '-') return true;
  }
  return false;
}

// Parallel-device components among `tensors` (one input's, after the filters) that
// --collapse-parallel drops, each with its component 0 (also among `tensors`).
// TensorFlow's ParallelVariable (distribute/parallel_device/saving.py) saves component 0
// as X/.ATTRIBUTES/VARIABLE_VALUE and component K as X/.ATTRIBUTES/parallel_component_K,
// K = 1..N-1 in decimal. Other names that look like components (parallel_component_0,
// zero-padded numbers) and groups without VARIABLE_VALUE or with a missing number are
// left alone, each with a note.
std::map<const TensorEntry*, const TensorEntry*> ParallelComponents(const std::vector<const TensorEntry*>& tensors,
                                                                    const std::string& input,
                                                                    std::vector<std::string>* notes) {
  static const Regex component_re = Regex::Fixed(R"((.*/\.ATTRIBUTES/)parallel_component_(\d+))");
  std::map<std::string, std::map<int64_t, const TensorEntry*>> groups;  // "X/.ATTRIBUTES/" -> K -> component
  std::map<std::string, const TensorEntry*> by_name;
  for (const TensorEntry* t : tensors) {
    by_name[t->name] = t;
    std::vector<std::string> m;
    if (!component_re.FullMatch(t->name, &m)) continue;
    if (m[1][0] == '0' || m[1].size() > 9) {
      notes->push_back(StrCat(input, ": \"", t->name, "\" is not a parallel component TensorFlow writes ",
                              "(VARIABLE_VALUE, then parallel_component_1..N-1); left as it is"));
      continue;
    }
    groups[m[0]][std::stoll(m[1])] = t;
  }
  std::map<const TensorEntry*, const TensorEntry*> out;
  for (const auto& [base, members] : groups) {
    const auto v = by_name.find(base + "VARIABLE_VALUE");
    const TensorEntry* value = v == by_name.end() ? nullptr : v->second;
    int64_t missing = 1;
    while (members.count(missing)) ++missing;
    std::string why;
    if (value == nullptr) why = StrCat("there is no component 0 \"", base, "VARIABLE_VALUE\"");
    else if (missing <= members.rbegin()->first) why = StrCat("parallel_component_", missing, " is missing");
    if (!why.empty()) {
      notes->push_back(StrCat(input, ": parallel components of \"", base, "\" left as they are: ", why));
      continue;
    }
    for (const auto& [k, t] : members) out[t] = value;
  }
  return out;
}

// PlanCombine's phases, in the order of man tfckpt-merge: open, choose the object graph,
// names (filters, optimizer state, parallel components, renames), conflicts and
// averaging, replicas, equality checks, expanded components, the graph rewritten, data
// files.
class Planner {
 public:
  Planner(const std::vector<std::string>& inputs, const CombineOptions& options, const NameRules& rules)
      : inputs_(inputs), options_(options), rules_(rules), expand_(options.expand_parallel.value_or(0)) {}

  absl::StatusOr<CombinePlan> Run(const std::string& out) {
    TFCKPT_RETURN_IF_ERROR(Open(out));
    TFCKPT_RETURN_IF_ERROR(ChooseGraph());
    TFCKPT_RETURN_IF_ERROR(CollectNames());
    TFCKPT_RETURN_IF_ERROR(ResolveNames());
    PlanReplicas();
    PlanReplicaSlots();
    TFCKPT_RETURN_IF_ERROR(CheckEqual());
    if (!report().mismatches.empty()) return std::move(plan_);
    RenameReplicas();
    ExpandParallel();
    if (outs_.empty()) return absl::InvalidArgumentError("nothing to write: every tensor was filtered out");
    if (graph_input_) AddGraph();
    AssignFiles();
    Describe();
    return std::move(plan_);
  }

 private:
  CombineReport& report() { return plan_.report; }
  const Checkpoint& input(size_t j) const { return *plan_.inputs[j]; }

  // Opens every input; refuses an output that is one of them, or that exists.
  absl::Status Open(const std::string& out) {
    const Location at = Location::Of(out);
    for (const auto& in : inputs_) {
      TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> c, OpenCheckpoint(in));
      const CheckpointInfo& info = c->info();
      TFCKPT_RETURN_IF_ERROR(at.store().CheckNotInputs(BundleFilesAt(at, 0), FilesOf(info)));
      report().inputs.push_back(info.prefix);
      plan_.inputs.push_back(std::move(c));
    }
    if (!options_.dry_run && !options_.overwrite && at.Sibling(".index").Exists()) {
      return absl::AlreadyExistsError(StrCat(out, ".index: output exists (use --force to replace it)"));
    }
    return absl::OkStatus();
  }

  // The object graph each input has, and the one the output keeps.
  absl::Status ChooseGraph() {
    graphs_.resize(plan_.inputs.size());
    for (size_t j = 0; j < graphs_.size(); ++j) {
      TFCKPT_ASSIGN_OR_RETURN(graphs_[j], LoadObjectGraph(input(j)));
      if (graphs_[j] && (!graph_input_ || options_.on_conflict == CombineOptions::Conflict::kLast)) graph_input_ = j;
    }
    if (graph_input_ && rules_.Excluded(kObjectGraphKey)) {
      report().notes.push_back("the object graph is excluded (--exclude matches _CHECKPOINTABLE_OBJECT_GRAPH)");
      graph_input_.reset();
    }
    return absl::OkStatus();
  }

  // What the filters and --drop-optimizer leave of input j, by name.
  absl::StatusOr<std::vector<const TensorEntry*>> Kept(size_t j) {
    const std::vector<std::string> opt_paths = graphs_[j] ? OptimizerPaths(*graphs_[j]) : std::vector<std::string>{};
    std::vector<const TensorEntry*> kept;
    for (const TensorEntry& t : input(j).tensors()) {
      if (t.name == kObjectGraphKey) continue;
      if (!rules_.Selected(t.name)) {
        ++report().dropped_filtered;
        report().bytes_dropped_filtered += t.bytes;
        continue;
      }
      if (options_.drop_optimizer && IsOptimizerState(t.name, opt_paths)) {
        ++report().dropped_optimizer;
        report().bytes_dropped_optimizer += t.bytes;
        continue;
      }
      // A tensor whose entries are inconsistent cannot be copied (its pieces may point
      // nowhere); dropped ones above do not matter.
      if (!t.defect.empty()) {
        const CheckpointInfo& info = input(j).info();
        return DataLossAt(t.defect_check, info.format == Format::kV2 ? info.index_path : info.prefix, t.name, -1,
                          StrCat(t.defect, " (run tfckpt validate)"));
      }
      kept.push_back(&t);
    }
    return kept;
  }

  // Names: filters, optimizer state, parallel components, renames.
  absl::Status CollectNames() {
    for (size_t j = 0; j < plan_.inputs.size(); ++j) {
      TFCKPT_ASSIGN_OR_RETURN(std::vector<const TensorEntry*> kept, Kept(j));
      const auto components = options_.collapse_parallel != CombineOptions::Parallel::kKeep
                                  ? ParallelComponents(kept, inputs_[j], &report().notes)
                                  : std::map<const TensorEntry*, const TensorEntry*>{};
      for (const TensorEntry* t : kept) {
        if (auto v = components.find(t); v != components.end()) {
          if (options_.collapse_parallel == CombineOptions::Parallel::kCheck) {
            component_checks_.push_back({j, t, v->second});
          }
          ++report().collapsed;
          report().bytes_collapsed += t->bytes;
          continue;
        }
        by_name_[rules_.Rename(t->name)].push_back({j, t});
      }
    }
    return absl::OkStatus();
  }

  // Conflicts and averaging: one output tensor per name.
  absl::Status ResolveNames() {
    for (auto& [name, cands] : by_name_) {
      TFCKPT_RETURN_IF_ERROR(CheckCollisions(name, cands));
      PlannedTensor o;
      o.name = name;
      if (cands.size() > 1 && options_.average) {
        if (PlanAverage(cands, &o)) {
          outs_.emplace(name, std::move(o));
          continue;
        }
      } else if (cands.size() > 1) {
        TFCKPT_ASSIGN_OR_RETURN(o.sources, ChooseAmongConflicting(name, cands));
      } else {
        o.sources = cands;
      }
      const CombineSource& src = o.sources.front();
      o.origin = src.tensor->name == name ? inputs_[src.input]
                                          : StrCat(inputs_[src.input], " \"", src.tensor->name, "\"");
      outs_.emplace(name, std::move(o));
    }
    return absl::OkStatus();
  }

  // Two tensors of one input, or of different names, that renames make one name.
  absl::Status CheckCollisions(const std::string& name, const std::vector<CombineSource>& cands) const {
    for (size_t a = 0; a < cands.size(); ++a) {
      for (size_t b = a + 1; b < cands.size(); ++b) {
        if (cands[a].input == cands[b].input || cands[a].tensor->name != cands[b].tensor->name) {
          return absl::InvalidArgumentError(StrCat("--rename makes \"", cands[a].tensor->name, "\" (",
                                                   inputs_[cands[a].input], ") and \"", cands[b].tensor->name, "\" (",
                                                   inputs_[cands[b].input], ") both \"", name, "\""));
        }
      }
    }
    return absl::OkStatus();
  }

  // --average of `cands` (several): true when `o` is planned as their mean; otherwise
  // `o` takes the last input's (with a note saying why, for a float tensor).
  bool PlanAverage(const std::vector<CombineSource>& cands, PlannedTensor* o) {
    const size_t n = plan_.inputs.size();
    const TensorEntry& t0 = *cands.front().tensor;
    std::string why;
    if (cands.size() != n) {
      why = StrCat("in ", cands.size(), " of ", n, " inputs");
    } else if (Averageable(t0.dtype)) {
      for (const CombineSource& c : cands) {
        if (c.tensor->dtype != t0.dtype || c.tensor->shape != t0.shape) why = "dtype or shape differs between inputs";
        else if (SortedRegions(*c.tensor) != SortedRegions(t0)) why = "stored with different slicing in the inputs";
        if (!why.empty()) break;
      }
      if (why.empty()) {
        o->kind = Kind::kAverage;
        o->sources = cands;
        o->origin = StrCat("mean of ", n, " inputs");
        ++report().averaged;
        return true;
      }
    }  // else not a float tensor: silently from the last input
    if (!why.empty()) {
      report().notes.push_back(StrCat("\"", o->name, "\" not averaged (", why, "); taken from the last input"));
    }
    o->sources = {cands.back()};
    return false;
  }

  // The source of a tensor several inputs hold: --on-conflict's choice; under kError an
  // error naming the tensor and the first two inputs that hold it. (Equal values are not
  // enough to take one silently: each input may hold only some slices of the tensor, as
  // the parts of a distributed save do, and their values compare equal where they overlap.)
  absl::StatusOr<std::vector<CombineSource>> ChooseAmongConflicting(const std::string& name,
                                                                    const std::vector<CombineSource>& cands) {
    switch (options_.on_conflict) {
      case CombineOptions::Conflict::kFirst: return std::vector<CombineSource>{cands.front()};
      case CombineOptions::Conflict::kLast: return std::vector<CombineSource>{cands.back()};
      case CombineOptions::Conflict::kError: break;
    }
    return absl::InvalidArgumentError(StrCat("tensor \"", name, "\" is in both ", inputs_[cands[0].input], " and ",
                                             inputs_[cands[1].input], " (--on-conflict first|last chooses)"));
  }

  // TPU replicas NAME/0 .. NAME/K-1 -> NAME: which output names become which, and the
  // checks to run first. TF1's default Saver writes a ReplicatedVariable
  // (tpu/keras_tpu_variables.py: replicas created as "NAME/i", the ReplicatedVariable in
  // GLOBAL_VARIABLES) as replica 0 alone: saveable_object_util.op_list_to_dict converts it
  // to replica 0's tensor and keys it by that variable's op, "NAME/0". Its optimizer slots
  // are scoped under primary.op.name, "NAME/0" (slot_creator.create_slot for a primary that
  // is no Variable): "NAME/0/SLOT", or "NAME/0/SLOT/0" when created replicated too; both
  // become "NAME/SLOT", the slot of the variable NAME.
  void PlanReplicas() {
    if (!options_.collapse_replicas) return;
    static const Regex replica_re = Regex::Fixed(R"((.*)/(0|[1-9]\d{0,8}))");
    std::map<std::string, std::map<int64_t, std::string>> groups;
    for (const auto& [name, o] : outs_) {
      std::vector<std::string> m;
      if (replica_re.FullMatch(name, &m)) groups[m[0]][std::stoll(m[1])] = name;
    }
    for (const auto& [base, members] : groups) {
      const std::string why = WhyNotReplicas(base, members);
      if (!why.empty()) {
        report().notes.push_back(StrCat("replicas of \"", base, "\" not collapsed: ", why));
        continue;
      }
      const PlannedTensor& first = outs_.at(members.begin()->second);
      collapsed_bases_.insert(base);
      if (members.size() == 1) {
        report().notes.push_back(StrCat("\"", base, "/0\" collapsed alone (TF1's Saver writes replica 0 only)"));
      }
      for (const auto& [i, name] : members) {
        replica_map_[name] = i == 0 ? std::optional<std::string>(base) : std::nullopt;
        if (i == 0) continue;
        const PlannedTensor& other = outs_.at(name);
        if (options_.check_replicas) replica_checks_.push_back({&first, &other});
        ++report().collapsed;
        report().bytes_collapsed += other.sources[0].tensor->bytes;
      }
    }
  }

  // Slots of collapsed replicated variables: "B/0/REST" -> "B/REST" for a collapsed base B
  // (after REST's own replicas are collapsed), unless that name is taken.
  void PlanReplicaSlots() {
    if (collapsed_bases_.empty()) return;
    std::map<std::string, std::string> renamed;
    std::set<std::string> taken;
    for (const auto& [from, to] : replica_map_) {
      if (to) taken.insert(*to);
    }
    for (const auto& [name, o] : outs_) {
      auto it = replica_map_.find(name);
      if (it != replica_map_.end() && !it->second) continue;  // a dropped replica
      const std::string now = it != replica_map_.end() ? *it->second : name;
      for (const std::string& b : collapsed_bases_) {
        if (now.size() <= b.size() + 3 || now.compare(0, b.size() + 3, b + "/0/") != 0) continue;
        const std::string slot = b + now.substr(b.size() + 2);
        if (outs_.count(slot) || !taken.insert(slot).second) {
          report().notes.push_back(StrCat("\"", now, "\" not renamed to \"", slot, "\": that name exists too"));
        } else {
          renamed[name] = slot;
        }
        break;
      }
    }
    for (const auto& [name, slot] : renamed) replica_map_[name] = slot;
  }

  // Why the replicas `members` (index -> output name) of `base` cannot be collapsed; ""
  // when they can.
  std::string WhyNotReplicas(const std::string& base, const std::map<int64_t, std::string>& members) const {
    if (members.rbegin()->first != static_cast<int64_t>(members.size()) - 1) return "indices are not consecutive from 0";
    if (outs_.count(base)) return StrCat("\"", base, "\" exists too");
    const PlannedTensor& first = outs_.at(members.begin()->second);
    for (const auto& [i, name] : members) {
      const PlannedTensor& o = outs_.at(name);
      if (o.kind != Kind::kCopy || first.kind != Kind::kCopy) return "averaged";
      const TensorEntry& a = *first.sources[0].tensor;
      const TensorEntry& b = *o.sources[0].tensor;
      if (b.dtype != a.dtype || b.shape != a.shape) return "dtype or shape differs";
    }
    return "";
  }

  // Parallel components and replicas must equal component / replica 0; differences
  // become mismatches (nothing is written then).
  absl::Status CheckEqual() {
    for (const auto& k : component_checks_) {
      TFCKPT_ASSIGN_OR_RETURN(std::string diff, Difference(input(k.input), *k.value, input(k.input), *k.component));
      if (!diff.empty()) {
        report().mismatches.push_back(Finding{"merge.parallel-differs", Severity::kError, report().inputs[k.input],
                                              k.component->name, -1,
                                              StrCat("differs from component 0 \"", k.value->name, "\": ", diff)});
      }
    }
    for (const auto& k : replica_checks_) {
      const CombineSource& a = k.first->sources[0];
      const CombineSource& b = k.other->sources[0];
      TFCKPT_ASSIGN_OR_RETURN(std::string diff, Difference(input(a.input), *a.tensor, input(b.input), *b.tensor));
      if (!diff.empty()) {
        report().mismatches.push_back(Finding{"merge.replica-differs", Severity::kError, report().inputs[b.input],
                                              b.tensor->name, -1,
                                              StrCat("differs from replica 0 \"", a.tensor->name, "\": ", diff)});
      }
    }
    return absl::OkStatus();
  }

  void RenameReplicas() {
    for (const auto& [from, to] : replica_map_) {
      auto node = outs_.extract(from);
      if (!to) continue;
      node.key() = *to;
      node.mapped().name = *to;
      node.mapped().origin += StrCat(" (", from, " of ", "its replicas)");
      outs_.insert(std::move(node));
    }
  }

  // Parallel components copied from component 0 (--expand-parallel).
  void ExpandParallel() {
    if (expand_ < 2) return;
    static const std::string kValue = "/.ATTRIBUTES/VARIABLE_VALUE";
    std::vector<PlannedTensor> added;
    for (const auto& [name, o] : outs_) {
      if (name.size() < kValue.size() || name.compare(name.size() - kValue.size(), kValue.size(), kValue) != 0) continue;
      // Checkpoint._maybe_create_save_counter creates save_counter under
      // ops.device("/cpu:0"): not on the parallel device, so saving.py's _variable_creator
      // does not wrap it in a ParallelVariable and it has no components.
      if (name == "save_counter/.ATTRIBUTES/VARIABLE_VALUE") continue;
      const std::string base = name.substr(0, name.size() - std::string("VARIABLE_VALUE").size());
      bool has_any = false;
      for (int k = 1; k < expand_; ++k) has_any = has_any || outs_.count(StrCat(base, "parallel_component_", k));
      if (has_any) {
        report().notes.push_back(StrCat("\"", name, "\" already has parallel components; left as it is"));
        continue;
      }
      for (int k = 1; k < expand_; ++k) {
        PlannedTensor c = o;
        c.name = StrCat(base, "parallel_component_", k);
        c.origin = StrCat("copy of \"", name, "\"");
        added.push_back(std::move(c));
        ++report().expanded;
      }
      expanded_values_.insert(name);
    }
    for (auto& c : added) {
      std::string key = c.name;
      outs_.emplace(std::move(key), std::move(c));
    }
  }

  // The attributes of one graph node rewritten to the output's names (renames, collapsed
  // replicas, expanded components); attributes without a tensor removed.
  void RewriteAttributes(pb::TrackableObjectGraph::TrackableObject* node, const std::set<std::string>& names) {
    google::protobuf::RepeatedPtrField<pb::TrackableObjectGraph::TrackableObject::SerializedTensor> kept;
    for (const auto& a : node->attributes()) {
      const std::string& key = a.checkpoint_key();
      std::string new_key = rules_.Rename(key);
      if (auto r = replica_map_.find(new_key); r != replica_map_.end()) new_key = r->second.value_or("");
      if (new_key.empty() || !HoldsAttribute(names, new_key)) {
        ++report().graph_attributes_removed;
        continue;
      }
      auto* k = kept.Add();
      *k = a;
      if (new_key != key) {
        k->set_checkpoint_key(new_key);
        ++report().graph_attributes_renamed;
      }
      if (a.name() == "VARIABLE_VALUE" && expanded_values_.count(new_key)) {
        const std::string base = new_key.substr(0, new_key.size() - std::string("VARIABLE_VALUE").size());
        for (int c = 1; c < expand_; ++c) {
          auto* p = kept.Add();
          *p = a;
          p->set_name(StrCat("parallel_component_", c));
          p->set_checkpoint_key(StrCat(base, "parallel_component_", c));
        }
      }
    }
    node->mutable_attributes()->Swap(&kept);
  }

  // The object graph, rewritten to match the output.
  void AddGraph() {
    pb::TrackableObjectGraph g = *graphs_[*graph_input_];
    std::set<std::string> names;
    for (const auto& [name, o] : outs_) names.insert(name);
    std::vector<bool> emptied(g.nodes_size(), false);
    for (int i = 0; i < g.nodes_size(); ++i) {
      auto* node = g.mutable_nodes(i);
      const bool had = node->attributes_size() > 0;
      RewriteAttributes(node, names);
      emptied[i] = had && node->attributes_size() == 0;
    }
    for (int i = 0; i < g.nodes_size(); ++i) {
      auto* slots = g.mutable_nodes(i)->mutable_slot_variables();
      const int before = slots->size();
      auto gone = [&](int id) { return id >= 0 && id < g.nodes_size() && emptied[id]; };
      slots->erase(std::remove_if(slots->begin(), slots->end(),
                                  [&](const auto& s) {
                                    return gone(s.slot_variable_node_id()) || gone(s.original_variable_node_id());
                                  }),
                   slots->end());
      report().graph_slots_removed += before - slots->size();
    }
    PlannedTensor o;
    o.name = kObjectGraphKey;
    o.kind = Kind::kGraph;
    std::string serialized;
    g.SerializeToString(&serialized);
    EncodeStrings({std::string_view(serialized)}, &o.graph_payload);
    o.sources = {{*graph_input_, input(*graph_input_).Find(kObjectGraphKey)}};
    o.origin = StrCat("object graph of ", inputs_[*graph_input_]);
    outs_.emplace(o.name, std::move(o));
  }

  // Output data files: (input, data file) pairs in order of first use, like MergeV2.
  void AssignFiles() {
    std::map<std::pair<size_t, int32_t>, int32_t> file_ids;
    auto file_of = [&](size_t input, int32_t shard) {
      return file_ids.try_emplace({input, shard}, static_cast<int32_t>(file_ids.size())).first->second;
    };
    for (auto& [name, o] : outs_) {
      const CombineSource& src = o.sources.back();
      if (o.kind == Kind::kGraph) {
        o.files = {file_of(src.input, src.tensor->slices.front().data.shard)};
        continue;
      }
      for (const auto& s : src.tensor->slices) o.files.push_back(file_of(src.input, s.data.v1_file >= 0 ? 0 : s.data.shard));
    }
    report().num_files = static_cast<int32_t>(file_ids.size());
  }

  // Each output tensor's dtype, shape, size and first file; the plan's tensors and the
  // report's, by name.
  void Describe() {
    for (auto& [name, o] : outs_) {
      o.file = o.files.front();
      if (o.kind == Kind::kGraph) {
        o.dtype = static_cast<int32_t>(DType::kString);
        o.bytes = o.graph_payload.size();
      } else {
        const TensorEntry& t = *o.sources.back().tensor;
        o.dtype = t.dtype;
        o.shape = t.shape;
        o.bytes = t.bytes;
        if (o.kind == Kind::kCopy) {
          o.source_input = static_cast<int>(o.sources.back().input);
          o.source_name = t.name;
        }
        if (auto cast = options_.casts.find(o.dtype); cast != options_.casts.end() && o.kind == Kind::kCopy) {
          o.dtype = cast->second;
          o.bytes = static_cast<uint64_t>(NumElements(o.shape).value_or(0)) * LookupDType(o.dtype)->element_size;
        }
      }
      report().bytes += o.bytes;
      report().tensors.push_back(o);
      plan_.tensors.push_back(std::move(o));
    }
  }

  struct ComponentCheck {
    size_t input;
    const TensorEntry* component;
    const TensorEntry* value;
  };
  struct ReplicaCheck {
    const PlannedTensor* first;
    const PlannedTensor* other;
  };

  const std::vector<std::string>& inputs_;
  const CombineOptions& options_;
  const NameRules& rules_;
  const int expand_;
  CombinePlan plan_;
  std::vector<std::optional<pb::TrackableObjectGraph>> graphs_;
  std::optional<size_t> graph_input_;
  std::vector<ComponentCheck> component_checks_;
  std::map<std::string, std::vector<CombineSource>> by_name_;  // output name -> candidates
  std::map<std::string, PlannedTensor> outs_;                  // output name -> plan
  std::map<std::string, std::optional<std::string>> replica_map_;  // output name -> new name / dropped
  std::set<std::string> collapsed_bases_;  // NAME of every collapsed NAME/0..
  std::vector<ReplicaCheck> replica_checks_;
  std::set<std::string> expanded_values_;  // output names of VARIABLE_VALUE keys that got components
};

}  // namespace

absl::StatusOr<CombinePlan> PlanCombine(const std::vector<std::string>& inputs, const std::string& out,
                                        const CombineOptions& options) {
  if (inputs.empty()) return absl::InvalidArgumentError("merge needs at least one input");
  TFCKPT_ASSIGN_OR_RETURN(NameRules rules, NameRules::Create(options.include, options.exclude, options.renames));
  if (options.expand_parallel && *options.expand_parallel < 2) {
    return absl::InvalidArgumentError(
        StrCat("--expand-parallel N needs N >= 2 devices (got ", *options.expand_parallel, ")"));
  }
  if (options.expand_parallel && options.collapse_parallel != CombineOptions::Parallel::kKeep) {
    return absl::InvalidArgumentError("--expand-parallel and --collapse-parallel exclude each other");
  }
  return Planner(inputs, options, rules).Run(out);
}

// Whether every stored slice of `t` spans whole rows (a cut on axis 0 only, or whole) and
// is raw little-endian V2 bytes or a safetensors tensor's, of a fixed-size dtype: copies of
// its pieces read back as they are written are then proved by CRCs alone (verify.h).
bool RawRows(const Checkpoint& c, const TensorEntry& t) {
  const DTypeInfo* info = LookupDType(t.dtype);
  const Format f = c.info().format;
  if (info == nullptr || info->element_size == 0 || c.info().big_endian) return false;
  if (f != Format::kV2 && f != Format::kSafetensors) return false;
  for (const StoredSlice& s : t.slices) {
    if (s.region.rank() != t.shape.size() || !s.region.WholeRowsOf(t.shape)) return false;
  }
  return true;
}

namespace {

// The BundleWriter's options for `plan`: its data files, --force, the check before the
// commit, and (options.read_back) the tensors read back as they are written: averaged, or
// copied uncast and cut on axis 0 only.
BundleWriterOptions CombinedWriterOptions(const CombinePlan& plan, const CombineOptions& options) {
  BundleWriterOptions wo;
  wo.num_shards = plan.report.num_files;
  wo.overwrite = options.overwrite;
  if (options.before_commit) {
    wo.before_commit = [&plan, &options](const WrittenOutput& written) {
      return options.before_commit(written, plan.report);
    };
  }
  if (options.read_back) {
    std::set<std::string, std::less<>> names;
    for (const PlannedTensor& o : plan.tensors) {
      const CombineSource& src = o.sources.back();
      if (o.kind == Kind::kAverage ||
          (o.kind == Kind::kCopy && o.dtype == src.tensor->dtype && RawRows(*plan.inputs[src.input], *src.tensor))) {
        names.insert(o.name);
      }
    }
    wo.read_back = [names = std::move(names)](std::string_view name) { return names.count(name) > 0; };
  }
  return wo;
}

// Every piece of `plan` in its place: each output data file laid out, its pieces in plan
// order (the order one writer per file would append them in), one unit of work each.
struct CombinedLayout {
  struct Work {
    const PlannedTensor* o;
    size_t slice;
    int32_t file;
    uint64_t at;
  };
  std::vector<Work> work;
  std::vector<WorkUnit> units;
  std::vector<uint64_t> ends;  // each data file's size
};

absl::StatusOr<CombinedLayout> LayOutCombined(const CombinePlan& plan) {
  std::vector<std::vector<std::pair<const PlannedTensor*, size_t>>> per_file(plan.report.num_files);
  for (const PlannedTensor& o : plan.tensors) {
    for (size_t i = 0; i < o.files.size(); ++i) per_file[o.files[i]].push_back({&o, i});
  }
  CombinedLayout layout;
  layout.ends.assign(per_file.size(), 0);
  for (size_t f = 0; f < per_file.size(); ++f) {
    uint64_t& end = layout.ends[f];
    for (const auto& [o, i] : per_file[f]) {
      const CombineSource& src = o->sources.back();
      uint64_t bytes = o->graph_payload.size();
      if (o->kind != Kind::kGraph) {
        const Region& region = src.tensor->slices[i].region;
        const DTypeInfo* info = LookupDType(o->dtype);
        if (info != nullptr && info->element_size > 0) {
          bytes = static_cast<uint64_t>(region.num_elements() * info->element_size);
        } else {
          TFCKPT_ASSIGN_OR_RETURN(bytes, PieceSize(*plan.inputs[src.input], *src.tensor, region));
        }
      }
      layout.work.push_back({o, i, static_cast<int32_t>(f), end});
      layout.units.push_back({bytes, {static_cast<int32_t>(f)}});
      end += bytes;
    }
  }
  return layout;
}

// Pieces copied unchanged (no cast) may be copied inside the store: each data file is told
// which, before a byte of it is written (WritableFile::PlanCopies). A piece whose CRC is
// known (a whole stored piece: always, but for V1 inputs) and that the store copies (some
// of) is never read here where the store copies it (BundleWriter::AddCopiedAt). Returns
// each unit's copies.
absl::StatusOr<std::vector<RegionCopies>> PlanCombinedCopies(const CombinePlan& plan, const CombinedLayout& layout,
                                                             ServerSideCopy mode, BundleWriter& writer) {
  std::vector<RegionCopies> work_copies(layout.work.size());
  std::vector<std::vector<PlannedCopy>> copies(layout.ends.size());
  for (size_t k = 0; k < layout.work.size(); ++k) {
    const CombinedLayout::Work& w = layout.work[k];
    const CombineSource& src = w.o->sources.back();
    if (w.o->kind != Kind::kCopy || w.o->dtype != src.tensor->dtype) continue;
    TFCKPT_ASSIGN_OR_RETURN(work_copies[k], PlannedCopiesOf(*plan.inputs[src.input], *src.tensor,
                                                            src.tensor->slices[w.slice].region, w.at));
    std::vector<PlannedCopy>& to = copies[static_cast<size_t>(w.file)];
    to.insert(to.end(), work_copies[k].copies.begin(), work_copies[k].copies.end());
  }
  for (size_t f = 0; f < copies.size(); ++f) {
    TFCKPT_RETURN_IF_ERROR(writer.PlanCopies(static_cast<int32_t>(f), layout.ends[f], copies[f], mode).status());
  }
  return work_copies;
}

// Unit `u` of `layout` written: the object graph, an averaged piece, or a piece copied.
absl::Status WriteCombinedUnit(const CombinePlan& plan, const CombineOptions& options, const CombinedLayout& layout,
                               const std::vector<RegionCopies>& work_copies, size_t u, BundleWriter& writer,
                               std::atomic<uint64_t>* progress) {
  const CombinedLayout::Work& w = layout.work[u];
  const PlannedTensor& o = *w.o;
  const CombineSource& src = o.sources.back();
  if (o.kind == Kind::kGraph) {
    return writer.AddAt(o.name, static_cast<int32_t>(DType::kString), {}, std::nullopt, o.graph_payload, w.file,
                        w.at);
  }
  if (o.kind == Kind::kAverage) {
    Averager averager(plan.inputs, progress);
    return averager.Write(o, src.tensor->slices[w.slice].region, writer, w.file, w.at);
  }
  const StoredSlice& sl = src.tensor->slices[w.slice];
  // (Copies are planned only for pieces copied unchanged: no cast, so o.dtype is theirs.)
  PieceCopier copier(*plan.inputs[src.input], writer, progress, options.casts, /*verify_sources=*/true);
  return copier.WriteCopiedAt(*src.tensor, PlannedPiece{sl.region, w.file, sl.data.size, std::nullopt}, o.name, w.at,
                              layout.units[u].bytes, work_copies[u]);
}

}  // namespace

absl::Status WriteCombined(const CombinePlan& plan, const std::string& out, const CombineOptions& options) {
  if (!plan.report.mismatches.empty()) return absl::InternalError("bug: writing a combine plan whose checks failed");
  std::atomic<uint64_t>* progress = options.start_progress ? options.start_progress(plan.report.bytes) : nullptr;
  TFCKPT_ASSIGN_OR_RETURN(auto writer, BundleWriter::Create(Location::Of(out), CombinedWriterOptions(plan, options)));
  // Every piece's size is known before a byte is written: each output data file is laid
  // out first, then filled positionally by units of work on options.jobs threads, so the
  // output does not depend on their number.
  TFCKPT_ASSIGN_OR_RETURN(const CombinedLayout layout, LayOutCombined(plan));
  std::vector<RegionCopies> work_copies(layout.work.size());
  if (options.server_side != ServerSideCopy::kNever && IsUrl(out)) {
    TFCKPT_ASSIGN_OR_RETURN(work_copies, PlanCombinedCopies(plan, layout, options.server_side, *writer));
  }
  TFCKPT_RETURN_IF_ERROR(RunUnits(layout.units, options.jobs, [&](size_t u, const std::atomic<bool>&) {
    return WriteCombinedUnit(plan, options, layout, work_copies, u, *writer, progress);
  }));
  return writer->Finish();
}

absl::StatusOr<CombineReport> CombineCheckpoints(const std::vector<std::string>& inputs, const std::string& out,
                                                 const CombineOptions& options) {
  TFCKPT_ASSIGN_OR_RETURN(CombinePlan plan, PlanCombine(inputs, out, options));
  if (plan.report.mismatches.empty() && !options.dry_run) TFCKPT_RETURN_IF_ERROR(WriteCombined(plan, out, options));
  return std::move(plan.report);
}

std::vector<VerifySource> CombinedSources(const CombineReport& report,
                                          const std::vector<std::unique_ptr<Checkpoint>>& inputs) {
  std::vector<VerifySource> sources;
  for (const auto& c : inputs) sources.push_back({c.get(), std::map<std::string, std::string>()});
  for (const CombinedTensor& t : report.tensors) {
    if (t.source_input >= 0) sources[static_cast<size_t>(t.source_input)].names->emplace(t.name, t.source_name);
  }
  return sources;
}

}  // namespace tfckpt
