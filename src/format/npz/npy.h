// The NumPy .npy member format of .npz archives (NEP 1): the dtypes both sides name, and
// the header's dict. Read by npz_reader.cc, written by convert.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tfckpt/region.h"

namespace tfckpt {

// NumPy's descr of a fixed-size dtype ("<f4", "|b1", ...), or nullopt when NumPy has none.
std::optional<std::string> NpyDescr(int32_t dtype);
// The dtype a descr names (strings "|S<n>" are DT_STRING), or nullopt.
std::optional<int32_t> DTypeOfNpyDescr(std::string_view descr);

struct NpyPreamble {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
  uint64_t size = 0;  // bytes of the preamble: the data start here
};

// Parses the start of a member: magic "\x93NUMPY", version 1.0, 2.0 or 3.0, the header
// length and the dict {'descr': ..., 'fortran_order': ..., 'shape': (...)}.
// InvalidArgument naming what is wrong when `bytes` holds no complete, valid preamble
// (more bytes may be needed: the header is at most 10 + 65535 bytes in version 1).
absl::StatusOr<NpyPreamble> ParseNpyHeader(std::string_view bytes);

}  // namespace tfckpt
