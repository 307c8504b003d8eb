// A .safetensors file or a sharded set read as a Checkpoint: one stored piece per tensor,
// no CRCs (the layout is in format/safetensors/safetensors.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"

namespace tfckpt {

// Opens a .safetensors file or a *.safetensors.index.json set, strictly checked (the
// first problem fails the open). OpenCheckpoint (open.h) is the entry callers use.
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenSafetensors(const std::string& path);

}  // namespace tfckpt
