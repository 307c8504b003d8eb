// tfckpt convert: writing a checkpoint's tensors as safetensors (one file or the Hugging
// Face sharded layout) or as a NumPy .npz archive. TF outputs go through
// CombineCheckpoints (combine.h) with the same name rules and casts.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "model/name_rules.h"

namespace tfckpt {

struct ConvertReport;

struct ConvertOptions {
  std::vector<std::string> include, exclude;
  std::vector<RenameRule> renames;
  std::map<int32_t, int32_t> casts;  // dtype -> dtype (CastSupported)
  uint64_t max_file_size = 0;        // safetensors: > 0 writes NAME-0000i-of-0000K files + index
  bool strict = false;               // a tensor the format cannot hold is an error, not a warning
  // safetensors: tensors copied unchanged between objects of one store are copied inside it.
  ServerSideCopy server_side = ServerSideCopy::kAuto;
  bool overwrite = false;
  int jobs = 0;                      // threads copying; 0 = one per core (the output does not depend on it)
  // Called once the plan is made, with the bytes to write and the phase ("writing"), and
  // again for each later phase of the run, if any; returns the counter to advance.
  using StartProgress = std::function<std::atomic<uint64_t>*(uint64_t total, const char* phase)>;
  StartProgress start_progress;
  // The output's check after its commit (it cannot be read back before), e.g. its
  // verification, given the report (files, sources): an output that fails it is removed
  // (publish/publication.h: Publication::CheckCommitted). Empty: none.
  std::function<absl::Status(const ConvertReport& written)> after_commit;
};

struct ConvertReport {
  int64_t tensors = 0;                // written
  uint64_t bytes = 0;                 // tensor bytes written
  std::vector<std::string> files;     // written, in order (an index last)
  std::vector<std::string> skipped;   // "NAME: why", tensors the format cannot hold
  std::vector<std::string> notes;
  std::map<std::string, std::string> sources;  // each written tensor -> the tensor of the input it came from
};

// Writes the tensors of `c` that pass the rules to `out` (a .safetensors path). Partitioned
// tensors are assembled while streaming; unpartitioned ones are copied in-kernel when no
// cast applies. Strings, variants, the object graph and dtypes safetensors has no name for
// are skipped (an error with `strict`). `__metadata__` records the source (and keeps a
// safetensors input's own metadata). With
// max_file_size, tensors are packed in name order into files of at most that many data
// bytes (a larger tensor gets a file of its own) named like Hugging Face's
// (`model-00001-of-00003.safetensors`, `model.safetensors.index.json`); when everything
// fits in one file, that file is `out` itself. Atomic: all files are renamed into place at
// the end, the index last. Source CRCs are checked. Every file's layout is fixed before a
// byte is written (the header first), and its tensors are copied into it positionally on
// `jobs` threads (copy.h, RunUnits: a tensor cut on axis 0 by its stored pieces, in-kernel
// where the bytes move unchanged), so the bytes do not depend on the number of threads.
absl::StatusOr<ConvertReport> WriteSafetensors(const Checkpoint& c, const std::string& out,
                                               const ConvertOptions& options);

// Writes the tensors of `c` to `out` as a .npz archive (zip, stored, ZIP64 as needed:
// stored_zip.h, laid out first and filled on `jobs` threads as WriteSafetensors does,
// straight through the storage, an object store's upload too): member NAME.npy per tensor
// (names must be UTF-8), .npy format 1.0 (2.0 for headers over 64 KiB),
// little-endian descr (`<f4`, `<i8`, `|b1`, `<f2`, `<c8`, ...), strings as `|S<n>`.
// bfloat16 and float8 have no NumPy dtype: refused unless cast (bfloat16=float32).
// Variants and the object graph are skipped. Source CRCs are checked.
absl::StatusOr<ConvertReport> WriteNpz(const Checkpoint& c, const std::string& out, const ConvertOptions& options);

// Parses "FROM=TO" dtype names ("float32=bfloat16"); error for casts CastSupported refuses.
absl::StatusOr<std::pair<int32_t, int32_t>> ParseCast(const std::string& text);

}  // namespace tfckpt
