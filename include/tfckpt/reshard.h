// Resharding: the plan (which regions of which tensors go to which output data file).
// Its execution is the copy engine's (ExecutePlan, copy.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/copy.h"
#include "tfckpt/partition.h"

namespace tfckpt {

// Which data file each tensor or slice lands in (the "sharding callback").
struct Policy {
  enum class Kind { kByTask, kShards, kSingle, kMaxShardSize };
  Kind kind = Kind::kByTask;
  int64_t n = 0;  // by-task: files (0 = as many as the input has); shards: files; max-shard-size: bytes
};

// "by-task[:N]", "shards:N", "single", "max-shard-size:BYTES".
absl::StatusOr<Policy> ParsePolicy(std::string_view text);

// What PlanReshard returns (the plan types are the copy engine's, copy.h).
using ReshardPlan = WritePlan;

struct ReshardOptions {
  std::vector<PartitionRule> rules;  // first match wins; no pattern = tensors partitioned today
  Policy policy;
  int64_t bytes_per_string = 16;     // element size of strings for min-size / max-size
};

// Builds the plan and checks it against TensorFlow's validate_shards rules (every tensor
// kept with its dtype and shape, each element in exactly one piece, no duplicate
// key+slice); a violation is reported as an internal error (a bug). Errors: an explicit
// REGEX that matches no tensor, an indivisible layout (naming the tensor), a policy that
// cannot fit an element.
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

}  // namespace tfckpt
