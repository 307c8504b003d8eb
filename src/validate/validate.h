// The checks of one checkpoint (tfckpt validate without --against): Validate runs every
// check and reports what it finds as findings (a check id, a severity, where, what), in a
// stable order; the slice layout check is also CheckSliceLayout, which the comparison
// (compare.h), the verification of outputs and the shard checks run too. A damaged
// checkpoint is a report with errors, not an error status: the status fails only when the
// input cannot be read at all. Check ids are listed and explained in
// man/tfckpt-validate.1.in. The comparison of two checkpoints is compare.h; both report
// in a ValidateReport.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/reports.h"

namespace tfckpt {

struct ValidateOptions {
  bool quick = false;  // metadata only: skip reading data and checking tensor CRCs
  int jobs = 0;        // threads for data checks; 0 = number of cores
};

struct ValidateReport {
  std::string path;           // the checkpoint that was checked (resolved prefix)
  int64_t tensors = 0;        // logical tensors
  uint64_t bytes_checked = 0; // payload bytes whose checksums were verified (or compared)
  std::vector<Finding> findings;
  // Compare (compare.h) only: every tensor whose values differ (an against.values error), by name.
  std::vector<ValueDifference> differences;

  size_t errors() const;
  size_t warnings() const;
  size_t notes() const;
  // No errors (and, when `strict`, no warnings; notes never fail).
  bool ok(bool strict) const { return errors() == 0 && (!strict || warnings() == 0); }
};

// Runs every check on the checkpoint `spec` names. Damage is reported as findings; an
// error status means the input cannot be read at all (no such checkpoint, unreadable).
absl::StatusOr<ValidateReport> Validate(const std::string& spec, const ValidateOptions& options);

// Slice layout checks of one partitioned tensor, appended to `out`: two slices that
// overlap or are stored twice (slice.overlap), elements no slice holds (slice.gap, with
// the first such element); a slice outside the tensor's shape (slice.bounds) instead of
// those.
void CheckSliceLayout(const TensorEntry& t, const std::string& file, std::vector<Finding>* out);

// A data file of `c` we may not read makes the whole check impossible (exit 3, one error),
// not one finding per tensor in it: the first such file's error (no permission, a store
// that stops answering, an object replaced during the run), else OK. Validate (of a V2
// checkpoint) and CompareCheckpoints call it before reading any data. REQUIRES: `store`
// holds `c`'s data files.
absl::Status DataFilesPermitted(const Checkpoint& c, Storage& store);

}  // namespace tfckpt
