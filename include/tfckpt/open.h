// Opening a checkpoint by the name the user gave: the one place that decides which
// format a CKPT argument is (V2 bundle, V1 tables, safetensors) and hands it to that
// format's loader (src/format/<format>/).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/storage.h"

namespace tfckpt {

// What a CKPT argument names. In order: `X` ending in `.index`; `X.index` exists (V2
// prefix `X`); a directory (its `checkpoint` state file, else its single `*.index`, else
// `variables/variables`); a V1 table file (a `…-NNNNN-of-MMMMM` name brings in all its
// shards); a V1 glob pattern or `X-?????-of-?????`.
struct ResolvedCheckpoint {
  Format format = Format::kV2;
  std::string prefix;                      // V2 prefix, or V1 path / pattern
  std::vector<std::string> v1_files = {};  // V1 only
  std::vector<std::string> notes = {};     // how it was resolved
  std::string state_dir = {};              // the directory whose state file was used, or ""
  // (The "= {}": so that designated initializers may leave them out without a warning.)
};
absl::StatusOr<ResolvedCheckpoint> ResolveCheckpoint(const std::string& spec);

// The newest checkpoint named by the `checkpoint` state file in `dir`.
// A state file lists a few paths: one larger than this is not read (16 MiB: 100 000 kept
// checkpoints' paths and more), and a path longer than the longest a file system or object
// store takes (PATH_MAX, 4096) is refused before anything is looked up by it.
inline constexpr uint64_t kMaxStateFileBytes = 16 << 20;
inline constexpr size_t kMaxCheckpointPathBytes = 4096;
absl::StatusOr<std::string> ReadCheckpointState(const std::string& dir, std::vector<std::string>* notes);

// Opens what the user named (see ResolveCheckpoint); its notes become the checkpoint's.
//
// Without `findings`, the first damaged table block, header or entry fails the open.
// With `findings` (validate), such damage is recorded there and the load goes on with
// the rest; only an index that cannot be opened at all fails. In both modes, tensors
// whose entries are inconsistent are listed with a `defect`. Safetensors inputs are
// always checked strictly (their first problem fails the open).
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpoint(const std::string& spec,
                                                           std::vector<Finding>* findings = nullptr);

// Opens an already resolved checkpoint (the notes are not copied). A V2 bundle's files are
// opened through `opener` when given (storage.h).
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenResolved(const ResolvedCheckpoint& r,
                                                         std::vector<Finding>* findings = nullptr,
                                                         const FileOpener* opener = nullptr);

}  // namespace tfckpt
