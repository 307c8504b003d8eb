// The logical comparison of two checkpoints: the same tensor names, dtypes, shapes and
// values whatever either side's slicing, data-file layout or format (tfckpt validate
// --against). CompareTensorValues is the one comparison of two tensors' values: merge's
// --collapse-parallel / --collapse-replicas and the verification of every written output
// (verify.h, through CompareCheckpoints) use it too. Mismatches are findings in a
// ValidateReport (validate.h), with the numbers of each differing tensor
// (ValueDifference); an error status means a side could not be read (a damaged piece,
// an unreadable data file). CompareTensorValues REQUIRES two comparable tensors (below);
// Compare and CompareCheckpoints check that themselves and report what does not hold
// (against.dtype, against.shape, a defect) as findings.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/reports.h"
#include "validate/validate.h"

namespace tfckpt {

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
  // With crc_holds: the CRC-32C of an old piece that has none stored (safetensors), where
  // the copy took it as it read the piece (WrittenOutput::source_crc). When every old piece
  // of a tensor has one, they stand for stored CRCs and neither side is read. Empty: none
  // (such an old side is read once against the new pieces' CRCs).
  std::function<std::optional<uint32_t>(const Checkpoint& c, const StoredSlice& s)> source_crc;
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

// The TF1 slot keys of `a` that `b` holds under TF1's other form of the same slot (new name
// -> old name): "P/S" in `a` for "P/part_0/S" in `b`, or the other way round, where P is a
// tensor of both, S one path component, and neither side has both forms. Older TF1 saves key
// the slots of a variable in one partition P/part_0/S, later ones (and reshard, which
// renames them when it cuts P: reshard.h) P/S. CompareCheckpoints without a name mapping
// pairs them, with a note (against.renamed).
std::map<std::string, std::string> Tf1SlotAliases(const Checkpoint& a, const Checkpoint& b);

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
// REQUIRES: report != nullptr.
absl::Status CompareCheckpoints(const Checkpoint& a, const Checkpoint& b,
                                const std::map<std::string, std::string>* names, const CompareOptions& options,
                                ValidateReport* report);

}  // namespace tfckpt
