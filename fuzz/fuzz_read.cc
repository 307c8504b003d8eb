// Whole-tensor reads of any format, as the Python module and the commands make them: each
// tensor checked (Checkpoint::CheckStored) and only then read into a buffer of its size
// (ReadTensor, what tfckpt.open()[name] and load() call), string tensors gathered
// (ReadStrings: tfckpt.open()[name], convert -o x.npz), statistics on two threads
// (ComputeStats: inspect --stats). A memory bomb is a finding here: scripts/fuzz.sh runs
// every target with -malloc_limit_mb=256, so a claimed count that drives an allocation
// fails the run. Input: 1 byte format (0 V2, 1 safetensors, 2 .npz, 3 V1; others modulo 4),
// then as fuzz_bundle (V2: 4-byte little-endian index length, the index, then data file
// 0's bytes) or the one file of the other formats.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "copy/copy.h"
#include "fuzz_util.h"
#include "model/values.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "tfckpt/read.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int format = data[0] % 4;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string dir = tfckpt::fuzz::ScratchDir();
  tfckpt::ResolvedCheckpoint r;
  switch (format) {
    case 0: {
      if (rest.size() < 4) return 0;
      uint32_t index_len;
      std::memcpy(&index_len, rest.data(), 4);
      rest.remove_prefix(4);
      index_len = static_cast<uint32_t>(std::min<size_t>(index_len, rest.size()));
      r = {.format = tfckpt::Format::kV2, .prefix = dir + "/r"};
      tfckpt::fuzz::WriteFile(r.prefix + ".index", rest.substr(0, index_len));
      tfckpt::fuzz::WriteFile(r.prefix + ".data-00000-of-00001", rest.substr(index_len));
      break;
    }
    case 1:
      r = {.format = tfckpt::Format::kSafetensors, .prefix = dir + "/r.safetensors"};
      tfckpt::fuzz::WriteFile(r.prefix, rest);
      break;
    case 2:
      r = {.format = tfckpt::Format::kNpz, .prefix = dir + "/r.npz"};
      tfckpt::fuzz::WriteFile(r.prefix, rest);
      break;
    default:
      r = {.format = tfckpt::Format::kV1, .prefix = dir + "/r.v1", .v1_files = {dir + "/r.v1"}};
      tfckpt::fuzz::WriteFile(r.prefix, rest);
  }
  auto c = tfckpt::OpenResolved(r);
  if (!c.ok()) return 0;
  int budget = 16;
  for (const tfckpt::TensorEntry& t : (*c)->tensors()) {
    if (--budget < 0) break;
    if (!(*c)->CheckStored(t).ok()) continue;  // what every reader asks before it allocates
    const tfckpt::DTypeInfo* info = tfckpt::LookupDType(t.dtype);
    if (info != nullptr && info->kind == tfckpt::ValueKind::kString) {
      std::vector<tfckpt::TensorBytes> keep;
      (void)tfckpt::ReadStrings(**c, t, tfckpt::Region::Full(t.shape), &keep);
      continue;
    }
    for (const bool widen : {false, true}) {
      tfckpt::ReadOptions o;
      o.bfloat16_as_float32 = widen;
      auto n = tfckpt::ReadSize(t, tfckpt::Region::Full(t.shape), o);
      if (!n.ok()) break;
      std::string out(*n, '\0');
      (void)tfckpt::ReadTensor(**c, t, out.data(), out.size(), o);
    }
    (void)tfckpt::ComputeStats(**c, t, /*jobs=*/2);
  }
  return 0;
}
