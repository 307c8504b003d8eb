// Reading a tensor's values, or a box of them, into the caller's memory: the logical tensor
// of the slice map (checkpoint.h), whatever pieces it is stored in.
//
//   auto c = tfckpt::OpenCheckpoint("model.ckpt");               // open.h
//   const tfckpt::TensorEntry* t = (*c)->Find("dense/kernel");
//   std::vector<float> v(2 * 8);                                  // rows 3..4, float32 [N, 8]
//   absl::Status s = tfckpt::ReadTensor(**c, *t, tfckpt::Region{{3, 0}, {2, 8}},
//                                       reinterpret_cast<char*>(v.data()), v.size() * 4);
//
// The bytes are the elements of the box in row-major order, each as TensorFlow stores it
// (little-endian; bool one byte; complex as real, imaginary; bfloat16 and half as their
// 16-bit patterns): ReadSize says how many. Strings and variants are not read here (their
// elements have no fixed size); inspect (commands.h) prints them.
#pragma once

#include <cstddef>
#include <stop_token>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/region.h"

namespace tfckpt {

struct ReadOptions {
  // Check the stored checksum of every stored piece the box covers whole (V2: the CRC-32C
  // of its payload; safetensors has none, and V1 tables check their blocks as they read
  // them). A piece the box covers only in part is read as stored: its checksum covers
  // bytes the read does not touch.
  bool verify = true;
  // bfloat16 tensors are read as float32 (every bfloat16 value is exactly a float32), 4
  // bytes per element; other dtypes are read as stored.
  bool bfloat16_as_float32 = false;
  // A stop request ends the read between two chunks of about 1 MiB with Cancelled
  // ("interrupted"); the buffer then holds part of the box.
  std::stop_token stop;
};

// The bytes ReadTensor writes for `box` of `t` with `options`: the box's elements times the
// element size. InvalidArgument, naming the tensor, when `t` is a string or variant tensor,
// its dtype is unknown, or `box` has another rank than t.shape or is not inside it.
absl::StatusOr<size_t> ReadSize(const TensorEntry& t, const Region& box, const ReadOptions& options = {});

// Reads `box` of the fixed-size tensor `t` into out[0, out_size), in row-major order of the
// box, across the stored pieces that hold it (a partitioned tensor's slices, on any axes).
// Returns InvalidArgument, naming the tensor, for what ReadSize refuses and when out_size
// is not ReadSize's answer; DataLoss with a check id (status.h: ErrorInfoOf; man
// tfckpt-validate) for a damaged checkpoint: a checksum that does not hold ("data.crc"),
// elements no stored piece holds ("slice.gap"), a tensor whose entry is inconsistent
// (TensorEntry::defect); an error of the storage for a file that cannot be read. After an
// error the buffer's contents are unspecified.
//
// Thread safety: any number of reads of one Checkpoint may run at once on several
// threads, into disjoint buffers. Nothing is printed; nothing is kept after the call.
// REQUIRES: `t` is one of c.tensors(); `out` points to out_size writable bytes.
absl::Status ReadTensor(const Checkpoint& c, const TensorEntry& t, const Region& box, char* out, size_t out_size,
                        const ReadOptions& options = {});

// The elements of `box` of the string tensor `t` (DT_STRING), in row-major order of the
// box, as views into payloads kept alive in `keep` (each stored piece read with its
// checksum checked, decoded, and its part of the box placed). Errors as ReadTensor's.
// REQUIRES: `t` is one of c.tensors(); keep != nullptr.
absl::StatusOr<std::vector<std::string_view>> ReadStrings(const Checkpoint& c, const TensorEntry& t,
                                                          const Region& box, std::vector<TensorBytes>* keep);

// The whole tensor: ReadTensor with Region::Full(t.shape).
absl::Status ReadTensor(const Checkpoint& c, const TensorEntry& t, char* out, size_t out_size,
                        const ReadOptions& options = {});

}  // namespace tfckpt
