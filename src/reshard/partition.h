// How a tensor is cut into slices: TensorFlow's partitioners (partitioned_variables.py,
// sharded_variable.py), DTensor layouts, and the --partition rules that choose them.
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/ordered_code.h"
#include "tfckpt/region.h"

namespace tfckpt {

// Cuts `dim` rows into `parts` like TF: base = dim / parts, the first dim % parts parts get
// one more, at cumulative offsets. REQUIRES: 1 <= parts <= max(dim, 1).
std::vector<std::pair<int64_t, int64_t>> SplitAxis(int64_t dim, int64_t parts);

// The regions of `shape` cut into `parts` along `axis` (other axes whole).
std::vector<Region> CutAlongAxis(const Shape& shape, int axis, int64_t parts);

// TF2 FixedShardsPartitioner: min(n, dim[axis]).
int64_t FixedShardsParts(const Shape& shape, int axis, int64_t n);
// TF MinSizePartitioner (min_max_variable_partitioner):
// max(1, min(dim[axis], max_shards, ceil(elements * esize / min_slice_bytes))).
int64_t MinSizeParts(const Shape& shape, int axis, int64_t esize, int64_t min_slice_bytes, int64_t max_shards);
// TF MaxSizePartitioner (variable_axis_size_partitioner): bytes_per_slice =
// (elements / dim[axis]) * esize; slices_per_shard = max(1, floor(max_bytes / bytes_per_slice));
// ceil(dim[axis] / slices_per_shard), capped by max_shards when > 0.
int64_t MaxSizeParts(const Shape& shape, int axis, int64_t esize, int64_t max_shard_bytes, int64_t max_shards);

// A DTensor layout: per tensor axis, the mesh dimension sharding it ("" = unsharded).
struct Layout {
  std::vector<std::string> specs;
  std::vector<std::pair<std::string, int64_t>> mesh;  // name, size, in mesh order
};

// Parses "x,unsharded@x=2,y=4" or TF's "sharding_specs:x,unsharded, mesh:|x=2,y=4|...",
// refusing what DTensor refuses (see ParsePartitionRule).
absl::StatusOr<Layout> ParseLayout(std::string_view text);

// The distinct regions of `shape` under `layout`: an axis sharded over a mesh dimension of
// size k is cut into k equal parts; several sharded axes give the product of cuts.
// Error (naming nothing; the caller adds the tensor) when ranks differ, an axis is not
// divisible, or a mesh dimension shards two axes.
absl::StatusOr<std::vector<Region>> LayoutRegions(const Shape& shape, const Layout& layout);

// The extents DTensor's SliceSpecOnDevice writes for `region` (one of LayoutRegions):
// START,LENGTH on every axis sharded over a mesh dimension (even of size 1), "-" (full,
// length -1) on unsharded axes. REQUIRES: region.rank() == layout.specs.size().
SliceExtents LayoutExtents(const Region& region, const Layout& layout);

// "x=2,y=4": a mesh's dimensions, in order.
std::string MeshString(const std::vector<std::pair<std::string, int64_t>>& mesh);

// The device DTensor saves `piece` (one of LayoutRegions(shape, layout)) from
// (save_restore_util.cc BuildSliceSpecDeviceMap: the lowest device id holding the slice,
// i.e. coordinate 0 on every mesh dimension that shards no axis), device ids being
// row-major over the mesh (tensor_layout.cc Mesh::device_location).
// REQUIRES: piece is one of LayoutRegions(shape, layout).
int64_t SavingDevice(const Layout& layout, const Shape& shape, const Region& piece);

// One --partition rule: [REGEX=]SPEC.
struct PartitionRule {
  enum class Kind { kFixed, kMinSize, kMaxSize, kNone, kLayout };
  std::string text;              // as given, for messages
  std::optional<std::string> pattern;  // REGEX, when given
  Kind kind = Kind::kNone;
  int64_t n = 0;           // fixed: N; min-size / max-size: BYTES (min-size default 256 KiB)
  int64_t max_shards = 0;  // min-size default 1; max-size 0 = no cap (TF's None)
  int axis = 0;
  Layout layout;
};

// Parses "[REGEX=]SPEC" with SPEC one of fixed:N[@AXIS], min-size[:BYTES[,MAX_SHARDS]][@AXIS]
// (TF's defaults 256 KiB, 1), max-size:BYTES[,MAX_SHARDS][@AXIS] (MAX_SHARDS 0 = no limit),
// none, layout:SPECS@MESH, sharding_specs:..., mesh:... Layouts are checked as DTensor's
// Mesh and Layout constructors check them (a mesh dimension named twice or with a reserved
// name, a spec naming no mesh dimension, a mesh dimension sharding two axes); an error
// names the problem of the spec that names a kind, whether or not REGEX= precedes it.
absl::StatusOr<PartitionRule> ParsePartitionRule(std::string_view text);

// What a rule makes of a tensor: its new regions, or nullopt with `note` set when the rule
// does not apply (scalar, axis beyond rank, variant); error for an indivisible layout.
absl::StatusOr<std::optional<std::vector<Region>>> ApplyRule(const PartitionRule& rule, const Shape& shape,
                                                             int64_t esize, std::string* note);

}  // namespace tfckpt
