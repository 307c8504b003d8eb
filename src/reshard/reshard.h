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
#include "copy/copy.h"
#include "reshard/partition.h"
#include "reshard/sharding.h"
#include "verify/verify.h"

namespace tfckpt {

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
// by the user's shards as TF reports it. A TF1 primary the rules cut into slices takes its
// optimizer slots along, keyed as TF1 keys them for the new partition count
// (TensorPlan::name). Errors (InvalidArgument): an explicit REGEX that
// matches no tensor, an indivisible layout (naming the tensor), a partitioner TF would
// raise in (with TF's reason), a policy that cannot fit an element, new slices TF cannot
// store (an empty extent) or read back (a dtype GetSliceValue does not assemble, unless
// allow_any_dtype), by-device without a single mesh.
absl::StatusOr<ReshardPlan> PlanReshard(const Checkpoint& c, const ReshardOptions& options);

// The task of every piece of `plan` among `n` tasks, by tensor then piece, as policy
// by-task places them (TF's round-robin device setter): a piece stored as it is keeps its
// data file's task (its shard modulo n); the pieces of re-sliced tensors go to the tasks
// in turn. (The piece's file may differ: by-task fills empty files too.) REQUIRES: n >= 1.
std::vector<std::vector<int64_t>> PieceTasks(const ReshardPlan& plan, int64_t n);

// What VerifyWritten compares the output of `plan` with: each output tensor with the
// tensor of `c` it came from (TensorPlan::out_name: renamed TF1 slots included).
std::vector<VerifySource> ReshardSources(const Checkpoint& c, const ReshardPlan& plan);

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
// (tensor_bundle.cc of TF 2.21: float, double, int32, uint8, int16, int8, complex64,
// complex128, int64, bool, qint32, quint8, qint8, bfloat16, int4, uint4; the oracle,
// tests/tf_oracle_test.py, checks the list against TF itself).
bool TfAssemblesSlices(int32_t dtype);

}  // namespace tfckpt
