// Combining checkpoints with edits (see combine.h). Plan first (names, conflicts,
// collapses, checks, object graph, output files), then write each output data file on
// its own thread through PieceCopier (unchanged pieces) or the averaging loop.
#include "tfckpt/combine.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "tfckpt/bundle_writer.h"
#include "tfckpt/copy.h"
#include "tfckpt/dtype.h"
#include "tfckpt/float_convert.h"
#include "tfckpt/object_graph.h"
#include "tfckpt/parallel.h"
#include "tfckpt/status.h"
#include "tfckpt/tensor_encoding.h"
#include "tfckpt/validate.h"
#include "tfckpt/values.h"

namespace tfckpt {


namespace {

constexpr int64_t kAverageChunk = 1 << 18;  // elements per step when averaging

struct Candidate {
  size_t input = 0;
  const TensorEntry* t = nullptr;
};

enum class Kind { kCopy, kAverage, kGraph };

struct Out {
  std::string name;
  Kind kind = Kind::kCopy;
  std::vector<Candidate> sources;  // copy: one; average: one per input, in input order
  std::string origin;
  std::string graph_payload;       // kGraph
  Candidate graph_source;          // kGraph: where the graph came from (for its file)
  std::vector<int32_t> files;      // per stored slice of sources.back().t (kGraph: one)
};

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

const StoredSlice* SliceWithRegion(const TensorEntry& t, const Region& r) {
  for (const auto& s : t.slices) {
    if (s.region == r) return &s;
  }
  return nullptr;
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

// Element-wise mean of one stored region over every input, streamed into `stream`.
class Averager {
 public:
  Averager(const std::vector<const Checkpoint*>& cs, std::atomic<uint64_t>* progress)
      : cs_(cs), progress_(progress) {}

  absl::Status Write(const Out& o, const Region& region, BundleWriter& w, int32_t file) {
    const TensorEntry& last = *o.sources.back().t;
    const int32_t dtype = last.dtype;
    const int esize = LookupDType(dtype)->element_size;
    const bool whole = region.Covers(last.shape);
    TFCKPT_ASSIGN_OR_RETURN(auto stream, w.BeginEntry(o.name, dtype, last.shape,
                                                      whole ? std::nullopt : std::optional<Region>(region), file));
    std::vector<const StoredSlice*> slices;
    for (const Candidate& c : o.sources) {
      const StoredSlice* s = SliceWithRegion(*c.t, region);
      if (s == nullptr) return absl::InternalError(StrCat("bug: no slice to average for \"", o.name, "\""));
      TFCKPT_RETURN_IF_ERROR(cs_[c.input]->VerifyCrc(*c.t, *s, &buf_));
      slices.push_back(s);
    }
    const int64_t n = region.num_elements();
    const double inv = 1.0 / static_cast<double>(o.sources.size());
    std::vector<TensorBytes> owners(o.sources.size());
    for (int64_t at = 0; at < n; at += kAverageChunk) {
      const int64_t m = std::min(kAverageChunk, n - at);
      acc_.assign(static_cast<size_t>(m), 0.0);
      for (size_t j = 0; j < o.sources.size(); ++j) {
        TFCKPT_ASSIGN_OR_RETURN(std::string_view src,
                                cs_[o.sources[j].input]->ReadRange(*o.sources[j].t, *slices[j], at * esize,
                                                                   (at + m) * esize, &buf_, &owners[j]));
        Accumulate(dtype, src.data(), m);
      }
      out_.resize(static_cast<size_t>(m * esize));
      Finish(dtype, inv, m);
      TFCKPT_RETURN_IF_ERROR(stream.Append(out_));
      if (progress_) *progress_ += out_.size();
    }
    return stream.Close();
  }

 private:
  template <typename T, typename Widen>
  static void AddEach(const char* p, int64_t m, double* a, Widen widen) {
    for (int64_t i = 0; i < m; ++i) {
      T v;
      std::memcpy(&v, p + sizeof(T) * i, sizeof(T));
      a[i] += static_cast<double>(widen(v));
    }
  }

  template <typename T, typename Narrow>
  static void StoreEach(const double* a, double scale, int64_t m, char* o, Narrow narrow) {
    for (int64_t i = 0; i < m; ++i) {
      const T v = narrow(a[i] * scale);
      std::memcpy(o + sizeof(T) * i, &v, sizeof(T));
    }
  }

  void Accumulate(int32_t dtype, const char* p, int64_t m) {
    double* a = acc_.data();
    switch (static_cast<DType>(dtype)) {
      case DType::kFloat: return AddEach<float>(p, m, a, [](float v) { return v; });
      case DType::kDouble: return AddEach<double>(p, m, a, [](double v) { return v; });
      case DType::kHalf: return AddEach<uint16_t>(p, m, a, HalfToFloat);
      default: return AddEach<uint16_t>(p, m, a, BFloat16ToFloat);  // bfloat16 (Averageable)
    }
  }

  void Finish(int32_t dtype, double inv, int64_t m) {
    char* o = out_.data();
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

  const std::vector<const Checkpoint*>& cs_;
  std::atomic<uint64_t>* progress_;
  std::vector<double> acc_;
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

}  // namespace

absl::StatusOr<CombineReport> CombineCheckpoints(const std::vector<std::string>& inputs, const std::string& out,
                                                 const CombineOptions& options) {
  CombineReport report;
  if (inputs.empty()) return absl::InvalidArgumentError("merge needs at least one input");
  TFCKPT_ASSIGN_OR_RETURN(NameRules rules, NameRules::Create(options.include, options.exclude, options.renames));
  if (options.expand_parallel && *options.expand_parallel < 2) {
    return absl::InvalidArgumentError(
        StrCat("--expand-parallel N needs N >= 2 devices (got ", *options.expand_parallel, ")"));
  }
  const int expand = options.expand_parallel.value_or(0);
  if (expand > 1 && options.collapse_parallel != CombineOptions::Parallel::kKeep) {
    return absl::InvalidArgumentError("--expand-parallel and --collapse-parallel exclude each other");
  }

  // Open every input; refuse an output that is one of them.
  std::vector<std::unique_ptr<Checkpoint>> owned;
  std::vector<const Checkpoint*> cs;
  for (const auto& in : inputs) {
    TFCKPT_ASSIGN_OR_RETURN(auto c, Checkpoint::Open(in));
    const CheckpointInfo& info = c->info();
    TFCKPT_RETURN_IF_ERROR(Storage::For(out).CheckNotInputs(BundleFilesAt(out, 0), FilesOf(info)));
    report.inputs.push_back(info.prefix);
    cs.push_back(c.get());
    owned.push_back(std::move(c));
  }
  if (!options.dry_run && !options.overwrite && FileExists(out + ".index")) {
    return absl::AlreadyExistsError(StrCat(out, ".index: output exists (use --force to replace it)"));
  }
  const size_t n = cs.size();

  // The object graph each input has, and the one the output keeps.
  std::vector<std::optional<pb::TrackableObjectGraph>> graphs(n);
  std::optional<size_t> graph_input;
  for (size_t j = 0; j < n; ++j) {
    TFCKPT_ASSIGN_OR_RETURN(graphs[j], LoadObjectGraph(*cs[j]));
    if (graphs[j] && (!graph_input || options.on_conflict == CombineOptions::Conflict::kLast)) graph_input = j;
  }
  if (graph_input && rules.Excluded(kObjectGraphKey)) {
    report.notes.push_back("the object graph is excluded (--exclude matches _CHECKPOINTABLE_OBJECT_GRAPH)");
    graph_input.reset();
  }

  // Names: filters, optimizer state, parallel components, renames.
  struct ComponentCheck {
    size_t input;
    const TensorEntry* component;
    const TensorEntry* value;
  };
  std::vector<ComponentCheck> component_checks;
  std::map<std::string, std::vector<Candidate>> by_name;  // output name -> candidates
  for (size_t j = 0; j < n; ++j) {
    const std::vector<std::string> opt_paths = graphs[j] ? OptimizerPaths(*graphs[j]) : std::vector<std::string>{};
    std::vector<const TensorEntry*> kept;  // what the filters leave, by name
    for (const TensorEntry& t : cs[j]->tensors()) {
      if (t.name == kObjectGraphKey) continue;
      if (!rules.Selected(t.name)) {
        ++report.dropped_filtered;
        report.bytes_dropped_filtered += t.bytes;
        continue;
      }
      if (options.drop_optimizer && IsOptimizerState(t.name, opt_paths)) {
        ++report.dropped_optimizer;
        report.bytes_dropped_optimizer += t.bytes;
        continue;
      }
      // A tensor whose entries are inconsistent cannot be copied (its pieces may point
      // nowhere); dropped ones above do not matter.
      if (!t.defect.empty()) {
        const CheckpointInfo& info = cs[j]->info();
        return DataLossAt(t.defect_check, info.format == Format::kV2 ? info.index_path : info.prefix, t.name, -1,
                          StrCat(t.defect, " (run tfckpt validate)"));
      }
      kept.push_back(&t);
    }
    const auto components = options.collapse_parallel != CombineOptions::Parallel::kKeep
                                ? ParallelComponents(kept, inputs[j], &report.notes)
                                : std::map<const TensorEntry*, const TensorEntry*>{};
    for (const TensorEntry* tp : kept) {
      const TensorEntry& t = *tp;
      if (auto v = components.find(&t); v != components.end()) {
        if (options.collapse_parallel == CombineOptions::Parallel::kCheck) component_checks.push_back({j, &t, v->second});
        ++report.collapsed;
        report.bytes_collapsed += t.bytes;
        continue;
      }
      by_name[rules.Rename(t.name)].push_back({j, &t});
    }
  }

  // Conflicts and averaging.
  std::map<std::string, Out> outs;
  for (auto& [name, cands] : by_name) {
    for (size_t a = 0; a < cands.size(); ++a) {
      for (size_t b = a + 1; b < cands.size(); ++b) {
        if (cands[a].input == cands[b].input || cands[a].t->name != cands[b].t->name) {
          return absl::InvalidArgumentError(StrCat("--rename makes \"", cands[a].t->name, "\" (", inputs[cands[a].input],
                                                   ") and \"", cands[b].t->name, "\" (", inputs[cands[b].input],
                                                   ") both \"", name, "\""));
        }
      }
    }
    Out o;
    o.name = name;
    if (cands.size() > 1 && options.average) {
      const TensorEntry& t0 = *cands.front().t;
      std::string why;
      if (cands.size() != n) {
        why = StrCat("in ", cands.size(), " of ", n, " inputs");
      } else if (!Averageable(t0.dtype)) {
        why = "";  // not a float tensor: silently from the last input
      } else {
        for (const Candidate& c : cands) {
          if (c.t->dtype != t0.dtype || c.t->shape != t0.shape) why = "dtype or shape differs between inputs";
          else if (SortedRegions(*c.t) != SortedRegions(t0)) why = "stored with different slicing in the inputs";
          if (!why.empty()) break;
        }
        if (why.empty()) {
          o.kind = Kind::kAverage;
          o.sources = cands;
          o.origin = StrCat("mean of ", n, " inputs");
          ++report.averaged;
          outs.emplace(name, std::move(o));
          continue;
        }
      }
      if (!why.empty()) report.notes.push_back(StrCat("\"", name, "\" not averaged (", why, "); taken from the last input"));
      o.sources = {cands.back()};
    } else if (cands.size() > 1) {
      switch (options.on_conflict) {
        case CombineOptions::Conflict::kError:
          return absl::InvalidArgumentError(StrCat("tensor \"", name, "\" is in both ", inputs[cands[0].input], " and ",
                                                   inputs[cands[1].input], " (--on-conflict first|last chooses)"));
        case CombineOptions::Conflict::kFirst:
          o.sources = {cands.front()};
          break;
        case CombineOptions::Conflict::kLast:
          o.sources = {cands.back()};
          break;
      }
    } else {
      o.sources = cands;
    }
    const Candidate& src = o.sources.front();
    o.origin = src.t->name == name ? inputs[src.input] : StrCat(inputs[src.input], " \"", src.t->name, "\"");
    outs.emplace(name, std::move(o));
  }

  // TPU replicas NAME/0 .. NAME/K-1 -> NAME.
  std::map<std::string, std::optional<std::string>> replica_map;  // output name -> new name / dropped
  struct ReplicaCheck {
    std::string name;
    const Out* first;
    const Out* other;
  };
  std::vector<ReplicaCheck> replica_checks;
  if (options.collapse_replicas) {
    static const Regex replica_re = Regex::Fixed(R"((.*)/(0|[1-9]\d{0,8}))");
    std::map<std::string, std::map<int64_t, std::string>> groups;
    for (const auto& [name, o] : outs) {
      std::vector<std::string> m;
      if (replica_re.FullMatch(name, &m)) groups[m[0]][std::stoll(m[1])] = name;
    }
    for (const auto& [base, members] : groups) {
      std::string why;
      if (members.size() < 2) why = StrCat("only \"", members.begin()->second, "\" (K >= 2 replicas needed)");
      else if (members.rbegin()->first != static_cast<int64_t>(members.size()) - 1) why = "indices are not consecutive from 0";
      if (why.empty() && outs.count(base)) why = StrCat("\"", base, "\" exists too");
      const Out& first = outs.at(members.begin()->second);
      for (const auto& [i, name] : members) {
        const Out& o = outs.at(name);
        if (!why.empty()) break;
        if (o.kind != Kind::kCopy || first.kind != Kind::kCopy) why = "averaged";
        else if (o.sources[0].t->dtype != first.sources[0].t->dtype || o.sources[0].t->shape != first.sources[0].t->shape)
          why = "dtype or shape differs";
      }
      if (!why.empty()) {
        report.notes.push_back(StrCat("replicas of \"", base, "\" not collapsed: ", why));
        continue;
      }
      for (const auto& [i, name] : members) {
        replica_map[name] = i == 0 ? std::optional<std::string>(base) : std::nullopt;
        if (i > 0) {
          if (options.check_replicas) replica_checks.push_back({name, &first, &outs.at(name)});
          ++report.collapsed;
          report.bytes_collapsed += outs.at(name).sources[0].t->bytes;
        }
      }
    }
  }

  // Equality checks before anything is written.
  for (const auto& k : component_checks) {
    TFCKPT_ASSIGN_OR_RETURN(std::string diff, Difference(*cs[k.input], *k.value, *cs[k.input], *k.component));
    if (!diff.empty()) {
      report.mismatches.push_back(Finding{"merge.parallel-differs", Severity::kError, report.inputs[k.input], k.component->name, -1,
                                          StrCat("differs from component 0 \"", k.value->name, "\": ", diff)});
    }
  }
  for (const auto& k : replica_checks) {
    const Candidate& a = k.first->sources[0];
    const Candidate& b = k.other->sources[0];
    TFCKPT_ASSIGN_OR_RETURN(std::string diff, Difference(*cs[a.input], *a.t, *cs[b.input], *b.t));
    if (!diff.empty()) {
      report.mismatches.push_back(Finding{"merge.replica-differs", Severity::kError, report.inputs[b.input], b.t->name, -1,
                                          StrCat("differs from replica 0 \"", a.t->name, "\": ", diff)});
    }
  }
  if (!report.mismatches.empty()) return report;
  for (const auto& [from, to] : replica_map) {
    auto node = outs.extract(from);
    if (to) {
      node.key() = *to;
      node.mapped().name = *to;
      node.mapped().origin += StrCat(" (", from, " of ", "its replicas)");
      outs.insert(std::move(node));
    }
  }

  // Parallel components from component 0.
  std::set<std::string> expanded_values;  // output names of VARIABLE_VALUE keys that got components
  if (expand > 1) {
    static const std::string kValue = "/.ATTRIBUTES/VARIABLE_VALUE";
    std::vector<Out> added;
    for (const auto& [name, o] : outs) {
      if (name.size() < kValue.size() || name.compare(name.size() - kValue.size(), kValue.size(), kValue) != 0) continue;
      const std::string base = name.substr(0, name.size() - std::string("VARIABLE_VALUE").size());
      bool has_any = false;
      for (int k = 1; k < expand; ++k) has_any = has_any || outs.count(StrCat(base, "parallel_component_", k));
      if (has_any) {
        report.notes.push_back(StrCat("\"", name, "\" already has parallel components; left as it is"));
        continue;
      }
      for (int k = 1; k < expand; ++k) {
        Out c = o;
        c.name = StrCat(base, "parallel_component_", k);
        c.origin = StrCat("copy of \"", name, "\"");
        added.push_back(std::move(c));
        ++report.expanded;
      }
      expanded_values.insert(name);
    }
    for (auto& c : added) {
      std::string key = c.name;
      outs.emplace(std::move(key), std::move(c));
    }
  }

  if (outs.empty()) return absl::InvalidArgumentError("nothing to write: every tensor was filtered out");

  // The object graph, rewritten to match the output.
  if (graph_input) {
    pb::TrackableObjectGraph g = *graphs[*graph_input];
    std::set<std::string> names;
    for (const auto& [name, o] : outs) names.insert(name);
    std::vector<bool> emptied(g.nodes_size(), false);
    for (int i = 0; i < g.nodes_size(); ++i) {
      auto* node = g.mutable_nodes(i);
      const bool had = node->attributes_size() > 0;
      google::protobuf::RepeatedPtrField<pb::TrackableObjectGraph::TrackableObject::SerializedTensor> kept;
      for (const auto& a : node->attributes()) {
        const std::string& key = a.checkpoint_key();
        std::string new_key = rules.Rename(key);
        if (auto r = replica_map.find(new_key); r != replica_map.end()) new_key = r->second.value_or("");
        if (new_key.empty() || !HoldsAttribute(names, new_key)) {
          ++report.graph_attributes_removed;
          continue;
        }
        auto* k = kept.Add();
        *k = a;
        if (new_key != key) {
          k->set_checkpoint_key(new_key);
          ++report.graph_attributes_renamed;
        }
        if (a.name() == "VARIABLE_VALUE" && expanded_values.count(new_key)) {
          const std::string base = new_key.substr(0, new_key.size() - std::string("VARIABLE_VALUE").size());
          for (int c = 1; c < expand; ++c) {
            auto* p = kept.Add();
            *p = a;
            p->set_name(StrCat("parallel_component_", c));
            p->set_checkpoint_key(StrCat(base, "parallel_component_", c));
          }
        }
      }
      node->mutable_attributes()->Swap(&kept);
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
      report.graph_slots_removed += before - slots->size();
    }
    Out o;
    o.name = kObjectGraphKey;
    o.kind = Kind::kGraph;
    std::string serialized;
    g.SerializeToString(&serialized);
    EncodeStrings({std::string_view(serialized)}, &o.graph_payload);
    o.graph_source = {graph_input.value(), cs[graph_input.value()]->Find(kObjectGraphKey)};
    o.origin = StrCat("object graph of ", inputs[*graph_input]);
    outs.emplace(o.name, std::move(o));
  }
  // Output data files: (input, data file) pairs in order of first use, like MergeV2.
  std::map<std::pair<size_t, int32_t>, int32_t> file_ids;
  auto file_of = [&](size_t input, int32_t shard) {
    return file_ids.try_emplace({input, shard}, static_cast<int32_t>(file_ids.size())).first->second;
  };
  for (auto& [name, o] : outs) {
    if (o.kind == Kind::kGraph) {
      o.files = {file_of(o.graph_source.input, o.graph_source.t->slices.front().data.shard)};
      continue;
    }
    const Candidate& src = o.sources.back();
    for (const auto& s : src.t->slices) o.files.push_back(file_of(src.input, s.data.v1_file >= 0 ? 0 : s.data.shard));
  }
  report.num_files = static_cast<int32_t>(file_ids.size());
  for (const auto& [name, o] : outs) {
    CombinedTensor ct;
    ct.name = name;
    ct.origin = o.origin;
    ct.file = o.files.front();
    if (o.kind == Kind::kGraph) {
      ct.dtype = static_cast<int32_t>(DType::kString);
      ct.bytes = o.graph_payload.size();
    } else {
      ct.dtype = o.sources.back().t->dtype;
      ct.shape = o.sources.back().t->shape;
      ct.bytes = o.sources.back().t->bytes;
      if (auto cast = options.casts.find(ct.dtype); cast != options.casts.end() && o.kind == Kind::kCopy) {
        ct.dtype = cast->second;
        ct.bytes = static_cast<uint64_t>(NumElements(ct.shape).value_or(0)) * LookupDType(ct.dtype)->element_size;
      }
    }
    report.bytes += ct.bytes;
    report.tensors.push_back(std::move(ct));
  }
  if (options.dry_run) return report;

  // Write: one thread per output data file.
  std::atomic<uint64_t>* progress = options.start_progress ? options.start_progress(report.bytes) : nullptr;
  BundleWriterOptions wo;
  wo.num_shards = report.num_files;
  wo.overwrite = options.overwrite;
  TFCKPT_ASSIGN_OR_RETURN(auto writer, BundleWriter::Create(out, wo));
  struct Work {
    const Out* o;
    size_t slice;
  };
  std::vector<std::vector<Work>> per_file(report.num_files);
  for (const auto& [name, o] : outs) {
    for (size_t i = 0; i < o.files.size(); ++i) per_file[o.files[i]].push_back({&o, i});
  }
  TFCKPT_RETURN_IF_ERROR(ParallelForStatus(per_file.size(), Jobs(options.jobs), [&](size_t f, const std::atomic<bool>& stop) {
    std::map<size_t, std::unique_ptr<PieceCopier>> copiers;  // per input, keeping their buffers
    Averager averager(cs, progress);
    const int32_t file = static_cast<int32_t>(f);
    for (const Work& w : per_file[f]) {
      if (stop) return absl::OkStatus();
      const Out& o = *w.o;
      if (o.kind == Kind::kGraph) {
        TFCKPT_RETURN_IF_ERROR(writer->Add(o.name, static_cast<int32_t>(DType::kString), {}, o.graph_payload, file));
      } else if (o.kind == Kind::kAverage) {
        TFCKPT_RETURN_IF_ERROR(averager.Write(o, o.sources.back().t->slices[w.slice].region, *writer, file));
      } else {
        const Candidate& src = o.sources.back();
        const StoredSlice& sl = src.t->slices[w.slice];
        auto& copier = copiers[src.input];
        if (!copier) copier = std::make_unique<PieceCopier>(*cs[src.input], *writer, progress, options.casts,
                                                       /*verify_sources=*/true);
        TFCKPT_RETURN_IF_ERROR(
            copier->Write(*src.t, PlannedPiece{sl.region, file, sl.data.size, std::nullopt}, o.name));
      }
    }
    return absl::OkStatus();
  }));
  TFCKPT_RETURN_IF_ERROR(writer->Finish());
  return report;
}

}  // namespace tfckpt
