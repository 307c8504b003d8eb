#include "reshard/partition.h"
#include "base/regex.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tfckpt/commands.h"
#include "tfckpt/status.h"

namespace tfckpt {

std::vector<std::pair<int64_t, int64_t>> SplitAxis(int64_t dim, int64_t parts) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t base = dim / parts, extra = dim % parts;
  int64_t at = 0;
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t n = base + (i < extra ? 1 : 0);
    out.emplace_back(at, n);
    at += n;
  }
  return out;
}

std::vector<Region> CutAlongAxis(const Shape& shape, int axis, int64_t parts) {
  std::vector<Region> out;
  for (auto [start, len] : SplitAxis(shape[axis], parts)) {
    Region r = Region::Full(shape);
    r.start[axis] = start;
    r.shape[axis] = len;
    out.push_back(std::move(r));
  }
  return out;
}

// partitioned_variables.fixed_size_partitioner: partitions_list[axis] = min(num_shards,
// shape[axis]), 0 for an empty axis (which _get_partitioned_variable then refuses).
int64_t FixedShardsParts(const Shape& shape, int axis, int64_t n) { return std::min(n, shape[axis]); }

int64_t MinSizeParts(const Shape& shape, int axis, int64_t esize, int64_t min_slice_bytes, int64_t max_shards) {
  const int64_t elements = *NumElements(shape);
  const double partitions = static_cast<double>(elements) * static_cast<double>(esize) / static_cast<double>(min_slice_bytes);
  const int64_t want = static_cast<int64_t>(std::ceil(partitions));
  return std::max<int64_t>(1, std::min({shape[axis], max_shards, want}));
}

int64_t MaxSizeParts(const Shape& shape, int axis, int64_t esize, int64_t max_shard_bytes, int64_t max_shards) {
  const int64_t elements = *NumElements(shape);
  const double bytes_per_slice = static_cast<double>(elements) / static_cast<double>(shape[axis]) * static_cast<double>(esize);
  const double slices_per_shard = std::max(1.0, std::floor(static_cast<double>(max_shard_bytes) / bytes_per_slice));
  int64_t parts = static_cast<int64_t>(std::ceil(static_cast<double>(shape[axis]) / slices_per_shard));
  if (max_shards > 0) parts = std::min(parts, max_shards);
  return std::max<int64_t>(1, parts);
}

std::string MeshString(const std::vector<std::pair<std::string, int64_t>>& mesh) {
  std::string out;
  for (const auto& [name, size] : mesh) StrAppend(&out, out.empty() ? "" : ",", name, "=", size);
  return out;
}

int64_t SavingDevice(const Layout& layout, const Shape& shape, const Region& piece) {
  int64_t device = 0;
  for (const auto& [name, size] : layout.mesh) {
    int64_t coord = 0;
    for (size_t axis = 0; axis < layout.specs.size(); ++axis) {
      if (layout.specs[axis] != name) continue;
      const int64_t per_slice = shape[axis] / size;
      coord = per_slice > 0 ? piece.start[axis] / per_slice : 0;
    }
    device = device * size + coord;
  }
  return device;
}

namespace {

// DTensor's Mesh::GetAbstractMesh: a mesh dimension is named once, and not by a name a
// sharding spec reserves.
absl::Status CheckMeshDimensionName(const std::vector<std::pair<std::string, int64_t>>& mesh, std::string_view name) {
  if (std::any_of(mesh.begin(), mesh.end(), [&](const auto& m) { return m.first == name; })) {
    return absl::InvalidArgumentError(
        StrCat("repeated mesh dimension \"", name, "\" (each mesh dimension is named once)"));
  }
  for (const char* reserved : {"unsharded", "any", "match"}) {
    if (name == reserved) return absl::InvalidArgumentError(StrCat("mesh dimension name \"", name, "\" is reserved"));
  }
  return absl::OkStatus();
}

// DTensor's Layout::GetLayout: every sharding spec names a mesh dimension (or is
// unsharded), and no mesh dimension shards two tensor axes.
absl::Status CheckShardingSpecs(const Layout& l) {
  for (size_t axis = 0; axis < l.specs.size(); ++axis) {
    const std::string& s = l.specs[axis];
    if (s.empty()) continue;
    if (std::none_of(l.mesh.begin(), l.mesh.end(), [&](const auto& m) { return m.first == s; })) {
      return absl::InvalidArgumentError(StrCat("sharding spec \"", s, "\" of axis ", axis,
                                               " is not a mesh dimension (mesh: ", MeshString(l.mesh), ")"));
    }
    for (size_t earlier = 0; earlier < axis; ++earlier) {
      if (l.specs[earlier] == s) {
        return absl::InvalidArgumentError(StrCat("axes ", earlier, " and ", axis,
                                                 " are both sharded over mesh dimension \"", s,
                                                 "\" (a mesh dimension shards at most one tensor axis)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Layout> ParseLayout(std::string_view text) {
  Layout l;
  std::string_view specs, mesh;
  if (text.rfind("sharding_specs:", 0) == 0) {
    // TF's form: "sharding_specs:x,unsharded, mesh:|x=2,y=4|0,1,...|...|/job:...".
    const size_t m = text.find("mesh:");
    if (m == std::string_view::npos) return absl::InvalidArgumentError("layout has no mesh:");
    specs = text.substr(15, m - 15);
    std::string_view rest = text.substr(m + 5);
    std::vector<absl::string_view> parts = absl::StrSplit(AV(rest), '|');
    if (parts.size() < 2) return absl::InvalidArgumentError("mesh: wants |dim=size,...|");
    mesh = SV(parts[1]);
  } else {
    const size_t at = text.rfind('@');
    if (at == std::string_view::npos) return absl::InvalidArgumentError("layout wants SPECS@MESH, e.g. x,unsharded@x=2,y=4");
    specs = text.substr(0, at);
    mesh = text.substr(at + 1);
  }
  for (absl::string_view s : absl::StrSplit(AV(specs), ',', absl::SkipWhitespace())) {
    std::string item(absl::StripAsciiWhitespace(s));
    l.specs.push_back(item == "unsharded" ? "" : item);
  }
  for (absl::string_view d : absl::StrSplit(AV(mesh), ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv = absl::StrSplit(absl::StripAsciiWhitespace(d), '=');
    int64_t size;
    if (kv.size() != 2 || kv[0].empty() || !absl::SimpleAtoi(kv[1], &size) || size < 1) {
      return absl::InvalidArgumentError(StrCat("bad mesh dimension \"", SV(d), "\" (want NAME=SIZE)"));
    }
    TFCKPT_RETURN_IF_ERROR(CheckMeshDimensionName(l.mesh, SV(kv[0])));
    l.mesh.emplace_back(std::string(kv[0]), size);
  }
  if (l.mesh.empty()) return absl::InvalidArgumentError("layout has an empty mesh");
  TFCKPT_RETURN_IF_ERROR(CheckShardingSpecs(l));
  return l;
}

absl::StatusOr<std::vector<Region>> LayoutRegions(const Shape& shape, const Layout& layout) {
  if (layout.specs.size() != shape.size()) {
    return absl::InvalidArgumentError(StrCat("layout has ", layout.specs.size(), " axes, tensor ",
                                             ShapeString(shape), " has ", shape.size()));
  }
  std::vector<Region> out = {Region::Full(shape)};
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (layout.specs[axis].empty()) continue;
    int64_t k = 1;
    for (const auto& [name, size] : layout.mesh) {
      if (name == layout.specs[axis]) k = size;
    }
    if (shape[axis] % k != 0) {
      return absl::InvalidArgumentError(StrCat("axis ", axis, " of size ", shape[axis], " cannot be cut into ", k,
                                               " equal parts (mesh dimension ", layout.specs[axis], ")"));
    }
    std::vector<Region> next;
    for (const Region& r : out) {
      for (int64_t i = 0; i < k; ++i) {
        Region c = r;
        c.shape[axis] = shape[axis] / k;
        c.start[axis] = i * c.shape[axis];
        next.push_back(std::move(c));
      }
    }
    out = std::move(next);
  }
  return out;
}

SliceExtents LayoutExtents(const Region& region, const Layout& layout) {
  SliceExtents e{region.start, region.shape};
  for (size_t axis = 0; axis < layout.specs.size(); ++axis) {
    if (layout.specs[axis].empty()) e.lengths[axis] = -1;  // starts[axis] is 0: the axis is whole
  }
  return e;
}

const std::vector<std::string>& PartitionSpecWords() {
  static const auto* words = new std::vector<std::string>{"fixed:",  "min-size", "min-size:",      "max-size:",
                                                          "none",    "layout:",  "sharding_specs:"};
  return *words;
}

namespace {

// "N" or "N@AXIS" -> (N, axis). AXIS may be negative, counted from the last axis as
// Python indexes TF's partitions list.
bool ParseCountAxis(std::string_view s, int64_t* n, int* axis) {
  *axis = 0;
  const size_t at = s.find('@');
  if (at != std::string_view::npos) {
    if (!absl::SimpleAtoi(AV(s.substr(at + 1)), axis)) return false;
    s = s.substr(0, at);
  }
  return absl::SimpleAtoi(AV(s), n);
}

// Whether `spec` starts like one of the kinds of spec (so its errors are about that kind).
bool NamesSpecKind(std::string_view spec) {
  for (std::string_view word : PartitionSpecWords()) {
    if (word == "none") continue;
    if (word.back() == ':') word.remove_suffix(1);  // ("max-size" alone is about max-size too)
    if (spec.rfind(word, 0) == 0) return true;
  }
  return false;
}

absl::StatusOr<PartitionRule> ParseSpec(std::string_view spec) {
  PartitionRule r;
  if (spec == "none") {
    r.kind = PartitionRule::Kind::kNone;
    return r;
  }
  if (spec.rfind("fixed:", 0) == 0) {
    r.kind = PartitionRule::Kind::kFixed;
    if (!ParseCountAxis(spec.substr(6), &r.n, &r.axis) || r.n < 1) {
      return absl::InvalidArgumentError(
          "fixed wants N[@AXIS] with N >= 1 (TensorFlow refuses 0: \"Partitioner returned zero partitions for some "
          "axes\")");
    }
    return r;
  }
  for (auto [prefix, kind] :
       {std::pair{"min-size", PartitionRule::Kind::kMinSize}, std::pair{"max-size", PartitionRule::Kind::kMaxSize}}) {
    const std::string_view p(prefix);
    if (spec.rfind(p, 0) != 0) continue;
    const bool min_size = kind == PartitionRule::Kind::kMinSize;
    r.kind = kind;
    std::string_view rest = spec.substr(p.size());
    const size_t at = rest.find('@');
    if (at != std::string_view::npos) {
      if (!absl::SimpleAtoi(AV(rest.substr(at + 1)), &r.axis)) {
        return absl::InvalidArgumentError(StrCat(prefix, " has a bad @AXIS"));
      }
      rest = rest.substr(0, at);
    }
    // TF's defaults: min_max_variable_partitioner(max_partitions=1, min_slice_size=256 << 10);
    // variable_axis_size_partitioner(max_shard_bytes, max_shards=None), where a falsy
    // max_shards (None or 0) means no limit.
    r.n = 256 << 10;
    r.max_shards = min_size ? 1 : 0;
    if (rest.empty() && min_size) return r;
    std::vector<absl::string_view> parts = absl::StrSplit(AV(rest.substr(rest.empty() ? 0 : 1)), ',');
    const int64_t least_shards = min_size ? 1 : 0;
    const std::optional<uint64_t> bytes = rest.empty() ? std::nullopt : ParseByteSize(std::string_view(parts[0].data(), parts[0].size()));
    if (bytes && *bytes <= static_cast<uint64_t>(INT64_MAX)) r.n = static_cast<int64_t>(*bytes);
    if (rest.empty() || rest[0] != ':' || parts.size() > 2 || !bytes || *bytes > static_cast<uint64_t>(INT64_MAX) ||
        r.n < 1 ||
        (parts.size() == 2 && (!absl::SimpleAtoi(parts[1], &r.max_shards) || r.max_shards < least_shards))) {
      return absl::InvalidArgumentError(min_size
                                            ? "min-size wants [:BYTES[,MAX_SHARDS]][@AXIS] (BYTES, MAX_SHARDS >= 1)"
                                            : "max-size wants :BYTES[,MAX_SHARDS][@AXIS] (BYTES >= 1; "
                                              "MAX_SHARDS 0 = no limit)");
    }
    return r;
  }
  if (spec.rfind("layout:", 0) == 0 || spec.rfind("sharding_specs:", 0) == 0) {
    r.kind = PartitionRule::Kind::kLayout;
    TFCKPT_ASSIGN_OR_RETURN(r.layout, ParseLayout(spec.rfind("layout:", 0) == 0 ? spec.substr(7) : spec));
    return r;
  }
  return absl::InvalidArgumentError(
      "unknown partition spec (fixed:, min-size:, max-size:, none, layout:, sharding_specs:)");
}

}  // namespace

absl::StatusOr<PartitionRule> ParsePartitionRule(std::string_view text) {
  auto whole = ParseSpec(text);
  if (whole.ok()) {
    whole->text = std::string(text);
    return whole;
  }
  // REGEX=SPEC: the first '=' after which a valid spec follows (specs contain '=' too).
  // When none does, the error is that of the first candidate that names a kind of spec
  // (its problem is what to report), else "unknown partition spec".
  absl::Status named = NamesSpecKind(text) ? whole.status() : absl::OkStatus();
  for (size_t i = text.find('='); i != std::string_view::npos; i = text.find('=', i + 1)) {
    auto r = ParseSpec(text.substr(i + 1));
    if (!r.ok()) {
      if (named.ok() && NamesSpecKind(text.substr(i + 1))) named = r.status();
      continue;
    }
    r->text = std::string(text);
    r->pattern = std::string(text.substr(0, i));
    if (auto check = Regex::Compile(*r->pattern, StrCat("--partition ", text, ": REGEX")); !check.ok()) {
      return check.status();
    }
    return r;
  }
  return absl::InvalidArgumentError(
      StrCat("--partition ", text, ": ", SV(named.ok() ? whole.status().message() : named.message())));
}

namespace {

std::string PythonList(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) StrAppend(&out, i ? ", " : "", v[i]);
  return out + "]";
}

// Where TensorFlow's partitioner (partitioned_variables.py) raises for an axis outside the
// tensor: min_max_variable_partitioner checks `axis >= len(shape)` with its own message;
// fixed_size_partitioner and variable_axis_size_partitioner index shape[axis] (IndexError).
absl::Status AxisOutOfRange(const PartitionRule& rule, const Shape& shape) {
  if (rule.kind == PartitionRule::Kind::kMinSize && rule.axis >= 0) {
    // "... when shape is only %s" % (axis, shape): str(TensorShape) prints "(3, 4)".
    std::string dims = StrCat("(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")");
    return absl::InvalidArgumentError(StrCat("TensorFlow's min_max_variable_partitioner raises: \"Can not partition "
                                             "variable along axis ", rule.axis, " when shape is only ", dims, "\""));
  }
  return absl::InvalidArgumentError(
      StrCat("axis ", rule.axis, " is outside rank ", shape.size(), " (", ShapeString(shape), "): TensorFlow's ",
             rule.kind == PartitionRule::Kind::kFixed ? "fixed_size_partitioner" : "partitioner",
             " raises IndexError (list index out of range)"));
}

}  // namespace

absl::StatusOr<std::optional<std::vector<Region>>> ApplyRule(const PartitionRule& rule, const Shape& shape,
                                                             int64_t esize, std::string* note) {
  using K = PartitionRule::Kind;
  if (rule.kind == K::kNone) return std::optional<std::vector<Region>>(std::vector<Region>{Region::Full(shape)});
  // variable_scope._VariableStore.get_variable (_true_getter) never partitions a scalar,
  // and ParameterServerStrategyV2._create_variable skips rank-0 variables.
  if (shape.empty()) {
    *note = "scalar: left whole";
    return std::optional<std::vector<Region>>();
  }
  if (rule.kind == K::kLayout) {
    TFCKPT_ASSIGN_OR_RETURN(auto regions, LayoutRegions(shape, rule.layout));
    return std::optional<std::vector<Region>>(std::move(regions));
  }
  const int rank = static_cast<int>(shape.size());
  const int axis = rule.axis < 0 ? rule.axis + rank : rule.axis;  // Python indexing
  if (axis < 0 || axis >= rank) return AxisOutOfRange(rule, shape);
  int64_t parts = 1;
  switch (rule.kind) {
    case K::kFixed: parts = FixedShardsParts(shape, axis, rule.n); break;
    case K::kMinSize: parts = MinSizeParts(shape, axis, esize, rule.n, rule.max_shards); break;
    case K::kMaxSize:
      // variable_axis_size_partitioner: shape.num_elements() / shape[axis] (0 / 0), then
      // max_shard_bytes / bytes_per_slice (x / 0.0) when another axis is empty.
      if (*NumElements(shape) == 0) {
        return absl::InvalidArgumentError(
            StrCat("TensorFlow's variable_axis_size_partitioner raises ZeroDivisionError (",
                   shape[axis] == 0 ? "division by zero" : "float division by zero", ") for a tensor of shape ",
                   ShapeString(shape), " with no elements"));
      }
      parts = MaxSizeParts(shape, axis, esize, rule.n, rule.max_shards);
      break;
    default: break;
  }
  if (parts < 1) {
    // variable_scope._get_partitioned_variable (_call_partitioner).
    std::vector<int64_t> partitions(shape.size(), 1);
    partitions[axis] = parts;
    return absl::InvalidArgumentError(
        StrCat("TensorFlow raises \"Partitioner returned zero partitions for some axes: ", PythonList(partitions),
               "\" (axis ", axis, " of ", ShapeString(shape), " is empty)"));
  }
  return std::optional<std::vector<Region>>(CutAlongAxis(shape, axis, parts));
}

}  // namespace tfckpt
