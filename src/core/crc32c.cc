#include "core/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace tfckpt::crc32c {

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
  // ISA-L's crc32_iscsi works on the pre/post-inverted register and takes an int length.
  uint32_t reg = ~crc;
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  constexpr size_t kChunk = size_t{1} << 30;
  while (n > 0) {
    size_t len = n < kChunk ? n : kChunk;
    reg = crc32_iscsi(p, static_cast<int>(len), reg);
    p += len;
    n -= len;
  }
  return ~reg;
}

}  // namespace tfckpt::crc32c
