// safetensors: the strict JSON header check on its own, then the whole file opened as a
// checkpoint and its tensors read. Input: the .safetensors file.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz_util.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/open.h"
#include "format/safetensors/safetensors.h"
#include "model/values.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (size >= 8) {
    uint64_t n;
    std::memcpy(&n, data, 8);
    if (n <= size - 8) (void)tfckpt::ParseSafetensorsHeader(in.substr(8, n), size - 8 - n, "fuzz.safetensors");
  }
  const std::string path = tfckpt::fuzz::ScratchDir() + "/m.safetensors";
  tfckpt::fuzz::WriteFile(path, in);
  auto c = tfckpt::OpenResolved({.format = tfckpt::Format::kSafetensors, .prefix = path});
  if (!c.ok()) return 0;
  int budget = 16;
  for (const auto& t : (*c)->tensors()) {
    if (--budget < 0) break;
    for (const auto& s : t.slices) (void)(*c)->Read(t, s);
    tfckpt::PrintOptions po;
    (void)tfckpt::FormatValues(**c, t, po);
  }
  return 0;
}
