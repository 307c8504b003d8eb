#include "base/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

#include "base/vector_state.h"

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
  ClearUpperVectorState();
  return ~reg;
}

namespace {

// Polynomials over GF(2) modulo the CRC-32C polynomial, in the reflected bit order the
// CRC register uses: bit 31 is x^0, bit 0 is x^31.
constexpr uint32_t kReflectedPoly = 0x82F63B78u;
constexpr uint32_t kOne = 1u << 31;  // the polynomial 1

// a * b modulo the polynomial.
uint32_t MultiplyModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = kOne; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kReflectedPoly : b >> 1;  // b *= x
  }
  return product;
}

// x^(2^k) modulo the polynomial, k = 0..63.
struct PowersOfX {
  uint32_t p[64];
  PowersOfX() {
    p[0] = kOne >> 1;  // x^1
    for (int k = 1; k < 64; ++k) p[k] = MultiplyModP(p[k - 1], p[k - 1]);
  }
};

// x^(8 n) modulo the polynomial: the factor that moves a register past n zero bytes.
uint32_t XPowBytes(uint64_t n) {
  static const PowersOfX powers;
  uint32_t result = kOne;
  for (int k = 3; n != 0 && k < 64; n >>= 1, ++k) {
    if (n & 1) result = MultiplyModP(powers.p[k], result);
  }
  return result;
}

}  // namespace

uint32_t Concat(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  // Pre- and post-inversion cancel out: Value(A B) = Value(A) * x^(8 len_b) + Value(B).
  return MultiplyModP(XPowBytes(len_b), crc_a) ^ crc_b;
}

}  // namespace tfckpt::crc32c
