// The user's own sharding: TensorFlow's ShardableTensor, ShardingCallback and
// validate_shards (tensorflow/python/checkpoint/sharding/sharding_util.py), offline, and
// SHARDS.json files. Used by the reshard planner (--policy file:, a Python callback) and
// by scale-out (edited plans are checked the same way).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/ordered_code.h"
#include "tfckpt/region.h"

namespace tfckpt {

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
  std::optional<Shape> shape = {};
  std::optional<int32_t> dtype = {};
  std::optional<std::string> device = {};  // e.g. "/job:worker/task:1/device:CPU:0"
  // (The "= {}": so that brace initializers may leave them out without a warning.)
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

}  // namespace tfckpt
