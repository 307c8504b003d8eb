// CRC-32C (Castagnoli) and TensorFlow's masking (FORMAT.md §a.7), computed with ISA-L.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tfckpt::crc32c {

// CRC-32C of the concatenation of the bytes already covered by `crc` and `data[0, n)`.
// Extend(0, d, n) is the CRC of d alone. Any length is accepted.
uint32_t Extend(uint32_t crc, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(std::string_view s) { return Extend(0, s.data(), s.size()); }

inline constexpr uint32_t kMaskDelta = 0xA282EAD8u;

// The form in which TensorFlow stores CRCs: rotate right by 15, add kMaskDelta.
inline constexpr uint32_t Mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}
inline constexpr uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace tfckpt::crc32c
