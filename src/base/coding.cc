#include "base/coding.h"

#include <bit>

static_assert(std::endian::native == std::endian::little, "tfckpt assumes a little-endian host");

namespace tfckpt {

void PutVarint64(std::string* dst, uint64_t v) {
  while (v >= 0x80) {
    dst->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  dst->push_back(static_cast<char>(v));
}

int VarintLength(uint64_t v) {
  int n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

bool GetVarint64(std::string_view* src, uint64_t* v) {
  uint64_t result = 0;
  for (size_t i = 0; i < 10 && i < src->size(); ++i) {
    const uint64_t byte = static_cast<unsigned char>((*src)[i]);
    if (i == 9 && byte > 1) return false;  // more than 64 bits
    result |= (byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) {
      *v = result;
      src->remove_prefix(i + 1);
      return true;
    }
  }
  return false;
}

bool GetVarint32(std::string_view* src, uint32_t* v) {
  uint32_t result = 0;
  for (size_t i = 0; i < 5 && i < src->size(); ++i) {
    const uint32_t byte = static_cast<unsigned char>((*src)[i]);
    if (i == 4 && byte > 0x0f) return false;
    result |= (byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) {
      *v = result;
      src->remove_prefix(i + 1);
      return true;
    }
  }
  return false;
}

}  // namespace tfckpt
