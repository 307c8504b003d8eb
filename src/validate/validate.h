// Proving a checkpoint intact (Validate) or two checkpoints equal (Compare).
// Check ids are listed and explained in man/tfckpt-validate.1.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
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
  // Compare only: every tensor whose values differ (an against.values error), by name.
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

struct CompareOptions {
  bool use_tolerance = false;
  double tolerance = 0;  // absolute; floating-point dtypes only
  int jobs = 0;
  std::atomic<uint64_t>* progress = nullptr;  // if given, advances by the bytes compared
  // For checking a copy against its source: where both sides hold one fixed-size dtype as
  // raw V2 bytes cut on axis 0 only (or whole), first try to prove equality by CRCs
  // alone, reading the new side once (its pieces' CRCs, and the CRC of its bytes over
  // each old piece's range against that piece's stored CRC), and read the old side, to
  // compare as below and report, only when that fails. The old side's data is then
  // checked only through the new side: damage to it that the new side does not share is
  // not reported.
  bool by_checksum = false;
  // With by_checksum: the new pieces whose stored CRC is known to hold for their bytes (a
  // writer read them back, BundleWriterOptions::read_back). When every new piece of a
  // tensor is one, nothing is read: over each stretch of bytes where both sides' piece
  // boundaries meet, the new pieces' CRCs concatenated (crc32c::Concat) must equal the old
  // pieces' stored CRCs concatenated. Empty: none.
  std::function<bool(const StoredSlice& s)> crc_holds;
  // The old values are cast to the new dtype first (CastElements), then compared bitwise:
  // for outputs written with a cast (convert --cast). Only dtype pairs CastSupported(old,
  // new) compare this way; other dtype changes stay errors.
  bool cast = false;
  // Strings compare equal when they differ only in trailing NUL bytes: for outputs in
  // NumPy's fixed-width bytes dtype (.npz), which cannot hold them (convert notes it).
  bool strings_without_trailing_nul = false;
};

// Compares the logical values of `a` (new, in `ca`) with those of `b` (old, in `cb`),
// whatever either side's slicing: chunk by chunk (about 1 MiB) over the intersections of
// both sides' slices, fixed-size values read with pread, never whole tensors (strings
// and variants: one tensor at a time). Elements are equal when bitwise equal; with the
// tolerance, floating-point ones also when |new - old| <= tolerance (NaN equals NaN), and
// tensors of two floating-point dtypes compare by value. Every stored piece's CRC is
// checked (see options.by_checksum); a damaged piece, or one that cannot be read, is the
// error returned.
// REQUIRES: a.shape == b.shape; a.dtype == b.dtype, or both floating-point (float16,
// bfloat16, float32, float64, float8) with options.use_tolerance, or
// CastSupported(b.dtype, a.dtype) with options.cast; neither has a defect.
absl::StatusOr<ValueDifference> CompareTensorValues(const Checkpoint& ca, const TensorEntry& a, const Checkpoint& cb,
                                                    const TensorEntry& b, const CompareOptions& options);

// True when tensors of dtypes `a` and `b` may be compared by value (CompareTensorValues
// with a tolerance): both floating-point.
bool ComparableByValue(int32_t a, int32_t b);

// Logical equivalence of `new_spec` to `old_spec`, whatever their slicing and data-file
// layout: the same tensor names, dtypes, full shapes and values (CompareTensorValues),
// and NEW's slices must be a valid partition (no duplicate or overlapping key+slice, no
// gap). With the tolerance a dtype change between floating-point dtypes is a note
// (against.dtype) and the values are compared by value; otherwise it is an error. The
// report's findings describe every mismatch (first differing element, by index in the
// full tensor, with both values); `differences` has the numbers of each.
absl::StatusOr<ValidateReport> Compare(const std::string& new_spec, const std::string& old_spec,
                                       const CompareOptions& options);

// Compare on two open checkpoints, findings appended to `report`. With `names` (tensor
// of `a` -> the tensor of `b` its values came from), only the tensors of `a` it lists are
// compared, each with the tensor of `b` it names, and tensors of `b` it does not name are
// not expected in `a`; without, every tensor by its own name, as Compare.
absl::Status CompareCheckpoints(const Checkpoint& a, const Checkpoint& b,
                                const std::map<std::string, std::string>* names, const CompareOptions& options,
                                ValidateReport* report);

// Slice layout checks of one partitioned tensor, appended to `out`: two slices that
// overlap or are stored twice (slice.overlap), elements no slice holds (slice.gap, with
// the first such element); a slice outside the tensor's shape (slice.bounds) instead of
// those.
void CheckSliceLayout(const TensorEntry& t, const std::string& file, std::vector<Finding>* out);

}  // namespace tfckpt
