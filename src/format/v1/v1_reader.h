// Reading V1 checkpoints (docs/FORMAT.md §h): tables whose "" entry lists the tensors and
// their slices, and whose other entries hold each slice's values in a TensorProto.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"

namespace tfckpt {

// Opens the V1 checkpoint made of `files` (all its shards); `pattern` names it in
// CheckpointInfo::prefix. `findings`: as OpenCheckpoint (open.h), the entry callers use.
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenV1(const std::string& pattern, std::vector<std::string> files,
                                                   std::vector<Finding>* findings = nullptr);

}  // namespace tfckpt
