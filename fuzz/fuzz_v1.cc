// V1 checkpoints (SavedTensorSlices tables, docs/FORMAT.md §h): the meta entry, slice keys,
// TensorProto values re-encoded in V2 layout. Input: the V1 file.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/open.h"
#include "model/values.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tfckpt::fuzz::ScratchDir() + "/model.ckpt";
  tfckpt::fuzz::WriteFile(path, {reinterpret_cast<const char*>(data), size});
  std::vector<tfckpt::Finding> findings;
  (void)tfckpt::OpenResolved({.format = tfckpt::Format::kV1, .prefix = path, .v1_files = {path}}, &findings);
  auto c = tfckpt::OpenResolved({.format = tfckpt::Format::kV1, .prefix = path, .v1_files = {path}});
  if (!c.ok()) return 0;
  int budget = 16;
  for (const auto& t : (*c)->tensors()) {
    if (--budget < 0) break;
    for (const auto& s : t.slices) (void)(*c)->Read(t, s);
    (void)tfckpt::ComputeStats(**c, t);
  }
  return 0;
}
