// String and variant tensor payloads (docs/FORMAT.md §c.4, §c.5): decoding and the structured
// CRC. Input: 1 byte element count (0-63) and flags, then the payload.
#include <cstddef>
#include <cstdint>

#include "model/tensor_encoding.h"
#include "tfckpt/dtype.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int64_t n = data[0] & 63;
  const bool big_endian = data[0] & 64;
  std::string_view payload(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto s = tfckpt::DecodeStrings(payload, n, big_endian);
  if (s.ok() && !big_endian) {
    // Re-encoding the decoded strings decodes to the same strings.
    std::string again;
    tfckpt::EncodeStrings(s->elements, &again);
    auto back = tfckpt::DecodeStrings(again, n);
    if (!back.ok() || back->elements != s->elements) __builtin_trap();
  }
  (void)tfckpt::DecodeVariants(payload, n);
  (void)tfckpt::PayloadCrc(7, payload, n, big_endian);    // DT_STRING
  (void)tfckpt::PayloadCrc(21, payload, n, big_endian);   // DT_VARIANT
  (void)tfckpt::PayloadCrc(1, payload, n, big_endian);    // DT_FLOAT
  return 0;
}
