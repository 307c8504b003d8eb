// An .npz archive (NumPy's savez: one NAME.npy member per array) read as a Checkpoint:
// one stored piece per tensor, each member's CRC-32 checked by libzip as it is read.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"

namespace tfckpt {

// Opens `path` read-only, through its Storage (a local file or an s3:// or gs:// object:
// ranged reads, never the whole archive in memory). Each member's .npy header gives the
// tensor's dtype and shape; a member in Fortran order (of more than one dimension), of a
// dtype with no TensorFlow counterpart, or whose size does not match its header is listed
// with a defect. Strings (|S<n>) read back without their NUL padding.
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenNpz(const std::string& path);

}  // namespace tfckpt
