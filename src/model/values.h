// Reading tensor values for people: numpy-style printing and streaming statistics.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/reports.h"

namespace tfckpt {

struct PrintOptions {
  bool all_values = false;  // never summarise
  int64_t threshold = 1000; // summarise when the tensor has more elements (numpy default)
  int edge_items = 3;       // elements kept at each edge of a summarised axis
  bool json = false;        // JSON text instead (see FormatValues)
};

// The values of `t` laid out like numpy prints an array, e.g. "[[1.5 2. ]\n [3.  4. ]]";
// summarised axes show their edges with "..." between. Partitioned tensors are read
// from their slices element by element (only the printed elements are read). Strings are
// quoted with C escapes. The text is numpy's np.array2string of the array: common column
// widths, scientific notation when values span more than 1000x, rows wrapped at 75 columns.
// With options.json: JSON text, arrays nested by shape (a scalar is a bare value); numbers
// as numbers, each its shortest decimal (bfloat16/float16/float8 too), NaN and infinities
// as the strings "nan", "inf", "-inf", bools as true/false, complex as [real, imag],
// strings as JSON strings (invalid UTF-8 bytes as U+FFFD), variants as
// "<variant N bytes>"; a summarised axis has the string "..." in place of the elements
// left out.
absl::StatusOr<std::string> FormatValues(const Checkpoint& c, const TensorEntry& t, const PrintOptions& options);

// Statistics of a numeric tensor, computed in one streaming pass over its stored pieces:
// read in chunks of 1 MiB with pread (never through a mapping: memory stays one buffer per
// thread whatever the tensor's size), summarised on `jobs` threads (0: one per core) and
// merged in order (Chan et al.), so the result does not depend on `jobs`. CRCs are verified
// on the way. (model/stats.cc)
absl::StatusOr<TensorStats> ComputeStats(const Checkpoint& c, const TensorEntry& t, int jobs = 1);

// Decodes one element of a fixed-size real dtype to double (NaN/Inf preserved).
// REQUIRES: LookupDType(dtype)->kind is kFloat, kSigned, kUnsigned or kBool.
double ElementToDouble(int32_t dtype, const char* p);

// Shortest decimal text that reads back as the same value of `dtype`.
std::string FormatElement(int32_t dtype, const char* p);

}  // namespace tfckpt
