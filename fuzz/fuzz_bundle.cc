// A whole V2 bundle: the header and entry protobufs decoded into the slice map, slice
// layout checks, validate, object graph, values and statistics (string and variant
// payload decoding included). Input: 4-byte little-endian index length, the index file,
// then the bytes of data file 0.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz_util.h"
#include "tfckpt/checkpoint.h"
#include "model/object_graph.h"
#include "tfckpt/open.h"
#include "validate/validate.h"
#include "model/values.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t index_len;
  std::memcpy(&index_len, data, 4);
  std::string_view rest(reinterpret_cast<const char*>(data) + 4, size - 4);
  index_len = static_cast<uint32_t>(std::min<size_t>(index_len, rest.size()));
  const std::string prefix = tfckpt::fuzz::ScratchDir() + "/b";
  tfckpt::fuzz::WriteFile(prefix + ".index", rest.substr(0, index_len));
  tfckpt::fuzz::WriteFile(prefix + ".data-00000-of-00001", rest.substr(index_len));

  std::vector<tfckpt::Finding> findings;
  auto tolerant = tfckpt::OpenResolved({.format = tfckpt::Format::kV2, .prefix = prefix}, &findings);
  auto c = tfckpt::OpenResolved({.format = tfckpt::Format::kV2, .prefix = prefix});
  if (!c.ok()) return 0;
  tfckpt::ValidateOptions vo;
  vo.jobs = 1;
  (void)tfckpt::Validate(prefix, vo);
  auto g = tfckpt::LoadObjectGraph(**c);
  if (g.ok() && g->has_value()) (void)tfckpt::FormatObjectTree(**c, **g);
  int budget = 16;  // values of the first tensors only: enough to reach every decoder
  for (const auto& t : (*c)->tensors()) {
    if (--budget < 0) break;
    std::vector<tfckpt::Finding> layout;
    tfckpt::CheckSliceLayout(t, prefix, &layout);
    tfckpt::PrintOptions po;
    (void)tfckpt::FormatValues(**c, t, po);
    (void)tfckpt::ComputeStats(**c, t);
  }
  return 0;
}
