// float32 <-> bfloat16 / float16 with round-to-nearest-even (see the header).
#include "base/float_convert.h"

#include <cstring>

namespace tfckpt {

namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
inline T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
inline void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace

uint16_t FloatToBFloat16(float f) {
  const uint32_t u = Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; Inf and the
  // largest values carry into the exponent correctly.
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t x = u & 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // NaN
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (and Inf): Inf
  if (x < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal in units of 2^-24.
    if (x <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (the tie goes to even 0)
    const uint32_t e = x >> 23;
    const uint32_t m = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 .. 24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t h = ((x >> 23) - 112) << 10 | ((x & 0x7fffffu) >> 13);
  const uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float BFloat16ToFloat(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return FromBits(Bits(v) | sign);
  }
  if (e == 31) return FromBits(sign | 0x7f800000u | (m << 13));
  return FromBits(sign | ((e + 112) << 23) | (m << 13));
}

void FloatsToBFloat16(const char* in, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) Store<uint16_t>(out + 2 * i, FloatToBFloat16(Load<float>(in + 4 * i)));
}

void FloatsToHalf(const char* in, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) Store<uint16_t>(out + 2 * i, FloatToHalf(Load<float>(in + 4 * i)));
}

void BFloat16sToFloat(const char* in, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) Store<float>(out + 4 * i, BFloat16ToFloat(Load<uint16_t>(in + 2 * i)));
}

void HalvesToFloat(const char* in, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) Store<float>(out + 4 * i, HalfToFloat(Load<uint16_t>(in + 2 * i)));
}

void DoublesToFloat(const char* in, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) Store<float>(out + 4 * i, static_cast<float>(Load<double>(in + 8 * i)));
}

void FloatsToDouble(const char* in, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) Store<double>(out + 8 * i, static_cast<double>(Load<float>(in + 4 * i)));
}

namespace {
constexpr int32_t kF32 = 1, kF64 = 2, kBF16 = 14, kF16 = 19;  // dtype.h
}  // namespace

bool CastSupported(int32_t from, int32_t to) {
  if (from == kF32) return to == kBF16 || to == kF16 || to == kF64;
  return to == kF32 && (from == kBF16 || from == kF16 || from == kF64);
}

void CastElements(int32_t from, int32_t to, const char* in, size_t n, char* out) {
  if (from == kF32 && to == kBF16) return FloatsToBFloat16(in, n, out);
  if (from == kF32 && to == kF16) return FloatsToHalf(in, n, out);
  if (from == kF32 && to == kF64) return FloatsToDouble(in, n, out);
  if (from == kBF16) return BFloat16sToFloat(in, n, out);
  if (from == kF16) return HalvesToFloat(in, n, out);
  return DoublesToFloat(in, n, out);
}

}  // namespace tfckpt
