// Resharding: the plan (which regions of which tensors go to which output data file).
// Its execution is the copy engine's (ExecutePlan, copy.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/copy.h"
#include "tfckpt/partition.h"

namespace tfckpt {

// ---------------------------------------------------------------------------------------
// The user's own sharding: TensorFlow's ShardingCallback and validate_shards
// (tensorflow/python/checkpoint/sharding/sharding_util.py), offline.

// What a sharding callback is given: one piece of one tensor as the --partition rules
// leave it, with TensorFlow's ShardableTensor fields. The task is the input data file the
// piece is in, as `by-task` treats it (a piece the rules cut anew gets the files in turn,
// as TF's round-robin device setter places partitions on parameter servers).
struct ShardableTensor {
  std::string checkpoint_key;
  std::string slice_spec;  // TF's SaveSliceInfo.spec form: "" whole, else "10 3 0,5:0,3"
  Shape shape;             // of this piece
  Shape full_shape;        // of the tensor
  int32_t dtype = 0;       // raw DataType value
  std::optional<int64_t> task;
  Region region;           // the piece inside the tensor
  SliceExtents extents;    // as the piece is (or would be) stored
  // "/job:worker/task:K", or "" without a task.
  std::string device() const;
};

// One tensor of a shard as a callback returns it: {checkpoint_key: {slice_spec: tensor}}.
// The slice spec may be TF's form ("10 3 0,5:0,3"), the stored extents alone ("0,5:0,3",
// "0,5:-", as --dry-run --json prints them), or "" for the whole tensor; a slice that is
// no piece of the input cuts the tensor anew (MaxShardSizePolicy does). shape, dtype and
// device are those of the tensor the callback returns; unset: as the input's.
struct ShardEntry {
  std::string checkpoint_key;
  std::string slice_spec;
  std::optional<Shape> shape;
  std::optional<int32_t> dtype;
  std::optional<std::string> device;  // e.g. "/job:worker/task:1/device:CPU:0"
};
using Shard = std::vector<ShardEntry>;  // one output data file

// DeviceSpec.from_string(device).task: the K of "/job:x/task:K/...", nullopt without one.
std::optional<int64_t> TaskOfDevice(std::string_view device);

// A piece of a validated shard: which input piece (or part of one) it is.
struct ShardPiece {
  size_t tensor = 0;   // index of a ShardableTensor of the checkpoint_key
  Region region;       // inside the full tensor
  std::optional<SliceExtents> extents;  // the input piece's own when it is one, else explicit
};

struct ValidateShardsOptions {
  // TF's "tensors with different tasks were found in the same shard". Scale-out plans,
  // whose files may hold several input files' pieces (by-task:1, shards:N), skip it.
  bool one_task_per_shard = true;
};

// validate_shards, rule by rule and in TF's order, with TF's wording (the callback's
// description, the key, the slice, the original and new values; joined on one line):
// a key and slice twice; a key not in `tensors`; an altered shape, dtype or task; tensors
// of different tasks in one shard; then tensors (or parts of them) no shard holds. Slices
// of one key may also cut it anew: they must tile the tensor (no overlap, no gap). Returns
// each shard's pieces. Errors: InvalidArgument. REQUIRES: each key's `tensors` tile it.
absl::StatusOr<std::vector<std::vector<ShardPiece>>> ValidateShards(const std::vector<ShardableTensor>& tensors,
                                                                     const std::vector<Shard>& shards,
                                                                     std::string_view description,
                                                                     const ValidateShardsOptions& options = {});

// A sharding callback: TF calls one once per task with that task's tensors (per_task),
// and takes the shards of every call in task order.
struct ShardingCallback {
  std::string description;
  std::function<absl::StatusOr<std::vector<Shard>>(const std::vector<ShardableTensor>&)> shards;
  bool per_task = true;
};

// --policy file:SHARDS.json: {"description": "...", "shards": [[{"key", "slice"[, "shape",
// "dtype", "device"]}, ...], ...]} (or the bare list of shards). Called once with every
// tensor. Errors: unreadable file (its status), malformed document (InvalidArgument).
absl::StatusOr<ShardingCallback> ShardsFromFile(const std::string& path);

// ---------------------------------------------------------------------------------------
// Policies and options.

// Which data file each tensor or slice lands in (the "sharding callback").
struct Policy {
  enum class Kind { kByTask, kShards, kSingle, kMaxShardSize, kByDevice, kCallback };
  Kind kind = Kind::kByTask;
  int64_t n = 0;  // by-task: files (0 = as many as the input has); shards: files; max-shard-size: bytes
  std::string file;           // kCallback from "file:PATH" (read by PlanReshard when callback is unset)
  ShardingCallback callback;  // kCallback: the user's own (e.g. from Python)
};

// "by-task[:N]", "shards:N", "single", "max-shard-size:BYTES", "by-device", "file:PATH".
absl::StatusOr<Policy> ParsePolicy(std::string_view text);

// What PlanReshard returns (the plan types are the copy engine's, copy.h).
using ReshardPlan = WritePlan;

struct ReshardOptions {
  std::vector<PartitionRule> rules;  // first match wins; no pattern = tensors partitioned today
  Policy policy;
  int64_t bytes_per_string = 16;     // element size of strings for min-size / max-size
  // Cut tensors of dtypes TF's BundleReader::GetSliceValue cannot assemble (float16,
  // uint16/32/64, string, ...); refused by default.
  bool allow_any_dtype = false;
};

// The pieces the rules of `options` cut each tensor of `c` into, as a sharding callback
// receives them: in the input's (name) order, the object graph last (TF adds it after
// every other tensor).
absl::StatusOr<std::vector<ShardableTensor>> ShardableTensors(const Checkpoint& c, const ReshardOptions& options);

// Builds the plan and checks it against TensorFlow's validate_shards rules (every tensor
// kept with its dtype and shape, each element in exactly one piece, no duplicate
// key+slice); a violation by a built-in policy is reported as an internal error (a bug),
// by the user's shards as TF reports it. Errors (InvalidArgument): an explicit REGEX that
// matches no tensor, an indivisible layout (naming the tensor), a partitioner TF would
// raise in (with TF's reason), a policy that cannot fit an element, new slices TF cannot
// store (an empty extent) or read back (a dtype GetSliceValue does not assemble, unless
// allow_any_dtype), by-device without a single mesh.
absl::StatusOr<ReshardPlan> PlanReshard(const Checkpoint& c, const ReshardOptions& options);

// TF's MaxShardSizePolicy over shardable pieces, in order: returns, per output file, the
// (tensor index, region) pieces it holds. Exposed for tests. `sizes(i, region)` gives the
// (total bytes, bytes per element) TF would use for piece i.
struct ShardablePiece {
  size_t tensor;  // index into the caller's list
  Region root;    // the piece as it is before the policy
  Shape full;     // the tensor's full shape
  bool sized = true;  // false: size unknown to TF (object graph, variants): counts as 0
};
absl::StatusOr<std::vector<std::vector<std::pair<size_t, Region>>>> MaxShardSizeShards(
    const std::vector<ShardablePiece>& pieces, int64_t max_bytes,
    const std::function<std::pair<int64_t, int64_t>(size_t, const Region&)>& sizes,
    const std::function<std::string(size_t)>& name);

// Whether TF's BundleReader::GetSliceValue assembles a tensor of `dtype` from slices
// (tensor_bundle.cc: float, double, int32, uint8, int16, int8, complex64, complex128,
// int64, bool, qint32, quint8, qint8, bfloat16).
bool TfAssemblesSlices(int32_t dtype);

}  // namespace tfckpt
