// CRC-32C (Castagnoli) and TensorFlow's masking (docs/FORMAT.md §a.7), computed with ISA-L.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tfckpt::crc32c {

// CRC-32C of the concatenation of the bytes already covered by `crc` and `data[0, n)`.
// Extend(0, d, n) is the CRC of d alone. Any length is accepted.
uint32_t Extend(uint32_t crc, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

// The CRC-32C of A followed by B, from crc_a = Value(A), crc_b = Value(B) and B's length,
// without the bytes (the CRC is linear: A's register is advanced over len_b zero bits by
// multiplying with x^(8 len_b) modulo the polynomial). Hand-written: no library packaged
// for Debian 12 combines CRC-32C (ISA-L has none; zlib's crc32_combine is for the gzip
// polynomial; Abseil's ConcatCrc32c arrived after the packaged 20220623).
uint32_t Concat(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
inline uint32_t Value(std::string_view s) { return Extend(0, s.data(), s.size()); }

// The CRC of a stream that arrives in ranges (a stored piece read span by span), valid
// as long as the ranges come front to back with no gap or repeat.
struct Cursor {
  uint64_t next = 0;  // where the next range must begin
  uint32_t crc = 0;
  bool in_order = true;
  void Feed(uint64_t begin, std::string_view bytes) {
    if (!in_order || begin != next) {
      in_order = false;
      return;
    }
    crc = Extend(crc, bytes.data(), bytes.size());
    next += bytes.size();
  }
  // Whether exactly the bytes [0, size) were fed, in order.
  bool Covered(uint64_t size) const { return in_order && next == size; }
};

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
